//! Dedupe (`tux3 dedupe`): find the blocks that regular files of a volume
//! hold twice and share them, one extent per call of
//! [`Fs::dedupe_range`], which compares the bytes and shares only what is
//! equal and unchanged since it was compared (a hash collision or a write
//! racing with us costs a call, never data).
//!
//! One code path for a mount (the server runs it in a thread) and an
//! unmounted image (the command opens it with the engine): both give an
//! [`Fs`]. Steps:
//!  1. walk: the regular files under the starting paths (each inode once,
//!     hard links included, under its first path in path order), by
//!     [`Options::threads`] threads at once (on a cold volume each
//!     directory and inode-table leaf is a read that waits on the device),
//!     with where each file's full blocks lie ([`Fs::data_runs`]). Only the live
//!     volume: snapshots are other inode tables, never in its namespace;
//!  2. read and hash: the full blocks of every file (the partial tail block
//!     is never shared), cut into segments of at most [`SEGMENT`] bytes,
//!     one per piece of a file that lies in one run on the device
//!     ([`Fs::data_runs`]; holes and preallocated blocks are not read),
//!     sorted by where they lie, and grouped into reads of at most
//!     [`Options::read_size`] (segments at most [`GAP`] blocks apart go
//!     in one read, the gap passed over) that [`Options::threads`]
//!     readers take in turn straight from the device: a volume of small
//!     files is read in long sequential reads, not one latency-bound read
//!     per file. What the device holds there is a hint (a block written
//!     since, or freed and reused, hashes as something else and costs a
//!     call that finds the bytes differ), so the volume is synced first.
//!     A group whose read fails is read again through the files
//!     ([`Fs::read_into`], [`Fs::seek_data`]), which name the failure.
//!     Each block gets a 128-bit
//!     xxh3 hash: xxh3_128 runs at tens of GB/s a core (far above any
//!     device), and 128 bits make an accidental collision between two
//!     blocks of even a 2^40-block volume a 2^-48 event — and harmless,
//!     since the bytes are compared before anything is shared. A
//!     cryptographic hash (BLAKE3) would only defend against crafted
//!     collisions, which the comparison already makes harmless;
//!  3. match, one thread, in the segments' order: an index maps a hash to the
//!     first (file, block) that had it. A block whose hash is indexed
//!     starts a run, which grows while the next block of both sides
//!     matches too (the next source block is the one indexed for the next
//!     hash), up to [`Options::max_call`]; each run is one call, made by
//!     one of [`Options::callers`] threads while the matching goes on
//!     (their reads overlap), the outcomes reported in the runs' order.
//!
//! All-zero blocks are not indexed unless [`Options::zeros`] (they should
//! be holes: `fallocate --dig-holes` makes them so); they are counted in
//! [`Report::zero_bytes`].
//!
//! Memory: the index holds 32 bytes per distinct block (a 16-byte hash,
//! a 4-byte file number and an 8-byte block, padded) plus a control byte,
//! in a table kept between 7/16 and 7/8 full: 38 to 75 bytes per indexed
//! block. [`Options::max_index`] bounds it (default [`DEFAULT_MAX_INDEX`]
//! blocks, 28 GiB of distinct 4 KiB blocks, at most 264 MiB); past it new
//! blocks are still matched against the index but no longer added
//! ([`Report::unindexed_bytes`]). The readers hold at most [`WINDOW`]
//! blocks' hashes ahead of the matcher (16 bytes a block: 64 MiB), plus
//! one read buffer each (as large as the largest segment it read, at most
//! [`Options::read_size`]); the file table holds each file's path. Many
//! readers (16) keep many small files' reads in flight at once. When the
//! calls are to carry the bytes read (`dedupe/kept.rs`), the readers stay
//! within [`KEEP_AHEAD`] bytes of the matcher and hand their buffers on,
//! and the matcher keeps copies of indexed blocks up to
//! [`Options::keep_bytes`]; the calls waiting for the callers hold at most
//! 1 MiB a side each.
//!
//! `dedupe/walk.rs` walks, `dedupe/read.rs` places, groups and hashes, `dedupe/matcher.rs` matches and
//! calls. Calls the API (`Fs`: lookup, readdir, getattr, data_runs,
//! device, read_into, seek_data, sync, dedupe_range).

mod kept;
mod matcher;
mod read;
mod walk;

