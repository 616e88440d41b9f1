//! Scenario: a directory's tree keeps at most `dir_leaf_limit` leaves in
//! memory once they are committed (`frontend/evict.rs`, `trim_dirs`): past
//! it, the end of a commit lets go of clean leaves down to three quarters of
//! the bound, and a lookup, a listing, a create or an unlink that needs one
//! reads it again. Every name stays found, listings stay whole, the volume
//! stays clean; leaves with uncommitted changes and small directories stay.

use std::collections::BTreeSet;
use std::sync::Arc;
use tux3::device::{Device, MemDevice};
use tux3::{Errno, Error, FormatOptions, Fs, Ino, OpenOptions, ROOT_INO};
use tux3_tools::fsck;

const LIMIT: usize = 16;

fn fresh() -> Arc<dyn Device> {
    let dev: Arc<dyn Device> = Arc::new(MemDevice::new(4096, 1 << 15));
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    dev
}

fn open(dev: &Arc<dyn Device>) -> Fs {
    let opts = OpenOptions {
        dir_leaf_limit: LIMIT,
        ..OpenOptions::default()
    };
    Fs::open(dev.clone(), opts).unwrap()
}

fn name(k: u32) -> Vec<u8> {
    format!("a-file-with-a-longish-name-{k:06}").into_bytes()
}

/// Every name of `dir` through `readdir` batches of 50.
fn listing(fs: &Fs, dir: Ino) -> BTreeSet<Vec<u8>> {
    let mut names = BTreeSet::new();
    let mut pos = 0;
    loop {
        let batch = fs.readdir(dir, pos, 50).unwrap();
        let Some(last) = batch.last() else { break };
        pos = last.next;
        for e in batch {
            if e.name != b"." && e.name != b".." {
                assert!(names.insert(e.name.clone()), "{:?} listed twice", e.name);
            }
        }
    }
    names
}

fn found_all(fs: &Fs, dir: Ino, model: &BTreeSet<u32>, inos: &[Ino]) {
    for &k in model {
        let a = fs.lookup(dir, &name(k)).unwrap();
        assert_eq!(a.ino, inos[k as usize], "name {k}");
    }
}

#[test]
fn a_directory_past_its_leaf_bound_lets_committed_leaves_go() {
    let dev = fresh();
    let fs = open(&dev);
    let dir = fs.mkdir(ROOT_INO, b"big", 0o755, 0, 0).unwrap().ino;
    let small = fs.mkdir(ROOT_INO, b"small", 0o755, 0, 0).unwrap().ino;
    let n = 8000u32;
    let inos: Vec<Ino> = (0..n)
        .map(|k| fs.create(dir, &name(k), 0o644, 0, 0).unwrap().ino)
        .collect();
    for k in 0..40 {
        fs.create(small, &name(k), 0o644, 0, 0).unwrap();
    }
    let all = fs.cached_leaves(dir);
    assert!(all > 4 * LIMIT as u64, "{all} leaves for {n} names");
    let small_leaves = fs.cached_leaves(small);
    // Uncommitted leaves stay whatever the bound; committed ones go at the
    // end of the commit.
    fs.sync().unwrap();
    let after = fs.cached_leaves(dir);
    assert!(
        after <= LIMIT as u64,
        "{after} leaves in memory after the commit, of {all}"
    );
    assert_eq!(
        fs.cached_leaves(small),
        small_leaves,
        "a directory within the bound keeps its leaves"
    );

    // Everything is still there: looked up (each leaf read again as
    // needed), listed, and changed.
    let mut model: BTreeSet<u32> = (0..n).collect();
    found_all(&fs, dir, &model, &inos);
    let names: BTreeSet<Vec<u8>> = model.iter().map(|&k| name(k)).collect();
    assert_eq!(listing(&fs, dir), names);
    assert!(
        fs.cached_leaves(dir) > LIMIT as u64,
        "read again: {}",
        fs.cached_leaves(dir)
    );
    fs.sync().unwrap();
    assert!(
        fs.cached_leaves(dir) <= LIMIT as u64,
        "and let go of again at the next commit"
    );
    let mut inos = inos;
    for k in (0..n).step_by(3) {
        fs.unlink(dir, &name(k)).unwrap();
        model.remove(&k);
    }
    fs.sync().unwrap();
    for k in n..n + 2000 {
        inos.push(fs.create(dir, &name(k), 0o644, 0, 0).unwrap().ino);
        model.insert(k);
    }
    fs.sync().unwrap();
    assert!(fs.cached_leaves(dir) <= LIMIT as u64);
    found_all(&fs, dir, &model, &inos);
    assert!(matches!(
        fs.lookup(dir, &name(0)),
        Err(Error::Posix(Errno::ENOENT))
    ));
    let names: BTreeSet<Vec<u8>> = model.iter().map(|&k| name(k)).collect();
    assert_eq!(listing(&fs, dir), names);
    fs.close().unwrap();
    let r = fsck::check(dev.clone(), &Default::default()).unwrap();
    assert!(r.problems.is_empty(), "fsck: {:?}", r.problems);
    let fs = open(&dev);
    assert_eq!(listing(&fs, dir), names, "after a remount");
    fs.close().unwrap();
}
