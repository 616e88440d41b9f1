//! Frontend layer: free space. What a change may take (`begin_change`,
//! `begin_release` and their shared-guard forms), what a full volume keeps
//! back for the changes that free space and for the commits and the unify
//! that make their frees happen (the [`Reserve`]), and what `statfs`
//! reports. docs/ARCHITECTURE.md, *Full volumes*, argues the sizes.
//!
//! Invariant S1: an ordinary change (one that may allocate) goes in only if
//! the blocks no one has promised yet (`available - reserved`) cover its
//! blocks, its own share of the reserve and the whole reserve; a change
//! that frees space may use half of the reserve's headroom, never what the
//! open delta's commit and a unify after it need. So the commit of
//! whatever was accepted, and a unify, can always allocate what they need:
//! ENOSPC is returned before an operation changes anything, never by a
//! commit.
//!
//! Calls the backend's allocator, log writer, trees and snapshot table
//! (to size the reserve); the delta commit (`Volume::commit`) when space is
//! short and pinned frees could help.

use super::Volume;
use crate::backend::commit::SINGLE_FLUSH_BLOCKS;
use crate::backend::snapshot::RECLAIM_BATCH;
use crate::error::{err, Errno, Result};
use crate::log::block::capacity;
use crate::types::{StatFs, NAME_MAX};
use std::sync::atomic::Ordering::Relaxed;

/// Blocks of a delta commit besides its data, leaves and records: the
/// commit block, the partly filled last log block, the reserved next log
/// block, and a fresh log head with the orphan list.
const COMMIT_FIXED: u64 = 8;
/// Bytes of the records a delta commit logs (`Record::size`): the largest
/// kind (LeafMap), a Balloc, Bfree, Reclaim (or Orphan) record, a Dead (or
/// BlockSum) record.
const LARGEST_RECORD: u64 = 25;
const RANGE_RECORD: u64 = 13;
const DEAD_RECORD: u64 = 17;
/// Branches one change may make the next unify write, besides those the
/// last freeze counted: up to three trees (a directory, the inode table,
/// a file or xattr file), each redirected leaf dirtying the path above it
/// and a split adding a branch per level, at depth 3 or less (a tree of
/// depth 3 holds a million leaves).
const CHANGE_BRANCHES: u64 = 8;
/// Bitmap blocks a unify's own allocations may dirty beyond those dirty
/// when it starts, and the bitmap file's leaves and branches.
const BITMAP_MARGIN: u64 = 16;
/// Blocks of the snapshot table a snapshot asked for takes at the unify.
pub(super) const SNAPSHOT_BLOCKS: u64 = 4;
/// What one change adds to the reserve besides the blocks it reserves:
/// its branches and the log block of its records. A change must leave room
/// for it (S1).
const CHANGE_GROWTH: u64 = CHANGE_BRANCHES + 1;

/// What a volume keeps back from ordinary changes, in blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reserve {
    /// The open delta's commit: its log (every record it holds and will
    /// hold for its allocations, frees, dead extents and reclaim) and the
    /// fixed blocks of a commit. (An fsync commit's log comes out of the
    /// space ordinary changes may take, or the delta is committed instead.)
    pub commit: u64,
    /// A unify after that commit: every node it rewrites (branches, the
    /// snapshot table's and the bitmap file's changed nodes), the changed
    /// bitmap blocks' new homes.
    pub unify: u64,
    /// Room for changes that free space (unlink, rmdir, truncate, punch),
    /// whose own leaves and log the reservations above do not cover.
    pub headroom: u64,
}

impl Reserve {
    pub fn total(&self) -> u64 {
        self.commit + self.unify + self.headroom
    }

    /// What a change may not use: the whole reserve, or for a change that
    /// frees space the commit, the unify and half the headroom (the other
    /// half is for the log of what it frees, which only its commit turns
    /// into free space).
    pub fn kept_from(&self, releases: bool) -> u64 {
        if releases {
            self.commit + self.unify + self.headroom / 2
        } else {
            self.total()
        }
    }
}

/// Headroom for changes that free space: a five-hundredth of the volume,
/// at least 32 and at most 1024 blocks.
pub fn headroom(blocks: u64) -> u64 {
    (blocks / 512).clamp(32, 1024)
}

impl Volume {
    /// Refuse changes on a read-only or failed volume; reserve `blocks` of
    /// space for the change (committing first if pinned frees could help).
    /// ENOSPC once what is left would not cover the reserve (S1).
    pub(super) fn begin_change(&mut self, blocks: u64) -> Result<()> {
        self.reserve(blocks, false)
    }

