//! Structures layer: the recursive steps under a tree's root — an insert
//! that splits leaves and branches on its way back up, a remove that
//! merges or drops what it empties, and a walk over every loaded node —
//! for the `Tree` methods in `tree.rs`, which own the root and the leaf
//! list's pending changes.
//!
//! Calls the node codec and loader (`node.rs`, `tree.rs`) and the search
//! routes (`search.rs`).

use super::check;
use super::node::{
    branch_capacity, Branch, Child, FreedNode, Leaf, Node, Slot, LEAF_ENTRY_OVERHEAD, NODE_HEADER,
};
use super::search::Route;
use super::tree::{child_level, child_mut, load, Ctx, Splits};
use crate::error::Result;

pub(super) fn insert_rec(
    node: &mut Node,
    cx: &Ctx,
    bs: usize,
    route: Route,
    value: Vec<u8>,
) -> Result<Splits> {
    match node {
        Node::Leaf(l) => {
            match route.find(l) {
                Ok(i) => {
                    if let Some(e) = l.entries.get_mut(i) {
                        e.1 = value;
                    }
                }
                Err(i) => l.entries.insert(i, (route.key, value)),
            }
            l.dirty = true;
            Ok(split_leaf(l, bs))
        }
        Node::Branch(b) => {
            let (i, below) = route.child(b);
            let level = child_level(b);
            let splits = insert_rec(load(&mut child_mut(b, i)?.slot, cx, level)?, cx, bs, below, value)?;
            b.leaves_dirty = true;
            if splits.is_empty() {
                return Ok(Vec::new());
            }
            b.dirty = true;
            insert_after(b, i, splits);
            let pieces = split_branch(b, bs);
            check::split(b, &pieces);
            Ok(pieces)
        }
    }
}

/// Insert split-off pieces as children of `b` right after child `i`.
pub(super) fn insert_after(b: &mut Branch, i: usize, splits: Splits) {
    let at = i.saturating_add(1).min(b.children.len());
    let pieces = splits.into_iter().map(|(sep, node)| Child {
        sep,
        slot: Slot::Mem(Box::new(node)),
    });
    b.children.splice(at..at, pieces);
}

