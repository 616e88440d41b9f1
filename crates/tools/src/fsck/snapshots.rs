//! fsck of snapshots: the snapshot table's nodes and dead extents own
//! their blocks; every block a snapshot's trees reference must be live or
//! on the dead list (else the allocator could hand it out while the
//! snapshot still reads it); and every dead extent must be held by a
//! snapshot, or by a deleted one whose space is still coming back.
//!
//! A tree a snapshot shares with the live volume or an earlier snapshot
//! (same root address) is not walked again, so the work follows the
//! distinct trees, not the snapshot count. A file whose record holds its
//! extents (format attribute 9) has no tree: they are checked with the
//! record, in the snapshot's inode-table leaf, like a tree's extents.
//!
//! Calls `backend` (the loaded table), `structures` decoders and the
//! sibling modules `walk`, `refs` and `datasums`.

use super::refs::{Owner, Ref};
use super::walk::{walk, walk_pruned};
use super::Findings;
use std::collections::HashSet;
use tux3::backend::snapshot::SNAP_INO;
use tux3::backend::Backend;
use tux3::structures::btree::{Tree, TreeKind};
use tux3::structures::extent::{self, Extent};
use tux3::structures::inode::InodeAttrs;

/// The table's own blocks (nodes and dead extents), for the ownership checks.
pub(super) fn table_refs(be: &mut Backend, refs: &mut Vec<Ref>, f: &mut Findings) -> bool {
    let dev = be.dev.clone();
    let mut shape = Vec::new();
    let w = walk(
        dev.as_ref(),
        &mut be.snaps.tree,
        "snapshot table",
        &mut |_, _| {},
        &mut |line| shape.push(line),
    );
    for line in shape {
        f.problem("snapshots", line);
    }
    for e in &w.errors {
        f.error("snapshots", "snapshot table node", e);
    }
    // An empty table (every snapshot gone, its space back) keeps its
    // nodes only until the next unify, which writes no table at all.
    let empty = be.snaps.records.is_empty() && be.snaps.dead.is_empty();
    for &(addr, level) in &w.nodes {
        if addr != 0 {
            refs.push(Ref {
                start: addr,
                count: 1,
                owner: if empty {
                    Owner::Retired { tree: SNAP_INO }
                } else {
                    Owner::Node {
                        tree: SNAP_INO,
                        level,
                    }
                },
            });
        }
    }
    // Nodes the replayed log took out of the table (reclaim emptied them)
    // are still the last unify's: the next unify frees them.
    retired_refs(&be.snaps.tree, SNAP_INO, refs);
    let sound = sound(be);
    let snaps = &be.snaps;
    for (start, d) in snaps.dead_extents() {
        refs.push(Ref {
            start,
            count: d.count,
            owner: Owner::Dead { birth: d.birth },
        });
        let held = snaps
            .records
            .values()
            .any(|r| u64::from(d.birth) <= r.id && r.id < u64::from(d.death));
        if !held {
            let line = format!(
                "blocks {start}+{}: on the dead list (born {}, died {}) but no snapshot holds them",
                d.count, d.birth, d.death
            );
            if sound {
                let line = format!("{line} (repair takes them off the list)");
                f.fixable("snapshots", super::Fix::Unbury { start }, line);
            } else {
                f.problem("snapshots", line);
            }
        }
    }
    w.complete()
}

/// Whether the superblock agrees with the snapshot table: it names one,
/// every record's id is below its generation and no dead extent dies
/// after it. Where it does not, the superblock may be the damaged one (a
/// table root or generation gone astray): the repairs of the dead list,
/// which trust it, are not made.
fn sound(be: &Backend) -> bool {
    let g = be.sb.generation;
    be.sb.snapshots.addr != 0
        && be.snaps.records.keys().all(|&id| id < g)
        && be
            .snaps
            .dead_extents()
            .all(|(_, d)| u64::from(d.death) <= g && d.birth < d.death)
}

