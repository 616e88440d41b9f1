//! Structures layer: extent trees, a file's data map, keyed by logical block,
//! each value an extent `physical start u64, block count u32`. Extents never
//! overlap. Operations here keep that true and report the physical blocks
//! they free.
//!
//! Calls the btree, the device (through it) and the base modules.

use super::btree::Tree;
use crate::codec::{Reader, Writer};
use crate::device::Device;
use crate::error::Result;

/// One mapping: logical `[lblock, lblock + count)` -> physical `[pblock, ..)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    pub lblock: u64,
    pub pblock: u64,
    pub count: u64,
}

/// Longest extent stored in one entry.
pub const MAX_EXTENT: u64 = u32::MAX as u64;

fn encode(pblock: u64, count: u64) -> Vec<u8> {
    let mut w = Writer::with_capacity(12);
    w.u64(pblock);
    w.u32(count as u32);
    w.buf
}

/// Decode the extent stored at `lblock`. `block` names the leaf for errors.
pub fn decode(lblock: u64, v: &[u8], block: u64) -> Result<Extent> {
    let mut r = Reader::new(v, block);
    let pblock = r.u64("extent start")?;
    let count = r.u32("extent length")? as u64;
    if count == 0 || r.remaining() != 0 {
        return Err(r.bad(format!("extent at logical block {lblock}: bad length")));
    }
    Ok(Extent {
        lblock,
        pblock,
        count,
    })
}

fn get(t: &mut Tree, dev: &dyn Device, found: Option<(u64, Vec<u8>)>) -> Result<Option<Extent>> {
    let _ = (t, dev);
    match found {
        None => Ok(None),
        Some((k, v)) => decode(k, &v, 0).map(Some),
    }
}

/// The extent covering `lblock`, if any.
pub fn lookup(t: &mut Tree, dev: &dyn Device, lblock: u64) -> Result<Option<Extent>> {
    let found = t.prev(dev, lblock)?;
    let e = get(t, dev, found)?;
    Ok(e.filter(|e| e.lblock + e.count > lblock))
}

/// Next extent starting at or after `lblock`.
pub fn next(t: &mut Tree, dev: &dyn Device, lblock: u64) -> Result<Option<Extent>> {
    let found = t.next(dev, lblock)?;
    get(t, dev, found)
}

/// Unmap logical blocks `[from, to)`; returns the freed physical ranges.
pub fn punch(t: &mut Tree, dev: &dyn Device, from: u64, to: u64) -> Result<Vec<(u64, u64)>> {
    let mut freed = Vec::new();
    if from >= to {
        return Ok(freed);
    }
    // An extent starting before `from` may reach into the range.
    if let Some(e) = lookup(t, dev, from)? {
        if e.lblock < from {
            let head = from - e.lblock;
            t.insert(dev, e.lblock, encode(e.pblock, head))?;
            let end = e.lblock + e.count;
            let cut_end = end.min(to);
            freed.push((e.pblock + head, cut_end - from));
            if end > to {
                t.insert(dev, to, encode(e.pblock + (to - e.lblock), end - to))?;
            }
        }
    }
    while let Some(e) = next(t, dev, from)? {
        if e.lblock >= to {
            break;
        }
        t.remove(dev, e.lblock)?;
        let end = e.lblock + e.count;
        if end > to {
            freed.push((e.pblock, to - e.lblock));
            t.insert(dev, to, encode(e.pblock + (to - e.lblock), end - to))?;
            break;
        }
        freed.push((e.pblock, e.count));
    }
    Ok(freed)
}

/// Map `[lblock, lblock + count)` to `[pblock, ..)`, replacing whatever was
/// mapped there (returned as freed ranges). Merges with a contiguous
/// predecessor so sequential files stay one extent.
pub fn map(t: &mut Tree, dev: &dyn Device, lblock: u64, pblock: u64, count: u64) -> Result<Vec<(u64, u64)>> {
    let freed = punch(t, dev, lblock, lblock + count)?;
    if lblock > 0 {
        if let Some(p) = lookup(t, dev, lblock - 1)? {
            if p.lblock + p.count == lblock && p.pblock + p.count == pblock && p.count + count <= MAX_EXTENT {
                t.insert(dev, p.lblock, encode(p.pblock, p.count + count))?;
                return Ok(freed);
            }
        }
    }
    t.insert(dev, lblock, encode(pblock, count))?;
    Ok(freed)
}

/// Every extent, in logical order.
pub fn all(t: &mut Tree, dev: &dyn Device) -> Result<Vec<Extent>> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(e) = next(t, dev, at)? {
        at = e.lblock + e.count;
        out.push(e);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::MemDevice;
    use crate::structures::btree::TreeKind;

    #[test]
    fn punch_and_map_keep_extents_disjoint() {
        let dev = MemDevice::new(1024, 64);
        let mut t = Tree::new_empty(9, TreeKind::Extents);
        assert!(map(&mut t, &dev, 0, 100, 10).unwrap().is_empty());
        assert!(map(&mut t, &dev, 10, 110, 5).unwrap().is_empty());
        assert_eq!(
            all(&mut t, &dev).unwrap(),
            vec![Extent {
                lblock: 0,
                pblock: 100,
                count: 15
            }]
        );
        let freed = map(&mut t, &dev, 3, 500, 2).unwrap();
        assert_eq!(freed, vec![(103, 2)]);
        assert_eq!(
            all(&mut t, &dev).unwrap(),
            vec![
                Extent {
                    lblock: 0,
                    pblock: 100,
                    count: 3
                },
                Extent {
                    lblock: 3,
                    pblock: 500,
                    count: 2
                },
                Extent {
                    lblock: 5,
                    pblock: 105,
                    count: 10
                },
            ]
        );
        let freed = punch(&mut t, &dev, 4, 1 << 40).unwrap();
        assert_eq!(freed, vec![(501, 1), (105, 10)]);
        assert_eq!(lookup(&mut t, &dev, 3).unwrap().unwrap().pblock, 500);
        assert!(lookup(&mut t, &dev, 4).unwrap().is_none());
    }
}
