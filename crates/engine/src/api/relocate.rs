//! API layer: a shrink's relocation (`Fs::resize`, api/resize.rs) —
//! everything in use past the new end moved below it, in bounded steps.
//! File data goes in batches of 32 MiB (at most a quarter of the dirty
//! limit), each in three steps: its pieces planned under the delta guard
//! (where they lie now), read without it (`frontend/relocate_read.rs`:
//! runs of up to 1 MiB, one at a time) while the batch before is written, then
//! made dirty under the guard a chunk of 256 blocks at a time, each block
//! taking what was read only if it is still mapped where it was read
//! from (else as the guarded path has it: a newer page kept, the device
//! read again). Once the batch before is written, the batch's commit is
//! started (by the delta committer, or here on a volume without one).
//! Tree nodes and preallocated blocks take a delta commit every 4,096.
//! Other operations and their fsyncs wait at most one chunk for the
//! guard, and the device has at most about one batch of the shrink's
//! writes queued ahead of theirs.
//!
//! The inode table is walked in number order: each inode's tree nodes past
//! the end are marked dirty and its data there queued for a batch
//! (`frontend/relocate.rs`); then the volume's own trees. When a snapshot
//! may hold blocks past the end, a survey (the same walk, changing
//! nothing) comes first, and the shrink is refused with EBUSY naming the
//! snapshots before anything moves.
//!
//! Calls the frontend (`Volume::relocate_*`, `Prefetched`,
//! `snapshots_past`) and the commit pipeline.

use super::relocate_shared::Claims;
use super::Fs;
use crate::error::{Error, Result};
use crate::frontend::Prefetched;
use crate::types::Ino;
use std::collections::VecDeque;

/// Blocks made dirty under one hold of the delta guard.
const CHUNK_BLOCKS: u64 = 256;
/// Bytes of data moved per delta commit (and at most a quarter of the
/// dirty limit): one batch is written while the next is read, so the
/// writes in flight stay within one batch.
const BATCH_BYTES: u64 = 32 << 20;
/// Tree nodes marked dirty per delta commit, about.
const BATCH_NODES: u64 = 4096;
/// Inodes listed from the inode table at a time.
const LIST_INODES: usize = 256;

/// What a walk over the volume found past the end.
#[derive(Default)]
struct Walked {
    /// Data and preallocated blocks moved, tree nodes marked.
    blocks: u64,
    /// The oldest birth a snapshot holds there.
    held: Option<u32>,
}

impl Walked {
    fn hold(&mut self, birth: Option<u32>) {
        if let Some(b) = birth {
            self.held = Some(self.held.map_or(b, |h| h.min(b)));
        }
    }
}

impl Fs {
    /// Move everything in use at or past block `limit` (the allocator's
    /// limit already) below it: EBUSY naming the snapshots that hold
    /// blocks there, changing nothing; ENOSPC if the room runs out (what
    /// moved stays moved, below the end, and the volume keeps its size).
    /// Returns the blocks moved or marked.
    pub(super) fn relocate(&self, limit: u64) -> Result<u64> {
        // What deleted snapshots alone held goes first.
        self.snapshot_reclaim(&mut |_| ())?;
        if self.vol().snapshots_may_hold(limit) {
            let survey = self.walk(limit, true)?;
            let names = self.vol().snapshots_past(limit, survey.held);
            if !names.is_empty() {
                let what = format!(
                    "snapshots hold blocks past the new end ({limit} blocks): {}; \
                     delete them to shrink this far",
                    names.join(", ")
                );
                tracing::warn!("resize: {what}");
                return Err(Error::Busy(what));
            }
        }
        Ok(self.walk(limit, false)?.blocks)
    }

