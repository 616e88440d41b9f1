//! Backend layer, snapshots: the blocks of a whole image (what a rollback
//! reads), range arithmetic over them, and taking blocks back off the dead
//! list when a rollback makes the image that holds them live again.
//!
//! Calls structures (trees, inode records, extents) and the device.

use super::{DeadExtent, Snapshots};
use crate::device::Device;
use crate::error::Result;
use crate::structures::btree::{Tree, TreeKind};
use crate::structures::superblock::Root;

/// Blocks `(start, count, birth)`.
pub type Born = (u64, u64, u32);

/// Every block of the image whose inode table is at `itable`: its nodes,
/// every inode's tree nodes and extents (those its record holds too), as `(start, count, birth)`; and
/// the inodes in it with link count 0 (orphans when the image was made).
/// Reads the whole image (rollback's cost).
pub fn image_blocks(dev: &dyn Device, itable: Root) -> Result<(Vec<Born>, Vec<u64>)> {
    use crate::structures::btree::Node;
    use crate::structures::inode::InodeAttrs;
    let bounds = crate::structures::bounds(dev);
    let mut blocks = Vec::new();
    let mut inodes = Vec::new();
    let mut table = Tree::open(0, TreeKind::Itable, itable);
    let mut bad = None;
    table.visit(dev, &mut |addr, _, _, node: &Node| {
        blocks.push((addr, 1, node.birth()));
        if let Node::Leaf(l) = node {
            for (ino, v) in &l.entries {
                match InodeAttrs::decode(v, *ino, addr, &bounds) {
                    Ok(a) => inodes.push((*ino, a)),
                    Err(e) => bad = Some(e),
                }
            }
        }
        Ok(())
    })?;
    if let Some(e) = bad {
        return Err(e);
    }
    let mut orphans = Vec::new();
    for (ino, a) in inodes {
        if a.nlink == 0 {
            orphans.push(ino);
        }
        blocks.extend(a.inline.iter().map(|e| (e.pblock, e.count, e.birth)));
        if a.root.addr == 0 {
            continue;
        }
        let dir = a.mode & libc::S_IFMT == libc::S_IFDIR;
        let kind = if dir { TreeKind::Dirents } else { TreeKind::Extents };
        let mut tree = Tree::open(ino, kind, a.root);
        let mut bad = None;
        tree.visit(dev, &mut |addr, _, _, node: &Node| {
            blocks.push((addr, 1, node.birth()));
            if let (Node::Leaf(l), false) = (node, dir) {
                for (k, v) in &l.entries {
                    match crate::structures::extent::decode(*k, v, addr, &bounds) {
                        Ok(e) => blocks.push((e.pblock, e.count, e.birth)),
                        Err(e) => bad = Some(e),
                    }
                }
            }
            Ok(())
        })?;
        if let Some(e) = bad {
            return Err(e);
        }
    }
    blocks.sort_unstable();
    Ok((blocks, orphans))
}

/// The parts of `ranges` (sorted) outside `minus` (sorted, as (start, end)).
pub fn subtract(ranges: &[(u64, u64, u32)], minus: &[(u64, u64)]) -> Vec<(u64, u64, u32)> {
    let mut out = Vec::new();
    let mut j = 0;
    for &(start, count, birth) in ranges {
        let end = start + count;
        let mut at = start;
        while j < minus.len() && minus[j].1 <= at {
            j += 1;
        }
        let mut k = j;
        while at < end {
            match minus.get(k) {
                Some(&(ms, me)) if ms < end => {
                    if ms > at {
                        out.push((at, ms - at, birth));
                    }
                    at = at.max(me);
                    k += 1;
                }
                _ => {
                    out.push((at, end - at, birth));
                    at = end;
                }
            }
        }
    }
    out
}

/// `ranges` as sorted, merged (start, end) pairs.
pub fn merged(ranges: &[(u64, u64, u32)]) -> Vec<(u64, u64)> {
    let mut v: Vec<(u64, u64)> = ranges.iter().map(|&(s, c, _)| (s, s + c)).collect();
    v.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(v.len());
    for (s, e) in v {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

impl Snapshots {
    /// Blocks `[start, start+count)` are live again (a rollback made the
    /// image that holds them the live one): off the dead list, keeping the
    /// rest of any extent they were part of.
    pub fn revive(&mut self, dev: &dyn Device, start: u64, count: u64) -> Result<()> {
        let end = start + count;
        let first = self.dead.range(..=start).next_back().map_or(start, |(s, _)| *s);
        let hit: Vec<(u64, DeadExtent)> = self
            .dead
            .range(first..end)
            .filter(|(s, d)| **s + d.count > start)
            .map(|(s, d)| (*s, *d))
            .collect();
        for (s, d) in hit {
            self.remove_dead(dev, s)?;
            let keep = subtract(&[(s, d.count, d.birth)], &[(start, end)]);
            for (ks, kc, kb) in keep {
                let piece = DeadExtent {
                    count: kc,
                    birth: kb,
                    death: d.death,
                };
                self.tree.insert(dev, ks, piece.encode())?;
                self.index(ks, piece);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dead_extents_round_trip_in_few_bytes() {
        for d in [
            DeadExtent {
                count: 1,
                birth: 0,
                death: 1,
            },
            DeadExtent {
                count: 300,
                birth: 5000,
                death: 5001,
            },
            DeadExtent {
                count: u64::from(u32::MAX),
                birth: u32::MAX - 1,
                death: u32::MAX,
            },
        ] {
            let v = d.encode();
            assert_eq!(DeadExtent::decode(10, &v, 7, u64::MAX).unwrap(), d);
        }
        // A short extent of generations below 2^21: an entry of at most 16
        // bytes with its 8-byte key and 2-byte length.
        let v = DeadExtent {
            count: 100,
            birth: 2_000_000,
            death: 2_000_100,
        }
        .encode();
        assert!(v.len() + 10 <= 16, "{}", v.len());
        // Truncated, overlong or past the volume: corruption naming the leaf.
        let v = DeadExtent {
            count: 3,
            birth: 1,
            death: 2,
        }
        .encode();
        for bad in [&v[..2], &[v.clone(), vec![0]].concat()[..], &[0x80; 11][..]] {
            let e = DeadExtent::decode(10, bad, 7, 100).unwrap_err().to_string();
            assert!(e.contains("block 7"), "{e}");
        }
        assert!(DeadExtent::decode(99, &v, 7, 100).is_err());
    }

    #[test]
    fn subtract_keeps_what_lies_outside() {
        let r = [(10, 10, 1), (30, 5, 2), (40, 1, 3)];
        let m = [(12, 14), (18, 32), (40, 41)];
        assert_eq!(subtract(&r, &m), vec![(10, 2, 1), (14, 4, 1), (32, 3, 2)]);
        assert_eq!(subtract(&r, &[]), r.to_vec());
        assert_eq!(
            merged(&[(5, 3, 0), (1, 2, 0), (8, 1, 0), (20, 1, 0)]),
            vec![(1, 3), (5, 9), (20, 21)]
        );
    }
}
