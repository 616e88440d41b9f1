//! Log layer: the chain reader — follows the log from its head and returns
//! every committed delta, in order, plus where the next block goes. Reads
//! only.
//!
//! A small full commit is written with a single flush: its commit block
//! lists a CRC32C of every other block it wrote (`BlockSum` records), so a
//! crash that landed the commit block but not all of them is caught here.
//! Only the last full delta of the chain needs the check, with the fsync
//! commits after it: those may have been written once its log was, before
//! its flush returned (one flush then makes them all durable, so a crash
//! before it may land any of their blocks); any other block after it was
//! written after its flush returned. An unproven delta goes with the fsync
//! commits that follow it: none of them has returned.
//!
//! Calls the device layer (reads) and the base modules.

use super::block::LogBlock;
use super::record::Record;
use crate::device::Device;
use crate::error::Result;

/// Where the log continues: the next block's reserved address, its sequence
/// number and the checksum it must carry as `prev_crc`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tail {
    pub next: u64,
    pub seq: u64,
    pub prev_crc: u32,
}

/// One committed delta found in the log.
#[derive(Debug, Clone)]
pub struct LoggedDelta {
    pub delta: u64,
    /// An fsync commit (inode images, inline data, entries) rather than a
    /// full delta commit.
    pub fsync: bool,
    pub records: Vec<Record>,
    pub blocks: Vec<u64>,
}

/// Everything the log holds since the last unify.
#[derive(Debug, Clone)]
pub struct Chain {
    pub deltas: Vec<LoggedDelta>,
    pub tail: Tail,
    /// Why reading stopped (the end of the log), for reports.
    pub end: String,
    /// A last full delta whose commit block landed but not all the blocks
    /// its checksums name: not part of the volume, nor are the fsync
    /// commits after it (a crash cut its single-flush commit short). Why,
    /// for reports.
    pub unproven: Option<String>,
    /// Records a tolerant read ([`read_chain_with`]) passed over: the log
    /// block and what was wrong.
    pub skipped: Vec<(u64, String)>,
}

impl Chain {
    /// Addresses of all committed log blocks.
    pub fn blocks(&self) -> impl Iterator<Item = u64> + '_ {
        self.deltas.iter().flat_map(|d| d.blocks.iter().copied())
    }
}

/// Read the chain from `start`: the head's address, and the seq and
/// `prev_crc` it must carry (the superblock's [`log_start`]).
///
/// [`log_start`]: crate::structures::superblock::Superblock::log_start
pub fn read_chain(dev: &dyn Device, start: Tail) -> Result<Chain> {
    read_chain_with(dev, start, false)
}

