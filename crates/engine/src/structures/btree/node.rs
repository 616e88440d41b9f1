//! Structures layer: btree nodes in memory and on disk — leaves hold sorted
//! (key, value) pairs with variable-length values; branches hold sorted
//! (separator, child) pairs. Encoding and validating decoding live here; tree
//! algorithms live in `tree.rs`.
//!
//! ```text
//! leaf:   header(16) | owner u64 | kind u8 | level u8 = 0 | count u16 | birth u32
//!         | count x (key u64, len u16, value[len])
//! branch: header(16) | owner u64 | kind u8 | level u8 >= 1 | count u16 | birth u32
//!         | count x (separator u64, child address u64)
//! ```
//!
//! `birth` is the generation the node was written in (0 on a volume that
//! never had a snapshot): freeing a node whose birth a snapshot covers puts
//! it on the dead list instead (`backend/snapshot.rs`).

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
    /// The snapshot table and the dead list (`structures/snapshot.rs`).
    Snapshots = 4,
}

impl TreeKind {
    pub fn from_code(c: u8) -> Option<TreeKind> {
        match c {
            1 => Some(TreeKind::Itable),
            2 => Some(TreeKind::Extents),
            3 => Some(TreeKind::Dirents),
            4 => Some(TreeKind::Snapshots),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            TreeKind::Itable => "itable",
            TreeKind::Extents => "extent tree",
            TreeKind::Dirents => "directory",
            TreeKind::Snapshots => "snapshot table",
        }
    }
}

/// Where a child lives: only on disk, or loaded in memory.
pub enum Slot {
    Disk(u64),
    Mem(Box<Node>),
}

/// A node address no longer in the tree, and the generation it was
/// written in (0 if it was never loaded: the oldest birth, which only ever
/// keeps a block longer).
pub type FreedNode = (u64, u32);

impl Slot {
    /// The child's current on-disk address (0 if it was never written).
    pub fn addr(&self) -> u64 {
        match self {
            Slot::Disk(a) => *a,
            Slot::Mem(n) => n.addr(),
        }
    }

