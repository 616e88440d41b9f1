//! Backend layer: the log writer packs a delta's records into log blocks on
//! the forward chain. Each block reserves the address of the next one (its
//! Balloc record rides in the same block), so the commit block is the only
//! thing that has to land last, and no superblock write is needed per delta.
//!
//! Calls the log layer (block and record encoding) and `checks` (L2's
//! debug-build check of the order blocks are placed and encoded in).

use super::alloc::Allocator;
use super::checks::ChainOrder;
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
    /// Whether the tail's `prev_crc` awaits blocks laid out but not yet
    /// encoded (L2, debug builds).
    pub(super) order: ChainOrder,
}

/// Blocks of one delta, ready to write: the commit block goes last.
pub struct LogImages {
    pub body: Vec<(u64, Vec<u8>)>,
    pub commit: (u64, Vec<u8>),
    /// The commit block's checksum: the next block's `prev_crc`.
    pub crc: u32,
}

/// Blocks of one delta placed on the chain (addresses, sequence numbers,
/// the next block reserved) but not yet encoded: encoding, which copies
/// and checksums every record, can then run without the volume.
pub struct LogLayout {
    blocks: Vec<LogBlock>,
    /// The `prev_crc` of its first block.
    prev_crc: u32,
    bs: usize,
}

impl LogLayout {
    /// Encode the blocks in chain order, each naming the checksum of the
    /// one before it (L2, asserted: each follows the one before it).
    pub fn encode(self) -> LogImages {
        let mut prev_crc = self.prev_crc;
        let mut images = Vec::with_capacity(self.blocks.len());
        let mut before: Option<(u64, u64)> = None;
        for mut lb in self.blocks {
            debug_assert!(
                before.is_none_or(|(seq, next)| seq.checked_add(1) == Some(lb.seq) && next == lb.addr),
                "L2: log block {} at {} does not follow {before:?} (seq, next)",
                lb.seq,
                lb.addr
            );
            before = Some((lb.seq, lb.next));
            lb.prev_crc = prev_crc;
            let image = lb.encode(self.bs);
            prev_crc = u32::from_le_bytes([image[4], image[5], image[6], image[7]]);
            images.push((lb.addr, image));
        }
        let commit = images.pop().unwrap_or_default();
        LogImages {
            body: images,
            commit,
            crc: prev_crc,
        }
    }
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
        let images = self.lay_out(alloc, records, delta, fsync, bs)?.encode();
        self.chain_encoded(images.crc);
        Ok(images)
    }

    /// Place `records` of `delta` on the chain without encoding them. The
    /// tail moves past them, but its `prev_crc` is stale until
    /// [`LogWriter::chain_encoded`] gives it the layout's last checksum:
    /// nothing may be placed after them before that (L2, asserted here).
    pub fn lay_out(
        &mut self,
        alloc: &mut Allocator,
        records: Vec<Record>,
        delta: u64,
        fsync: bool,
        bs: usize,
    ) -> Result<LogLayout> {
        self.order.laying_out(&self.tail);
        const RESERVE: usize = 13; // the Balloc of the next block
        let cap = capacity(bs) - RESERVE;
        // How many records go in each block, then the blocks' record lists
        // at their size (an fsync commit's are hundreds of records, laid
        // out under the delta guard).
        let mut lens = vec![0usize];
        let mut used = 0;
        for r in &records {
            if used + r.size() > cap {
                lens.push(0);
                used = 0;
            }
            used += r.size();
            if let Some(len) = lens.last_mut() {
                *len += 1;
            }
        }
        let mut records = records.into_iter();
        let groups: Vec<Vec<Record>> = lens
            .iter()
            .map(|&len| {
                let mut g = Vec::with_capacity(len + 1);
                g.extend(records.by_ref().take(len));
                g
            })
            .collect();
        let n = groups.len();
        let prev_crc = self.tail.prev_crc;
        // Each block's successor reserved first: a volume too full for
        // them all gets them back and leaves the tail as it was, so the
        // next layout starts where this one would have (all or nothing).
        let mut nexts = Vec::with_capacity(n);
        let mut at = self.tail.next;
        for _ in 0..n {
            match alloc.alloc_meta(at + 1, false) {
                Ok(next) => {
                    nexts.push(next);
                    at = next;
                }
                Err(e) => {
                    for b in nexts {
                        alloc.unreserve(b);
                    }
                    return Err(e);
                }
            }
        }
        let mut blocks = Vec::with_capacity(n);
        for ((i, mut group), next) in groups.into_iter().enumerate().zip(nexts) {
            let addr = self.tail.next;
            group.push(Record::Balloc {
                start: next,
                count: 1,
            });
            blocks.push(LogBlock {
                addr,
                seq: self.tail.seq,
                next,
                delta,
                prev_crc: 0,
                commit: i + 1 == n,
                fsync,
                nonce: self.nonce,
                records: group,
                crc: 0,
            });
            self.tail.next = next;
            self.tail.seq += 1;
            self.order.placed(self.tail.seq);
            self.since_unify.push(addr);
        }
        Ok(LogLayout { blocks, prev_crc, bs })
    }

    /// The blocks placed last are encoded: `crc` is their commit block's
    /// checksum, which the next block names.
    pub fn chain_encoded(&mut self, crc: u32) {
        self.order.encoded(self.tail.seq);
        self.tail.prev_crc = crc;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn writer(next: u64) -> LogWriter {
        LogWriter {
            tail: Tail {
                next,
                seq: 7,
                prev_crc: 0xabcd,
            },
            nonce: 1,
            since_unify: Vec::new(),
            order: ChainOrder::default(),
        }
    }

    /// Enough records for three 1 KiB log blocks.
    fn records() -> Vec<Record> {
        (0..300).map(|ino| Record::Orphan { ino }).collect()
    }

    #[test]
    fn a_layout_the_volume_has_no_room_for_leaves_the_tail_and_the_allocator_as_they_were() {
        let mut alloc = Allocator::new(64, 1024);
        // Free: the tail's block 40 (reserved by the block before it) and
        // two more, where three successors are needed.
        alloc.apply_alloc(0, 64);
        alloc.apply_free(41, 2);
        let available = alloc.available();
        let mut log = writer(40);
        assert!(log.lay_out(&mut alloc, records(), 3, true, 1024).is_err());
        assert_eq!((log.tail.next, log.tail.seq, log.tail.prev_crc), (40, 7, 0xabcd));
        assert!(log.since_unify.is_empty());
        assert_eq!(alloc.available(), available, "the successors reserved went back");
        // With room for the third, the same layout goes on from the tail.
        alloc.apply_free(50, 1);
        let layout = log.lay_out(&mut alloc, records(), 3, true, 1024).unwrap();
        assert_eq!(log.since_unify, vec![40, 41, 42]);
        assert_eq!((log.tail.next, log.tail.seq), (50, 10));
        let images = layout.encode();
        assert_eq!(images.body.len(), 2);
        assert_eq!(images.commit.0, 42);
    }
}
