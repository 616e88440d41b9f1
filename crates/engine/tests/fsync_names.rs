//! Scenario: fast fsync next to name changes. An fsync commit logs the
//! fsynced inode with the closure of its pending name changes — the entries
//! it gained or lost, the renames and unlinks that emptied a position its
//! new name takes, and the inodes those name (whole, or as orphans when no
//! name is left) — so a rename cycle or an unlink and re-create costs one
//! flush, not a full delta commit. A crash keeps exactly that, fsck-clean.

use std::sync::Arc;
use tux3::device::{Device, MemDevice};
use tux3::{Errno, Error, FormatOptions, Fs, OpenOptions, RenameFlags, ROOT_INO};

fn fresh() -> Arc<dyn Device> {
    let dev: Arc<dyn Device> = Arc::new(MemDevice::new(4096, 8192));
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    dev
}

fn open(dev: &Arc<dyn Device>) -> Fs {
    Fs::open(dev.clone(), OpenOptions::default()).unwrap()
}

/// fsync `ino` and check it took a fast fsync commit with one flush.
fn fast_fsync(fs: &Fs, ino: u64) {
    let (s0, c0) = (fs.stats(), fs.counters());
    fs.fsync(ino, false).unwrap();
    let (s1, c1) = (fs.stats(), fs.counters());
    assert_eq!(s1.deltas, s0.deltas, "the fsync of {ino} took a full commit");
    assert_eq!(s1.fsyncs, s0.fsyncs + 1, "no fsync commit for {ino}");
    assert_eq!(c1.flushes - c0.flushes, 1, "flushes for the fsync of {ino}");
}

/// fsck finds no problem (orphans of the crash are notes, not problems).
fn clean(dev: &Arc<dyn Device>) -> tux3_tools::fsck::FsckReport {
    let r = tux3_tools::fsck::check(dev.clone(), &Default::default()).unwrap();
    assert!(r.problems.is_empty(), "{:?}", r.problems);
    r
}

fn names(fs: &Fs, dir: u64) -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = fs
        .readdir(dir, 0, 1000)
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    v.sort();
    v
}

#[test]
fn rename_cycle_takes_fast_fsyncs_and_survives_a_crash() {
    let dev = fresh();
    let fs = open(&dev);
    fs.sync().unwrap();
    let cycles = 20u8;
    let mut last = 0;
    let c0 = fs.counters();
    for c in 0..cycles {
        let a = fs.create(ROOT_INO, b"foo.new", 0o644, 0, 0).unwrap();
        fs.open_handle(a.ino).unwrap();
        fs.write(a.ino, 0, &vec![c; 16_000]).unwrap();
        fast_fsync(&fs, a.ino);
        fs.release_handle(a.ino).unwrap();
        if c + 1 < cycles {
            fs.rename(ROOT_INO, b"foo.new", ROOT_INO, b"foo", RenameFlags::default())
                .unwrap();
        }
        last = a.ino;
    }
    let c1 = fs.counters();
    let per_cycle = (c1.blocks_written - c0.blocks_written) as f64 / cycles as f64;
    assert!(per_cycle <= 6.0, "{per_cycle} blocks per cycle");
    drop(fs); // crash
    let r = clean(&dev);
    // The files the renames replaced are orphans now, freed at mount.
    assert!(!r.notes.is_empty(), "no orphan notes: {r:?}");
    let fs = open(&dev);
    assert_eq!(names(&fs, ROOT_INO), vec![b"foo".to_vec(), b"foo.new".to_vec()]);
    let new = fs.lookup(ROOT_INO, b"foo.new").unwrap();
    assert_eq!(new.ino, last);
    assert_eq!(fs.read(new.ino, 0, 20_000).unwrap(), vec![cycles - 1; 16_000]);
    let old = fs.lookup(ROOT_INO, b"foo").unwrap();
    assert_eq!(old.nlink, 1);
    assert_eq!(fs.read(old.ino, 0, 20_000).unwrap(), vec![cycles - 2; 16_000]);
    fs.close().unwrap();
    let r = clean(&dev);
    assert!(r.notes.is_empty(), "after the freeing mount: {:?}", r.notes);
}

