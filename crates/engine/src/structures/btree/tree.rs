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
//! the same leaf. Leaf splits, leaf removal and replay all preserve T1.

use super::node::{
    branch_capacity, decode, Branch, Child, Leaf, Node, Slot, TreeKind, LEAF_ENTRY_OVERHEAD, NODE_HEADER,
};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::structures::superblock::Root;

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
    pub freed: Vec<u64>,
    /// Branch addresses of the unified image no longer in the tree; freed
    /// by the next unify (which stops referencing them).
    pub retired: Vec<u64>,
}

/// Read-only context for loading nodes.
struct Ctx<'a> {
    dev: &'a dyn Device,
    owner: u64,
    kind: TreeKind,
}

/// Pieces split off to the right of a node: (sep, node) pairs to insert
/// after it in its parent.
type Splits = Vec<(u64, Node)>;

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
        }
    }

    /// A new empty tree holding one empty, dirty leaf.
    pub fn new_empty(id: u64, kind: TreeKind) -> Tree {
        let mut t = Tree::open(id, kind, Root::default());
        t.root = Some(Slot::Mem(Box::new(Node::Leaf(Leaf {
            addr: 0,
            dirty: true,
            entries: Vec::new(),
        }))));
        t
    }

    /// Branch levels above the leaves in memory now.
    pub fn depth(&self) -> u8 {
        self.depth
    }

    /// Largest value this tree accepts for block size `bs`: two always fit in a leaf.
    pub fn max_value(bs: usize) -> usize {
        (bs - NODE_HEADER) / 2 - LEAF_ENTRY_OVERHEAD
    }

    fn ctx<'a>(&self, dev: &'a dyn Device) -> Ctx<'a> {
        Ctx {
            dev,
            owner: self.id,
            kind: self.kind,
        }
    }

    /// Value stored under `key`.
    pub fn get(&mut self, dev: &dyn Device, key: u64) -> Result<Option<Vec<u8>>> {
        let cx = self.ctx(dev);
        let depth = self.depth;
        match self.root.as_mut() {
            None => Ok(None),
            Some(slot) => get_rec(load(slot, &cx, depth)?, &cx, key),
        }
    }

    /// First entry with key >= `from`.
    pub fn next(&mut self, dev: &dyn Device, from: u64) -> Result<Option<(u64, Vec<u8>)>> {
        let cx = self.ctx(dev);
        let depth = self.depth;
        match self.root.as_mut() {
            None => Ok(None),
            Some(slot) => next_rec(load(slot, &cx, depth)?, &cx, from),
        }
    }

    /// Last entry with key <= `at`.
    pub fn prev(&mut self, dev: &dyn Device, at: u64) -> Result<Option<(u64, Vec<u8>)>> {
        let cx = self.ctx(dev);
        let depth = self.depth;
        match self.root.as_mut() {
            None => Ok(None),
            Some(slot) => prev_rec(load(slot, &cx, depth)?, &cx, at),
        }
    }

    /// Entries with keys in `from..to`, at most `max` of them.
    pub fn range(&mut self, dev: &dyn Device, from: u64, to: u64, max: usize) -> Result<Vec<(u64, Vec<u8>)>> {
        let mut out = Vec::new();
        let mut at = from;
        while out.len() < max && at < to {
            match self.next(dev, at)? {
                Some((k, v)) if k < to => {
                    out.push((k, v));
                    match k.checked_add(1) {
                        Some(n) => at = n,
                        None => break,
                    }
                }
                _ => break,
            }
        }
        Ok(out)
    }

    /// Insert or replace `key`. `value` must be at most [`Tree::max_value`].
    pub fn insert(&mut self, dev: &dyn Device, key: u64, value: Vec<u8>) -> Result<()> {
        let bs = dev.block_size() as usize;
        if value.len() > Tree::max_value(bs) {
            return Err(Error::Posix(crate::error::Errno::ENOSPC));
        }
        if self.root.is_none() {
            self.root = Some(Slot::Mem(Box::new(Node::Leaf(Leaf {
                addr: 0,
                dirty: true,
                entries: Vec::new(),
            }))));
            self.depth = 0;
        }
        let cx = self.ctx(dev);
        let depth = self.depth;
        let Some(slot) = self.root.as_mut() else {
            return Ok(());
        };
        let splits = insert_rec(load(slot, &cx, depth)?, &cx, bs, key, value)?;
        self.grow(splits, bs, true);
        Ok(())
    }

    /// Remove `key`, returning its value.
    pub fn remove(&mut self, dev: &dyn Device, key: u64) -> Result<Option<Vec<u8>>> {
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
        let (v, _) = remove_rec(node, &cx, key, &mut ev)?;
        Ok(v)
    }

    /// New root levels for pieces split off the root. `leaves_dirty`: the
    /// split came from a leaf change (not from replay).
    fn grow(&mut self, mut splits: Splits, bs: usize, leaves_dirty: bool) {
        while !splits.is_empty() {
            let Some(old) = self.root.take() else { return };
            let level = self.depth + 1;
            let mut children = vec![Child { sep: 0, slot: old }];
            for (sep, n) in splits.drain(..) {
                children.push(Child {
                    sep,
                    slot: Slot::Mem(Box::new(n)),
                });
            }
            let mut b = Branch {
                addr: 0,
                level,
                dirty: true,
                leaves_dirty,
                children,
            };
            splits = split_branch(&mut b, bs);
            self.root = Some(Slot::Mem(Box::new(Node::Branch(b))));
            self.depth = level;
        }
    }

    /// Replay: the leaf with separator `sep` is now at `addr` (insert it into
    /// the leaf list if absent). Never reads the leaf itself.
    pub fn map_leaf(&mut self, dev: &dyn Device, sep: u64, addr: u64) -> Result<()> {
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
                    self.retired.push(old.addr());
                }
            }
            self.depth = 0;
        }
        Ok(())
    }

    /// Delta commit: give every dirty leaf a new address from `alloc`
    /// (redirect) and encode it, pushing (address, image) to `out` for the
    /// caller to write, old addresses to `self.freed`, and (sep, address)
    /// to `maps`.
    pub fn redirect_leaves(
        &mut self,
        bs: usize,
        alloc: &mut dyn FnMut() -> Result<u64>,
        out: &mut Vec<(u64, Vec<u8>)>,
        maps: &mut Vec<(u64, u64)>,
    ) -> Result<()> {
        let (owner, kind) = (self.id, self.kind);
        if let Some(Slot::Mem(n)) = self.root.as_mut() {
            let mut w = LeafWriter {
                bs,
                owner,
                kind,
                alloc,
                out,
                maps,
                freed: &mut self.freed,
            };
            w.node(n, 0)?;
        }
        Ok(())
    }

    /// Unify: give every dirty branch a new address (children first) and
    /// encode it into `out`, pushing old branch addresses to `freed`.
    /// Leaves must be clean.
    /// Sets and returns the new unified root.
    pub fn redirect_branches(
        &mut self,
        bs: usize,
        alloc: &mut dyn FnMut() -> Result<u64>,
        out: &mut Vec<(u64, Vec<u8>)>,
        freed: &mut Vec<u64>,
    ) -> Result<Root> {
        freed.append(&mut self.retired);
        if let Some(Slot::Mem(n)) = self.root.as_mut() {
            if let Node::Branch(b) = n.as_mut() {
                write_branches(b, bs, self.id, self.kind, alloc, out, freed)?;
            }
        }
        let addr = self.root.as_ref().map_or(0, |s| s.addr());
        self.unified = Root {
            addr,
            depth: if addr == 0 { 0 } else { self.depth },
        };
        Ok(self.unified)
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
                Some(Slot::Mem(n)) => rec(n),
                _ => false,
            }
    }

    /// True if the next delta commit has leaves to write.
    pub fn has_dirty_leaves(&self) -> bool {
        match &self.root {
            Some(Slot::Mem(n)) => match n.as_ref() {
                Node::Leaf(l) => l.dirty || l.addr == 0,
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
        dirty: false,
        entries: Vec::new(),
    }
}

/// Turn a `Disk` slot into a loaded node and return it.
fn load<'s>(slot: &'s mut Slot, cx: &Ctx, level: u8) -> Result<&'s mut Node> {
    if let Slot::Disk(addr) = *slot {
        let count = cx.dev.block_count();
        if addr < 2 || addr >= count {
            return Err(Error::corrupt(
                addr,
                format!("{} node address outside the volume", cx.kind.name()),
            ));
        }
        let mut b = vec![0u8; cx.dev.block_size() as usize];
        cx.dev.read(addr, &mut b)?;
        *slot = Slot::Mem(Box::new(decode(&b, addr, cx.owner, cx.kind, level, count)?));
    }
    match slot {
        Slot::Mem(n) => Ok(n),
        Slot::Disk(a) => Err(Error::corrupt(*a, "node failed to load")),
    }
}

