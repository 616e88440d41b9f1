//! fsck on volumes built through the `Fs` API: clean with a log left behind
//! (dropped without close), clean after close, and damage it must find —
//! a flipped bit in a metadata block, a wrong link count and `blocks`
//! attribute and a leaked block (which `repair` then fixes).

use std::sync::Arc;
use tux3::device::{Device, MemDevice};
use tux3::structures::btree::node::decode;
use tux3::structures::btree::{Node, Tree, TreeKind};
use tux3::structures::inode::InodeAttrs;
use tux3::structures::superblock::Superblock;
use tux3::{FormatOptions, Fs, OpenOptions, RenameFlags, ROOT_INO};
use tux3_tools::{dump, fsck};

fn fresh(bs: u32, blocks: u64) -> (Arc<MemDevice>, Arc<dyn Device>) {
    let mem = Arc::new(MemDevice::new(bs, blocks));
    let dev: Arc<dyn Device> = mem.clone();
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    (mem, dev)
}

fn check(dev: &Arc<dyn Device>) -> fsck::FsckReport {
    fsck::check(dev.clone(), &fsck::FsckOptions::default()).unwrap()
}

fn assert_clean(dev: &Arc<dyn Device>, when: &str) {
    let r = check(dev);
    assert!(r.problems.is_empty(), "{when}: {:#?}", r.problems);
    assert!(r.inodes > 0 && r.blocks_used > 0, "{when}: {r:?}");
}

/// Files, directories, hard links, symlinks, sparse offsets, deletes,
/// renames, several syncs and a unify; then more changes and a sync, and
/// the volume is dropped without close so the log holds deltas.
fn populate(dev: &Arc<dyn Device>) -> Fs {
    let opts = OpenOptions {
        unify_log_blocks: 1 << 20,
        ..OpenOptions::default()
    };
    let fs = Fs::open(dev.clone(), opts).unwrap();
    let a = fs.mkdir(ROOT_INO, b"a", 0o755, 0, 0).unwrap();
    let b = fs.mkdir(a.ino, b"b", 0o755, 0, 0).unwrap();
    let mut files = Vec::new();
    for i in 0..60u32 {
        let dir = [ROOT_INO, a.ino, b.ino][i as usize % 3];
        let f = fs
            .create(dir, format!("file{i}").as_bytes(), 0o644, 0, 0)
            .unwrap();
        let data: Vec<u8> = (0..(i * 500)).map(|x| (x % 253) as u8).collect();
        fs.write(f.ino, 0, &data).unwrap();
        files.push((dir, f.ino));
    }
    fs.sync().unwrap();
    let big = fs.create(ROOT_INO, b"sparse", 0o644, 0, 0).unwrap();
    fs.write(big.ino, 5 << 30, b"far away").unwrap();
    fs.write(big.ino, 1 << 20, &[7u8; 10_000]).unwrap();
    fs.link(files[0].1, b.ino, b"hardlink").unwrap();
    fs.link(files[0].1, ROOT_INO, b"hardlink2").unwrap();
    fs.symlink(a.ino, b"sym", b"../file0", 0, 0).unwrap();
    fs.mknod(ROOT_INO, b"fifo", libc::S_IFIFO | 0o644, 0, 0, 0)
        .unwrap();
    fs.sync().unwrap();
    for i in (0..60u32).step_by(4) {
        let dir = [ROOT_INO, a.ino, b.ino][i as usize % 3];
        fs.unlink(dir, format!("file{i}").as_bytes()).unwrap();
    }
    fs.rename(a.ino, b"b", ROOT_INO, b"b-moved", RenameFlags::default())
        .unwrap();
    fs.rename(ROOT_INO, b"file3", b.ino, b"file3-moved", RenameFlags::default())
        .unwrap();
    fs.sync().unwrap();
    fs.unify().unwrap();
    let c = fs.mkdir(b.ino, b"c", 0o700, 0, 0).unwrap();
    for i in 0..20u32 {
        let f = fs
            .create(c.ino, format!("late{i}").as_bytes(), 0o600, 0, 0)
            .unwrap();
        fs.write(f.ino, (i as u64) * 4096, b"late data").unwrap();
    }
    fs.unlink(ROOT_INO, b"hardlink2").unwrap();
    fs.setattr(
        big.ino,
        &tux3::SetAttr {
            size: Some(3 << 20),
            ..Default::default()
        },
    )
    .unwrap();
    fs.rmdir(a.ino, b"nonexistent").unwrap_err();
    fs.sync().unwrap();
    fs.rename(b.ino, b"c", ROOT_INO, b"c", RenameFlags::default())
        .unwrap();
    fs.sync().unwrap();
    fs
}

