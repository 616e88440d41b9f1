//! `fsck --repair` of a log record its leaf block contradicts and of a
//! log commit's delta number, and of an inode-table key out of place,
//! each in one run that leaves a clean volume with every file as it was:
//! a `LeafMap` naming the wrong tree (the leaf goes to the tree its block
//! names), a separator its keys do not fit (the leaf replaces the one it
//! is a copy of) or another record's leaf (the leaf of the delta no record
//! maps is taken), a full commit's delta number below the superblock's
//! next delta or implausible (replayed as the lowest allowed, the log
//! started anew), an inode-table key changed out of order (set back in
//! place to the one number its neighbours leave), and an inode-table
//! branch entry naming another entry's leaf (set back to the leaf that
//! nothing references). Each block is
//! changed with a valid checksum, so only the checks see the damage.

mod image_util;

use std::sync::Arc;
use tux3::codec::reseal;
use tux3::device::{Device, MemDevice};
use tux3::log::{read_chain, LogBlock, Record};
use tux3::structures::superblock::Superblock;
use tux3::{FormatOptions, Fs, Ino, OpenOptions, ROOT_INO};
use tux3_tools::fsck::{metadata_blocks, FsckReport};

const FILES: usize = 10;

/// A volume with /d holding f0..f9 (unified), then a delta that adds
/// /d/late, synced and left in the log (the volume not closed). Returns
/// the device and the inode of /d.
fn logged_volume() -> (Arc<dyn Device>, Ino) {
    let dev: Arc<dyn Device> = Arc::new(MemDevice::new(4096, 4096));
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap().ino;
    for i in 0..FILES {
        let f = fs.create(d, format!("f{i}").as_bytes(), 0o644, 0, 0).unwrap().ino;
        fs.write(f, 0, format!("data of f{i}").as_bytes()).unwrap();
    }
    fs.unify().unwrap();
    let f = fs.create(d, b"late", 0o644, 0, 0).unwrap().ino;
    fs.write(f, 0, b"data of late").unwrap();
    fs.sync().unwrap();
    drop(fs);
    (dev, d)
}

/// The files of /d and their contents.
fn contents(dev: &Arc<dyn Device>) -> Vec<(Vec<u8>, Vec<u8>)> {
    image_util::dir_listing(dev, b"d", 64)
}

fn fsck(dev: &Arc<dyn Device>, repair: bool) -> FsckReport {
    image_util::fsck(dev, repair, true)
}

/// The last block of the log.
fn last_log_block(dev: &Arc<dyn Device>) -> LogBlock {
    let sb = Superblock::load(dev.as_ref()).unwrap();
    let chain = read_chain(dev.as_ref(), sb.log_start()).unwrap();
    let addr = chain.blocks().last().expect("a log block");
    let mut buf = vec![0u8; dev.block_size() as usize];
    dev.read(addr, &mut buf).unwrap();
    LogBlock::decode(&buf, addr, dev.block_count()).unwrap()
}

/// Rewrite the last log block with `change` applied (resealed: it is the
/// last, no block names its checksum).
fn change_last_log_block(dev: &Arc<dyn Device>, change: impl FnOnce(&mut LogBlock)) {
    let mut lb = last_log_block(dev);
    change(&mut lb);
    dev.write(lb.addr, &lb.encode(dev.block_size() as usize)).unwrap();
}

/// Damage `dev` with `damage`; fsck finds a problem with every part of
/// `found` in it; one repair leaves a clean volume with the files as
/// they were.
fn repaired_keeping_all(dev: &Arc<dyn Device>, damage: impl FnOnce(&Arc<dyn Device>), found: &[&str]) {
    let before = contents(dev);
    assert!(before.len() > FILES, "every file of /d is there to start with");
    damage(dev);
    let r = fsck(dev, false);
    assert!(
        r.problems.iter().any(|l| found.iter().all(|p| l.contains(p))),
        "fsck names the damage ({found:?}): {:?}",
        r.problems
    );
    let r = fsck(dev, true);
    assert!(
        r.problems.is_empty(),
        "one repair leaves nothing: {:?}",
        r.problems
    );
    assert!(
        r.repaired.iter().any(|l| found.iter().all(|p| l.contains(p))),
        "the repair names what it mended: {:?}",
        r.repaired
    );
    let again = fsck(dev, false);
    assert!(
        again.problems.is_empty() && again.repaired.is_empty(),
        "{:?}",
        again.problems
    );
    assert_eq!(contents(dev), before, "every file and its data kept");
}