use parking_lot::{Condvar, Mutex};
use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};
use tux3::error::{Errno, Error, Result};
use tux3::types::Ino;
use tux3::Fs;
use xxhash_rust::xxh3::xxh3_128;

/// Default bound of the index, in blocks (7/8 of 2^23: a table of 2^23
/// slots, 264 MiB).
pub const DEFAULT_MAX_INDEX: usize = 7 << 20;
/// Largest piece of a file one reader takes at once.
pub const SEGMENT: u64 = 64 << 20;
/// Most blocks between two segments that one device read takes in
/// (and passes over): 256 KiB of 4 KiB blocks, about what a read costs in
/// latency on a fast device.
pub const GAP: u64 = 64;
/// Blocks the readers may be ahead of the matcher (their hashes wait in
/// memory, 16 bytes a block: 64 MiB at most); a reader always may take the
/// segment after the matcher's.
pub const WINDOW: u64 = 4 << 20;
/// Bytes the readers may be ahead of the matcher when they hand it the
/// blocks they read (for the calls to carry, `dedupe/kept.rs`), in place
/// of [`WINDOW`]; a reader always may take the segment after the matcher's.
pub const KEEP_AHEAD: u64 = 64 << 20;

/// How to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Find and report, call nothing.
    pub dry_run: bool,
    /// Share all-zero blocks too (by default they are only counted).
    pub zeros: bool,
    /// Most blocks the index holds.
    pub max_index: usize,
    /// Bytes per read.
    pub read_size: usize,
    /// Most bytes per [`Fs::dedupe_range`] call (a multiple of the block
    /// size is used).
    pub max_call: u64,
    /// Reader threads.
    pub threads: usize,
    /// Threads making the calls while the matcher goes on (0: the matcher
    /// makes each call itself before it goes on). Each call reads both
    /// ranges, small ones for small files, which wait on the device: 16
    /// at once gave 1.5-3x the rate of one on two copies of /usr/include.
    pub callers: usize,
    /// Most bytes of indexed blocks kept in memory as read, so that the
    /// calls whose sources they are need not read them again
    /// (`dedupe/kept.rs`).
    pub keep_bytes: usize,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            dry_run: false,
            zeros: false,
            max_index: DEFAULT_MAX_INDEX,
            read_size: 4 << 20,
            max_call: 16 << 20,
            threads: 16,
            callers: 16,
            keep_bytes: 256 << 20,
        }
    }
}

/// What another thread sees of a running dedupe, and how it stops it.
#[derive(Default)]
pub struct Control {
    pub cancel: AtomicBool,
    /// Bytes of full blocks matched so far and in all (known once the
    /// walk is over).
    pub done: AtomicU64,
    pub total: AtomicU64,
    /// Bytes read so far (for the rate).
    pub read: AtomicU64,
}

/// What happened to one pair of ranges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A dry run: not called.
    Found,
    /// Shared.
    Shared,
    /// The bytes differed (a collision or a concurrent change), or a
    /// file was deleted meanwhile: nothing changed.
    Differed,
    /// The call failed (the message is in [`Report::failures`]).
    Failed,
}

/// A pair of equal-hashed ranges, as reported to the caller's hook.
#[derive(Debug, Clone)]
pub struct Pair<'a> {
    pub src: &'a str,
    pub src_off: u64,
    pub dst: &'a str,
    pub dst_off: u64,
    pub len: u64,
    pub outcome: Outcome,
}

/// What a run found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Regular files walked.
    pub files: u64,
    /// Bytes read.
    pub bytes_scanned: u64,
    /// Bytes of blocks whose hash an earlier block had.
    pub dup_bytes: u64,
    /// Bytes [`Fs::dedupe_range`] shared.
    pub shared_bytes: u64,
    /// Bytes of all-zero blocks read.
    pub zero_bytes: u64,
    /// Bytes of blocks not indexed, the index being full.
    pub unindexed_bytes: u64,
    /// Calls made, and those that found the bytes differed (or a file
    /// deleted since it was read).
    pub calls: u64,
    pub differing: u64,
    /// What could not be done (a file that could not be read, a call
    /// that failed), one line each.
    pub failures: Vec<String>,
    /// Stopped by [`Control::cancel`].
    pub cancelled: bool,
    pub elapsed: Duration,
}