/// [`read_chain`]; with `skip_bad` (a repair), a `BlockSum` record that
/// names blocks outside the volume is passed over (the blocks it would
/// check are not checked) and listed in [`Chain::skipped`], where
/// without it the chain does not read.
pub fn read_chain_with(dev: &dyn Device, start: Tail, skip_bad: bool) -> Result<Chain> {
    let bs = dev.block_size() as usize;
    let mut tail = start;
    let mut deltas = Vec::new();
    let mut pending: Vec<Record> = Vec::new();
    let mut pending_blocks = Vec::new();
    let mut at = start;
    let mut buf = vec![0u8; bs];
    // The tail before each committed delta, to step back over the last one.
    let mut starts = Vec::new();
    let end;
    loop {
        if at.next < 2 || at.next >= dev.block_count() {
            end = format!("next log block address {} is outside the volume", at.next);
            break;
        }
        crate::device::read_named(dev, at.next, &mut buf)?;
        let lb = match LogBlock::decode(&buf, at.next, dev.block_count()) {
            Ok(lb) => lb,
            Err(e) => {
                end = format!(
                    "block {} (seq {}) is not a log block of this chain: {e}",
                    at.next, at.seq
                );
                break;
            }
        };
        if lb.seq != at.seq || lb.prev_crc != at.prev_crc {
            end = format!(
                "block {} holds seq {} / prev crc {:#x}, expected seq {} / {:#x}",
                at.next, lb.seq, lb.prev_crc, at.seq, at.prev_crc
            );
            break;
        }
        pending.extend_from_slice(&lb.records);
        pending_blocks.push(lb.addr);
        // The head's seq is below 2^62 (the superblock checks it) and each
        // block's is one above its predecessor's: this cannot overflow
        // before the volume runs out of blocks.
        let Some(seq) = lb.seq.checked_add(1) else {
            end = format!("block {} holds the last sequence number", at.next);
            break;
        };
        at = Tail {
            next: lb.next,
            seq,
            prev_crc: lb.crc,
        };
        if lb.commit {
            deltas.push(LoggedDelta {
                delta: lb.delta,
                fsync: lb.fsync,
                records: std::mem::take(&mut pending),
                blocks: std::mem::take(&mut pending_blocks),
            });
            starts.push(tail);
            tail = at;
        }
    }
    let mut unproven = None;
    let mut skipped = Vec::new();
    let last_full = deltas.iter().enumerate().rev().find(|(_, d)| !d.fsync);
    if let Some((i, last)) = last_full {
        if let Some(why) = check_sums(dev, last, skip_bad.then_some(&mut skipped))? {
            let after = deltas.len().saturating_sub(i).saturating_sub(1);
            unproven = Some(format!(
                "log block {}: delta {} is not part of the volume{}: {why}; a crash during its \
                 single-flush commit leaves this",
                last.blocks.last().copied().unwrap_or(0),
                last.delta,
                if after > 0 {
                    format!(", nor the {after} fsync commit(s) after it")
                } else {
                    String::new()
                }
            ));
            if let Some(&t) = starts.get(i) {
                tail = t;
            }
            deltas.truncate(i);
        }
    }
    Ok(Chain {
        deltas,
        tail,
        end,
        unproven,
        skipped,
    })
}

/// Largest run one `BlockSum` may cover (a commit writes far fewer).
const MAX_SUM_RUN: u32 = 1 << 16;

/// Check a delta's `BlockSum` records against the blocks on the device:
/// `None` when they all match (or it has none), else which block differs.
/// A record outside the volume is damage, not a crash: an error, or with
/// `skipped` a line there and the record passed over.
fn check_sums(
    dev: &dyn Device,
    d: &LoggedDelta,
    mut skipped: Option<&mut Vec<(u64, String)>>,
) -> Result<Option<String>> {
    let bs = dev.block_size() as usize;
    let at = d.blocks.last().copied().unwrap_or(0);
    let mut buf = Vec::new();
    for r in &d.records {
        let Record::BlockSum { start, count, crc } = *r else {
            continue;
        };
        if count == 0
            || count > MAX_SUM_RUN
            || start < 2
            || start.saturating_add(count as u64) > dev.block_count()
        {
            let what = format!(
                "log of delta {}: block checksum for {start}+{count} outside the volume",
                d.delta
            );
            match skipped.as_deref_mut() {
                Some(s) => {
                    s.push((at, what));
                    continue;
                }
                None => return Err(crate::error::Error::corrupt(at, what)),
            }
        }
        // count <= 2^16 and bs <= 2^16: at most 4 GiB, within usize on the
        // 64-bit targets this builds for; saturate elsewhere.
        buf.resize((count as usize).saturating_mul(bs), 0);
        crate::device::read_named(dev, start, &mut buf)?;
        let got = crc32c::crc32c(&buf);
        if got != crc {
            let which = if count == 1 {
                format!("block {start}")
            } else {
                format!("blocks {start}..{}", start.saturating_add(u64::from(count)))
            };
            return Ok(Some(format!(
                "{which} holds checksum {got:#010x}, its commit says {crc:#010x}"
            )));
        }
    }
    Ok(None)
}