fn get_rec(node: &mut Node, cx: &Ctx, key: u64) -> Result<Option<Vec<u8>>> {
    match node {
        Node::Leaf(l) => Ok(l
            .entries
            .binary_search_by_key(&key, |(k, _)| *k)
            .ok()
            .map(|i| l.entries[i].1.clone())),
        Node::Branch(b) => {
            let i = b.child_index(key);
            let level = b.level - 1;
            get_rec(load(&mut b.children[i].slot, cx, level)?, cx, key)
        }
    }
}

fn next_rec(node: &mut Node, cx: &Ctx, from: u64) -> Result<Option<(u64, Vec<u8>)>> {
    match node {
        Node::Leaf(l) => {
            let i = l.lower_bound(from);
            Ok(l.entries.get(i).cloned())
        }
        Node::Branch(b) => {
            let level = b.level - 1;
            for i in b.child_index(from)..b.children.len() {
                let found = next_rec(load(&mut b.children[i].slot, cx, level)?, cx, from)?;
                if found.is_some() {
                    return Ok(found);
                }
            }
            Ok(None)
        }
    }
}

fn prev_rec(node: &mut Node, cx: &Ctx, at: u64) -> Result<Option<(u64, Vec<u8>)>> {
    match node {
        Node::Leaf(l) => {
            let i = l.entries.partition_point(|(k, _)| *k <= at);
            Ok(i.checked_sub(1).map(|i| l.entries[i].clone()))
        }
        Node::Branch(b) => {
            let level = b.level - 1;
            for i in (0..=b.child_index(at)).rev() {
                let found = prev_rec(load(&mut b.children[i].slot, cx, level)?, cx, at)?;
                if found.is_some() {
                    return Ok(found);
                }
            }
            Ok(None)
        }
    }
}

