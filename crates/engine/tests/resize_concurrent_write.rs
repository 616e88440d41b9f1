//! Scenario: files written while a shrink moves their data. The shrink
//! reads a batch's data without the delta guard and makes it dirty
//! afterwards; a write that lands in between — committed, or still in
//! the open delta — must win: the stale contents read before it are never
//! made dirty over it. A device hook makes the write land exactly there:
//! on the shrink's first read of data past the new end (a read of several
//! blocks, from a thread other than the one resizing), after the read
//! itself, it rewrites the middle of every file, commits half of them and
//! leaves the other half dirty. After the shrink, after a reopen and for
//! fsck everything reads as last written.
//!
//! The same for clones written while a shrink points them at the copy it
//! moved. A shrink moves blocks clones share once, with the first file it
//! finds mapping them, and then points the others at that copy; between
//! the move and the pointing, files may be written. The hook fires on the
//! shrink's first read of the old blocks it compares the copy with (a read
//! past the new end, on the resizing thread) and rewrites part of the file
//! that moved them (committed), part of one clone (committed) and part of
//! another (left dirty in the open delta). No clone may end up reading the
//! moved file's new bytes, nor lose its own: after the shrink, after a
//! reopen and for fsck everything reads as last written, and what nobody
//! wrote is still shared.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::thread::ThreadId;
use tux3::device::{CounterSnapshot, Device, MemDevice};
use tux3::{FormatOptions, Fs, Ino, OpenOptions, Resized, ROOT_INO};

const BS: u32 = 1024;
const BLOCKS: u64 = 16_000;
/// Files of [`KIB`] first written below the files that move.
const FILLERS: usize = 28;
const FILES: usize = 16;
const KIB: usize = 256;
/// The part of each file the hook writes again, in KiB.
const REWRITE: std::ops::Range<usize> = 64..192;

fn old_content(i: usize) -> Vec<u8> {
    (0..KIB * 1024).map(|b| (b / 1024 + i * 13) as u8).collect()
}

fn new_content(i: usize) -> Vec<u8> {
    let mut c = old_content(i);
    for (k, b) in c[REWRITE.start * 1024..REWRITE.end * 1024].iter_mut().enumerate() {
        *b = !(k as u8) ^ (i as u8);
    }
    c
}

/// What the hook does, and on which reads.
type Action = Box<dyn Fn(&Fs, &[Ino]) -> tux3::Result<()> + Send + Sync>;

/// The hook's state: the volume and files it writes, the new end, the
/// thread that resizes, and whether it fires on that thread's reads
/// (else on the others').
struct Hook {
    fs: OnceLock<Weak<Fs>>,
    files: OnceLock<Vec<Ino>>,
    limit: AtomicU64,
    resizer: OnceLock<ThreadId>,
    on_resizer: bool,
    action: Action,
    fired: AtomicBool,
    /// What the hook's own calls failed with.
    failed: Mutex<Option<String>>,
}

impl Hook {
    fn new(on_resizer: bool, action: Action) -> Arc<Hook> {
        Arc::new(Hook {
            fs: OnceLock::new(),
            files: OnceLock::new(),
            limit: AtomicU64::new(0),
            resizer: OnceLock::new(),
            on_resizer,
            action,
            fired: AtomicBool::new(false),
            failed: Mutex::new(None),
        })
    }

    fn fire(&self) -> tux3::Result<()> {
        match (self.fs.get().and_then(Weak::upgrade), self.files.get()) {
            (Some(fs), Some(files)) => (self.action)(&fs, files),
            _ => Ok(()),
        }
    }

    /// Shrink `fs` to `new_end` with the hook armed; the hook must fire.
    fn shrink(&self, fs: &Arc<Fs>, files: &[Ino], new_end: u64) -> Resized {
        self.fs.set(Arc::downgrade(fs)).unwrap();
        self.files.set(files.to_vec()).unwrap();
        self.resizer.set(std::thread::current().id()).unwrap();
        self.limit.store(new_end, SeqCst);
        let r = fs.resize(new_end).unwrap();
        self.limit.store(0, SeqCst);
        assert!(self.fired.load(SeqCst), "the hook never fired");
        assert_eq!(*self.failed.lock().unwrap(), None, "the writes during the shrink");
        r
    }
}

