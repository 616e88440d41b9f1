//! fsck and snapshots: a block a snapshot holds that is neither live nor on
//! the dead list is reported (and would be handed out again), a dead
//! extent no snapshot holds is reported, and checking many snapshots that
//! share their trees reads about what checking one does.

use std::sync::Arc;
use tux3::backend::Backend;
use tux3::device::{Device, MemDevice};
use tux3::structures::btree::node::Leaf;
use tux3::structures::btree::TreeKind;
use tux3::{FormatOptions, Fs, OpenOptions, ROOT_INO};

mod image_util;

use image_util::volume_with_snapshot;

const BS: u32 = 4096;

fn problems(dev: &Arc<dyn Device>) -> Vec<String> {
    tux3_tools::fsck::check(dev.clone(), &Default::default())
        .unwrap()
        .problems
}

/// Rewrite the snapshot table's only leaf keeping the entries `keep` says.
fn rewrite_table(dev: &Arc<dyn Device>, keep: impl Fn(u64) -> bool) {
    let (be, _) = Backend::open(dev.clone(), true).unwrap();
    let root = be.sb.snapshots;
    assert_eq!(root.depth, 0, "the table fits one leaf");
    let mut t = tux3::structures::btree::Tree::open(3, TreeKind::Snapshots, root);
    let entries = t.range(dev.as_ref(), 0, u64::MAX, usize::MAX).unwrap();
    let leaf = Leaf {
        addr: root.addr,
        birth: 0,
        dirty: false,
        entries: entries.into_iter().filter(|(k, _)| keep(*k)).collect(),
    };
    dev.write(
        root.addr,
        &leaf.encode(root.addr, 3, TreeKind::Snapshots, BS as usize),
    )
    .unwrap();
}

#[test]
fn a_snapshot_block_neither_live_nor_dead_is_reported() {
    let dev = volume_with_snapshot();
    assert_eq!(problems(&dev), Vec::<String>::new());
    // Drop the dead list: the snapshot's old data is owned by nothing.
    rewrite_table(&dev, |k| k >= 1 << 62);
    let p = problems(&dev);
    assert!(
        p.iter()
            .any(|l| l.contains("of snapshot s, neither live nor on the dead list")),
        "{p:#?}"
    );
    // Still in use: the repair puts them back on the dead list, so they
    // are no leak to free.
    assert!(
        p.iter().any(|l| l.contains("repair puts them on the dead list")),
        "{p:#?}"
    );
    assert!(!p.iter().any(|l| l.contains("leaked")), "{p:#?}");
}

#[test]
fn a_dead_extent_no_snapshot_holds_is_reported() {
    let dev = volume_with_snapshot();
    // Drop the snapshot record: its dead extents are held by nothing.
    rewrite_table(&dev, |k| k < 1 << 62);
    let p = problems(&dev);
    assert!(p.iter().any(|l| l.contains("no snapshot holds them")), "{p:#?}");
}

#[test]
fn many_snapshots_of_shared_trees_cost_about_one() {
    let reads_with = |snapshots: usize| {
        let dev: Arc<dyn Device> = Arc::new(MemDevice::new(BS, 16384));
        Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
        let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
        let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap().ino;
        let mut inos = Vec::new();
        for i in 0..2000 {
            let a = fs.create(d, format!("f{i}").as_bytes(), 0o644, 0, 0).unwrap().ino;
            fs.write(a, 0, b"x").unwrap();
            inos.push(a);
        }
        for (s, &ino) in inos.iter().take(snapshots).enumerate() {
            // One file changes between snapshots: each has its own table root.
            fs.write(ino, 0, b"y").unwrap();
            fs.snapshot_create(format!("s{s}").as_bytes()).unwrap();
        }
        fs.close().unwrap();
        let before = dev.counters().blocks_read;
        let r = tux3_tools::fsck::check(dev.clone(), &Default::default()).unwrap();
        assert!(r.problems.is_empty(), "{:#?}", r.problems);
        dev.counters().blocks_read - before
    };
    let (one, many) = (reads_with(1), reads_with(40));
    // 39 more snapshots, each differing in one inode-table leaf and one
    // file tree: a few blocks each, not another walk of 2,000 files.
    eprintln!("fsck read {one} blocks with 1 snapshot, {many} with 40");
    assert!(
        many < one + 39 * 8,
        "fsck read {one} blocks with 1 snapshot, {many} with 40"
    );
}