fn insert_rec(node: &mut Node, cx: &Ctx, bs: usize, key: u64, value: Vec<u8>) -> Result<Splits> {
    match node {
        Node::Leaf(l) => {
            match l.entries.binary_search_by_key(&key, |(k, _)| *k) {
                Ok(i) => l.entries[i].1 = value,
                Err(i) => l.entries.insert(i, (key, value)),
            }
            l.dirty = true;
            Ok(split_leaf(l, bs))
        }
        Node::Branch(b) => {
            let i = b.child_index(key);
            let level = b.level - 1;
            let splits = insert_rec(load(&mut b.children[i].slot, cx, level)?, cx, bs, key, value)?;
            b.leaves_dirty = true;
            if splits.is_empty() {
                return Ok(Vec::new());
            }
            b.dirty = true;
            for (n, (sep, node)) in splits.into_iter().enumerate() {
                b.children.insert(
                    i + 1 + n,
                    Child {
                        sep,
                        slot: Slot::Mem(Box::new(node)),
                    },
                );
            }
            Ok(split_branch(b, bs))
        }
    }
}

/// Split an overflowing leaf into pieces that each fit; returns the pieces
/// to the right of `l` with their seps (each a dirty, unwritten leaf).
fn split_leaf(l: &mut Leaf, bs: usize) -> Splits {
    let mut out: Splits = Vec::new();
    while l.size() > bs && l.entries.len() >= 2 {
        let total = l.size() - NODE_HEADER;
        let mut acc = 0;
        let mut cut = l.entries.len() - 1;
        for (i, (_, v)) in l.entries.iter().enumerate() {
            acc += LEAF_ENTRY_OVERHEAD + v.len();
            if acc * 2 >= total {
                cut = (i + 1).clamp(1, l.entries.len() - 1);
                break;
            }
        }
        let right = l.entries.split_off(cut);
        let sep = right[0].0;
        let mut r = Leaf {
            addr: 0,
            dirty: true,
            entries: right,
        };
        // Pieces split off `r` lie to its right.
        let more = split_leaf(&mut r, bs);
        out.insert(0, (sep, Node::Leaf(r)));
        let pos = 1;
        for (k, (s, n)) in more.into_iter().enumerate() {
            out.insert(pos + k, (s, n));
        }
    }
    out
}

