//! Multi-threaded tests of the engine's parallel operations.
//!
//! - Disjoint subtrees: each thread works in a directory of its own —
//!   create, write, read, truncate, chmod, rename, unlink, readdir, lookup,
//!   open handles, fsync — and compares every answer with its own model,
//!   while another thread commits, unifies and a small dirty limit forces
//!   commits under pressure. After the threads end, the volume is closed,
//!   checked by fsck and reopened (replay), and every model is compared
//!   with the volume again, by all threads at once on the cold cache while
//!   another works beside them.
//! - Shared directories: threads create, write and unlink entries of the
//!   same directories at once, while others list and look them up; every
//!   entry recorded as created and not removed must be there, once, with
//!   its data, and fsck must find the volume clean.
//!
//! Seeds are fixed (per thread) so a run is repeatable as far as thread
//! scheduling allows; `TUX3_CONCURRENT_STEPS` scales the run.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tux3::device::MemDevice;
use tux3::{Errno, FileType, FormatOptions, Fs, Ino, OpenOptions, SetAttr, ROOT_INO};
use tux3_tools::fsck;

const THREADS: u64 = 4;

fn steps() -> usize {
    std::env::var("TUX3_CONCURRENT_STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000)
}

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Few enough cached inodes that most commits let go of some, so that
/// threads load them again while others work.
const FEW_INODES: usize = 16;

fn opts(dirty_limit: u64, inode_limit: usize) -> OpenOptions {
    OpenOptions {
        dirty_limit,
        inode_limit,
        // With few inodes, directories keep few leaves too: their trees
        // are read again while threads work in them.
        dir_leaf_limit: if inode_limit == usize::MAX { usize::MAX } else { 2 },
        unify_log_blocks: 16,
        commit_interval: Some(std::time::Duration::from_millis(5)),
        ..OpenOptions::default()
    }
}

fn volume(blocks: u64) -> Arc<MemDevice> {
    let mem = Arc::new(MemDevice::new(4096, blocks));
    Fs::format(mem.clone(), &FormatOptions::default()).unwrap();
    mem
}

fn errno<T: std::fmt::Debug>(r: tux3::Result<T>) -> Errno {
    r.expect_err("expected an error").errno()
}

/// One thread's view of its directory.
#[derive(Default, Debug)]
struct Model {
    files: BTreeMap<Vec<u8>, File>,
}

#[derive(Debug, Clone)]
struct File {
    ino: Ino,
    data: Vec<u8>,
    mode: u32,
}

/// A thread's random work in its own directory `dir`, checked against
/// `model` at every step.
fn work(fs: &Fs, dir: Ino, seed: u64, n: usize) -> Model {
    let mut rng = Rng::new(seed);
    let mut m = Model::default();
    let name = |rng: &mut Rng| format!("f{}", rng.below(24)).into_bytes();
    let pick = |rng: &mut Rng, m: &Model| -> Option<(Vec<u8>, File)> {
        if m.files.is_empty() {
            return None;
        }
        let k = rng.below(m.files.len() as u64) as usize;
        m.files.iter().nth(k).map(|(n, f)| (n.clone(), f.clone()))
    };
    for step in 0..n {
        let ctx = format!("seed {seed} step {step}");
        match rng.below(13) {
            0 | 1 => {
                let nm = name(&mut rng);
                let r = fs.create(dir, &nm, 0o644, 0, 0);
                match m.files.entry(nm) {
                    std::collections::btree_map::Entry::Occupied(_) => {
                        assert_eq!(errno(r), Errno::EEXIST, "{ctx}")
                    }
                    std::collections::btree_map::Entry::Vacant(v) => {
                        let a = r.unwrap();
                        assert_eq!(a.size, 0, "{ctx}");
                        v.insert(File {
                            ino: a.ino,
                            data: Vec::new(),
                            mode: 0o644,
                        });
                    }
                }
            }
            2 | 3 => {
                let Some((nm, f)) = pick(&mut rng, &m) else {
                    continue;
                };
                let off = rng.below(24_000) as usize;
                let len = 1 + rng.below(9_000) as usize;
                let byte = rng.next() as u8;
                let buf: Vec<u8> = (0..len).map(|k| byte.wrapping_add(k as u8)).collect();
                assert_eq!(fs.write(f.ino, off as u64, &buf).unwrap(), len, "{ctx}");
                let data = &mut m.files.get_mut(&nm).unwrap().data;
                if data.len() < off + len {
                    data.resize(off + len, 0);
                }
                data[off..off + len].copy_from_slice(&buf);
            }
            4 | 5 => {
                let Some((_, f)) = pick(&mut rng, &m) else {
                    continue;
                };
                let off = rng.below(f.data.len() as u64 + 100) as usize;
                let len = rng.below(20_000) as usize;
                let got = fs.read(f.ino, off as u64, len).unwrap();
                let want = if off >= f.data.len() {
                    &[][..]
                } else {
                    &f.data[off..(off + len).min(f.data.len())]
                };
                assert!(got == want, "{ctx}: read of {} bytes at {off} differs", len);
            }
            6 => {
                let Some((nm, f)) = pick(&mut rng, &m) else {
                    continue;
                };
                let size = rng.below(f.data.len() as u64 + 5000);
                let set = SetAttr {
                    size: Some(size),
                    ..SetAttr::default()
                };
                assert_eq!(fs.setattr(f.ino, &set).unwrap().size, size, "{ctx}");
                m.files.get_mut(&nm).unwrap().data.resize(size as usize, 0);
            }
            7 => {
                let Some((nm, f)) = pick(&mut rng, &m) else {
                    continue;
                };
                let mode = 0o600 | rng.below(0o100) as u32;
                let set = SetAttr {
                    mode: Some(mode),
                    ..SetAttr::default()
                };
                assert_eq!(fs.setattr(f.ino, &set).unwrap().mode & 0o7777, mode, "{ctx}");
                m.files.get_mut(&nm).unwrap().mode = mode;
            }
            8 => {
                let Some((nm, _)) = pick(&mut rng, &m) else {
                    continue;
                };
                fs.unlink(dir, &nm).unwrap();
                m.files.remove(&nm);
                assert_eq!(errno(fs.lookup(dir, &nm)), Errno::ENOENT, "{ctx}");
            }
            9 => {
                let Some((nm, f)) = pick(&mut rng, &m) else {
                    continue;
                };
                let to = name(&mut rng);
                fs.rename(dir, &nm, dir, &to, Default::default()).unwrap();
                m.files.remove(&nm);
                m.files.insert(to, f);
            }
            10 => {
                let mut got = BTreeMap::new();
                let mut pos = 0;
                loop {
                    let batch = fs.readdir(dir, pos, 7).unwrap();
                    let Some(last) = batch.last() else { break };
                    pos = last.next;
                    for e in batch {
                        assert!(
                            got.insert(e.name, e.ino).is_none(),
                            "{ctx}: an entry listed twice"
                        );
                    }
                }
                let want: BTreeMap<_, _> = m.files.iter().map(|(n, f)| (n.clone(), f.ino)).collect();
                assert_eq!(got, want, "{ctx}: directory listing");
            }
            11 => {
                // A handle kept over an unlink: the data stays readable.
                let Some((nm, f)) = pick(&mut rng, &m) else {
                    continue;
                };
                fs.open_handle(f.ino).unwrap();
                let unlink = rng.below(3) == 0;
                if unlink {
                    fs.unlink(dir, &nm).unwrap();
                    m.files.remove(&nm);
                }
                let got = fs.read(f.ino, 0, f.data.len() + 10).unwrap();
                assert!(got == f.data, "{ctx}: read through a handle");
                fs.release_handle(f.ino).unwrap();
                if unlink {
                    assert_eq!(errno(fs.getattr(f.ino)), Errno::ENOENT, "{ctx}: orphan freed");
                }
            }
            _ => {
                let Some((nm, f)) = pick(&mut rng, &m) else {
                    continue;
                };
                let a = fs.lookup(dir, &nm).unwrap();
                assert_eq!(a.ino, f.ino, "{ctx}");
                assert_eq!(a.size, f.data.len() as u64, "{ctx}: size of {nm:?}");
                assert_eq!(a.mode & 0o7777, f.mode, "{ctx}");
                assert_eq!(a.kind, FileType::Regular, "{ctx}");
                if rng.below(8) == 0 {
                    fs.fsync(f.ino, rng.below(2) == 0).unwrap();
                }
            }
        }
    }
    m
}

/// The volume holds exactly what `m` says of `dir`.
fn compare(fs: &Fs, dir: Ino, m: &Model, when: &str) {
    let mut names = Vec::new();
    let mut pos = 0;
    loop {
        let batch = fs.readdir(dir, pos, 64).unwrap();
        let Some(last) = batch.last() else { break };
        pos = last.next;
        names.extend(batch.into_iter().map(|e| e.name));
    }
    names.sort();
    let want: Vec<_> = m.files.keys().cloned().collect();
    assert_eq!(names, want, "{when}: names of directory {dir}");
    for (nm, f) in &m.files {
        let a = fs.lookup(dir, nm).unwrap();
        assert_eq!(a.size, f.data.len() as u64, "{when}: size of {nm:?}");
        assert_eq!(a.mode & 0o7777, f.mode, "{when}: mode of {nm:?}");
        let got = fs.read(a.ino, 0, f.data.len() + 1).unwrap();
        assert!(got == f.data, "{when}: data of {nm:?} in {dir}");
    }
}

/// Sets its flag when dropped.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Run `workers` while a committer thread syncs and unifies until they end.
fn with_committer<T: Send>(fs: &Fs, workers: impl FnOnce() -> T + Send) -> T {
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let committer = s.spawn(|| {
            let mut n = 0u64;
            while !done.load(Ordering::SeqCst) {
                if n % 5 == 4 {
                    fs.unify().unwrap();
                } else {
                    fs.sync().unwrap();
                }
                n += 1;
            }
        });
        let out = {
            // Set on the way out, a panic's too, so the committer ends
            // and the panic is reported instead of waited on.
            let _stop = StopOnDrop(&done);
            workers()
        };
        committer.join().unwrap();
        out
    })
}

