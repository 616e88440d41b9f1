//! `fsck --repair` of an inode-table branch entry whose child went astray:
//! it names a block that is no leaf of the table, or a leaf whose keys lie
//! outside the entry's range (another entry's leaf, reached twice). The
//! leaf that belongs there is a block in use that nothing references, an
//! inode-table leaf holding keys all in the entry's range: if exactly one
//! block is, the entry is set to it in place (`keyfix::mend`, before the
//! repair mounts), so a snapshot sharing the branch is mended too. And
//! an inode-table leaf in use that no entry names any more (`lost`: the
//! entry of a child outside the volume was taken out so the volume would
//! mount) gets its entry back, in place the same way.
//!
//! Calls the node decoder and the device.

use super::keyfix::KeyFix;
use super::refs::Ref;
use tux3::codec::INO_LIMIT;
use tux3::device::Device;
use tux3::structures::btree::node::decode;
use tux3::structures::btree::{Node, TreeKind};

/// Most unreferenced blocks read to find a leaf.
const MAX_CANDIDATES: usize = 4096;

/// The keys of the inode-table leaf at `addr`, if it is one.
fn keys(dev: &dyn Device, addr: u64) -> Option<Vec<u64>> {
    if addr < 2 || addr >= dev.block_count() {
        return None;
    }
    let mut b = vec![0u8; dev.block_size() as usize];
    dev.read(addr, &mut b).ok()?;
    match decode(&b, addr, 0, TreeKind::Itable, 0, dev.block_count()).ok()? {
        Node::Leaf(l) => Some(l.entries.iter().map(|e| e.0).collect()),
        Node::Branch(_) => None,
    }
}

/// Entries (branch, index, separator, child) of the inode table's
/// branches of leaves, in key order, whose child is wrong and whose
/// leaf can be told; `refs` what the volume references, `used` the
/// allocator's view.
pub(super) fn find(
    dev: &dyn Device,
    entries: &[(u64, usize, u64, u64)],
    refs: &[Ref],
    used: &dyn Fn(u64) -> bool,
) -> Vec<KeyFix> {
    let range = |p: usize| {
        let from = if p == 0 { 0 } else { entries[p].2 };
        let to = entries.get(p + 1).map_or(INO_LIMIT, |e| e.2);
        (from, to)
    };
    let fits = |ks: &[u64], (from, to): (u64, u64)| ks.iter().all(|&k| k >= from && k < to);
    let wrong: Vec<usize> = (0..entries.len())
        .filter(|&p| keys(dev, entries[p].3).is_none_or(|ks| !fits(&ks, range(p))))
        .collect();
    if wrong.is_empty() {
        return Vec::new();
    }
    let Some(leaves) = loose_leaves(dev, refs, used) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for p in wrong {
        let (branch, index, _, child) = entries[p];
        let found: Vec<u64> = leaves
            .iter()
            .filter(|(_, ks)| fits(ks, range(p)))
            .map(|(b, _)| *b)
            .collect();
        if let ([to], true) = (found.as_slice(), branch != 0) {
            out.push(KeyFix {
                addr: branch,
                index,
                from: child,
                to: *to,
                child: true,
                insert: None,
            });
        }
    }
    // A leaf found for two entries is the leaf of neither.
    let mut tos: Vec<u64> = out.iter().map(|f| f.to).collect();
    tos.sort_unstable();
    out.retain(|f| tos.iter().filter(|&&t| t == f.to).count() == 1);
    out
}

/// The blocks in use that nothing references and that are inode-table
/// leaves holding keys, with their keys; `None` when there are more than
/// [`MAX_CANDIDATES`] such blocks to read.
fn loose_leaves(dev: &dyn Device, refs: &[Ref], used: &dyn Fn(u64) -> bool) -> Option<Vec<(u64, Vec<u64>)>> {
    let mut referenced: Vec<(u64, u64)> = refs.iter().map(|r| (r.start, r.count)).collect();
    referenced.sort_unstable();
    let is_referenced = |b: u64| {
        let i = referenced.partition_point(|&(s, _)| s <= b);
        i > 0 && referenced[i - 1].0 + referenced[i - 1].1 > b
    };
    let mut loose = Vec::new();
    for b in 2..dev.block_count() {
        if used(b) && !is_referenced(b) {
            if loose.len() == MAX_CANDIDATES {
                return None;
            }
            loose.push(b);
        }
    }
    Some(
        loose
            .into_iter()
            .filter_map(|b| keys(dev, b).filter(|ks| !ks.is_empty()).map(|ks| (b, ks)))
            .collect(),
    )
}

