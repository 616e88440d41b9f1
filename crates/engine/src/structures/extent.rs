//! Structures layer: extent trees, a file's data map, keyed by logical block,
//! each value an extent `physical start u64, block count u32` and, on a
//! volume that has had snapshots, `birth u32`: the generation its blocks
//! were allocated in (absent means 0); a preallocated (unwritten) extent
//! adds a `flags u8` after the birth, and on a volume with data checksums a
//! written extent adds the flags byte `SUMMED` and the CRC32C of each of its
//! blocks, or the flags byte `TABLE_SUMS` alone when those are kept in the
//! volume's checksum table (a clone's, `backend/alloc/sums.rs`). Extents
//! never overlap. Operations here keep that true, carry each
//! block's checksum with it through splits, merges and shifts, and report
//! the physical blocks they free, each with its birth (snapshots keep a
//! freed block its birth says they hold).
//! Conversions and shifts of ranges are in `extent_range.rs`.
//!
//! Calls the btree, the device (through it) and the base modules.

use super::btree::tree::Found;
use super::btree::Tree;
use crate::codec::{Bounds, Reader, Writer, MAX_FILE_BLOCKS};
use crate::device::Device;
use crate::error::{Errno, Error, Result};

/// One mapping: logical `[lblock, lblock + count)` -> physical `[pblock, ..)`.
/// A decoded extent lies inside the volume and below [`MAX_FILE_BLOCKS`], so
/// sums of its bounds never overflow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Extent {
    pub lblock: u64,
    pub pblock: u64,
    pub count: u64,
    /// Generation the blocks were allocated in (0: before any snapshot).
    pub birth: u32,
    /// Preallocated and never written: reads as zeros whatever the blocks
    /// hold, and a write may fill its blocks in place.
    pub unwritten: bool,
    /// CRC32C of each block, `count` of them, on a volume with data
    /// checksums (never for an unwritten extent); empty otherwise.
    pub sums: Vec<u32>,
    /// The blocks' checksums are not in the extent but in the volume's
    /// checksum table, by device block (a clone's extents: the blocks'
    /// checksums are kept once however many files map them). `sums` is
    /// then empty; [`Extent::resolved`] fills it for a piece to check.
    pub table_sums: bool,
}

/// Physical blocks an operation freed: `(start, count, birth)`.
pub type Freed = (u64, u64, u32);

impl Extent {
    /// A written extent: logical `lblock..` in physical `pblock..`.
    pub fn written(lblock: u64, pblock: u64, count: u64, birth: u32) -> Extent {
        Extent {
            lblock,
            pblock,
            count,
            birth,
            unwritten: false,
            sums: Vec::new(),
            table_sums: false,
        }
    }

    /// A written extent whose blocks have checksums `sums` (one per block).
    pub fn summed(lblock: u64, pblock: u64, birth: u32, sums: Vec<u32>) -> Extent {
        Extent {
            lblock,
            pblock,
            count: sums.len() as u64,
            birth,
            unwritten: false,
            sums,
            table_sums: false,
        }
    }

    /// The part of the extent over logical `[from, to)`, clipped to it,
    /// with the checksums of those blocks.
    pub fn piece(&self, from: u64, to: u64) -> Extent {
        let from = from.clamp(self.lblock, self.end());
        let to = to.clamp(from, self.end());
        let (a, b) = (
            (from.saturating_sub(self.lblock)) as usize,
            (to.saturating_sub(self.lblock)) as usize,
        );
        Extent {
            lblock: from,
            pblock: self.physical(from),
            count: to.saturating_sub(from),
            birth: self.birth,
            unwritten: self.unwritten,
            sums: self.sums.get(a..b).map(<[u32]>::to_vec).unwrap_or_default(),
            table_sums: self.table_sums,
        }
    }

    /// The extent with its checksums in hand: a table-summed one gets
    /// each block's from `table` (by device block) and becomes summed, if
    /// the table has every one; else it stays as it is (unchecked: fsck
    /// reports the missing checksums). Meant for a piece cut to a read.
    pub fn resolved(&self, table: impl Fn(u64) -> Option<u32>) -> Extent {
        if !self.table_sums {
            return self.clone();
        }
        let sums: Option<Vec<u32>> = (0..self.count)
            .map(|k| table(self.pblock.saturating_add(k)))
            .collect();
        match sums {
            Some(sums) => Extent {
                sums,
                table_sums: false,
                ..self.clone()
            },
            None => self.clone(),
        }
    }

