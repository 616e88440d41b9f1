//! Read-only descents of the btree: the entry at a key, the next entry at
//! or after a key, the last entry at or before one, each with the address
//! of the leaf that holds it; and the probe of a key range — one descent,
//! then the range's entries in key order, each value borrowed from its leaf
//! — which also finds the range's lowest free key and where it goes (a
//! `Spot`, which an insert can follow instead of searching again). Loads
//! nodes through `tree::load`.

use super::node::{Branch, Leaf, Node};
use super::tree::{child_level, child_mut, load, Ctx, Found};
use crate::error::Result;

pub(super) fn get_rec(node: &mut Node, cx: &Ctx, key: u64) -> Result<Option<(Vec<u8>, u64)>> {
    match node {
        Node::Leaf(l) => Ok(l
            .search(key)
            .ok()
            .and_then(|i| l.entries.get(i))
            .map(|(_, v)| (v.clone(), l.addr))),
        Node::Branch(b) => {
            let i = b.child_index(key);
            let level = child_level(b);
            get_rec(load(&mut child_mut(b, i)?.slot, cx, level)?, cx, key)
        }
    }
}

fn found(l: &Leaf, i: usize) -> Option<Found> {
    l.entries.get(i).map(|(k, v)| Found {
        key: *k,
        value: v.clone(),
        leaf: l.addr,
    })
}

pub(super) fn next_rec(node: &mut Node, cx: &Ctx, from: u64) -> Result<Option<Found>> {
    match node {
        Node::Leaf(l) => Ok(found(l, l.lower_bound(from))),
        Node::Branch(b) => {
            let level = child_level(b);
            let first = b.child_index(from);
            for c in b.children.iter_mut().skip(first) {
                let found = next_rec(load(&mut c.slot, cx, level)?, cx, from)?;
                if found.is_some() {
                    return Ok(found);
                }
            }
            Ok(None)
        }
    }
}

pub(super) fn prev_rec(node: &mut Node, cx: &Ctx, at: u64) -> Result<Option<Found>> {
    match node {
        Node::Leaf(l) => {
            // The first entry above `at`, less one.
            let i = match at.checked_add(1) {
                Some(a) => l.lower_bound(a),
                None => l.entries.len(),
            };
            Ok(i.checked_sub(1).and_then(|i| found(l, i)))
        }
        Node::Branch(b) => {
            let level = child_level(b);
            let last = b.child_index(at).saturating_add(1);
            for c in b.children.iter_mut().take(last).rev() {
                let found = prev_rec(load(&mut c.slot, cx, level)?, cx, at)?;
                if found.is_some() {
                    return Ok(found);
                }
            }
            Ok(None)
        }
    }
}

/// Branch levels a [`Spot`] records; deeper trees are routed by key.
const PATH_LEVELS: usize = crate::codec::MAX_DEPTH as usize;

/// Identifies one state of a tree's entries and shape: the tree's epoch
/// (unique per `Tree` made) and its count of edits. Any insert, removal or
/// replayed leaf-list change gives the tree a new stamp; loading nodes and
/// redirecting them (new addresses, same entries) do not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Stamp {
    pub(super) epoch: u64,
    pub(super) edits: u64,
}

/// A place in a tree as it was at one state: `key` (of an entry, or one not
/// present) and the way to it — the child taken at each branch level from
/// the root down and the index in the leaf. `Tree::holds` tells whether the
/// tree is still in that state; `Tree::insert_at` and `Tree::remove_at`
/// follow the way instead of searching, checking each step (a way that no
/// longer routes `key` is abandoned for an ordinary search, so a stale spot
/// costs a search, never a misplaced entry).
#[derive(Debug, Clone)]
pub struct Spot {
    pub key: u64,
    pub(super) stamp: Stamp,
    pub(super) path: [u16; PATH_LEVELS],
    /// Branch levels recorded in `path`; `None` if the tree was deeper.
    pub(super) levels: Option<u8>,
    /// Index in the leaf: of the entry, or where `key` would go.
    pub(super) index: usize,
}

impl Spot {
    /// A spot with no way recorded: routed by `key` alone.
    pub(super) fn bare(key: u64, stamp: Stamp) -> Spot {
        Spot {
            key,
            stamp,
            path: [0; PATH_LEVELS],
            levels: None,
            index: 0,
        }
    }

    /// The way to follow, as a route.
    pub(super) fn route(&self) -> Route<'_> {
        match self.levels {
            Some(n) => Route {
                key: self.key,
                path: self.path.get(..n as usize).unwrap_or(&[]),
                index: Some(self.index),
            },
            None => Route::key(self.key),
        }
    }
}

/// How an edit finds its leaf: by `key`, following `path` (child indexes
/// from this node down) and then `index` in the leaf while they route `key`.
#[derive(Clone, Copy)]
pub(super) struct Route<'a> {
    pub(super) key: u64,
    path: &'a [u16],
    index: Option<usize>,
}

impl<'a> Route<'a> {
    /// Search by key alone.
    pub(super) fn key(key: u64) -> Route<'a> {
        Route {
            key,
            path: &[],
            index: None,
        }
    }

    /// The child of `b` to descend into, and the route below it.
    pub(super) fn child(self, b: &Branch) -> (usize, Route<'a>) {
        if let Some((&i, rest)) = self.path.split_first() {
            let i = i as usize;
            if routes(b, i, self.key) {
                return (
                    i,
                    Route {
                        key: self.key,
                        path: rest,
                        index: self.index,
                    },
                );
            }
        }
        (b.child_index(self.key), Route::key(self.key))
    }

    /// In leaf `l`: `Ok(i)` if entry `i` has the key, else `Err(i)` where
    /// it would go (as `binary_search`).
    pub(super) fn find(self, l: &Leaf) -> std::result::Result<usize, usize> {
        let key = self.key;
        if self.path.is_empty() {
            if let Some(i) = self.index {
                let below = i
                    .checked_sub(1)
                    .and_then(|p| l.entries.get(p))
                    .is_none_or(|e| e.0 < key);
                match l.entries.get(i) {
                    Some(e) if below && e.0 == key => return Ok(i),
                    Some(e) if below && e.0 > key => return Err(i),
                    None if below && i == l.entries.len() => return Err(i),
                    _ => {}
                }
            }
        }
        l.search(key)
    }
}

