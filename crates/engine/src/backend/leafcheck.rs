//! Replay's check of what a `LeafMap` record maps, for fsck and a repair
//! (never at a plain mount: it reads each mapped leaf). The leaf block
//! says its owner, tree kind and keys. A record that names a tree the
//! leaf cannot belong to (its kind is another tree's, and the tree the
//! leaf names takes it), or an inode-table separator the leaf's keys
//! contradict (they lie below it with a leaf before it, or reach the next
//! leaf's, or the leaf before holds keys at or above it), is mended: the
//! leaf goes where it belongs — into the tree it names; at the separator
//! of the leaf it replaces (the one its first key routes to, if that one
//! holds any of its keys: an older copy), else at its first key (a new
//! leaf, as a split gives). A record whose block another record maps too,
//! a leaf of another tree or whose keys do not fit, names the one leaf of
//! its tree its delta allocated that no record maps, if there is one. A record is judged only on blocks no later
//! delta of the log allocates or frees (their contents are those the
//! record saw) that decode as leaves and that no other record maps (then one of
//! them names a wrong address); anything else is left as it is.
//!
//! Also a repair's replay of a full commit whose delta number is out of
//! step ([`mend_deltas`]).
//!
//! Calls `structures::btree` (node decode, `Tree::route_leaf`), the inode
//! decoder and the device.

use crate::device::Device;
use crate::error::Result;
use crate::log::chain::LoggedDelta;
use crate::log::Record;
use crate::structures::btree::{node, Node, Tree, TreeKind};
use crate::types::FileType;
use std::collections::HashSet;

/// Blocks each delta of the chain allocates or frees, to tell a block's
/// contents as a record saw them from a later reuse (a block freed later
/// may be written again by anything: a unify, a commit a crash cut).
pub(super) struct LeafCheck {
    /// (start, count, delta index, allocated: else freed).
    allocs: Vec<(u64, u64, usize, bool)>,
    /// Every address the chain's leaf maps name.
    mapped: HashSet<u64>,
    /// The log's blocks and the one reserved after it (allocated, but
    /// holding no leaf whatever they read as).
    log: HashSet<u64>,
    /// Addresses the chain's leaf maps name more than once: one of those
    /// records names a wrong address, not a wrong tree.
    twice: HashSet<u64>,
}

/// How a leaf map is mended: the tree and separator it should name, the
/// separator of a leaf to take out first, and why.
pub(super) struct Mend {
    pub tree: u64,
    pub sep: u64,
    pub addr: u64,
    pub unmap: Option<u64>,
    pub why: String,
}

/// Most blocks a delta allocated read for a leaf no record maps.
const MAX_SCAN: u64 = 4096;

/// Lines of what replay mended: the log block and what was wrong.
pub(super) type Lines = Vec<(u64, String)>;

/// A leaf as its block reads: owner, kind, keys.
type Read = (u64, TreeKind, Vec<u64>);

impl LeafCheck {
    pub(super) fn new(deltas: &[LoggedDelta], reserved: u64) -> LeafCheck {
        let (mut allocs, mut seen, mut twice) = (Vec::new(), HashSet::new(), HashSet::new());
        for (n, d) in deltas.iter().enumerate() {
            for r in &d.records {
                match *r {
                    Record::Balloc { start, count } => allocs.push((start, u64::from(count), n, true)),
                    Record::Bfree { start, count } => allocs.push((start, u64::from(count), n, false)),
                    Record::LeafMap { addr, .. } if !seen.insert(addr) => {
                        twice.insert(addr);
                    }
                    _ => {}
                }
            }
        }
        let log = deltas
            .iter()
            .flat_map(|d| d.blocks.iter().copied())
            .chain([reserved])
            .collect();
        LeafCheck {
            allocs,
            log,
            mapped: seen,
            twice,
        }
    }

    /// The leaf at `addr` as delta `n` saw it, if it decodes as one.
    fn leaf(&self, dev: &dyn Device, n: usize, addr: u64) -> Option<Read> {
        let reused = self
            .allocs
            .iter()
            .any(|&(s, c, i, _)| i > n && addr >= s && addr - s < c);
        if reused || addr < 2 || addr >= dev.block_count() {
            return None;
        }
        let mut b = vec![0u8; dev.block_size() as usize];
        dev.read(addr, &mut b).ok()?;
        let owner = u64::from_le_bytes(b.get(16..24)?.try_into().ok()?);
        let kind = TreeKind::from_code(*b.get(24)?)?;
        match node::decode(&b, addr, owner, kind, 0, dev.block_count()).ok()? {
            Node::Leaf(l) => Some((owner, kind, l.entries.iter().map(|e| e.0).collect())),
            Node::Branch(_) => None,
        }
    }