    /// Like `begin_change`, for changes that free space (unlink, rmdir,
    /// truncate down, punch hole): they may use the reserve's headroom, so
    /// a full volume can always be emptied.
    pub(super) fn begin_release(&mut self, blocks: u64) -> Result<()> {
        self.reserve(blocks, true)
    }

    fn reserve(&mut self, blocks: u64, releases: bool) -> Result<()> {
        if self.be.read_only || self.failed {
            return err(Errno::EROFS);
        }
        self.changed.store(true, Relaxed);
        let need = blocks + CHANGE_GROWTH;
        if self.room(releases) < need {
            // The reserve counts what each change since the last count may
            // add to a unify; count what they did add.
            self.count_unify_work();
        }
        if self.room(releases) < need {
            // The open delta's reservations and frees come back once it
            // is committed.
            self.commit(false)?;
            if self.room(releases) < need {
                return err(Errno::ENOSPC);
            }
        }
        self.reserved.fetch_add(blocks, Relaxed);
        self.changes.fetch_add(1, Relaxed);
        Ok(())
    }

    /// Blocks still free for ordinary changes: after every promise and the
    /// whole reserve.
    pub(super) fn spare(&self) -> u64 {
        self.room(false)
    }

    /// Blocks a change may still take: what no one has promised, less
    /// what the reserve keeps from it (`Reserve::kept_from`).
    fn room(&self, releases: bool) -> u64 {
        let kept = self.reserve_now().kept_from(releases);
        self.be
            .alloc
            .available()
            .saturating_sub(self.reserved.load(Relaxed))
            .saturating_sub(kept)
    }

    /// The reserve as the volume stands: O(1), from counts the allocator,
    /// the log writer and the open delta keep, and the nodes the last
    /// freeze counted (`unify_work`).
    pub fn reserve_now(&self) -> Reserve {
        let be = &self.be;
        let alloc = &be.alloc;
        // Changes since the trees were last counted: each may dirty three
        // leaves, and with them the branches above.
        let uncounted = self.changes.load(Relaxed).saturating_sub(self.counted_changes);
        // The bytes of the open delta's log (`Record::size`): its records;
        // a LeafMap or LeafUnmap per leaf its changes dirty (at most one
        // per node counted, three per change since); a Balloc per
        // range it allocated and per block promised to it (its commit
        // allocates them, each maybe a range of its own); a Bfree per range
        // it freed and a Dead per extent a snapshot holds, before
        // coalescing; the BlockSums of a small commit; a reclaim batch (a
        // Reclaim and a Bfree per extent).
        let ranges = alloc.delta_allocs.len() + alloc.delta_frees.len();
        let mut bytes = be.records.len() as u64 * LARGEST_RECORD
            + (3 * uncounted + self.unify_work) * LARGEST_RECORD
            + (ranges as u64 + self.reserved.load(Relaxed)) * RANGE_RECORD
            + alloc.dying.len() as u64 * DEAD_RECORD
            + SINGLE_FLUSH_BLOCKS as u64 * DEAD_RECORD;
        if be.snaps.reclaiming() {
            bytes += 2 * RECLAIM_BATCH as u64 * RANGE_RECORD;
        }
        let per_block = capacity(be.bs) as u64;
        let commit = COMMIT_FIXED + bytes.div_ceil(per_block);
        // A unify: the nodes counted at the last freeze and the branches
        // the changes since may add; a new home for every changed bitmap
        // block (the unify's own allocations dirty a few more); the
        // snapshot table's dead extents of this delta and the snapshots
        // asked for; the orphan list's fresh log head.
        let dead = (alloc.dying.len() as u64 * DEAD_RECORD).div_ceil(per_block);
        let orphans = (be.orphans.len() as u64 * RANGE_RECORD).div_ceil(per_block);
        let unify = self.unify_work
            + CHANGE_BRANCHES * uncounted
            + alloc.dirty.len() as u64
            + BITMAP_MARGIN
            + dead
            + orphans
            + SNAPSHOT_BLOCKS * be.snaps.pending.len() as u64;
        Reserve {
            commit,
            unify,
            headroom: headroom(alloc.blocks()),
        }
    }