struct Hooked {
    mem: MemDevice,
    hook: Arc<Hook>,
}

impl Device for Hooked {
    fn block_size(&self) -> u32 {
        self.mem.block_size()
    }
    fn block_count(&self) -> u64 {
        self.mem.block_count()
    }
    fn resize(&self, blocks: u64) -> std::io::Result<u64> {
        self.mem.resize(blocks)
    }
    fn read(&self, block: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.mem.read(block, buf)?;
        let h = &self.hook;
        let limit = h.limit.load(SeqCst);
        let on_resizer = h.resizer.get().is_some_and(|t| *t == std::thread::current().id());
        if limit > 0
            && block >= limit
            && buf.len() > BS as usize
            && on_resizer == h.on_resizer
            && !h.fired.swap(true, SeqCst)
        {
            if let Err(e) = h.fire() {
                *h.failed.lock().unwrap() = Some(e.to_string());
            }
        }
        Ok(())
    }
    fn write(&self, block: u64, buf: &[u8]) -> std::io::Result<()> {
        self.mem.write(block, buf)
    }
    fn flush(&self) -> std::io::Result<()> {
        self.mem.flush()
    }
    fn counters(&self) -> CounterSnapshot {
        self.mem.counters()
    }
}

/// A hooked volume of [`BLOCKS`], formatted and open, keeping no clean
/// pages: a block committed meanwhile is read from the device, or from
/// what the shrink read before.
fn hooked(hook: &Arc<Hook>) -> (Arc<dyn Device>, Arc<Fs>, OpenOptions) {
    let dev: Arc<dyn Device> = Arc::new(Hooked {
        mem: MemDevice::new(BS, BLOCKS),
        hook: hook.clone(),
    });
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    let opts = OpenOptions {
        clean_limit: 0,
        ..OpenOptions::default()
    };
    let fs = Arc::new(Fs::open(dev.clone(), opts.clone()).unwrap());
    (dev, fs, opts)
}

/// Close `fs`, check the volume with fsck and reopen it.
fn reopen(dev: &Arc<dyn Device>, fs: Arc<Fs>, opts: OpenOptions) -> Fs {
    let fs = Arc::into_inner(fs).expect("the hook holds the volume weakly");
    fs.close().unwrap();
    let report = tux3_tools::fsck::check(dev.clone(), &Default::default()).unwrap();
    assert!(report.problems.is_empty(), "fsck: {:?}", report.problems);
    Fs::open(dev.clone(), opts).unwrap()
}

fn check(fs: &Fs, files: &[Ino]) {
    for (i, &ino) in files.iter().enumerate() {
        let got = fs.read(ino, 0, KIB * 1024).unwrap();
        assert!(
            got == new_content(i),
            "f{i}: not as last written (stale data moved over it?)"
        );
    }
}

#[test]
fn data_written_while_a_shrink_reads_it_is_never_overwritten_by_the_stale_copy() {
    let hook = Hook::new(
        false,
        Box::new(|fs, files| {
            for (i, &ino) in files.iter().enumerate() {
                let c = new_content(i);
                fs.write(
                    ino,
                    (REWRITE.start * 1024) as u64,
                    &c[REWRITE.start * 1024..REWRITE.end * 1024],
                )?;
                if i == FILES / 2 {
                    // The first half committed (their pages clean, or let
                    // go of), the rest dirty in the open delta.
                    fs.sync()?;
                }
            }
            Ok(())
        }),
    );
    let (dev, fs, opts) = hooked(&hook);
    // Fillers below, then the files, then every filler deleted: the
    // files lie past the new end, with room for them below it.
    let mut fillers = Vec::new();
    for i in 0..FILLERS {
        let name = format!("filler{i}");
        let ino = fs.create(ROOT_INO, name.as_bytes(), 0o644, 0, 0).unwrap().ino;
        fs.write(ino, 0, &old_content(i + 100)).unwrap();
        fillers.push(name);
    }
    fs.sync().unwrap();
    let mut files = Vec::new();
    for i in 0..FILES {
        let ino = fs
            .create(ROOT_INO, format!("f{i}").as_bytes(), 0o644, 0, 0)
            .unwrap()
            .ino;
        fs.write(ino, 0, &old_content(i)).unwrap();
        files.push(ino);
    }
    fs.sync().unwrap();
    for name in &fillers {
        fs.unlink(ROOT_INO, name.as_bytes()).unwrap();
    }
    fs.sync().unwrap();

    let new_end = BLOCKS / 2;
    let r = hook.shrink(&fs, &files, new_end);
    assert!(r.moved_blocks > 0);
    assert_eq!(dev.block_count(), new_end);
    check(&fs, &files);
    let fs = reopen(&dev, fs, opts);
    check(&fs, &files);
    fs.close().unwrap();
}

