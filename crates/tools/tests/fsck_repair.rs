//! `fsck --repair` of damage inside the trees and the superblock in use,
//! each in one run that leaves a clean volume: a directory entry whose
//! name no longer hashes to its position, whose type code is unknown or
//! whose value length runs past its leaf (the directory rebuilt from what
//! can be read of it), an entry naming an inode out of range (the entry
//! dropped, the inode named in /lost+found), an inode-table leaf that does
//! not decode (replaced by the records it still holds), and the newer
//! superblock copy damaged so that the volume does not mount from the
//! older one (patched from the older copy), and a log record that fails
//! validation at replay (the log replayed without it), a tree node whose
//! header or branch entry is damaged (mended in place), and an extent past
//! the end of its file (taken out). Each block is
//! changed with a valid checksum, so only the decoders and the checks see
//! the damage.

mod image_util;

use std::sync::Arc;
use tux3::codec::reseal;
use tux3::device::{Device, MemDevice};
use tux3::log::Record;
use tux3::structures::superblock::Superblock;
use tux3::{FormatOptions, Fs, Ino, OpenOptions, ROOT_INO};
use tux3_tools::fsck::{check, metadata_blocks, FsckOptions, FsckReport};

const FILES: usize = 10;

/// A volume with directory /d holding f0..f9, each with a little data,
/// unified and closed.
fn volume() -> Arc<dyn Device> {
    volume_with(FILES)
}

/// [`volume`] with `files` files.
fn volume_with(files: usize) -> Arc<dyn Device> {
    let dev: Arc<dyn Device> = Arc::new(MemDevice::new(4096, 4096));
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap().ino;
    for i in 0..files {
        let f = fs.create(d, format!("f{i}").as_bytes(), 0o644, 0, 0).unwrap().ino;
        fs.write(f, 0, format!("data of f{i}").as_bytes()).unwrap();
    }
    // Every tree unified: no leaf the log has replaced since.
    fs.unify().unwrap();
    fs.close().unwrap();
    dev
}

fn fsck(dev: &Arc<dyn Device>, repair: bool) -> FsckReport {
    let opts = FsckOptions {
        repair,
        progress: false,
        data: true,
    };
    check(dev.clone(), &opts).unwrap()
}

/// The live leaf of the tree owned by `owner` of kind `kind` that holds
/// the lowest key.
fn leaf_of(dev: &Arc<dyn Device>, owner: u64, kind: u8) -> u64 {
    leaves_of(dev, owner, kind)[0]
}

/// The live leaves of the tree owned by `owner` of kind `kind`, by their
/// first key.
fn leaves_of(dev: &Arc<dyn Device>, owner: u64, kind: u8) -> Vec<u64> {
    let mut buf = vec![0u8; 4096];
    let mut out: Vec<(u64, u64)> = metadata_blocks(dev.clone())
        .unwrap()
        .into_iter()
        .filter_map(|b| {
            dev.read(b, &mut buf).unwrap();
            let ours = &buf[..4] == b"T3LF" && buf[16..24] == owner.to_le_bytes() && buf[24] == kind;
            ours.then(|| (u64::from_le_bytes(buf[32..40].try_into().unwrap()), b))
        })
        .collect();
    out.sort();
    assert!(!out.is_empty(), "the tree has a leaf block");
    out.into_iter().map(|(_, b)| b).collect()
}

/// Change block `b` with `f` and give it a valid checksum.
fn damage(dev: &Arc<dyn Device>, b: u64, f: impl FnOnce(&mut [u8])) {
    let mut buf = vec![0u8; 4096];
    dev.read(b, &mut buf).unwrap();
    f(&mut buf);
    reseal(&mut buf);
    dev.write(b, &buf).unwrap();
}

/// A problem line holding every one of `found` before the repair, a
/// repaired line holding every one of `repaired`, the next check clean
/// and every file of /d there.
fn found_and_repaired_keeping_all(dev: &Arc<dyn Device>, found: &[&str], repaired: &[&str]) {
    let first = fsck(dev, false);
    assert!(image_util::has(&first.problems, found), "{:?}", first.problems);
    let r = repaired_in_one_pass(dev);
    assert!(image_util::has(&r.repaired, repaired), "{:?}", r.repaired);
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    assert_eq!(listing(&fs, dir_d(&fs)).len(), FILES);
    fs.close().unwrap();
}

