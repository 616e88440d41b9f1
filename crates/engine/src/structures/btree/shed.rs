//! Structures layer: letting go of loaded nodes a tree can read again.
//! A clean node that has been written (`addr` not 0, not dirty, for a
//! branch no dirty leaf below and every child only on disk) is exactly its
//! block: its slot can go back to `Slot::Disk(addr)`, and the next descent
//! that needs it loads it as after a mount (the inode table's cached
//! descent, `cached.rs`, reads it with no lock held). The root stays.
//!
//! The caller decides when a node is safe to let go of beyond being clean
//! (no delta commit in flight, whose blocks are not yet on the device) and
//! which keys must keep their leaf (`keep`), or how many leaves may stay
//! (`Tree::shed_down_to`, for a directory's tree past its bound).
//!
//! Calls nothing outside the tree.

use super::node::{Branch, Leaf, Node, Slot};
use super::tree::Tree;

impl Tree {
    /// Let go of the clean leaves that hold one of `keys` (sorted; keys
    /// `keep` would not name: the inodes just let go of) and no key that
    /// `keep` names, and of the clean branches on their way left
    /// with no child in memory. Returns the leaves let go of. The last
    /// leaf stays: new keys go there (the inode table's new inodes).
    pub fn shed_leaves(
        &mut self,
        keys: &[u64],
        keep: &mut dyn FnMut(u64) -> bool,
        out: &mut Vec<Node>,
    ) -> usize {
        let mut shed = 0;
        if let Some(Slot::Mem(root)) = self.root_slot_mut() {
            if let Node::Branch(b) = root.as_mut() {
                shed_below(b, keys, true, keep, &mut shed, out);
            }
        }
        if shed > 0 {
            // Spots taken before name nodes no longer in memory.
            self.edited();
        }
        shed
    }

    /// Let go of clean, written leaves in key order (and of the clean
    /// branches on their way left with no child in memory) until at most
    /// `keep` leaves stay in memory: a directory's tree past its bound. The
    /// root and the last leaf stay. Returns the leaves let go of.
    pub fn shed_down_to(&mut self, keep: u64, out: &mut Vec<Node>) -> usize {
        let mut over = self.loaded_leaves().saturating_sub(keep);
        let mut shed = 0;
        if over == 0 {
            return 0;
        }
        if let Some(Slot::Mem(root)) = self.root_slot_mut() {
            if let Node::Branch(b) = root.as_mut() {
                shed_first(b, true, &mut over, &mut shed, out);
            }
        }
        if shed > 0 {
            self.edited();
        }
        shed
    }

    /// Leaves held in memory (for `Stats`).
    pub fn loaded_leaves(&self) -> u64 {
        fn count(n: &Node) -> u64 {
            match n {
                Node::Leaf(_) => 1,
                Node::Branch(b) => b
                    .children
                    .iter()
                    .map(|c| match &c.slot {
                        Slot::Mem(n) => count(n),
                        Slot::Disk(_) => 0,
                    })
                    .sum(),
            }
        }
        match self.root_slot() {
            Some(Slot::Mem(n)) => count(n),
            _ => 0,
        }
    }
}

/// [`Tree::shed_leaves`] below branch `b`, for the `keys` it routes;
/// `last`: `b` is on the way to the tree's last leaf.
fn shed_below(
    b: &mut Branch,
    keys: &[u64],
    last: bool,
    keep: &mut dyn FnMut(u64) -> bool,
    shed: &mut usize,
    out: &mut Vec<Node>,
) {
    let mut rest = keys;
    while let Some(&first) = rest.first() {
        let i = b.child_index(first);
        // The keys routed to child i: those below the next child's sep.
        let end = b.children.get(i.saturating_add(1)).map_or(u64::MAX, |c| c.sep);
        let n = rest.iter().take_while(|&&k| k < end).count().max(1);
        let (mine, after) = rest.split_at(n);
        rest = after;
        let last = last && i.saturating_add(1) == b.children.len();
        let Some(c) = b.children.get_mut(i) else { return };
        let Slot::Mem(node) = &mut c.slot else { continue };
        let clean = match node.as_mut() {
            Node::Leaf(l) => !last && leaf_clean(l) && !holds_kept(l, mine, keep),
            Node::Branch(cb) => {
                shed_below(cb, mine, last, keep, shed, out);
                branch_clean(cb)
            }
        };
        if clean && let_go(&mut c.slot, out) {
            *shed = shed.saturating_add(1);
        }
    }
}

/// [`Tree::shed_down_to`] below branch `b` until `over` more leaves are
/// let go of; `last`: `b` is on the way to the tree's last leaf.
fn shed_first(b: &mut Branch, last: bool, over: &mut u64, shed: &mut usize, out: &mut Vec<Node>) {
    let n = b.children.len();
    for (i, c) in b.children.iter_mut().enumerate() {
        if *over == 0 {
            return;
        }
        let last = last && i.saturating_add(1) == n;
        let Slot::Mem(node) = &mut c.slot else { continue };
        let clean = match node.as_mut() {
            Node::Leaf(l) => !last && leaf_clean(l),
            Node::Branch(cb) => {
                shed_first(cb, last, over, shed, out);
                branch_clean(cb)
            }
        };
        if clean && let_go(&mut c.slot, out) {
            *shed = shed.saturating_add(1);
            *over = over.saturating_sub(1);
        }
    }
}

/// A written leaf with no change since: exactly its block.
fn leaf_clean(l: &Leaf) -> bool {
    !l.dirty && l.addr != 0
}

/// A written branch with no change since and no child in memory.
fn branch_clean(b: &Branch) -> bool {
    !b.dirty && !b.leaves_dirty && b.addr != 0 && b.children.iter().all(|c| matches!(c.slot, Slot::Disk(_)))
}

/// Put the node in `slot` (clean) back on disk, into `out`; whether it
/// was a leaf.
fn let_go(slot: &mut Slot, out: &mut Vec<Node>) -> bool {
    let Slot::Mem(node) = slot else { return false };
    let addr = node.addr();
    let Slot::Mem(node) = std::mem::replace(slot, Slot::Disk(addr)) else {
        return false;
    };
    let leaf = matches!(*node, Node::Leaf(_));
    out.push(*node);
    leaf
}

/// Whether leaf `l` holds a key `keep` names; `gone` (sorted) are keys it
/// would not name, not asked about (a leaf whose every inode was let go of
/// in the same step costs no question at all).
fn holds_kept(l: &Leaf, gone: &[u64], keep: &mut dyn FnMut(u64) -> bool) -> bool {
    let mut gone = gone.iter().rev().peekable();
    // Newest keys first: in a walk, those still kept are the ones reached
    // last.
    for (k, _) in l.entries.iter().rev() {
        while gone.next_if(|&&g| g > *k).is_some() {}
        if gone.next_if_eq(&k).is_some() {
            continue;
        }
        if keep(*k) {
            return true;
        }
    }
    false
}
