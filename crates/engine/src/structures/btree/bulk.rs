//! Structures layer, btree: inserting many entries in key order at once
//! (a clone maps thousands of extents into a range it has just emptied).
//! One descent hands each leaf all the entries it takes; the leaf takes
//! them in one splice and is cut into leaves filled in order, each as
//! full as a block allows (a split of one insert halves a leaf, so
//! entries added one by one leave leaves half full); the branches above
//! take the new leaves the same way. The result is a tree an insert of
//! each entry would also give, but for where the leaves are cut.
//!
//! Calls the tree's own node code (`tree.rs`) and the device through it.

use super::check;
use super::node::{Leaf, Node, LEAF_ENTRY_OVERHEAD, NODE_HEADER};
use super::tree::{child_level, child_mut, insert_after, load, split_branch, Ctx, Splits};
use super::Tree;
use crate::device::Device;
use crate::error::{Errno, Error, Result};

impl Tree {
    /// Insert or replace every entry of `entries`, whose keys strictly
    /// increase (else each is inserted alone). Each value must be at most
    /// [`Tree::max_value`] (ENOSPC, nothing changed).
    pub fn insert_sorted(&mut self, dev: &dyn Device, entries: Vec<(u64, Vec<u8>)>) -> Result<()> {
        let bs = dev.block_size() as usize;
        if entries.iter().any(|(_, v)| v.len() > Tree::max_value(bs)) {
            return Err(Error::Posix(Errno::ENOSPC));
        }
        if entries.is_empty() {
            return Ok(());
        }
        if !entries.windows(2).all(|w| matches!(w, [a, b] if a.0 < b.0)) {
            for (k, v) in entries {
                self.insert(dev, k, v)?;
            }
            return Ok(());
        }
        self.ensure_root();
        self.edited();
        let cx = self.ctx(dev);
        let depth = self.depth();
        let Some(slot) = self.root_slot_mut() else {
            return Ok(());
        };
        let splits = insert_sorted_rec(load(slot, &cx, depth)?, &cx, bs, entries)?;
        self.grow(splits, bs, true);
        Ok(())
    }
}

/// `entries` (sorted, not empty) into `node`, which covers all their keys.
fn insert_sorted_rec(
    node: &mut Node,
    cx: &Ctx,
    bs: usize,
    mut entries: Vec<(u64, Vec<u8>)>,
) -> Result<Splits> {
    match node {
        Node::Leaf(l) => {
            merge_into(l, entries);
            l.dirty = true;
            Ok(pack_leaf(l, bs))
        }
        Node::Branch(b) => {
            // Each child's share: (child, index of its first entry).
            let mut shares = Vec::new();
            let mut at = 0;
            while let Some((key, _)) = entries.get(at) {
                let i = b.child_index(*key);
                shares.push((i, at));
                at = match b.children.get(i.saturating_add(1)) {
                    Some(next) => entries.partition_point(|e| e.0 < next.sep),
                    None => entries.len(),
                };
            }
            let level = child_level(b);
            // From the last share back, so that the pieces a child splits
            // into go in without moving the indices of those before it.
            for (i, from) in shares.into_iter().rev() {
                let part = entries.split_off(from);
                let child = load(&mut child_mut(b, i)?.slot, cx, level)?;
                let splits = insert_sorted_rec(child, cx, bs, part)?;
                if !splits.is_empty() {
                    b.dirty = true;
                    insert_after(b, i, splits);
                }
            }
            b.leaves_dirty = true;
            let pieces = split_branch(b, bs);
            check::split(b, &pieces);
            Ok(pieces)
        }
    }
}

/// Merge sorted `entries` into `l`'s (a new value replaces an old one of
/// the same key). Entries that all fall between two of the leaf's go in
/// as one splice.
fn merge_into(l: &mut Leaf, entries: Vec<(u64, Vec<u8>)>) {
    let (Some(first), Some(last)) = (entries.first().map(|e| e.0), entries.last().map(|e| e.0)) else {
        return;
    };
    let i = l.lower_bound(first);
    if l.entries.get(i).is_none_or(|e| e.0 > last) {
        l.entries.splice(i..i, entries);
        return;
    }
    let old = std::mem::take(&mut l.entries);
    let mut out = Vec::with_capacity(old.len().saturating_add(entries.len()));
    let mut old = old.into_iter().peekable();
    for e in entries {
        while let Some(o) = old.next_if(|o| o.0 < e.0) {
            out.push(o);
        }
        old.next_if(|o| o.0 == e.0);
        out.push(e);
    }
    out.extend(old);
    l.entries = out;
}

