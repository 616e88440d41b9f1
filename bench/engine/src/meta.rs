//! The metadata load, shaped like bench/c/meta.c (which runs it on a
//! mount): `flat` creates, stats and unlinks N empty files `fNNNNNNN` in one
//! directory; `tree` does the same for N empty files in a two-level tree,
//! `tNNNNN/lNNN/fNNN`, 100 files per leaf directory and 10 leaves per top
//! directory, and its delete phase unlinks the files and removes the
//! directories. Each phase is timed on its own.
//!
//! Operations name an entry in a directory already at hand, the way a
//! kernel's dentry cache keeps the parents of a path: the engine is called
//! with the parent's inode number (`Fs::create`, `Fs::lookup`, `Fs::unlink`,
//! `Fs::rmdir`, `Fs::mkdir`), the system calls with a directory descriptor
//! (`openat(O_CREAT|O_EXCL)` + `close`, `fstatat`, `unlinkat`, `mkdirat`).
//! A directory is looked up once per 100 (leaf) or 1,000 (top) files, as the
//! path changes; those look-ups are not counted as operations.
//!
//! One thread by default, as meta.c. With T threads the files are split over
//! T disjoint directories `KIND/pK`, each with the same shape, and all
//! threads start together.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::{Arc, Barrier};
use std::time::Instant;
use tux3::{Fs, Ino, ROOT_INO};

pub type R<T> = io::Result<T>;

/// Operations on names inside a directory already resolved.
pub trait Ops: Sync {
    type Dir: Send;
    fn root(&self) -> R<Self::Dir>;
    /// Make a directory and return it.
    fn mkdir(&self, d: &Self::Dir, name: &CStr) -> R<Self::Dir>;
    /// Look up an existing directory.
    fn dir(&self, d: &Self::Dir, name: &CStr) -> R<Self::Dir>;
    /// Create an empty regular file (no handle is kept).
    fn create(&self, d: &Self::Dir, name: &CStr) -> R<()>;
    fn stat(&self, d: &Self::Dir, name: &CStr) -> R<()>;
    fn unlink(&self, d: &Self::Dir, name: &CStr) -> R<()>;
    fn rmdir(&self, d: &Self::Dir, name: &CStr) -> R<()>;
}

fn eng(e: tux3::Error) -> io::Error {
    io::Error::from_raw_os_error(e.errno().0)
}

/// The engine API; a directory is its inode number.
pub struct EngineOps {
    pub fs: Arc<Fs>,
}

impl Ops for EngineOps {
    type Dir = Ino;
    fn root(&self) -> R<Ino> {
        Ok(ROOT_INO)
    }
    fn mkdir(&self, d: &Ino, name: &CStr) -> R<Ino> {
        let a = self.fs.mkdir(*d, name.to_bytes(), 0o755, 0, 0);
        Ok(a.map_err(eng)?.ino)
    }
    fn dir(&self, d: &Ino, name: &CStr) -> R<Ino> {
        Ok(self.fs.lookup(*d, name.to_bytes()).map_err(eng)?.ino)
    }
    fn create(&self, d: &Ino, name: &CStr) -> R<()> {
        let a = self.fs.create(*d, name.to_bytes(), 0o644, 0, 0);
        a.map(|_| ()).map_err(eng)
    }
    fn stat(&self, d: &Ino, name: &CStr) -> R<()> {
        // A lookup returns the entry's attributes: what stat(2) needs.
        let a = self.fs.lookup(*d, name.to_bytes());
        a.map(|_| ()).map_err(eng)
    }
    fn unlink(&self, d: &Ino, name: &CStr) -> R<()> {
        self.fs.unlink(*d, name.to_bytes()).map_err(eng)
    }
    fn rmdir(&self, d: &Ino, name: &CStr) -> R<()> {
        self.fs.rmdir(*d, name.to_bytes()).map_err(eng)
    }
}

/// System calls under a host directory; a directory is an open descriptor.
pub struct PosixOps {
    pub root: PathBuf,
}

fn check(rc: libc::c_int) -> R<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

const DIR_FLAGS: libc::c_int = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC;