/// The clone race: the source's KiB, its clones, and what the hook writes:
/// the source's KiB, then clone 1's (committed), then clone 2's (left
/// dirty); the rest of each file is left alone.
const SRC_KIB: usize = 1024;
const CLONES: usize = 6;
const WRITES: [(usize, std::ops::Range<usize>); 3] = [(0, 0..300), (2, 300..600), (3, 600..900)];

fn src_content() -> Vec<u8> {
    (0..SRC_KIB * 1024).map(|b| (b / 1024 * 7 + 3) as u8).collect()
}

/// File `f`'s content once the hook wrote (0: the source, 1 + i: clone i).
fn written_content(f: usize) -> Vec<u8> {
    let mut c = src_content();
    for (who, r) in WRITES.iter() {
        if *who == f {
            for (k, b) in c[r.start * 1024..r.end * 1024].iter_mut().enumerate() {
                *b = !(k as u8) ^ (f as u8);
            }
        }
    }
    c
}

#[test]
fn clones_written_while_a_shrink_points_them_at_the_moved_copy_keep_their_bytes() {
    let hook = Hook::new(
        true,
        Box::new(|fs, files| {
            for (k, (f, r)) in WRITES.iter().enumerate() {
                let c = written_content(*f);
                fs.write(
                    files[*f],
                    (r.start * 1024) as u64,
                    &c[r.start * 1024..r.end * 1024],
                )?;
                if k == 1 {
                    fs.sync()?;
                }
            }
            Ok(())
        }),
    );
    let (dev, fs, opts) = hooked(&hook);
    // A filler below, then the source and its clones past the new end.
    let filler = fs.create(ROOT_INO, b"filler", 0o644, 0, 0).unwrap().ino;
    fs.write(filler, 0, &vec![0x5a; 8 << 20]).unwrap();
    fs.sync().unwrap();
    let src = fs.create(ROOT_INO, b"src", 0o644, 0, 0).unwrap().ino;
    fs.write(src, 0, &src_content()).unwrap();
    fs.sync().unwrap();
    let mut files = vec![src];
    for i in 0..CLONES {
        let ino = fs
            .create(ROOT_INO, format!("clone{i}").as_bytes(), 0o644, 0, 0)
            .unwrap()
            .ino;
        fs.clone_range(src, 0, ino, 0, (SRC_KIB * 1024) as u64).unwrap();
        files.push(ino);
    }
    fs.unlink(ROOT_INO, b"filler").unwrap();
    fs.sync().unwrap();

    let new_end = BLOCKS / 2;
    hook.shrink(&fs, &files, new_end);
    assert_eq!(dev.block_count(), new_end);
    let check = |fs: &Fs| {
        for (f, &ino) in files.iter().enumerate() {
            let got = fs.read(ino, 0, SRC_KIB * 1024).unwrap();
            assert!(got == written_content(f), "file {f} not as last written");
        }
    };
    check(&fs);
    // The last 124 KiB nobody wrote: the source and every clone share it.
    let saved = fs.sharing().saved_blocks;
    assert!(saved >= CLONES as u64 * 124, "{saved} blocks shared");
    let fs = reopen(&dev, fs, opts);
    check(&fs);
    fs.close().unwrap();
}