/// Files and snapshots by turns, then every snapshot deleted and its
/// space reclaimed, all without a unify after the deletes: enough records
/// that reclaim empties whole leaves of the snapshot table.
fn many_snapshots_deleted(n: usize) -> Arc<dyn Device> {
    let dev: Arc<dyn Device> = Arc::new(MemDevice::new(BS, 16384));
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    for i in 0..n {
        let a = fs
            .create(ROOT_INO, format!("f{i}").as_bytes(), 0o644, 0, 0)
            .unwrap();
        fs.write(a.ino, 0, &[i as u8; 100]).unwrap();
        fs.snapshot_create(format!("s{i}").as_bytes()).unwrap();
    }
    for i in 0..n {
        fs.snapshot_delete(format!("s{i}").as_bytes()).unwrap();
        fs.unlink(ROOT_INO, format!("f{i}").as_bytes()).unwrap();
    }
    fs.snapshot_reclaim(&mut |_| {}).unwrap();
    fs.sync().unwrap();
    fs.close().unwrap();
    dev
}

#[test]
fn table_nodes_reclaim_emptied_are_held_until_the_next_unify() {
    let dev = many_snapshots_deleted(200);
    // Reclaim took leaves out of the table since the last unify: the last
    // unify's image still holds them, so they are not leaks.
    let (be, _) = Backend::open(dev.clone(), true).unwrap();
    assert!(
        !be.snaps.tree.freed.is_empty(),
        "the case needs leaves reclaim emptied"
    );
    // The table is empty now: fsck counts the nodes left in it among what
    // the next unify frees too.
    assert!(be.snaps.records.is_empty() && be.snaps.dead.is_empty());
    drop(be);
    let report = tux3_tools::fsck::check(dev.clone(), &Default::default()).unwrap();
    assert_eq!(report.problems, Vec::<String>::new());
    assert_eq!(report.leaked.blocks, 0);
    assert!(report.unify_frees > 0);
    // The next unify frees them and the empty table's last nodes (what
    // fsck said it would), and any tree's root branches left with one
    // child (the inode table's, the root directory's: they give way to it).
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    fs.unify().unwrap();
    fs.close().unwrap();
    let after = tux3_tools::fsck::check(dev.clone(), &Default::default()).unwrap();
    assert_eq!(after.problems, Vec::<String>::new());
    assert!(
        after.blocks_used <= report.blocks_used - report.unify_frees,
        "{} blocks used after the unify; {} before, {} for it to free",
        after.blocks_used,
        report.blocks_used,
        report.unify_frees
    );
    let (be, _) = Backend::open(dev.clone(), true).unwrap();
    assert_eq!(be.sb.snapshots.addr, 0);
}

#[test]
fn fsck_counts_every_leaked_range_and_repair_frees_that_many() {
    let dev = many_snapshots_deleted(150);
    let clean = tux3_tools::fsck::check(dev.clone(), &Default::default()).unwrap();
    assert_eq!(clean.problems, Vec::<String>::new());
    // Leak 150 ranges of 1..=3 blocks in free space: more than the
    // per-kind line limit, so every one must still be listed.
    let (be, _) = Backend::open(dev.clone(), true).unwrap();
    let mut leaks = Vec::new();
    let mut b = 2;
    while leaks.len() < 150 {
        let n = 1 + leaks.len() as u64 % 3;
        if (b..b + n + 1).all(|x| !be.alloc.is_used(x) && !be.alloc.is_pinned(x)) {
            leaks.push((b, n));
            b += n + 1;
        } else {
            b += 1;
        }
    }
    drop(be);
    let mut v = tux3::frontend::Volume::open(dev.clone(), OpenOptions::default()).unwrap();
    for &(s, n) in &leaks {
        v.repair_mark_used(s, n).unwrap();
    }
    v.unify().unwrap();
    v.close().unwrap();
    // A delta after it, so the log holds something the repair's unify frees.
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    let a = fs.create(ROOT_INO, b"after", 0o644, 0, 0).unwrap();
    fs.write(a.ino, 0, &[7; 9000]).unwrap();
    fs.sync().unwrap();
    fs.close().unwrap();
    let want: u64 = leaks.iter().map(|l| l.1).sum();
    let report = tux3_tools::fsck::check(dev.clone(), &Default::default()).unwrap();
    assert_eq!(
        report.leaked.blocks,
        want,
        "{:#?}",
        &report.problems[..5.min(report.problems.len())]
    );
    assert_eq!(report.leaked.ranges, leaks.len() as u64);
    assert!(report.unify_frees > 0);
    for &(s, n) in &leaks {
        let line = if n == 1 {
            format!("block {s} (1 block): marked in use but referenced by nothing (leaked)")
        } else {
            format!(
                "blocks {s}-{} ({n} blocks): marked in use but referenced by nothing (leaked)",
                s + n - 1
            )
        };
        assert!(report.problems.contains(&line), "missing {line}");
    }
    let repaired = tux3_tools::fsck::check(
        dev.clone(),
        &tux3_tools::fsck::FsckOptions {
            repair: true,
            progress: false,
            data: false,
        },
    )
    .unwrap();
    assert_eq!(repaired.problems, Vec::<String>::new());
    assert_eq!(repaired.freed, want);
    assert_eq!(repaired.repaired.len(), leaks.len());
    // What the repair gave back is the leaks and what its unify frees.
    assert_eq!(
        repaired.blocks_used,
        report.blocks_used - want - report.unify_frees
    );
}

