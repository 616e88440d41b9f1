//! fsck and data checksums (FORMAT.md 7.2, 7.6): on a `DATA_SUMS` volume
//! an extent without checksums (in a tree, or a record's map without
//! attribute 12) is named by inode, logical block and leaf and repaired
//! from the data on disk; on a volume without the flag a summed extent is
//! named; a snapshot's unsummed extent is named and never changed; with
//! `data` every block is read once and a damaged one is named by every
//! path of its file, inode, offset, block and both checksums, and a repair
//! records it as known damage (the data left as it is, reads still
//! failing) so that later checks name it in a note; the repairs that
//! rewrite a record keep its sums.
//!
//! Calls the engine's public API and `tux3_tools::fsck` (through
//! `image_util`).

mod image_util;

use image_util::*;
use std::sync::Arc;
use tux3::device::Device;
use tux3::structures::extent::{self, block_sum};
use tux3::{Error, Fs, OpenOptions, ROOT_INO};

/// `/d/f` (3 blocks: its record holds its map) also named `/g`, and `/big`
/// (12 one-block extents: a tree), unified and closed.
struct Vol {
    dev: Arc<dyn Device>,
    small: u64,
    big: u64,
}

fn volume(data_sums: bool) -> Vol {
    let dev = fresh(2048, data_sums);
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap().ino;
    let small = fs.create(d, b"f", 0o644, 0, 0).unwrap().ino;
    fs.write(small, 0, &pattern(1, 3 * 4096)).unwrap();
    fs.link(small, ROOT_INO, b"g").unwrap();
    let big = fs.create(ROOT_INO, b"big", 0o644, 0, 0).unwrap().ino;
    for k in 0..12u64 {
        fs.write(big, k * 8192, &pattern(k as u8 + 2, 4096)).unwrap();
    }
    fs.sync().unwrap();
    fs.unify().unwrap();
    fs.close().unwrap();
    Vol { dev, small, big }
}

fn pattern(tag: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 253) as u8 ^ tag).collect()
}

/// The checksum of device block `b` as it is now.
fn sum_of(dev: &Arc<dyn Device>, b: u64) -> u32 {
    let mut buf = vec![0u8; dev.block_size() as usize];
    dev.read(b, &mut buf).unwrap();
    block_sum(&buf)
}

/// Every extent of `ino` carries the checksums of its blocks on disk.
fn assert_summed_as_on_disk(dev: &Arc<dyn Device>, ino: u64) {
    let extents = extents_of(dev, ino);
    assert!(!extents.is_empty());
    for e in extents {
        assert_eq!(e.sums.len() as u64, e.count, "inode {ino}: {e:?}");
        for (k, s) in e.sums.iter().enumerate() {
            assert_eq!(*s, sum_of(dev, e.pblock + k as u64), "inode {ino}: {e:?}");
        }
    }
}

/// A read of `ino` fails its checksum once a block of it is damaged: the
/// sums are in force.
fn assert_reads_verify(dev: &Arc<dyn Device>, ino: u64) {
    let first = extents_of(dev, ino)[0].clone();
    damage(dev, first.pblock);
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    match fs.read(ino, 0, 4096) {
        Err(Error::BadData(bad)) => assert_eq!(bad.pblock, first.pblock),
        other => panic!("inode {ino}: a damaged block read as {other:?}"),
    }
    fs.close().unwrap();
}

#[test]
fn a_clean_volume_reads_every_block_once() {
    let v = volume(true);
    let r = fsck(&v.dev, false, true);
    assert!(r.problems.is_empty(), "{:#?}", r.problems);
    // 3 blocks of /d/f, 12 of /big; a snapshot sharing them adds none.
    assert_eq!(r.data_checked, Some(15));
    let fs = Fs::open(v.dev.clone(), OpenOptions::default()).unwrap();
    fs.snapshot_create(b"s").unwrap();
    fs.close().unwrap();
    let r = fsck(&v.dev, false, true);
    assert!(r.problems.is_empty(), "{:#?}", r.problems);
    assert_eq!(r.data_checked, Some(15));
    assert_eq!(fsck(&v.dev, false, false).data_checked, None);
}