/// The first `LeafMap` of the last log block for tree `tree`.
fn leaf_map(lb: &mut LogBlock, tree: u64) -> &mut Record {
    lb.records
        .iter_mut()
        .find(|r| matches!(r, Record::LeafMap { tree: t, .. } if *t == tree))
        .expect("the delta maps a leaf of that tree")
}

#[test]
fn a_leaf_map_naming_another_tree_maps_the_leaf_where_its_block_belongs() {
    let (dev, d) = logged_volume();
    repaired_keeping_all(
        &dev,
        |dev| {
            change_last_log_block(dev, |lb| {
                if let Record::LeafMap { tree, .. } = leaf_map(lb, 0) {
                    *tree = d;
                }
            })
        },
        &[&format!(
            "as a leaf of inode {d}, but the block is a itable leaf of the inode table"
        )],
    );
}

#[test]
fn a_directory_leaf_mapped_into_the_inode_table_goes_back_to_its_directory() {
    let (dev, d) = logged_volume();
    repaired_keeping_all(
        &dev,
        |dev| {
            change_last_log_block(dev, |lb| {
                if let Record::LeafMap { tree, .. } = leaf_map(lb, d) {
                    *tree = 0;
                }
            })
        },
        &[&format!(
            "as a leaf of the inode table, but the block is a directory leaf of inode {d}"
        )],
    );
}

#[test]
fn a_leaf_map_naming_another_records_leaf_maps_the_leaf_no_record_maps() {
    let (dev, d) = logged_volume();
    repaired_keeping_all(
        &dev,
        |dev| {
            change_last_log_block(dev, |lb| {
                let Record::LeafMap { addr: dir_leaf, .. } = *leaf_map(lb, d) else {
                    unreachable!()
                };
                if let Record::LeafMap { addr, .. } = leaf_map(lb, 0) {
                    *addr = dir_leaf;
                }
            })
        },
        &["as a leaf of the inode table, which it is not; the delta's leaf of it that no record maps"],
    );
}

#[test]
fn a_leaf_map_separator_its_keys_do_not_fit_takes_the_leaf_it_replaces() {
    let (dev, _) = logged_volume();
    repaired_keeping_all(
        &dev,
        |dev| {
            change_last_log_block(dev, |lb| {
                if let Record::LeafMap { sep, .. } = leaf_map(lb, 0) {
                    *sep = 5;
                }
            })
        },
        &[
            "as the inode-table leaf at 5, but its keys",
            "belong to the leaf at 0",
        ],
    );
}

#[test]
fn a_commit_with_a_delta_number_below_the_floor_is_replayed_as_the_floor() {
    let (dev, _) = logged_volume();
    repaired_keeping_all(
        &dev,
        |dev| change_last_log_block(dev, |lb| lb.delta = 0),
        &["delta 0, expected"],
    );
}

#[test]
fn a_commit_with_an_implausible_delta_number_is_replayed_as_the_floor() {
    let (dev, _) = logged_volume();
    repaired_keeping_all(
        &dev,
        |dev| change_last_log_block(dev, |lb| lb.delta = u64::MAX),
        &[&format!("delta {}, expected", u64::MAX)],
    );
}

/// The inode-table leaf holding `ino` (the table is unified: no log), and
/// the offset of its key there.
fn itable_key(dev: &Arc<dyn Device>, ino: Ino) -> (u64, usize) {
    let mut buf = vec![0u8; dev.block_size() as usize];
    for b in metadata_blocks(dev.clone()).unwrap() {
        dev.read(b, &mut buf).unwrap();
        if &buf[..4] != b"T3LF" || buf[16..24] != 0u64.to_le_bytes() || buf[24] != 1 {
            continue;
        }
        let count = u16::from_le_bytes([buf[26], buf[27]]) as usize;
        let mut at = 32;
        for _ in 0..count {
            if buf[at..at + 8] == ino.to_le_bytes() {
                return (b, at);
            }
            at += 10 + u16::from_le_bytes([buf[at + 8], buf[at + 9]]) as usize;
        }
    }
    panic!("no inode-table leaf holds inode {ino}");
}

#[test]
fn an_inode_table_key_out_of_order_is_set_back_in_place() {
    let (dev, d) = logged_volume();
    // Unified: the table's leaves are on disk, no log replaces them.
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    let f3 = fs.lookup(d, b"f3").unwrap().ino;
    fs.unify().unwrap();
    fs.close().unwrap();
    repaired_keeping_all(
        &dev,
        |dev| {
            let (b, at) = itable_key(dev, f3);
            let mut buf = vec![0u8; dev.block_size() as usize];
            dev.read(b, &mut buf).unwrap();
            buf[at..at + 8].copy_from_slice(&0xffff_ffffu64.to_le_bytes());
            reseal(&mut buf);
            dev.write(b, &buf).unwrap();
        },
        &[&format!("key {} (entry", 0xffff_ffffu64)],
    );
}

