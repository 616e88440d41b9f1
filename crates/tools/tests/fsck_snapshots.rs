//! fsck and snapshots: a block a snapshot holds that is neither live nor on
//! the dead list is reported (and would be handed out again), a dead
//! extent no snapshot holds is a leak, and checking many snapshots that
//! share their trees reads about what checking one does.

use std::sync::Arc;
use tux3::backend::Backend;
use tux3::device::{Device, MemDevice};
use tux3::structures::btree::node::Leaf;
use tux3::structures::btree::TreeKind;
use tux3::{FormatOptions, Fs, OpenOptions, ROOT_INO};

const BS: u32 = 4096;

fn volume_with_snapshot() -> Arc<dyn Device> {
    let dev: Arc<dyn Device> = Arc::new(MemDevice::new(BS, 4096));
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    let a = fs.create(ROOT_INO, b"a", 0o644, 0, 0).unwrap().ino;
    fs.write(a, 0, &vec![1u8; 40_000]).unwrap();
    fs.snapshot_create(b"s").unwrap();
    // The old data of a goes on the dead list.
    fs.write(a, 0, &vec![2u8; 40_000]).unwrap();
    fs.unify().unwrap();
    fs.close().unwrap();
    dev
}

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
    assert!(p.iter().any(|l| l.contains("leaked")), "{p:#?}");
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
