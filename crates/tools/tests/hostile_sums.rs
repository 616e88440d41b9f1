//! Hostile images around data checksums, every metadata checksum valid:
//! a record whose sums attribute (12) has the wrong count, or comes
//! without extents (attribute 9), and an extent leaf entry whose flags say
//! summed with the wrong length. Each is an error naming its block when
//! the file is read and in fsck, never a panic; a damaged sums attribute
//! is repaired (dropped, the checksums computed from the data on disk),
//! leaving a clean volume whose file reads as written.
//!
//! Calls the engine's public API and `tux3_tools::fsck` (through
//! `image_util`).

mod image_util;

use image_util::*;
use std::sync::Arc;
use tux3::device::Device;
use tux3::{Errno, Error, Fs, OpenOptions, ROOT_INO};

const SUMS: u8 = 12;
const EXTENTS: u8 = 9;

/// `/f` (3 blocks, its map in its record) and an empty `/e`, unified and
/// closed.
fn volume() -> (Arc<dyn Device>, u64, u64) {
    let dev = fresh(1024, true);
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap().ino;
    fs.write(f, 0, &data()).unwrap();
    let e = fs.create(ROOT_INO, b"e", 0o644, 0, 0).unwrap().ino;
    fs.sync().unwrap();
    fs.unify().unwrap();
    fs.close().unwrap();
    (dev, f, e)
}

fn data() -> Vec<u8> {
    (0..3 * 4096).map(|i| (i % 241) as u8).collect()
}

/// The attributes of a raw record: (tag, start of the attribute, end).
fn attributes(raw: &[u8]) -> Vec<(u8, usize, usize)> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < raw.len() {
        let len = u16::from_le_bytes([raw[at + 1], raw[at + 2]]) as usize;
        out.push((raw[at], at, at + 3 + len));
        at += 3 + len;
    }
    out
}

/// Reading `ino` fails with a corruption error naming `block` and
/// `detail`; fsck names them too, and nothing panics.
fn assert_refused(dev: &Arc<dyn Device>, ino: u64, block: u64, detail: &str) {
    let fs = Fs::open(dev.clone(), OpenOptions::default()).expect("the volume still mounts");
    let e = fs.read(ino, 0, 4096).expect_err("read of the hostile record");
    assert_eq!(e.errno(), Errno::EIO, "{e}");
    match &e {
        Error::Corrupt { block: b, what } => {
            assert_eq!(*b, block, "{what}");
            assert!(what.contains(detail), "{what}");
        }
        other => panic!("not a corruption error: {other}"),
    }
    fs.close().unwrap();
    let r = fsck(dev, false, true);
    assert!(
        has(&r.problems, &[&format!("block {block}: "), detail]),
        "{:#?}",
        r.problems
    );
}

/// fsck --repair leaves a clean volume; `/f` reads as written.
fn assert_repaired(dev: &Arc<dyn Device>, f: u64) {
    let r = fsck(dev, true, false);
    assert!(r.problems.is_empty(), "{:#?}", r.problems);
    assert!(
        has(&r.repaired, &["repair drops the checksums and computes them"]),
        "{:#?}",
        r.repaired
    );
    let r = fsck(dev, false, true);
    assert!(r.problems.is_empty() && r.repaired.is_empty(), "{r:#?}");
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    assert_eq!(fs.read(f, 0, 1 << 16).unwrap(), data());
    fs.close().unwrap();
    assert_eq!(record(dev, f).inline[0].sums.len(), 3);
}

#[test]
fn sums_attribute_with_the_wrong_count_is_named_and_repaired() {
    let (dev, f, _) = volume();
    let (leaf, _) = itable_leaf(&dev, f);
    edit_raw_record(&dev, f, |raw| {
        let (_, at, end) = attributes(raw).into_iter().find(|a| a.0 == SUMS).unwrap();
        // One checksum fewer than the three blocks.
        raw.drain(end - 4..end);
        raw[at + 1..at + 3].copy_from_slice(&8u16.to_le_bytes());
    });
    assert_refused(&dev, f, leaf, "2 block checksums for 3 blocks");
    assert_repaired(&dev, f);
}

#[test]
fn sums_attribute_without_extents_is_named_and_repaired() {
    let (dev, f, e) = volume();
    let (leaf, _) = itable_leaf(&dev, e);
    edit_raw_record(&dev, e, |raw| {
        raw.extend_from_slice(&[SUMS, 4, 0]);
        raw.extend_from_slice(&0x1234_5678u32.to_le_bytes());
    });
    assert_refused(&dev, e, leaf, "1 block checksums for 0 blocks");
    assert_repaired(&dev, f);
    assert_eq!(record(&dev, e).inline.len(), 0);
}

#[test]
fn extents_without_sums_attribute_are_named_and_repaired() {
    let (dev, f, _) = volume();
    edit_raw_record(&dev, f, |raw| {
        let (_, at, end) = attributes(raw).into_iter().find(|a| a.0 == SUMS).unwrap();
        raw.drain(at..end);
    });
    assert!(attributes(&record_raw(&dev, f)).iter().any(|a| a.0 == EXTENTS));
    let r = fsck(&dev, false, true);
    let line = format!("inode {f}, its inode record: extent at logical block 0");
    assert!(
        has(&r.problems, &[&line, "attribute 12 absent", "no data checksums"]),
        "{:#?}",
        r.problems
    );
    let r = fsck(&dev, true, false);
    assert!(r.problems.is_empty(), "{:#?}", r.problems);
    assert_eq!(record(&dev, f).inline[0].sums.len(), 3);
}

/// A summed entry whose checksums do not match its count, or longer than
/// a summed entry may be: an error naming its leaf, in reads and in fsck,
/// and no panic in fsck --repair (which cannot mend the entry: it names it
/// still).
#[test]
fn summed_leaf_entry_of_the_wrong_length_is_named_never_a_panic() {
    for (count, detail) in [(100u32, "at most 64"), (2, "bad length")] {
        let dev = fresh(1024, true);
        let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
        let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap().ino;
        for k in 0..6u64 {
            fs.write(f, k * 8192, &[k as u8 + 1; 4096]).unwrap();
        }
        fs.sync().unwrap();
        fs.unify().unwrap();
        fs.close().unwrap();
        let (leaf, mut entries) = extent_leaf(&dev, f);
        assert_eq!(entries[0].1[16], 2, "the extents are summed");
        entries[0].1[8..12].copy_from_slice(&count.to_le_bytes());
        rewrite_leaf(&dev, leaf, f, entries);
        assert_refused(&dev, f, leaf, detail);
        let r = fsck(&dev, true, true);
        assert!(
            has(&r.problems, &[&format!("block {leaf}: "), detail]),
            "{:#?}",
            r.problems
        );
    }
}

/// Inode `ino`'s raw record value.
fn record_raw(dev: &Arc<dyn Device>, ino: u64) -> Vec<u8> {
    let (_, leaf) = itable_leaf(dev, ino);
    leaf.entries.into_iter().find(|e| e.0 == ino).unwrap().1
}
