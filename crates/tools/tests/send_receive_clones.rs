//! Send streams of files that share blocks (clones): a block two files
//! map is sent once, as data, and then as `Clone` records naming where it
//! went; every file arrives byte-identical, full and incremental, resumed
//! or not; with the engine's shared extents the received volume holds
//! about one copy.
//!
//! Two kinds of source volume: one made with `Fs::clone_range` (which
//! shares blocks once the sharing core is in; a first version copies, and
//! then no block is shared and everything is sent as data), and one whose
//! clones are made by editing the inode records of a closed volume so
//! that they map the original's blocks (what a clone is on disk), which
//! exercises the sender's references whatever `clone_range` does.
//!
//! Calls the engine's public API, `tux3_tools::stream` and the image
//! helpers of `image_util`.

mod image_util;
mod stream_util;
use stream_util::*;
use tux3::structures::extent::Extent;

const MIB: u64 = 1 << 20;
const BS: u64 = 4096;
/// Blocks of the volumes that receive (192 MiB: 21 copies of a 4 MiB file fit).
const BIG: u64 = 48 << 10;

/// `n` bytes no two blocks of which are alike.
fn pattern(n: usize, seed: u64) -> Vec<u8> {
    let mut r = Rng(seed | 1);
    let mut out = Vec::with_capacity(n + 8);
    while out.len() < n {
        out.extend_from_slice(&r.next().to_le_bytes());
    }
    out.truncate(n);
    out
}

/// A volume of `blocks` 4 KiB blocks without data checksums (so the maps
/// of a few extents fit in an inode record, where they can be edited).
fn volume(blocks: u64) -> Arc<dyn Device> {
    let dev: Arc<dyn Device> = Arc::new(MemDevice::new(BS as u32, blocks));
    let opts = FormatOptions {
        data_sums: false,
        ..FormatOptions::default()
    };
    Fs::format(dev.clone(), &opts).unwrap();
    dev
}

fn used_blocks(fs: &Fs) -> u64 {
    let s = fs.statfs().unwrap();
    s.blocks - s.blocks_free
}

/// A 4 MiB file `orig`, `n` whole clones of it `c0..`, and partial clones
/// at unaligned offsets — `p1` (bytes 5000.. to 12345, not block-aligned
/// relative to each other), `p2` (block-aligned relative: whole blocks
/// may be shared), `p3` (a clone into the middle of a file of its own) —
/// all through `Fs::clone_range`.
fn cloned_with_the_api(fs: &Fs, n: usize) -> u64 {
    let data = pattern(4 * MIB as usize, 7);
    let a = file(fs, ROOT_INO, "orig", &data);
    for k in 0..n {
        let c = fs
            .create(ROOT_INO, format!("c{k}").as_bytes(), 0o644, 0, 0)
            .unwrap()
            .ino;
        assert_eq!(fs.clone_range(a, 0, c, 0, 4 * MIB).unwrap(), 4 * MIB);
    }
    let p1 = fs.create(ROOT_INO, b"p1", 0o644, 0, 0).unwrap().ino;
    fs.clone_range(a, 5000, p1, 12345, MIB).unwrap();
    let p2 = fs.create(ROOT_INO, b"p2", 0o644, 0, 0).unwrap().ino;
    fs.clone_range(a, 3 * BS + 100, p2, 7 * BS + 100, 2 * MIB)
        .unwrap();
    let p3 = file(fs, ROOT_INO, "p3", &pattern(3 * MIB as usize, 9));
    fs.clone_range(a, MIB, p3, MIB + 4096, MIB).unwrap();
    a
}

#[test]
fn clones_made_with_the_api_arrive_byte_identical() {
    let src = device(BIG);
    let fs = open(&src);
    cloned_with_the_api(&fs, 20);
    fs.snapshot_create(b"s1").unwrap();
    let (bytes, _) = stream(&src, "s1", None, None);
    let dst = device(BIG);
    let rfs = open(&dst);
    apply(&rfs, &bytes).unwrap();
    same_snapshot(&src, &dst, "s1");
}

