//! Structures layer: looking a key up without reading the device while the
//! tree is held, for trees that many threads read under one short lock
//! (the inode table under the shared delta guard). A descent stops at the
//! first node on its way that is not loaded and names it (`Cached::Missing`);
//! the caller lets the tree go, reads and decodes the node
//! (`Missing::read`), takes the tree again and puts the node in place
//! (`Tree::install`), then descends again. A node another reader put in
//! place meanwhile stays; a slot that no longer waits for that address
//! (the tree changed) is left alone, and the next descent finds its way.
//!
//! Calls the device (only in `Missing::read`, with no lock held) and the
//! node decoder.

use super::node::{Node, Slot, TreeKind};
use super::tree::{child_level, read_node, Tree};
use crate::device::Device;
use crate::error::Result;

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
}

/// A node read and decoded away from its tree, to put in place.
pub struct Loaded {
    addr: u64,
    node: Node,
}

impl Missing {
    /// Read and decode the node (device I/O: hold no lock but the one that
    /// keeps the tree's shape, such as the shared delta guard).
    pub fn read(&self, dev: &dyn Device) -> Result<Loaded> {
        Ok(Loaded {
            addr: self.addr,
            node: read_node(dev, self.addr, self.owner, self.kind, self.level)?,
        })
    }
}

impl Tree {
    /// The value at `key` if every node on the way is loaded, else the
    /// first node that is not.
    pub fn get_cached(&self, key: u64) -> Cached {
        let missing = |addr, level| {
            Cached::Missing(Missing {
                addr,
                level,
                owner: self.id,
                kind: self.kind,
            })
        };
        let mut level = self.depth();
        let mut node = match self.root_slot() {
            None => return Cached::Done(None),
            Some(Slot::Disk(a)) => return missing(*a, level),
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
                    match b.children.get(b.child_index(key)).map(|c| &c.slot) {
                        // A branch without children routes nowhere.
                        None => return Cached::Done(None),
                        Some(Slot::Disk(a)) => return missing(*a, level),
                        Some(Slot::Mem(n)) => node = n,
                    }
                }
            }
        }
    }

    /// Put `loaded` in place on the way to `key`, if its slot still waits
    /// for that address; otherwise drop it.
    pub fn install(&mut self, key: u64, loaded: Loaded) {
        let mut slot = match self.root_slot_mut() {
            Some(s) => s,
            None => return,
        };
        loop {
            match slot {
                Slot::Disk(a) => {
                    if *a == loaded.addr {
                        *slot = Slot::Mem(Box::new(loaded.node));
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
