//! The read pass of a scrub: the plan's blocks from a position on, in
//! address order, merged into runs of adjacent blocks. Reader threads
//! take the runs in turn, each reading one into an aligned buffer of a
//! small pool and verifying it (data against its extent's checksums; tree
//! nodes, bitmap and log blocks by their header: magic, CRC and own
//! address; superblocks by their own checksum); the caller takes the
//! results back in address order, so that its position only ever moves
//! past checked blocks. The reads go through the device's uncached handle
//! (`O_DIRECT` on an image file) when it has one, the device itself when
//! not or when that handle fails. A bad block is only a candidate here:
//! `confirm` re-checks it with commits held.
//!
//! Calls the device and the structures' and codec's verifiers.

use super::plan::{Item, Plan, What};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};
use tux3::codec;
use tux3::device::{AlignedBuf, Device};
use tux3::structures::btree::node::{BRANCH_MAGIC, LEAF_MAGIC};
use tux3::structures::extent::block_sum;
use tux3::structures::superblock::Superblock;

/// Largest read of an unthrottled scrub: adjacent blocks are merged up
/// to this many bytes.
pub const RUN_BYTES: u64 = 4 << 20;
/// Reads in flight at once in an unthrottled scrub.
const READERS: usize = 2;
/// Largest read, and reads in flight, of a scrub with a rate: short reads
/// one at a time, behind which a foreground fsync waits little.
const THROTTLED_RUN_BYTES: u64 = 1 << 20;
/// Buffers beyond the readers': results the caller has still to take
/// (it saves the position now and then, while the readers go on).
const SPARE_BUFFERS: usize = 3;

/// A block that failed its check, and why.
#[derive(Debug, Clone)]
pub struct Bad {
    pub block: u64,
    pub why: String,
}

/// Why a block read from `b` (`item` holds it) is bad, if it is.
pub fn check(dev_blocks: u64, item: &Item, b: u64, buf: &[u8]) -> Option<String> {
    match &item.what {
        What::Data { .. } => {
            let want = item.sum_at(b)?;
            let got = block_sum(buf);
            (want != got)
                .then(|| format!("data checksum mismatch (expected {want:#010x}, found {got:#010x})"))
        }
        What::Superblock => Superblock::decode(buf, b).err().map(|e| e.to_string()),
        What::Node { .. } => {
            let magic = buf
                .get(0..4)
                .map(|m| u32::from_le_bytes([m[0], m[1], m[2], m[3]]));
            let magic = if magic == Some(BRANCH_MAGIC) {
                BRANCH_MAGIC
            } else {
                LEAF_MAGIC
            };
            codec::verify(buf, b, magic, "tree node")
                .err()
                .map(|e| e.to_string())
        }
        What::Bitmap { .. } => codec::verify(buf, b, tux3::structures::bitmap::MAGIC, "bitmap block")
            .err()
            .map(|e| e.to_string()),
        What::Log => tux3::log::block::LogBlock::decode(buf, b, dev_blocks)
            .err()
            .map(|e| e.to_string()),
    }
}

/// `item`, a tree node whose level the walk did not learn (it did not
/// load), with the level its magic claims (leaf or branch).
pub fn with_level(item: &Item, buf: &[u8]) -> Item {
    let mut it = item.clone();
    if let What::Node {
        level: level @ None, ..
    } = &mut it.what
    {
        match buf
            .get(0..4)
            .map(|m| u32::from_le_bytes([m[0], m[1], m[2], m[3]]))
        {
            Some(LEAF_MAGIC) => *level = Some(0),
            Some(BRANCH_MAGIC) => *level = Some(1),
            _ => {}
        }
    }
    it
}

/// One read: `count` blocks from `start`.
#[derive(Clone, Copy)]
struct Run {
    start: u64,
    count: u64,
}

/// The runs covering the plan's blocks from `from` on, in address order:
/// none longer than `max` blocks or 1/`SAVES` of the plan (so that the
/// position can be saved that often).
fn runs(plan: &Plan, from: u64, max: u64) -> Vec<Run> {
    let max = max.min(plan.blocks() / super::SAVES).max(1);
    let mut out: Vec<Run> = Vec::new();
    for it in &plan.items {
        let mut s = it.start.max(from);
        while s < it.end() {
            match out.last_mut() {
                Some(r) if r.start + r.count == s && r.count < max => {
                    let n = (max - r.count).min(it.end() - s);
                    r.count += n;
                    s += n;
                }
                _ => {
                    let n = max.min(it.end() - s);
                    out.push(Run { start: s, count: n });
                    s += n;
                }
            }
        }
    }
    out
}

/// What the caller decides after each run.
pub enum Step {
    Go,
    /// Stop now; the position reached is kept.
    Stop,
}

/// Where the readers read: the uncached handle while it works, else the
/// device itself.
struct Source<'a> {
    dev: &'a dyn Device,
    fast: Option<Box<dyn Device>>,
    fast_failed: AtomicBool,
}

