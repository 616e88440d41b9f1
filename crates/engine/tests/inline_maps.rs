//! Scenario: a small file's extents live in its inode record (attribute 9,
//! docs/FORMAT.md 7.1) instead of an extent leaf of its own. A commit of
//! many small files writes no extent leaves; a file that outgrows the
//! record moves to a tree; both read back whole after a clean close and
//! after a crash (replay), and fsck is clean. A volume without the
//! `INLINE_MAPS` flag (made before it existed) keeps writing trees.

use std::sync::Arc;
use tux3::device::{Device, MemDevice};
use tux3::structures::inode::{InodeAttrs, INLINE_EXTENTS};
use tux3::structures::superblock::Superblock;
use tux3::{FormatOptions, Fs, OpenOptions, ROOT_INO};

const BS: u64 = 4096;

fn fresh() -> Arc<MemDevice> {
    let mem = Arc::new(MemDevice::new(BS as u32, 16384));
    let dev: Arc<dyn Device> = mem.clone();
    Fs::format(dev, &FormatOptions::default()).unwrap();
    mem
}

fn open(mem: &Arc<MemDevice>) -> Fs {
    let dev: Arc<dyn Device> = mem.clone();
    Fs::open(dev, OpenOptions::default()).unwrap()
}

/// The record of `ino` as the volume has it now (replayed, read-only).
fn record(mem: &Arc<MemDevice>, ino: u64) -> InodeAttrs {
    let dev: Arc<dyn Device> = mem.clone();
    let (mut be, _) = tux3::backend::Backend::open(dev.clone(), true).unwrap();
    let raw = be.itable.get_mut().get(dev.as_ref(), ino).unwrap().unwrap();
    InodeAttrs::decode(&raw, ino, 0, &tux3::structures::bounds(dev.as_ref())).unwrap()
}

fn fsck_clean(mem: &Arc<MemDevice>) {
    let r = tux3_tools::fsck::check(mem.clone(), &Default::default()).unwrap();
    assert!(r.problems.is_empty(), "fsck: {:?}", r.problems);
}

/// A crash image: the device as it is now, without closing.
fn crash(mem: &MemDevice) -> Arc<MemDevice> {
    Arc::new(MemDevice::from_image(BS as u32, mem.image()))
}

/// Bytes for file `i`, of a length that varies with it.
fn content(i: u64) -> Vec<u8> {
    let len = 1 + (i * 2654435761 % 9000) as usize;
    (0..len).map(|k| (k as u64 * 31 + i) as u8).collect()
}

/// Write logical blocks 0, 2, 4, .. (`n` of them, holes between), each
/// filled with `tag + k`: `n` extents however they are allocated.
fn scattered(fs: &Fs, ino: u64, n: u64, tag: u8) {
    for k in 0..n {
        fs.write(ino, 2 * k * BS, &vec![tag + k as u8; BS as usize])
            .unwrap();
    }
}

fn check_scattered(fs: &Fs, ino: u64, n: u64, tag: u8) {
    let got = fs.read(ino, 0, ((2 * n - 1) * BS) as usize).unwrap();
    for k in 0..2 * n - 1 {
        let block = &got[(k * BS) as usize..((k + 1) * BS) as usize];
        let want = if k % 2 == 0 { tag + (k / 2) as u8 } else { 0 };
        assert!(block.iter().all(|&b| b == want), "block {k}");
    }
}

#[test]
fn small_files_write_no_extent_leaves() {
    let mem = fresh();
    let fs = open(&mem);
    fs.sync().unwrap();
    let files: Vec<u64> = (0..200u64)
        .map(|i| {
            let f = fs
                .create(ROOT_INO, format!("f{i}").as_bytes(), 0o644, 0, 0)
                .unwrap();
            fs.write(f.ino, 0, &content(i)).unwrap();
            f.ino
        })
        .collect();
    let before = fs.counters().blocks_written;
    fs.sync().unwrap();
    let written = fs.counters().blocks_written - before;
    // 200 files of 1 to 3 blocks: their data, a few inode-table and
    // directory leaves and the log; an extent leaf each would be 200 more.
    let data: u64 = (0..200).map(|i| (content(i).len() as u64).div_ceil(BS)).sum();
    assert!(
        written < data + 40,
        "{written} blocks written for {data} data blocks"
    );
    fs.close().unwrap();
    for (i, &ino) in files.iter().enumerate() {
        let a = record(&mem, ino);
        assert!(a.root.addr == 0 && !a.inline.is_empty(), "file {i}: {a:?}");
        assert_eq!(a.blocks, a.inline.iter().map(|e| e.count).sum::<u64>());
    }
    fsck_clean(&mem);
    let fs = open(&mem);
    for (i, &ino) in files.iter().enumerate() {
        let want = content(i as u64);
        assert_eq!(fs.read(ino, 0, want.len() + 10).unwrap(), want, "file {i}");
    }
    fs.close().unwrap();
}

