//! fsck and data maps held in inode records (format attribute 9, the
//! superblock's INLINE_MAPS flag): small files and a symlink whose records
//! hold their extents check clean (with a log and after close), their
//! blocks owned like a tree's (no leak, `repair` changes nothing); and
//! damage to such extents is reported naming the inode: blocks another
//! file holds, a free block (repaired), a wrong `blocks` attribute or
//! size, a block outside the volume, a superblock without the flag.

mod image_util;

use image_util::{edit_inode, record};
use std::sync::Arc;
use tux3::backend::Backend;
use tux3::device::{Device, MemDevice};
use tux3::structures::superblock::Superblock;
use tux3::{FormatOptions, Fs, OpenOptions, ROOT_INO};
use tux3_tools::fsck::{self, FsckOptions, FsckReport};

/// The files of [`populate`].
struct Files {
    /// Small files (3, 4, 5 KiB): their records hold their extents.
    small: Vec<u64>,
    /// A file of 12 one-block extents: an extent tree.
    big: u64,
    sym: u64,
}

fn fresh(bs: u32, blocks: u64) -> Arc<dyn Device> {
    let dev: Arc<dyn Device> = Arc::new(MemDevice::new(bs, blocks));
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    dev
}

fn small_data(i: usize) -> Vec<u8> {
    (0..3072 + 1024 * i).map(|x| (x % 251) as u8 ^ i as u8).collect()
}

fn populate(fs: &Fs) -> Files {
    let mut small = Vec::new();
    for i in 0..3 {
        let f = fs
            .create(ROOT_INO, format!("small{i}").as_bytes(), 0o644, 0, 0)
            .unwrap();
        fs.write(f.ino, 0, &small_data(i)).unwrap();
        small.push(f.ino);
    }
    let big = fs.create(ROOT_INO, b"big", 0o644, 0, 0).unwrap().ino;
    for k in 0..12u64 {
        fs.write(big, k * 8192, &[k as u8 + 1; 1024]).unwrap();
    }
    let sym = fs.symlink(ROOT_INO, b"sym", b"small0", 0, 0).unwrap().ino;
    fs.sync().unwrap();
    Files { small, big, sym }
}

fn check(dev: &Arc<dyn Device>) -> FsckReport {
    fsck::check(dev.clone(), &FsckOptions::default()).unwrap()
}

fn repair(dev: &Arc<dyn Device>) -> FsckReport {
    let opts = FsckOptions {
        repair: true,
        progress: false,
        data: false,
    };
    fsck::check(dev.clone(), &opts).unwrap()
}

fn has(r: &FsckReport, parts: &[&str]) -> bool {
    r.problems
        .iter()
        .any(|p| parts.iter().all(|part| p.contains(part)))
}

/// A populated volume, unified and closed.
fn closed(bs: u32) -> (Arc<dyn Device>, Files) {
    let dev = fresh(bs, 2048);
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    let files = populate(&fs);
    fs.unify().unwrap();
    fs.close().unwrap();
    (dev, files)
}

#[test]
fn inline_extents_check_clean_and_own_their_blocks() {
    for bs in [1024u32, 4096] {
        let dev = fresh(bs, 4096);
        let opts = OpenOptions {
            unify_log_blocks: 1 << 20,
            ..OpenOptions::default()
        };
        let fs = Fs::open(dev.clone(), opts).unwrap();
        let files = populate(&fs);
        drop(fs); // leave the log
        assert!(Superblock::load(dev.as_ref()).unwrap().inline_maps);
        for &ino in files.small.iter().chain([&files.sym]) {
            let a = record(&dev, ino);
            assert!(!a.inline.is_empty() && a.root.addr == 0, "inode {ino}: {a:?}");
            assert_eq!(a.blocks, a.inline.iter().map(|e| e.count).sum::<u64>());
        }
        let big = record(&dev, files.big);
        assert!(big.inline.is_empty() && big.blocks == 12, "{big:?}");

        let r = check(&dev);
        assert!(r.problems.is_empty(), "bs {bs}, with a log: {:#?}", r.problems);
        // Every block the records map is in use; repair finds nothing to do
        // (it would free them if fsck did not see them).
        let (be, _) = Backend::open(dev.clone(), true).unwrap();
        for &ino in &files.small {
            for e in record(&dev, ino).inline {
                assert!((e.pblock..e.pblock + e.count).all(|b| be.alloc.is_used(b)));
            }
        }
        drop(be);
        let r = repair(&dev);
        assert!(r.problems.is_empty() && r.repaired.is_empty(), "{r:#?}");

        let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
        for (i, &ino) in files.small.iter().enumerate() {
            assert_eq!(fs.read(ino, 0, 1 << 20).unwrap(), small_data(i));
        }
        assert_eq!(fs.readlink(files.sym).unwrap(), b"small0");
        fs.unify().unwrap();
        fs.close().unwrap();
        let r = check(&dev);
        assert!(r.problems.is_empty(), "bs {bs}, after close: {:#?}", r.problems);
        assert!(!record(&dev, files.small[0]).inline.is_empty());
    }
}