    /// Whether each block has a checksum somewhere (in the extent or in
    /// the volume's checksum table).
    pub fn has_sums(&self) -> bool {
        self.is_summed() || self.table_sums
    }

    /// The same extent moved to logical block `lblock`.
    pub fn moved_to(&self, lblock: u64) -> Extent {
        Extent {
            lblock,
            ..self.clone()
        }
    }

    /// The checksum its blocks' data must have at logical block `lblock`
    /// (which the extent covers), if it has checksums.
    pub fn sum_at(&self, lblock: u64) -> Option<u32> {
        self.sums
            .get(usize::try_from(lblock.saturating_sub(self.lblock)).ok()?)
            .copied()
    }

    /// What its entry's value says but the checksums.
    pub fn head(&self) -> Head {
        Head {
            pblock: self.pblock,
            count: self.count,
            birth: self.birth,
            unwritten: self.unwritten,
            summed: self.is_summed(),
            table_sums: self.table_sums,
        }
    }

    /// Whether the extent carries a checksum per block.
    pub fn is_summed(&self) -> bool {
        !self.sums.is_empty()
    }

    /// First logical block past the extent.
    pub fn end(&self) -> u64 {
        self.lblock.saturating_add(self.count)
    }

    /// Physical block of logical block `lblock` (which the extent covers).
    pub fn physical(&self, lblock: u64) -> u64 {
        self.pblock.saturating_add(lblock.saturating_sub(self.lblock))
    }
}

/// Longest extent stored in one entry.
pub const MAX_EXTENT: u64 = u32::MAX as u64;

/// Flag bit of the 17-byte form: the extent is unwritten.
pub const FLAG_UNWRITTEN: u8 = 1;

/// Flag bit of the summed form: a CRC32C per block follows the flags byte.
pub const FLAG_SUMMED: u8 = 2;

/// Flag bit of the 17-byte form: the blocks' checksums are in the volume's
/// checksum table (version 7).
pub const FLAG_TABLE_SUMS: u8 = 4;

/// Longest summed extent stored in one entry (its value is 17 + 4 × 64 =
/// 273 bytes, so a 4 KiB leaf holds 14 of them); a longer one is stored as
/// several entries. Fits the value bound of the smallest block size.
pub const MAX_SUMMED: u64 = 64;

/// CRC32C of one data block as a summed extent records it.
pub fn block_sum(data: &[u8]) -> u32 {
    crc32c::crc32c(data)
}

/// An extent's value: 12 bytes, or 16 with a birth (0 is not written, so
/// a volume that never had a snapshot keeps the 12-byte form).
pub fn encode(pblock: u64, count: u64, birth: u32) -> Vec<u8> {
    encode_as(pblock, count, birth, false)
}

/// An extent's value, unwritten or not: an unwritten one takes the 17-byte
/// form (birth written even when 0, then the flags byte), so a written
/// extent keeps the forms volumes had before preallocation.
pub fn encode_as(pblock: u64, count: u64, birth: u32, unwritten: bool) -> Vec<u8> {
    let mut w = Writer::with_capacity(17);
    w.u64(pblock);
    w.u32(u32::try_from(count).unwrap_or(u32::MAX));
    if birth != 0 || unwritten {
        w.u32(birth);
    }
    if unwritten {
        w.u8(FLAG_UNWRITTEN);
    }
    w.buf
}

/// The value of extent `e` (its logical block is the key): with
/// checksums, the 17-byte form with flag `SUMMED` and then one `u32` per
/// block.
pub fn encode_extent(e: &Extent) -> Vec<u8> {
    if e.table_sums {
        let mut w = Writer::with_capacity(17);
        w.u64(e.pblock);
        w.u32(u32::try_from(e.count).unwrap_or(u32::MAX));
        w.u32(e.birth);
        w.u8(FLAG_TABLE_SUMS);
        return w.buf;
    }
    if !e.is_summed() {
        return encode_as(e.pblock, e.count, e.birth, e.unwritten);
    }
    let mut w = Writer::with_capacity(e.sums.len().saturating_mul(4).saturating_add(17));
    w.u64(e.pblock);
    w.u32(u32::try_from(e.count).unwrap_or(u32::MAX));
    w.u32(e.birth);
    w.u8(FLAG_SUMMED);
    for &s in &e.sums {
        w.u32(s);
    }
    w.buf
}