    /// Count what the next unify (and the delta commit it starts with)
    /// writes of the trees as they are now: the changed nodes of every
    /// tree with work for it — the inode table, the trees of the files
    /// changed in the open delta or waiting for a unify, the bitmap file
    /// and the snapshot table. After a freeze, at open, and when the
    /// estimate (`CHANGE_BRANCHES` per change since) leaves too little
    /// room: the changes counted are then part of the count.
    pub(super) fn count_unify_work(&mut self) {
        let mut n = self.be.itable.get_mut().unify_nodes();
        n += self.be.bitmap.unify_nodes();
        n += self.be.snaps.tree.unify_nodes();
        let mut inos: Vec<_> = self.cache.unify_pending.iter().copied().collect();
        inos.extend(self.cache.dirty.get_mut().iter().copied());
        inos.sort_unstable();
        inos.dedup();
        for ino in inos {
            if let Some(i) = self.cache.get_mut(ino) {
                n += i.tree.unify_nodes();
            }
        }
        self.unify_work = n;
        self.counted_changes = *self.changes.get_mut();
    }

    /// A unify now would have to find room for frees that are still
    /// pinned: the open delta frees blocks, and what no one has promised
    /// does not cover the commit and the unify. Committing the delta first
    /// (a plain delta commit, which the reserve always covers) turns those
    /// frees into free space before the unify needs it.
    pub(crate) fn frees_first(&self) -> bool {
        let frees = !self.be.alloc.delta_frees.is_empty() || self.be.snaps.reclaiming();
        frees && self.room(true) == 0
    }

    /// Reserve `blocks` for a change without exclusive access; `None` when
    /// the space is not there now (the exclusive path commits to make room,
    /// or fails with ENOSPC).
    pub(super) fn reserve_shared(&self, blocks: u64) -> Option<Result<()>> {
        let r = self.reserve_shared_as(blocks, false);
        if matches!(r, Some(Ok(()))) {
            self.changed.store(true, Relaxed);
        }
        r
    }

    /// [`Volume::reserve_shared`] for changes that free space (see
    /// `begin_release`).
    pub(super) fn reserve_release_shared(&self, blocks: u64) -> Option<Result<()>> {
        let r = self.reserve_shared_as(blocks, true);
        if matches!(r, Some(Ok(()))) {
            self.changed.store(true, Relaxed);
        }
        r
    }

    /// The two above, without marking the delta changed (a lazy access
    /// time's change).
    pub(super) fn reserve_shared_as(&self, blocks: u64, releases: bool) -> Option<Result<()>> {
        if self.be.read_only || self.failed {
            return Some(err(Errno::EROFS));
        }
        let kept = self.reserve_now().kept_from(releases);
        let room = self.be.alloc.available().saturating_sub(kept);
        let need = blocks + CHANGE_GROWTH;
        let mut held = self.reserved.load(Relaxed);
        loop {
            if room.saturating_sub(held) < need {
                return None;
            }
            match self
                .reserved
                .compare_exchange_weak(held, held + blocks, Relaxed, Relaxed)
            {
                Ok(_) => break,
                Err(now) => held = now,
            }
        }
        self.changes.fetch_add(1, Relaxed);
        Some(Ok(()))
    }

    /// Space as `df` shows it. `blocks_free`: blocks the allocator can
    /// hand out now, less those promised to the open delta's changes (its
    /// dirty data, allocated at its commit); `blocks_avail`: what an
    /// ordinary change may still take, less the reserve and the share of
    /// it the change itself adds. Inodes have no
    /// table of fixed size: `files_free` is what the space an ordinary
    /// change may take could hold (an inode record is at most a few dozen
    /// bytes of an inode-table leaf, counted as 64), and `files` that plus
    /// the inodes in use (numbers given out, as the highest one bounds them).
    pub fn statfs(&self) -> Result<StatFs> {
        let bs = self.be.bs as u64;
        let free = self
            .be
            .alloc
            .available()
            .saturating_sub(self.reserved.load(Relaxed));
        // What one more change could write: the room it must leave for
        // its own share of the reserve does not count.
        let avail = self.spare().saturating_sub(CHANGE_GROWTH);
        let in_use = self.max_ino.load(Relaxed);
        let files_free = avail.saturating_mul(bs / 64).min((1 << 48) - in_use.min(1 << 48));
        Ok(StatFs {
            block_size: bs as u32,
            blocks: self.be.alloc.blocks(),
            blocks_free: free,
            blocks_avail: avail,
            files: files_free.saturating_add(in_use),
            files_free,
            name_max: NAME_MAX as u32,
        })
    }
}