/// `logged_volume` with 300 more files in /d: enough inodes for several
/// inode-table leaves, all unified.
fn several_itable_leaves() -> Arc<dyn Device> {
    let (dev, d) = logged_volume();
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    for i in 0..300 {
        fs.create(d, format!("g{i}").as_bytes(), 0o644, 0, 0).unwrap();
    }
    fs.unify().unwrap();
    fs.close().unwrap();
    dev
}

/// An inode-table branch of leaves with at least `entries` entries.
fn itable_branch(dev: &Arc<dyn Device>, entries: u8) -> u64 {
    let mut buf = vec![0u8; dev.block_size() as usize];
    metadata_blocks(dev.clone())
        .unwrap()
        .into_iter()
        .find(|&b| {
            dev.read(b, &mut buf).unwrap();
            &buf[..4] == b"T3BR" && buf[16..24] == 0u64.to_le_bytes() && buf[25] == 1 && buf[26] >= entries
        })
        .expect("the inode table has a branch of leaves")
}

#[test]
fn an_inode_table_branch_entry_naming_another_leaf_is_set_back() {
    let dev = several_itable_leaves();
    let branch = itable_branch(&dev, 3);
    repaired_keeping_all(
        &dev,
        |dev| {
            let mut buf = vec![0u8; dev.block_size() as usize];
            dev.read(branch, &mut buf).unwrap();
            // Entry 1's child becomes entry 2's.
            let other: [u8; 8] = buf[32 + 32 + 8..32 + 32 + 16].try_into().unwrap();
            buf[32 + 16 + 8..32 + 16 + 16].copy_from_slice(&other);
            reseal(&mut buf);
            dev.write(branch, &buf).unwrap();
        },
        &[&format!(
            "block {branch}: inode table branch: entry 1 names block"
        )],
    );
}

#[test]
fn the_first_inode_table_leaf_rebuilt_keeps_the_keys_below_the_next() {
    let dev = several_itable_leaves();
    let (addr, leaf) = image_util::itable_leaf(&dev, ROOT_INO);
    assert!(leaf.entries.len() > 3);
    let mut buf = vec![0u8; dev.block_size() as usize];
    dev.read(addr, &mut buf).unwrap();
    // Entry 2's value length runs past the end of the block.
    let at = 32 + leaf.entries[..2].iter().map(|(_, v)| 10 + v.len()).sum::<usize>() + 8;
    buf[at..at + 2].copy_from_slice(&0xfff0u16.to_le_bytes());
    reseal(&mut buf);
    dev.write(addr, &buf).unwrap();
    let r = fsck(&dev, false);
    assert!(
        has_line(&r.problems, &format!("block {addr}: inode table node")),
        "{:?}",
        r.problems
    );
    // The first leaf's keys go back below the next leaf's separator: the
    // table checks clean after one repair (the root's record among them).
    let r = fsck(&dev, true);
    assert!(r.problems.is_empty(), "{:?}", r.problems);
    let again = fsck(&dev, false);
    assert!(
        again.problems.is_empty() && again.repaired.is_empty(),
        "{:?}",
        again.problems
    );
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    assert!(fs.lookup(ROOT_INO, b"d").is_ok());
    fs.close().unwrap();
}

fn has_line(lines: &[String], part: &str) -> bool {
    lines.iter().any(|l| l.contains(part))
}

#[test]
fn an_inode_table_branch_child_outside_the_volume_gets_its_leaf_back() {
    let dev = several_itable_leaves();
    let branch = itable_branch(&dev, 2);
    // The first entry's child (the leaf of the root's record) leaves the
    // volume: the mount fails, the entry is taken out, and the leaf, in use
    // and named by nothing, goes back at separator 0.
    repaired_keeping_all(
        &dev,
        |dev| {
            let mut buf = vec![0u8; dev.block_size() as usize];
            dev.read(branch, &mut buf).unwrap();
            buf[32 + 8..32 + 16].copy_from_slice(&u64::MAX.to_le_bytes());
            reseal(&mut buf);
            dev.write(branch, &buf).unwrap();
        },
        &[&format!("block {branch}: inode table")],
    );
}
