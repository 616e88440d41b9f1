//! Structures layer: operations on ranges of a file's extent tree that
//! fallocate(2) and writes into preallocated space need — the extents a
//! range meets, turning part of an unwritten extent into a written one,
//! and shifting the map to remove or open a block-aligned range (collapse,
//! insert), and lifting a range's written extents to map them elsewhere
//! (a clone), and where a write that follows mapped data goes best. Like
//! `extent.rs`, every operation keeps extents disjoint.
//!
//! Calls `extent.rs`, the btree and the base modules.

use super::btree::Tree;
use super::extent::{
    self, decode, decode_head, encode_as, encode_extent, join, lookup, next, Extent, Freed, Head, MAX_EXTENT,
    MAX_SUMMED,
};
use crate::codec::Bounds;
use crate::codec::MAX_FILE_BLOCKS;
use crate::device::Device;
use crate::error::{Errno, Error, Result};
use std::ops::ControlFlow;

/// The extents meeting logical blocks `[from, to)`, each cut to the range,
/// in logical order.
pub fn clipped(t: &mut Tree, dev: &dyn Device, from: u64, to: u64) -> Result<Vec<Extent>> {
    let mut out = Vec::new();
    let mut at = from;
    let first = lookup(t, dev, from)?;
    let mut e = match first {
        Some(e) => Some(e),
        None => next(t, dev, from)?,
    };
    while let Some(x) = e {
        if x.lblock >= to || at >= to {
            break;
        }
        out.push(x.piece(from, to));
        at = x.end();
        e = next(t, dev, at)?;
    }
    Ok(out)
}

/// The written extents of a range, as entries to map at another place
/// ([`lifted`]).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Lifted {
    /// (logical block at the destination, value) in key order: each
    /// extent's value as stored, but for those cut at the range's edges
    /// or joined (as [`extent::map_extent`] joins an extent to the one
    /// before it).
    pub entries: Vec<(u64, Vec<u8>)>,
    /// The physical blocks they map, as (start, count) runs in the order
    /// met, neighbours joined where one's blocks follow the other's.
    pub runs: Vec<(u64, u64)>,
    /// Blocks they map.
    pub blocks: u64,
    /// What the last entry's value says.
    last: Option<Head>,
}

impl Lifted {
    /// Add the extent of value `value` (`h` read from it) at destination
    /// block `key`.
    fn push(&mut self, key: u64, h: Head, value: Vec<u8>, bounds: &Bounds) -> Result<()> {
        self.blocks = self.blocks.saturating_add(h.count);
        match self.runs.last_mut() {
            Some((s, c)) if s.saturating_add(*c) == h.pblock => *c = c.saturating_add(h.count),
            _ => self.runs.push((h.pblock, h.count)),
        }
        if let (Some(l), Some((lk, lv))) = (self.last, self.entries.last_mut()) {
            let limit = if h.summed { MAX_SUMMED } else { MAX_EXTENT };
            if lk.saturating_add(l.count) == key
                && l.pblock.saturating_add(l.count) == h.pblock
                && l.count < limit
            {
                let (p, e) = (decode(*lk, lv, 0, bounds)?, decode(key, &value, 0, bounds)?);
                if let Some((head, rest)) = join(&p, &e) {
                    *lv = encode_extent(&head);
                    self.last = Some(head.head());
                    if let Some(r) = rest {
                        self.entries.push((r.lblock, encode_extent(&r)));
                        self.last = Some(r.head());
                    }
                    return Ok(());
                }
            }
        }
        self.entries.push((key, value));
        self.last = Some(h);
        Ok(())
    }
}

