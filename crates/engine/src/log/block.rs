//! Log layer: the log block. Layout:
//!
//! ```text
//! 0   header(16): magic "T3LG", crc32c, own address
//! 16  u64 seq        one above the previous block of the chain
//! 24  u64 next       address reserved for the next log block
//! 32  u64 delta      delta number this block belongs to
//! 40  u32 prev_crc   checksum field of the previous block (0 for the head)
//! 44  u16 flags      1 = COMMIT: last block of its commit; 2 = FSYNC: an fsync commit
//! 46  u16 used       bytes of records that follow
//! 48  u64 nonce      random per mount session
//! 56  records
//! ```
//!
//! Calls the base modules only (codec, error).

use super::record::Record;
use crate::codec::{begin, seal, verify, Bounds, Reader};
use crate::error::{Error, Result};

pub const MAGIC: u32 = u32::from_le_bytes(*b"T3LG");
pub const HEADER: usize = 56;
pub const FLAG_COMMIT: u16 = 1;
/// The block belongs to an fsync commit (not a full delta).
pub const FLAG_FSYNC: u16 = 2;

/// A decoded log block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogBlock {
    pub addr: u64,
    pub seq: u64,
    pub next: u64,
    pub delta: u64,
    pub prev_crc: u32,
    pub commit: bool,
    /// Part of an fsync commit rather than a full delta commit.
    pub fsync: bool,
    pub nonce: u64,
    pub records: Vec<Record>,
    /// The block's own checksum (the next block's `prev_crc`).
    pub crc: u32,
}

/// Bytes of records one block holds.
pub fn capacity(bs: usize) -> usize {
    bs.saturating_sub(HEADER)
}

impl LogBlock {
    /// Encode; returns the image. `self.crc` is ignored and computed.
    pub fn encode(&self, bs: usize) -> Vec<u8> {
        let mut w = begin(MAGIC, self.addr, bs);
        w.u64(self.seq);
        w.u64(self.next);
        w.u64(self.delta);
        w.u32(self.prev_crc);
        w.u16(if self.commit { FLAG_COMMIT } else { 0 } | if self.fsync { FLAG_FSYNC } else { 0 });
        // The records go straight into the image; their length is filled
        // in after them.
        let used_at = w.len();
        w.u16(0);
        w.u64(self.nonce);
        let start = w.len();
        for r in &self.records {
            r.encode(&mut w);
        }
        let used = w.len().saturating_sub(start);
        assert!(used <= capacity(bs), "log block overfilled");
        w.set_u16(used_at, u16::try_from(used).unwrap_or(u16::MAX));
        seal(w, bs)
    }

    /// Decode and validate the block read from `addr` of a volume of
    /// `block_count` blocks (its records' fields must lie inside it).
    pub fn decode(b: &[u8], addr: u64, block_count: u64) -> Result<LogBlock> {
        verify(b, addr, MAGIC, "log block")?;
        let bounds = Bounds::new(u32::try_from(b.len()).unwrap_or(u32::MAX), block_count);
        let mut r = Reader::at(b, 4, addr);
        let crc = r.u32("log crc")?;
        r.u64("log address")?;
        let seq = r.u64("log seq")?;
        // The block after this one is reserved inside the volume (its
        // Balloc); a writer goes on at this address.
        let next = r.addr("log next", &bounds)?;
        let delta = r.u64("log delta")?;
        let prev_crc = r.u32("log prev crc")?;
        let flags = r.u16("log flags")?;
        let used = usize::from(r.u16("log used")?);
        let nonce = r.u64("log nonce")?;
        if used > capacity(b.len()) {
            return Err(Error::corrupt(
                addr,
                format!("log block: {used} bytes of records do not fit"),
            ));
        }
        let body = r.bytes(used, "log records")?;
        let mut rr = Reader::new(body, addr);
        let mut records = Vec::new();
        while rr.remaining() > 0 {
            records.push(Record::decode(&mut rr, &bounds)?);
        }
        Ok(LogBlock {
            addr,
            seq,
            next,
            delta,
            prev_crc,
            commit: flags & FLAG_COMMIT != 0,
            fsync: flags & FLAG_FSYNC != 0,
            nonce,
            records,
            crc,
        })
    }
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects, clippy::indexing_slicing)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let lb = LogBlock {
            addr: 9,
            seq: 77,
            next: 10,
            delta: 3,
            prev_crc: 0xdead,
            commit: true,
            fsync: false,
            nonce: 5,
            records: vec![
                Record::Balloc { start: 10, count: 1 },
                Record::LeafMap {
                    tree: 0,
                    sep: 0,
                    addr: 12,
                },
                Record::LeafUnmap { tree: 4, sep: 99 },
                Record::Drop { tree: 4 },
                Record::DropRun { first: 16, count: 3 },
                Record::Orphan { ino: 17 },
                Record::Named { ino: 17 },
                Record::Bfree { start: 3, count: 2 },
            ],
            crc: 0,
        };
        let b = lb.encode(1024);
        // Block 12 (the leaf map) lies outside a volume of 12 blocks.
        let e = LogBlock::decode(&b, 9, 12).unwrap_err().to_string();
        assert!(e.contains("block 9") && e.contains("leafmap address"), "{e}");
        let d = LogBlock::decode(&b, 9, 100).unwrap();
        assert_eq!(d.records, lb.records);
        assert_eq!(
            (d.seq, d.next, d.delta, d.prev_crc, d.commit, d.nonce),
            (77, 10, 3, 0xdead, true, 5)
        );
    }

    /// Record fields out of bounds make the block fail to decode, naming it.
    #[test]
    fn records_out_of_bounds_are_refused() {
        let bad = [
            Record::Balloc { start: 95, count: 6 },
            Record::Bfree { start: 1, count: 1 },
            Record::Balloc {
                start: u64::MAX,
                count: u32::MAX,
            },
            Record::LeafMap {
                tree: 2,
                sep: 0,
                addr: 12,
            },
            Record::Drop { tree: 1 << 48 },
            Record::DropRun { first: 16, count: 1 },
            Record::DropRun { first: 1, count: 4 },
            Record::DropRun {
                first: (1 << 48) - 2,
                count: 3,
            },
            Record::InodeImage {
                ino: 0,
                attrs: vec![],
            },
            Record::DataInline {
                ino: 16,
                lblock: 0,
                offset: 1000,
                data: vec![0; 100].into(),
            },
            Record::DirentRemove { dir: 0, key: 5 },
        ];
        for r in bad {
            let lb = LogBlock {
                addr: 9,
                seq: 1,
                next: 10,
                delta: 1,
                prev_crc: 0,
                commit: true,
                fsync: true,
                nonce: 0,
                records: vec![r.clone()],
                crc: 0,
            };
            let e = LogBlock::decode(&lb.encode(1024), 9, 100)
                .unwrap_err()
                .to_string();
            assert!(e.contains("corrupt block 9"), "{r:?}: {e}");
        }
    }
}