/// An extent's value without its checksums (see [`decode_head`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    pub pblock: u64,
    pub count: u64,
    pub birth: u32,
    pub unwritten: bool,
    /// A CRC32C per block follows at [`SUMS_AT`].
    pub summed: bool,
    /// The blocks' checksums are in the checksum table.
    pub table_sums: bool,
}

/// Offset of the first checksum in a summed extent's value.
pub const SUMS_AT: usize = 17;

/// Check the extent stored at `lblock` in leaf `block` of a volume with
/// `bounds` as [`decode`] does, without reading its checksums out: a
/// caller that moves the value whole needs only this.
pub fn decode_head(lblock: u64, v: &[u8], block: u64, bounds: &Bounds) -> Result<Head> {
    let mut r = Reader::new(v, block);
    let pblock = r.u64("extent start")?;
    let count = u64::from(r.u32("extent length")?);
    let birth = if r.remaining() >= 4 {
        r.u32("extent birth")?
    } else {
        0
    };
    let mut flags = 0;
    if r.remaining() >= 1 {
        flags = r.u8("extent flags")?;
        let want = match flags {
            FLAG_UNWRITTEN | FLAG_TABLE_SUMS => 0,
            FLAG_SUMMED if (1..=MAX_SUMMED).contains(&count) => count as usize,
            FLAG_SUMMED => {
                return Err(r.bad(format!(
                    "extent at logical block {lblock}: {count} summed blocks, at most {MAX_SUMMED}"
                )))
            }
            _ => {
                return Err(r.bad(format!(
                    "extent at logical block {lblock}: unknown flags {flags:#04x}"
                )))
            }
        };
        if r.remaining() != want.saturating_mul(4) {
            return Err(r.bad(format!("extent at logical block {lblock}: bad length")));
        }
    }
    if count == 0 {
        return Err(r.bad(format!("extent at logical block {lblock}: bad length")));
    }
    check(lblock, pblock, count, bounds).map_err(|what| r.bad(what))?;
    Ok(Head {
        pblock,
        count,
        birth,
        unwritten: flags == FLAG_UNWRITTEN,
        summed: flags == FLAG_SUMMED,
        table_sums: flags == FLAG_TABLE_SUMS,
    })
}

/// Decode the extent stored at `lblock` in leaf `block` of a volume with
/// `bounds`: its length is 1 ..= 2^32 - 1, its physical blocks lie in
/// `2..block_count` and its logical blocks below [`MAX_FILE_BLOCKS`].
pub fn decode(lblock: u64, v: &[u8], block: u64, bounds: &Bounds) -> Result<Extent> {
    let h = decode_head(lblock, v, block, bounds)?;
    let sums = if h.summed {
        v.get(SUMS_AT..)
            .unwrap_or_default()
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap_or_default()))
            .collect()
    } else {
        Vec::new()
    };
    Ok(Extent {
        lblock,
        pblock: h.pblock,
        count: h.count,
        birth: h.birth,
        unwritten: h.unwritten,
        sums,
        table_sums: h.table_sums,
    })
}

/// Whether an extent of `count` (≥ 1) blocks at logical `lblock`, physical
/// `pblock` lies inside a volume with `bounds` and below
/// [`MAX_FILE_BLOCKS`]; else what is wrong with it.
pub fn check(lblock: u64, pblock: u64, count: u64, bounds: &Bounds) -> std::result::Result<(), String> {
    if !bounds.holds_range(pblock, count) {
        return Err(format!(
            "extent at logical block {lblock}: physical blocks {pblock}+{count} outside the volume (2..{})",
            bounds.block_count
        ));
    }
    if lblock.checked_add(count).is_none_or(|end| end > MAX_FILE_BLOCKS) {
        return Err(format!(
            "extent at logical block {lblock}: {count} blocks run past the largest file"
        ));
    }
    Ok(())
}

fn get(dev: &dyn Device, found: Option<Found>) -> Result<Option<Extent>> {
    match found {
        None => Ok(None),
        Some(f) => decode(f.key, &f.value, f.leaf, &super::bounds(dev)).map(Some),
    }
}