    /// The tree and separator record `LeafMap { tree, sep, addr }` of
    /// delta `n` should have named (and an inode-table leaf it replaces
    /// whose separator is damaged), and why, when its leaf contradicts it.
    pub(super) fn mend(
        &self,
        dev: &dyn Device,
        n: usize,
        itable: &mut Tree,
        (tree, sep, addr): (u64, u64, u64),
    ) -> Option<Mend> {
        // The block as the record saw it (no later reuse): else not judged.
        let read = self.leaf(dev, n, addr)?;
        // A leaf another record maps, not of this tree or whose keys do
        // not fit here: the address is wrong, and the leaf the delta wrote
        // that no record maps is the one.
        let astray = self.twice.contains(&addr)
            && match (read.0 != tree, tree, read.2.first(), read.2.last()) {
                (true, _, _, _) => true,
                (false, 0, Some(&k1), Some(&kn)) => !self.fits_at(dev, n, itable, sep, k1, kn)?,
                _ => false,
            };
        if astray {
            let o = self.orphan(dev, n, tree)?;
            return Some(Mend {
                tree,
                sep,
                addr: o,
                unmap: None,
                why: format!(
                    "maps block {addr} as a leaf of {}, which it is not; the delta's leaf of it \
                     that no record maps is block {o}",
                    name(tree)
                ),
            });
        }
        let (owner, kind, keys) = read;
        let mut why = Vec::new();
        let mut to = tree;
        if owner != tree {
            if fits(dev, itable, tree, kind) || !fits(dev, itable, owner, kind) {
                return None;
            }
            why.push(format!(
                "maps block {addr} as a leaf of {}, but the block is a {} leaf of {}",
                name(tree),
                kind.name(),
                name(owner)
            ));
            to = owner;
        }
        let (mut at, mut unmap) = (sep, None);
        if to == 0 {
            if let (Some(&k1), Some(&kn)) = (keys.first(), keys.last()) {
                if let Some((nx, b)) = self.stale_next(dev, n, itable, sep, k1, kn) {
                    why.push(format!(
                        "maps block {addr} as the inode-table leaf at {sep}, but the leaf after it \
                         (block {b}, at {nx}) is an older copy of it, its separator above its keys"
                    ));
                    unmap = Some(nx);
                } else if !self.fits_at(dev, n, itable, sep, k1, kn)? {
                    let r = itable.route_leaf(dev, k1).ok()??;
                    let (o, k, ks) = self.leaf(dev, n, r.addr)?;
                    let older = o == 0 && k == TreeKind::Itable && ks.iter().any(|x| (k1..=kn).contains(x));
                    at = if older { r.sep } else { k1 };
                    if at == sep || !self.fits_at(dev, n, itable, at, k1, kn)? {
                        return None;
                    }
                    why.push(format!(
                        "maps block {addr} as the inode-table leaf at {sep}, but its keys {k1}..={kn} \
                         belong to the leaf at {at}"
                    ));
                }
            }
        }
        if why.is_empty() {
            return None;
        }
        Some(Mend {
            tree: to,
            sep: at,
            addr,
            unmap,
            why: why.join("; "),
        })
    }

    /// The one block delta `n` allocated that decodes as a leaf of `tree`
    /// and that no record maps (a leaf map whose address went astray).
    fn orphan(&self, dev: &dyn Device, n: usize, tree: u64) -> Option<u64> {
        let ranges: Vec<(u64, u64)> = self
            .allocs
            .iter()
            .filter(|a| a.2 == n && a.3)
            .map(|a| (a.0, a.1))
            .collect();
        if ranges.iter().map(|r| r.1).sum::<u64>() > MAX_SCAN {
            return None;
        }
        let mut found = None;
        for b in ranges.iter().flat_map(|&(s, c)| s..s.saturating_add(c)) {
            let unwritten = self.log.contains(&b);
            if unwritten || self.mapped.contains(&b) || self.leaf(dev, n, b).is_none_or(|l| l.0 != tree) {
                continue;
            }
            if found.replace(b).is_some() {
                return None;
            }
        }
        found
    }