/// The written extents meeting logical blocks `[from, to)` of `t`, cut to
/// the range and moved to start at `dest` instead of `from` (unwritten
/// extents left out: they read as holes). One descent and one pass over
/// the range's entries; each value is checked as a decode would check it
/// and taken as it is, not decoded and encoded again.
pub fn lifted(t: &mut Tree, dev: &dyn Device, from: u64, to: u64, dest: u64) -> Result<Lifted> {
    let mut out = Lifted::default();
    if from >= to {
        return Ok(out);
    }
    let bounds = super::bounds(dev);
    let at = |lblock: u64| dest.saturating_add(lblock.saturating_sub(from));
    let add_piece =
        |out: &mut Lifted, p: Extent| out.push(at(p.lblock), p.head(), encode_extent(&p), &bounds);
    // An extent from before `from` that reaches into the range.
    if let Some(e) = lookup(t, dev, from)?.filter(|e| e.lblock < from && !e.unwritten) {
        add_piece(&mut out, e.piece(from, to))?;
    }
    t.scan(dev, from, to, |key, v, leaf| {
        let h = decode_head(key, v, leaf, &bounds)?;
        if h.unwritten {
            return Ok(ControlFlow::Continue(()));
        }
        if key.saturating_add(h.count) > to {
            add_piece(&mut out, decode(key, v, leaf, &bounds)?.piece(key, to))?;
        } else {
            out.push(at(key), h, v.to_vec(), &bounds)?;
        }
        Ok(ControlFlow::Continue(()))
    })?;
    Ok(out)
}

/// Join the first of `entries` (for a range of `t` just emptied, in key
/// order) onto the extent that ends where it starts, as
/// [`extent::map_extent`] joins an extent to the one before it: the
/// joined entry goes first in `entries` (replacing that extent's).
pub fn join_before(t: &mut Tree, dev: &dyn Device, entries: &mut Vec<(u64, Vec<u8>)>) -> Result<()> {
    let Some((key, value)) = entries.first() else {
        return Ok(());
    };
    let Some(p) = key
        .checked_sub(1)
        .map(|b| lookup(t, dev, b))
        .transpose()?
        .flatten()
    else {
        return Ok(());
    };
    let e = decode(*key, value, 0, &super::bounds(dev))?;
    let Some((head, rest)) = join(&p, &e) else {
        return Ok(());
    };
    let mut first = vec![(head.lblock, encode_extent(&head))];
    first.extend(rest.map(|r| (r.lblock, encode_extent(&r))));
    entries.splice(0..1, first);
    Ok(())
}

/// The holes of `[from, to)`: ranges `(start, count)` no extent maps.
pub fn holes(t: &mut Tree, dev: &dyn Device, from: u64, to: u64) -> Result<Vec<(u64, u64)>> {
    let mut out = Vec::new();
    let mut at = from;
    for e in clipped(t, dev, from, to)? {
        if e.lblock > at {
            out.push((at, e.lblock.saturating_sub(at)));
        }
        at = e.end();
    }
    if at < to {
        out.push((at, to.saturating_sub(at)));
    }
    Ok(out)
}

/// Whether a write may fill extent `e`'s blocks in place: it is unwritten
/// and born after `held_upto`, the newest snapshot (none may hold it, so
/// none reads its blocks).
pub fn fillable(e: &Extent, held_upto: Option<u32>) -> bool {
    e.unwritten && held_upto.is_none_or(|s| e.birth > s)
}

/// The block after the one `lblock - 1` maps to, if written: where the
/// data at `lblock` goes best (an append, or a rewrite, that follows it).
pub fn after_predecessor(t: &mut Tree, dev: &dyn Device, lblock: u64) -> Result<Option<u64>> {
    let Some(before) = lblock.checked_sub(1) else {
        return Ok(None);
    };
    let e = lookup(t, dev, before)?;
    Ok(e.filter(|e| !e.unwritten)
        .map(|e| e.physical(before).saturating_add(1)))
}

/// What a write of up to `max` blocks from logical block `lblock` meets
/// first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Run {
    /// `count` blocks of an unwritten extent a write may fill
    /// ([`fillable`]), from physical `pblock`: it fills them in place.
    Unwritten { pblock: u64, count: u64 },
    /// `count` blocks mapped written, or not mapped, or unwritten but not
    /// fillable, before the next fillable extent: the write takes new
    /// blocks.
    Other { count: u64 },
}

