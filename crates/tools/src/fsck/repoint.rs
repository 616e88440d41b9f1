//! `fsck --repair` of an extent held in an inode record (format attribute
//! 9) whose start block is damaged: its blocks are another owner's, or
//! free, and their data does not match the checksums the record holds
//! for them (attribute 12). Where the blocks one bit or one block away
//! are in use, referenced by nothing (what the damaged start left behind)
//! and match every checksum, and only one such place does, the extent is
//! mapped there again: the data is found by its checksums, nothing is
//! made up. The leak that place was is not freed in the same round.
//!
//! Works on what `scan` collected; reads the blocks of the extents it
//! doubts and of the places it tries, nothing else. Only when every tree
//! was read (a block referenced by nothing is then known to be a leak).

use super::refs::Ref;
use super::{Findings, Fix};
use std::collections::BTreeMap;
use tux3::codec::Bounds;
use tux3::device::Device;
use tux3::structures::extent::block_sum;
use tux3::structures::inode::InodeAttrs;

/// Look for extents held in records whose start block went astray; `refs`
/// every referenced range, `is_used` the bitmap.
pub(super) fn check(
    dev: &dyn Device,
    inodes: &BTreeMap<u64, InodeAttrs>,
    refs: &[Ref],
    is_used: &dyn Fn(u64) -> bool,
    f: &mut Findings,
) {
    let bounds = Bounds::new(dev.block_size(), dev.block_count());
    if !inodes
        .values()
        .any(|a| a.inline.iter().any(|e| !e.sums.is_empty()))
    {
        return;
    }
    let cover = coverage(refs);
    let claims = |b: u64| {
        let i = cover.partition_point(|&(s, _, _)| s <= b);
        match i.checked_sub(1).and_then(|i| cover.get(i)) {
            Some(&(_, end, n)) if b < end => n,
            _ => 0,
        }
    };
    let mut buf = vec![0u8; dev.block_size() as usize];
    let mut matches = |start: u64, sums: &[u32]| {
        sums.iter()
            .enumerate()
            .all(|(j, &sum)| dev.read(start + j as u64, &mut buf).is_ok() && block_sum(&buf) == sum)
    };
    for (&ino, a) in inodes {
        for (i, e) in a.inline.iter().enumerate() {
            if e.sums.len() as u64 != e.count {
                continue;
            }
            let doubtful = (e.pblock..e.pblock + e.count).any(|b| !is_used(b) || claims(b) > 1);
            if !doubtful || matches(e.pblock, &e.sums) {
                continue;
            }
            let mut places: Vec<u64> = (0..64)
                .map(|k| e.pblock ^ (1u64 << k))
                .chain([e.pblock.wrapping_add(1), e.pblock.wrapping_sub(1)])
                .filter(|&p| bounds.holds_range(p, e.count))
                .filter(|&p| {
                    // Referenced by nothing but this extent itself.
                    let own = |b: u64| usize::from(b >= e.pblock && b - e.pblock < e.count);
                    (p..p + e.count).all(|b| is_used(b) && claims(b) == own(b))
                })
                .collect();
            places.sort_unstable();
            places.dedup();
            places.retain(|&p| matches(p, &e.sums));
            let [to] = places[..] else {
                continue;
            };
            let mut fixed = a.clone();
            fixed.inline[i].pblock = to;
            let (from, count) = (e.pblock, e.count);
            f.fixable(
                "extent",
                Fix::Record {
                    ino,
                    record: fixed.encode(),
                },
                format!(
                    "inode {ino}, its inode record: extent at logical block {} maps blocks \
                     {from}+{count}, whose data does not match its checksums; blocks {to}+{count}, \
                     in use and no other owner's, match them (repair maps the extent there)",
                    e.lblock
                ),
            );
            // Not freed, and the blocks left neither marked in use nor
            // counted as shared, by the same round.
            f.fixes.retain(|(fix, _)| match *fix {
                Fix::Free { start, count: c } => start + c <= to || to + count <= start,
                Fix::MarkUsed { start, count: c } | Fix::SharedRefs { start, count: c, .. } => {
                    start + c <= from || from + count <= start
                }
                _ => true,
            });
        }
    }
}

/// The blocks `refs` cover, as sorted disjoint ranges (start, end, how
/// many references cover them).
fn coverage(refs: &[Ref]) -> Vec<(u64, u64, usize)> {
    let mut edges: Vec<(u64, isize)> = refs
        .iter()
        .filter(|r| r.count > 0)
        .flat_map(|r| [(r.start, 1), (r.start.saturating_add(r.count), -1)])
        .collect();
    edges.sort_unstable();
    let mut out = Vec::new();
    let (mut depth, mut from) = (0isize, 0u64);
    for (at, step) in edges {
        if depth > 0 && at > from {
            out.push((from, at, depth.unsigned_abs()));
        }
        depth += step;
        from = at;
    }
    out
}