fn assert_clean(mem: &Arc<MemDevice>) {
    let r = fsck::check(mem.clone(), &Default::default()).unwrap();
    assert!(r.problems.is_empty(), "fsck: {:?}", r.problems);
}

#[test]
fn threads_in_disjoint_subtrees_each_see_their_model() {
    for (dirty_limit, inode_limit) in [(u64::MAX, usize::MAX), (256 << 10, FEW_INODES)] {
        let mem = volume(1 << 16);
        let fs = Fs::open(mem.clone(), opts(dirty_limit, inode_limit)).unwrap();
        let dirs: Vec<Ino> = (0..THREADS)
            .map(|t| {
                fs.mkdir(ROOT_INO, format!("t{t}").as_bytes(), 0o755, 0, 0)
                    .unwrap()
                    .ino
            })
            .collect();
        let n = steps();
        let models: Vec<Model> = with_committer(&fs, || {
            std::thread::scope(|s| {
                let handles: Vec<_> = dirs
                    .iter()
                    .enumerate()
                    .map(|(t, &d)| {
                        let fs = &fs;
                        s.spawn(move || work(fs, d, 1000 * dirty_limit.min(7) + t as u64, n))
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            })
        });
        for (d, m) in dirs.iter().zip(&models) {
            compare(&fs, *d, m, "after the threads");
        }
        fs.close().unwrap();
        assert_clean(&mem);
        // Reopened, nothing is cached: the threads compare at once, so
        // their inodes and tree nodes load in parallel (under the shared
        // guard), while a fifth thread keeps working in a new directory
        // of its own and commits run.
        let fs = Fs::open(mem.clone(), opts(dirty_limit, inode_limit)).unwrap();
        let extra = fs.mkdir(ROOT_INO, b"late", 0o755, 0, 0).unwrap().ino;
        let late = with_committer(&fs, || {
            std::thread::scope(|s| {
                for (d, m) in dirs.iter().zip(&models) {
                    let fs = &fs;
                    s.spawn(move || compare(fs, *d, m, "after reopening, in parallel"));
                }
                let fs = &fs;
                s.spawn(move || work(fs, extra, 77 + dirty_limit.min(7), n / 4))
                    .join()
                    .unwrap()
            })
        });
        compare(&fs, extra, &late, "the late directory");
        fs.close().unwrap();
        assert_clean(&mem);
    }
}

/// `n` new directories under the root, named `prefix` and a number.
fn mkdirs(fs: &Fs, prefix: &str, n: u64) -> Vec<Ino> {
    (0..n)
        .map(|k| {
            fs.mkdir(ROOT_INO, format!("{prefix}{k}").as_bytes(), 0o755, 0, 0)
                .unwrap()
                .ino
        })
        .collect()
}

/// `check` the volume, then close it, fsck it, reopen it (replay) and
/// `check` again; closed at the end.
fn check_across_reopen(fs: Fs, mem: &Arc<MemDevice>, check: impl Fn(&Fs, &str)) {
    check(&fs, "after the threads");
    fs.close().unwrap();
    assert_clean(mem);
    let fs = Fs::open(mem.clone(), opts(1 << 20, FEW_INODES)).unwrap();
    check(&fs, "after reopening");
    fs.close().unwrap();
}

/// An entry a writer created and kept: directory, name, data.
type Kept = (Ino, Vec<u8>, Vec<u8>);

#[test]
fn threads_sharing_directories_lose_no_entry() {
    let mem = volume(1 << 16);
    let fs = Fs::open(mem.clone(), opts(1 << 20, FEW_INODES)).unwrap();
    let shared = mkdirs(&fs, "s", 2);
    let per_thread = steps() / 4;
    let stop = AtomicBool::new(false);
    let kept: Vec<Vec<Kept>> = with_committer(&fs, || {
        std::thread::scope(|s| {
            // Readers: list and look up while entries come and go.
            let readers: Vec<_> = shared
                .iter()
                .map(|&d| {
                    let (fs, stop) = (&fs, &stop);
                    s.spawn(move || {
                        while !stop.load(Ordering::SeqCst) {
                            let mut seen = std::collections::HashSet::new();
                            let mut pos = 0;
                            loop {
                                let batch = fs.readdir(d, pos, 16).unwrap();
                                let Some(last) = batch.last() else { break };
                                pos = last.next;
                                for e in batch {
                                    assert!(seen.insert(e.name.clone()), "listed twice: {:?}", e.name);
                                    // It may be gone by now, but not wrong.
                                    if let Ok(a) = fs.lookup(d, &e.name) {
                                        assert_eq!(a.kind, FileType::Regular);
                                    }
                                }
                            }
                        }
                    })
                })
                .collect();
            let writers: Vec<_> = (0..THREADS)
                .map(|t| {
                    let (fs, shared) = (&fs, &shared);
                    s.spawn(move || {
                        let mut rng = Rng::new(77 + t);
                        let mut kept = Vec::new();
                        for k in 0..per_thread {
                            let d = shared[rng.below(2) as usize];
                            let nm = format!("w{t}-{k}").into_bytes();
                            let a = fs.create(d, &nm, 0o644, 0, 0).unwrap();
                            let data = format!("{t}:{k}:")
                                .repeat(1 + rng.below(300) as usize)
                                .into_bytes();
                            fs.write(a.ino, 0, &data).unwrap();
                            if rng.below(3) == 0 {
                                fs.unlink(d, &nm).unwrap();
                            } else {
                                kept.push((d, nm, data));
                            }
                        }
                        kept
                    })
                })
                .collect();
            let kept = writers.into_iter().map(|w| w.join().unwrap()).collect();
            stop.store(true, Ordering::SeqCst);
            for r in readers {
                r.join().unwrap();
            }
            kept
        })
    });
    let check = |fs: &Fs, when: &str| {
        for d in &shared {
            let mut n = 0;
            let mut pos = 0;
            loop {
                let batch = fs.readdir(*d, pos, 64).unwrap();
                let Some(last) = batch.last() else { break };
                pos = last.next;
                n += batch.len();
            }
            let want = kept.iter().flatten().filter(|(dd, _, _)| dd == d).count();
            assert_eq!(n, want, "{when}: entries of directory {d}");
        }
        for (d, nm, data) in kept.iter().flatten() {
            let a = fs
                .lookup(*d, nm)
                .unwrap_or_else(|e| panic!("{when}: {nm:?} lost: {e}"));
            assert!(
                fs.read(a.ino, 0, data.len() + 1).unwrap() == *data,
                "{when}: data of {nm:?}"
            );
        }
    };
    check_across_reopen(fs, &mem, check);
}

/// The data a file made by thread `t` as its `k`th carries: its own tag,
/// repeated, so a file read under another's name or mixed up is seen.
fn tagged(t: u64, k: usize, reps: usize) -> Vec<u8> {
    format!("<{t}.{k}>").repeat(reps).into_bytes()
}

/// Whether `data` is one tag repeated (see [`tagged`]).
fn well_tagged(data: &[u8]) -> bool {
    let Some(end) = data.iter().position(|&b| b == b'>') else {
        return false;
    };
    let tag = &data[..=end];
    data.len().is_multiple_of(tag.len()) && data.chunks(tag.len()).all(|c| c == tag)
}

#[test]
fn renames_unlinks_and_handles_racing_on_shared_names() {
    // Every thread makes files under names of its own, then renames them
    // over a few names all threads share, in two directories (replacing
    // whatever is there), unlinks shared names and holds handles on what
    // it finds there while others replace it. A replaced or unlinked file
    // held by a handle must stay readable, whole, until released; every
    // file must read back as made; fsck must find no leak, no wrong link
    // count and no orphan left, after close and after a reopen.
    let mem = volume(1 << 16);
    let fs = Fs::open(mem.clone(), opts(1 << 20, FEW_INODES)).unwrap();
    let dirs = mkdirs(&fs, "d", 2);
    let hot = |rng: &mut Rng| format!("hot{}", rng.below(6)).into_bytes();
    let per_thread = steps() / 4;
    with_committer(&fs, || {
        std::thread::scope(|s| {
            for t in 0..THREADS {
                let (fs, dirs) = (&fs, &dirs);
                s.spawn(move || {
                    let mut rng = Rng::new(500 + t);
                    for k in 0..per_thread {
                        let d = dirs[rng.below(2) as usize];
                        match rng.below(4) {
                            0 | 1 => {
                                let nm = format!("own{t}-{k}").into_bytes();
                                let a = fs.create(d, &nm, 0o644, 0, 0).unwrap();
                                let data = tagged(t, k, 1 + rng.below(900) as usize);
                                fs.write(a.ino, 0, &data).unwrap();
                                let to = dirs[rng.below(2) as usize];
                                let flags = tux3::RenameFlags {
                                    noreplace: rng.below(4) == 0,
                                    exchange: false,
                                    whiteout: None,
                                };
                                match fs.rename(d, &nm, to, &hot(&mut rng), flags) {
                                    Ok(()) => {}
                                    Err(e) if flags.noreplace && e.errno() == Errno::EEXIST => {
                                        fs.unlink(d, &nm).unwrap();
                                    }
                                    Err(e) => panic!("thread {t} step {k}: rename: {e}"),
                                }
                            }
                            2 => match fs.unlink(d, &hot(&mut rng)) {
                                Ok(()) => {}
                                Err(e) => assert_eq!(e.errno(), Errno::ENOENT, "thread {t} step {k}"),
                            },
                            _ => {
                                // Hold what is there while others replace it.
                                let Ok(a) = fs.lookup(d, &hot(&mut rng)) else {
                                    continue;
                                };
                                if fs.open_handle(a.ino).is_err() {
                                    continue; // freed since the lookup
                                }
                                for _ in 0..3 {
                                    let got = fs.read(a.ino, 0, 1 << 16).unwrap();
                                    assert!(well_tagged(&got), "thread {t} step {k}: data of {}", a.ino);
                                    std::thread::yield_now();
                                }
                                fs.release_handle(a.ino).unwrap();
                            }
                        }
                    }
                });
            }
        })
    });
    let check = |fs: &Fs, when: &str| {
        for &d in &dirs {
            for e in fs.readdir(d, 0, 1000).unwrap() {
                let a = fs.lookup(d, &e.name).unwrap();
                assert_eq!(a.nlink, 1, "{when}: {:?}", e.name);
                let got = fs.read(a.ino, 0, 1 << 16).unwrap();
                assert!(well_tagged(&got), "{when}: data of {:?}", e.name);
                assert!(
                    e.name.starts_with(b"hot"),
                    "{when}: {:?} was renamed or unlinked",
                    e.name
                );
            }
        }
    };
    check_across_reopen(fs, &mem, check);
    assert_clean(&mem);
}

#[test]
fn a_name_renamed_over_is_found_throughout() {
    // A few names that always exist, each replaced again and again by a
    // rename of a file made before the volume was reopened (so not in
    // cache: its load races with the other renames), while other threads
    // look the names up. A rename replaces a name at once: every lookup
    // must find a file there, never ENOENT, even when the file it read
    // from the entry is freed by the next rename before it is loaded.
    const HOT: u64 = 3;
    let spares = (steps() / 2) as u64;
    let mem = volume(1 << 16);
    let fs = Fs::open(mem.clone(), opts(u64::MAX, usize::MAX)).unwrap();
    let dir = mkdirs(&fs, "d", 1)[0];
    for h in 0..HOT {
        fs.create(dir, format!("hot{h}").as_bytes(), 0o644, 0, 0).unwrap();
    }
    for t in 0..2 {
        for k in 0..spares {
            fs.create(dir, format!("s{t}-{k}").as_bytes(), 0o644, 0, 0)
                .unwrap();
        }
    }
    fs.close().unwrap();
    let fs = Fs::open(mem.clone(), opts(u64::MAX, FEW_INODES)).unwrap();
    let renaming = AtomicBool::new(true);
    with_committer(&fs, || {
        std::thread::scope(|s| {
            let renamers: Vec<_> = (0..2u64)
                .map(|t| {
                    let fs = &fs;
                    s.spawn(move || {
                        for k in 0..spares {
                            let from = format!("s{t}-{k}").into_bytes();
                            let to = format!("hot{}", k % HOT).into_bytes();
                            fs.rename(dir, &from, dir, &to, Default::default())
                                .unwrap_or_else(|e| panic!("rename s{t}-{k}: {e}"));
                        }
                    })
                })
                .collect();
            for t in 0..2u64 {
                let (fs, renaming) = (&fs, &renaming);
                s.spawn(move || {
                    let mut rng = Rng::new(900 + t);
                    let mut n = 0u64;
                    while renaming.load(Ordering::SeqCst) {
                        let h = rng.below(HOT);
                        if let Err(e) = fs.lookup(dir, format!("hot{h}").as_bytes()) {
                            panic!("lookup {n} of hot{h}: {e}");
                        }
                        n += 1;
                    }
                });
            }
            for r in renamers {
                let joined = r.join();
                renaming.store(false, Ordering::SeqCst);
                if let Err(p) = joined {
                    std::panic::resume_unwind(p);
                }
            }
        })
    });
    assert_eq!(fs.readdir(dir, 0, usize::MAX).unwrap().len(), HOT as usize);
    fs.close().unwrap();
    assert_clean(&mem);
}