/// Branch entries to add for inode-table leaves no entry names any more
/// (a child outside the volume was taken out to mount): a block in use
/// that nothing references, an inode-table leaf all of whose keys the
/// table lacks and that lie in one entry's range wholly below or above
/// the keys of that entry's leaf. The leaf goes back at the entry's
/// separator (the entry's own separator moving up to its leaf's first
/// key) or, above, at its first key. A gap two such leaves claim is left
/// alone. `entries` as for [`find`]; `present` says whether the table
/// holds an inode, `wanted` whether it is the root or a directory entry
/// names it.
pub(super) fn lost(
    dev: &dyn Device,
    entries: &[(u64, usize, u64, u64)],
    refs: &[Ref],
    used: &dyn Fn(u64) -> bool,
    present: &dyn Fn(u64) -> bool,
    wanted: &dyn Fn(u64) -> bool,
) -> Vec<KeyFix> {
    let Some(leaves) = loose_leaves(dev, refs, used) else {
        return Vec::new();
    };
    let mut out: Vec<KeyFix> = Vec::new();
    for (b, ks) in leaves {
        let (Some(&lo), Some(&hi)) = (ks.first(), ks.last()) else {
            continue;
        };
        // None of its keys in the table, and one of them wanted: the root,
        // or an inode a directory entry names (a stale copy of a leaf is
        // never in use; this keeps one from coming back all the same).
        if ks.iter().any(|&k| present(k)) || !ks.iter().any(|&k| wanted(k)) {
            continue;
        }
        // The entry whose range holds the keys.
        let p = entries.partition_point(|e| e.2 <= lo).saturating_sub(1);
        let Some(&(branch, index, sep, child)) = entries.get(p) else {
            continue;
        };
        let to = entries.get(p + 1).map_or(INO_LIMIT, |e| e.2);
        if branch == 0 || (p > 0 && lo < sep) || hi >= to {
            continue;
        }
        let Some(own) = keys(dev, child).filter(|k| !k.is_empty()) else {
            continue;
        };
        let (first, last) = (own[0], own[own.len() - 1]);
        let fix = if hi < first {
            KeyFix {
                addr: branch,
                index,
                from: child,
                to: b,
                child: true,
                insert: Some((sep, Some(first))),
            }
        } else if lo > last {
            KeyFix {
                addr: branch,
                index: index + 1,
                from: child,
                to: b,
                child: true,
                insert: Some((lo, None)),
            }
        } else {
            continue;
        };
        out.push(fix);
    }
    // Two leaves for one place: neither is told.
    let place = |f: &KeyFix| (f.addr, f.index);
    let all = out.clone();
    out.retain(|f| all.iter().filter(|g| place(g) == place(f)).count() == 1);
    out
}

/// Add entry (`sep`, `leaf`) at `index` of the branch block `b`: below
/// the entry whose child is `from` (which moves up, its separator set to
/// `next`) or, with `next` `None`, after it. `None` when the block is not
/// as the fix expects or has no room; the block is resealed.
pub(super) fn insert_entry(
    b: &mut [u8],
    index: usize,
    from: u64,
    leaf: u64,
    sep: u64,
    next: Option<u64>,
) -> Option<()> {
    use tux3::structures::btree::node::{BRANCH_ENTRY, NODE_HEADER};
    let count = u16::from_le_bytes([*b.get(26)?, *b.get(27)?]) as usize;
    if b.get(25) != Some(&1) || count >= (b.len() - NODE_HEADER) / BRANCH_ENTRY || index > count {
        return None;
    }
    let at = |i: usize| NODE_HEADER + BRANCH_ENTRY * i;
    let u64_at = |b: &[u8], o: usize| Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?));
    let neighbour = if next.is_some() {
        index
    } else {
        index.checked_sub(1)?
    };
    if u64_at(b, at(neighbour) + 8)? != from || (next.is_some() && u64_at(b, at(index))? != sep) {
        return None;
    }
    b.copy_within(at(index)..at(count), at(index + 1));
    b.get_mut(at(index)..at(index) + 8)?
        .copy_from_slice(&sep.to_le_bytes());
    b.get_mut(at(index) + 8..at(index + 1))?
        .copy_from_slice(&leaf.to_le_bytes());
    if let Some(n) = next {
        b.get_mut(at(index + 1)..at(index + 1) + 8)?
            .copy_from_slice(&n.to_le_bytes());
    }
    b.get_mut(26..28)?
        .copy_from_slice(&u16::try_from(count + 1).ok()?.to_le_bytes());
    tux3::codec::reseal(b);
    Some(())
}
