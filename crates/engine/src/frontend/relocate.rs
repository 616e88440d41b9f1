//! Frontend layer: moving what lies past a shrink's new end below it, one
//! inode at a time, each step under the exclusive delta guard, for
//! `Fs::resize` (`api/relocate.rs`), which strings the steps together and
//! commits between batches. The allocator's limit (`shrink_begin`) keeps
//! every new block below the end, so nothing here picks a place:
//!
//! * file data (regular files, symlinks, xattr files) is made dirty again
//!   with the contents it has, as defrag does (`Volume::redirty`): the
//!   commit writes it elsewhere and frees the old blocks; what a batch
//!   reads, it reads beforehand without the guard (`relocate_read.rs`).
//!   A block clones share is moved by the first file the walk finds
//!   mapping it; the others are then pointed at its new copy
//!   (`relocate_shared.rs`), so that clones stay shared;
//! * a preallocated (unwritten) extent is mapped anew to blocks allocated
//!   now, unwritten still, and the old ones freed, in one step;
//! * a tree node (a file's extent tree, a directory, the inode table, the
//!   snapshot table, the bitmap file's tree) is marked dirty
//!   (`Tree::nodes_past`): the next commit (a leaf) or unify (a branch)
//!   writes it elsewhere.
//!
//! What a snapshot holds cannot move (the snapshot's image names the
//! blocks): a survey finds it first and the shrink is refused naming the
//! snapshots ([`Volume::snapshots_past`]).
//!
//! Calls the cache (pages, through `redirty`), structures (extent and
//! node trees), the backend's allocator and snapshot table.

use super::relocate_read::Prefetched;
use super::Volume;
use crate::error::{Errno, Error, Result};
use crate::structures::btree::TreeKind;
use crate::structures::extent::{self, Extent};
use crate::types::Ino;

/// What one inode holds past the new end.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PastEnd {
    /// Logical ranges `(start, count)` of written blocks past the end,
    /// none of them a snapshot's nor shared: for [`Volume::relocate_chunk`].
    pub data: Vec<(u64, u64)>,
    /// Written blocks past the end that other mappings share (the
    /// shared-extent table counts two or more references), none of them
    /// a snapshot's: `(lblock, count, pblock)`.
    pub shared: Vec<(u64, u64, u64)>,
    /// Tree nodes past the end (marked dirty unless surveying).
    pub nodes: u64,
    /// Preallocated blocks moved below the end.
    pub unwritten: u64,
    /// The oldest birth among what a snapshot holds past the end.
    pub held: Option<u32>,
}

/// The part of `e` lying at or past block `limit`, if any.
pub(super) fn past(e: &Extent, limit: u64) -> Option<Extent> {
    (e.pblock.saturating_add(e.count) > limit)
        .then(|| e.piece(e.lblock + limit.saturating_sub(e.pblock), e.end()))
}

fn oldest(a: Option<u32>, b: u32) -> Option<u32> {
    Some(a.map_or(b, |a| a.min(b)))
}

impl Volume {
    /// Up to `max` inode numbers of the inode table from `from` on.
    pub fn inodes_from(&mut self, from: Ino, max: usize) -> Result<Vec<Ino>> {
        let dev = self.be.dev.clone();
        let found = self
            .be
            .itable
            .get_mut()
            .range(dev.as_ref(), from, u64::MAX, max)?;
        Ok(found.into_iter().map(|(ino, _)| ino).collect())
    }

    /// What `ino` holds at or past block `limit`. Unless `survey`, its
    /// tree nodes there are marked dirty and its preallocated extents
    /// there moved; the written ranges are for [`Volume::relocate_chunk`].
    /// An inode gone since it was listed holds nothing.
    pub fn relocate_inode(&mut self, ino: Ino, limit: u64, survey: bool) -> Result<PastEnd> {
        let (dev, held_upto) = (self.be.dev.clone(), self.be.alloc.held_upto);
        let snap = |birth: u32| held_upto.is_some_and(|s| birth <= s);
        let i = match self.inode(ino) {
            Ok(i) => i,
            Err(Error::Posix(Errno::ENOENT)) => return Ok(PastEnd::default()),
            Err(e) => return Err(e),
        };
        let mut out = PastEnd::default();
        let (mut unwritten, mut written) = (Vec::new(), Vec::new());
        if i.tree.kind == TreeKind::Extents {
            for e in extent::all(&mut i.tree, dev.as_ref())?
                .iter()
                .filter_map(|e| past(e, limit))
            {
                if snap(e.birth) {
                    out.held = oldest(out.held, e.birth);
                } else if e.unwritten {
                    unwritten.push((e.lblock, e.count));
                } else {
                    written.push((e.lblock, e.pblock, e.count));
                }
            }
        }
        let mut held = out.held;
        out.nodes = i.tree.nodes_past(dev.as_ref(), limit, !survey, &mut |b| {
            if snap(b) {
                held = oldest(held, b);
            }
        })?;
        out.held = held;
        for (lblock, pblock, count) in written {
            for (p, n, refs) in self.be.alloc.shared.pieces(pblock, count) {
                let l = lblock + (p - pblock);
                if refs >= 2 {
                    out.shared.push((l, n, p));
                } else {
                    out.data.push((l, n));
                }
            }
        }
        if survey {
            return Ok(out);
        }
        for (start, count) in unwritten {
            self.move_unwritten(ino, start, count)?;
            out.unwritten += count;
        }
        if out.nodes > 0 || out.unwritten > 0 {
            self.touch(ino);
        }
        Ok(out)
    }