/// Cut an overflowing leaf into leaves filled in key order; returns those
/// after `l` with their seps (each dirty, never written). Every value is
/// at most [`Tree::max_value`], so each piece holds at least one entry.
fn pack_leaf(l: &mut Leaf, bs: usize) -> Splits {
    if l.size() <= bs {
        return Vec::new();
    }
    let mut pieces: Vec<Vec<(u64, Vec<u8>)>> = vec![Vec::new()];
    let mut used = NODE_HEADER;
    for e in std::mem::take(&mut l.entries) {
        let size = LEAF_ENTRY_OVERHEAD.saturating_add(e.1.len());
        if used.saturating_add(size) > bs && pieces.last().is_some_and(|p| !p.is_empty()) {
            pieces.push(Vec::new());
            used = NODE_HEADER;
        }
        used = used.saturating_add(size);
        if let Some(p) = pieces.last_mut() {
            p.push(e);
        }
    }
    let mut pieces = pieces.into_iter();
    l.entries = pieces.next().unwrap_or_default();
    pieces
        .map(|entries| {
            let sep = entries.first().map_or(0, |e| e.0);
            (
                sep,
                Node::Leaf(Leaf {
                    addr: 0,
                    birth: 0,
                    dirty: true,
                    entries,
                }),
            )
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects, clippy::indexing_slicing)]
mod tests {
    use super::super::TreeKind;
    use super::*;
    use crate::device::MemDevice;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn value(k: u64, len: usize) -> Vec<u8> {
        (0..len).map(|i| (k as u8).wrapping_add(i as u8)).collect()
    }

    /// Leaves of `t` in order: their entry counts, and whether each fits.
    fn leaves(t: &mut Tree, dev: &MemDevice) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        t.visit(dev, &mut |_, level, _, n| {
            if let (0, Node::Leaf(l)) = (level, n) {
                out.push((l.entries.len(), l.size()));
            }
            Ok(())
        })
        .unwrap();
        out
    }

    proptest! {
        /// A tree with some entries, then a sorted batch inserted at once,
        /// holds what the same entries inserted one by one give, in
        /// leaves that each fit a block; the batch's own leaves are full.
        #[test]
        fn a_sorted_batch_gives_what_single_inserts_give(
            before in proptest::collection::vec((0u64..4000, 8usize..300), 0..300),
            from in 0u64..4000,
            gaps in proptest::collection::vec((1u64..6, 8usize..300), 0..600),
        ) {
            let dev = MemDevice::new(4096, 1024);
            let mut t = Tree::new_empty(9, TreeKind::Extents);
            let mut model = BTreeMap::new();
            for &(k, len) in &before {
                t.insert(&dev, k, value(k, len)).unwrap();
                model.insert(k, value(k, len));
            }
            let mut batch = Vec::new();
            let mut k = from;
            for &(gap, len) in &gaps {
                batch.push((k, value(k ^ 0x55, len)));
                k += gap;
            }
            for (k, v) in &batch {
                model.insert(*k, v.clone());
            }
            t.insert_sorted(&dev, batch).unwrap();
            let got = t.range(&dev, 0, u64::MAX, usize::MAX).unwrap();
            let want: Vec<_> = model.into_iter().collect();
            prop_assert_eq!(got, want);
            for (n, size) in leaves(&mut t, &dev) {
                prop_assert!(size <= 4096, "a leaf of {} entries is {} bytes", n, size);
            }
        }
    }

    /// Ten thousand entries of 273 bytes (a summed extent's) into an empty
    /// tree fill their leaves: 14 a leaf, where inserts one by one leave
    /// leaves about half full.
    #[test]
    fn a_large_batch_fills_its_leaves() {
        let dev = MemDevice::new(4096, 1024);
        let mut bulk = Tree::new_empty(9, TreeKind::Extents);
        let entries: Vec<_> = (0..10_000u64).map(|k| (k * 64, value(k, 273))).collect();
        bulk.insert_sorted(&dev, entries.clone()).unwrap();
        let per_leaf = (4096 - NODE_HEADER) / (LEAF_ENTRY_OVERHEAD + 273);
        let counts = leaves(&mut bulk, &dev);
        assert_eq!(counts.len(), 10_000usize.div_ceil(per_leaf));
        assert!(counts.iter().all(|&(_, size)| size <= 4096));
        assert_eq!(bulk.range(&dev, 0, u64::MAX, usize::MAX).unwrap(), entries);
        let mut single = Tree::new_empty(9, TreeKind::Extents);
        for (k, v) in entries {
            single.insert(&dev, k, v).unwrap();
        }
        assert!(leaves(&mut single, &dev).len() > counts.len() * 3 / 2);
    }
}
