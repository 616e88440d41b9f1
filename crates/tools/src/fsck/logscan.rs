//! The log as fsck and dump see it: every block linked from the head (the
//! committed ones, then any left by a delta that never committed), where
//! following stopped, and whether that stop hides damage.
//!
//! The chain reader treats the first block that fails any check as the end
//! of the log — the right thing after a crash, but a damaged committed block
//! looks just like that end. So at the stop this module looks for evidence
//! that the block was really written as part of the chain:
//!  * it carries the log magic and its own address but does not decode
//!    (a damaged or torn log block), or
//!  * a valid block with the next sequence number — found through the
//!    stopped block's raw `next` field or among the free blocks after it —
//!    continues the chain up to a commit block that a crash cannot explain.
//!    What of the log is not yet durable is at most one delta commit (its
//!    log goes out only once everything before it is flushed) and the fsync
//!    commits after it, each written while those before it wait for their
//!    flush; so a crash can leave a gap followed by fsync commits, and one
//!    followed by the rest of a delta commit's log and fsync commits, but
//!    not one followed by a delta commit and then another commit.
//!
//! A damaged *last* commit block that has lost its magic or address cannot
//! be told from a crash before that commit landed; nothing can find it.
//!
//! Calls `log` (block decoder, chain reader) and the device.

use super::{Findings, Fix};
use std::collections::HashSet;
use tux3::device::Device;
use tux3::error::Result;
use tux3::log::block::MAGIC as LOG_MAGIC;
use tux3::log::{read_chain_with, Chain, LogBlock};
use tux3::structures::superblock::Superblock;

/// Free blocks after the stop that are searched for the chain's continuation.
const SEARCH_LIMIT: u64 = 2048;
/// Blocks read per request while searching.
const SEARCH_BATCH: u64 = 64;

/// The log since the last unify.
pub(crate) struct LogScan {
    pub chain: Chain,
    /// Every block linked from the head: committed first, then pending.
    pub blocks: Vec<LogBlock>,
    /// How many of `blocks` belong to committed deltas.
    pub committed: usize,
    /// Where following stopped, and the sequence number expected there.
    pub stop: u64,
    pub stop_seq: u64,
}

/// Follow linked log blocks from `addr`, whose block must carry `seq` and,
/// if given, `prev_crc`. Returns the blocks and where following stopped.
pub(crate) fn follow(
    dev: &dyn Device,
    mut addr: u64,
    mut seq: u64,
    mut prev_crc: Option<u32>,
) -> (Vec<LogBlock>, u64, u64) {
    let bs = dev.block_size() as usize;
    let mut buf = vec![0u8; bs];
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    // Each step needs a new address, so the volume's size bounds the walk.
    while addr >= 2 && addr < dev.block_count() && seen.insert(addr) {
        if dev.read(addr, &mut buf).is_err() {
            break;
        }
        let Ok(lb) = LogBlock::decode(&buf, addr, dev.block_count()) else {
            break;
        };
        if lb.seq != seq || prev_crc.is_some_and(|p| p != lb.prev_crc) {
            break;
        }
        addr = lb.next;
        seq = lb.seq + 1;
        prev_crc = Some(lb.crc);
        out.push(lb);
    }
    (out, addr, seq)
}

/// Read the log of `sb` and report damage. `is_free(b)`: block `b` is free
/// in the replayed bitmap (where a lost continuation would lie).
pub(super) fn scan(
    dev: &dyn Device,
    sb: &Superblock,
    is_free: &dyn Fn(u64) -> bool,
    f: &mut Findings,
) -> Result<LogScan> {
    // A record the backend's repair open passes over is reported by the
    // pass (`scan`); here it only must not stop the log's scan.
    let chain = read_chain_with(dev, sb.log_start(), true)?;
    if let Some(why) = &chain.unproven {
        f.notes.push(why.clone());
    }
    let (blocks, stop, stop_seq) = follow(dev, sb.log_head, sb.log_seq, Some(sb.log_prev_crc));
    let committed = chain.blocks().count().min(blocks.len());
    let scan = LogScan {
        chain,
        blocks,
        committed,
        stop,
        stop_seq,
    };
    check_deltas(&scan, sb, f);
    check_stop(dev, &scan, is_free, f);
    Ok(scan)
}

/// Delta numbers: the same in every block of one commit; a full commit's at
/// least the superblock's next delta and rising; an fsync commit's that of
/// the delta after the last full commit (the open delta, which its full
/// commit repeats) or one more (written while that delta's commit was in
/// flight, ahead of its log).
fn check_deltas(s: &LogScan, sb: &Superblock, f: &mut Findings) {
    let mut floor = sb.next_delta;
    let mut start = 0;
    for (i, lb) in s.blocks[..s.committed].iter().enumerate() {
        if !lb.commit {
            continue;
        }
        if lb.delta < floor || lb.fsync && lb.delta > floor.saturating_add(1) {
            let expected = if lb.fsync {
                format!("{floor} or {}", floor.saturating_add(1))
            } else {
                format!("{floor} or later")
            };
            let line = format!(
                "block {}: log block seq {} commits delta {}, expected {expected}",
                lb.addr, lb.seq, lb.delta
            );
            // A full commit's: a repair's replay takes it as the lowest
            // allowed, and its unify starts the log anew.
            if lb.fsync {
                f.problem("log", line);
            } else {
                f.fixable(
                    "log",
                    Fix::SkipRecords,
                    format!("{line} (repair replays it as delta {floor})"),
                );
            }
        }
        for body in &s.blocks[start..i] {
            if body.delta != lb.delta {
                f.problem(
                    "log",
                    format!(
                        "block {}: log block seq {} belongs to delta {}, but its commit \
                         block {} says {}",
                        body.addr, body.seq, body.delta, lb.addr, lb.delta
                    ),
                );
            }
        }
        // A full commit closes its delta.
        if !lb.fsync {
            floor = lb.delta.saturating_add(1);
        }
        start = i + 1;
    }
}