    /// Map logical blocks `start..start+count` of `ino`, preallocated past
    /// the end, to preallocated blocks allocated now (below it), freeing
    /// the old ones. The space is reserved first: ENOSPC changes nothing.
    fn move_unwritten(&mut self, ino: Ino, start: u64, count: u64) -> Result<()> {
        let dev = self.be.dev.clone();
        self.reserve_blocks(count, 1, 0)?;
        let freed = extent::punch(&mut self.inode(ino)?.tree, dev.as_ref(), start, start + count)?;
        self.fill_holes(ino, &[(start, count)])?;
        self.give_back(ino, &freed)
    }

    /// Make the written blocks of `[from, to)` of `ino` that lie at or past
    /// block `limit` dirty with their contents (what a snapshot holds is
    /// left), a block taking what `read` holds for it if it is still
    /// mapped where that was read from (`frontend/relocate_read.rs`).
    /// Returns how many it made dirty (none of an inode gone); ENOSPC
    /// (nothing changed) if the space for them cannot be reserved.
    pub fn relocate_chunk(
        &mut self,
        ino: Ino,
        from: u64,
        to: u64,
        limit: u64,
        read: &Prefetched,
    ) -> Result<u64> {
        self.begin_change(to.saturating_sub(from) + 2)?;
        let targets = match self.relocate_targets(ino, from, to, limit) {
            Err(Error::Posix(Errno::ENOENT)) => return Ok(0),
            r => r?,
        };
        self.redirty(ino, &targets, Some(read))
    }

    /// The volume's own trees — the inode table, the snapshot table, the
    /// bitmap file's tree — at or past block `limit`: their nodes there,
    /// marked dirty unless `survey` (the next commit and unify move
    /// them), and the oldest birth a snapshot holds among the inode
    /// table's (the other two are in no snapshot).
    pub fn relocate_tables(&mut self, limit: u64, survey: bool) -> Result<(u64, Option<u32>)> {
        let (dev, held_upto) = (self.be.dev.clone(), self.be.alloc.held_upto);
        let mut held = None;
        let mut nodes = self
            .be
            .itable
            .get_mut()
            .nodes_past(dev.as_ref(), limit, !survey, &mut |b| {
                if held_upto.is_some_and(|s| b <= s) {
                    held = oldest(held, b);
                }
            })?;
        for tree in [&mut self.be.snaps.tree, &mut self.be.bitmap] {
            nodes += tree.nodes_past(dev.as_ref(), limit, !survey, &mut |_| {})?;
        }
        Ok((nodes, held))
    }

    /// Whether a snapshot may hold blocks at or past `limit`: one exists,
    /// or the dead list has extents there.
    pub fn snapshots_may_hold(&self, limit: u64) -> bool {
        self.be.alloc.held_upto.is_some() || self.be.snaps.dead_extents().any(|(s, d)| s + d.count > limit)
    }

    /// The names of the snapshots holding blocks at or past `limit`: those
    /// of live blocks born at `held` or later (every snapshot taken since
    /// holds them), and those the dead list's extents there were alive in.
    /// A snapshot being deleted is named with " (being deleted)": its
    /// blocks go once reclaim is done.
    pub fn snapshots_past(&self, limit: u64, held: Option<u32>) -> Vec<String> {
        let snaps = &self.be.snaps;
        let mut ids: std::collections::BTreeSet<u64> = snaps
            .records
            .keys()
            .filter(|&&id| held.is_some_and(|b| id >= u64::from(b)))
            .copied()
            .collect();
        for (_, d) in snaps.dead_extents().filter(|(s, d)| s + d.count > limit) {
            ids.extend(
                snaps
                    .records
                    .range(u64::from(d.birth)..u64::from(d.death))
                    .map(|(id, _)| *id),
            );
        }
        ids.iter()
            .filter_map(|id| snaps.records.get(id))
            .map(|r| {
                let name = String::from_utf8_lossy(&r.name).into_owned();
                if r.deleting {
                    format!("{name} (being deleted)")
                } else {
                    name
                }
            })
            .collect()
    }
}
