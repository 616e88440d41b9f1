//! Backend layer: the log writer packs a delta's records into log blocks on
//! the forward chain. Each block reserves the address of the next one (its
//! Balloc record rides in the same block), so the commit block is the only
//! thing that has to land last, and no superblock write is needed per delta.
//!
//! Calls the log layer (block and record encoding).

use super::alloc::Allocator;
use crate::error::Result;
use crate::log::block::{capacity, LogBlock};
use crate::log::{Record, Tail};

pub struct LogWriter {
    pub tail: Tail,
    /// Random per mount session: blocks of an older session never chain
    /// into this one's by accident.
    pub nonce: u64,
    /// Log blocks written since the last unify (freed by the next unify).
    pub since_unify: Vec<u64>,
}

/// Blocks of one delta, ready to write: the commit block goes last.
pub struct LogImages {
    pub body: Vec<(u64, Vec<u8>)>,
    pub commit: (u64, Vec<u8>),
}

impl LogWriter {
    /// Encode `records` of `delta` as a chain of blocks (they move into
    /// the blocks: inline data is not copied once more).
    pub fn write_delta(
        &mut self,
        alloc: &mut Allocator,
        records: Vec<Record>,
        delta: u64,
        fsync: bool,
        bs: usize,
    ) -> Result<LogImages> {
        const RESERVE: usize = 13; // the Balloc of the next block
        let cap = capacity(bs) - RESERVE;
        let mut groups: Vec<Vec<Record>> = vec![Vec::new()];
        let mut used = 0;
        for r in records {
            if used + r.size() > cap {
                groups.push(Vec::new());
                used = 0;
            }
            used += r.size();
            if let Some(g) = groups.last_mut() {
                g.push(r);
            }
        }
        let n = groups.len();
        let mut images = Vec::with_capacity(n);
        for (i, mut group) in groups.into_iter().enumerate() {
            let addr = self.tail.next;
            let next = alloc.alloc(addr + 1, 1, false)?.0;
            group.push(Record::Balloc {
                start: next,
                count: 1,
            });
            let lb = LogBlock {
                addr,
                seq: self.tail.seq,
                next,
                delta,
                prev_crc: self.tail.prev_crc,
                commit: i + 1 == n,
                fsync,
                nonce: self.nonce,
                records: group,
                crc: 0,
            };
            let image = lb.encode(bs);
            let crc = u32::from_le_bytes([image[4], image[5], image[6], image[7]]);
            self.tail = Tail {
                next,
                seq: self.tail.seq + 1,
                prev_crc: crc,
            };
            self.since_unify.push(addr);
            images.push((addr, image));
        }
        let commit = images.pop().unwrap_or_default();
        Ok(LogImages { body: images, commit })
    }
}
