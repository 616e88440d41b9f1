//! Structures layer: btree nodes in memory and on disk — leaves hold sorted
//! (key, value) pairs with variable-length values; branches hold sorted
//! (separator, child) pairs. Encoding and validating decoding live here; tree
//! algorithms live in `tree.rs`.
//!
//! ```text
//! leaf:   header(16) | owner u64 | kind u8 | level u8 = 0 | count u16 | 0 u32
//!         | count x (key u64, len u16, value[len])
//! branch: header(16) | owner u64 | kind u8 | level u8 >= 1 | count u16 | 0 u32
//!         | count x (separator u64, child address u64)
//! ```

use crate::codec::{begin, seal, verify, Reader};
use crate::error::{Error, Result};

/// Magic of a leaf block ("T3LF").
pub const LEAF_MAGIC: u32 = u32::from_le_bytes(*b"T3LF");
/// Magic of a branch block ("T3BR").
pub const BRANCH_MAGIC: u32 = u32::from_le_bytes(*b"T3BR");
/// Bytes of a node header.
pub const NODE_HEADER: usize = 32;
/// Per-entry overhead in a leaf: key and length.
pub const LEAF_ENTRY_OVERHEAD: usize = 10;
/// Bytes per branch entry.
pub const BRANCH_ENTRY: usize = 16;

/// Which kind of tree a node belongs to (stored in every node).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum TreeKind {
    /// The inode table: key = inode number, value = inode attributes.
    Itable = 1,
    /// A file's data map: key = logical block, value = extent.
    Extents = 2,
    /// A directory: key = hash position, value = directory entry.
    Dirents = 3,
}

impl TreeKind {
    pub fn from_code(c: u8) -> Option<TreeKind> {
        match c {
            1 => Some(TreeKind::Itable),
            2 => Some(TreeKind::Extents),
            3 => Some(TreeKind::Dirents),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            TreeKind::Itable => "itable",
            TreeKind::Extents => "extent tree",
            TreeKind::Dirents => "directory",
        }
    }
}

/// Where a child lives: only on disk, or loaded in memory.
pub enum Slot {
    Disk(u64),
    Mem(Box<Node>),
}

impl Slot {
    /// The child's current on-disk address (0 if it was never written).
    pub fn addr(&self) -> u64 {
        match self {
            Slot::Disk(a) => *a,
            Slot::Mem(n) => n.addr(),
        }
    }
}

/// One branch entry: children cover keys from `sep` up to the next sibling's.
pub struct Child {
    pub sep: u64,
    pub slot: Slot,
}

pub struct Leaf {
    /// Current on-disk address; 0 if never written.
    pub addr: u64,
    /// Changed since last written: the next delta commit writes it anew.
    pub dirty: bool,
    pub entries: Vec<(u64, Vec<u8>)>,
}

pub struct Branch {
    /// On-disk address as of the last unify; 0 if created since.
    pub addr: u64,
    /// 1: children are leaves.
    pub level: u8,
    /// Changed since the last unify: the next unify writes it anew.
    pub dirty: bool,
    /// Some leaf below is dirty.
    pub leaves_dirty: bool,
    pub children: Vec<Child>,
}

pub enum Node {
    Leaf(Leaf),
    Branch(Branch),
}

impl Node {
    pub fn addr(&self) -> u64 {
        match self {
            Node::Leaf(l) => l.addr,
            Node::Branch(b) => b.addr,
        }
    }
}

impl Leaf {
    /// Encoded size in bytes.
    pub fn size(&self) -> usize {
        self.entries.iter().fold(NODE_HEADER, |n, (_, v)| {
            n.saturating_add(LEAF_ENTRY_OVERHEAD).saturating_add(v.len())
        })
    }

    /// Index of the first entry with key >= `key`.
    pub fn lower_bound(&self, key: u64) -> usize {
        self.entries.partition_point(|(k, _)| *k < key)
    }

    pub fn encode(&self, addr: u64, owner: u64, kind: TreeKind, block_size: usize) -> Vec<u8> {
        let mut w = begin(LEAF_MAGIC, addr, block_size);
        w.u64(owner);
        w.u8(kind as u8);
        w.u8(0);
        w.u16(self.entries.len() as u16);
        w.u32(0);
        for (k, v) in &self.entries {
            w.u64(*k);
            w.u16(v.len() as u16);
            w.bytes(v);
        }
        seal(w, block_size)
    }
}