/// The extent covering `lblock`, if any.
pub fn lookup(t: &mut Tree, dev: &dyn Device, lblock: u64) -> Result<Option<Extent>> {
    let found = t.prev_at(dev, lblock)?;
    let e = get(dev, found)?;
    Ok(e.filter(|e| e.end() > lblock))
}

/// Next extent starting at or after `lblock`.
pub fn next(t: &mut Tree, dev: &dyn Device, lblock: u64) -> Result<Option<Extent>> {
    let found = t.next_at(dev, lblock)?;
    get(dev, found)
}

/// Unmap logical blocks `[from, to)`; returns the freed physical ranges.
/// The extents met are decoded ones, so the differences and sums of their
/// bounds below are exact. A cut extent keeps its pieces' checksums.
pub fn punch(t: &mut Tree, dev: &dyn Device, from: u64, to: u64) -> Result<Vec<Freed>> {
    let mut freed = Vec::new();
    if from >= to {
        return Ok(freed);
    }
    // An extent starting before `from` may reach into the range.
    if let Some(e) = lookup(t, dev, from)? {
        if e.lblock < from {
            t.insert(dev, e.lblock, encode_extent(&e.piece(e.lblock, from)))?;
            let end = e.end();
            let cut_end = end.min(to);
            freed.push((e.physical(from), cut_end.saturating_sub(from), e.birth));
            if end > to {
                t.insert(dev, to, encode_extent(&e.piece(to, end)))?;
            }
        }
    }
    while let Some(e) = next(t, dev, from)? {
        if e.lblock >= to {
            break;
        }
        t.remove(dev, e.lblock)?;
        let end = e.end();
        if end > to {
            freed.push((e.pblock, to.saturating_sub(e.lblock), e.birth));
            t.insert(dev, to, encode_extent(&e.piece(to, end)))?;
            break;
        }
        freed.push((e.pblock, e.count, e.birth));
    }
    Ok(freed)
}

/// Map `[lblock, lblock + count)` to `[pblock, ..)`, replacing whatever was
/// mapped there (returned as freed ranges). Merges with a contiguous
/// predecessor of the same birth so sequential files stay one extent.
pub fn map(
    t: &mut Tree,
    dev: &dyn Device,
    lblock: u64,
    pblock: u64,
    count: u64,
    birth: u32,
) -> Result<Vec<Freed>> {
    map_extent(t, dev, &Extent::written(lblock, pblock, count, birth))
}

/// [`map`] extent `e`, unwritten (preallocated) or not, with checksums or
/// not; it merges only with a predecessor in the same state, and a summed
/// extent is stored in entries of at most [`MAX_SUMMED`] blocks.
pub fn map_extent(t: &mut Tree, dev: &dyn Device, e: &Extent) -> Result<Vec<Freed>> {
    let end = e
        .lblock
        .checked_add(e.count)
        .filter(|&end| end <= MAX_FILE_BLOCKS && e.count <= MAX_EXTENT)
        .ok_or(Error::Posix(Errno::EFBIG))?;
    if e.is_summed() && e.sums.len() as u64 != e.count {
        return Err(Error::corrupt(
            e.pblock,
            format!(
                "extent at logical block {}: {} checksums for {} blocks",
                e.lblock,
                e.sums.len(),
                e.count
            ),
        ));
    }
    let freed = punch(t, dev, e.lblock, end)?;
    let mut e = e.clone();
    if let Some(before) = e.lblock.checked_sub(1) {
        if let Some((head, rest)) = lookup(t, dev, before)?.and_then(|p| join(&p, &e)) {
            // The predecessor filled up to the limit; the rest follows.
            t.insert(dev, head.lblock, encode_extent(&head))?;
            match rest {
                None => return Ok(freed),
                Some(r) => e = r,
            }
        }
    }
    if !e.is_summed() {
        t.insert(dev, e.lblock, encode_extent(&e))?;
        return Ok(freed);
    }
    let mut at = e.lblock;
    while at < end {
        let stop = at.saturating_add(MAX_SUMMED).min(end);
        t.insert(dev, at, encode_extent(&e.piece(at, stop)))?;
        at = stop;
    }
    Ok(freed)
}