fn openat(d: libc::c_int, name: &CStr, flags: libc::c_int, mode: libc::c_uint) -> R<OwnedFd> {
    let fd = check(unsafe { libc::openat(d, name.as_ptr(), flags, mode) })?;
    // SAFETY: a descriptor just opened, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

impl Ops for PosixOps {
    type Dir = OwnedFd;
    fn root(&self) -> R<OwnedFd> {
        let c = CString::new(self.root.as_os_str().as_bytes())?;
        openat(libc::AT_FDCWD, &c, DIR_FLAGS, 0)
    }
    fn mkdir(&self, d: &OwnedFd, name: &CStr) -> R<OwnedFd> {
        check(unsafe { libc::mkdirat(d.as_raw_fd(), name.as_ptr(), 0o755) })?;
        self.dir(d, name)
    }
    fn dir(&self, d: &OwnedFd, name: &CStr) -> R<OwnedFd> {
        openat(d.as_raw_fd(), name, DIR_FLAGS, 0)
    }
    fn create(&self, d: &OwnedFd, name: &CStr) -> R<()> {
        let flags = libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_CLOEXEC;
        let fd = openat(d.as_raw_fd(), name, flags, 0o644)?;
        // close(2) with its result seen (dropping an OwnedFd ignores it).
        check(unsafe { libc::close(fd.into_raw_fd()) }).map(|_| ())
    }
    fn stat(&self, d: &OwnedFd, name: &CStr) -> R<()> {
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        check(unsafe { libc::fstatat(d.as_raw_fd(), name.as_ptr(), &mut st, 0) }).map(|_| ())
    }
    fn unlink(&self, d: &OwnedFd, name: &CStr) -> R<()> {
        check(unsafe { libc::unlinkat(d.as_raw_fd(), name.as_ptr(), 0) }).map(|_| ())
    }
    fn rmdir(&self, d: &OwnedFd, name: &CStr) -> R<()> {
        let rc = unsafe { libc::unlinkat(d.as_raw_fd(), name.as_ptr(), libc::AT_REMOVEDIR) };
        check(rc).map(|_| ())
    }
}

/// A name `P` + `n` zero-padded to `width` digits, NUL-terminated, built
/// without allocating.
struct Name([u8; 24]);

impl Name {
    fn new() -> Name {
        Name([0; 24])
    }
    fn of(&mut self, prefix: u8, mut n: u64, width: usize) -> &CStr {
        let width = width.max(digits(n)).min(20);
        self.0[0] = prefix;
        for i in (1..=width).rev() {
            self.0[i] = b'0' + (n % 10) as u8;
            n /= 10;
        }
        self.0[width + 1] = 0;
        CStr::from_bytes_with_nul(&self.0[..width + 2]).expect("one NUL at the end")
    }
}

fn digits(mut n: u64) -> usize {
    let mut d = 1;
    while n >= 10 {
        n /= 10;
        d += 1;
    }
    d
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    Flat,
    Tree,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Flat => "flat",
            Kind::Tree => "tree",
        }
    }
    pub fn phases(self) -> [&'static str; 3] {
        match self {
            Kind::Flat => ["create", "stat", "unlink"],
            Kind::Tree => ["create", "stat", "delete"],
        }
    }
}

/// The result of one phase over all threads.
#[derive(Default, Debug)]
pub struct Phase {
    pub ops: u64,
    pub errors: u64,
    pub seconds: f64,
    pub first_error: Option<String>,
}

/// Every thread's base directory (`KIND`, or `KIND/pK` with more than one
/// thread) made, untimed.
pub fn prepare<O: Ops>(o: &O, kind: Kind, threads: usize) -> R<()> {
    let root = o.root()?;
    let k = CString::new(kind.name()).expect("no NUL");
    let d = o.mkdir(&root, &k)?;
    if threads > 1 {
        let mut name = Name::new();
        for t in 0..threads {
            o.mkdir(&d, name.of(b'p', t as u64, 1))?;
        }
    }
    Ok(())
}

/// Remove the base directories (empty after the last phase), untimed.
pub fn finish<O: Ops>(o: &O, kind: Kind, threads: usize) -> R<()> {
    let root = o.root()?;
    let k = CString::new(kind.name()).expect("no NUL");
    if threads > 1 {
        let d = o.dir(&root, &k)?;
        let mut name = Name::new();
        for t in 0..threads {
            o.rmdir(&d, name.of(b'p', t as u64, 1))?;
        }
    }
    o.rmdir(&root, &k)
}

fn base<O: Ops>(o: &O, kind: Kind, threads: usize, t: usize) -> R<O::Dir> {
    let root = o.root()?;
    let k = CString::new(kind.name()).expect("no NUL");
    let d = o.dir(&root, &k)?;
    if threads == 1 {
        return Ok(d);
    }
    o.dir(&d, Name::new().of(b'p', t as u64, 1))
}

/// One thread's share of a phase.
#[derive(Default)]
struct Share {
    ops: u64,
    errors: u64,
    first_error: Option<String>,
}