/// Damage found, repaired in one run, and the next check clean.
fn repaired_in_one_pass(dev: &Arc<dyn Device>) -> FsckReport {
    let first = fsck(dev, false);
    assert!(!first.problems.is_empty(), "the damage is found");
    let r = fsck(dev, true);
    assert!(r.problems.is_empty(), "left after the repair: {:?}", r.problems);
    assert!(!r.repaired.is_empty());
    let again = fsck(dev, false);
    assert!(
        again.problems.is_empty() && again.repaired.is_empty(),
        "second check: {:?}",
        again.problems
    );
    r
}

/// The names in directory `dir` and the data of each file.
fn listing(fs: &Fs, dir: Ino) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out: Vec<(Vec<u8>, Vec<u8>)> = fs
        .readdir(dir, 0, 1000)
        .unwrap()
        .into_iter()
        .filter(|e| e.name != b"." && e.name != b"..")
        .map(|e| (e.name.clone(), fs.read(e.ino, 0, 100).unwrap()))
        .collect();
    out.sort();
    out
}

fn dir_d(fs: &Fs) -> Ino {
    fs.lookup(ROOT_INO, b"d").unwrap().ino
}

/// Offset of the first entry's value in a leaf: header 32, key 8, length 2.
const VALUE: usize = 42;

#[test]
fn a_name_that_does_not_hash_to_its_position_is_kept_under_its_name() {
    let dev = volume();
    let d = Fs::open(dev.clone(), OpenOptions::default())
        .map(|fs| dir_d(&fs))
        .unwrap();
    let leaf = leaf_of(&dev, d, 3);
    damage(&dev, leaf, |b| b[VALUE + 9] ^= 0x01); // first name byte: 'f' -> 'g'
    repaired_in_one_pass(&dev);
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    let l = listing(&fs, dir_d(&fs));
    assert_eq!(l.len(), FILES, "every file keeps a name: {l:?}");
    assert_eq!(l.iter().filter(|(n, _)| n[0] == b'g').count(), 1);
    fs.close().unwrap();
}

#[test]
fn an_unknown_entry_type_takes_the_type_of_its_inode() {
    let dev = volume();
    let d = Fs::open(dev.clone(), OpenOptions::default())
        .map(|fs| dir_d(&fs))
        .unwrap();
    let leaf = leaf_of(&dev, d, 3);
    damage(&dev, leaf, |b| b[VALUE + 8] = 0x63);
    repaired_in_one_pass(&dev);
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    let l = listing(&fs, dir_d(&fs));
    let want: Vec<(Vec<u8>, Vec<u8>)> = (0..FILES)
        .map(|i| (format!("f{i}").into_bytes(), format!("data of f{i}").into_bytes()))
        .collect();
    let mut want = want;
    want.sort();
    assert_eq!(l, want);
    fs.close().unwrap();
}

#[test]
fn a_directory_leaf_whose_value_length_runs_past_it_is_read_again_and_rebuilt() {
    let dev = volume();
    let d = Fs::open(dev.clone(), OpenOptions::default())
        .map(|fs| dir_d(&fs))
        .unwrap();
    let leaf = leaf_of(&dev, d, 3);
    damage(&dev, leaf, |b| {
        b[40..42].copy_from_slice(&0xfff0u16.to_le_bytes())
    });
    repaired_in_one_pass(&dev);
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    assert_eq!(listing(&fs, dir_d(&fs)).len(), FILES, "no entry is lost");
    fs.close().unwrap();
}

