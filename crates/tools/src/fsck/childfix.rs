//! `fsck --repair` of an inode-table branch entry whose child went astray:
//! it names a block that is no leaf of the table, or a leaf whose keys lie
//! outside the entry's range (another entry's leaf, reached twice). The
//! leaf that belongs there is a block in use that nothing references, an
//! inode-table leaf holding keys all in the entry's range: if exactly one
//! block is, the entry is set to it in place (`keyfix::mend`, before the
//! repair mounts), so a snapshot sharing the branch is mended too.
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
                return Vec::new();
            }
            loose.push(b);
        }
    }
    let leaves: Vec<(u64, Vec<u64>)> = loose
        .into_iter()
        .filter_map(|b| keys(dev, b).filter(|ks| !ks.is_empty()).map(|ks| (b, ks)))
        .collect();
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
            });
        }
    }
    // A leaf found for two entries is the leaf of neither.
    let mut tos: Vec<u64> = out.iter().map(|f| f.to).collect();
    tos.sort_unstable();
    out.retain(|f| tos.iter().filter(|&&t| t == f.to).count() == 1);
    out
}
