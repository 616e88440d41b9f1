//! Redirecting a tree: dirty leaves at each delta commit (`LeafWriter`),
//! changed branches at unify (`write_branches`), each to a new address.
//! Calls only the node encoders.

use super::node::{Branch, FreedNode, Node, Slot, TreeKind};
use crate::error::Result;

pub(super) struct LeafWriter<'a> {
    pub(super) bs: usize,
    /// Generation the written leaves are born in.
    pub(super) birth: u32,
    pub(super) owner: u64,
    pub(super) kind: TreeKind,
    pub(super) alloc: &'a mut dyn FnMut() -> Result<u64>,
    pub(super) out: &'a mut Vec<(u64, Vec<u8>)>,
    pub(super) maps: &'a mut Vec<(u64, u64)>,
    pub(super) freed: &'a mut Vec<FreedNode>,
}

impl LeafWriter<'_> {
    /// Write dirty leaves under `node` (whose sep is `sep`); returns whether
    /// the node's own address changed.
    pub(super) fn node(&mut self, node: &mut Node, sep: u64) -> Result<bool> {
        match node {
            Node::Leaf(l) => {
                if !l.dirty && l.addr != 0 {
                    return Ok(false);
                }
                let new = (self.alloc)()?;
                if l.addr != 0 {
                    self.freed.push((l.addr, l.birth));
                }
                l.birth = self.birth;
                self.out
                    .push((new, l.encode(new, self.owner, self.kind, self.bs)));
                l.addr = new;
                l.dirty = false;
                self.maps.push((sep, new));
                Ok(true)
            }
            Node::Branch(b) => {
                if !b.leaves_dirty {
                    return Ok(false);
                }
                for c in b.children.iter_mut() {
                    if let Slot::Mem(n) = &mut c.slot {
                        if self.node(n, c.sep)? {
                            b.dirty = true;
                        }
                    }
                }
                b.leaves_dirty = false;
                Ok(false)
            }
        }
    }
}

/// Writes changed branches at unify, each to a new address.
pub(super) struct BranchWriter<'a> {
    pub(super) bs: usize,
    /// Generation the written branches are born in.
    pub(super) birth: u32,
    pub(super) owner: u64,
    pub(super) kind: TreeKind,
    pub(super) alloc: &'a mut dyn FnMut() -> Result<u64>,
    pub(super) out: &'a mut Vec<(u64, Vec<u8>)>,
    pub(super) freed: &'a mut Vec<FreedNode>,
}

impl BranchWriter<'_> {
    /// Write `b` if it or any branch below it changed since the last unify;
    /// returns whether `b` got a new address.
    pub(super) fn branch(&mut self, b: &mut Branch) -> Result<bool> {
        debug_assert!(!b.leaves_dirty, "unify with dirty leaves");
        for c in b.children.iter_mut() {
            if let Slot::Mem(n) = &mut c.slot {
                if let Node::Branch(cb) = n.as_mut() {
                    if self.branch(cb)? {
                        b.dirty = true;
                    }
                }
            }
        }
        if !b.dirty && b.addr != 0 {
            return Ok(false);
        }
        let new = (self.alloc)()?;
        if b.addr != 0 {
            self.freed.push((b.addr, b.birth));
        }
        b.birth = self.birth;
        self.out
            .push((new, b.encode(new, self.owner, self.kind, self.bs)));
        b.addr = new;
        b.dirty = false;
        Ok(true)
    }
}
