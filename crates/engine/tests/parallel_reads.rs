//! Reads of one file run in parallel: a read maps its extents under the
//! file's lock and makes its device reads after letting go of it (and of
//! the delta's shared guard); a block it mapped is not reused under it
//! (its read epoch holds the frees back, `backend/readers.rs`; see also
//! `reads_beside_commits.rs`).
//!
//! - Two readers of the same file meet inside the device: a device whose
//!   armed reads wait for a second read to arrive shows it. Were reads
//!   serialised by the file's lock, the first would wait alone until its
//!   deadline and the test would fail.
//! - Readers of a file whose blocks a writer keeps rewriting and committing
//!   (so its old blocks are freed, and reused by later commits) only ever
//!   see whole blocks the writer wrote there: never another block's bytes.
//! - Inodes not in cache load under the shared guard too: two stats of
//!   cold inodes in different inode-table leaves meet in the device (were
//!   a load exclusive, the second would wait for the first to finish).
//! - So do the inodes an unlink names: two unlinks of cold files meet in
//!   the device too.
//! - An inode freed by an unlink under the shared guard is not loaded back
//!   from the inode table, whose record of it stays until the next
//!   exclusive operation settles the free.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use tux3::device::{CounterSnapshot, Device, MemDevice};
use tux3::{FormatOptions, Fs, Ino, OpenOptions, ROOT_INO};

const BS: usize = 4096;

/// A memory device whose reads, once armed, wait (up to a deadline) until
/// two of them are inside at once.
struct MeetingDevice {
    inner: MemDevice,
    armed: AtomicBool,
    inside: Mutex<usize>,
    arrived: Condvar,
    met: AtomicBool,
    /// An armed read waited until its deadline without meeting another.
    alone: AtomicBool,
}

impl MeetingDevice {
    fn new(blocks: u64) -> MeetingDevice {
        MeetingDevice {
            inner: MemDevice::new(BS as u32, blocks),
            armed: AtomicBool::new(false),
            inside: Mutex::new(0),
            arrived: Condvar::new(),
            met: AtomicBool::new(false),
            alone: AtomicBool::new(false),
        }
    }
}

impl Device for MeetingDevice {
    fn block_size(&self) -> u32 {
        self.inner.block_size()
    }
    fn block_count(&self) -> u64 {
        self.inner.block_count()
    }
    fn read(&self, block: u64, buf: &mut [u8]) -> std::io::Result<()> {
        if self.armed.load(Ordering::SeqCst) {
            let deadline = Instant::now() + Duration::from_secs(20);
            let mut inside = self.inside.lock().unwrap();
            *inside += 1;
            if *inside >= 2 {
                self.met.store(true, Ordering::SeqCst);
                self.arrived.notify_all();
            }
            while !self.met.load(Ordering::SeqCst) {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    self.alone.store(true, Ordering::SeqCst);
                    break;
                }
                inside = self.arrived.wait_timeout(inside, left).unwrap().0;
            }
            *inside -= 1;
        }
        self.inner.read(block, buf)
    }
    fn write(&self, block: u64, buf: &[u8]) -> std::io::Result<()> {
        self.inner.write(block, buf)
    }
    fn flush(&self) -> std::io::Result<()> {
        self.inner.flush()
    }
    fn counters(&self) -> CounterSnapshot {
        self.inner.counters()
    }
}

fn no_commit_thread() -> OpenOptions {
    OpenOptions {
        commit_interval: None,
        ..OpenOptions::default()
    }
}

#[test]
fn two_reads_of_one_file_are_in_the_device_at_once() {
    let dev = Arc::new(MeetingDevice::new(8192));
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    let expect: Vec<u8> = (0..2 << 20).map(|k: usize| (k / BS * 7 + k) as u8).collect();
    {
        let fs = Fs::open(dev.clone(), no_commit_thread()).unwrap();
        let ino = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap().ino;
        fs.write(ino, 0, &expect).unwrap();
        fs.close().unwrap();
    }
    // Reopened, nothing of the file is cached but what a first read loads:
    // its inode and extent map. The reads below go to the device.
    let fs = Fs::open(dev.clone(), no_commit_thread()).unwrap();
    let ino = fs.lookup(ROOT_INO, b"f").unwrap().ino;
    let mut one = [0u8; 1];
    fs.read_into(ino, 0, &mut one).unwrap();
    fs.read_into(ino, 1 << 20, &mut one).unwrap();
    dev.armed.store(true, Ordering::SeqCst);
    let halves: Vec<Vec<u8>> = std::thread::scope(|s| {
        let readers: Vec<_> = (0..2u64)
            .map(|h| {
                let fs = &fs;
                s.spawn(move || {
                    let mut out = vec![0u8; 1 << 20];
                    let n = fs.read_into(ino, h << 20, &mut out).unwrap();
                    assert_eq!(n, 1 << 20);
                    out
                })
            })
            .collect();
        readers.into_iter().map(|r| r.join().unwrap()).collect()
    });
    dev.armed.store(false, Ordering::SeqCst);
    assert!(
        dev.met.load(Ordering::SeqCst) && !dev.alone.load(Ordering::SeqCst),
        "a read of the file waited in the device alone: the other could not get there"
    );
    assert!(halves.concat() == expect, "and they read the file");
    fs.close().unwrap();
}