impl Branch {
    /// Index of the child covering `key`: the last with sep <= key, else 0.
    pub fn child_index(&self, key: u64) -> usize {
        self.children.partition_point(|c| c.sep <= key).saturating_sub(1)
    }

    pub fn encode(&self, addr: u64, owner: u64, kind: TreeKind, block_size: usize) -> Vec<u8> {
        let mut w = begin(BRANCH_MAGIC, addr, block_size);
        w.u64(owner);
        w.u8(kind as u8);
        w.u8(self.level);
        w.u16(self.children.len() as u16);
        w.u32(0);
        for c in &self.children {
            w.u64(c.sep);
            w.u64(c.slot.addr());
        }
        seal(w, block_size)
    }
}

/// Most entries a branch of this block size holds.
pub fn branch_capacity(block_size: usize) -> usize {
    block_size.saturating_sub(NODE_HEADER) / BRANCH_ENTRY
}

/// Decode and validate a node read from `addr`. `level` is the level the
/// parent expects (0 = leaf); `block_count` bounds child addresses.
pub fn decode(b: &[u8], addr: u64, owner: u64, kind: TreeKind, level: u8, block_count: u64) -> Result<Node> {
    let what = kind.name();
    if level > crate::codec::MAX_DEPTH {
        return Err(Error::corrupt(
            addr,
            format!("{what} node: level {level} is deeper than a tree goes"),
        ));
    }
    let magic = if level == 0 { LEAF_MAGIC } else { BRANCH_MAGIC };
    let node_kind = if level == 0 { "leaf" } else { "branch" };
    verify(b, addr, magic, &format!("{what} {node_kind}"))?;
    let mut r = Reader::at(b, 16, addr);
    let got_owner = r.u64("owner")?;
    if got_owner != owner {
        return Err(Error::corrupt(
            addr,
            format!("{what} {node_kind}: belongs to tree {got_owner}, expected {owner}"),
        ));
    }
    let got_kind = r.u8("tree kind")?;
    if got_kind != kind as u8 {
        return Err(Error::corrupt(
            addr,
            format!(
                "{what} {node_kind}: tree kind {got_kind}, expected {}",
                kind as u8
            ),
        ));
    }
    let got_level = r.u8("level")?;
    if got_level != level {
        return Err(Error::corrupt(
            addr,
            format!("{what} {node_kind}: level {got_level}, expected {level}"),
        ));
    }
    let count = r.u16("entry count")? as usize;
    r.u32("reserved")?;
    if level == 0 {
        let mut entries: Vec<(u64, Vec<u8>)> = Vec::with_capacity(count);
        for i in 0..count {
            let k = r.u64("entry key")?;
            let len = r.u16("entry length")? as usize;
            let v = r.bytes(len, "entry value")?;
            // Writers keep two values in a leaf (Tree::max_value).
            let max = (b.len().saturating_sub(NODE_HEADER) / 2).saturating_sub(LEAF_ENTRY_OVERHEAD);
            if len > max {
                return Err(r.bad(format!(
                    "{what} leaf: entry {i} value of {len} bytes, at most {max}"
                )));
            }
            if let Some((prev, _)) = entries.last() {
                if *prev >= k {
                    return Err(r.bad(format!("{what} leaf: entry {i} key {k} not above {prev}")));
                }
            }
            entries.push((k, v.to_vec()));
        }
        Ok(Node::Leaf(Leaf {
            addr,
            dirty: false,
            entries,
        }))
    } else {
        if count == 0 || count > branch_capacity(b.len()) {
            return Err(r.bad(format!("{what} branch: {count} children")));
        }
        let mut children: Vec<Child> = Vec::with_capacity(count);
        for i in 0..count {
            let sep = r.u64("separator")?;
            let child = r.u64("child address")?;
            if child < 2 || child >= block_count {
                return Err(r.bad(format!(
                    "{what} branch: child {i} address {child} outside the volume"
                )));
            }
            if let Some(prev) = children.last() {
                if prev.sep >= sep {
                    return Err(r.bad(format!(
                        "{what} branch: separator {i} ({sep}) not above {}",
                        prev.sep
                    )));
                }
            }
            children.push(Child {
                sep,
                slot: Slot::Disk(child),
            });
        }
        Ok(Node::Branch(Branch {
            addr,
            level,
            dirty: false,
            leaves_dirty: false,
            children,
        }))
    }
}