#[test]
fn unlink_and_recreate_takes_a_fast_fsync() {
    let dev = fresh();
    let fs = open(&dev);
    let a = fs.create(ROOT_INO, b"mail", 0o644, 0, 0).unwrap();
    fs.write(a.ino, 0, b"old").unwrap();
    let other = fs.create(ROOT_INO, b"other", 0o644, 0, 0).unwrap();
    fs.sync().unwrap();
    fs.unlink(ROOT_INO, b"mail").unwrap();
    // An unrelated unlink in the same directory stays out of the commit.
    fs.unlink(ROOT_INO, b"other").unwrap();
    let b = fs.create(ROOT_INO, b"mail", 0o600, 0, 0).unwrap();
    fs.write(b.ino, 0, b"new").unwrap();
    fast_fsync(&fs, b.ino);
    drop(fs);
    clean(&dev);
    let fs = open(&dev);
    let got = fs.lookup(ROOT_INO, b"mail").unwrap();
    assert_eq!((got.ino, got.mode & 0o7777), (b.ino, 0o600));
    assert_eq!(fs.read(b.ino, 0, 10).unwrap(), b"new");
    assert!(matches!(fs.getattr(a.ino), Err(Error::Posix(Errno::ENOENT))));
    assert_eq!(fs.lookup(ROOT_INO, b"other").unwrap().ino, other.ino);
    fs.close().unwrap();
    clean(&dev);
}

#[test]
fn rename_across_directories_and_links_go_fast_and_atomic() {
    let dev = fresh();
    let fs = open(&dev);
    let p = fs.mkdir(ROOT_INO, b"p", 0o755, 0, 0).unwrap().ino;
    let q = fs.mkdir(ROOT_INO, b"q", 0o755, 0, 0).unwrap().ino;
    let a = fs.create(p, b"a", 0o644, 0, 0).unwrap();
    fs.write(a.ino, 0, b"moving").unwrap();
    let x = fs.create(q, b"x", 0o644, 0, 0).unwrap();
    fs.sync().unwrap();
    fs.rename(p, b"a", q, b"b", RenameFlags::default()).unwrap();
    fs.write(a.ino, 6, b" on").unwrap();
    fast_fsync(&fs, a.ino);
    fs.link(x.ino, p, b"x2").unwrap();
    fast_fsync(&fs, x.ino);
    drop(fs);
    clean(&dev);
    let fs = open(&dev);
    assert!(fs.lookup(p, b"a").is_err());
    assert_eq!(fs.lookup(q, b"b").unwrap().ino, a.ino);
    assert_eq!(fs.read(a.ino, 0, 20).unwrap(), b"moving on");
    assert_eq!(fs.lookup(p, b"x2").unwrap().ino, x.ino);
    assert_eq!(fs.getattr(x.ino).unwrap().nlink, 2);
    drop(fs);
    clean(&dev);
}

#[test]
fn new_directories_go_with_the_file_in_them() {
    let dev = fresh();
    let fs = open(&dev);
    fs.sync().unwrap();
    let d = fs.mkdir(ROOT_INO, b"d", 0o750, 0, 0).unwrap().ino;
    let e = fs.mkdir(d, b"e", 0o755, 0, 0).unwrap().ino;
    let sibling = fs.mkdir(ROOT_INO, b"sibling", 0o755, 0, 0).unwrap().ino;
    let a = fs.create(e, b"a", 0o644, 0, 0).unwrap();
    fs.write(a.ino, 0, b"deep").unwrap();
    // Not fsynced: stays out, though its directory goes.
    let other = fs.create(d, b"other", 0o644, 0, 0).unwrap();
    fs.write(other.ino, 0, b"x").unwrap();
    fast_fsync(&fs, a.ino);
    drop(fs);
    clean(&dev);
    let fs = open(&dev);
    assert_eq!(fs.lookup(ROOT_INO, b"d").unwrap().ino, d);
    assert_eq!(fs.getattr(d).unwrap().mode & 0o7777, 0o750);
    assert_eq!(fs.getattr(d).unwrap().nlink, 3);
    assert_eq!(fs.getattr(ROOT_INO).unwrap().nlink, 4);
    assert_eq!(fs.lookup(e, b"a").unwrap().ino, a.ino);
    assert_eq!(fs.read(a.ino, 0, 10).unwrap(), b"deep");
    assert!(fs.lookup(d, b"other").is_err());
    // The sibling made in the same delta went too (the root's link count
    // counts it), empty, and works.
    assert_eq!(names(&fs, sibling), Vec::<Vec<u8>>::new());
    let b = fs.create(sibling, b"b", 0o644, 0, 0).unwrap();
    fs.write(b.ino, 0, b"later").unwrap();
    fs.close().unwrap();
    clean(&dev);
    let fs = open(&dev);
    assert_eq!(
        fs.read(fs.lookup(sibling, b"b").unwrap().ino, 0, 10).unwrap(),
        b"later"
    );
}