#[test]
fn clones_made_with_the_api_are_sent_once_and_arrive_shared() {
    let src = device(BIG);
    let fs = open(&src);
    cloned_with_the_api(&fs, 20);
    fs.snapshot_create(b"s1").unwrap();
    let (bytes, sent) = stream(&src, "s1", None, None);
    // One copy of orig, p3's own 3 MiB, the unaligned clone p1 (1 MiB,
    // copied), and the edges of p2.
    let data = (4 + 3 + 1) * MIB + 2 * BS;
    assert!(
        (bytes.len() as u64) < data + data / 100 + (64 << 10),
        "{} bytes sent for {data} of data: {sent:?}",
        bytes.len()
    );
    let dst = device(BIG);
    let rfs = open(&dst);
    let before = used_blocks(&rfs);
    apply(&rfs, &bytes).unwrap();
    same_snapshot(&src, &dst, "s1");
    let used = used_blocks(&rfs) - before;
    assert!(
        used * BS < data + data / 100 + MIB,
        "received volume uses {used} blocks"
    );
}

/// Make `dst` (a closed volume's file) map `extents` — other files'
/// blocks — and have size `size`, by editing its record in place.
fn share(dev: &Arc<dyn Device>, dst: u64, extents: Vec<Extent>, size: u64) {
    assert!(extents.len() <= 4, "{extents:?}");
    image_util::edit_inode(dev, dst, |a| {
        a.inline = extents;
        a.size = size;
    });
}

/// `extents` (sorted) from logical block `from`, `count` blocks of them,
/// moved to start at logical block `to`.
fn slice(extents: &[Extent], from: u64, count: u64, to: u64) -> Vec<Extent> {
    let mut out = Vec::new();
    for e in extents {
        let (s, end) = (e.lblock.max(from), (e.lblock + e.count).min(from + count));
        if s < end {
            let mut x = e.clone();
            x.pblock = e.pblock + (s - e.lblock);
            x.lblock = to + (s - from);
            x.count = end - s;
            out.push(x);
        }
    }
    out
}

/// Files named `names` made (empty) in the root of the volume on `dev`,
/// which is then closed; their numbers.
fn empty_files(dev: &Arc<dyn Device>, names: &[String]) -> Vec<u64> {
    let fs = open(dev);
    let out = names
        .iter()
        .map(|n| fs.create(ROOT_INO, n.as_bytes(), 0o644, 0, 0).unwrap().ino)
        .collect();
    fs.sync().unwrap();
    fs.unify().unwrap();
    fs.close().unwrap();
    out
}

/// A volume with a 4 MiB file `orig` and, sharing its blocks on disk, `n`
/// whole copies `c0..`, `part` (blocks 1..101 of orig at blocks 3..103,
/// cut 777 bytes short of its last block) and `tail` (orig's last 3
/// blocks after a block of its own data); snapshot `s1`.
fn shared_on_disk(n: usize) -> (Arc<dyn Device>, u64) {
    let dev = volume(4096 * 4);
    let fs = open(&dev);
    let a = file(&fs, ROOT_INO, "orig", &pattern(4 * MIB as usize, 7));
    let t = file(&fs, ROOT_INO, "tail", &pattern(BS as usize, 3));
    fs.sync().unwrap();
    fs.unify().unwrap();
    fs.close().unwrap();
    let ext = image_util::extents_of(&dev, a);
    let names: Vec<String> = (0..n).map(|k| format!("c{k}")).chain(["part".into()]).collect();
    let inos = empty_files(&dev, &names);
    for &c in &inos[..n] {
        share(&dev, c, ext.clone(), 4 * MIB);
    }
    share(&dev, inos[n], slice(&ext, 1, 100, 3), 103 * BS - 777);
    let own = image_util::extents_of(&dev, t);
    let mut tail = own.clone();
    tail.extend(slice(&ext, 1021, 3, 1));
    share(&dev, t, tail, 4 * BS);
    let fs = open(&dev);
    fs.snapshot_create(b"s1").unwrap();
    fs.close().unwrap();
    (dev, a)
}

