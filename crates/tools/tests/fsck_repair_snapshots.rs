//! `fsck --repair` of the snapshot table: a dead extent lost (or one that
//! does not decode) is put back from what the snapshot's image references,
//! a record whose flags have unknown bits keeps its known ones, a leaf
//! that does not decode is rebuilt from the entries it still holds, and
//! the dead extents of a record lost come free. Each case: fsck flags it,
//! the repair repairs it in one run, fsck is clean after, and the live
//! file and (where it survives) the snapshot's read as before.

use std::sync::Arc;
use tux3::backend::snapshot::{RECORD_KEY, SNAP_INO};
use tux3::backend::Backend;
use tux3::device::Device;
use tux3::structures::btree::node::Leaf;
use tux3::structures::btree::TreeKind;
use tux3::{Fs, OpenOptions, ROOT_INO};
use tux3_tools::fsck::FsckReport;

mod image_util;

use image_util::{fsck, volume_with_snapshot};

const BS: u32 = 4096;

/// File `a` as the live volume (or snapshot `snap`) reads it.
fn contents(dev: &Arc<dyn Device>, snap: Option<&[u8]>) -> Vec<u8> {
    let opts = OpenOptions {
        read_only: true,
        snapshot: snap.map(<[u8]>::to_vec),
        ..OpenOptions::default()
    };
    let fs = Fs::open(dev.clone(), opts).unwrap();
    let a = fs.lookup(ROOT_INO, b"a").unwrap().ino;
    let data = fs.read(a, 0, 40_000).unwrap();
    fs.close().unwrap();
    data
}

/// Rewrite the snapshot table's only leaf with `edit` applied to its
/// entries, then `raw` applied to the encoded block (resealed).
fn edit_table(
    dev: &Arc<dyn Device>,
    edit: impl Fn(Vec<(u64, Vec<u8>)>) -> Vec<(u64, Vec<u8>)>,
    raw: impl Fn(&mut [u8]),
) {
    let (be, _) = Backend::open(dev.clone(), true).unwrap();
    let root = be.sb.snapshots;
    assert_eq!(root.depth, 0, "the table fits one leaf");
    let mut t = tux3::structures::btree::Tree::open(SNAP_INO, TreeKind::Snapshots, root);
    let entries = t.range(dev.as_ref(), 0, u64::MAX, usize::MAX).unwrap();
    let leaf = Leaf {
        addr: root.addr,
        birth: 0,
        dirty: false,
        entries: edit(entries),
    };
    let mut block = leaf.encode(root.addr, SNAP_INO, TreeKind::Snapshots, BS as usize);
    raw(&mut block);
    tux3::codec::reseal(&mut block);
    dev.write(root.addr, &block).unwrap();
}

/// Repair in one run: problems before that `first` names, repairs made,
/// nothing left, a clean check after, and the live file as written.
fn repaired(dev: &Arc<dyn Device>, first: &str) -> FsckReport {
    let before = fsck(dev, false, false);
    assert!(
        before.problems.iter().any(|p| p.contains(first)),
        "{:#?}",
        before.problems
    );
    let r = fsck(dev, true, false);
    assert!(r.problems.is_empty(), "left after the repair: {:#?}", r.problems);
    assert!(!r.repaired.is_empty());
    let after = fsck(dev, false, false);
    assert!(after.problems.is_empty(), "{:#?}", after.problems);
    assert!(after.repaired.is_empty());
    assert_eq!(contents(dev, None), vec![2u8; 40_000]);
    r
}

#[test]
fn a_lost_dead_list_is_put_back_from_the_snapshots_image() {
    let dev = volume_with_snapshot();
    edit_table(
        &dev,
        |e| e.into_iter().filter(|(k, _)| *k >= RECORD_KEY).collect(),
        |_| {},
    );
    let r = repaired(&dev, "neither live nor on the dead list");
    assert!(
        r.repaired
            .iter()
            .any(|l| l.contains("repair puts them on the dead list")),
        "{:#?}",
        r.repaired
    );
    assert_eq!(contents(&dev, Some(b"s")), vec![1u8; 40_000]);
}

#[test]
fn a_dead_extent_that_does_not_decode_is_rebuilt() {
    let dev = volume_with_snapshot();
    // The first dead extent's value: a birth after its death.
    edit_table(
        &dev,
        |mut e| {
            e[0].1 = vec![1, 9, 0];
            e
        },
        |_| {},
    );
    let r = repaired(&dev, "the volume cannot be mounted");
    assert!(
        r.repaired
            .iter()
            .any(|l| l.contains("repair takes it out of the snapshot table")),
        "{:#?}",
        r.repaired
    );
    assert_eq!(contents(&dev, Some(b"s")), vec![1u8; 40_000]);
}

#[test]
fn unknown_flag_bits_of_a_record_are_cleared() {
    let dev = volume_with_snapshot();
    edit_table(
        &dev,
        |mut e| {
            let rec = e.iter_mut().find(|(k, _)| *k >= RECORD_KEY).unwrap();
            rec.1[0] |= 0x10;
            e
        },
        |_| {},
    );
    let r = repaired(&dev, "flags 0x10");
    assert!(
        r.repaired
            .iter()
            .any(|l| l.contains("clears the unknown flag bits")),
        "{:#?}",
        r.repaired
    );
    assert_eq!(contents(&dev, Some(b"s")), vec![1u8; 40_000]);
}

#[test]
fn a_leaf_that_does_not_decode_is_rebuilt_from_what_it_holds() {
    let dev = volume_with_snapshot();
    // The first entry's key above the second's: the leaf does not decode.
    edit_table(
        &dev,
        |e| e,
        |b| b[32..40].copy_from_slice(&u64::MAX.to_le_bytes()),
    );
    let r = repaired(&dev, "not above");
    assert!(
        r.repaired
            .iter()
            .any(|l| l.contains("rebuilds the snapshot table")),
        "{:#?}",
        r.repaired
    );
    assert_eq!(contents(&dev, Some(b"s")), vec![1u8; 40_000]);
}

#[test]
fn the_dead_extents_of_a_lost_record_come_free() {
    let dev = volume_with_snapshot();
    let used = |dev: &Arc<dyn Device>| fsck(dev, false, false).blocks_used;
    let before = used(&dev);
    // The record's root outside the volume: it goes, with its snapshot.
    edit_table(
        &dev,
        |mut e| {
            let rec = e.iter_mut().find(|(k, _)| *k >= RECORD_KEY).unwrap();
            rec.1[9..17].copy_from_slice(&u64::MAX.to_le_bytes());
            e
        },
        |_| {},
    );
    let r = repaired(&dev, "outside the volume");
    assert!(
        r.repaired.iter().any(|l| l.contains("no snapshot holds them")),
        "{:#?}",
        r.repaired
    );
    assert!(
        r.freed > 0 && used(&dev) < before,
        "the snapshot's blocks come free"
    );
    let opts = OpenOptions {
        read_only: true,
        snapshot: Some(b"s".to_vec()),
        ..OpenOptions::default()
    };
    assert!(Fs::open(dev.clone(), opts).is_err(), "the snapshot is gone");
}
