//! Replay of the log's leaf-list changes on a tree's unified branches:
//! `LeafMap` inserts or moves a leaf, `LeafUnmap` removes one, keeping
//! invariant T1 (tree.rs), asserted at each branch changed in debug builds
//! (`check.rs`). Also routes a key to its leaf for replay's checks of
//! what the log maps (`Tree::route_leaf`), and lowers the left edge back
//! after a repair unmapped the first leaf (`Tree::lower_first_sep`).
//! Loads nodes through `tree::load`.

use super::check;
use super::node::{Child, FreedNode, Node, Slot};
use super::tree::{child_level, child_mut, insert_after, load, split_branch, Ctx, Splits};
use crate::error::{Error, Result};

/// Replay insertion of a leaf address into the level-1 branch covering `sep`.
pub(super) fn map_rec(
    node: &mut Node,
    cx: &Ctx,
    bs: usize,
    sep: u64,
    addr: u64,
) -> Result<(Splits, Option<u64>)> {
    let Node::Branch(b) = node else {
        return Err(Error::corrupt(node.addr(), "log maps a leaf below a leaf"));
    };
    b.dirty = true;
    let i = b.child_index(sep);
    if b.level == 1 {
        let pos = b.children.partition_point(|c| c.sep < sep);
        let mut first = None;
        if let Some(c) = b.children.get_mut(pos).filter(|c| c.sep == sep) {
            c.slot = Slot::Disk(addr);
        } else {
            b.children.insert(
                pos,
                Child {
                    sep,
                    slot: Slot::Disk(addr),
                },
            );
            if pos == 0 {
                first = Some(sep);
            }
        }
        let pieces = split_branch(b, bs);
        check::split(b, &pieces);
        return Ok((pieces, first));
    }
    let level = child_level(b);
    let c = child_mut(b, i)?;
    let (splits, first) = map_rec(load(&mut c.slot, cx, level)?, cx, bs, sep, addr)?;
    let mut up = None;
    if let Some(s) = first {
        c.sep = s;
        if i == 0 {
            up = Some(s);
        }
    }
    insert_after(b, i, splits);
    let pieces = split_branch(b, bs);
    check::split(b, &pieces);
    Ok((pieces, up))
}

/// What replay removal did to a node.
pub(super) enum Unmapped {
    /// Nothing to report upward.
    Same,
    /// The node's first sep rose to this value (T1).
    FirstSep(u64),
    /// The node lost its last child and must leave its parent.
    Empty,
}

/// Replay removal of the leaf with separator `sep`. A branch left without
/// children leaves its parent too (its on-disk address goes to `retired`,
/// freed at the next unify): replay may group leaves differently from the
/// tree that logged the change, so a leaf that had siblings there may be
/// alone here.
pub(super) fn unmap_rec(
    node: &mut Node,
    cx: &Ctx,
    sep: u64,
    retired: &mut Vec<FreedNode>,
) -> Result<Unmapped> {
    let Node::Branch(b) = node else {
        return Ok(Unmapped::Same);
    };
    let i = b.child_index(sep);
    let result = if b.level == 1 {
        if b.children.get(i).is_none_or(|c| c.sep != sep) {
            return Ok(Unmapped::Same);
        }
        b.children.remove(i);
        Unmapped::Same
    } else {
        let level = child_level(b);
        let c = child_mut(b, i)?;
        match unmap_rec(load(&mut c.slot, cx, level)?, cx, sep, retired)? {
            Unmapped::Same => return Ok(Unmapped::Same),
            Unmapped::FirstSep(s) => {
                c.sep = s;
                Unmapped::Same
            }
            Unmapped::Empty => {
                let gone = b.children.remove(i);
                if gone.slot.addr() != 0 {
                    retired.push(gone.slot.freed());
                }
                Unmapped::Same
            }
        }
    };
    b.dirty = true;
    if b.children.is_empty() {
        return Ok(Unmapped::Empty);
    }
    check::branch(b);
    if let (0, Some(c)) = (i, b.children.first()) {
        return Ok(Unmapped::FirstSep(c.sep));
    }
    Ok(result)
}

/// The leaf a key routes to, as the leaf list stands (replay's checks).
pub struct Routed {
    /// Its separator and address (0: never written).
    pub sep: u64,
    pub addr: u64,
    /// It is the tree's first leaf.
    pub first: bool,
    /// The next leaf's separator, if one follows.
    pub next: Option<u64>,
}

impl super::Tree {
    /// Repair: the leftmost child of every branch down the leftmost path
    /// gets separator `sep` where its own is above it, so keys from `sep`
    /// on route to the tree again after its first leaf was unmapped (a
    /// replayed unmap raises the separators; a repair that then inserts
    /// the old leaf's keys needs them lowered back).
    pub fn lower_first_sep(&mut self, dev: &dyn crate::device::Device, sep: u64) -> Result<()> {
        self.edited();
        let cx = self.ctx(dev);
        let mut level = self.depth();
        let Some(mut slot) = self.root_slot_mut() else {
            return Ok(());
        };
        while level > 0 {
            let Node::Branch(b) = load(slot, &cx, level)? else {
                break;
            };
            level = child_level(b);
            let Some(first) = b.children.first_mut() else {
                break;
            };
            if first.sep > sep {
                first.sep = sep;
                b.dirty = true;
            }
            let Some(first) = b.children.first_mut() else {
                break;
            };
            slot = &mut first.slot;
        }
        Ok(())
    }

    /// The leaf `key` routes to (none in an empty tree); loads branches
    /// only, never the leaf.
    pub fn route_leaf(&mut self, dev: &dyn crate::device::Device, key: u64) -> Result<Option<Routed>> {
        let cx = self.ctx(dev);
        let depth = self.depth();
        let Some(slot) = self.root_slot_mut() else {
            return Ok(None);
        };
        if depth == 0 {
            let addr = slot.addr();
            return Ok(Some(Routed {
                sep: 0,
                addr,
                first: true,
                next: None,
            }));
        }
        let (mut first, mut next) = (true, None);
        let mut node = load(slot, &cx, depth)?;
        loop {
            let Node::Branch(b) = node else {
                return Err(Error::corrupt(node.addr(), "a branch's child below its level"));
            };
            let i = b.child_index(key);
            first &= i == 0;
            if let Some(c) = b.children.get(i.saturating_add(1)) {
                next = Some(c.sep);
            }
            if b.level == 1 {
                let c = child_mut(b, i)?;
                return Ok(Some(Routed {
                    sep: c.sep,
                    addr: c.slot.addr(),
                    first,
                    next,
                }));
            }
            let level = child_level(b);
            node = load(&mut child_mut(b, i)?.slot, &cx, level)?;
        }
    }
}