    /// The child's address and birth, as freed.
    pub fn freed(&self) -> FreedNode {
        match self {
            Slot::Disk(a) => (*a, 0),
            Slot::Mem(n) => (n.addr(), n.birth()),
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
    /// Generation it was written in (meaningless while `addr` is 0).
    pub birth: u32,
    /// Changed since last written: the next delta commit writes it anew.
    pub dirty: bool,
    pub entries: Vec<(u64, Vec<u8>)>,
}

pub struct Branch {
    /// On-disk address as of the last unify; 0 if created since.
    pub addr: u64,
    /// Generation it was written in (meaningless while `addr` is 0).
    pub birth: u32,
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
    pub fn birth(&self) -> u32 {
        match self {
            Node::Leaf(l) => l.birth,
            Node::Branch(b) => b.birth,
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
        partition(&self.entries, |e| e.0, key, |k| k < key)
    }

    /// `Ok(i)` if entry `i` has `key`, else `Err(i)` where it would go (as
    /// `binary_search`).
    pub fn search(&self, key: u64) -> std::result::Result<usize, usize> {
        let i = self.lower_bound(key);
        match self.entries.get(i) {
            Some(e) if e.0 == key => Ok(i),
            _ => Err(i),
        }
    }

    pub fn encode(&self, addr: u64, owner: u64, kind: TreeKind, block_size: usize) -> Vec<u8> {
        let mut w = begin(LEAF_MAGIC, addr, block_size);
        w.u64(owner);
        w.u8(kind as u8);
        w.u8(0);
        w.u16(self.entries.len() as u16);
        w.u32(self.birth);
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
        partition(&self.children, |c| c.sep, key, |s| s <= key).saturating_sub(1)
    }

    pub fn encode(&self, addr: u64, owner: u64, kind: TreeKind, block_size: usize) -> Vec<u8> {
        let mut w = begin(BRANCH_MAGIC, addr, block_size);
        w.u64(owner);
        w.u8(kind as u8);
        w.u8(self.level);
        w.u16(self.children.len() as u16);
        w.u32(self.birth);
        for c in &self.children {
            w.u64(c.sep);
            w.u64(c.slot.addr());
        }
        seal(w, block_size)
    }
}

/// Below this many keys a node is searched by bisection alone.
const INTERPOLATE_FROM: usize = 16;

/// The partition point of `v`, whose keys (`key_of`) strictly increase,
/// for `before` (`k < key` or `k <= key`): the index of the first element
/// not before. Keys in trees spread about evenly (name hashes, inode
/// numbers, logical blocks), so the search starts where `key` would be if
/// they were even and gallops out from there: one or two probes near the
/// guess instead of log2(n) across the node, each likely a cache miss on a
/// node of a large tree. Uneven keys cost at most twice a bisection.
fn partition<T>(v: &[T], key_of: impl Fn(&T) -> u64, key: u64, before: impl Fn(u64) -> bool) -> usize {
    let n = v.len();
    let is_before = |i: usize| v.get(i).is_some_and(|e| before(key_of(e)));
    let (Some(first), Some(last)) = (v.first().map(&key_of), v.last().map(&key_of)) else {
        return 0;
    };
    if n < INTERPOLATE_FROM {
        return v.partition_point(|e| before(key_of(e)));
    }
    if !before(first) {
        return 0;
    }
    if before(last) {
        return n;
    }
    // The first key is before, the last is not: the answer is in 1..n.
    // Guess off / span * top, in 64 bits: off and span scaled to below
    // 2^32 (top, an index in a node, is below 2^16).
    let span = last.saturating_sub(first);
    let off = key.saturating_sub(first).min(span);
    let scale = 32u32.saturating_sub(span.leading_zeros());
    let top = n.saturating_sub(1);
    let guess = ((off >> scale).saturating_mul(top as u64))
        .checked_div((span >> scale).max(1))
        .map_or(0, |g| (g as usize).min(top));
    // Bracket the answer: is_before(lo), !is_before(hi), lo < hi.
    let (lo, hi) = if is_before(guess) {
        let (mut lo, mut step) = (guess, 1usize);
        loop {
            let p = lo.saturating_add(step);
            if p >= top {
                break (lo, top);
            }
            if !is_before(p) {
                break (lo, p);
            }
            lo = p;
            step = step.saturating_mul(2);
        }
    } else {
        let (mut hi, mut step) = (guess, 1usize);
        loop {
            if hi <= step {
                break (0, hi);
            }
            let p = hi.saturating_sub(step);
            if is_before(p) {
                break (p, hi);
            }
            hi = p;
            step = step.saturating_mul(2);
        }
    };
    let from = lo.saturating_add(1);
    from.saturating_add(
        v.get(from..hi)
            .map_or(0, |s| s.partition_point(|e| before(key_of(e)))),
    )
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
    let birth = r.u32("birth")?;
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
            birth,
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
            birth,
            level,
            dirty: false,
            leaves_dirty: false,
            children,
        }))
    }
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects, clippy::indexing_slicing)]
mod tests {
    use super::partition;
    use proptest::prelude::*;

    /// Sorted distinct keys: even, clustered, or spread exponentially.
    fn keys() -> impl Strategy<Value = Vec<u64>> {
        let key = prop_oneof![
            any::<u64>(),
            0u64..2000,
            (0u32..64, 0u64..4).prop_map(|(s, d)| (1u64 << s).saturating_add(d)),
            Just(u64::MAX),
            Just(0),
        ];
        proptest::collection::btree_set(key, 0..400).prop_map(|s| s.into_iter().collect())
    }

    proptest! {
        #[test]
        fn partition_agrees_with_bisection(keys in keys(), pick in any::<usize>(), delta in -2i64..3, any_key in any::<u64>(), exact in any::<bool>()) {
            let key = if exact && !keys.is_empty() {
                keys[pick % keys.len()].saturating_add_signed(delta)
            } else {
                any_key
            };
            let v: Vec<(u64, ())> = keys.iter().map(|&k| (k, ())).collect();
            prop_assert_eq!(partition(&v, |e| e.0, key, |k| k < key), v.partition_point(|e| e.0 < key));
            prop_assert_eq!(partition(&v, |e| e.0, key, |k| k <= key), v.partition_point(|e| e.0 <= key));
        }
    }
}