#[test]
fn an_entry_naming_an_inode_out_of_range_goes_and_its_file_is_named_in_lost_found() {
    let dev = volume();
    let (d, victim) = {
        let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
        let d = dir_d(&fs);
        let first = fs.readdir(d, 0, 1000).unwrap();
        let e = first
            .iter()
            .find(|e| e.name != b"." && e.name != b"..")
            .unwrap()
            .clone();
        fs.close().unwrap();
        (d, e)
    };
    let leaf = leaf_of(&dev, d, 3);
    damage(&dev, leaf, |b| {
        b[VALUE..VALUE + 8].copy_from_slice(&0u64.to_le_bytes())
    });
    repaired_in_one_pass(&dev);
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    assert_eq!(listing(&fs, dir_d(&fs)).len(), FILES - 1);
    let lf = fs.lookup(ROOT_INO, b"lost+found").unwrap().ino;
    let found = fs.lookup(lf, format!("#{}", victim.ino).as_bytes()).unwrap();
    assert_eq!(found.ino, victim.ino);
    assert_eq!(found.nlink, 1);
    let name = String::from_utf8(victim.name.clone()).unwrap();
    assert_eq!(
        fs.read(found.ino, 0, 100).unwrap(),
        format!("data of {name}").into_bytes()
    );
    fs.close().unwrap();
}

#[test]
fn an_inode_table_leaf_that_does_not_decode_is_replaced_by_its_records() {
    // Enough files for an inode table of several leaves: one in the
    // middle is damaged (a mount reads the first, with the root, and the
    // last, to find the next free number).
    let dev = volume_with(150);
    let leaves = leaves_of(&dev, 0, 1);
    assert!(leaves.len() > 2, "the inode table has several leaves");
    // The first record's length: every entry after it misparses.
    damage(&dev, leaves[1], |b| {
        b[40..42].copy_from_slice(&0u16.to_le_bytes())
    });
    repaired_in_one_pass(&dev);
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    assert_eq!(listing(&fs, dir_d(&fs)).len(), 150, "every record is kept");
    fs.close().unwrap();
}

#[test]
fn the_first_and_the_last_inode_table_leaf_are_replaced_too() {
    // The first holds the root, the last the table's end: a mount for the
    // repair reads past them.
    for which in [0, 2] {
        let dev = volume_with(150);
        let leaves = leaves_of(&dev, 0, 1);
        assert!(leaves.len() > 2, "the inode table has several leaves");
        let leaf = leaves[which.min(leaves.len() - 1)];
        // The second record's key, below the first's.
        damage(&dev, leaf, |b| {
            let len = u16::from_le_bytes([b[40], b[41]]) as usize;
            b[42 + len..50 + len].copy_from_slice(&1u64.to_le_bytes());
        });
        repaired_in_one_pass(&dev);
        let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
        assert!(fs.getattr(ROOT_INO).is_ok());
        fs.close().unwrap();
    }
}

/// The inode table's branch (a volume with enough files to have one).
fn itable_branch(dev: &Arc<dyn Device>) -> u64 {
    let mut buf = vec![0u8; 4096];
    metadata_blocks(dev.clone())
        .unwrap()
        .into_iter()
        .find(|&b| {
            dev.read(b, &mut buf).unwrap();
            &buf[..4] == b"T3BR" && buf[16..24] == 0u64.to_le_bytes() && buf[24] == 1
        })
        .expect("the inode table has a branch")
}

#[test]
fn a_damaged_separator_of_the_inode_table_is_set_from_its_leaf() {
    let dev = volume_with(150);
    let root = itable_branch(&dev);
    // The second child's separator, one above: its first key routes to
    // the first leaf.
    damage(&dev, root, |b| {
        let sep = u64::from_le_bytes(b[48..56].try_into().unwrap());
        b[48..56].copy_from_slice(&(sep + 1).to_le_bytes());
    });
    repaired_in_one_pass(&dev);
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    assert_eq!(listing(&fs, dir_d(&fs)).len(), 150);
    fs.close().unwrap();
}

#[test]
fn a_damaged_newer_superblock_copy_is_patched_from_the_older() {
    let dev = volume();
    let mut bufs = [vec![0u8; 4096], vec![0u8; 4096]];
    for (k, b) in bufs.iter_mut().enumerate() {
        dev.read(k as u64, b).unwrap();
    }
    let seq = |k: usize| Superblock::decode(&bufs[k], k as u64).unwrap().seq;
    let newer = if seq(0) > seq(1) { 0 } else { 1 };
    let b = &mut bufs[newer];
    b[16..20].copy_from_slice(&0u32.to_le_bytes()); // block size
    b[8..12].fill(0);
    let crc = crc32c::crc32c(b);
    b[8..12].copy_from_slice(&crc.to_le_bytes());
    dev.write(newer as u64, b).unwrap();
    let r = repaired_in_one_pass(&dev);
    assert!(
        r.repaired.iter().any(|l| l.contains("superblock copy")),
        "{:?}",
        r.repaired
    );
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    assert_eq!(listing(&fs, dir_d(&fs)).len(), FILES);
    fs.close().unwrap();
}