/// The run of blocks a write of up to `max` (≥ 1) blocks at `lblock`
/// meets, with `held_upto` the newest snapshot.
pub fn run_at(t: &mut Tree, dev: &dyn Device, lblock: u64, max: u64, held_upto: Option<u32>) -> Result<Run> {
    if let Some(e) = lookup(t, dev, lblock)? {
        let count = e.end().saturating_sub(lblock).min(max);
        if fillable(&e, held_upto) {
            return Ok(Run::Unwritten {
                pblock: e.physical(lblock),
                count,
            });
        }
    }
    let end = lblock.saturating_add(max);
    let stop = first_fillable(t, dev, lblock, end, held_upto)?.unwrap_or(end);
    Ok(Run::Other {
        count: stop.saturating_sub(lblock).max(1),
    })
}

/// The first logical block in `[from, to)` where a fillable extent starts.
fn first_fillable(
    t: &mut Tree,
    dev: &dyn Device,
    from: u64,
    to: u64,
    held_upto: Option<u32>,
) -> Result<Option<u64>> {
    let mut at = from;
    while let Some(e) = next(t, dev, at)? {
        if e.lblock >= to {
            return Ok(None);
        }
        if fillable(&e, held_upto) {
            return Ok(Some(e.lblock));
        }
        at = e.end();
    }
    Ok(None)
}

/// Turn `[lblock, lblock + count)`, which lies inside one unwritten
/// extent, into a written extent over the same blocks (the rest of the
/// extent stays unwritten). Merges with a contiguous written predecessor
/// of the same birth. `sums`, if not empty, are the checksums of the data
/// written there (one per block). Nothing is freed; `false`, with nothing
/// changed, if the range is not inside an unwritten extent.
pub fn mark_written(t: &mut Tree, dev: &dyn Device, lblock: u64, count: u64, sums: Vec<u32>) -> Result<bool> {
    let end = lblock.saturating_add(count);
    let Some(e) = lookup(t, dev, lblock)?.filter(|e| e.unwritten && e.end() >= end) else {
        return Ok(false);
    };
    t.remove(dev, e.lblock)?;
    let head = lblock.saturating_sub(e.lblock);
    if head > 0 {
        t.insert(dev, e.lblock, encode_as(e.pblock, head, e.birth, true))?;
    }
    if e.end() > end {
        let tail = e.end().saturating_sub(end);
        t.insert(dev, end, encode_as(e.physical(end), tail, e.birth, true))?;
    }
    // Its own blocks: `map` frees nothing, as the range is unmapped now.
    let mut written = Extent::written(lblock, e.physical(lblock), count, e.birth);
    written.sums = sums;
    extent::map_extent(t, dev, &written)?;
    Ok(true)
}

/// Remove logical blocks `[start, start + len)` and move every extent
/// after them down by `len` (collapse range); returns the freed blocks.
pub fn collapse(t: &mut Tree, dev: &dyn Device, start: u64, len: u64) -> Result<Vec<Freed>> {
    let from = start.saturating_add(len);
    let freed = extent::punch(t, dev, start, from)?;
    let mut at = from;
    while let Some(e) = next(t, dev, at)? {
        at = e.end();
        t.remove(dev, e.lblock)?;
        t.insert(
            dev,
            e.lblock.saturating_sub(len),
            encode_extent(&e.moved_to(e.lblock.saturating_sub(len))),
        )?;
    }
    Ok(freed)
}

/// Open an unmapped gap of `len` blocks at logical block `start`, moving
/// every extent at or after it up by `len` (insert range). EFBIG, with
/// nothing changed, if an extent would pass the largest file.
pub fn insert_gap(t: &mut Tree, dev: &dyn Device, start: u64, len: u64) -> Result<()> {
    let mut moving = Vec::new();
    let mut at = start;
    if let Some(e) = lookup(t, dev, start)? {
        at = e.end();
        moving.push(e);
    }
    while let Some(e) = next(t, dev, at)? {
        at = e.end();
        moving.push(e);
    }
    if at.checked_add(len).is_none_or(|end| end > MAX_FILE_BLOCKS) && !moving.is_empty() {
        return Err(Error::Posix(Errno::EFBIG));
    }
    // An extent across `start` splits there: its head stays.
    let mut moving = moving.into_iter().peekable();
    if let Some(e) = moving.next_if(|e| e.lblock < start) {
        t.insert(dev, e.lblock, encode_extent(&e.piece(e.lblock, start)))?;
        let tail = e.piece(start, e.end());
        return shift_up(t, dev, std::iter::once(tail).chain(moving).collect(), len, true);
    }
    shift_up(t, dev, moving.collect(), len, false)
}