#[test]
fn unsummed_extents_are_named_and_repaired_from_the_data() {
    let v = volume(true);
    edit_inode(&v.dev, v.small, |a| {
        a.inline.iter_mut().for_each(|e| e.sums.clear())
    });
    let (leaf, mut entries) = extent_leaf(&v.dev, v.big);
    for (lblock, val) in &mut entries {
        let e = extent::decode(*lblock, val, leaf, &tux3::structures::bounds(v.dev.as_ref())).unwrap();
        *val = extent::encode(e.pblock, e.count, e.birth);
    }
    rewrite_leaf(&v.dev, leaf, v.big, entries);
    let r = fsck(&v.dev, false, false);
    let small = format!("inode {}, its inode record: extent at logical block 0", v.small);
    let big = format!("inode {}, block {leaf}: extent at logical block 2", v.big);
    for at in [&small, &big] {
        assert!(
            has(&r.problems, &[at, "no data checksums on a volume with DATA_SUMS"]),
            "{at}: {:#?}",
            r.problems
        );
    }
    assert!(has(&r.problems, &[&small, "attribute 12 absent"]));
    let r = fsck(&v.dev, true, false);
    assert!(r.problems.is_empty(), "{:#?}", r.problems);
    assert!(
        has(&r.repaired, &[&big, "repair computes them from the data on disk"]),
        "{:#?}",
        r.repaired
    );
    assert!(fsck(&v.dev, false, true).problems.is_empty());
    for ino in [v.small, v.big] {
        assert_summed_as_on_disk(&v.dev, ino);
        assert_reads_verify(&v.dev, ino);
    }
}

#[test]
fn summed_extents_without_the_flag_are_named() {
    let v = volume(false);
    assert!(fsck(&v.dev, false, true).problems.is_empty());
    let a = record(&v.dev, v.small);
    assert!(a.inline.iter().all(|e| e.sums.is_empty()));
    let sums: Vec<u32> = (0..a.inline[0].count)
        .map(|k| sum_of(&v.dev, a.inline[0].pblock + k))
        .collect();
    edit_inode(&v.dev, v.small, |a| a.inline[0].sums = sums);
    let r = fsck(&v.dev, true, false);
    let at = format!("inode {}, its inode record: extent at logical block 0", v.small);
    assert!(
        has(
            &r.problems,
            &[&at, "data checksums on a volume without DATA_SUMS"]
        ),
        "{:#?}",
        r.problems
    );
}

#[test]
fn a_snapshots_unsummed_extent_is_named_and_kept() {
    let v = volume(true);
    edit_inode(&v.dev, v.small, |a| {
        a.inline.iter_mut().for_each(|e| e.sums.clear())
    });
    // The snapshot holds the record as damaged.
    let fs = Fs::open(v.dev.clone(), OpenOptions::default()).unwrap();
    fs.snapshot_create(b"s").unwrap();
    fs.close().unwrap();
    let r = fsck(&v.dev, true, false);
    let line = format!("snapshot s: inode {}: extent at logical block 0", v.small);
    assert!(
        has(&r.problems, &[&line, "a snapshot never changes: not repaired"]),
        "{:#?}",
        r.problems
    );
    assert_eq!(r.repaired.len(), 1, "{:#?}", r.repaired);
    assert_summed_as_on_disk(&v.dev, v.small);
}

