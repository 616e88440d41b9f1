//! Redirecting a tree: dirty leaves at each delta commit
//! ([`Redirect::leaves`]), changed branches at unify
//! ([`Redirect::branches`]), each to a new address, born in the current
//! generation; the old address and its birth go to `freed`. Also counts
//! the nodes a unify would write ([`unify_nodes`]), for the space a full
//! volume keeps back.
//! Calls only the node encoders.

use super::node::{Branch, FreedNode, Node, Slot, TreeKind};
use crate::error::Result;

/// Where redirected nodes go, and what they are written as.
pub(super) struct Redirect<'a> {
    pub(super) bs: usize,
    /// Generation the written nodes are born in.
    pub(super) birth: u32,
    pub(super) owner: u64,
    pub(super) kind: TreeKind,
    pub(super) alloc: &'a mut dyn FnMut() -> Result<u64>,
    pub(super) out: &'a mut Vec<(u64, Vec<u8>)>,
    pub(super) freed: &'a mut Vec<FreedNode>,
}

impl Redirect<'_> {
    /// A new address for a node that was at `old` (address 0: never
    /// written; else freed with its birth), whose image there `image`
    /// makes; the caller has set its birth to the current generation.
    fn place(&mut self, old: FreedNode, image: impl FnOnce(u64) -> Vec<u8>) -> Result<u64> {
        let new = (self.alloc)()?;
        if old.0 != 0 {
            self.freed.push(old);
        }
        self.out.push((new, image(new)));
        Ok(new)
    }

    /// Write dirty leaves under `node` (whose sep is `sep`), pushing (sep,
    /// new address) to `maps`; returns whether the node's own address
    /// changed.
    pub(super) fn leaves(&mut self, node: &mut Node, sep: u64, maps: &mut Vec<(u64, u64)>) -> Result<bool> {
        let (bs, owner, kind) = (self.bs, self.owner, self.kind);
        match node {
            Node::Leaf(l) => {
                if !l.dirty && l.addr != 0 {
                    return Ok(false);
                }
                let old = (l.addr, l.birth);
                l.birth = self.birth;
                l.addr = self.place(old, |new| l.encode(new, owner, kind, bs))?;
                l.dirty = false;
                maps.push((sep, l.addr));
                Ok(true)
            }
            Node::Branch(b) => {
                if !b.leaves_dirty {
                    return Ok(false);
                }
                for c in b.children.iter_mut() {
                    if let Slot::Mem(n) = &mut c.slot {
                        if self.leaves(n, c.sep, maps)? {
                            b.dirty = true;
                        }
                    }
                }
                b.leaves_dirty = false;
                Ok(false)
            }
        }
    }

    /// Write `b` if it or any branch below it changed since the last unify;
    /// returns whether `b` got a new address.
    pub(super) fn branches(&mut self, b: &mut Branch) -> Result<bool> {
        debug_assert!(!b.leaves_dirty, "unify with dirty leaves");
        for c in b.children.iter_mut() {
            if let Slot::Mem(n) = &mut c.slot {
                if let Node::Branch(cb) = n.as_mut() {
                    if self.branches(cb)? {
                        b.dirty = true;
                    }
                }
            }
        }
        if !b.dirty && b.addr != 0 {
            return Ok(false);
        }
        let (bs, owner, kind) = (self.bs, self.owner, self.kind);
        let old = (b.addr, b.birth);
        b.birth = self.birth;
        b.addr = self.place(old, |new| b.encode(new, owner, kind, bs))?;
        b.dirty = false;
        Ok(true)
    }
}

/// Nodes under (and including) `n` that the next unify writes: dirty
/// leaves (written by a delta commit, or by the unify for the trees only
/// a unify writes), branches changed or new since the last unify, those
/// above a dirty leaf (redirecting the leaf changes its parent), and every
/// branch above one of them. Returns (whether `n` itself gets a new
/// address, the count). Only nodes in memory can have changed.
pub(super) fn unify_nodes(n: &Node) -> (bool, u64) {
    match n {
        Node::Leaf(l) => (l.dirty || l.addr == 0, u64::from(l.dirty)),
        Node::Branch(b) => {
            let mut moved = b.dirty || b.leaves_dirty || b.addr == 0;
            let mut count = 0u64;
            for c in &b.children {
                if let Slot::Mem(child) = &c.slot {
                    let (m, k) = unify_nodes(child);
                    moved |= m;
                    count = count.saturating_add(k);
                }
            }
            (moved, count.saturating_add(u64::from(moved)))
        }
    }
}