#[test]
fn shared_blocks_are_sent_once_as_data_then_as_clones() {
    let (src, _) = shared_on_disk(20);
    let (bytes, sent) = stream(&src, "s1", None, None);
    let data = 4 * MIB + BS;
    assert_eq!(sent.data_bytes, data, "{sent:?}");
    assert_eq!(
        sent.cloned_bytes,
        20 * 4 * MIB + 100 * BS - 777 + 3 * BS,
        "{sent:?}"
    );
    assert!(
        (bytes.len() as u64) < data + data / 100 + (64 << 10),
        "{} bytes sent for {data} of data",
        bytes.len()
    );
    let dst = device(BIG);
    let rfs = open(&dst);
    apply(&rfs, &bytes).unwrap();
    same_snapshot(&src, &dst, "s1");
    // With no room for references: all data, the same tree.
    let opts = SendOptions {
        snapshot: Some(b"s1"),
        clone_map_entries: Some(0),
        ..SendOptions::default()
    };
    let mut all = Vec::new();
    let sent = send(src.clone(), &opts, &mut all, &mut |_| {}).unwrap();
    assert_eq!(sent.cloned_bytes, 0);
    assert!(all.len() as u64 > 21 * 4 * MIB);
    let dst = device(BIG);
    apply(&open(&dst), &all).unwrap();
    same_snapshot(&src, &dst, "s1");
}

#[test]
fn shared_blocks_arrive_shared() {
    let (src, _) = shared_on_disk(20);
    let (bytes, _) = stream(&src, "s1", None, None);
    let dst = device(BIG);
    let rfs = open(&dst);
    let before = used_blocks(&rfs);
    apply(&rfs, &bytes).unwrap();
    same_snapshot(&src, &dst, "s1");
    let used = used_blocks(&rfs) - before;
    assert!(
        used * BS < 4 * MIB * 101 / 100 + MIB,
        "received volume uses {used} blocks"
    );
}

#[test]
fn clones_of_a_base_file_arrive_in_an_incremental_stream() {
    // Through the API: s2 adds clones of orig, a file of s1, and clones
    // into a file of s1.
    let src = device(BIG);
    let fs = open(&src);
    let data = pattern(4 * MIB as usize, 7);
    let a = file(&fs, ROOT_INO, "orig", &data);
    let old = file(&fs, ROOT_INO, "old", &pattern(MIB as usize, 5));
    fs.snapshot_create(b"s1").unwrap();
    for k in 0..5 {
        let c = fs
            .create(ROOT_INO, format!("c{k}").as_bytes(), 0o644, 0, 0)
            .unwrap()
            .ino;
        fs.clone_range(a, 0, c, 0, 4 * MIB).unwrap();
    }
    fs.clone_range(a, 2 * MIB + 10, old, 100, 300_000).unwrap();
    fs.clone_range(a, 0, old, MIB - BS, 2 * MIB).unwrap();
    fs.snapshot_create(b"s2").unwrap();
    let dst = device(BIG);
    let rfs = open(&dst);
    apply(&rfs, &stream(&src, "s1", None, None).0).unwrap();
    apply(&rfs, &stream(&src, "s2", Some("s1"), None).0).unwrap();
    same_snapshot(&src, &dst, "s1");
    same_snapshot(&src, &dst, "s2");
}

#[test]
fn blocks_shared_with_a_base_file_are_sent_once_in_an_incremental_stream() {
    let (src, a) = shared_on_disk(2);
    // s2: five more files sharing orig's blocks (orig itself unchanged:
    // the first is sent as data, the others as references to it).
    let names: Vec<String> = (0..5).map(|k| format!("n{k}")).collect();
    let inos = empty_files(&src, &names);
    let ext = image_util::extents_of(&src, a);
    for &c in &inos {
        share(&src, c, ext.clone(), 4 * MIB);
    }
    let fs = open(&src);
    fs.snapshot_create(b"s2").unwrap();
    fs.close().unwrap();
    let (incr, sent) = stream(&src, "s2", Some("s1"), None);
    assert_eq!(sent.data_bytes, 4 * MIB, "{sent:?}");
    assert_eq!(sent.cloned_bytes, 4 * 4 * MIB, "{sent:?}");
    assert!((incr.len() as u64) < 4 * MIB + (64 << 10));
    let dst = device(BIG);
    let rfs = open(&dst);
    apply(&rfs, &stream(&src, "s1", None, None).0).unwrap();
    apply(&rfs, &incr).unwrap();
    same_snapshot(&src, &dst, "s1");
    same_snapshot(&src, &dst, "s2");
}