    /// The separator and block of the leaf that follows where a leaf of
    /// keys `k1..=kn` goes in at `sep` (a new separator), when that leaf
    /// holds some of those keys and its first key lies below its own
    /// separator: an older copy of the leaf whose separator is damaged.
    fn stale_next(
        &self,
        dev: &dyn Device,
        n: usize,
        itable: &mut Tree,
        sep: u64,
        k1: u64,
        kn: u64,
    ) -> Option<(u64, u64)> {
        let r = itable.route_leaf(dev, sep).ok()??;
        let nx = if r.sep == sep {
            return None;
        } else if sep < r.sep {
            r.sep
        } else {
            r.next?
        };
        let b = itable.route_leaf(dev, nx).ok()??.addr;
        let (o, k, ks) = self.leaf(dev, n, b)?;
        let stale = o == 0
            && k == TreeKind::Itable
            && ks.first().is_some_and(|&f| f < nx)
            && ks.iter().any(|x| (k1..=kn).contains(x));
        stale.then_some((nx, b))
    }

    /// Whether an inode-table leaf holding keys `k1..=kn` may take
    /// separator `s` (none: the tree cannot be read).
    fn fits_at(
        &self,
        dev: &dyn Device,
        n: usize,
        itable: &mut Tree,
        s: u64,
        k1: u64,
        kn: u64,
    ) -> Option<bool> {
        let Some(r) = itable.route_leaf(dev, s).ok()? else {
            return Some(true);
        };
        let below_next = |next: Option<u64>| next.is_none_or(|x| kn < x);
        if r.sep == s {
            return Some((r.first || k1 >= s) && below_next(r.next));
        }
        if s < r.sep {
            // Before the first leaf.
            return Some(kn < r.sep);
        }
        if k1 < s || !below_next(r.next) {
            return Some(false);
        }
        // The leaf before holds keys below `s` only.
        Some(match self.leaf(dev, n, r.addr) {
            Some((0, TreeKind::Itable, ks)) => ks.last().is_none_or(|&l| l < s),
            _ => true,
        })
    }
}

/// Record `LeafMap { tree, sep, addr }` of delta `n` as replay applies
/// it: as it is, or mended when `mended` is given (a repair's replay: the
/// line goes there with the log block and delta, an older copy of the
/// leaf is taken out); else what is wrong with it, for an error.
pub(super) fn judge(
    check: Option<&LeafCheck>,
    dev: &dyn Device,
    n: usize,
    itable: &mut Tree,
    (tree, sep, addr): (u64, u64, u64),
    mended: Option<(&mut Lines, u64, u64)>,
) -> Result<std::result::Result<(u64, u64, u64), String>> {
    let Some(m) = check.and_then(|c| c.mend(dev, n, itable, (tree, sep, addr))) else {
        return Ok(Ok((tree, sep, addr)));
    };
    let Some((lines, at, delta)) = mended else {
        return Ok(Err(m.why));
    };
    lines.push((
        at,
        format!("log of delta {delta}: {} (repair maps it there)", m.why),
    ));
    if let Some(u) = m.unmap {
        itable.unmap_leaf(dev, u)?;
    }
    Ok(Ok((m.tree, m.sep, m.addr)))
}

/// Whether tree `t` (as the inode table has it now) is of kind `kind`.
fn fits(dev: &dyn Device, itable: &mut Tree, t: u64, kind: TreeKind) -> bool {
    match t {
        0 => kind == TreeKind::Itable,
        super::BITMAP_INO | super::snapshot::SNAP_INO => false,
        _ => {
            let Ok(Some(raw)) = itable.get(dev, t) else {
                return false;
            };
            let bounds = crate::structures::bounds(dev);
            let Ok(a) = crate::structures::inode::InodeAttrs::decode(&raw, t, 0, &bounds) else {
                return false;
            };
            let dir = FileType::from_mode(a.mode) == Some(FileType::Directory);
            kind == if dir { TreeKind::Dirents } else { TreeKind::Extents }
        }
    }
}

fn name(t: u64) -> String {
    if t == 0 {
        "the inode table".into()
    } else {
        format!("inode {t}")
    }
}

/// A repair's replay (`repair`; else nothing): a full commit whose delta number is below what the
/// commits before it allow (the superblock's next delta, one above the
/// last full commit's), or implausible, is taken as the lowest allowed —
/// the number only orders commits, and the unify that ends the repair
/// starts the log anew. The commit block and what was wrong, per commit.
pub(super) fn mend_deltas(deltas: &mut [LoggedDelta], next_delta: u64, repair: bool) -> Lines {
    let mut floor = next_delta;
    let mut out = Vec::new();
    if !repair {
        return out;
    }
    for d in deltas.iter_mut().filter(|d| !d.fsync) {
        if d.delta < floor || d.delta >= super::MAX_DELTA {
            let at = d.blocks.last().copied().unwrap_or(0);
            out.push((
                at,
                format!(
                    "log commit block: delta {}, expected {floor} or later (repair replays it as \
                     delta {floor})",
                    d.delta
                ),
            ));
            d.delta = floor;
        }
        floor = d.delta.saturating_add(1);
    }
    out
}
