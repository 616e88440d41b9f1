//! Dedupe, keeping what was read: the bytes of blocks the readers read
//! straight from the device, so that a call hands both ranges' bytes to
//! `Fs::dedupe_ranges_read` instead of having them read again.
//!
//! A source block is a first occurrence, indexed when the matcher met it,
//! often long before the block that matches it: [`Kept`] holds a copy of
//! each indexed block's bytes, up to [`Options::keep_bytes`]
//! (super::Options::keep_bytes) in all (past that, later ones are not
//! kept and their calls read). A destination block is the one the matcher
//! is at: a run gathers its bytes as it grows ([`Carried`]).
//!
//! Every block kept knows where on the device it was read and the
//! volume's write epoch before the read (`Fs::write_epoch`); a call
//! carries bytes only when all its blocks were read in one epoch, which
//! the engine checks is still the volume's.
//!
//! Calls nothing else.

use super::Loc;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;

/// Read buffers handed from the readers to the matcher, used again once
/// the matcher is done with them (a fresh buffer per read costs its pages'
/// first touch: a third of the run's CPU).
#[derive(Default)]
pub(super) struct Pool(Mutex<Vec<Vec<u8>>>);

impl Pool {
    /// A buffer of `len` bytes (what it holds is left from its last use).
    pub(super) fn take(self: &Arc<Pool>, len: usize) -> Pooled {
        let mut buf = self.0.lock().pop().unwrap_or_default();
        if buf.len() < len {
            buf.resize(len, 0);
        }
        Pooled {
            buf,
            pool: self.clone(),
        }
    }
}

/// A buffer of a [`Pool`], back in it when dropped.
pub(super) struct Pooled {
    pub(super) buf: Vec<u8>,
    pool: Arc<Pool>,
}

impl Drop for Pooled {
    fn drop(&mut self) {
        let buf = std::mem::take(&mut self.buf);
        self.pool.0.lock().push(buf);
    }
}

/// Bytes per arena chunk.
const CHUNK: usize = 4 << 20;

/// Bytes of a segment read from the device: its blocks' bytes from byte
/// `at` of `buf` on, read from device block `pblock` on in write epoch
/// `epoch`.
pub(super) struct SegBytes {
    pub(super) buf: Arc<Pooled>,
    pub(super) at: usize,
    pub(super) pblock: u64,
    pub(super) epoch: u64,
}

impl SegBytes {
    /// Block `k` of the segment: where its bytes are and its device block.
    pub(super) fn block(&self, k: u64, bs: u64) -> Option<(Dst, u64)> {
        let at = self.at + (k * bs) as usize;
        self.buf.buf.get(at..at + bs as usize)?;
        Some(((self.buf.clone(), at), self.pblock + k))
    }
}

/// Where a destination block's bytes are: a read buffer and the offset.
pub(super) type Dst = (Arc<Pooled>, usize);
/// Where a kept block's bytes are in [`Kept`]: chunk and offset.
pub(super) type Src = (u32, u32);

/// Copies of indexed blocks' bytes, by where they are in the files.
pub(super) struct Kept {
    bs: usize,
    budget: usize,
    chunks: Vec<Vec<u8>>,
    /// Block → (chunk, offset in it, device block, epoch).
    at: HashMap<Loc, (u32, u32, u64, u64)>,
}

impl Kept {
    pub(super) fn new(bs: u64, budget: usize) -> Kept {
        Kept {
            bs: bs as usize,
            budget,
            chunks: Vec::new(),
            at: HashMap::new(),
        }
    }

    /// Keep a copy of `loc`'s bytes, read at device block `pblock` in
    /// `epoch`, if the budget allows.
    pub(super) fn keep(&mut self, loc: Loc, bytes: &[u8], pblock: u64, epoch: u64) {
        if bytes.len() != self.bs || self.bs > CHUNK {
            return;
        }
        let room = self.chunks.last().is_some_and(|c| c.len() + self.bs <= CHUNK);
        if !room {
            if (self.chunks.len() + 1) * CHUNK > self.budget {
                return;
            }
            self.chunks.push(Vec::with_capacity(CHUNK));
        }
        let n = self.chunks.len() - 1;
        let Some(c) = self.chunks.last_mut() else { return };
        let off = c.len();
        c.extend_from_slice(bytes);
        self.at.insert(loc, (n as u32, off as u32, pblock, epoch));
    }

    /// Where `loc`'s bytes are kept, its device block and epoch, if kept.
    pub(super) fn get(&self, loc: Loc) -> Option<(Src, u64, u64)> {
        let &(c, off, pblock, epoch) = self.at.get(&loc)?;
        Some(((c, off), pblock, epoch))
    }

