//! Structures layer: the generic btree, one algorithm for the inode table,
//! extent trees and directories. Nodes load lazily from the device and stay
//! in memory.
//!
//! Logically a tree is an ordered list of leaves, each with a separator
//! (`sep`): key k lives in the leaf with the largest sep <= k (or the first
//! leaf). Branches are only an index over that list. This is what makes the
//! log work (docs/ARCHITECTURE.md, "leaf map"):
//!
//! * a delta commit redirects each dirty leaf to a new address and logs
//!   `LeafMap(tree, sep, addr)`; a leaf removed from the list is logged as
//!   `LeafUnmap(tree, sep)`;
//! * branches are redirected and written only at unify; replay rebuilds
//!   them in cache by applying the same list changes to the last unified
//!   branches.
//!
//! Invariant T1: every branch entry's sep equals the sep of the first leaf
//! below it, so any branch shape over the same leaf list routes every key to
//! the same leaf. Leaf splits, leaf removal and replay all preserve T1;
//! debug builds assert it at every branch they change (`check.rs`).

use super::check;
pub(super) use super::edit::{insert_after, split_branch};
use super::edit::{insert_rec, remove_rec, visit_rec, Events};
use super::node::{
    decode, Branch, Child, FreedNode, Leaf, Node, Slot, TreeKind, LEAF_ENTRY_OVERHEAD, NODE_HEADER,
};
use super::redirect::Redirect;
use super::replay::{map_rec, unmap_rec, Unmapped};
use super::search::{get_rec, next_rec, prev_rec, probe_rec, Probe, Prober, Route, Spot, Stamp};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::structures::superblock::Root;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicU64, Ordering};

/// Epochs of trees made: every `Tree` gets its own, so a `Spot` of one
/// tree never holds in another made in its place.
static EPOCHS: AtomicU64 = AtomicU64::new(0);

/// A btree and the changes to its leaf list not yet committed.
pub struct Tree {
    /// Owner: 0 for the inode table, else the inode number.
    pub id: u64,
    pub kind: TreeKind,
    root: Option<Slot>,
    depth: u8,
    /// The root as of the last unify (the base replay starts from).
    pub unified: Root,
    /// Seps of leaves removed since the last commit, in order.
    pub unmaps: Vec<u64>,
    /// Blocks no longer referenced once the current delta is durable.
    pub freed: Vec<FreedNode>,
    /// Branch addresses of the unified image no longer in the tree; freed
    /// by the next unify (which stops referencing them).
    pub retired: Vec<FreedNode>,
    /// This state of the entries and shape (`Tree::holds`).
    stamp: Stamp,
}

/// Read-only context for loading nodes.
pub(super) struct Ctx<'a> {
    pub(super) dev: &'a dyn Device,
    pub(super) owner: u64,
    pub(super) kind: TreeKind,
}

/// Pieces split off to the right of a node: (sep, node) pairs to insert
/// after it in its parent.
pub(super) type Splits = Vec<(u64, Node)>;

/// An entry found in a tree, with the address of the leaf that holds it
/// (0 for a leaf never written), so errors about the value name the block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub key: u64,
    pub value: Vec<u8>,
    pub leaf: u64,
}

/// Level of a branch's children. Branches are at level 1 or above: decode
/// checks the level the parent expects, and new branches go above a node.
pub(super) fn child_level(b: &Branch) -> u8 {
    b.level.saturating_sub(1)
}

/// Child `i` of branch `b`, or an error naming the branch.
pub(super) fn child_mut(b: &mut Branch, i: usize) -> Result<&mut Child> {
    let addr = b.addr;
    let n = b.children.len();
    b.children
        .get_mut(i)
        .ok_or_else(|| Error::corrupt(addr, format!("branch has no child {i} (it has {n})")))
}

impl Tree {
    /// A tree whose unified root is `root` (address 0: empty).
    pub fn open(id: u64, kind: TreeKind, root: Root) -> Tree {
        Tree {
            id,
            kind,
            root: (root.addr != 0).then_some(Slot::Disk(root.addr)),
            depth: root.depth,
            unified: root,
            unmaps: Vec::new(),
            freed: Vec::new(),
            retired: Vec::new(),
            stamp: Stamp {
                epoch: EPOCHS.fetch_add(1, Ordering::Relaxed),
                edits: 0,
            },
        }
    }