/// Split an overflowing branch in halves; returns the right halves.
fn split_branch(b: &mut Branch, bs: usize) -> Splits {
    let cap = branch_capacity(bs);
    let mut out = Splits::new();
    if b.children.len() <= cap {
        return out;
    }
    let mut rest = b.children.split_off(b.children.len() / 2);
    while !rest.is_empty() {
        let tail = if rest.len() > cap {
            rest.split_off(cap)
        } else {
            Vec::new()
        };
        let sep = rest[0].sep;
        out.push((
            sep,
            Node::Branch(Branch {
                addr: 0,
                level: b.level,
                dirty: true,
                leaves_dirty: b.leaves_dirty,
                children: rest,
            }),
        ));
        rest = tail;
    }
    out
}

struct Events<'a> {
    unmaps: &'a mut Vec<u64>,
    freed: &'a mut Vec<u64>,
}

/// Remove `key`; returns the value and, if the first sep of `node` rose
/// (its first child was removed), the new first sep (invariant T1).
fn remove_rec(
    node: &mut Node,
    cx: &Ctx,
    key: u64,
    ev: &mut Events,
) -> Result<(Option<Vec<u8>>, Option<u64>)> {
    match node {
        Node::Leaf(l) => match l.entries.binary_search_by_key(&key, |(k, _)| *k) {
            Ok(i) => {
                l.dirty = true;
                Ok((Some(l.entries.remove(i).1), None))
            }
            Err(_) => Ok((None, None)),
        },
        Node::Branch(b) => {
            let i = b.child_index(key);
            let level = b.level - 1;
            let child = load(&mut b.children[i].slot, cx, level)?;
            let (v, first) = remove_rec(child, cx, key, ev)?;
            let empty_leaf = matches!(child, Node::Leaf(l) if l.entries.is_empty());
            if v.is_some() {
                b.leaves_dirty = true;
            }
            if let Some(sep) = first {
                b.children[i].sep = sep;
                b.dirty = true;
            }
            let mut removed = false;
            if empty_leaf && b.children.len() > 1 {
                let gone = b.children.remove(i);
                ev.unmaps.push(gone.sep);
                if gone.slot.addr() != 0 {
                    ev.freed.push(gone.slot.addr());
                }
                b.dirty = true;
                removed = true;
            }
            let first_changed = if i == 0 && (removed || first.is_some()) {
                Some(b.children[0].sep)
            } else {
                None
            };
            Ok((v, first_changed))
        }
    }
}