/// Block `b` of the file as the writer's `version` of it: every 8-byte
/// word says (block, version).
fn block(b: u64, version: u64) -> Vec<u8> {
    let word = (b << 32 | version).to_le_bytes();
    word.iter().copied().cycle().take(BS).collect()
}

/// The (block, version) a block read back says it is, if it is whole.
fn stamp(data: &[u8]) -> Option<(u64, u64)> {
    let word = u64::from_le_bytes(data[..8].try_into().unwrap());
    data.chunks(8)
        .all(|w| w == word.to_le_bytes())
        .then_some((word >> 32, word & 0xffff_ffff))
}

#[test]
fn readers_see_whole_blocks_of_their_file_while_it_is_rewritten_and_committed() {
    const BLOCKS: u64 = 256;
    const ROUNDS: u64 = 40;
    let dev = Arc::new(MemDevice::new(BS as u32, 16384));
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    let fs = Fs::open(dev, no_commit_thread()).unwrap();
    let ino: Ino = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap().ino;
    for b in 0..BLOCKS {
        fs.write(ino, b * BS as u64, &block(b, 0)).unwrap();
    }
    fs.sync().unwrap();
    // The newest version the writer has begun to write.
    let written = AtomicU64::new(0);
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        // The writer: each round rewrites every other block (alternating
        // halves) and commits, freeing the old copies for later commits.
        s.spawn(|| {
            for v in 1..=ROUNDS {
                written.store(v, Ordering::SeqCst);
                for b in (v % 2..BLOCKS).step_by(2) {
                    fs.write(ino, b * BS as u64, &block(b, v)).unwrap();
                }
                fs.sync().unwrap();
            }
            done.store(true, Ordering::SeqCst);
        });
        for r in 0..3u64 {
            let (fs, written, done) = (&fs, &written, &done);
            s.spawn(move || {
                let mut out = vec![0u8; (BLOCKS as usize) * BS];
                let mut passes = 0;
                while !done.load(Ordering::SeqCst) || passes == 0 {
                    // In pieces of 64 KiB from a different place each pass.
                    let piece = 16 * BS;
                    let start = (passes * 3 + r as usize) % (out.len() / piece);
                    for k in (start..out.len() / piece).chain(0..start) {
                        let at = k * piece;
                        let n = fs.read_into(ino, at as u64, &mut out[at..at + piece]).unwrap();
                        assert_eq!(n, piece);
                    }
                    let newest = written.load(Ordering::SeqCst);
                    for (b, data) in out.chunks(BS).enumerate() {
                        let Some((which, version)) = stamp(data) else {
                            panic!("reader {r}: block {b} is not a whole block the writer wrote");
                        };
                        assert_eq!(which, b as u64, "reader {r}: block {b} holds block {which}");
                        assert!(version <= newest, "reader {r}: block {b} from the future");
                    }
                    passes += 1;
                }
            });
        }
    });
    fs.close().unwrap();
}

/// Files in the root of a fresh volume on a meeting device.
const COLD_FILES: usize = 3000;

/// The mode file `k` of [`cold_files`] gets.
fn cold_mode(k: usize) -> u32 {
    0o600 | k as u32 & 0o77
}

/// A volume on a meeting device with [`COLD_FILES`] files `fK` in its
/// root, closed (so nothing of them is cached at the next open): the
/// device and the files' inode numbers.
fn cold_files() -> (Arc<MeetingDevice>, Vec<Ino>) {
    let dev = Arc::new(MeetingDevice::new(8192));
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    let fs = Fs::open(dev.clone(), no_commit_thread()).unwrap();
    let inos = (0..COLD_FILES)
        .map(|k| {
            let name = format!("f{k}");
            fs.create(ROOT_INO, name.as_bytes(), cold_mode(k), 0, 0)
                .unwrap()
                .ino
        })
        .collect();
    fs.close().unwrap();
    (dev, inos)
}

