//! Scenario: `Fs::resize`. Growing makes the new blocks usable at once
//! and keeps everything; shrinking moves everything past the new end below
//! it — file data, preallocated extents, symlinks, xattr files, clones,
//! the tree nodes of files, directories and the inode table, the log and
//! the bitmap — and cuts the tail; a snapshot holding blocks there refuses
//! it, naming the snapshot, before anything moves. After each, a reopen
//! (replay) reads the same contents and fsck is clean.

use std::sync::Arc;
use tux3::device::{Device, MemDevice};
use tux3::{Errno, FormatOptions, Fs, Ino, OpenOptions, XattrMode, ROOT_INO};

const BS: u32 = 1024;

fn fresh(blocks: u64) -> Arc<dyn Device> {
    let dev: Arc<dyn Device> = Arc::new(MemDevice::new(BS, blocks));
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    dev
}

fn open(dev: &Arc<dyn Device>) -> Fs {
    Fs::open(dev.clone(), OpenOptions::default()).unwrap()
}

fn fsck_clean(dev: &Arc<dyn Device>) {
    let r = tux3_tools::fsck::check(dev.clone(), &Default::default()).unwrap();
    assert!(r.problems.is_empty(), "fsck: {:?}", r.problems);
}

fn content(i: usize, kib: usize) -> Vec<u8> {
    (0..kib * 1024).map(|b| (b / 1024 + i * 13) as u8).collect()
}

/// Write files of `kib` KiB until ENOSPC; returns how many fit.
fn fill(fs: &Fs, prefix: &str, kib: usize) -> usize {
    for i in 0.. {
        let name = format!("{prefix}{i}");
        let ino = match fs.create(ROOT_INO, name.as_bytes(), 0o644, 0, 0) {
            Ok(e) => e.ino,
            Err(e) if e.errno() == Errno::ENOSPC => return i,
            Err(e) => panic!("{e}"),
        };
        match fs.write(ino, 0, &content(i, kib)).and_then(|_| fs.sync()) {
            Ok(()) => {}
            Err(e) if e.errno() == Errno::ENOSPC => {
                fs.unlink(ROOT_INO, name.as_bytes()).unwrap();
                return i;
            }
            Err(e) => panic!("{e}"),
        }
    }
    unreachable!()
}

/// Files `{prefix}{i}` for `i` in `r`, each `content(i, kib)`.
fn write_files(fs: &Fs, prefix: &str, r: std::ops::Range<usize>, kib: usize) {
    for i in r {
        let ino = fs
            .create(ROOT_INO, format!("{prefix}{i}").as_bytes(), 0o644, 0, 0)
            .unwrap()
            .ino;
        fs.write(ino, 0, &content(i, kib)).unwrap();
    }
}

fn check_files(fs: &Fs, prefix: &str, n: usize, kib: usize) {
    check_range(fs, prefix, 0..n, kib);
}

#[test]
fn growing_adds_free_blocks_and_keeps_everything() {
    let dev = fresh(4096);
    let fs = open(&dev);
    let before = fill(&fs, "a", 256);
    assert!(before >= 10, "{before} files");
    let r = fs.resize(40_000).unwrap();
    assert_eq!((r.old_blocks, r.new_blocks), (4096, 40_000));
    assert_eq!(dev.block_count(), 40_000);
    let st = fs.statfs().unwrap();
    assert_eq!(st.blocks, 40_000);
    let after = fill(&fs, "b", 256);
    assert!(after > 100, "{after} more files fit");
    fs.close().unwrap();
    fsck_clean(&dev);
    let fs = open(&dev);
    check_files(&fs, "a", before, 256);
    check_files(&fs, "b", after, 256);
    fs.close().unwrap();
}

#[test]
fn shrinking_moves_data_past_the_new_end() {
    let dev = fresh(40_000);
    let fs = open(&dev);
    // Files written first lie lowest.
    write_files(&fs, "k", 0..10, 256);
    // About 90% full.
    let n = 130;
    write_files(&fs, "a", 0..n, 256);
    fs.sync().unwrap();
    // More is in use than fits: refused before anything changes.
    assert_eq!(fs.resize(20_000).unwrap_err().errno(), Errno::ENOSPC);
    assert_eq!(dev.block_count(), 40_000);
    // The first half goes: what is left of the a-files lies in the upper
    // half of the volume, past the new end.
    for i in 0..n / 2 {
        fs.unlink(ROOT_INO, format!("a{i}").as_bytes()).unwrap();
    }
    fs.sync().unwrap();
    let r = fs.resize(20_000).unwrap();
    assert_eq!((r.old_blocks, r.new_blocks), (40_000, 20_000));
    assert!(
        r.moved_blocks > 10_000,
        "{} blocks moved: the a-files lay past the end",
        r.moved_blocks
    );
    assert_eq!(dev.block_count(), 20_000);
    assert_eq!(fs.statfs().unwrap().blocks, 20_000);
    check_files(&fs, "k", 10, 256);
    check_range(&fs, "a", n / 2..n, 256);
    fs.close().unwrap();
    fsck_clean(&dev);
    let fs = open(&dev);
    check_files(&fs, "k", 10, 256);
    check_range(&fs, "a", n / 2..n, 256);
    // The volume works at its new size.
    let more = fill(&fs, "d", 64);
    assert!(more > 0);
    fs.close().unwrap();
    fsck_clean(&dev);
}

