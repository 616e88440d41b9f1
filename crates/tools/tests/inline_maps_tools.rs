//! The other tools and data maps held in inode records (format attribute
//! 9): fsck checks the extents a snapshot's records hold (live or on the
//! dead list); `dump` shows the format version and INLINE_MAPS flag and
//! lists such extents like a tree's; `graph` draws them in the inode's
//! entry, with no data-tree node; `snapdiff` reports a file modified when
//! its record's extents change, or its map moves between record and tree.

use std::sync::Arc;
use tux3::backend::Backend;
use tux3::device::{Device, MemDevice};
use tux3::structures::btree::node::Leaf;
use tux3::structures::btree::{Tree, TreeKind};
use tux3::structures::inode::InodeAttrs;
use tux3::{FormatOptions, Fs, OpenOptions, SetAttr, ROOT_INO};
use tux3_tools::snapdiff::diff;
use tux3_tools::{dump, fsck, graph};

const BS: u32 = 4096;

fn volume() -> (Arc<dyn Device>, Fs) {
    let dev: Arc<dyn Device> = Arc::new(MemDevice::new(BS, 4096));
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    (dev, fs)
}

fn file(fs: &Fs, name: &str, data: &[u8]) -> u64 {
    let a = fs.create(ROOT_INO, name.as_bytes(), 0o644, 0, 0).unwrap();
    fs.write(a.ino, 0, data).unwrap();
    a.ino
}

/// Write one block every other block: `n` extents, a tree past four.
fn fragment(fs: &Fs, ino: u64, n: u64) {
    for k in 0..n {
        fs.write(ino, k * 2 * BS as u64, &[k as u8 + 1; BS as usize])
            .unwrap();
    }
}

fn problems(dev: &Arc<dyn Device>) -> Vec<String> {
    fsck::check(dev.clone(), &Default::default()).unwrap().problems
}

/// Inode `ino`'s record in snapshot `snap`, or (None) the live one.
fn record(dev: &Arc<dyn Device>, snap: Option<&[u8]>, ino: u64) -> InodeAttrs {
    let (mut be, _) = Backend::open(dev.clone(), true).unwrap();
    let (raw, leaf) = match snap {
        Some(name) => {
            let root = be.snaps.find(name).unwrap().itable;
            Tree::open(0, TreeKind::Itable, root).get_at(dev.as_ref(), ino)
        }
        None => be.itable.get_mut().get_at(dev.as_ref(), ino),
    }
    .unwrap()
    .unwrap();
    InodeAttrs::decode(&raw, ino, leaf, &tux3::structures::bounds(dev.as_ref())).unwrap()
}

#[test]
fn a_snapshots_inline_extents_must_be_live_or_dead() {
    let (dev, fs) = volume();
    let a = file(&fs, "a", &[1u8; 10_000]);
    fs.snapshot_create(b"s").unwrap();
    // The snapshot's blocks of `a` go on the dead list.
    fs.write(a, 0, &[2u8; 10_000]).unwrap();
    fs.unify().unwrap();
    fs.close().unwrap();
    let (old, now) = (record(&dev, Some(b"s"), a), record(&dev, None, a));
    assert!(
        !old.inline.is_empty() && !now.inline.is_empty(),
        "{old:?} {now:?}"
    );
    assert_ne!(old.inline[0].pblock, now.inline[0].pblock);
    assert_eq!(problems(&dev), Vec::<String>::new());

    // Drop the dead list: the snapshot's extents of `a` are owned by nothing.
    let (be, _) = Backend::open(dev.clone(), true).unwrap();
    let root = be.sb.snapshots;
    assert_eq!(root.depth, 0, "the table fits one leaf");
    let mut t = Tree::open(3, TreeKind::Snapshots, root);
    let entries = t.range(dev.as_ref(), 0, u64::MAX, usize::MAX).unwrap();
    let leaf = Leaf {
        addr: root.addr,
        birth: 0,
        dirty: false,
        entries: entries.into_iter().filter(|(k, _)| *k >= 1 << 62).collect(),
    };
    dev.write(
        root.addr,
        &leaf.encode(root.addr, 3, TreeKind::Snapshots, BS as usize),
    )
    .unwrap();
    let p = problems(&dev);
    let e = old.inline[0].clone();
    let line = format!(
        "blocks {}+{}: data of inode {a} of snapshot s, neither live nor on the dead list \
         (repair puts them on the dead list)",
        e.pblock, e.count
    );
    assert!(p.contains(&line), "{p:#?}");
}