/// Whether child `i` of `b` is the one `key` routes to (`child_index`).
fn routes(b: &Branch, i: usize, key: u64) -> bool {
    let Some(c) = b.children.get(i) else {
        return false;
    };
    (i == 0 || c.sep <= key) && b.children.get(i.saturating_add(1)).is_none_or(|n| key < n.sep)
}

/// What [`crate::structures::btree::Tree::probe`] found among the keys of a range.
#[derive(Debug)]
pub enum Probe<T> {
    /// The visitor accepted the entry at `spot.key` and made `T` of it.
    Found(T, Spot),
    /// No entry accepted; `spot.key` is the lowest key of the range that
    /// holds no entry, and `spot` the place it goes.
    Free(Spot),
    /// No entry accepted, and every key of the range holds one.
    Full,
}

/// A probe's visitor: (key, value, leaf address) of each entry in key
/// order; `Some` ends the walk.
pub(super) type Visit<'v, T> = dyn FnMut(u64, &[u8], u64) -> Result<Option<T>> + 'v;

/// State of a probe of keys `from..to`.
pub(super) struct Prober<'v, T> {
    from: u64,
    to: u64,
    stamp: Stamp,
    visit: &'v mut Visit<'v, T>,
    /// Keys `from..free` all hold entries (while no gap is found).
    free: u64,
    /// The place of the lowest key of the range holding no entry.
    gap: Option<Spot>,
    found: Option<(T, Spot)>,
    /// Child indexes from the root to the current node.
    path: [u16; PATH_LEVELS],
    /// Whether `path` holds the whole way (the tree is no deeper than it).
    whole: bool,
}

impl<'v, T> Prober<'v, T> {
    pub(super) fn new(from: u64, to: u64, stamp: Stamp, visit: &'v mut Visit<'v, T>) -> Prober<'v, T> {
        Prober {
            from,
            to,
            stamp,
            visit,
            free: from,
            gap: None,
            found: None,
            path: [0; PATH_LEVELS],
            whole: true,
        }
    }

    fn spot(&self, key: u64, level: usize, index: usize) -> Spot {
        Spot {
            key,
            stamp: self.stamp,
            path: self.path,
            levels: (self.whole && level <= PATH_LEVELS).then_some(level as u8),
            index,
        }
    }

    /// The outcome once the walk is over.
    pub(super) fn result(self) -> Probe<T> {
        match (self.found, self.gap) {
            (Some((t, s)), _) => Probe::Found(t, s),
            (None, Some(s)) => Probe::Free(s),
            (None, None) if self.free < self.to => Probe::Free(Spot::bare(self.free, self.stamp)),
            (None, None) => Probe::Full,
        }
    }
}

/// Walk the entries of `node` with keys in `p.from..p.to`, in key order.
/// `level` is the node's depth from the root; keys routed to it lie below
/// `hi` (`None`: no bound). Returns false once the walk is over (an entry
/// accepted, or the range passed).
pub(super) fn probe_rec<T>(
    node: &mut Node,
    cx: &Ctx,
    p: &mut Prober<'_, T>,
    level: usize,
    hi: Option<u64>,
) -> Result<bool> {
    match node {
        Node::Leaf(l) => {
            let start = l.lower_bound(p.from);
            for (i, (k, v)) in l.entries.iter().enumerate().skip(start) {
                let k = *k;
                if k >= p.to {
                    if p.gap.is_none() && p.free < p.to {
                        p.gap = Some(p.spot(p.free, level, i));
                    }
                    return Ok(false);
                }
                if p.gap.is_none() {
                    if k == p.free {
                        // Below `to`, so no overflow.
                        p.free = k.saturating_add(1);
                    } else {
                        p.gap = Some(p.spot(p.free, level, i));
                    }
                }
                if let Some(t) = (p.visit)(k, v, l.addr)? {
                    p.found = Some((t, p.spot(k, level, i)));
                    return Ok(false);
                }
            }
            // Keys from `hi` on live in later leaves: a free key below it
            // goes at the end of this one.
            if p.gap.is_none() && p.free < p.to && hi.is_none_or(|h| p.free < h) {
                p.gap = Some(p.spot(p.free, level, l.entries.len()));
            }
            Ok(hi.is_none_or(|h| h < p.to))
        }
        Node::Branch(b) => {
            let child_level = child_level(b);
            let first = b.child_index(p.from);
            let n = b.children.len();
            for i in first..n {
                let child_hi = b.children.get(i.saturating_add(1)).map(|c| c.sep).or(hi);
                match p.path.get_mut(level) {
                    Some(s) => *s = i as u16,
                    None => p.whole = false,
                }
                super::ahead::load_run(b, i, cx);
                let c = child_mut(b, i)?;
                if !probe_rec(
                    load(&mut c.slot, cx, child_level)?,
                    cx,
                    p,
                    level.saturating_add(1),
                    child_hi,
                )? {
                    return Ok(false);
                }
                // Children from here on hold keys from `child_hi` up.
                if child_hi.is_some_and(|h| h >= p.to) {
                    return Ok(false);
                }
            }
            Ok(true)
        }
    }
}