/// Is the block where following stopped a damaged part of the chain?
fn check_stop(dev: &dyn Device, s: &LogScan, is_free: &dyn Fn(u64) -> bool, f: &mut Findings) {
    let (x, seq) = (s.stop, s.stop_seq);
    let bs = dev.block_size() as usize;
    if x < 2 || x >= dev.block_count() {
        return;
    }
    let mut raw = vec![0u8; bs];
    if dev.read(x, &mut raw).is_err() {
        f.problem("log", format!("block {x}: cannot read the block after the log"));
        return;
    }
    let magic = u32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]]);
    let mut own = [0u8; 8];
    own.copy_from_slice(&raw[8..16]);
    if magic == LOG_MAGIC && u64::from_le_bytes(own) == x {
        if let Err(e) = LogBlock::decode(&raw, x, dev.block_count()) {
            // A crash can tear the write of the block after the last commit
            // (its first sectors land): exactly this picture. Nothing durable
            // is lost then, so it is a note, not a problem.
            f.notes.push(format!(
                "block {x}: the log ends at a torn or damaged log block (seq {seq} expected: {e}); \
                 a crash during its write leaves this"
            ));
            return;
        }
    }
    if let Some(Continuation {
        first: c,
        commits: deltas,
        last,
        full_after_first,
    }) = continuation(dev, x, seq, &raw, is_free)
    {
        if deltas == 1 {
            // A commit's log blocks go out together before one flush, so a
            // crash can land its later blocks but not an earlier one: replay
            // stops at the gap, and that commit had not completed.
            f.notes.push(format!(
                "block {x}: the log ends at a gap inside the log of delta {last}, which goes \
                 on at block {c}; a crash during that commit leaves this"
            ));
            return;
        }
        if !full_after_first {
            // Fsync commits are written while the ones before them (or the
            // delta commit before them) wait for their flush: a crash can
            // land some of them and not a block before them. None of them
            // had completed.
            f.notes.push(format!(
                "block {x}: the log ends at a gap, and goes on at block {c} through {deltas} \
                 commits that may have been waiting for their flush (up to delta {last}); a \
                 crash during them leaves this (had they completed, the missing block was \
                 damaged since and they are lost)"
            ));
            return;
        }
        f.problem(
            "log",
            format!(
                "block {x}: log block seq {seq} is damaged or missing: the chain goes on at \
                 block {c} (seq {}) through {deltas} committed deltas up to delta {last}, \
                 which replay cannot reach",
                seq + 1
            ),
        );
    }
}

/// A committed continuation of the chain after a stopped block.
struct Continuation {
    /// Its first block.
    first: u64,
    /// Commit blocks in it, and the delta of the last one.
    commits: usize,
    last: u64,
    /// A delta (full) commit comes after its first commit.
    full_after_first: bool,
}

/// A committed continuation of the chain after the stopped block `x`.
fn continuation(
    dev: &dyn Device,
    x: u64,
    seq: u64,
    raw: &[u8],
    is_free: &dyn Fn(u64) -> bool,
) -> Option<Continuation> {
    let n = dev.block_count();
    let bs = dev.block_size() as usize;
    let try_at = |c: u64, image: &[u8]| -> Option<Continuation> {
        let lb = LogBlock::decode(image, c, n).ok()?;
        if lb.seq != seq.checked_add(1)? {
            return None;
        }
        let (blocks, _, _) = follow(dev, c, lb.seq, None);
        let commits: Vec<&LogBlock> = blocks.iter().filter(|b| b.commit).collect();
        commits.last().map(|last| Continuation {
            first: c,
            commits: commits.len(),
            last: last.delta,
            full_after_first: commits[1..].iter().any(|b| !b.fsync),
        })
    };
    // The stopped block's own pointer, if that field survived.
    let mut next = [0u8; 8];
    next.copy_from_slice(&raw[24..32]);
    let next = u64::from_le_bytes(next);
    if next >= 2 && next < n && next != x {
        let mut buf = vec![0u8; bs];
        if dev.read(next, &mut buf).is_ok() {
            if let Some(found) = try_at(next, &buf) {
                return Some(found);
            }
        }
    }
    // The log allocator takes the first free block after the previous one.
    let mut examined = 0u64;
    let mut b = x + 1;
    let mut wrapped = false;
    let mut buf = Vec::new();
    while examined < SEARCH_LIMIT {
        if b >= n {
            if wrapped {
                break;
            }
            wrapped = true;
            b = 2;
        }
        if wrapped && b >= x {
            break;
        }
        if !is_free(b) {
            b += 1;
            continue;
        }
        let mut run = 1;
        while run < SEARCH_BATCH && b + run < n && is_free(b + run) && !(wrapped && b + run >= x) {
            run += 1;
        }
        buf.resize(run as usize * bs, 0);
        if dev.read(b, &mut buf).is_ok() {
            for (i, image) in buf.chunks(bs).enumerate() {
                let c = b + i as u64;
                let magic = u32::from_le_bytes([image[0], image[1], image[2], image[3]]);
                if magic == LOG_MAGIC {
                    if let Some(found) = try_at(c, image) {
                        return Some(found);
                    }
                }
            }
        }
        examined += run;
        b += run;
    }
    None
}