/// Split an overflowing leaf into pieces that each fit; returns the pieces
/// to the right of `l` with their seps (each a dirty, unwritten leaf).
#[allow(clippy::arithmetic_side_effects)] // why: sizes of entries held in memory, each value at most a block; the loop runs only with two or more entries
pub(super) fn split_leaf(l: &mut Leaf, bs: usize) -> Splits {
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
        let sep = right.first().map_or(0, |e| e.0);
        let mut r = Leaf {
            addr: 0,
            birth: 0,
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

/// Split an overflowing branch in halves; returns the right halves. A
/// branch of more than twice its capacity (many leaves added at once,
/// `bulk.rs`) keeps a full branch's worth and gives the rest in full ones.
pub(super) fn split_branch(b: &mut Branch, bs: usize) -> Splits {
    let cap = branch_capacity(bs);
    let mut out = Splits::new();
    if b.children.len() <= cap {
        return out;
    }
    let half = (b.children.len() / 2).min(cap);
    let mut rest = b.children.split_off(half);
    while !rest.is_empty() {
        let tail = if rest.len() > cap {
            rest.split_off(cap)
        } else {
            Vec::new()
        };
        let sep = rest.first().map_or(0, |c| c.sep);
        out.push((
            sep,
            Node::Branch(Branch {
                addr: 0,
                birth: 0,
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

pub(super) struct Events<'a> {
    pub(super) unmaps: &'a mut Vec<u64>,
    pub(super) freed: &'a mut Vec<FreedNode>,
}

/// Remove `key`; returns the value and, if the first sep of `node` rose
/// (its first child was removed), the new first sep (invariant T1).
/// `leftmost`: `node` is on the tree's left edge. The first leaf there
/// takes every key below the next separator, so it stays even when empty:
/// removing it would leave its right neighbour taking keys below its own
/// separator, and a split there could give two leaves one separator.
pub(super) fn remove_rec(
    node: &mut Node,
    cx: &Ctx,
    route: Route,
    ev: &mut Events,
    leftmost: bool,
) -> Result<(Option<Vec<u8>>, Option<u64>)> {
    match node {
        Node::Leaf(l) => match route.find(l) {
            Ok(i) => {
                l.dirty = true;
                Ok((Some(l.entries.remove(i).1), None))
            }
            Err(_) => Ok((None, None)),
        },
        Node::Branch(b) => {
            let (i, below) = route.child(b);
            let level = child_level(b);
            let c = child_mut(b, i)?;
            let child = load(&mut c.slot, cx, level)?;
            let (v, first) = remove_rec(child, cx, below, ev, leftmost && i == 0)?;
            let empty_leaf = matches!(child, Node::Leaf(l) if l.entries.is_empty());
            if let Some(sep) = first {
                c.sep = sep;
                b.dirty = true;
            }
            if v.is_some() {
                b.leaves_dirty = true;
            }
            let mut removed = false;
            if empty_leaf && b.children.len() > 1 && i < b.children.len() && !(leftmost && i == 0) {
                unlist(b, i, ev);
                b.dirty = true;
                removed = true;
            }
            let merged =
                !removed && v.is_some() && level == 0 && merge_leaves(b, i, cx.dev.block_size() as usize, ev);
            if merged {
                b.dirty = true;
            }
            let first_changed = if i == 0 && (removed || first.is_some()) {
                b.children.first().map(|c| c.sep)
            } else {
                None
            };
            if removed || merged || first.is_some() {
                check::branch(b);
            }
            debug_assert!(
                !leftmost || first_changed.is_none(),
                "T1: the first separator of the tree's left edge rose"
            );
            Ok((v, first_changed))
        }
    }
}

/// The size of child `i` of `b` if it is a leaf in memory.
fn leaf_size(b: &Branch, i: usize) -> Option<usize> {
    match &b.children.get(i)?.slot {
        Slot::Mem(n) => match n.as_ref() {
            Node::Leaf(l) => Some(l.size()),
            Node::Branch(_) => None,
        },
        Slot::Disk(_) => None,
    }
}

/// After a removal from leaf `i` of `b` (whose children are leaves): when
/// that leaf holds less than half a block, and it and a neighbour loaded in
/// memory fit together in seven eighths of one (room left for an insert or
/// two before a split), the right one's entries move into the left one and
/// the right one leaves the leaf list as an emptied leaf does (unmapped,
/// its block freed). Keys from the right one's separator on then route to
/// the left one, whose separator stays: invariant T1 holds, child 0 never
/// goes, and nothing is read from the device. Without it, deletes leave
/// leaves half-empty for good (an aged inode table held half the records a
/// leaf of a fresh one does). Returns whether it merged.
fn merge_leaves(b: &mut Branch, i: usize, bs: usize, ev: &mut Events) -> bool {
    let Some(size) = leaf_size(b, i) else {
        return false;
    };
    if size >= bs / 2 {
        return false;
    }
    let limit = (bs / 8).saturating_mul(7);
    let fits = |n: usize| {
        leaf_size(b, n).is_some_and(|c| size.saturating_add(c).saturating_sub(NODE_HEADER) <= limit)
    };
    let pair = match i.checked_sub(1) {
        Some(l) if fits(l) => (l, i),
        _ if fits(i.saturating_add(1)) => (i, i.saturating_add(1)),
        _ => return false,
    };
    let (lefts, rights) = b.children.split_at_mut(pair.1);
    let (Some(l), Some(r)) = (lefts.last_mut(), rights.first_mut()) else {
        return false;
    };
    let (Slot::Mem(ln), Slot::Mem(rn)) = (&mut l.slot, &mut r.slot) else {
        return false;
    };
    let (Node::Leaf(left), Node::Leaf(right)) = (ln.as_mut(), rn.as_mut()) else {
        return false;
    };
    left.entries.append(&mut right.entries);
    left.dirty = true;
    unlist(b, pair.1, ev);
    true
}

/// Take child `i` out of `b` and out of the leaf list: its separator is
/// unmapped and its block, if it had one, freed.
fn unlist(b: &mut Branch, i: usize, ev: &mut Events) {
    let gone = b.children.remove(i);
    ev.unmaps.push(gone.sep);
    if gone.slot.addr() != 0 {
        ev.freed.push(gone.slot.freed());
    }
}

pub(super) fn visit_rec(
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
        let level = child_level(b);
        for c in b.children.iter_mut() {
            let s = c.sep;
            visit_rec(load(&mut c.slot, cx, level)?, cx, s, f)?;
        }
    }
    Ok(())
}