impl Share {
    fn note<T>(&mut self, r: R<T>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                self.errors += 1;
                self.first_error.get_or_insert_with(|| e.to_string());
                None
            }
        }
    }
}

/// An operation in a directory that could not be made or found.
fn missing<T>() -> R<T> {
    Err(io::Error::from_raw_os_error(libc::ENOENT))
}

/// The files `0..count` of one thread, under `base`.
fn work<O: Ops>(o: &O, kind: Kind, phase: &str, base: &O::Dir, count: u64, cap: f64) -> Share {
    let mut s = Share::default();
    let (mut n1, mut n2, mut n3) = (Name::new(), Name::new(), Name::new());
    let (mut top, mut leaf): (Option<O::Dir>, Option<O::Dir>) = (None, None);
    let t0 = Instant::now();
    for i in 0..count {
        // A tree delete always finishes, so its directories can go.
        if cap > 0.0
            && i & 63 == 0
            && !(kind == Kind::Tree && phase == "delete")
            && t0.elapsed().as_secs_f64() > cap
        {
            break;
        }
        if kind == Kind::Flat {
            let f = n3.of(b'f', i, 7);
            let r = match phase {
                "create" => o.create(base, f),
                "stat" => o.stat(base, f),
                _ => o.unlink(base, f),
            };
            s.note(r);
            s.ops += 1;
            continue;
        }
        let (t, l, f) = (
            n1.of(b't', i / 1000, 5),
            n2.of(b'l', (i / 100) % 10, 3),
            n3.of(b'f', i % 100, 3),
        );
        if i % 100 == 0 {
            if i % 1000 == 0 {
                let r = if phase == "create" {
                    o.mkdir(base, t)
                } else {
                    o.dir(base, t)
                };
                top = s.note(r);
            }
            let r = match &top {
                Some(d) if phase == "create" => o.mkdir(d, l),
                Some(d) => o.dir(d, l),
                None => missing(),
            };
            leaf = s.note(r);
        }
        let r = match (&leaf, phase) {
            (Some(d), "create") => o.create(d, f),
            (Some(d), "stat") => o.stat(d, f),
            (Some(d), _) => o.unlink(d, f),
            (None, _) => missing(),
        };
        s.note(r);
        if phase == "delete" {
            if i % 100 == 99 || i == count - 1 {
                leaf = None;
                let r = top.as_ref().map_or_else(missing, |d| o.rmdir(d, l));
                s.note(r);
            }
            if i % 1000 == 999 || i == count - 1 {
                top = None;
                s.note(o.rmdir(base, t));
            }
        }
        s.ops += 1;
    }
    s
}

/// Run one phase over `counts.len()` threads, thread K on `counts[K]`
/// files. A create phase that stops at the cap leaves in `counts` what
/// each thread made, for the later phases.
pub fn phase<O: Ops>(o: &O, kind: Kind, phase: &str, counts: &mut [u64], cap: f64) -> Phase {
    let threads = counts.len();
    let ready = Barrier::new(threads + 1);
    let go = Barrier::new(threads + 1);
    let mut out = Phase::default();
    std::thread::scope(|sc| {
        let mut hs = Vec::new();
        for (t, &count) in counts.iter().enumerate() {
            let (ready, go) = (&ready, &go);
            hs.push(sc.spawn(move || {
                let b = base(o, kind, threads, t);
                ready.wait();
                go.wait();
                match b {
                    Ok(b) => work(o, kind, phase, &b, count, cap),
                    Err(e) => Share {
                        errors: 1,
                        first_error: Some(format!("base directory: {e}")),
                        ..Default::default()
                    },
                }
            }));
        }
        ready.wait();
        let t0 = Instant::now();
        go.wait();
        let shares: Vec<_> = hs.into_iter().map(|h| h.join()).collect();
        out.seconds = t0.elapsed().as_secs_f64();
        for (t, s) in shares.into_iter().enumerate() {
            match s {
                Ok(s) => {
                    if phase == "create" {
                        counts[t] = s.ops;
                    }
                    out.ops += s.ops;
                    out.errors += s.errors;
                    if out.first_error.is_none() {
                        out.first_error = s.first_error;
                    }
                }
                Err(_) => {
                    out.errors += 1;
                    out.first_error.get_or_insert_with(|| "a thread panicked".into());
                }
            }
        }
    });
    out
}

/// `n` files split over `threads`: the first `n % threads` get one more.
pub fn split(n: u64, threads: usize) -> Vec<u64> {
    let t = threads as u64;
    (0..t).map(|k| n / t + (k < n % t) as u64).collect()
}
