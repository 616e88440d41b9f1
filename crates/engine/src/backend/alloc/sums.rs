//! Backend layer, allocator: the checksum table — the CRC32C of data
//! blocks kept once by device block, for extents that do not carry their
//! blocks' checksums themselves (flag `TABLE_SUMS`, docs/FORMAT.md 7.6).
//! A clone's extents are such: however many files and snapshots map a
//! block, its checksum is stored once, here, not in every extent.
//!
//! A block's entry lives as long as the block holds the data it was
//! written with: it is put when a clone first maps the block from an
//! extent with checksums, and goes when the block is freed for reuse
//! (`Allocator::free_range`; a block on the dead list is still in use and
//! keeps it). Write-anywhere never rewrites a block in place while a tree
//! maps it, so an entry never goes stale while an extent can reach it.
//!
//! The table is held whole in memory as aligned chunks of [`CHUNK`] blocks,
//! each a bit mask of the blocks it has and their checksums in order
//! (about 5 bytes per block). Chunks changed are noted (`dirty`) so that a
//! commit logs them (`Sums` records, each a chunk's whole state) and
//! writes them to the snapshot table's tree at the next unify, like the
//! shared-extent table.
//!
//! Calls the base modules (codec, error) and the extent type.

use crate::codec::{Reader, Writer};
use crate::error::{Error, Result};
use parking_lot::RwLock;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Blocks per chunk: a chunk starts at a multiple of this.
pub const CHUNK: u64 = 64;

/// One chunk: which of its blocks have a checksum (bit `k`: block
/// `start + k`) and their checksums, in block order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SumChunk {
    pub mask: u64,
    pub sums: Vec<u32>,
}

impl SumChunk {
    /// Index in `sums` of bit `k`, if set.
    fn index(&self, k: u64) -> Option<usize> {
        if k >= CHUNK || self.mask & (1 << k) == 0 {
            return None;
        }
        Some((self.mask & ((1u64 << k) - 1)).count_ones() as usize)
    }

    pub fn get(&self, k: u64) -> Option<u32> {
        self.index(k).and_then(|i| self.sums.get(i).copied())
    }

    fn set(&mut self, k: u64, sum: u32) {
        if let Some(i) = self.index(k) {
            if let Some(s) = self.sums.get_mut(i) {
                *s = sum;
            }
            return;
        }
        let i = (self.mask & ((1u64 << k) - 1)).count_ones() as usize;
        self.mask |= 1 << k;
        self.sums.insert(i, sum);
    }

    fn clear(&mut self, k: u64) -> bool {
        match self.index(k) {
            Some(i) => {
                self.mask &= !(1 << k);
                self.sums.remove(i);
                true
            }
            None => false,
        }
    }

    /// The value stored for it (log record and snapshot-table entry):
    /// `mask u64`, then one `u32` per bit set.
    pub fn encode(&self, w: &mut Writer) {
        w.u64(self.mask);
        for &s in &self.sums {
            w.u32(s);
        }
    }

    /// Decode the chunk at block `start` from `r` (the rest of the value),
    /// checked: `start` a multiple of [`CHUNK`], a mask with a bit set, a
    /// checksum per bit, every block it names in `2..block_count`.
    pub fn decode(start: u64, r: &mut Reader, block_count: u64) -> Result<SumChunk> {
        let mask = r.u64("checksum chunk mask")?;
        let n = mask.count_ones() as usize;
        let mut sums = Vec::with_capacity(n);
        for _ in 0..n {
            sums.push(r.u32("checksum")?);
        }
        let last = 63 - u64::from(mask.leading_zeros().min(63));
        let first = u64::from(mask.trailing_zeros());
        if mask == 0
            || !start.is_multiple_of(CHUNK)
            || start.saturating_add(first) < 2
            || start.saturating_add(last) >= block_count
        {
            return Err(r.bad(format!(
                "checksum chunk at block {start} (mask {mask:#x}) outside the volume (2..{block_count})"
            )));
        }
        Ok(SumChunk { mask, sums })
    }
}

/// The table, shared between the allocator (which changes it under the
/// volume's lock) and the reads that check blocks against it (which may
/// hold a file, not the allocator): a handle ([`SumTable::handle`]) reads
/// it without borrowing the allocator.
#[derive(Debug, Default)]
pub struct SumTable {
    table: Arc<RwLock<Sums>>,
}

/// A reader's handle on the table.
#[derive(Debug, Clone)]
pub struct SumsHandle(Arc<RwLock<Sums>>);

impl SumsHandle {
    /// The checksum of block `b`, if the table has it.
    pub fn get(&self, b: u64) -> Option<u32> {
        self.0.read().get(b)
    }
    /// Whether the table holds nothing (no extent can need it).
    pub fn is_empty(&self) -> bool {
        self.0.read().is_empty()
    }
    /// How many of blocks `start..start + count` have no checksum here.
    pub fn missing(&self, start: u64, count: u64) -> u64 {
        count.saturating_sub(self.0.read().present(start, count))
    }
    /// `e` with its checksums in hand (see `Extent::resolved`).
    pub fn resolve(&self, e: &crate::structures::extent::Extent) -> crate::structures::extent::Extent {
        if !e.table_sums {
            return e.clone();
        }
        let t = self.0.read();
        e.resolved(|b| t.get(b))
    }
}