/// Move `moving` (in logical order; the first one's entry already gone if
/// `first_removed`) up by `len`, the last one first.
fn shift_up(
    t: &mut Tree,
    dev: &dyn Device,
    moving: Vec<Extent>,
    len: u64,
    first_removed: bool,
) -> Result<()> {
    for (k, e) in moving.iter().enumerate().rev() {
        if k > 0 || !first_removed {
            t.remove(dev, e.lblock)?;
        }
        t.insert(dev, e.lblock.saturating_add(len), encode_extent(e))?;
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects, clippy::indexing_slicing)]
mod tests {
    use super::*;
    use crate::device::MemDevice;
    use crate::structures::btree::TreeKind;
    use proptest::prelude::*;

    fn x(lblock: u64, pblock: u64, count: u64, unwritten: bool) -> Extent {
        Extent {
            lblock,
            pblock,
            count,
            birth: 0,
            unwritten,
            sums: Vec::new(),
            table_sums: false,
        }
    }

    /// Each mapped block of `t`: (logical, physical, birth, checksum, unwritten).
    fn blocks(t: &mut Tree, dev: &MemDevice) -> Vec<(u64, u64, u32, Option<u32>, bool)> {
        let mut out = Vec::new();
        for e in extent::all(t, dev).unwrap() {
            for l in e.lblock..e.end() {
                out.push((l, e.physical(l), e.birth, e.sum_at(l), e.unwritten));
            }
        }
        out
    }

    /// A tree of extents from `spec` (gap before, blocks, physical jump,
    /// birth, summed, unwritten), from logical block `at`.
    fn tree_of(dev: &MemDevice, spec: &[(u64, u64, u64, u32, bool, bool)], at: u64, p0: u64) -> Tree {
        let mut t = Tree::new_empty(9, TreeKind::Extents);
        let (mut l, mut p) = (at, p0);
        for &(gap, count, jump, birth, summed, unwritten) in spec {
            l += gap;
            p += jump;
            let mut e = x(l, p, count, unwritten);
            e.birth = birth;
            if summed && !unwritten {
                e.sums = (0..count).map(|k| (p + k) as u32 ^ 0x5eed).collect();
            }
            extent::map_extent(&mut t, dev, &e).unwrap();
            l += count;
            p += count;
        }
        t
    }

    fn spec() -> impl Strategy<Value = Vec<(u64, u64, u64, u32, bool, bool)>> {
        proptest::collection::vec(
            (
                0u64..3,
                1u64..150,
                0u64..2,
                0u32..2,
                any::<bool>(),
                proptest::bool::weighted(0.1),
            ),
            0..40,
        )
    }

    proptest! {
        /// Lifting a range and putting it in with one sorted insert maps
        /// the destination as mapping each extent of the range in turn
        /// does (the same extents, so each block's physical block, birth
        /// and checksum), frees the same blocks, and its runs count each
        /// physical block as often as the extents map it.
        #[test]
        fn a_lifted_range_maps_as_each_extent_mapped_in_turn(
            src in spec(), dst in spec(), from in 0u64..3000, len in 1u64..3000, dest in 0u64..3000,
        ) {
            let dev = MemDevice::new(4096, 32_768);
            let (to, end) = (from + len, dest + len);
            let mut s = tree_of(&dev, &src, 0, 1000);
            let mut one = tree_of(&dev, &dst, 0, 20_000);
            let mut batch = tree_of(&dev, &dst, 0, 20_000);
            let want_freed = extent::punch(&mut one, &dev, dest, end).unwrap();
            let mut want_refs = Vec::new();
            for e in clipped(&mut s, &dev, from, to).unwrap().iter().filter(|e| !e.unwritten) {
                extent::map_extent(&mut one, &dev, &e.moved_to(dest + e.lblock - from)).unwrap();
                want_refs.extend(e.pblock..e.pblock + e.count);
            }
            let lifted = lifted(&mut s, &dev, from, to, dest).unwrap();
            let freed = extent::punch(&mut batch, &dev, dest, end).unwrap();
            let mut entries = lifted.entries;
            join_before(&mut batch, &dev, &mut entries).unwrap();
            batch.insert_sorted(&dev, entries).unwrap();
            prop_assert_eq!(freed, want_freed);
            prop_assert_eq!(blocks(&mut batch, &dev), blocks(&mut one, &dev));
            // Joined as one by one joins them: the same entries.
            prop_assert_eq!(extent::all(&mut batch, &dev).unwrap(), extent::all(&mut one, &dev).unwrap());
            let refs: Vec<u64> = lifted.runs.iter().flat_map(|&(p, c)| p..p + c).collect();
            prop_assert_eq!(lifted.blocks, refs.len() as u64);
            prop_assert_eq!(refs, want_refs);
            prop_assert!(lifted.runs.windows(2).all(|w| w[0].0 + w[0].1 != w[1].0), "runs not joined");
        }
    }