/// The blocks a shrink moves keep the checksums the read that fetched
/// them checked: no commit computes them again (under the delta guard,
/// where every other operation would wait for it), and each is right (a
/// cold open reads every moved block back through its checksum).
#[test]
fn a_shrink_takes_the_checksums_its_read_checked() {
    let dev = fresh(16_000);
    let fs = open(&dev);
    write_files(&fs, "a", 0..40, 256);
    fs.sync().unwrap();
    for i in (0..40).step_by(2) {
        fs.unlink(ROOT_INO, format!("a{i}").as_bytes()).unwrap();
    }
    fs.close().unwrap();
    // A cold cache: every block moved is read from the device.
    let fs = open(&dev);
    let before = fs.stats().sums_computed;
    let r = fs.resize(8_000).unwrap();
    assert!(r.moved_blocks > 1_000, "{} blocks moved", r.moved_blocks);
    assert_eq!(
        fs.stats().sums_computed,
        before,
        "the commits computed checksums the shrink's read had checked"
    );
    fs.close().unwrap();
    fsck_clean(&dev);
    let fs = open(&dev);
    for i in (1..40).step_by(2) {
        let ino = fs.lookup(ROOT_INO, format!("a{i}").as_bytes()).unwrap().ino;
        assert!(fs.read(ino, 0, 256 * 1024).unwrap() == content(i, 256), "a{i}");
    }
    fs.close().unwrap();
}

fn check_range(fs: &Fs, prefix: &str, r: std::ops::Range<usize>, kib: usize) {
    for i in r {
        let ino = fs
            .lookup(ROOT_INO, format!("{prefix}{i}").as_bytes())
            .unwrap()
            .ino;
        assert_eq!(
            fs.read(ino, 0, kib * 1024).unwrap(),
            content(i, kib),
            "{prefix}{i}"
        );
    }
}

/// Everything the shrink test puts past the new end, and reads back.
struct Laid {
    dir: Ino,
    names: usize,
    frag: Ino,
    frag_model: Vec<u8>,
    clone_src: Ino,
    clone_dst: Ino,
    prealloc: Ino,
    link: Ino,
    xattr: Ino,
}

fn big_value(seed: u8) -> Vec<u8> {
    (0..6000).map(|i| (i as u8).wrapping_mul(7) ^ seed).collect()
}