#[test]
fn clean_with_a_log_and_after_close() {
    for bs in [1024u32, 4096] {
        let (_mem, dev) = fresh(bs, 8192);
        assert_clean(&dev, "fresh volume");
        let fs = populate(&dev);
        assert!(fs.stats().log_blocks > 0);
        drop(fs); // leave the log
        assert_clean(&dev, "after drop with a log");
        let text = dump::report(dev.clone()).unwrap();
        assert!(text.contains("commit"), "{text}");
        assert!(text.contains("largest free run"), "{text}");
        let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
        fs.close().unwrap();
        assert_clean(&dev, "after close");
        let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
        fs.unify().unwrap();
        fs.close().unwrap();
        assert_clean(&dev, "after unify and close");
    }
}

#[test]
fn a_flipped_bit_in_metadata_is_named() {
    let (mem, dev) = fresh(4096, 4096);
    drop(populate(&dev));
    let meta = fsck::metadata_blocks(dev.clone()).unwrap();
    assert!(meta.len() > 8, "{meta:?}");
    let image = mem.image();
    // A few metadata blocks spread over the list (superblocks are first).
    for &block in [meta[2], meta[meta.len() / 2], meta[meta.len() - 1]].iter() {
        let mut img = image.clone();
        img[block as usize * 4096 + 100] ^= 0x04;
        let dev: Arc<dyn Device> = Arc::new(MemDevice::from_image(4096, img));
        let r = check(&dev);
        let needle = format!("block {block}");
        // The last committed log block, damaged, looks like a torn write
        // of a crash: it is named in a note rather than a problem.
        assert!(
            r.problems.iter().chain(&r.notes).any(|p| p.contains(&needle)),
            "block {block} not named: {:#?}",
            r.problems
        );
    }
}

#[test]
fn wrong_counts_and_leaks_are_found_and_repaired() {
    let (mem, dev) = fresh(1024, 2048);
    let fs = populate(&dev);
    let file = fs.lookup(ROOT_INO, b"file6").unwrap();
    let other = fs.lookup(ROOT_INO, b"file9").unwrap();
    fs.unify().unwrap();
    fs.close().unwrap();
    assert_clean(&dev, "before damage");
    // Hand-made damage with valid checksums: two inode records and one bit
    // of the bitmap.
    let mut img = mem.image();
    edit_inode(&mut img, &dev, file.ino, |a| a.nlink = 5);
    edit_inode(&mut img, &dev, other.ino, |a| a.blocks += 3);
    edit_inode(&mut img, &dev, ROOT_INO, |a| a.nlink = 9);
    let sb = Superblock::load(dev.as_ref()).unwrap();
    let bitmap_addr = bitmap_block_addr(&dev, &sb);
    let at = bitmap_addr as usize * 1024;
    let bit = |img: &[u8], b: u64| img[at + 32 + (b / 8) as usize] & (1 << (b % 8)) != 0;
    let free = (100..2048u64).rev().find(|&b| !bit(&img, b)).unwrap();
    img[at + 32 + (free / 8) as usize] |= 1 << (free % 8);
    reseal(&mut img[at..at + 1024]);
    let bad: Arc<dyn Device> = Arc::new(MemDevice::from_image(1024, img));

    let r = check(&bad);
    let has = |r: &fsck::FsckReport, what: &str| r.problems.iter().any(|p| p.contains(what));
    assert!(
        has(&r, &format!("block {free} (1 block): marked in use")),
        "{:#?}",
        r.problems
    );
    assert!(
        has(&r, &format!("inode {}: link count is 5, should be 1", file.ino)),
        "{:#?}",
        r.problems
    );
    assert!(
        has(&r, &format!("inode {}: blocks attribute", other.ino)),
        "{:#?}",
        r.problems
    );
    assert!(has(&r, "inode 1: link count is 9"), "{:#?}", r.problems);
    assert_eq!(r.problems.len(), 4, "{:#?}", r.problems);

    let opts = fsck::FsckOptions {
        repair: true,
        progress: false,
        data: false,
    };
    let r = fsck::check(bad.clone(), &opts).unwrap();
    assert!(r.problems.is_empty(), "{:#?}", r.problems);
    assert_eq!(r.repaired.len(), 4, "{:#?}", r.repaired);
    assert_clean(&bad, "after repair");
    let fs = Fs::open(bad.clone(), OpenOptions::default()).unwrap();
    assert_eq!(fs.getattr(file.ino).unwrap().nlink, 1);
    assert_eq!(fs.getattr(ROOT_INO).unwrap().nlink, 2 + 3);
    fs.close().unwrap();
}

