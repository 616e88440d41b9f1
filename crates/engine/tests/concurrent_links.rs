//! Scenario: hard links and directory removals run under the shared delta
//! guard, many at once, beside creates, unlinks and a committer. Threads
//! make a directory in a shared parent, a file in it, link the file into a
//! shared directory, empty and remove their directory, and link each
//! other's files under names of their own while the owners drop theirs.
//! Afterwards every inode's link count equals the names that reach it, the
//! parent lost every directory and its link count with them, every file
//! holds what its maker wrote, and fsck is clean — before and after a
//! reopen.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tux3::device::MemDevice;
use tux3::{Errno, FileType, FormatOptions, Fs, Ino, OpenOptions, ROOT_INO};

const THREADS: u64 = 4;

fn steps() -> usize {
    std::env::var("TUX3_CONCURRENT_STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200)
}

fn open(mem: &Arc<MemDevice>) -> Fs {
    let opts = OpenOptions {
        dirty_limit: 1 << 20,
        ..OpenOptions::default()
    };
    Fs::open(mem.clone(), opts).unwrap()
}

fn errno<T: std::fmt::Debug>(r: tux3::Result<T>) -> Errno {
    r.expect_err("an error").errno()
}

/// What thread `t` writes into its `k`th file.
fn tag(t: u64, k: usize) -> Vec<u8> {
    format!("<{t}.{k}>").repeat(1 + k % 7).into_bytes()
}

/// Every entry of directory `d`: name -> inode.
fn entries(fs: &Fs, d: Ino) -> BTreeMap<Vec<u8>, Ino> {
    let mut out = BTreeMap::new();
    let mut pos = 0;
    loop {
        let batch = fs.readdir(d, pos, 64).unwrap();
        let Some(last) = batch.last() else { break };
        pos = last.next;
        for e in batch {
            assert!(out.insert(e.name, e.ino).is_none(), "an entry listed twice");
        }
    }
    out
}

/// Sets the flag when dropped, a panic's unwinding included.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

fn worker(fs: &Fs, parent: Ino, shared: Ino, t: u64) {
    let mut rng = t.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut below = |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };
    for k in 0..steps() {
        let dname = format!("t{t}d{k}").into_bytes();
        let d = fs.mkdir(parent, &dname, 0o755, 0, 0).unwrap().ino;
        let f = fs.create(d, b"x", 0o644, 0, 0).unwrap().ino;
        fs.write(f, 0, &tag(t, k)).unwrap();
        assert_eq!(errno(fs.rmdir(parent, &dname)), Errno::ENOTEMPTY);
        assert_eq!(errno(fs.link(d, shared, b"never")), Errno::EPERM);
        let own = format!("t{t}l{k}").into_bytes();
        assert_eq!(fs.link(f, shared, &own).unwrap().nlink, 2);
        assert_eq!(errno(fs.link(f, shared, &own)), Errno::EEXIST);
        fs.unlink(d, b"x").unwrap();
        fs.rmdir(parent, &dname).unwrap();
        assert_eq!(errno(fs.lookup(parent, &dname)), Errno::ENOENT);
        // Another thread's file, under a name of this thread's: it may be
        // gone by now (its owner dropped its last name), never wrong.
        let (u, j) = (below(THREADS), below(k as u64 + 1));
        if let Ok(a) = fs.lookup(shared, format!("t{u}l{j}").as_bytes()) {
            match fs.link(a.ino, shared, format!("c{t}-{k}").as_bytes()) {
                Ok(b) => assert_eq!(b.ino, a.ino),
                Err(e) => assert_eq!(e.errno(), Errno::ENOENT, "link of a gone file"),
            }
        }
        if below(3) == 0 {
            fs.unlink(shared, &own).unwrap();
        }
    }
}

/// The names in `shared` reach each inode as often as its link count
/// says, and each file holds one thread's tag; `parent` is empty.
fn check(fs: &Fs, parent: Ino, shared: Ino, when: &str) {
    assert!(entries(fs, parent).is_empty(), "{when}: directories left");
    assert_eq!(fs.getattr(parent).unwrap().nlink, 2, "{when}: parent's links");
    let mut names: BTreeMap<Ino, u32> = BTreeMap::new();
    for ino in entries(fs, shared).into_values() {
        *names.entry(ino).or_default() += 1;
    }
    assert!(!names.is_empty(), "{when}: every name was dropped");
    for (ino, n) in names {
        let a = fs.getattr(ino).unwrap();
        assert_eq!((a.kind, a.nlink), (FileType::Regular, n), "{when}: inode {ino}");
        let data = fs.read(ino, 0, a.size as usize).unwrap();
        let end = data.iter().position(|&b| b == b'>').unwrap() + 1;
        assert!(
            data.chunks(end).all(|c| c == &data[..end]),
            "{when}: data of {ino}"
        );
    }
}

#[test]
fn links_and_rmdirs_racing_in_shared_directories() {
    let mem = Arc::new(MemDevice::new(4096, 1 << 16));
    Fs::format(mem.clone(), &FormatOptions::default()).unwrap();
    let fs = open(&mem);
    let parent = fs.mkdir(ROOT_INO, b"p", 0o755, 0, 0).unwrap().ino;
    let shared = fs.mkdir(ROOT_INO, b"s", 0o755, 0, 0).unwrap().ino;
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let committer = s.spawn(|| {
            while !done.load(Ordering::SeqCst) {
                fs.sync().unwrap();
            }
        });
        {
            let _stop = StopOnDrop(&done);
            let workers: Vec<_> = (0..THREADS)
                .map(|t| {
                    let fs = &fs;
                    s.spawn(move || worker(fs, parent, shared, t))
                })
                .collect();
            for w in workers {
                w.join().unwrap();
            }
        }
        committer.join().unwrap();
    });
    check(&fs, parent, shared, "after the threads");
    fs.close().unwrap();
    let r = tux3_tools::fsck::check(mem.clone(), &Default::default()).unwrap();
    assert!(r.problems.is_empty(), "fsck: {:?}", r.problems);
    let fs = open(&mem);
    check(&fs, parent, shared, "after reopening");
    fs.close().unwrap();
}
