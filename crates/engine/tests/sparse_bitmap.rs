//! Scenario: a sparse bitmap (format version 5, docs/FORMAT.md section 6).
//! mkfs maps bitmap block 0 only; groups that come into use gain their
//! bitmap block at the next unify, and lose it again once all their
//! blocks are free; a volume made without the flag keeps every bitmap
//! block. Contents survive each reopen and replay, and fsck is clean.

use std::sync::Arc;
use tux3::device::{Device, MemDevice};
use tux3::structures::bitmap;
use tux3::{FormatOptions, Fs, OpenOptions, ROOT_INO};

const BS: u32 = 1024;
/// Six groups of 7,936 blocks (1 KiB blocks).
const BLOCKS: u64 = 6 * 7936;

fn fresh(sparse: bool) -> Arc<dyn Device> {
    let dev: Arc<dyn Device> = Arc::new(MemDevice::new(BS, BLOCKS));
    let opts = FormatOptions {
        sparse_bitmap: sparse,
        ..FormatOptions::default()
    };
    Fs::format(dev.clone(), &opts).unwrap();
    dev
}

fn open(dev: &Arc<dyn Device>) -> Fs {
    Fs::open(dev.clone(), OpenOptions::default()).unwrap()
}

/// Logical blocks the bitmap file maps, and whether the flag is set.
fn mapped(dev: &Arc<dyn Device>) -> (Vec<u64>, bool) {
    let (mut be, _) = tux3::backend::Backend::open(dev.clone(), true).unwrap();
    let extents = tux3::structures::extent::all(&mut be.bitmap, dev.as_ref()).unwrap();
    let blocks = extents.iter().flat_map(|e| e.lblock..e.end()).collect();
    (blocks, be.sb.sparse_bitmap)
}

fn fsck_clean(dev: &Arc<dyn Device>) {
    let r = tux3_tools::fsck::check(dev.clone(), &Default::default()).unwrap();
    assert!(r.problems.is_empty(), "fsck: {:?}", r.problems);
}

fn content(i: usize) -> Vec<u8> {
    (0..3000 * 1024).map(|b| (b / 1024 + i * 7) as u8).collect()
}

#[test]
fn bitmap_blocks_come_and_go_with_the_groups_in_use() {
    let dev = fresh(true);
    assert_eq!(bitmap::blocks_needed(BS as usize, BLOCKS), 6);
    assert_eq!(mapped(&dev), (vec![0], true), "mkfs maps block 0 only");
    fsck_clean(&dev);

    // About 24,000 blocks of data: groups 0 to 3 come into use.
    let fs = open(&dev);
    let mut inos = Vec::new();
    for i in 0..8 {
        let ino = fs
            .create(ROOT_INO, format!("f{i}").as_bytes(), 0o644, 0, 0)
            .unwrap()
            .ino;
        fs.write(ino, 0, &content(i)).unwrap();
        inos.push(ino);
    }
    fs.unify().unwrap();
    fs.close().unwrap();
    let (blocks, _) = mapped(&dev);
    assert!(blocks.len() >= 4 && blocks.len() < 6, "{blocks:?}");
    fsck_clean(&dev);

    // Free everything but the first file: the groups past it are clear
    // again, and the next unify leaves their blocks out.
    let fs = open(&dev);
    for (i, &ino) in inos.iter().enumerate().skip(1) {
        assert_eq!(fs.read(ino, 0, 3000 * 1024).unwrap(), content(i));
        fs.unlink(ROOT_INO, format!("f{i}").as_bytes()).unwrap();
    }
    fs.sync().unwrap();
    // Replayed from the log: the frees are there before any unify.
    fsck_clean(&dev);
    fs.unify().unwrap();
    // Pins released: a second unify writes the bitmap that frees them.
    fs.unify().unwrap();
    fs.close().unwrap();
    let (after, _) = mapped(&dev);
    assert!(after.len() < blocks.len(), "{after:?} of {blocks:?}");
    fsck_clean(&dev);
    let fs = open(&dev);
    assert_eq!(fs.read(inos[0], 0, 3000 * 1024).unwrap(), content(0));
    let free = fs.statfs().unwrap().blocks_free;
    assert!(free > BLOCKS - 4000, "{free} free");
    fs.close().unwrap();
}

#[test]
fn without_the_flag_every_bitmap_block_stays() {
    let dev = fresh(false);
    assert_eq!(mapped(&dev), ((0..6).collect(), false));
    let fs = open(&dev);
    let ino = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap().ino;
    fs.write(ino, 0, &content(1)).unwrap();
    fs.unify().unwrap();
    fs.close().unwrap();
    let fs = open(&dev);
    fs.unlink(ROOT_INO, b"f").unwrap();
    fs.unify().unwrap();
    fs.unify().unwrap();
    fs.close().unwrap();
    assert_eq!(mapped(&dev), ((0..6).collect(), false));
    fsck_clean(&dev);
}