#[test]
fn a_removed_or_moved_directory_takes_a_full_commit() {
    let dev = fresh();
    let fs = open(&dev);
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap().ino;
    fs.mkdir(d, b"old", 0o755, 0, 0).unwrap();
    fs.mkdir(d, b"moving", 0o755, 0, 0).unwrap();
    fs.sync().unwrap();
    fs.rmdir(d, b"old").unwrap();
    let a = fs.create(d, b"a", 0o644, 0, 0).unwrap();
    let deltas = fs.stats().deltas;
    fs.fsync(a.ino, false).unwrap();
    assert_eq!(fs.stats().deltas, deltas + 1, "rmdir: a full commit");
    fs.rename(d, b"moving", ROOT_INO, b"moved", RenameFlags::default())
        .unwrap();
    let b = fs.create(ROOT_INO, b"b", 0o644, 0, 0).unwrap();
    let deltas = fs.stats().deltas;
    fs.fsync(b.ino, false).unwrap();
    assert_eq!(fs.stats().deltas, deltas + 1, "a moved directory: a full commit");
    drop(fs);
    clean(&dev);
    let fs = open(&dev);
    assert!(fs.lookup(d, b"old").is_err());
    assert!(fs.lookup(ROOT_INO, b"moved").is_ok());
}

#[test]
fn fsync_of_a_directory_makes_its_entries_durable() {
    let dev = fresh();
    let fs = open(&dev);
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap().ino;
    let old = fs.create(d, b"config", 0o644, 0, 0).unwrap();
    fs.write(old.ino, 0, b"version 1").unwrap();
    let unrelated = fs.create(ROOT_INO, b"unrelated", 0o644, 0, 0).unwrap();
    fs.sync().unwrap();
    fs.unlink(ROOT_INO, b"unrelated").unwrap();
    // The atomic save: write a temporary file, fsync it, rename it over
    // the old one, fsync the directory.
    let tmp = fs.create(d, b"config.tmp", 0o644, 0, 0).unwrap();
    fs.write(tmp.ino, 0, b"version 2").unwrap();
    fast_fsync(&fs, tmp.ino);
    fs.rename(d, b"config.tmp", d, b"config", RenameFlags::default())
        .unwrap();
    fast_fsync(&fs, d);
    // A new file's entry (and its data, which its image needs) too.
    let log = fs.create(d, b"log", 0o644, 0, 0).unwrap();
    fs.write(log.ino, 0, b"started").unwrap();
    fast_fsync(&fs, d);
    // An unlink alone: the file goes (freed at the next mount).
    let gone = fs.create(d, b"gone", 0o644, 0, 0).unwrap();
    fs.write(gone.ino, 0, b"bye").unwrap();
    fast_fsync(&fs, gone.ino);
    fs.unlink(d, b"gone").unwrap();
    fast_fsync(&fs, d);
    // Nothing pending in the directory: nothing to write.
    let c0 = fs.counters();
    fs.fsync(d, false).unwrap();
    assert_eq!(
        fs.counters().flushes,
        c0.flushes,
        "a second fsync of the directory"
    );
    drop(fs);
    clean(&dev);
    let fs = open(&dev);
    assert_eq!(names(&fs, d), vec![b"config".to_vec(), b"log".to_vec()]);
    assert_eq!(fs.lookup(d, b"config").unwrap().ino, tmp.ino);
    assert_eq!(fs.read(tmp.ino, 0, 20).unwrap(), b"version 2");
    assert_eq!(fs.read(log.ino, 0, 20).unwrap(), b"started");
    assert!(matches!(fs.getattr(old.ino), Err(Error::Posix(Errno::ENOENT))));
    assert!(matches!(fs.getattr(gone.ino), Err(Error::Posix(Errno::ENOENT))));
    // The unlink in another directory was not fsynced.
    assert_eq!(fs.lookup(ROOT_INO, b"unrelated").unwrap().ino, unrelated.ino);
}

#[test]
fn a_large_group_of_new_files_takes_one_fsync_commit() {
    let dev = fresh();
    let fs = open(&dev);
    fs.sync().unwrap();
    let inos: Vec<u64> = (0..100)
        .map(|i| {
            let a = fs
                .create(ROOT_INO, format!("f{i}").as_bytes(), 0o644, 0, 0)
                .unwrap();
            fs.write(a.ino, 0, &[i as u8; 3000]).unwrap();
            a.ino
        })
        .collect();
    let (s0, c0) = (fs.stats(), fs.counters());
    fs.fsync_group(&inos).unwrap();
    let (s1, c1) = (fs.stats(), fs.counters());
    assert_eq!(
        (s1.deltas, s1.fsyncs),
        (s0.deltas, s0.fsyncs + 1),
        "one fsync commit"
    );
    assert_eq!(c1.flushes - c0.flushes, 1);
    drop(fs);
    clean(&dev);
    let fs = open(&dev);
    for (i, ino) in inos.iter().enumerate() {
        assert_eq!(fs.lookup(ROOT_INO, format!("f{i}").as_bytes()).unwrap().ino, *ino);
        assert_eq!(fs.read(*ino, 0, 4000).unwrap(), vec![i as u8; 3000]);
    }
}
