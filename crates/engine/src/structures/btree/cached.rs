//! Structures layer: looking a key up without reading the device while the
//! tree is held, for trees that many threads read under one short lock
//! (the inode table under the shared delta guard). A descent stops at the
//! first node on its way that is not loaded and names it (`Cached::Missing`);
//! the caller lets the tree go, reads and decodes the node
//! (`Missing::read`), takes the tree again and puts the node in place
//! (`Tree::install`), then descends again. A node another reader put in
//! place meanwhile stays; a slot that no longer waits for that address
//! (the tree changed) is left alone, and the next descent finds its way.
//! A missing leaf whose left sibling is loaded (a walk in key order) comes
//! with the sibling leaves after it that are not loaded either and lie in
//! the blocks right after its own (a commit writes a tree's dirty leaves
//! in order, side by side), up to [`READ_AHEAD`] in all, read in the same
//! device read: a walk through the inode table after a mount reads it in
//! runs instead of a block at a time, while lookups at random read one
//! leaf each (and leave no unused leaves behind).
//!
//! Calls the device (only in `Missing::read`, with no lock held) and the
//! node decoder.

use super::ahead::read_run;
use super::node::{Node, Slot, TreeKind};
use super::tree::{child_level, read_node, Tree};
use crate::device::Device;
use crate::error::Result;

/// Most leaves one read of a missing leaf brings in (it and the loaded-
/// nowhere siblings in the blocks after it).
pub const READ_AHEAD: usize = 16;

/// What a descent that reads nothing from the device found.
pub enum Cached {
    /// The value at the key with the address of its leaf (0 for a leaf
    /// never written), or `None`: no such key.
    Done(Option<(Vec<u8>, u64)>),
    /// A node on the way is only on disk.
    Missing(Missing),
}

/// A node to read before a descent can go on.
pub struct Missing {
    addr: u64,
    level: u8,
    owner: u64,
    kind: TreeKind,
    /// For a leaf: the seps of the siblings after it in the blocks after
    /// its own (`addr + 1`, `addr + 2`, ...), not loaded either.
    ahead: Vec<u64>,
}

/// A node read and decoded away from its tree, to put in place, and the
/// sibling leaves read with it (sep, address, leaf).
pub struct Loaded {
    addr: u64,
    node: Node,
    ahead: Vec<(u64, u64, Node)>,
}

impl Missing {
    /// Read and decode the node (device I/O: hold no lock but the one that
    /// keeps the tree's shape, such as the shared delta guard).
    pub fn read(&self, dev: &dyn Device) -> Result<Loaded> {
        let alone = || -> Result<Loaded> {
            Ok(Loaded {
                addr: self.addr,
                node: read_node(dev, self.addr, self.owner, self.kind, self.level)?,
                ahead: Vec::new(),
            })
        };
        if self.ahead.is_empty() {
            return alone();
        }
        // One read for the run (or the leaf alone, should that fail); the
        // leaf asked for must decode, a sibling that does not is left for
        // the descent that needs it to report.
        let n = self.ahead.len().saturating_add(1);
        let Some(nodes) = read_run(dev, self.addr, n, self.owner, self.kind, self.level) else {
            return alone();
        };
        let mut nodes = nodes.into_iter().zip(self.addr..);
        let Some((node, _)) = nodes.next() else {
            return alone();
        };
        let node = node?;
        let ahead = nodes
            .zip(&self.ahead)
            .filter_map(|((leaf, addr), &sep)| Some((sep, addr, leaf.ok()?)))
            .collect();
        Ok(Loaded {
            addr: self.addr,
            node,
            ahead,
        })
    }
}

impl Tree {
    /// The value at `key` if every node on the way is loaded, else the
    /// first node that is not.
    pub fn get_cached(&self, key: u64) -> Cached {
        let missing = |addr, level, ahead| {
            Cached::Missing(Missing {
                addr,
                level,
                owner: self.id,
                kind: self.kind,
                ahead,
            })
        };
        let mut level = self.depth();
        let mut node = match self.root_slot() {
            None => return Cached::Done(None),
            Some(Slot::Disk(a)) => return missing(*a, level, Vec::new()),
            Some(Slot::Mem(n)) => n,
        };
        loop {
            match node.as_ref() {
                Node::Leaf(l) => {
                    let hit = l.search(key).ok().and_then(|i| l.entries.get(i));
                    return Cached::Done(hit.map(|(_, v)| (v.clone(), l.addr)));
                }
                Node::Branch(b) => {
                    level = child_level(b);
                    let i = b.child_index(key);
                    match b.children.get(i).map(|c| &c.slot) {
                        // A branch without children routes nowhere.
                        None => return Cached::Done(None),
                        // A walk in key order: the leaf before it is
                        // loaded (a lookup at random reads only its leaf).
                        Some(Slot::Disk(a))
                            if level == 0
                                && i.checked_sub(1)
                                    .and_then(|p| b.children.get(p))
                                    .is_some_and(|c| matches!(c.slot, Slot::Mem(_))) =>
                        {
                            // Siblings in the blocks right after it.
                            let ahead = b
                                .children
                                .iter()
                                .skip(i.saturating_add(1))
                                .take(READ_AHEAD.saturating_sub(1))
                                .zip(1u64..)
                                .map_while(|(c, k)| match c.slot {
                                    Slot::Disk(s) if s == a.saturating_add(k) => Some(c.sep),
                                    _ => None,
                                })
                                .collect();
                            return missing(*a, level, ahead);
                        }
                        Some(Slot::Disk(a)) => return missing(*a, level, Vec::new()),
                        Some(Slot::Mem(n)) => node = n,
                    }
                }
            }
        }
    }

    /// Put `loaded` in place on the way to `key`, if its slot still waits
    /// for that address; otherwise drop it. The same for each sibling read
    /// with it, on the way to its sep.
    pub fn install(&mut self, key: u64, loaded: Loaded) {
        let Loaded { addr, node, ahead } = loaded;
        self.install_one(key, addr, node);
        for (sep, addr, node) in ahead {
            self.install_one(sep, addr, node);
        }
    }

    fn install_one(&mut self, key: u64, addr: u64, node: Node) {
        let mut slot = match self.root_slot_mut() {
            Some(s) => s,
            None => return,
        };
        loop {
            match slot {
                Slot::Disk(a) => {
                    if *a == addr {
                        *slot = Slot::Mem(Box::new(node));
                    }
                    return;
                }
                Slot::Mem(n) => match n.as_mut() {
                    Node::Leaf(_) => return,
                    Node::Branch(b) => {
                        let i = b.child_index(key);
                        match b.children.get_mut(i) {
                            Some(c) => slot = &mut c.slot,
                            None => return,
                        }
                    }
                },
            }
        }
    }
}
