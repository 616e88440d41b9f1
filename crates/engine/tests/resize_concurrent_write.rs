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

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::thread::ThreadId;
use tux3::device::{CounterSnapshot, Device, MemDevice};
use tux3::{FormatOptions, Fs, Ino, OpenOptions, ROOT_INO};

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

/// The hook's state: the volume and files it writes, the new end, and
/// the thread that resizes.
#[derive(Default)]
struct Hook {
    fs: OnceLock<Weak<Fs>>,
    files: OnceLock<Vec<Ino>>,
    limit: AtomicU64,
    resizer: OnceLock<ThreadId>,
    fired: AtomicBool,
    /// What the hook's own calls failed with.
    failed: Mutex<Option<String>>,
}

impl Hook {
    fn rewrite(&self) -> tux3::Result<()> {
        let (Some(fs), Some(files)) = (self.fs.get().and_then(Weak::upgrade), self.files.get()) else {
            return Ok(());
        };
        for (i, &ino) in files.iter().enumerate() {
            let c = new_content(i);
            fs.write(
                ino,
                (REWRITE.start * 1024) as u64,
                &c[REWRITE.start * 1024..REWRITE.end * 1024],
            )?;
            if i == FILES / 2 {
                // The first half committed (their pages clean, or let go
                // of), the rest dirty in the open delta.
                fs.sync()?;
            }
        }
        Ok(())
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
        let other_thread = h.resizer.get().is_some_and(|t| *t != std::thread::current().id());
        if limit > 0
            && block >= limit
            && buf.len() > BS as usize
            && other_thread
            && !h.fired.swap(true, SeqCst)
        {
            if let Err(e) = h.rewrite() {
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
    let hook = Arc::new(Hook::default());
    let dev: Arc<dyn Device> = Arc::new(Hooked {
        mem: MemDevice::new(BS, BLOCKS),
        hook: hook.clone(),
    });
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    // No clean pages kept: a block committed meanwhile is read from the
    // device, or from what the shrink read before.
    let opts = OpenOptions {
        clean_limit: 0,
        ..OpenOptions::default()
    };
    let fs = Arc::new(Fs::open(dev.clone(), opts.clone()).unwrap());
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
    hook.fs.set(Arc::downgrade(&fs)).unwrap();
    hook.files.set(files.clone()).unwrap();
    hook.resizer.set(std::thread::current().id()).unwrap();
    hook.limit.store(new_end, SeqCst);
    let r = fs.resize(new_end).unwrap();
    hook.limit.store(0, SeqCst);
    assert!(
        hook.fired.load(SeqCst),
        "the shrink read no data past the end off its own thread"
    );
    assert_eq!(*hook.failed.lock().unwrap(), None, "the write during the shrink");
    assert!(r.moved_blocks > 0);
    assert_eq!(dev.block_count(), new_end);
    check(&fs, &files);

    let fs = Arc::into_inner(fs).expect("the hook holds the volume weakly");
    fs.close().unwrap();
    let report = tux3_tools::fsck::check(dev.clone(), &Default::default()).unwrap();
    assert!(report.problems.is_empty(), "fsck: {:?}", report.problems);
    let fs = Fs::open(dev.clone(), opts).unwrap();
    check(&fs, &files);
    fs.close().unwrap();
}