#[test]
fn two_cold_inode_loads_are_in_the_device_at_once() {
    let (dev, inos) = cold_files();
    // Reopened, the inode table's root is loaded (open reads its last
    // entry and the root directory's), its middle leaves are not.
    let fs = Fs::open(dev.clone(), no_commit_thread()).unwrap();
    let picks = [COLD_FILES / 3, 2 * COLD_FILES / 3];
    dev.armed.store(true, Ordering::SeqCst);
    let modes: Vec<u32> = std::thread::scope(|s| {
        let stats: Vec<_> = picks
            .iter()
            .map(|&k| {
                let fs = &fs;
                let ino = inos[k];
                s.spawn(move || fs.getattr(ino).unwrap().mode)
            })
            .collect();
        stats.into_iter().map(|r| r.join().unwrap()).collect()
    });
    dev.armed.store(false, Ordering::SeqCst);
    assert!(
        dev.met.load(Ordering::SeqCst) && !dev.alone.load(Ordering::SeqCst),
        "a cold inode load waited in the device alone: the other could not get there"
    );
    for (k, mode) in picks.iter().zip(modes) {
        assert_eq!(mode & 0o7777, cold_mode(*k), "file {k}'s mode");
    }
    // Every inode still reads back as created, cold or not.
    for (k, ino) in inos.iter().enumerate() {
        assert_eq!(fs.getattr(*ino).unwrap().mode & 0o7777, cold_mode(k));
    }
    fs.close().unwrap();
}

#[test]
fn two_unlinks_of_cold_files_load_them_in_the_device_at_once() {
    let (dev, _) = cold_files();
    let fs = Fs::open(dev.clone(), no_commit_thread()).unwrap();
    // The directory's entries in cache (a full listing loads its tree);
    // the files' inodes are not.
    let mut listed = 0;
    let mut pos = 0;
    loop {
        let batch = fs.readdir(ROOT_INO, pos, 512).unwrap();
        listed += batch.len();
        match batch.last() {
            Some(e) => pos = e.next,
            None => break,
        }
    }
    assert_eq!(listed, COLD_FILES);
    let names = [format!("f{}", COLD_FILES / 3), format!("f{}", 2 * COLD_FILES / 3)];
    dev.armed.store(true, Ordering::SeqCst);
    std::thread::scope(|s| {
        for name in &names {
            let fs = &fs;
            s.spawn(move || fs.unlink(ROOT_INO, name.as_bytes()).unwrap());
        }
    });
    dev.armed.store(false, Ordering::SeqCst);
    assert!(
        dev.met.load(Ordering::SeqCst) && !dev.alone.load(Ordering::SeqCst),
        "an unlink loading a cold inode waited in the device alone"
    );
    fs.sync().unwrap();
    for name in &names {
        assert_eq!(
            fs.lookup(ROOT_INO, name.as_bytes()).unwrap_err().errno(),
            tux3::Errno::ENOENT
        );
    }
    assert!(fs.lookup(ROOT_INO, b"f0").is_ok());
    fs.close().unwrap();
}

#[test]
fn an_inode_freed_under_the_shared_guard_is_not_loaded_back() {
    let dev = Arc::new(MemDevice::new(BS as u32, 8192));
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    let (gone, kept) = {
        let fs = Fs::open(dev.clone(), no_commit_thread()).unwrap();
        let gone = fs.create(ROOT_INO, b"gone", 0o644, 0, 0).unwrap().ino;
        let kept = fs.create(ROOT_INO, b"kept", 0o644, 0, 0).unwrap().ino;
        fs.close().unwrap();
        (gone, kept)
    };
    let fs = Fs::open(dev.clone(), no_commit_thread()).unwrap();
    // Loaded cold, then unlinked with nothing holding it: freed at once,
    // while the inode table still lists it (no commit thread, and nothing
    // here takes the volume exclusively).
    assert_eq!(fs.lookup(ROOT_INO, b"gone").unwrap().ino, gone);
    fs.unlink(ROOT_INO, b"gone").unwrap();
    assert_eq!(fs.getattr(gone).unwrap_err().errno(), tux3::Errno::ENOENT);
    assert_eq!(fs.getattr(kept).unwrap().ino, kept);
    fs.sync().unwrap();
    assert_eq!(fs.getattr(gone).unwrap_err().errno(), tux3::Errno::ENOENT);
    let names: Vec<Vec<u8>> = fs
        .readdir(ROOT_INO, 0, 16)
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, vec![b"kept".to_vec()]);
    fs.close().unwrap();
}