impl SumTable {
    pub fn handle(&self) -> SumsHandle {
        SumsHandle(self.table.clone())
    }
    /// The table to read.
    pub fn read(&self) -> parking_lot::RwLockReadGuard<'_, Sums> {
        self.table.read()
    }
    pub fn is_empty(&self) -> bool {
        self.table.read().is_empty()
    }
    pub fn get(&self, b: u64) -> Option<u32> {
        self.table.read().get(b)
    }
    pub fn put(&mut self, start: u64, sums: &[u32]) {
        self.table.write().put(start, sums)
    }
    pub fn forget(&mut self, start: u64, count: u64) {
        let mut t = self.table.write();
        if !t.is_empty() {
            t.forget(start, count);
        }
    }
    pub fn apply(&mut self, start: u64, chunk: Option<SumChunk>) {
        self.table.write().apply(start, chunk)
    }
    pub fn take_dirty(&mut self) -> Vec<(u64, Option<SumChunk>)> {
        self.table.write().take_dirty()
    }
}

/// The table itself.
#[derive(Debug, Default, Clone)]
pub struct Sums {
    chunks: BTreeMap<u64, SumChunk>,
    /// Chunks changed since the last `take_dirty`.
    dirty: BTreeSet<u64>,
    blocks: u64,
}

impl Sums {
    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }
    /// Chunks held.
    pub fn len(&self) -> usize {
        self.chunks.len()
    }
    /// Blocks with a checksum here.
    pub fn blocks(&self) -> u64 {
        self.blocks
    }
    /// Bytes of memory the table takes, about.
    pub fn memory(&self) -> usize {
        self.chunks.len() * 64 + self.blocks as usize * 4
    }
    /// Every chunk, in block order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &SumChunk)> + '_ {
        self.chunks.iter().map(|(k, c)| (*k, c))
    }

    /// The checksum of block `b`, if the table has it.
    pub fn get(&self, b: u64) -> Option<u32> {
        let start = b - b % CHUNK;
        self.chunks.get(&start).and_then(|c| c.get(b - start))
    }

    /// Set the checksums of blocks `start..start + sums.len()`.
    pub fn put(&mut self, start: u64, sums: &[u32]) {
        let mut k = 0usize;
        while k < sums.len() {
            let b = start.saturating_add(k as u64);
            let at = b - b % CHUNK;
            let n = ((at + CHUNK - b) as usize).min(sums.len() - k);
            let (lo, part) = (b - at, &sums[k..k + n]);
            let bits = if n == 64 {
                u64::MAX
            } else {
                ((1u64 << n) - 1) << lo
            };
            // A chunk new, or holding just these blocks with these sums
            // already (a second clone): no work per block.
            let c = match self.chunks.entry(at) {
                std::collections::btree_map::Entry::Vacant(v) => {
                    v.insert(SumChunk {
                        mask: bits,
                        sums: part.to_vec(),
                    });
                    self.blocks += n as u64;
                    self.dirty.insert(at);
                    k += n;
                    continue;
                }
                std::collections::btree_map::Entry::Occupied(o) => o.into_mut(),
            };
            // All these blocks there already with these sums (a clone of
            // blocks cloned before): their sums are one slice.
            let below = (c.mask & ((1u64 << lo) - 1)).count_ones() as usize;
            if c.mask & bits == bits && c.sums.get(below..below + n) == Some(part) {
                k += n;
                continue;
            }
            // None of these blocks nor any above them (the rest of a chunk an
            // extent before began): appended whole.
            if c.mask >> lo == 0 {
                c.mask |= bits;
                c.sums.extend_from_slice(part);
                self.blocks += n as u64;
                self.dirty.insert(at);
                k += n;
                continue;
            }
            let mut changed = false;
            for (j, &s) in part.iter().enumerate() {
                let bit = b - at + j as u64;
                if c.get(bit) == Some(s) {
                    continue;
                }
                let had = c.mask;
                c.set(bit, s);
                self.blocks += u64::from(c.mask != had);
                changed = true;
            }
            if changed {
                self.dirty.insert(at);
            }
            k += n;
        }
    }

    /// How many of blocks `start..start + count` have a checksum here.
    pub fn present(&self, start: u64, count: u64) -> u64 {
        let end = start.saturating_add(count);
        let from = start - start % CHUNK;
        self.chunks
            .range(from..end)
            .map(|(&at, c)| {
                let lo = start.max(at) - at;
                let hi = end.min(at + CHUNK) - at;
                let bits = if hi - lo == 64 {
                    u64::MAX
                } else {
                    ((1u64 << (hi - lo)) - 1) << lo
                };
                u64::from((c.mask & bits).count_ones())
            })
            .sum()
    }

    /// Drop the checksums of blocks `start..start + count` (freed for reuse).
    pub fn forget(&mut self, start: u64, count: u64) {
        if self.chunks.is_empty() || count == 0 {
            return;
        }
        let end = start.saturating_add(count);
        let from = start - start % CHUNK;
        let keys: Vec<u64> = self.chunks.range(from..end).map(|(k, _)| *k).collect();
        for at in keys {
            let Some(c) = self.chunks.get_mut(&at) else {
                continue;
            };
            let lo = start.max(at) - at;
            let hi = end.min(at + CHUNK) - at;
            let mut changed = false;
            for k in lo..hi {
                if c.clear(k) {
                    self.blocks -= 1;
                    changed = true;
                }
            }
            if c.mask == 0 {
                self.chunks.remove(&at);
            }
            if changed {
                self.dirty.insert(at);
            }
        }
    }

    /// Replay of a `Sums` record, and loading the table: the chunk at
    /// `start` is `chunk` (`None`, or an empty mask: it holds nothing).
    pub fn apply(&mut self, start: u64, chunk: Option<SumChunk>) {
        if let Some(old) = self.chunks.remove(&start) {
            self.blocks -= u64::from(old.mask.count_ones());
        }
        if let Some(c) = chunk.filter(|c| c.mask != 0) {
            self.blocks += u64::from(c.mask.count_ones());
            self.chunks.insert(start, c);
        }
        self.dirty.insert(start);
    }

    /// The chunks changed since the last call, each as it is now.
    pub fn take_dirty(&mut self) -> Vec<(u64, Option<SumChunk>)> {
        std::mem::take(&mut self.dirty)
            .into_iter()
            .map(|k| (k, self.chunks.get(&k).cloned()))
            .collect()
    }
}