    /// The bytes kept at `src`.
    pub(super) fn bytes(&self, (c, off): Src) -> &[u8] {
        let off = off as usize;
        self.chunks
            .get(c as usize)
            .and_then(|c| c.get(off..off + self.bs))
            .unwrap_or_default()
    }
}

/// A run's bytes as it grows, by where they are: each side's blocks,
/// where they were read, and the epoch all of them were read in.
#[derive(Default)]
pub(super) struct Carried {
    pub(super) epoch: u64,
    pub(super) src_at: Vec<u64>,
    pub(super) dst_at: Vec<u64>,
    pub(super) src: Vec<Src>,
    pub(super) dst: Vec<Dst>,
}

impl Carried {
    /// A run's first block pair, if both sides' bytes are known and were
    /// read in one epoch.
    pub(super) fn start(
        src: Option<(Src, u64, u64)>,
        dst: Option<(Dst, u64)>,
        dst_epoch: u64,
    ) -> Option<Carried> {
        let mut c = Carried {
            epoch: dst_epoch,
            ..Carried::default()
        };
        c.push(src, dst, dst_epoch).then_some(c)
    }

    /// Add the next pair; false (and nothing added) if a side is not
    /// known or was read in another epoch.
    pub(super) fn push(
        &mut self,
        src: Option<(Src, u64, u64)>,
        dst: Option<(Dst, u64)>,
        dst_epoch: u64,
    ) -> bool {
        let (Some((s, sp, se)), Some((d, dp))) = (src, dst) else {
            return false;
        };
        if se != self.epoch || dst_epoch != self.epoch {
            return false;
        }
        self.src.push(s);
        self.dst.push(d);
        self.src_at.push(sp);
        self.dst_at.push(dp);
        true
    }

    /// Both sides' bytes, one after another: `(source, destination)`.
    pub(super) fn bytes(&self, kept: &Kept) -> (Vec<u8>, Vec<u8>) {
        let n = self.src.len() * kept.bs;
        let (mut s, mut d) = (Vec::with_capacity(n), Vec::with_capacity(n));
        for &k in &self.src {
            s.extend_from_slice(kept.bytes(k));
        }
        for (buf, at) in &self.dst {
            d.extend_from_slice(buf.buf.get(*at..*at + kept.bs).unwrap_or_default());
        }
        (s, d)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn loc(block: u64) -> Loc {
        Loc { file: 0, block }
    }

    /// What is kept comes back with its device block and epoch; past the
    /// budget nothing more is kept.
    #[test]
    fn kept_blocks_come_back_until_the_budget_is_spent() {
        let bs = 4096u64;
        let mut k = Kept::new(bs, CHUNK);
        let per_chunk = (CHUNK / bs as usize) as u64;
        for b in 0..per_chunk + 3 {
            k.keep(loc(b), &vec![b as u8; bs as usize], 1000 + b, 7);
        }
        let (at, p, e) = k.get(loc(5)).unwrap();
        let bytes = k.bytes(at);
        assert_eq!((bytes[0], bytes.len(), p, e), (5, 4096, 1005, 7));
        assert!(k.get(loc(per_chunk - 1)).is_some());
        assert!(
            k.get(loc(per_chunk)).is_none(),
            "a second chunk is over the budget"
        );
        assert!(k.get(loc(per_chunk + 100)).is_none());
    }

    /// A run carries bytes only while every block of both sides is known
    /// and was read in the epoch it began in; its bytes come out in order.
    #[test]
    fn a_run_carries_bytes_only_within_one_epoch() {
        let bs = 4096u64;
        let mut k = Kept::new(bs, CHUNK);
        k.keep(loc(0), &[1u8; 4096], 10, 3);
        k.keep(loc(1), &[2u8; 4096], 11, 3);
        k.keep(loc(2), &[3u8; 4096], 12, 4);
        let pool = Arc::new(Pool::default());
        let mut p = pool.take(2 * 4096);
        p.buf[..4096].fill(5);
        p.buf[4096..].fill(6);
        let seg = SegBytes {
            buf: Arc::new(p),
            at: 0,
            pblock: 20,
            epoch: 3,
        };
        let mut c = Carried::start(k.get(loc(0)), seg.block(0, bs), 3).unwrap();
        assert!(c.push(k.get(loc(1)), seg.block(1, bs), 3));
        assert!(!c.push(k.get(loc(2)), seg.block(1, bs), 3), "another epoch");
        assert!(!c.push(None, seg.block(1, bs), 3), "a side not kept");
        assert!(seg.block(2, bs).is_none(), "past the segment");
        assert_eq!((&c.src_at, &c.dst_at), (&vec![10, 11], &vec![20, 21]));
        let (s, d) = c.bytes(&k);
        assert_eq!((s[0], s[4096], d[0], d[4096], s.len()), (1, 2, 5, 6, 8192));
        assert!(Carried::start(k.get(loc(0)), seg.block(0, bs), 4).is_none());
    }
}