    /// One pass over every inode and the volume's trees; with `survey`
    /// nothing changes.
    fn walk(&self, limit: u64, survey: bool) -> Result<Walked> {
        let bs = u64::from(self.statfs()?.block_size);
        let batch = (BATCH_BYTES.min(self.vol().dirty_limit() / 4) / bs).max(CHUNK_BLOCKS);
        let mut w = Walked::default();
        let mut queue = Queue::default();
        let mut claims = Claims::default();
        let (mut from, mut in_batch) = (0, 0u64);
        loop {
            let inos = self.next_inodes(&mut from)?;
            if inos.is_empty() {
                break;
            }
            for ino in inos {
                let past = self.retrying_enospc(|v| v.relocate_inode(ino, limit, survey))?;
                w.hold(past.held);
                if survey {
                    continue;
                }
                let marked = past.nodes + past.unwritten;
                (w.blocks, in_batch) = (w.blocks + marked, in_batch + marked);
                for (start, count) in past.data {
                    queue.push(ino, start, count);
                }
                for (lblock, count, old) in past.shared {
                    for (start, count) in claims.take(ino, lblock, count, old) {
                        queue.push(ino, start, count);
                    }
                }
                while queue.blocks >= batch {
                    w.blocks += self.move_batch(queue.take(batch), limit)?;
                }
                if in_batch >= BATCH_NODES {
                    self.shared.commit(false)?;
                    in_batch = 0;
                }
            }
        }
        while queue.blocks > 0 {
            w.blocks += self.move_batch(queue.take(batch), limit)?;
        }
        let shared = self.repoint_claims(claims, limit)?;
        if shared > 0 {
            tracing::info!("resize: {shared} blocks of clones pointed at their moved copies");
        }
        let (nodes, held) = self.vol().relocate_tables(limit, survey)?;
        w.hold(held);
        w.blocks += nodes;
        if !survey {
            self.shared.commit(false)?;
        }
        Ok(w)
    }

    /// Move one batch of data, `(ino, from, to)` logical ranges: plan its
    /// pieces under the guard, read them without it (while the batch
    /// before is written), make them dirty under it a chunk at a time,
    /// then start the batch's commit. Returns the blocks made dirty.
    fn move_batch(&self, ranges: Vec<(Ino, u64, u64)>, limit: u64) -> Result<u64> {
        let mut parts = Vec::new();
        for &(ino, from, to) in &ranges {
            parts.extend(self.vol().relocate_plan(ino, from, to, limit)?);
        }
        let dev = self.device();
        let mut pieces = Prefetched::plan(parts, u64::from(dev.block_size()));
        pieces.read(dev.as_ref());
        let mut moved = 0;
        for (ino, from, to) in ranges {
            let mut at = from;
            while at < to {
                let end = (at + CHUNK_BLOCKS).min(to);
                moved += self.retrying_enospc(|v| v.relocate_chunk(ino, at, end, limit, &pieces))?;
                at = end;
            }
        }
        self.next_batch()?;
        Ok(moved)
    }

    /// The next inodes of the inode table in number order, from `*from`
    /// on (at most [`LIST_INODES`]), moving `*from` past them; none at the
    /// end. The inodes a walk loaded before are trimmed from the cache
    /// first when it is over its bound. Shrink and defrag walk with it.
    pub(super) fn next_inodes(&self, from: &mut u64) -> Result<Vec<crate::types::Ino>> {
        if self.vol().wants_trim() {
            self.shared.trim_inodes();
        }
        let inos = self.vol().inodes_from(*from, LIST_INODES)?;
        if let Some(&last) = inos.last() {
            *from = last + 1;
        }
        Ok(inos)
    }

    /// A batch of data is dirty: once the batch before it is written, start
    /// its commit (by the delta committer, or here on a volume without
    /// one) and go on reading the next.
    fn next_batch(&self) -> Result<()> {
        if self.vol().commit_in_flight() {
            self.shared.with_commit_lock(|| ());
        }
        if !self.commit_soon() {
            self.shared.commit(false)?;
        }
        Ok(())
    }
}

/// Data past the end waiting for a batch: logical ranges of inodes, in
/// the order the walk found them.
#[derive(Default)]
struct Queue {
    ranges: VecDeque<(Ino, u64, u64)>,
    blocks: u64,
}

impl Queue {
    fn push(&mut self, ino: Ino, start: u64, count: u64) {
        self.ranges.push_back((ino, start, start + count));
        self.blocks += count;
    }

    /// The first `max` blocks queued (fewer if fewer are), a range cut
    /// where they end.
    fn take(&mut self, max: u64) -> Vec<(Ino, u64, u64)> {
        let mut out = Vec::new();
        let mut room = max;
        while room > 0 {
            let Some((ino, from, to)) = self.ranges.pop_front() else {
                break;
            };
            let end = to.min(from + room);
            out.push((ino, from, end));
            if end < to {
                self.ranges.push_front((ino, end, to));
            }
            room -= end - from;
            self.blocks -= end - from;
        }
        out
    }
}