#[test]
fn a_damaged_older_superblock_copy_is_found_and_rewritten() {
    let (mem, dev) = fresh(4096, 1024);
    drop(populate(&dev));
    let sb = Superblock::load(dev.as_ref()).unwrap();
    let older = 1 - sb.home();
    let mut img = mem.image();
    img[older as usize * 4096 + 40] ^= 1;
    let bad: Arc<dyn Device> = Arc::new(MemDevice::from_image(4096, img));
    let r = check(&bad);
    assert_eq!(r.problems.len(), 1, "{:#?}", r.problems);
    assert!(
        r.problems[0].starts_with(&format!("block {older}: ")),
        "{:#?}",
        r.problems
    );
    let opts = fsck::FsckOptions {
        repair: true,
        progress: false,
        data: false,
    };
    let r = fsck::check(bad.clone(), &opts).unwrap();
    assert!(r.problems.is_empty() && r.repaired.len() == 1, "{r:#?}");
}

#[test]
fn a_bad_inode_table_leaf_hides_only_its_own_inodes() {
    let (mem, dev) = fresh(1024, 2048);
    let fs = populate(&dev);
    let other = fs.lookup(ROOT_INO, b"file9").unwrap();
    fs.unify().unwrap();
    fs.close().unwrap();
    let leaves = itable_leaves(&dev);
    assert!(leaves.len() > 2, "{leaves:?}");
    let home = leaves
        .iter()
        .find(|(_, inos)| inos.contains(&other.ino))
        .unwrap()
        .0;
    let bad = leaves.iter().map(|l| l.0).find(|&a| a != home).unwrap();
    let mut img = mem.image();
    edit_inode(&mut img, &dev, other.ino, |a| a.blocks += 1);
    img[bad as usize * 1024 + 200] ^= 0x10;
    let dev: Arc<dyn Device> = Arc::new(MemDevice::from_image(1024, img));
    let r = check(&dev);
    let has = |what: &str| r.problems.iter().any(|p| p.contains(what));
    assert!(has(&format!("block {bad}: ")), "{:#?}", r.problems);
    assert!(
        has(&format!("inode {}: blocks attribute", other.ino)),
        "{:#?}",
        r.problems
    );
    // Nothing is repaired while the inode table cannot be read whole, except
    // what does not depend on it.
    let opts = fsck::FsckOptions {
        repair: true,
        progress: false,
        data: false,
    };
    let r = fsck::check(dev.clone(), &opts).unwrap();
    assert!(
        r.problems.iter().any(|p| p.contains(&format!("block {bad}: "))),
        "{r:#?}"
    );
}

/// Every inode-table leaf of a unified volume and the inodes it holds.
fn itable_leaves(dev: &Arc<dyn Device>) -> Vec<(u64, Vec<u64>)> {
    let sb = Superblock::load(dev.as_ref()).unwrap();
    let mut t = Tree::open(0, TreeKind::Itable, sb.itable);
    let mut out = Vec::new();
    t.visit(dev.as_ref(), &mut |addr, _, _, n| {
        if let Node::Leaf(l) = n {
            out.push((addr, l.entries.iter().map(|e| e.0).collect()));
        }
        Ok(())
    })
    .unwrap();
    out
}

/// Address of bitmap block 0, from the bitmap file's extent tree.
fn bitmap_block_addr(dev: &Arc<dyn Device>, sb: &Superblock) -> u64 {
    let mut t = Tree::open(tux3::backend::BITMAP_INO, TreeKind::Extents, sb.bitmap);
    let e = tux3::structures::extent::lookup(&mut t, dev.as_ref(), 0)
        .unwrap()
        .unwrap();
    e.pblock
}

/// Change inode `ino`'s record in its inode-table leaf inside `img` (a
/// unified volume without a log, as `dev` holds it).
fn edit_inode(img: &mut [u8], dev: &Arc<dyn Device>, ino: u64, change: impl FnOnce(&mut InodeAttrs)) {
    let sb = Superblock::load(dev.as_ref()).unwrap();
    let bs = dev.block_size() as usize;
    let leaf_addr = itable_leaves(dev)
        .into_iter()
        .find(|(_, inos)| inos.contains(&ino))
        .map(|l| l.0);
    let addr = leaf_addr.expect("inode in the inode table");
    let at = addr as usize * bs;
    let node = decode(&img[at..at + bs], addr, 0, TreeKind::Itable, 0, sb.block_count).unwrap();
    let Node::Leaf(mut leaf) = node else {
        panic!("not a leaf")
    };
    let e = leaf.entries.iter_mut().find(|(k, _)| *k == ino).unwrap();
    let mut a = InodeAttrs::decode(
        &e.1,
        ino,
        addr,
        &tux3::codec::Bounds::new(bs as u32, sb.block_count),
    )
    .unwrap();
    change(&mut a);
    e.1 = a.encode();
    img[at..at + bs].copy_from_slice(&leaf.encode(addr, 0, TreeKind::Itable, bs));
}

/// Recompute the common header checksum of a metadata block.
fn reseal(block: &mut [u8]) {
    block[4..8].copy_from_slice(&[0; 4]);
    let crc = tux3::codec::block_crc(block);
    block[4..8].copy_from_slice(&crc.to_le_bytes());
}