/// A snapshot taken at a unify shares the inode table's root then; once
/// the log has moved the live table's leaf elsewhere (a delta commit, no
/// unify since), only the snapshot reads that old leaf, and fsck must
/// still check it there.
#[test]
fn a_snapshots_inode_table_the_log_moved_away_from_is_checked() {
    let dev: Arc<dyn Device> = Arc::new(MemDevice::new(BS, 4096));
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    let a = fs.create(ROOT_INO, b"a", 0o644, 0, 0).unwrap().ino;
    fs.write(a, 0, &[1u8; 4096]).unwrap();
    fs.snapshot_create(b"s").unwrap();
    let held = Backend::open(dev.clone(), true).unwrap().0.sb.itable;
    assert_eq!(held.depth, 0, "the table is one leaf");
    fs.create(ROOT_INO, b"b", 0o644, 0, 0).unwrap();
    fs.close().unwrap();
    assert_eq!(problems(&dev), Vec::<String>::new());
    // The snapshot's leaf, which the live table no longer uses, damaged.
    dev.write(held.addr, &vec![0xa5; BS as usize]).unwrap();
    let p = problems(&dev);
    assert!(
        p.iter().any(|l| l.contains(&format!("{}", held.addr))),
        "the snapshot's inode table leaf at {} is damaged: {p:#?}",
        held.addr
    );
}

/// The same with a table of several leaves: the snapshot shares the root
/// branch's block, and the log moved one leaf below it; the snapshot's
/// old leaf is checked too.
#[test]
fn a_snapshots_inode_table_leaf_the_log_moved_away_from_is_checked() {
    let dev: Arc<dyn Device> = Arc::new(MemDevice::new(BS, 8192));
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    let mut inos = Vec::new();
    for i in 0..400 {
        inos.push(
            fs.create(ROOT_INO, format!("f{i}").as_bytes(), 0o644, 0, 0)
                .unwrap()
                .ino,
        );
    }
    fs.snapshot_create(b"s").unwrap();
    let (be, _) = Backend::open(dev.clone(), true).unwrap();
    let held = be.sb.itable;
    assert!(held.depth >= 1, "several leaves");
    let mut t = tux3::structures::btree::Tree::open(0, TreeKind::Itable, held);
    let last = *inos.last().unwrap();
    let old_leaf = t
        .get_at(dev.as_ref(), last)
        .unwrap()
        .expect("the last file's record")
        .1;
    drop(be);
    fs.write(last, 0, b"changed").unwrap();
    fs.close().unwrap();
    let live = Backend::open(dev.clone(), true).unwrap().0.sb.itable;
    assert_eq!(live.addr, held.addr, "no unify since the snapshot");
    assert_eq!(problems(&dev), Vec::<String>::new());
    dev.write(old_leaf, &vec![0xa5; BS as usize]).unwrap();
    let p = problems(&dev);
    assert!(
        p.iter().any(|l| l.contains(&format!("block {old_leaf}"))),
        "the snapshot's inode table leaf at {old_leaf} is damaged: {p:#?}"
    );
}
