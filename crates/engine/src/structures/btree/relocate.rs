//! Structures layer: the nodes of a tree that lie at or past a block
//! address, for a shrink (`frontend/relocate.rs`). Marking them dirty is
//! all it takes to move them: write-anywhere gives a dirty node a new
//! address at the next commit (leaves) or unify (branches), and the
//! allocator's limit keeps that address below the new end.
//!
//! Only what leads to such nodes is loaded: every branch (a branch's
//! children may lie anywhere), and the leaves at or past the address.
//! Calls only the node loader.

use super::node::{Node, Slot};
use super::tree::{child_level, load, Ctx, Tree};
use crate::device::Device;
use crate::error::Result;

impl Tree {
    /// The nodes at or past block `limit`: `born(birth)` for each, and
    /// with `mark` each becomes dirty (a leaf's branches above it learn
    /// they have a dirty leaf below). Returns how many there are.
    pub fn nodes_past(
        &mut self,
        dev: &dyn Device,
        limit: u64,
        mark: bool,
        born: &mut dyn FnMut(u32),
    ) -> Result<u64> {
        let cx = self.ctx(dev);
        let depth = self.depth();
        let Some(slot) = self.root_slot_mut() else {
            return Ok(0);
        };
        if matches!(slot, Slot::Disk(a) if depth == 0 && *a < limit) {
            return Ok(0);
        }
        let node = load(slot, &cx, depth)?;
        Ok(past_rec(node, &cx, limit, mark, born)?.0)
    }
}

/// [`Tree::nodes_past`] under `node`: (nodes found, whether a leaf below
/// became dirty).
fn past_rec(
    node: &mut Node,
    cx: &Ctx,
    limit: u64,
    mark: bool,
    born: &mut dyn FnMut(u32),
) -> Result<(u64, bool)> {
    match node {
        Node::Leaf(l) => {
            if l.addr < limit {
                return Ok((0, false));
            }
            born(l.birth);
            l.dirty |= mark;
            Ok((1, mark))
        }
        Node::Branch(b) => {
            let mut found = 0u64;
            if b.addr >= limit {
                born(b.birth);
                b.dirty |= mark;
                found = 1;
            }
            let level = child_level(b);
            let mut leaves = false;
            for c in b.children.iter_mut() {
                // A leaf below the limit on disk need not be read.
                if matches!(c.slot, Slot::Disk(a) if level == 0 && a < limit) {
                    continue;
                }
                let (k, dirtied) = past_rec(load(&mut c.slot, cx, level)?, cx, limit, mark, born)?;
                found = found.saturating_add(k);
                leaves |= dirtied;
            }
            b.leaves_dirty |= leaves;
            Ok((found, leaves))
        }
    }
}