#[test]
fn a_stream_with_clones_cut_anywhere_resumes_to_the_same_tree() {
    let (src, _) = shared_on_disk(6);
    let whole = stream(&src, "s1", None, None).0;
    let opts = ReceiveOptions {
        checkpoint_bytes: 1 << 40,
        checkpoint_records: 3,
        ..ReceiveOptions::default()
    };
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    // Cuts among the last records (the clones) and anywhere.
    let tail = 2048u64.min(whole.len() as u64);
    for round in 0..12 {
        let cut = if round % 2 == 0 {
            whole.len() - 1 - rng.below(tail) as usize
        } else {
            rng.below(whole.len() as u64) as usize
        };
        let dst = device(BIG);
        let rfs = open(&dst);
        apply_with(&rfs, &whole[..cut], &opts).unwrap_err();
        let rfs = if round % 3 == 0 {
            drop(rfs);
            open(&dst)
        } else {
            rfs
        };
        match resume::stored(&rfs).unwrap() {
            Some(token) => {
                let (rest, _) = stream(&src, "s1", None, Some(token));
                apply_with(&rfs, &rest, &opts).unwrap();
            }
            None => apply(&rfs, &whole).unwrap(),
        }
        rfs.close().unwrap();
        same_snapshot(&src, &dst, "s1");
    }
}

#[test]
fn snapshot_diff_names_a_clone_made_after_the_base_as_new() {
    let src = device(BIG);
    let fs = open(&src);
    let a = file(&fs, ROOT_INO, "orig", &pattern(MIB as usize, 7));
    let old = file(&fs, ROOT_INO, "old", &pattern(MIB as usize, 5));
    file(&fs, ROOT_INO, "same", b"untouched");
    fs.snapshot_create(b"s1").unwrap();
    let c = fs.create(ROOT_INO, b"clone", 0o644, 0, 0).unwrap().ino;
    fs.clone_range(a, 0, c, 0, MIB).unwrap();
    fs.clone_range(a, 0, old, 2 * BS, 10 * BS).unwrap();
    fs.snapshot_create(b"s2").unwrap();
    fs.close().unwrap();
    let lines: Vec<String> = tux3_tools::snapdiff::diff(src.clone(), b"s1", b"s2")
        .unwrap()
        .iter()
        .map(|c| format!("{} {}", c.kind.code(), String::from_utf8_lossy(&c.path)))
        .collect();
    assert!(lines.contains(&"+ /clone".to_string()), "{lines:?}");
    assert!(lines.contains(&"M /old".to_string()), "{lines:?}");
    assert!(
        !lines.iter().any(|l| l.contains("orig") || l.contains("same")),
        "{lines:?}"
    );
}

#[test]
fn snapshot_diff_names_a_file_sharing_blocks_made_after_the_base_as_new() {
    let (src, a) = shared_on_disk(1);
    let inos = empty_files(&src, &["late".to_string()]);
    share(&src, inos[0], image_util::extents_of(&src, a), 4 * MIB);
    let fs = open(&src);
    fs.snapshot_create(b"s2").unwrap();
    fs.close().unwrap();
    let lines: Vec<String> = tux3_tools::snapdiff::diff(src.clone(), b"s1", b"s2")
        .unwrap()
        .iter()
        .map(|c| format!("{} {}", c.kind.code(), String::from_utf8_lossy(&c.path)))
        .collect();
    // (The root changed: it has a new entry.)
    assert_eq!(lines, vec!["M /".to_string(), "+ /late".to_string()]);
}