    /// The entries or the shape are about to change: spots taken before
    /// no longer hold.
    pub(super) fn edited(&mut self) {
        self.stamp.edits = self.stamp.edits.wrapping_add(1);
    }

    /// Whether the tree is still as it was when `spot` was taken: no entry
    /// added or removed, no leaf split, merged or replayed since (so a free
    /// key the spot names is still free, an entry still there).
    pub fn holds(&self, spot: &Spot) -> bool {
        spot.stamp == self.stamp
    }

    /// A new empty tree holding one empty, dirty leaf.
    pub fn new_empty(id: u64, kind: TreeKind) -> Tree {
        let mut t = Tree::open(id, kind, Root::default());
        t.root = Some(Slot::Mem(Box::new(Node::Leaf(Leaf {
            addr: 0,
            birth: 0,
            dirty: true,
            entries: Vec::new(),
        }))));
        t
    }

    /// A tree held in an inode record (docs/FORMAT.md 7.1, attribute 9):
    /// one clean leaf of `entries` that has no block of its own (address
    /// 0). It stays so until a commit finds it too large for the record.
    pub fn held_inline(id: u64, kind: TreeKind, entries: Vec<(u64, Vec<u8>)>) -> Tree {
        let mut t = Tree::open(id, kind, Root::default());
        t.root = Some(Slot::Mem(Box::new(Node::Leaf(Leaf {
            addr: 0,
            birth: 0,
            dirty: false,
            entries,
        }))));
        t
    }

    /// The entries of a tree that may be held in an inode record: a single
    /// leaf never written to a block, with at most `max` entries, and
    /// nothing of an earlier shape to free or unmap. None otherwise (an
    /// empty tree with no leaf included: it needs no record either).
    pub fn inline_entries(&self, max: usize) -> Option<&[(u64, Vec<u8>)]> {
        if self.unified.addr != 0
            || self.depth != 0
            || !self.unmaps.is_empty()
            || !self.freed.is_empty()
            || !self.retired.is_empty()
        {
            return None;
        }
        match &self.root {
            Some(Slot::Mem(n)) => match n.as_ref() {
                Node::Leaf(l) if l.addr == 0 && l.entries.len() <= max => Some(&l.entries),
                _ => None,
            },
            _ => None,
        }
    }

    /// The tree's one leaf is held in the inode record from now on, or (not
    /// `held`) leaves it: the next delta commit then writes it to a block.
    pub fn hold_inline(&mut self, held: bool) {
        if let Some(Slot::Mem(n)) = self.root.as_mut() {
            if let Node::Leaf(l) = n.as_mut() {
                if l.addr == 0 {
                    l.dirty = !held;
                }
            }
        }
    }

    /// Branch levels above the leaves in memory now.
    pub fn depth(&self) -> u8 {
        self.depth
    }

    /// Largest value this tree accepts for block size `bs`: two always fit in a leaf.
    pub fn max_value(bs: usize) -> usize {
        (bs.saturating_sub(NODE_HEADER) / 2).saturating_sub(LEAF_ENTRY_OVERHEAD)
    }