/// The nodes of `tree` that replay took out but the last unify's image
/// holds until the next unify frees them: the table's `freed` (it frees
/// its nodes only at a unify) and any tree's `retired` branches.
pub(super) fn retired_refs(tree: &Tree, owner: u64, refs: &mut Vec<Ref>) {
    let held = tree.retired.iter().chain(if owner == SNAP_INO {
        tree.freed.iter()
    } else {
        [].iter()
    });
    for &(addr, _) in held {
        if addr != 0 {
            refs.push(Ref {
                start: addr,
                count: 1,
                owner: Owner::Retired { tree: owner },
            });
        }
    }
}

/// Every snapshot's trees: each block must be owned by `refs` already
/// (live, or dead). `prune` holds the nodes walked already (the live
/// volume's): a node two trees share is walked once, with what lies below
/// it, so the work follows the distinct nodes, not the snapshot count.
/// Blocks a snapshot references that nothing owns but that are in use
/// (their dead extent was lost) the repair puts on the dead list: returned
/// as the dead list's, for the ownership checks. Then the dead extents
/// that share a block with the live volume ([`dead_claims`]).
pub(super) fn check_snapshots(
    be: &Backend,
    refs: &[Ref],
    prune: &mut HashSet<u64>,
    f: &mut Findings,
) -> Vec<Ref> {
    let sound = sound(be);
    let dev = be.dev.clone();
    let dev = dev.as_ref();
    let owned = runs(refs, |_| true);
    // The runs of [start, start+count) that the ranges owned, merged, do
    // not cover.
    let uncovered = |start: u64, count: u64| -> Vec<(u64, u64)> {
        let end = start.saturating_add(count);
        let mut at = start;
        let mut out = Vec::new();
        let mut j = owned.partition_point(|&(s, _)| s <= at).saturating_sub(1);
        while at < end {
            match owned.get(j) {
                Some(&(s, e)) if s <= at => {
                    at = at.max(e);
                    j += 1;
                }
                next => {
                    let to = next.map_or(end, |&(s, _)| s.min(end));
                    out.push((at, to - at));
                    at = to;
                }
            }
        }
        out
    };
    for rec in be.snaps.records.values().filter(|r| !r.deleting) {
        let name = String::from_utf8_lossy(&rec.name).into_owned();
        // Damage inside a snapshot's image: it is read-only, so the repair
        // deletes the snapshot (its space comes back as for any delete).
        let drop = super::Fix::DeleteSnapshot {
            name: rec.name.clone(),
        };
        let damaged = |f: &mut Findings, line: String| {
            f.fixable(
                "snapshots",
                drop.clone(),
                format!("{line} (repair deletes the snapshot)"),
            );
        };
        let mut itable = Tree::open(0, TreeKind::Itable, rec.itable);
        let mut inodes: Vec<(u64, InodeAttrs)> = Vec::new();
        let (mut bad, mut shape) = (Vec::new(), Vec::new());
        let w = {
            let mut leaf = |leaf: u64, entries: &[(u64, Vec<u8>)]| {
                for (ino, v) in entries {
                    match InodeAttrs::decode(v, *ino, leaf, &tux3::structures::bounds(dev)) {
                        Ok(a) => inodes.push((*ino, a)),
                        Err(e) => bad.push(super::describe(&format!("snapshot {name}: inode {ino}"), &e)),
                    }
                }
            };
            let mut problem = |line: String| shape.push(format!("snapshot {name}: {line}"));
            walk_pruned(
                dev,
                &mut itable,
                "snapshot inode table",
                &mut leaf,
                &mut problem,
                Some(&mut *prune),
            )
        };
        for line in bad.into_iter().chain(shape) {
            damaged(f, line);
        }
        for e in &w.errors {
            damaged(
                f,
                super::describe(&format!("snapshot {name}: inode table node"), e),
            );
        }
        // Blocks neither live nor dead: in use, their dead extent was
        // lost (the repair puts them back, born as the image says); free,
        // the snapshot cannot be trusted.
        let check =
            |what: String, start: u64, count: u64, birth: &dyn Fn() -> Option<u32>, f: &mut Findings| {
                let gaps = uncovered(start, count);
                let used = |&(s, c): &(u64, u64)| (s..s.saturating_add(c)).all(|b| be.alloc.is_used(b));
                let line = |s: u64, c: u64| {
                    format!("blocks {s}+{c}: {what} of snapshot {name}, neither live nor on the dead list")
                };
                if gaps.is_empty() {
                    return;
                }
                match birth() {
                    Some(birth) if sound && gaps.iter().all(used) => {
                        // (Held from the snapshot on, whatever the header says.)
                        let birth = birth.min(u32::try_from(rec.id).unwrap_or(u32::MAX));
                        for (s, c) in gaps {
                            bury(f, s, c, birth, line(s, c));
                        }
                    }
                    _ => {
                        if let Some(&(s, c)) = gaps.first() {
                            damaged(f, line(s, c));
                        }
                    }
                }
            };
        for &(addr, _) in &w.nodes {
            check(
                "an inode table node".into(),
                addr,
                1,
                &|| node_birth(dev, addr),
                f,
            );
        }
        // A file's data: born no later than the snapshot, live or dead,
        // summed as the volume says (and its blocks read, with `data`).
        let data = |ino: u64, extents: &[Extent], f: &mut Findings| {
            super::datasums::verify(dev, ino, Some(&name), extents, f);
            for e in extents {
                let at = format!(
                    "snapshot {name}: inode {ino}: extent at logical block {} (block {}, {} blocks)",
                    e.lblock, e.pblock, e.count
                );
                super::datasums::check_form(e, be.sb.data_sums, &at, ino, false, f);
                if u64::from(e.birth) > rec.id {
                    damaged(
                        f,
                        format!(
                            "blocks {}+{}: data of inode {ino} in snapshot {name} born {} after it",
                            e.pblock, e.count, e.birth
                        ),
                    );
                }
                check(
                    format!("data of inode {ino}"),
                    e.pblock,
                    e.count,
                    &|| Some(e.birth),
                    f,
                );
            }
        };
        // Only inodes in leaves not walked before are here: the others'
        // records, and so their trees, were checked with that leaf.
        for (ino, a) in inodes {
            // Extents the record holds: no tree to walk.
            data(ino, &a.inline, f);
            // A tree whose root was walked (shared): not even its root is read.
            if a.root.addr == 0 || prune.contains(&a.root.addr) {
                continue;
            }
            let kind = crate::datamap::tree_kind(&a);
            let mut tree = Tree::open(ino, kind, a.root);
            let mut extents = Vec::new();
            let (mut bad, mut shape) = (Vec::new(), Vec::new());
            let w = {
                let mut leaf = |leaf: u64, entries: &[(u64, Vec<u8>)]| {
                    if kind == TreeKind::Extents {
                        for (k, v) in entries {
                            match extent::decode(*k, v, leaf, &tux3::structures::bounds(dev)) {
                                Ok(e) => extents.push(e),
                                Err(e) => bad.push(super::describe(&format!("inode {ino}"), &e)),
                            }
                        }
                    }
                };
                let mut problem = |line: String| shape.push(line);
                walk_pruned(
                    dev,
                    &mut tree,
                    "snapshot file tree",
                    &mut leaf,
                    &mut problem,
                    Some(&mut *prune),
                )
            };
            for line in bad.into_iter().chain(shape) {
                damaged(f, format!("snapshot {name}: {line}"));
            }
            for e in &w.errors {
                damaged(
                    f,
                    super::describe(&format!("snapshot {name}: tree of inode {ino}"), e),
                );
            }
            for &(addr, _) in &w.nodes {
                check(
                    format!("a node of inode {ino}"),
                    addr,
                    1,
                    &|| node_birth(dev, addr),
                    f,
                );
            }
            data(ino, &extents, f);
        }
    }
    if sound {
        dead_claims(be, refs, f);
    }
    f.fixes
        .iter()
        .filter_map(|(fix, _)| match *fix {
            super::Fix::Bury { start, count, birth } => Some(Ref {
                start,
                count,
                owner: Owner::Dead { birth },
            }),
            _ => None,
        })
        .collect()
}