/// A directory of many names (its tree and the inode table grow branches),
/// a file in many extents (its extent tree too), a clone, a preallocated
/// range, a long symlink and an xattr file: all written after `filler`,
/// so past the new end once it goes.
fn lay(fs: &Fs) -> Laid {
    let dir = fs.mkdir(ROOT_INO, b"dir", 0o755, 0, 0).unwrap().ino;
    let names = 1500;
    for i in 0..names {
        let ino = fs
            .create(
                dir,
                format!("entry-with-a-longish-name-{i:05}").as_bytes(),
                0o644,
                0,
                0,
            )
            .unwrap()
            .ino;
        fs.write(ino, 0, format!("small {i}").as_bytes()).unwrap();
    }
    // Two files written a block at a time in turn, with commits between:
    // each lies in many one-block extents.
    let frag = fs.create(ROOT_INO, b"frag", 0o644, 0, 0).unwrap().ino;
    let other = fs.create(ROOT_INO, b"other", 0o644, 0, 0).unwrap().ino;
    let mut frag_model = Vec::new();
    for b in 0..600u64 {
        let block: Vec<u8> = (0..1024).map(|k| (b as usize * 31 + k) as u8).collect();
        fs.write(frag, b * 1024, &block).unwrap();
        fs.write(other, b * 1024, &block).unwrap();
        frag_model.extend_from_slice(&block);
        if b % 4 == 3 {
            fs.sync().unwrap();
        }
    }
    let clone_src = fs.create(ROOT_INO, b"clone-src", 0o644, 0, 0).unwrap().ino;
    fs.write(clone_src, 0, &content(7, 64)).unwrap();
    fs.sync().unwrap();
    let clone_dst = fs.create(ROOT_INO, b"clone-dst", 0o644, 0, 0).unwrap().ino;
    fs.clone_range(clone_src, 0, clone_dst, 0, 64 * 1024).unwrap();
    let prealloc = fs.create(ROOT_INO, b"prealloc", 0o644, 0, 0).unwrap().ino;
    fs.write(prealloc, 0, &content(3, 8)).unwrap();
    fs.fallocate(prealloc, libc::FALLOC_FL_KEEP_SIZE, 8 * 1024, 200 * 1024)
        .unwrap();
    let target = vec![b't'; 3000];
    let link = fs.symlink(ROOT_INO, b"link", &target, 0, 0).unwrap().ino;
    let xattr = fs.create(ROOT_INO, b"xattr", 0o644, 0, 0).unwrap().ino;
    fs.setxattr(xattr, b"user.big", &big_value(1), XattrMode::Create)
        .unwrap();
    fs.setxattr(xattr, b"user.big2", &big_value(2), XattrMode::Create)
        .unwrap();
    fs.sync().unwrap();
    Laid {
        dir,
        names,
        frag,
        frag_model,
        clone_src,
        clone_dst,
        prealloc,
        link,
        xattr,
    }
}

fn check_laid(fs: &Fs, l: &Laid) {
    for i in (0..l.names).step_by(7) {
        let ino = fs
            .lookup(l.dir, format!("entry-with-a-longish-name-{i:05}").as_bytes())
            .unwrap()
            .ino;
        assert_eq!(fs.read(ino, 0, 100).unwrap(), format!("small {i}").as_bytes());
    }
    let mut seen = 0;
    let mut pos = 0;
    loop {
        let batch = fs.readdir(l.dir, pos, 256).unwrap();
        let Some(last) = batch.last() else { break };
        pos = last.next;
        seen += batch.iter().filter(|e| e.name.starts_with(b"entry-")).count();
    }
    assert_eq!(seen, l.names, "every name in the directory");
    assert_eq!(fs.read(l.frag, 0, 600 * 1024).unwrap(), l.frag_model);
    assert_eq!(fs.read(l.clone_src, 0, 64 * 1024).unwrap(), content(7, 64));
    assert_eq!(fs.read(l.clone_dst, 0, 64 * 1024).unwrap(), content(7, 64));
    assert_eq!(fs.read(l.prealloc, 0, 8 * 1024).unwrap(), content(3, 8));
    let a = fs.getattr(l.prealloc).unwrap();
    assert_eq!(a.size, 8 * 1024, "KEEP_SIZE preallocation kept its size");
    assert!(
        a.blocks * 512 >= 208 * 1024,
        "the preallocation stays: {} sectors",
        a.blocks
    );
    assert_eq!(fs.readlink(l.link).unwrap(), vec![b't'; 3000]);
    assert_eq!(fs.getxattr(l.xattr, b"user.big").unwrap(), big_value(1));
    assert_eq!(fs.getxattr(l.xattr, b"user.big2").unwrap(), big_value(2));
}

#[test]
fn shrinking_moves_tree_nodes_preallocation_clones_symlinks_and_xattrs() {
    let dev = fresh(40_000);
    let fs = open(&dev);
    let filler = fs.create(ROOT_INO, b"filler", 0o644, 0, 0).unwrap().ino;
    fs.write(filler, 0, &content(1, 22 * 1024)).unwrap();
    fs.sync().unwrap();
    let laid = lay(&fs);
    fs.unlink(ROOT_INO, b"filler").unwrap();
    fs.sync().unwrap();
    let r = fs.resize(20_000).unwrap();
    assert!(r.moved_blocks > 2000, "{} blocks moved", r.moved_blocks);
    assert_eq!(dev.block_count(), 20_000);
    check_laid(&fs, &laid);
    fs.close().unwrap();
    fsck_clean(&dev);
    let fs = open(&dev);
    check_laid(&fs, &laid);
    // Shrink again, to just above what is in use.
    let st = fs.statfs().unwrap();
    let used = st.blocks - st.blocks_free;
    fs.resize(used + 3000).unwrap();
    check_laid(&fs, &laid);
    fs.close().unwrap();
    fsck_clean(&dev);
}