#[test]
fn an_inline_extent_on_another_files_blocks_is_named() {
    let (dev, files) = closed(1024);
    let (victim, owner) = (files.small[1], files.small[0]);
    let target = record(&dev, owner).inline[0].pblock;
    edit_inode(&dev, victim, |a| a.inline[0].pblock = target);
    let r = check(&dev);
    assert!(
        has(
            &r,
            &[
                "claimed twice",
                &format!("data of inode {owner} "),
                &format!("data of inode {victim} ")
            ]
        ),
        "{:#?}",
        r.problems
    );
    // Its old blocks are now owned by nothing.
    assert!(has(&r, &["leaked"]), "{:#?}", r.problems);
}

#[test]
fn an_inline_extent_on_a_free_block_is_named_and_repaired() {
    let (dev, files) = closed(1024);
    let victim = files.small[2];
    let old = record(&dev, victim).inline[0].clone();
    let free = 2048 - 64;
    edit_inode(&dev, victim, |a| a.inline[0].pblock = free);
    let r = check(&dev);
    let line = format!("referenced by data of inode {victim} from logical block 0 but marked free");
    assert!(old.count > 1, "{old:?}");
    assert!(has(&r, &[&format!("blocks {free}-"), &line]), "{:#?}", r.problems);
    assert!(
        has(&r, &[&format!("blocks {}-", old.pblock), "leaked"]),
        "{:#?}",
        r.problems
    );
    let r = repair(&dev);
    assert!(r.problems.is_empty() && r.repaired.len() == 2, "{r:#?}");
    let (be, _) = Backend::open(dev.clone(), true).unwrap();
    assert!((free..free + old.count).all(|b| be.alloc.is_used(b)));
    assert!(!(old.pblock..old.pblock + old.count).any(|b| be.alloc.is_used(b)));
}

#[test]
fn blocks_and_size_are_checked_against_inline_extents() {
    let (dev, files) = closed(1024);
    let (a, b) = (files.small[0], files.small[2]);
    let held = record(&dev, a).blocks;
    edit_inode(&dev, a, |x| x.blocks += 2);
    edit_inode(&dev, b, |x| x.size = 1);
    let r = check(&dev);
    let line = format!(
        "inode {a}: blocks attribute is {}, but its extents hold {held}",
        held + 2
    );
    assert!(has(&r, &[&line]), "{:#?}", r.problems);
    assert!(
        has(
            &r,
            &[
                &format!("inode {b}, its inode record: extent at logical block 0"),
                "reaches beyond the end of the file (size 1)"
            ]
        ),
        "{:#?}",
        r.problems
    );
    assert_eq!(r.problems.len(), 2, "{:#?}", r.problems);
    // The blocks attribute is repaired to what the record's extents hold.
    edit_inode(&dev, b, |x| x.size = 5 * 1024);
    let r = repair(&dev);
    assert!(r.problems.is_empty() && r.repaired.len() == 1, "{r:#?}");
    assert_eq!(record(&dev, a).blocks, held);
}

#[test]
fn an_inline_extent_outside_the_volume_is_named() {
    let (dev, files) = closed(1024);
    let victim = files.small[0];
    edit_inode(&dev, victim, |a| a.inline[0].pblock = 2048 + 5);
    let r = check(&dev);
    assert!(
        has(&r, &[&format!("inode {victim}"), "outside the volume"]),
        "{:#?}",
        r.problems
    );
}

#[test]
fn inline_extents_need_the_superblock_flag() {
    let (dev, files) = closed(4096);
    let mut sb = Superblock::load(dev.as_ref()).unwrap();
    sb.inline_maps = false;
    dev.write(sb.home(), &sb.encode()).unwrap();
    assert!(!Superblock::load(dev.as_ref()).unwrap().inline_maps);
    let r = check(&dev);
    for ino in files.small.iter().chain([&files.sym]) {
        assert!(
            has(
                &r,
                &[&format!("inode {ino}: its record holds extents"), "INLINE_MAPS"]
            ),
            "{:#?}",
            r.problems
        );
    }
    assert!(!has(&r, &[&format!("inode {}:", files.big)]), "{:#?}", r.problems);
}
