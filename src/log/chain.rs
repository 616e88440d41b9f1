//! The chain reader: follows the log from its head and returns every
//! committed delta, in order, plus where the next block goes. Reads only.

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
}

impl Chain {
    /// Addresses of all committed log blocks.
    pub fn blocks(&self) -> impl Iterator<Item = u64> + '_ {
        self.deltas.iter().flat_map(|d| d.blocks.iter().copied())
    }
}

/// Read the chain starting at `head`, whose first block must carry `seq`.
pub fn read_chain(dev: &dyn Device, head: u64, seq: u64) -> Result<Chain> {
    let bs = dev.block_size() as usize;
    let mut tail = Tail {
        next: head,
        seq,
        prev_crc: 0,
    };
    let mut deltas = Vec::new();
    let mut pending: Vec<Record> = Vec::new();
    let mut pending_blocks = Vec::new();
    let mut at = Tail {
        next: head,
        seq,
        prev_crc: 0,
    };
    let mut buf = vec![0u8; bs];
    let end;
    loop {
        if at.next < 2 || at.next >= dev.block_count() {
            end = format!("next log block address {} is outside the volume", at.next);
            break;
        }
        dev.read(at.next, &mut buf)?;
        let lb = match LogBlock::decode(&buf, at.next) {
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
        at = Tail {
            next: lb.next,
            seq: lb.seq + 1,
            prev_crc: lb.crc,
        };
        if lb.commit {
            deltas.push(LoggedDelta {
                delta: lb.delta,
                fsync: lb.fsync,
                records: std::mem::take(&mut pending),
                blocks: std::mem::take(&mut pending_blocks),
            });
            tail = at;
        }
    }
    Ok(Chain { deltas, tail, end })
}