#[test]
fn a_snapshot_holding_blocks_past_the_end_refuses_the_shrink_by_name() {
    let dev = fresh(40_000);
    let fs = open(&dev);
    let filler = fs.create(ROOT_INO, b"filler", 0o644, 0, 0).unwrap().ino;
    fs.write(filler, 0, &content(1, 22 * 1024)).unwrap();
    let late = fs.create(ROOT_INO, b"late", 0o644, 0, 0).unwrap().ino;
    fs.write(late, 0, &content(2, 1024)).unwrap();
    fs.sync().unwrap();
    fs.unlink(ROOT_INO, b"filler").unwrap();
    fs.sync().unwrap();
    // It holds `late`, past the new end.
    fs.snapshot_create(b"before-shrink").unwrap();
    let e = fs.resize(20_000).unwrap_err();
    assert_eq!(e.errno(), Errno::EBUSY);
    assert!(e.to_string().contains("before-shrink"), "{e}");
    assert_eq!(dev.block_count(), 40_000);
    // Refused before anything moved: the shrink is as if never asked.
    fs.close().unwrap();
    fsck_clean(&dev);
    let fs = open(&dev);
    fs.snapshot_delete(b"before-shrink").unwrap();
    fs.resize(20_000).unwrap();
    let late = fs.lookup(ROOT_INO, b"late").unwrap().ino;
    assert_eq!(fs.read(late, 0, 1024 * 1024).unwrap(), content(2, 1024));
    fs.close().unwrap();
    fsck_clean(&dev);
}

/// Clones stay shared through a shrink: blocks a file and its clones map
/// past the new end are moved once and every clone pointed at the copy
/// (copying each would need eleven times the room below the end, more
/// than the volume keeps: ENOSPC). A part one clone overwrote is its own
/// and moves with it; a clone of half the file shares that half.
#[test]
fn a_shrink_keeps_clones_shared() {
    let dev = fresh(40_000);
    let fs = open(&dev);
    let filler = fs.create(ROOT_INO, b"filler", 0o644, 0, 0).unwrap().ino;
    fs.write(filler, 0, &content(1, 22 * 1024)).unwrap();
    fs.sync().unwrap();
    let src = fs.create(ROOT_INO, b"src", 0o644, 0, 0).unwrap().ino;
    let data = content(3, 4096);
    fs.write(src, 0, &data).unwrap();
    fs.sync().unwrap();
    let clone = |name: &str, from: u64, len: u64| {
        let ino = fs.create(ROOT_INO, name.as_bytes(), 0o644, 0, 0).unwrap().ino;
        assert_eq!(fs.clone_range(src, from, ino, 0, len).unwrap(), len);
        ino
    };
    let clones: Vec<Ino> = (0..10).map(|i| clone(&format!("clone{i}"), 0, 4 << 20)).collect();
    let half = clone("half", 2 << 20, 2 << 20);
    let mut changed = data.clone();
    changed[1 << 20..(1 << 20) + (64 << 10)].fill(0xa5);
    fs.write(clones[3], 1 << 20, &changed[1 << 20..(1 << 20) + (64 << 10)])
        .unwrap();
    fs.unlink(ROOT_INO, b"filler").unwrap();
    fs.sync().unwrap();
    let used = |fs: &Fs| {
        let st = fs.statfs().unwrap();
        st.blocks - st.blocks_free
    };
    let (used_before, saved_before) = (used(&fs), fs.sharing().saved_blocks);
    assert_eq!(saved_before, 10 * 4096 + 2048 - 64);
    let r = fs.resize(20_000).unwrap();
    assert!(r.moved_blocks >= 4096 + 64, "{} blocks moved", r.moved_blocks);
    assert_eq!(
        fs.sharing().saved_blocks,
        saved_before,
        "every clone still shares"
    );
    assert!(
        used(&fs) <= used_before + 64,
        "{} blocks in use after, {used_before} before",
        used(&fs)
    );
    let check = |fs: &Fs| {
        assert_eq!(fs.read(src, 0, data.len()).unwrap(), data);
        for (i, &c) in clones.iter().enumerate() {
            let want = if i == 3 { &changed } else { &data };
            assert!(fs.read(c, 0, data.len()).unwrap() == *want, "clone{i}");
        }
        assert!(fs.read(half, 0, 2 << 20).unwrap() == data[2 << 20..], "half");
    };
    check(&fs);
    fs.close().unwrap();
    fsck_clean(&dev);
    let fs = open(&dev);
    check(&fs);
    assert_eq!(fs.sharing().saved_blocks, saved_before);
    fs.close().unwrap();
}