impl Source<'_> {
    fn read(&self, block: u64, buf: &mut [u8]) -> std::io::Result<()> {
        if let Some(fast) = self.fast.as_deref().filter(|_| !self.fast_failed.load(Relaxed)) {
            if fast.read(block, buf).is_ok() {
                return Ok(());
            }
            // Read it again the ordinary way: that read's error, if it
            // fails too, is the one to report.
            self.fast_failed.store(true, Relaxed);
        }
        self.dev.read(block, buf)
    }
}

/// The candidates among `buf`, the blocks of `run`.
fn check_run(plan: &Plan, dev_blocks: u64, bs: u64, run: Run, buf: &[u8]) -> Vec<Bad> {
    let mut bad = Vec::new();
    let mut idx = plan.items.partition_point(|it| it.end() <= run.start);
    for (i, block) in buf.chunks(bs as usize).enumerate() {
        let b = run.start + i as u64;
        while plan.items.get(idx).is_some_and(|it| it.end() <= b) {
            idx += 1;
        }
        if let Some(it) = plan.items.get(idx).filter(|it| it.start <= b) {
            if let Some(why) = check(dev_blocks, it, b, block) {
                bad.push(Bad { block: b, why });
            }
        }
    }
    bad
}

/// A reader's result: the run's index, its candidates, and the buffer to
/// give back.
type Done = (usize, std::io::Result<Vec<Bad>>, AlignedBuf);

/// Read and check the plan's blocks from block `from` on. After each run,
/// `after(position, blocks_read)` says whether to go on: `position` is
/// the address below which everything is checked. `rate` (bytes/s, 0: no
/// limit) spaces the reads. Returns the candidates and the blocks read.
pub fn pass(
    dev: &dyn Device,
    plan: &Plan,
    from: u64,
    rate: u64,
    after: &mut dyn FnMut(u64, u64, &[Bad]) -> Step,
) -> std::io::Result<(Vec<Bad>, u64)> {
    let src = Source {
        dev,
        fast: dev.uncached(),
        fast_failed: AtomicBool::new(false),
    };
    let bs = u64::from(dev.block_size());
    let (run_bytes, readers) = if rate == 0 {
        (RUN_BYTES, READERS)
    } else {
        (THROTTLED_RUN_BYTES, 1)
    };
    let runs = runs(plan, from, (run_bytes / bs).max(1));
    let count = dev.block_count();
    let buf_len = runs.iter().map(|r| r.count * bs).max().unwrap_or(0) as usize;
    // Each reader takes a buffer, then the next run: a run is only taken
    // with a buffer to read it into, so the one the caller waits for
    // always comes, and no more than the pool is ever read ahead.
    let pool_len = readers + SPARE_BUFFERS;
    let (give_back, pool) = crossbeam_channel::bounded::<AlignedBuf>(pool_len);
    for _ in 0..pool_len.min(runs.len()) {
        let _ = give_back.send(AlignedBuf::new(buf_len)?);
    }
    let (tx, rx) = crossbeam_channel::bounded::<Done>(pool_len);
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let mut bad = Vec::new();
    let mut read = 0u64;
    let began = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..readers {
            let (pool, tx, runs, next, stop, src) = (pool.clone(), tx.clone(), &runs, &next, &stop, &src);
            s.spawn(move || {
                while let Ok(mut buf) = pool.recv() {
                    let i = next.fetch_add(1, Relaxed);
                    let Some(&r) = runs.get(i).filter(|_| !stop.load(Relaxed)) else {
                        return;
                    };
                    let len = (r.count * bs) as usize;
                    let res = src
                        .read(r.start, buf.as_mut_slice(len))
                        .map(|()| check_run(plan, count, bs, r, buf.as_slice(len)));
                    if tx.send((i, res, buf)).is_err() {
                        return;
                    }
                }
            });
        }
        drop((tx, pool));
        let mut early: BTreeMap<usize, (std::io::Result<Vec<Bad>>, AlignedBuf)> = BTreeMap::new();
        let res = (|| {
            for (want, run) in runs.iter().enumerate() {
                let (found, buf) = match early.remove(&want) {
                    Some(x) => x,
                    None => loop {
                        let Ok((i, found, buf)) = rx.recv() else {
                            return Err(std::io::Error::other("a scrub reader stopped"));
                        };
                        if i == want {
                            break (found, buf);
                        }
                        early.insert(i, (found, buf));
                    },
                };
                bad.extend(found?);
                let _ = give_back.try_send(buf);
                read += run.count;
                if rate > 0 {
                    let due = Duration::from_secs_f64((read * bs) as f64 / rate as f64);
                    if let Some(wait) = due.checked_sub(began.elapsed()) {
                        std::thread::sleep(wait);
                    }
                }
                if let Step::Stop = after(run.start + run.count, read, &bad) {
                    break;
                }
            }
            Ok(())
        })();
        // The readers stop at their next run, or when the pool (the
        // sender below) is gone.
        stop.store(true, Relaxed);
        drop((give_back, rx, early));
        res
    })?;
    Ok((bad, read))
}