/// A log of two commits after the unify, the last one's records `last`
/// and the first one's `first`: found, the repair replays the log without
/// the bad record, the next check is clean and every file is there.
fn bad_record_is_passed_over(first: Vec<Record>, last: Vec<Record>, what: &str) {
    let dev = volume();
    image_util::append_commits(&dev, vec![first, last]);
    let found = fsck(&dev, false);
    assert!(
        found
            .problems
            .iter()
            .any(|l| l.contains(what) && l.contains("replays the log without")),
        "{:?}",
        found.problems
    );
    let r = repaired_in_one_pass(&dev);
    assert!(r.repaired.iter().any(|l| l.contains(what)), "{:?}", r.repaired);
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    assert_eq!(listing(&fs, dir_d(&fs)).len(), FILES);
    fs.close().unwrap();
}

#[test]
fn a_log_block_checksum_outside_the_volume_is_passed_over() {
    let sum = Record::BlockSum {
        start: 4096 + 7,
        count: 1,
        crc: 0,
    };
    bad_record_is_passed_over(
        Vec::new(),
        vec![sum],
        "block checksum for 4103+1 outside the volume",
    );
}

#[test]
fn a_dead_extent_born_after_its_death_is_passed_over() {
    let dead = Record::Dead {
        start: 3000,
        count: 2,
        birth: 1 << 30,
    };
    bad_record_is_passed_over(vec![dead], Vec::new(), "dead 3000+2 born 1073741824");
}

#[test]
fn a_reclaim_of_no_dead_extent_is_passed_over() {
    let reclaim = Record::Reclaim {
        start: 3000,
        count: 2,
    };
    bad_record_is_passed_over(vec![reclaim], Vec::new(), "reclaim 3000+2: no such dead extent");
}

/// A volume of 150 files in /d, with one more created in a delta the
/// log holds if `logged`, its inode table's branch changed by `change`:
/// the check names the branch (the volume does not mount if `logged`), one
/// repair run says it mended the node (`how`) and the next check is clean.
/// Returns the files /d holds after the repair.
fn mended_branch(logged: bool, how: &str, change: impl FnOnce(&mut [u8])) -> usize {
    let dev = volume_with(150);
    let root = itable_branch(&dev);
    if logged {
        let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
        fs.create(dir_d(&fs), b"new", 0o644, 0, 0).unwrap();
        fs.close().unwrap();
    }
    damage(&dev, root, change);
    let found = fsck(&dev, false);
    let named = found
        .problems
        .iter()
        .any(|l| l.starts_with(&format!("block {root}:")) && (!logged || l.contains("cannot be mounted")));
    assert!(named, "{how}: {:?}", found.problems);
    let r = repaired_in_one_pass(&dev);
    assert!(
        r.repaired
            .iter()
            .any(|l| l.contains("mended the node") && l.contains(how)),
        "{how}: {:?}",
        r.repaired
    );
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    let files = listing(&fs, dir_d(&fs)).len();
    fs.close().unwrap();
    files
}

/// The inode table's branch with one header field changed (owner, tree
/// kind, level, entry count one above), on a unified volume (the check
/// names the node) and with a delta in the log since (its leaf map goes
/// through the branch: the volume does not mount; the level only here).
/// The repair mends the header from what the superblock expects and the
/// entries the node holds, and every file is there.
#[test]
fn a_damaged_node_header_is_mended() {
    type Change = fn(&mut [u8]);
    let changes: [(&str, Change); 4] = [
        ("owner 9 set to 0", |b| {
            b[16..24].copy_from_slice(&9u64.to_le_bytes())
        }),
        ("tree kind 3 set to 1", |b| b[24] = 3),
        ("level 4 set to 1", |b| b[25] = 4),
        ("entry count", |b| {
            let n = u16::from_le_bytes([b[26], b[27]]) + 1;
            b[26..28].copy_from_slice(&n.to_le_bytes());
        }),
    ];
    for logged in [false, true] {
        for (how, change) in changes {
            // The check's line alone cannot tell a damaged level from a
            // damaged depth above it (a snapshot's record): left to the
            // mount's error, which comes from the superblock's depth.
            if !logged && how.starts_with("level") {
                continue;
            }
            let files = if logged { 151 } else { 150 };
            assert_eq!(mended_branch(logged, how, change), files, "{how}");
        }
    }
}