/// A file grows past what the record holds: its extents move to a tree
/// (its first leaf logged, the record's attribute gone, in one delta),
/// and a crash at any commit after keeps the data whole.
#[test]
fn a_growing_file_moves_to_a_tree_across_commits_and_crashes() {
    let mem = fresh();
    let fs = open(&mem);
    let ino = fs.create(ROOT_INO, b"grows", 0o644, 0, 0).unwrap().ino;
    let n = INLINE_EXTENTS as u64;
    scattered(&fs, ino, n, 10);
    fs.sync().unwrap();
    assert_eq!(record(&mem, ino).inline.len(), INLINE_EXTENTS);
    let held = crash(&mem);
    fs.write(ino, 2 * n * BS, &[99u8; 100]).unwrap();
    fs.sync().unwrap();
    let moved = record(&mem, ino);
    assert!(moved.inline.is_empty(), "{moved:?}");
    let tree = crash(&mem);
    fs.close().unwrap();
    assert!(record(&mem, ino).inline.is_empty());
    for (what, m) in [("held", &held), ("tree", &tree), ("closed", &mem)] {
        fsck_clean(m);
        let fs = open(m);
        check_scattered(&fs, ino, n, 10);
        let size = fs.getattr(ino).unwrap().size;
        if what == "held" {
            assert_eq!(size, (2 * n - 1) * BS, "{what}");
        } else {
            assert_eq!(size, 2 * n * BS + 100, "{what}");
            let tail = fs.read(ino, 2 * n * BS, 200).unwrap();
            assert_eq!(tail, vec![99u8; 100], "{what}");
        }
        fs.close().unwrap();
    }
}

/// Overwrites, truncates and xattrs that fill the record: the map stays
/// right whichever way it is held, and the freed blocks go back.
#[test]
fn rewrites_truncates_and_full_records() {
    let mem = fresh();
    let fs = open(&mem);
    let free0 = fs.statfs().unwrap().blocks_free;
    let a = fs.create(ROOT_INO, b"a", 0o644, 0, 0).unwrap().ino;
    fs.write(a, 0, &[1u8; 3 * BS as usize]).unwrap();
    fs.sync().unwrap();
    fs.write(a, BS, &[2u8; 10]).unwrap();
    fs.sync().unwrap();
    assert!(!record(&mem, a).inline.is_empty());
    fs.setattr(
        a,
        &tux3::SetAttr {
            size: Some(0),
            ..Default::default()
        },
    )
    .unwrap();
    fs.sync().unwrap();
    let r = record(&mem, a);
    assert!(r.inline.is_empty() && r.root.addr == 0 && r.blocks == 0, "{r:?}");
    // Xattrs that leave no room for a map: the file keeps a tree.
    let b = fs.create(ROOT_INO, b"b", 0o644, 0, 0).unwrap().ino;
    // The largest xattr the record takes (a larger one would go to the
    // inode's xattr file).
    let big = vec![b'x'; fs.xattr_space() - 4 - b"user.big".len()];
    fs.setxattr(b, b"user.big", &big, tux3::XattrMode::Any).unwrap();
    fs.write(b, 0, &[5u8; 100]).unwrap();
    fs.sync().unwrap();
    assert!(record(&mem, b).inline.is_empty());
    let crashed = crash(&mem);
    fs.unlink(ROOT_INO, b"a").unwrap();
    fs.unlink(ROOT_INO, b"b").unwrap();
    fs.close().unwrap();
    fsck_clean(&mem);
    let fs = open(&mem);
    assert!(fs.statfs().unwrap().blocks_free + 8 >= free0, "blocks given back");
    fs.close().unwrap();
    fsck_clean(&crashed);
    let fs = open(&crashed);
    assert_eq!(fs.getattr(a).unwrap().size, 0);
    assert_eq!(fs.read(b, 0, 200).unwrap(), vec![5u8; 100]);
    assert_eq!(fs.getxattr(b, b"user.big").unwrap(), big);
    fs.close().unwrap();
}

/// A volume whose superblock lacks `INLINE_MAPS` (format versions 1 and
/// 2) writes no attribute 9: older programs can still read it.
#[test]
fn volumes_without_the_flag_keep_extent_trees() {
    let mem = Arc::new(MemDevice::new(BS as u32, 16384));
    let dev: Arc<dyn Device> = mem.clone();
    let opts = FormatOptions {
        sparse_bitmap: false,
        ..FormatOptions::default()
    };
    Fs::format(dev, &opts).unwrap();
    for copy in 0..2u64 {
        let mut b = vec![0u8; BS as usize];
        mem.read(copy, &mut b).unwrap();
        let mut sb = Superblock::decode(&b, copy).unwrap();
        sb.inline_maps = false;
        sb.data_sums = false;
        mem.write(copy, &sb.encode()).unwrap();
    }
    let fs = open(&mem);
    let ino = fs.create(ROOT_INO, b"small", 0o644, 0, 0).unwrap().ino;
    fs.write(ino, 0, b"hello").unwrap();
    fs.close().unwrap();
    let a = record(&mem, ino);
    assert!(a.inline.is_empty() && a.blocks == 1, "{a:?}");
    let mut b = vec![0u8; BS as usize];
    mem.read(0, &mut b).unwrap();
    assert_eq!(u32::from_le_bytes(b[12..16].try_into().unwrap()), 1, "version 1");
    fsck_clean(&mem);
}