    #[test]
    fn writing_into_an_unwritten_extent_splits_it_and_merges_the_written_part() {
        let dev = MemDevice::new(1024, 1024);
        let mut t = Tree::new_empty(9, TreeKind::Extents);
        extent::map_extent(&mut t, &dev, &x(0, 100, 4, false)).unwrap();
        extent::map_extent(&mut t, &dev, &x(4, 104, 10, true)).unwrap();
        assert_eq!(run_at(&mut t, &dev, 2, 8, None).unwrap(), Run::Other { count: 2 });
        assert_eq!(
            run_at(&mut t, &dev, 5, 100, None).unwrap(),
            Run::Unwritten {
                pblock: 105,
                count: 9
            }
        );
        assert_eq!(
            run_at(&mut t, &dev, 20, 5, None).unwrap(),
            Run::Other { count: 5 }
        );
        // Born at or before the newest snapshot: not filled in place.
        assert_eq!(
            run_at(&mut t, &dev, 5, 100, Some(0)).unwrap(),
            Run::Other { count: 100 }
        );
        assert!(mark_written(&mut t, &dev, 4, 2, Vec::new()).unwrap());
        assert!(mark_written(&mut t, &dev, 9, 1, Vec::new()).unwrap());
        assert_eq!(
            extent::all(&mut t, &dev).unwrap(),
            vec![
                x(0, 100, 6, false),
                x(6, 106, 3, true),
                x(9, 109, 1, false),
                x(10, 110, 4, true)
            ]
        );
        assert!(
            !mark_written(&mut t, &dev, 8, 2, Vec::new()).unwrap(),
            "9 is written"
        );
        assert_eq!(holes(&mut t, &dev, 12, 20).unwrap(), vec![(14, 6)]);
    }

    #[test]
    fn collapse_and_insert_move_the_map_and_keep_each_extent_state() {
        let dev = MemDevice::new(1024, 1024);
        let mut t = Tree::new_empty(9, TreeKind::Extents);
        extent::map_extent(&mut t, &dev, &x(0, 100, 8, false)).unwrap();
        extent::map_extent(&mut t, &dev, &x(10, 300, 4, true)).unwrap();
        insert_gap(&mut t, &dev, 4, 2).unwrap();
        assert_eq!(
            extent::all(&mut t, &dev).unwrap(),
            vec![x(0, 100, 4, false), x(6, 104, 4, false), x(12, 300, 4, true)]
        );
        let freed = collapse(&mut t, &dev, 2, 6).unwrap();
        assert_eq!(freed, vec![(102, 2, 0), (104, 2, 0)]);
        assert_eq!(
            extent::all(&mut t, &dev).unwrap(),
            vec![x(0, 100, 2, false), x(2, 106, 2, false), x(6, 300, 4, true)]
        );
        let mut far = Tree::new_empty(9, TreeKind::Extents);
        extent::map_extent(&mut far, &dev, &x(MAX_FILE_BLOCKS - 2, 5, 1, false)).unwrap();
        assert!(matches!(
            insert_gap(&mut far, &dev, 0, 2),
            Err(Error::Posix(Errno::EFBIG))
        ));
        assert_eq!(extent::all(&mut far, &dev).unwrap().len(), 1, "nothing moved");
    }
}