/// Dead extents that share blocks with an owner of the live volume where
/// no snapshot's image references those blocks, or where its count or
/// start is plainly what is damaged: the dead extent is the wrong one (a
/// damaged `Dead` record), and the repair takes it off the list — what a
/// snapshot references of it is buried again. Only where
/// some dead extent meets the live volume are the images read whole
/// (`image_blocks`: the walk above skips what they share with the live
/// trees, which may be the damaged side); an image that cannot be read
/// leaves every such extent as it is.
fn dead_claims(be: &Backend, refs: &[Ref], f: &mut Findings) {
    let live = runs(refs, |o| !matches!(o, Owner::Dead { .. } | Owner::LogReserved));
    let mut met = Vec::new();
    for (start, d) in be.snaps.dead_extents() {
        let end = start.saturating_add(d.count);
        let from = live.partition_point(|&(_, e)| e <= start);
        let owned: Vec<(u64, u64)> = live[from..]
            .iter()
            .take_while(|&&(s, _)| s < end)
            .map(|&(s, e)| (s.max(start), e.min(end)))
            .collect();
        let pending = f
            .fixes
            .iter()
            .any(|(fix, _)| *fix == super::Fix::Unbury { start });
        if !owned.is_empty() && !pending {
            met.push((start, *d, owned));
        }
    }
    if met.is_empty() {
        return;
    }
    let dev = be.dev.clone();
    let mut imaged: Vec<(u64, u64, u32)> = Vec::new();
    for rec in be.snaps.records.values().filter(|r| !r.deleting) {
        match tux3::backend::snapshot::image_blocks(dev.as_ref(), rec.itable) {
            Ok((blocks, _)) => imaged.extend(blocks),
            Err(_) => return,
        }
    }
    let imaged = tux3::backend::snapshot::merged(&imaged);
    let meets = |s: u64, e: u64| {
        let i = imaged.partition_point(|&(_, ie)| ie <= s);
        imaged.get(i).is_some_and(|&(is, _)| is < e)
    };
    for (start, d, owned) in met {
        let end = start.saturating_add(d.count);
        // A snapshot references what the live volume holds of it, as
        // blocks they share do: the extent is still the wrong one where
        // its count ran into them (they are its tail, its head is not
        // the live volume's), or where its start moved (the blocks it
        // had, referenced and held by nothing, are buried above with its
        // length and birth).
        let tail = owned.len() == 1 && owned[0].1 == end && owned[0].0 > start;
        let moved = owned == [(start, end)]
            && f.fixes.iter().any(|(fix, _)| {
                matches!(*fix, super::Fix::Bury { count, birth, .. } if count == d.count && birth == d.birth)
            });
        if owned.iter().any(|&(s, e)| meets(s, e)) && !tail && !moved {
            continue;
        }
        f.fixable(
            "snapshots",
            super::Fix::Unbury { start },
            format!(
                "blocks {start}+{}: on the dead list (born {}, died {}), but the live volume holds \
                 some of them and no snapshot's image references those (repair takes them off the list)",
                d.count, d.birth, d.death
            ),
        );
    }
}