/// Replay insertion of a leaf address into the level-1 branch covering `sep`.
fn map_rec(node: &mut Node, cx: &Ctx, bs: usize, sep: u64, addr: u64) -> Result<(Splits, Option<u64>)> {
    let Node::Branch(b) = node else {
        return Err(Error::corrupt(node.addr(), "log maps a leaf below a leaf"));
    };
    b.dirty = true;
    let i = b.child_index(sep);
    if b.level == 1 {
        let pos = b.children.partition_point(|c| c.sep < sep);
        let mut first = None;
        if b.children.get(pos).is_some_and(|c| c.sep == sep) {
            b.children[pos].slot = Slot::Disk(addr);
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
        return Ok((split_branch(b, bs), first));
    }
    let level = b.level - 1;
    let (splits, first) = map_rec(load(&mut b.children[i].slot, cx, level)?, cx, bs, sep, addr)?;
    let mut up = None;
    if let Some(s) = first {
        b.children[i].sep = s;
        if i == 0 {
            up = Some(s);
        }
    }
    for (n, (s, node)) in splits.into_iter().enumerate() {
        b.children.insert(
            i + 1 + n,
            Child {
                sep: s,
                slot: Slot::Mem(Box::new(node)),
            },
        );
    }
    Ok((split_branch(b, bs), up))
}

/// What replay removal did to a node.
enum Unmapped {
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
fn unmap_rec(node: &mut Node, cx: &Ctx, sep: u64, retired: &mut Vec<u64>) -> Result<Unmapped> {
    let Node::Branch(b) = node else {
        return Ok(Unmapped::Same);
    };
    let i = b.child_index(sep);
    let result = if b.level == 1 {
        if b.children[i].sep != sep {
            return Ok(Unmapped::Same);
        }
        b.children.remove(i);
        Unmapped::Same
    } else {
        let level = b.level - 1;
        match unmap_rec(load(&mut b.children[i].slot, cx, level)?, cx, sep, retired)? {
            Unmapped::Same => return Ok(Unmapped::Same),
            Unmapped::FirstSep(s) => {
                b.children[i].sep = s;
                Unmapped::Same
            }
            Unmapped::Empty => {
                let gone = b.children.remove(i);
                if gone.slot.addr() != 0 {
                    retired.push(gone.slot.addr());
                }
                Unmapped::Same
            }
        }
    };
    b.dirty = true;
    if b.children.is_empty() {
        return Ok(Unmapped::Empty);
    }
    if i == 0 {
        return Ok(Unmapped::FirstSep(b.children[0].sep));
    }
    Ok(result)
}

struct LeafWriter<'a> {
    bs: usize,
    owner: u64,
    kind: TreeKind,
    alloc: &'a mut dyn FnMut() -> Result<u64>,
    out: &'a mut Vec<(u64, Vec<u8>)>,
    maps: &'a mut Vec<(u64, u64)>,
    freed: &'a mut Vec<u64>,
}

impl LeafWriter<'_> {
    /// Write dirty leaves under `node` (whose sep is `sep`); returns whether
    /// the node's own address changed.
    fn node(&mut self, node: &mut Node, sep: u64) -> Result<bool> {
        match node {
            Node::Leaf(l) => {
                if !l.dirty && l.addr != 0 {
                    return Ok(false);
                }
                let new = (self.alloc)()?;
                if l.addr != 0 {
                    self.freed.push(l.addr);
                }
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

/// Write `b` if it or any branch below it changed since the last unify;
/// returns whether `b` got a new address.
fn write_branches(
    b: &mut Branch,
    bs: usize,
    owner: u64,
    kind: TreeKind,
    alloc: &mut dyn FnMut() -> Result<u64>,
    out: &mut Vec<(u64, Vec<u8>)>,
    freed: &mut Vec<u64>,
) -> Result<bool> {
    debug_assert!(!b.leaves_dirty, "unify with dirty leaves");
    for c in b.children.iter_mut() {
        if let Slot::Mem(n) = &mut c.slot {
            if let Node::Branch(cb) = n.as_mut() {
                if write_branches(cb, bs, owner, kind, alloc, out, freed)? {
                    b.dirty = true;
                }
            }
        }
    }
    if !b.dirty && b.addr != 0 {
        return Ok(false);
    }
    let new = alloc()?;
    if b.addr != 0 {
        freed.push(b.addr);
    }
    out.push((new, b.encode(new, owner, kind, bs)));
    b.addr = new;
    b.dirty = false;
    Ok(true)
}

fn visit_rec(
    node: &mut Node,
    cx: &Ctx,
    sep: u64,
    f: &mut dyn FnMut(u64, u8, u64, &Node) -> Result<()>,
) -> Result<()> {
    let (addr, level) = match node {
        Node::Leaf(l) => (l.addr, 0),
        Node::Branch(b) => (b.addr, b.level),
    };
    f(addr, level, sep, node)?;
    if let Node::Branch(b) = node {
        let level = b.level - 1;
        for c in b.children.iter_mut() {
            let s = c.sep;
            visit_rec(load(&mut c.slot, cx, level)?, cx, s, f)?;
        }
    }
    Ok(())
}