/// A chunk's value in the snapshot table's tree (see [`SumChunk::encode`]).
pub fn encode_chunk(c: &SumChunk) -> Vec<u8> {
    let mut w = Writer::with_capacity(8 + 4 * c.sums.len());
    c.encode(&mut w);
    w.buf
}

/// Decode the chunk at `start` stored in leaf `leaf` of the snapshot table.
pub fn decode_chunk(start: u64, v: &[u8], leaf: u64, block_count: u64) -> Result<SumChunk> {
    let mut r = Reader::new(v, leaf);
    let c = SumChunk::decode(start, &mut r, block_count)?;
    if r.remaining() != 0 {
        return Err(Error::corrupt(
            leaf,
            format!("snapshot table: checksum chunk at block {start}: bad length"),
        ));
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Put, get and forget agree with a map of block -> checksum, and the
    /// dirty chunks are exactly those changed.
    #[test]
    fn the_table_is_a_map_of_block_to_checksum() {
        let mut t = Sums::default();
        let mut model = BTreeMap::new();
        let mut x = 12345u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..2000 {
            let start = 2 + next() % 500;
            let n = 1 + next() % 150;
            if next() % 3 == 0 {
                t.forget(start, n);
                for b in start..start + n {
                    model.remove(&b);
                }
            } else {
                let sums: Vec<u32> = (0..n).map(|_| next() as u32).collect();
                t.put(start, &sums);
                for (k, s) in sums.iter().enumerate() {
                    model.insert(start + k as u64, *s);
                }
            }
        }
        for b in 0..700 {
            assert_eq!(t.get(b), model.get(&b).copied(), "block {b}");
        }
        for (s, n) in [(0, 700), (5, 1), (63, 2), (64, 64), (100, 130)] {
            let want = (s..s + n).filter(|b| model.contains_key(b)).count() as u64;
            assert_eq!(t.present(s, n), want, "{s}+{n}");
        }
        assert_eq!(t.blocks(), model.len() as u64);
        // What a replay of the dirty chunks builds is the same table.
        let mut replayed = Sums::default();
        for (k, c) in t.take_dirty() {
            replayed.apply(k, c);
        }
        for b in 0..700 {
            assert_eq!(replayed.get(b), t.get(b));
        }
        assert!(t.take_dirty().is_empty());
    }

    #[test]
    fn a_chunk_outside_the_volume_or_misaligned_is_corruption() {
        let c = SumChunk {
            mask: 0b101,
            sums: vec![7, 9],
        };
        let v = encode_chunk(&c);
        assert_eq!(decode_chunk(64, &v, 5, 1000).unwrap(), c);
        for (start, n) in [(65, 1000), (64, 66), (0, 1000)] {
            let e = decode_chunk(start, &v, 5, n).unwrap_err().to_string();
            assert!(e.contains("block 5"), "{e}");
        }
        assert!(decode_chunk(64, &v[..v.len() - 1], 5, 1000).is_err());
        assert!(decode_chunk(64, &encode_chunk(&SumChunk::default()), 5, 1000).is_err());
    }
}