impl Report {
    /// Bytes read per second.
    pub fn read_rate(&self) -> f64 {
        self.bytes_scanned as f64 / self.elapsed.as_secs_f64().max(1e-6)
    }
}

/// The index's hasher: the key is a hash already, its low bits will do.
#[derive(Default)]
struct LowBits(u64);

impl Hasher for LowBits {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u128(&mut self, n: u128) {
        self.0 = n as u64;
    }
}

type Index = HashMap<u128, Loc, BuildHasherDefault<LowBits>>;

/// A block: file number (in the file table) and block in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Loc {
    file: u32,
    block: u64,
}

/// A regular file to read.
struct File {
    ino: Ino,
    path: String,
    /// Full blocks.
    blocks: u64,
    /// Where they lie (`Fs::data_runs`); `None`: not known, read through
    /// the file.
    runs: Option<Vec<tux3::types::DataRun>>,
}

/// What a reader made of a block.
#[derive(Clone, Copy)]
enum Blk {
    Hole,
    Zero,
    Data(u128),
    /// Not read (an error, named in the failures).
    Skip,
    /// The same device block as an earlier file's: shared already.
    Shared,
}

/// A piece of a file: `count` blocks from block `first`, lying from device
/// block `pblock` on (`None`: read through the file).
struct Segment {
    file: u32,
    first: u64,
    count: u64,
    pblock: Option<u64>,
    /// Its first blocks that an earlier segment lies on too: shared
    /// already, so neither indexed nor matched.
    shared_head: u64,
}

/// Segments `segs` (of the device-ordered list), read from the device at
/// once: `blocks` blocks from `start` (`None`: one segment read through
/// its file).
struct Batch {
    segs: std::ops::Range<usize>,
    start: Option<u64>,
    blocks: u64,
}

/// The readers' answer for one segment.
struct Hashed {
    blocks: Vec<Blk>,
    read: u64,
    failure: Option<String>,
    /// Its bytes as read from the device: the read's buffer, where the
    /// segment begins in it, and the volume's write epoch before the read
    /// (none: read through the file, too far ahead, or writes in flight).
    data: Option<(std::sync::Arc<kept::Pooled>, usize, u64)>,
}

