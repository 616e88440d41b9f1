//! Structures layer: operations on ranges of a file's extent tree that
//! fallocate(2) and writes into preallocated space need — the extents a
//! range meets, turning part of an unwritten extent into a written one,
//! and shifting the map to remove or open a block-aligned range (collapse,
//! insert). Like `extent.rs`, every operation keeps extents disjoint.
//!
//! Calls `extent.rs`, the btree and the base modules.

use super::btree::Tree;
use super::extent::{self, encode_as, encode_extent, lookup, next, Extent, Freed};
use crate::codec::MAX_FILE_BLOCKS;
use crate::device::Device;
use crate::error::{Errno, Error, Result};

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

    fn x(lblock: u64, pblock: u64, count: u64, unwritten: bool) -> Extent {
        Extent {
            lblock,
            pblock,
            count,
            birth: 0,
            unwritten,
            sums: Vec::new(),
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