    pub(super) fn ctx<'a>(&self, dev: &'a dyn Device) -> Ctx<'a> {
        Ctx {
            dev,
            owner: self.id,
            kind: self.kind,
        }
    }

    /// The root's slot (`None`: an empty tree).
    pub(super) fn root_slot(&self) -> Option<&Slot> {
        self.root.as_ref()
    }

    pub(super) fn root_slot_mut(&mut self) -> Option<&mut Slot> {
        self.root.as_mut()
    }

    /// Value stored under `key`.
    pub fn get(&mut self, dev: &dyn Device, key: u64) -> Result<Option<Vec<u8>>> {
        Ok(self.get_at(dev, key)?.map(|(v, _)| v))
    }

    /// Value stored under `key` and the address of the leaf holding it (0
    /// for a leaf never written), for errors about the value.
    pub fn get_at(&mut self, dev: &dyn Device, key: u64) -> Result<Option<(Vec<u8>, u64)>> {
        self.search(dev, |root, cx| get_rec(root, cx, key))
    }

    /// First entry with key >= `from`.
    pub fn next(&mut self, dev: &dyn Device, from: u64) -> Result<Option<(u64, Vec<u8>)>> {
        Ok(self.next_at(dev, from)?.map(|e| (e.key, e.value)))
    }

    /// First entry with key >= `from`, with the address of its leaf.
    pub fn next_at(&mut self, dev: &dyn Device, from: u64) -> Result<Option<Found>> {
        self.search(dev, |root, cx| next_rec(root, cx, from))
    }

    /// Last entry with key <= `at`.
    pub fn prev(&mut self, dev: &dyn Device, at: u64) -> Result<Option<(u64, Vec<u8>)>> {
        Ok(self.prev_at(dev, at)?.map(|e| (e.key, e.value)))
    }

    /// Last entry with key <= `at`, with the address of its leaf.
    pub fn prev_at(&mut self, dev: &dyn Device, at: u64) -> Result<Option<Found>> {
        self.search(dev, |root, cx| prev_rec(root, cx, at))
    }

    /// `f` on the root node (loaded if need be); nothing in an empty tree.
    fn search<T>(
        &mut self,
        dev: &dyn Device,
        f: impl FnOnce(&mut Node, &Ctx) -> Result<Option<T>>,
    ) -> Result<Option<T>> {
        let cx = self.ctx(dev);
        let depth = self.depth;
        match self.root.as_mut() {
            None => Ok(None),
            Some(slot) => f(load(slot, &cx, depth)?, &cx),
        }
    }

    /// Entries with keys in `from..to`, at most `max` of them.
    pub fn range(&mut self, dev: &dyn Device, from: u64, to: u64, max: usize) -> Result<Vec<(u64, Vec<u8>)>> {
        Ok(self
            .range_at(dev, from, to, max)?
            .into_iter()
            .map(|e| (e.key, e.value))
            .collect())
    }

    /// Entries with keys in `from..to`, at most `max` of them, each with
    /// the address of its leaf.
    pub fn range_at(&mut self, dev: &dyn Device, from: u64, to: u64, max: usize) -> Result<Vec<Found>> {
        let mut out = Vec::new();
        if max == 0 {
            return Ok(out);
        }
        self.scan(dev, from, to, |key, value, leaf| {
            out.push(Found {
                key,
                value: value.to_vec(),
                leaf,
            });
            Ok(if out.len() < max {
                ControlFlow::Continue(())
            } else {
                ControlFlow::Break(())
            })
        })?;
        Ok(out)
    }

    /// `f(key, value, leaf address)` on the entries with keys in
    /// `from..to`, in key order, until it breaks. One descent; each value
    /// borrowed from its leaf.
    pub fn scan(
        &mut self,
        dev: &dyn Device,
        from: u64,
        to: u64,
        mut f: impl FnMut(u64, &[u8], u64) -> Result<ControlFlow<()>>,
    ) -> Result<()> {
        self.probe(dev, from, to, |k, v, leaf| Ok(f(k, v, leaf)?.break_value()))?;
        Ok(())
    }

    /// Probe the keys `from..to`: one descent to `from`, then
    /// `visit(key, value, leaf address)` on each entry of the range in key
    /// order (the value borrowed from its leaf) until it returns `Some`.
    /// Returns that entry's `Spot` and what `visit` made of it; else the
    /// lowest key of the range that holds no entry and the `Spot` where it
    /// goes ([`Tree::insert_at`] puts it there without searching again);
    /// else `Full`. Reads no leaf wholly past the range.
    pub fn probe<T>(
        &mut self,
        dev: &dyn Device,
        from: u64,
        to: u64,
        mut visit: impl FnMut(u64, &[u8], u64) -> Result<Option<T>>,
    ) -> Result<Probe<T>> {
        if from >= to {
            return Ok(Probe::Full);
        }
        let stamp = self.stamp;
        let cx = self.ctx(dev);
        let depth = self.depth;
        let Some(slot) = self.root.as_mut() else {
            return Ok(Probe::Free(Spot::bare(from, stamp)));
        };
        let mut p = Prober::new(from, to, stamp, &mut visit);
        probe_rec(load(slot, &cx, depth)?, &cx, &mut p, 0, None)?;
        Ok(p.result())
    }

    /// Insert or replace `key`. `value` must be at most [`Tree::max_value`].
    pub fn insert(&mut self, dev: &dyn Device, key: u64, value: Vec<u8>) -> Result<()> {
        self.insert_routed(dev, Route::key(key), value)
    }

    /// Insert or replace `spot.key`, following the way `spot` recorded
    /// while it still leads there (else searching). `value` must be at
    /// most [`Tree::max_value`].
    pub fn insert_at(&mut self, dev: &dyn Device, spot: &Spot, value: Vec<u8>) -> Result<()> {
        self.insert_routed(dev, spot.route(), value)
    }

    fn insert_routed(&mut self, dev: &dyn Device, route: Route, value: Vec<u8>) -> Result<()> {
        let bs = dev.block_size() as usize;
        if value.len() > Tree::max_value(bs) {
            return Err(Error::Posix(crate::error::Errno::ENOSPC));
        }
        self.ensure_root();
        self.edited();
        let cx = self.ctx(dev);
        let depth = self.depth;
        let Some(slot) = self.root.as_mut() else {
            return Ok(());
        };
        let splits = insert_rec(load(slot, &cx, depth)?, &cx, bs, route, value)?;
        self.grow(splits, bs, true);
        Ok(())
    }

    /// An empty tree gets an empty dirty leaf for a root, to insert into.
    pub(super) fn ensure_root(&mut self) {
        if self.root.is_none() {
            self.root = Some(Slot::Mem(Box::new(Node::Leaf(Leaf {
                addr: 0,
                birth: 0,
                dirty: true,
                entries: Vec::new(),
            }))));
            self.depth = 0;
        }
    }

    /// Remove `key`, returning its value.
    pub fn remove(&mut self, dev: &dyn Device, key: u64) -> Result<Option<Vec<u8>>> {
        self.remove_routed(dev, Route::key(key))
    }

    /// Remove `spot.key`, returning its value; follows the way `spot`
    /// recorded while it still leads there (else searches).
    pub fn remove_at(&mut self, dev: &dyn Device, spot: &Spot) -> Result<Option<Vec<u8>>> {
        self.remove_routed(dev, spot.route())
    }

    fn remove_routed(&mut self, dev: &dyn Device, route: Route) -> Result<Option<Vec<u8>>> {
        self.edited();
        let cx = self.ctx(dev);
        let depth = self.depth;
        let Some(slot) = self.root.as_mut() else {
            return Ok(None);
        };
        let node = load(slot, &cx, depth)?;
        let mut ev = Events {
            unmaps: &mut self.unmaps,
            freed: &mut self.freed,
        };
        let (v, _) = remove_rec(node, &cx, route, &mut ev, true)?;
        Ok(v)
    }

    /// New root levels for pieces split off the root. `leaves_dirty`: the
    /// split came from a leaf change (not from replay).
    pub(super) fn grow(&mut self, mut splits: Splits, bs: usize, leaves_dirty: bool) {
        while !splits.is_empty() {
            let Some(old) = self.root.take() else { return };
            let level = self.depth.saturating_add(1);
            let mut children = vec![Child { sep: 0, slot: old }];
            for (sep, n) in splits.drain(..) {
                children.push(Child {
                    sep,
                    slot: Slot::Mem(Box::new(n)),
                });
            }
            let mut b = Branch {
                addr: 0,
                birth: 0,
                level,
                dirty: true,
                leaves_dirty,
                children,
            };
            splits = split_branch(&mut b, bs);
            check::split(&b, &splits);
            self.root = Some(Slot::Mem(Box::new(Node::Branch(b))));
            self.depth = level;
        }
    }

    /// Replay: the leaf with separator `sep` is now at `addr` (insert it into
    /// the leaf list if absent). Never reads the leaf itself.
    pub fn map_leaf(&mut self, dev: &dyn Device, sep: u64, addr: u64) -> Result<()> {
        self.edited();
        let bs = dev.block_size() as usize;
        let cx = self.ctx(dev);
        if self.depth == 0 {
            match &self.root {
                Some(_) if sep != 0 => {
                    let splits = vec![(sep, Node::Leaf(disk_leaf_placeholder()))];
                    self.grow(splits, bs, false);
                    // Replace the placeholder with the on-disk address.
                    return self.map_leaf(dev, sep, addr);
                }
                _ => {
                    self.root = Some(Slot::Disk(addr));
                    return Ok(());
                }
            }
        }
        let depth = self.depth;
        let Some(slot) = self.root.as_mut() else {
            return Ok(());
        };
        let (splits, _) = map_rec(load(slot, &cx, depth)?, &cx, bs, sep, addr)?;
        self.grow(splits, bs, false);
        Ok(())
    }

    /// Replay: the leaf with separator `sep` left the leaf list.
    pub fn unmap_leaf(&mut self, dev: &dyn Device, sep: u64) -> Result<()> {
        self.edited();
        let cx = self.ctx(dev);
        if self.depth == 0 {
            return Ok(());
        }
        let depth = self.depth;
        let Some(slot) = self.root.as_mut() else {
            return Ok(());
        };
        if let Unmapped::Empty = unmap_rec(load(slot, &cx, depth)?, &cx, sep, &mut self.retired)? {
            if let Some(old) = self.root.take() {
                if old.addr() != 0 {
                    self.retired.push(old.freed());
                }
            }
            self.depth = 0;
        }
        Ok(())
    }

    /// Delta commit: give every dirty leaf a new address from `alloc`
    /// (redirect) and encode it with `birth`, pushing (address, image) to
    /// `out` for the caller to write, old addresses (and births) to
    /// `self.freed`, and (sep, address) to `maps`.
    pub fn redirect_leaves(
        &mut self,
        bs: usize,
        birth: u32,
        alloc: &mut dyn FnMut() -> Result<u64>,
        out: &mut Vec<(u64, Vec<u8>)>,
        maps: &mut Vec<(u64, u64)>,
    ) -> Result<()> {
        let (owner, kind) = (self.id, self.kind);
        if let Some(Slot::Mem(n)) = self.root.as_mut() {
            let mut w = Redirect {
                bs,
                birth,
                owner,
                kind,
                alloc,
                out,
                freed: &mut self.freed,
            };
            w.leaves(n, 0, maps)?;
        }
        Ok(())
    }

    /// Unify: give every dirty branch a new address (children first) and
    /// encode it with `birth` into `out`, pushing old branch addresses (and
    /// births) to `freed`. Leaves must be clean.
    /// Sets and returns the new unified root.
    pub fn redirect_branches(
        &mut self,
        bs: usize,
        birth: u32,
        alloc: &mut dyn FnMut() -> Result<u64>,
        out: &mut Vec<(u64, Vec<u8>)>,
        freed: &mut Vec<FreedNode>,
    ) -> Result<Root> {
        freed.append(&mut self.retired);
        self.collapse_root(freed);
        if let Some(Slot::Mem(n)) = self.root.as_mut() {
            if let Node::Branch(b) = n.as_mut() {
                let mut w = Redirect {
                    bs,
                    birth,
                    owner: self.id,
                    kind: self.kind,
                    alloc,
                    out,
                    freed,
                };
                w.branches(b)?;
            }
        }
        let addr = self.root.as_ref().map_or(0, |s| s.addr());
        self.unified = Root {
            addr,
            depth: if addr == 0 { 0 } else { self.depth },
        };
        Ok(self.unified)
    }

    /// Unify: a root branch left with one child (removals took the
    /// others) gives way to that child, one level less, as often as that
    /// holds; the branch's block (if it had one) goes to `freed`. So a
    /// tree that shrank takes the blocks a tree grown only to its present
    /// size would. Only at a unify: the log's leaf records of the deltas
    /// after it name leaves by separator, whatever the depth above them.
    fn collapse_root(&mut self, freed: &mut Vec<FreedNode>) {
        while self.depth > 0 {
            let Some(Slot::Mem(n)) = self.root.as_mut() else {
                return;
            };
            let Node::Branch(b) = n.as_mut() else { return };
            if b.children.len() != 1 || b.leaves_dirty {
                return;
            }
            let Some(child) = b.children.pop() else { return };
            if b.addr != 0 {
                freed.push((b.addr, b.birth));
            }
            self.root = Some(child.slot);
            self.depth = self.depth.saturating_sub(1);
            self.edited();
        }
    }

    /// Nothing of the tree lives only in memory: the root the last unify
    /// recorded leads to all of it, and nothing waits to be freed or
    /// unmapped. Such a tree may be dropped and opened again from that
    /// root (the inode's record).
    pub fn is_settled(&self) -> bool {
        !self.needs_unify() && !self.has_dirty_leaves() && self.unmaps.is_empty() && self.freed.is_empty()
    }

    /// True if a unify has work in this tree: a leaf not yet written, or a
    /// branch changed since the last unify.
    pub fn needs_unify(&self) -> bool {
        fn rec(n: &Node) -> bool {
            match n {
                Node::Leaf(l) => l.dirty || l.addr == 0,
                Node::Branch(b) => {
                    b.dirty
                        || b.leaves_dirty
                        || b.children
                            .iter()
                            .any(|c| matches!(&c.slot, Slot::Mem(n) if rec(n)))
                }
            }
        }
        let root_moved = self.root.as_ref().map_or(0, |s| s.addr()) != self.unified.addr;
        root_moved
            || !self.retired.is_empty()
            || match &self.root {
                // A clean leaf without a block is held in the inode record.
                Some(Slot::Mem(n)) => match n.as_ref() {
                    Node::Leaf(l) => l.dirty,
                    n => rec(n),
                },
                _ => false,
            }
    }

    /// Nodes the next unify (and the delta commit it starts with) writes,
    /// each in a new block, counted over the nodes in memory
    /// (`redirect::unify_nodes`).
    pub fn unify_nodes(&self) -> u64 {
        match &self.root {
            Some(Slot::Mem(n)) => super::redirect::unify_nodes(n).1,
            _ => 0,
        }
    }

    /// True if the next delta commit has leaves to write.
    pub fn has_dirty_leaves(&self) -> bool {
        match &self.root {
            // A leaf never written is dirty, unless it is held in the
            // inode record (clean, address 0).
            Some(Slot::Mem(n)) => match n.as_ref() {
                Node::Leaf(l) => l.dirty,
                Node::Branch(b) => b.leaves_dirty,
            },
            _ => false,
        }
    }

    /// Visit every node (loading all of them): `f(address, level, sep, node)`.
    /// Used by fsck, dump and to free a dropped tree.
    pub fn visit(
        &mut self,
        dev: &dyn Device,
        f: &mut dyn FnMut(u64, u8, u64, &Node) -> Result<()>,
    ) -> Result<()> {
        let cx = self.ctx(dev);
        let depth = self.depth;
        if let Some(slot) = self.root.as_mut() {
            visit_rec(load(slot, &cx, depth)?, &cx, 0, f)?;
        }
        Ok(())
    }
}