#[test]
fn a_damaged_block_is_named_by_every_path_and_recorded_as_known_damage() {
    let v = volume(true);
    let e = record(&v.dev, v.small).inline[0].clone();
    let bad = e.pblock + 1;
    let expected = e.sums[1];
    damage(&v.dev, bad);
    let found = sum_of(&v.dev, bad);
    // Without `data` the blocks are not read.
    assert!(fsck(&v.dev, false, false).problems.is_empty());
    let want = [
        format!(
            "block {bad}: data checksum mismatch in /d/f, /g (inode {})",
            v.small
        ),
        "at offset 4096 (logical block 1)".to_string(),
        format!("expected {expected:#010x}, found {found:#010x}"),
        "repair records it as known damage".to_string(),
    ];
    let want: Vec<&str> = want.iter().map(String::as_str).collect();
    let r = fsck(&v.dev, false, true);
    assert!(has(&r.problems, &want), "{:#?}", r.problems);
    assert_eq!(r.problems.len(), 1, "{:#?}", r.problems);
    let image = |dev: &Arc<dyn Device>| {
        let mut b = vec![0u8; 4096];
        dev.read(bad, &mut b).unwrap();
        b
    };
    let before = image(&v.dev);
    // The repair records it; the data and its checksum stay as they were.
    let r = fsck(&v.dev, true, true);
    assert!(r.problems.is_empty() && has(&r.repaired, &want), "{r:#?}");
    assert_eq!(image(&v.dev), before);
    assert_eq!(record(&v.dev, v.small).inline[0].sums[1], expected);
    // Checked again: clean, the block named in a note as known damage.
    let r = fsck(&v.dev, false, true);
    assert!(r.problems.is_empty() && r.repaired.is_empty(), "{r:#?}");
    assert!(
        has(&r.notes, &[want[0], "known damage, recorded by a repair"]),
        "{:#?}",
        r.notes
    );
    let fs = Fs::open(v.dev.clone(), OpenOptions::default()).unwrap();
    let listed = fs.known_damage().unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(
        (listed[0].block, listed[0].expected, listed[0].found),
        (bad, expected, found)
    );
    // Reads of it still fail: a record never blesses damaged data.
    match fs.read(v.small, 4096, 4096) {
        Err(Error::BadData(b)) => assert_eq!(b.pblock, bad),
        other => panic!("a known damaged block read as {other:?}"),
    }
    // Rewritten, the block (new data, new checksum) is no damage; the
    // stale entry harms nothing.
    fs.write(v.small, 4096, &pattern(7, 4096)).unwrap();
    fs.close().unwrap();
    let r = fsck(&v.dev, false, true);
    assert!(r.problems.is_empty(), "{r:#?}");
    assert!(
        !r.notes.iter().any(|n| n.contains("known damage, recorded")),
        "{:#?}",
        r.notes
    );
    // New damage elsewhere is a problem again; its repair drops the stale entry.
    let other = record(&v.dev, v.small).inline[0].pblock;
    damage(&v.dev, other);
    let r = fsck(&v.dev, false, true);
    assert_eq!(r.problems.len(), 1, "{:#?}", r.problems);
    assert_eq!(fsck(&v.dev, true, true).problems, Vec::<String>::new());
    let fs = Fs::open(v.dev.clone(), OpenOptions::default()).unwrap();
    let listed: Vec<u64> = fs.known_damage().unwrap().iter().map(|d| d.block).collect();
    assert_eq!(listed, vec![other]);
    fs.close().unwrap();
}

#[test]
fn a_snapshots_damaged_block_names_the_snapshot() {
    let v = volume(true);
    let old = record(&v.dev, v.small).inline[0].clone();
    let fs = Fs::open(v.dev.clone(), OpenOptions::default()).unwrap();
    fs.snapshot_create(b"s").unwrap();
    // The live file moves to new blocks; the snapshot keeps the old ones.
    fs.write(v.small, 0, &pattern(9, 3 * 4096)).unwrap();
    fs.sync().unwrap();
    fs.unify().unwrap();
    fs.close().unwrap();
    assert_ne!(record(&v.dev, v.small).inline[0].pblock, old.pblock);
    damage(&v.dev, old.pblock);
    let r = fsck(&v.dev, false, true);
    let line = format!(
        "block {}: data checksum mismatch in inode {} of snapshot s (live: /d/f, /g)",
        old.pblock, v.small
    );
    assert!(has(&r.problems, &[&line]), "{:#?}", r.problems);
    assert_eq!(r.data_checked, Some(18));
}

#[test]
fn repairs_that_rewrite_a_record_keep_its_sums() {
    let v = volume(true);
    for ino in [v.small, v.big] {
        edit_inode(&v.dev, ino, |a| {
            a.blocks += 5;
            a.nlink += 1;
        });
    }
    let r = fsck(&v.dev, true, false);
    assert!(r.problems.is_empty(), "{:#?}", r.problems);
    assert_eq!(r.repaired.len(), 4, "{:#?}", r.repaired);
    assert!(fsck(&v.dev, false, true).problems.is_empty());
    let a = record(&v.dev, v.small);
    assert_eq!(a.inline.iter().map(|e| e.sums.len()).sum::<usize>(), 3);
    for ino in [v.small, v.big] {
        assert_summed_as_on_disk(&v.dev, ino);
        assert_reads_verify(&v.dev, ino);
    }
}