/// A unified, closed volume with a 9000-byte file (its map in its record)
/// and a file of six extents (a tree): the device and the two inodes.
fn small_and_big() -> (Arc<dyn Device>, u64, u64) {
    let (dev, fs) = volume();
    let small = file(&fs, "small", &[5u8; 9000]);
    let big = fs.create(ROOT_INO, b"big", 0o644, 0, 0).unwrap().ino;
    fragment(&fs, big, 6);
    fs.unify().unwrap();
    fs.close().unwrap();
    (dev, small, big)
}

#[test]
fn dump_shows_the_flag_and_inline_extents_like_tree_extents() {
    let (dev, small, big) = small_and_big();
    let (s, b) = (record(&dev, None, small), record(&dev, None, big));
    assert!(s.inline.len() == 1 && b.inline.is_empty() && b.root.addr != 0);
    let text = dump::report(dev.clone()).unwrap();
    assert!(
        text.contains("format version 5, flags 0xe (INLINE_MAPS, DATA_SUMS, SPARSE_BITMAP)"),
        "{text}"
    );
    let e = s.inline[0].clone();
    let line = format!("inode {small}: in its record: 0..+{} -> {}", e.count, e.pblock);
    assert!(text.contains(&line), "{text}");
    let tree = format!("inode {big}: tree at block {} (depth 0): 0..+1 -> ", b.root.addr);
    assert!(text.contains(&tree), "{text}");
    assert!(
        text.contains("files with extents in their inode record: 1 (1 extents, 3 blocks)"),
        "{text}"
    );
}

#[test]
fn graph_draws_inline_extents_in_the_inode_entry() {
    let (dev, small, big) = small_and_big();
    let e = record(&dev, None, small).inline[0].clone();
    let dot = graph::graph(dev.clone(), 500).unwrap();
    // Record fields escape '>'.
    let field = format!(
        "inode {small}: regular 9000 B, extents 0..+{} -\\> {}",
        e.count, e.pblock
    );
    assert!(dot.contains(&field), "{dot}");
    assert!(!dot.contains(&format!("cluster_ino{small} ")), "{dot}");
    assert!(dot.contains(&format!("cluster_ino{big} ")), "{dot}");
}

fn lines(dev: &Arc<dyn Device>, a: &[u8], b: &[u8]) -> Vec<String> {
    diff(dev.clone(), a, b)
        .unwrap()
        .iter()
        .map(|c| format!("{} {}", c.kind.code(), String::from_utf8_lossy(&c.path)))
        .collect()
}

#[test]
fn snapdiff_compares_inline_extents_and_moves_between_record_and_tree() {
    let (dev, fs) = volume();
    let keep = file(&fs, "keep", &[1u8; 5000]);
    let edit = file(&fs, "edit", &[2u8; 5000]);
    let grow = file(&fs, "grow", &[3u8; 5000]);
    let shrink = fs.create(ROOT_INO, b"shrink", 0o644, 0, 0).unwrap().ino;
    fragment(&fs, shrink, 6);
    fs.snapshot_create(b"s1").unwrap();
    fs.write(edit, 0, &[9u8; 5000]).unwrap();
    fragment(&fs, grow, 6);
    let cut = SetAttr {
        size: Some(100),
        ..Default::default()
    };
    fs.setattr(shrink, &cut).unwrap();
    fs.snapshot_create(b"s2").unwrap();
    fs.close().unwrap();

    let at = |snap: &[u8], ino| record(&dev, Some(snap), ino);
    assert_eq!(at(b"s1", keep), at(b"s2", keep));
    assert!(!at(b"s1", edit).inline.is_empty() && !at(b"s2", edit).inline.is_empty());
    assert_ne!(at(b"s1", edit).inline, at(b"s2", edit).inline);
    assert!(!at(b"s1", grow).inline.is_empty() && at(b"s2", grow).root.addr != 0);
    // A unified tree stays a tree when the file shrinks.
    assert!(at(b"s1", shrink).root.addr != 0 && at(b"s2", shrink).root.addr != 0);

    let want = ["M /edit", "M /grow", "M /shrink"];
    assert_eq!(lines(&dev, b"s1", b"s2"), want);
    // Backwards, `grow` moves from a tree to its record.
    assert_eq!(lines(&dev, b"s2", b"s1"), want);
    assert_eq!(problems(&dev), Vec::<String>::new());
}