fn disk_leaf_placeholder() -> Leaf {
    Leaf {
        addr: 0,
        birth: 0,
        dirty: false,
        entries: Vec::new(),
    }
}

/// Read and decode the node at `addr` (level `level`) of `owner`'s tree.
pub(super) fn read_node(dev: &dyn Device, addr: u64, owner: u64, kind: TreeKind, level: u8) -> Result<Node> {
    let count = dev.block_count();
    if addr < 2 || addr >= count {
        return Err(Error::corrupt(
            addr,
            format!("{} node address outside the volume", kind.name()),
        ));
    }
    let mut b = vec![0u8; dev.block_size() as usize];
    crate::device::read_named(dev, addr, &mut b)?;
    decode(&b, addr, owner, kind, level, count)
}

/// Turn a `Disk` slot into a loaded node and return it.
pub(super) fn load<'s>(slot: &'s mut Slot, cx: &Ctx, level: u8) -> Result<&'s mut Node> {
    if let Slot::Disk(addr) = *slot {
        *slot = Slot::Mem(Box::new(read_node(cx.dev, addr, cx.owner, cx.kind, level)?));
    }
    match slot {
        Slot::Mem(n) => Ok(n),
        Slot::Disk(a) => Err(Error::corrupt(*a, "node failed to load")),
    }
}
