//! Scenario: `Fs::resize`. Growing makes the new blocks usable at once
//! and keeps everything; shrinking cuts a free tail, moving the log and
//! the bitmap out of it, and refuses — changing nothing — when file data
//! lies past the new end. After each, a reopen (replay) reads the same
//! contents and fsck is clean.

use std::sync::Arc;
use tux3::device::{Device, MemDevice};
use tux3::{Errno, FormatOptions, Fs, OpenOptions, ROOT_INO};

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

fn check_files(fs: &Fs, prefix: &str, n: usize, kib: usize) {
    for i in 0..n {
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
fn shrinking_cuts_a_free_tail_and_refuses_to_cut_data() {
    let dev = fresh(40_000);
    let fs = open(&dev);
    // Files written first lie lowest: they stay through the shrink.
    for i in 0..10 {
        let ino = fs
            .create(ROOT_INO, format!("k{i}").as_bytes(), 0o644, 0, 0)
            .unwrap()
            .ino;
        fs.write(ino, 0, &content(i, 256)).unwrap();
    }
    // About 90% full.
    let n = 130;
    for i in 0..n {
        let ino = fs
            .create(ROOT_INO, format!("a{i}").as_bytes(), 0o644, 0, 0)
            .unwrap()
            .ino;
        fs.write(ino, 0, &content(i, 256)).unwrap();
    }
    fs.sync().unwrap();
    // More is in use than fits: refused before anything changes.
    assert_eq!(fs.resize(20_000).unwrap_err().errno(), Errno::ENOSPC);
    for i in 0..n / 2 {
        fs.unlink(ROOT_INO, format!("a{i}").as_bytes()).unwrap();
    }
    fs.sync().unwrap();
    // It would fit, but data lies past the new end: refused, and
    // the tail stays usable.
    assert_eq!(fs.resize(20_000).unwrap_err().errno(), Errno::EBUSY);
    assert_eq!(fs.statfs().unwrap().blocks, 40_000);
    fs.unlink(ROOT_INO, format!("a{}", n - 1).as_bytes()).unwrap();
    fs.sync().unwrap();
    let more = fill(&fs, "c", 256);
    assert!(
        more >= 10,
        "the refused shrink left the tail usable: {more} files"
    );
    for i in 0..more {
        fs.unlink(ROOT_INO, format!("c{i}").as_bytes()).unwrap();
    }
    for i in n / 2..n - 1 {
        fs.unlink(ROOT_INO, format!("a{i}").as_bytes()).unwrap();
    }
    fs.sync().unwrap();
    let r = fs.resize(20_000).unwrap();
    assert_eq!((r.old_blocks, r.new_blocks), (40_000, 20_000));
    assert_eq!(dev.block_count(), 20_000);
    assert_eq!(fs.statfs().unwrap().blocks, 20_000);
    check_files(&fs, "k", 10, 256);
    let more = fill(&fs, "d", 256);
    fs.close().unwrap();
    fsck_clean(&dev);
    let fs = open(&dev);
    check_files(&fs, "k", 10, 256);
    check_files(&fs, "d", more, 256);
    fs.close().unwrap();
}
