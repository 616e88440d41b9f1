//! The read pass of a scrub: the plan's blocks from a position on, in
//! address order, merged into runs of adjacent blocks of at most
//! [`RUN_BYTES`]; a reader thread reads the next runs while this one
//! verifies (data against its extent's checksums; tree nodes, bitmap and
//! log blocks by their header: magic, CRC and own address; superblocks by
//! their own checksum). A bad block is only a candidate here: `confirm`
//! re-checks it with commits held.
//!
//! Calls the device and the structures' and codec's verifiers.

use super::plan::{Item, Plan, What};
use std::time::{Duration, Instant};
use tux3::codec;
use tux3::device::Device;
use tux3::structures::btree::node::{BRANCH_MAGIC, LEAF_MAGIC};
use tux3::structures::extent::block_sum;
use tux3::structures::superblock::Superblock;

/// Largest read: adjacent blocks are merged up to this many bytes.
pub const RUN_BYTES: u64 = 1 << 20;
/// Runs read ahead of the one being verified.
const AHEAD: usize = 2;

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
/// none longer than [`RUN_BYTES`] or 1/`SAVES` of the plan (so that the
/// position can be saved that often).
fn runs(plan: &Plan, from: u64, bs: u64) -> Vec<Run> {
    let max = (RUN_BYTES / bs).min(plan.blocks() / super::SAVES).max(1);
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
    let bs = u64::from(dev.block_size());
    let runs = runs(plan, from, bs);
    let count = dev.block_count();
    let (tx, rx) = crossbeam_channel::bounded::<(Run, std::io::Result<Vec<u8>>)>(AHEAD);
    // Buffers go back to the reader once checked: a few, reused, rather
    // than a fresh megabyte (and its page faults) per run.
    let (give_back, reuse) = crossbeam_channel::bounded::<Vec<u8>>(AHEAD + 2);
    let mut bad = Vec::new();
    let mut read = 0u64;
    let began = Instant::now();
    std::thread::scope(|s| {
        let reader_runs = &runs;
        s.spawn(move || {
            for r in reader_runs {
                let mut buf = reuse.try_recv().unwrap_or_default();
                // The read fills it whole: old bytes are never seen.
                buf.resize((r.count * bs) as usize, 0);
                let res = dev.read(r.start, &mut buf).map(|()| buf);
                if tx.send((*r, res)).is_err() {
                    return;
                }
            }
        });
        let mut idx = 0usize;
        for (run, res) in rx.iter() {
            let buf = res?;
            for (i, block) in buf.chunks(bs as usize).enumerate() {
                let b = run.start + i as u64;
                while plan.items.get(idx).is_some_and(|it| it.end() <= b) {
                    idx += 1;
                }
                if let Some(it) = plan.items.get(idx).filter(|it| it.start <= b) {
                    if let Some(why) = check(count, it, b, block) {
                        bad.push(Bad { block: b, why });
                    }
                }
            }
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
        drop(rx);
        Ok::<(), std::io::Error>(())
    })?;
    Ok((bad, read))
}