/// Dedupe the regular files under `paths` (relative to directory `base`;
/// none: `base` itself). `hook` sees each pair, in order.
pub fn run(
    fs: &Fs,
    base: Ino,
    paths: &[Vec<u8>],
    opts: &Options,
    ctl: &Control,
    hook: &mut dyn FnMut(&Pair),
) -> Result<Report> {
    let began = Instant::now();
    let bs = u64::from(fs.statfs()?.block_size);
    let mut report = Report::default();
    // What is only in memory goes to the device first: the blocks are
    // hashed where the files' extents say they lie.
    if !fs.is_read_only() {
        fs.sync()?;
    }
    let files = walk::walk(fs, base, paths, bs, opts.threads)?;
    report.files = files.len() as u64;
    let segments = read::place(&files, bs);
    let most = ((opts.read_size as u64).max(bs) / bs).max(1);
    let batches = read::batches(&segments, most);
    // Blocks of the segments before each (where the window stands).
    let mut before = Vec::with_capacity(segments.len() + 1);
    before.push(0u64);
    for seg in &segments {
        before.push(before.last().copied().unwrap_or(0) + seg.count);
    }
    ctl.total
        .store(files.iter().map(|f| f.blocks * bs).sum(), Relaxed);
    let max_call = (opts.max_call / bs).max(1);
    let zero_hash = xxh3_128(&vec![0u8; bs as usize]);
    let callers = if opts.dry_run { 0 } else { opts.callers };
    let (to_call, calls) = crossbeam_channel::bounded::<matcher::Call>(matcher::BATCH * callers.max(1));
    let (to_answer, answers) = crossbeam_channel::unbounded::<matcher::Answer>();
    let mut m = matcher::Matcher {
        fs,
        files: &files,
        bs,
        opts,
        max_call,
        index: Index::default(),
        kept: kept::Kept::new(bs, if opts.dry_run { 0 } else { opts.keep_bytes }),
        run: None,
        report: &mut report,
        hook,
        to_call: (callers > 0).then_some(to_call),
        answers,
        sent: BTreeMap::new(),
        early: BTreeMap::new(),
        seq: 0,
    };
    // Readers that hand their bytes on stay nearer the matcher.
    let keeping = !opts.dry_run && opts.keep_bytes > 0;
    let window = if keeping { (KEEP_AHEAD / bs).max(1) } else { WINDOW };
    let pool = &std::sync::Arc::new(kept::Pool::default());
    let next = AtomicUsize::new(0);
    let consumed = Mutex::new(0usize);
    let moved = Condvar::new();
    let (tx, rx) = crossbeam_channel::unbounded::<(usize, Hashed)>();
    std::thread::scope(|s| {
        for _ in 0..callers {
            let (calls, to_answer) = (calls.clone(), to_answer.clone());
            s.spawn(move || matcher::calls(fs, calls, to_answer));
        }
        drop((calls, to_answer));
        for _ in 0..opts.threads.max(1) {
            let tx = tx.clone();
            let (next, consumed, moved, files, segments, batches, before) =
                (&next, &consumed, &moved, &files, &segments, &batches, &before);
            s.spawn(move || {
                let mut buf = Vec::new();
                while let Some(b) = batches.get(next.fetch_add(1, Relaxed)) {
                    let (i, last) = (b.segs.start, b.segs.end - 1);
                    {
                        let mut c = consumed.lock();
                        while i > *c && before[last + 1] - before[*c] > window && !ctl.cancel.load(Relaxed) {
                            moved.wait_for(&mut c, Duration::from_millis(100));
                        }
                    }
                    if ctl.cancel.load(Relaxed) {
                        break;
                    }
                    // The bytes go to the matcher for the calls to carry
                    // when no write is in flight on the device.
                    let keep = keeping.then(|| fs.write_epoch()).flatten();
                    let hashed =
                        read::hash_batch(fs, segments, b, (bs, zero_hash), (&mut buf, keep, pool), ctl)
                            .unwrap_or_else(|| {
                                segments[b.segs.clone()]
                                    .iter()
                                    .map(|seg| {
                                        let want = (seg.count * bs).min(most * bs) as usize;
                                        if buf.len() < want {
                                            buf.resize(want, 0);
                                        }
                                        read::hash_segment(
                                            fs,
                                            &files[seg.file as usize],
                                            seg,
                                            bs,
                                            zero_hash,
                                            &mut buf,
                                            ctl,
                                        )
                                    })
                                    .collect()
                            });
                    if hashed
                        .into_iter()
                        .enumerate()
                        .any(|(k, h)| tx.send((i + k, h)).is_err())
                    {
                        break;
                    }
                }
            });
        }
        drop(tx);
        let mut early: BTreeMap<usize, Hashed> = BTreeMap::new();
        let mut want = 0;
        while want < segments.len() {
            if ctl.cancel.load(Relaxed) {
                m.report.cancelled = true;
                break;
            }
            let h = match early.remove(&want) {
                Some(h) => h,
                None => match rx.recv_timeout(Duration::from_millis(100)) {
                    Ok((i, h)) if i == want => h,
                    Ok((i, h)) => {
                        early.insert(i, h);
                        continue;
                    }
                    Err(crossbeam_channel::RecvTimeoutError::Timeout) => continue,
                    Err(crossbeam_channel::RecvTimeoutError::Disconnected) => break,
                },
            };
            let seg = &segments[want];
            m.report.bytes_scanned += h.read;
            if let Some(f) = h.failure {
                m.report.failures.push(f);
            }
            let bytes = match (h.data, seg.pblock) {
                (Some((buf, at, epoch)), Some(pblock)) => Some(kept::SegBytes {
                    buf,
                    at,
                    pblock,
                    epoch,
                }),
                _ => None,
            };
            m.segment(seg, &h.blocks, bytes.as_ref());
            m.answered(false);
            ctl.done.fetch_add(seg.count * bs, Relaxed);
            want += 1;
            *consumed.lock() = want;
            moved.notify_all();
        }
        m.flush();
        m.to_call = None;
        m.answered(true);
        if want < segments.len() {
            // Readers waiting for room see the cancel.
            ctl.cancel.store(true, Relaxed);
            m.report.cancelled = true;
        }
        drop(rx);
        moved.notify_all();
    });
    report.elapsed = began.elapsed();
    Ok(report)
}

/// Whether `e` says a file went away since the walk.
fn gone(e: &Error) -> bool {
    matches!(e.errno(), Errno::ENOENT | Errno::ESTALE)
}