/// `e` joined onto `p`, which it follows logically and physically with
/// the same birth and state: `p` grown by as much of `e` as an entry
/// holds (its checksums with it), and what is left of `e`. `None` when
/// they cannot join (or `p` is full).
pub fn join(p: &Extent, e: &Extent) -> Option<(Extent, Option<Extent>)> {
    let limit = if e.is_summed() { MAX_SUMMED } else { MAX_EXTENT };
    let joins = p.end() == e.lblock
        && p.pblock.checked_add(p.count) == Some(e.pblock)
        && p.birth == e.birth
        && p.unwritten == e.unwritten
        && p.is_summed() == e.is_summed()
        && p.table_sums == e.table_sums
        && p.count < limit;
    if !joins {
        return None;
    }
    let take = limit.saturating_sub(p.count).min(e.count);
    let mut head = p.clone();
    head.count = p.count.saturating_add(take);
    head.sums.extend(e.sums.iter().take(take as usize));
    let rest = (take < e.count).then(|| e.piece(e.lblock.saturating_add(take), e.end()));
    Some((head, rest))
}

/// Every extent, in logical order.
pub fn all(t: &mut Tree, dev: &dyn Device) -> Result<Vec<Extent>> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(e) = next(t, dev, at)? {
        at = e.end();
        out.push(e);
    }
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects, clippy::indexing_slicing)]
mod tests {
    use super::*;
    use crate::device::MemDevice;
    use crate::structures::btree::TreeKind;

    /// Extents past the volume, of length 0, or whose sums overflow are
    /// corruption naming the leaf they were read from.
    #[test]
    fn decode_bounds_every_extent() {
        let vol = Bounds::new(1024, 100);
        let e = |p: u64, c: u32| {
            let mut w = Writer::default();
            w.u64(p);
            w.u32(c);
            w.buf
        };
        assert!(decode(5, &e(10, 90), 42, &vol).is_ok());
        for (l, p, c) in [
            (5, 10, 91),
            (5, 100, 1),
            (5, 1, 1),
            (5, 10, 0),
            (5, u64::MAX, u32::MAX),
            (u64::MAX, 10, 1),
            (MAX_FILE_BLOCKS, 10, 1),
        ] {
            let err = decode(l, &e(p, c), 42, &vol).unwrap_err().to_string();
            assert!(err.contains("block 42"), "{l} {p} {c}: {err}");
        }
    }

    #[test]
    fn punch_and_map_keep_extents_disjoint() {
        let dev = MemDevice::new(1024, 1024);
        let mut t = Tree::new_empty(9, TreeKind::Extents);
        assert!(map(&mut t, &dev, 0, 100, 10, 0).unwrap().is_empty());
        assert!(map(&mut t, &dev, 10, 110, 5, 0).unwrap().is_empty());
        assert_eq!(
            all(&mut t, &dev).unwrap(),
            vec![Extent {
                lblock: 0,
                pblock: 100,
                count: 15,
                birth: 0,
                unwritten: false,
                sums: Vec::new(),
                table_sums: false,
            }]
        );
        let freed = map(&mut t, &dev, 3, 500, 2, 7).unwrap();
        assert_eq!(freed, vec![(103, 2, 0)]);
        assert_eq!(
            all(&mut t, &dev).unwrap(),
            vec![
                Extent {
                    lblock: 0,
                    pblock: 100,
                    count: 3,
                    birth: 0,
                    unwritten: false,
                    sums: Vec::new(),
                    table_sums: false,
                },
                Extent {
                    lblock: 3,
                    pblock: 500,
                    count: 2,
                    birth: 7,
                    unwritten: false,
                    sums: Vec::new(),
                    table_sums: false,
                },
                Extent {
                    lblock: 5,
                    pblock: 105,
                    count: 10,
                    birth: 0,
                    unwritten: false,
                    sums: Vec::new(),
                    table_sums: false,
                },
            ]
        );
        // Births stay with their blocks, and an extent of another birth
        // is not merged with its neighbour.
        assert!(map(&mut t, &dev, 5 + 10, 115, 1, 7).unwrap().is_empty());
        assert_eq!(lookup(&mut t, &dev, 15).unwrap().unwrap().lblock, 15);
        let freed = punch(&mut t, &dev, 4, 1 << 40).unwrap();
        assert_eq!(freed, vec![(501, 1, 7), (105, 10, 0), (115, 1, 7)]);
        assert_eq!(lookup(&mut t, &dev, 3).unwrap().unwrap().pblock, 500);
        assert!(lookup(&mut t, &dev, 4).unwrap().is_none());
    }
}