/// The blocks of the `refs` whose owner is `keep`, as sorted disjoint
/// (start, end) runs: references overlap where blocks are shared, and a
/// run that starts later may end sooner than one before.
fn runs(refs: &[Ref], keep: impl Fn(&Owner) -> bool) -> Vec<(u64, u64)> {
    let mut all: Vec<(u64, u64)> = refs
        .iter()
        .filter(|r| keep(&r.owner))
        .map(|r| (r.start, r.start.saturating_add(r.count)))
        .collect();
    all.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(all.len());
    for (s, e) in all {
        match out.last_mut() {
            Some(l) if s <= l.1 => l.1 = l.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

/// Put `start..+count` (born `birth`) on the dead list, unless a burial
/// already recorded covers part of it (two snapshots reference it).
fn bury(f: &mut Findings, start: u64, count: u64, birth: u32, line: String) {
    let end = start.saturating_add(count);
    let pending = f.fixes.iter().any(|(fix, _)| {
        matches!(*fix, super::Fix::Bury { start: s, count: c, .. } if s < end && start < s.saturating_add(c))
    });
    if !pending {
        let fix = super::Fix::Bury { start, count, birth };
        f.fixable(
            "snapshots",
            fix,
            format!("{line} (repair puts them on the dead list)"),
        );
    }
}

/// The birth recorded in the header of the node at `addr`.
fn node_birth(dev: &dyn tux3::device::Device, addr: u64) -> Option<u32> {
    let mut buf = vec![0u8; dev.block_size() as usize];
    dev.read(addr, &mut buf).ok()?;
    buf.get(28..32)?.try_into().ok().map(u32::from_le_bytes)
}