/// The inode table's branch with a child address outside the volume, or
/// a separator out of order, with a delta in the log since (the volume
/// does not mount): the repair mends the branch — the separator from its
/// leaf's first key, the leftmost to 0 (every file kept), the child taken
/// out (the files its leaf held go; their entries with them) — and the
/// next check is clean.
#[test]
fn a_damaged_inode_table_branch_entry_is_mended() {
    let set = |b: &mut [u8], at: usize| b[at..at + 8].copy_from_slice(&u64::MAX.to_le_bytes());
    assert_eq!(mended_branch(true, "separator 1", |b| set(b, 48)), 151);
    assert_eq!(mended_branch(true, "separator 0", |b| set(b, 32)), 151);
    let files = mended_branch(true, "child 1 at", |b| set(b, 56));
    assert!(files > 0 && files < 151, "{files} files");
}

/// An extent held in a file's record moved past the end of the file: the
/// repair takes it out of the map (its block comes free as a leak), the
/// file keeps its size and reads as a hole, the other files are whole.
#[test]
fn an_extent_past_the_end_of_its_file_is_taken_out() {
    let dev = volume();
    let f0 = {
        let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
        let ino = fs.lookup(dir_d(&fs), b"f0").unwrap().ino;
        fs.close().unwrap();
        ino
    };
    image_util::edit_inode(&dev, f0, |a| a.inline[0].lblock = 5);
    let found = fsck(&dev, false);
    assert!(
        image_util::has(
            &found.problems,
            &[&format!("inode {f0}"), "starts at or beyond the end"]
        ),
        "{:?}",
        found.problems
    );
    repaired_in_one_pass(&dev);
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    let files = listing(&fs, dir_d(&fs));
    assert_eq!(files.len(), FILES);
    let data = |name: &[u8]| files.iter().find(|f| f.0 == name).unwrap().1.clone();
    assert_eq!(data(b"f0"), vec![0u8; b"data of f0".len()]);
    assert_eq!(data(b"f1"), b"data of f1".to_vec());
    fs.close().unwrap();
}

/// A bitmap block whose index is wrong: the volume does not mount; the
/// repair sets the index the bitmap file expects there, and every file
/// is there.
#[test]
fn a_bitmap_block_with_a_wrong_index_is_mended() {
    let dev = volume();
    let mut buf = vec![0u8; 4096];
    let bitmap = metadata_blocks(dev.clone())
        .unwrap()
        .into_iter()
        .find(|&b| {
            dev.read(b, &mut buf).unwrap();
            &buf[..4] == b"T3BM"
        })
        .expect("a bitmap block");
    damage(&dev, bitmap, |b| b[16..24].copy_from_slice(&7u64.to_le_bytes()));
    found_and_repaired_keeping_all(
        &dev,
        &["cannot be mounted", "bitmap block: index 7, expected 0"],
        &["index 7 set to 0"],
    );
}

/// The root's record with one attribute's tag unknown (its times, tag 3,
/// FORMAT.md): the root cannot be taken out; the repair gives the
/// attribute back the only tag the record lacks for its length, keeps the
/// rest (its directory with it), and every file is there.
#[test]
fn the_roots_record_gets_back_the_tag_that_does_not_decode() {
    let dev = volume();
    image_util::edit_raw_record(&dev, ROOT_INO, |raw| {
        let mut at = 0;
        while raw[at] != 3 {
            at += 3 + u16::from_le_bytes([raw[at + 1], raw[at + 2]]) as usize;
        }
        raw[at] = 200;
    });
    found_and_repaired_keeping_all(
        &dev,
        &["inode 1", "unknown attribute tag 200"],
        &["tag 200 back to 3"],
    );
}
