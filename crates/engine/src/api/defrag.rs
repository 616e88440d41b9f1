//! API layer: [`Fs::defrag`], rewriting a fragmented file so that it lies
//! in as few runs as the free space allows.
//!
//! The file is rewritten in batches of at most [`DefragOptions::batch_bytes`]
//! (and a quarter of the dirty limit), one delta each: before a batch the
//! file's goal is aimed at free room for it, following the batch before
//! (`Volume::defrag_aim`); its blocks are made dirty a small chunk at a
//! time, each chunk under the exclusive delta guard (so that a write
//! racing with defrag is never undone: see `frontend/defrag.rs`); then the
//! delta is committed. Between chunks other operations run.
//!
//! Blocks other files share with it (clones: the shared-extent table
//! counts them) are rewritten too, once, and then every other file that
//! maps them is pointed at the new copy: the inode table is walked for
//! the files mapping the old blocks (`Volume::maps_into`; the walk stops
//! once it has found as many references as the table counts), and then
//! those ranges are shared with the file's new blocks as a shrink shares
//! clones with a moved copy (`api/relocate_shared.rs`): in pieces of up
//! to 256 blocks, each compared once (the new copy against the old
//! blocks, read under the guard) for up to 64 files mapping it. A range
//! whose bytes no longer match the rewritten file's (either was written
//! since) keeps its blocks: it costs space, never data. The old blocks are freed when their last
//! reference goes. Extents a snapshot holds are left alone unless
//! `unshare` (a snapshot cannot be repointed).
//!
//! Calls the frontend (`Volume::defrag_*`) and the commit scheduling.

use super::relocate_shared::Waiting;
use super::Fs;
use crate::error::{Errno, Error, Result};
use crate::types::Ino;

/// Blocks made dirty under one hold of the delta guard.
const CHUNK_BLOCKS: u64 = 256;

/// How [`Fs::defrag`] works.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DefragOptions {
    /// Rewrite extents a snapshot holds too (they then take space twice
    /// while the snapshot lasts: it keeps the old copy). Off: they stay
    /// where they are. Extents other files share (clones) are rewritten
    /// either way, and those files pointed at the new copy.
    pub unshare: bool,
    /// Bytes rewritten per delta, at most.
    pub batch_bytes: u64,
    /// Change nothing: report what a rewrite would do (the bytes it would
    /// rewrite as [`DefragReport::bytes_rewritten`]).
    pub dry_run: bool,
}

impl Default for DefragOptions {
    fn default() -> Self {
        DefragOptions {
            unshare: false,
            batch_bytes: 64 << 20,
            dry_run: false,
        }
    }
}

/// What [`Fs::defrag`] did to one file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DefragReport {
    /// Physically contiguous runs of the file's map before and after.
    pub extents_before: u64,
    pub extents_after: u64,
    /// Bytes rewritten (0: the file needed nothing).
    pub bytes_rewritten: u64,
    /// Bytes still in extents a snapshot holds: what `unshare` would
    /// rewrite, and the space that would take.
    pub shared_bytes: u64,
    /// Bytes of other files' data (or of this file's at another offset)
    /// pointed at the rewritten copy: clones kept shared.
    pub repointed_bytes: u64,
}

impl Fs {
    /// Rewrite regular file `ino` so that each stretch of its data lies in
    /// one run per batch where free space allows, keeping its contents, checksums
    /// and times; `progress(done, total)` is called in blocks. Every batch
    /// is committed before this returns. EISDIR for a directory (its
    /// entries live in tree leaves, not data blocks), EINVAL for other
    /// non-regular files, EROFS on a read-only volume, ENOSPC when no room
    /// is left (the batches committed stay rewritten), EIO for a block
    /// failing its checksum (counted and logged as a read's would be).
    pub fn defrag(
        &self,
        ino: Ino,
        opts: &DefragOptions,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<DefragReport> {
        let (plan, bs, batch) = {
            let mut v = self.vol();
            if v.is_read_only() && !opts.dry_run {
                return Err(Error::Posix(Errno::EROFS));
            }
            let bs = u64::from(v.statfs()?.block_size);
            let batch = (opts.batch_bytes.min(v.dirty_limit() / 4) / bs).max(CHUNK_BLOCKS);
            // A run as long as a batch is as good as a rewrite makes.
            (v.defrag_plan(ino, opts.unshare, batch)?, bs, batch)
        };
        let total = plan.blocks();
        if opts.dry_run {
            return Ok(DefragReport {
                extents_before: plan.extents,
                extents_after: plan.extents,
                bytes_rewritten: total * bs,
                shared_bytes: plan.shared_bytes,
                repointed_bytes: 0,
            });
        }
        let mut report = DefragReport {
            extents_before: plan.extents,
            ..DefragReport::default()
        };
        let r = self.rewrite(ino, &plan.ranges, opts.unshare, batch, &mut |done, dirtied| {
            report.bytes_rewritten += dirtied * bs;
            progress(done, total);
        });
        self.vol().defrag_done(ino);
        self.checked(r)?;
        if !plan.cloned.is_empty() {
            report.repointed_bytes = self.checked(self.repoint(ino, &plan.cloned))? * bs;
        }
        let after = self.vol().defrag_plan(ino, opts.unshare, batch)?;
        report.extents_after = after.extents;
        report.shared_bytes = after.shared_bytes;
        Ok(report)
    }

    /// Make `ranges` of `ino` dirty and commit them, `batch` blocks per
    /// delta; `step(done, dirtied)` after each chunk.
    fn rewrite(
        &self,
        ino: Ino,
        ranges: &[(u64, u64)],
        unshare: bool,
        batch: u64,
        step: &mut dyn FnMut(u64, u64),
    ) -> Result<()> {
        let total: u64 = ranges.iter().map(|r| r.1).sum();
        let (mut done, mut in_batch, mut prefer) = (0, 0, None);
        for &(from, count) in ranges {
            let mut at = from;
            while at < from + count {
                if in_batch == 0 {
                    let want = batch.min(total - done);
                    prefer = Some(self.vol().defrag_aim(ino, prefer, want, total - done)?);
                }
                let to = (at + CHUNK_BLOCKS).min(from + count).min(at + batch - in_batch);
                let dirtied = self.chunk(ino, at, to, unshare)?;
                (done, in_batch) = (done + to - at, in_batch + to - at);
                step(done, dirtied);
                at = to;
                if in_batch >= batch {
                    self.shared.commit(false)?;
                    prefer = self.vol().defrag_follow(ino, to - 1)?;
                    in_batch = 0;
                }
            }
        }
        if in_batch > 0 {
            self.shared.commit(false)?;
        }
        Ok(())
    }

    /// Point every other mapping of the blocks `ino` mapped in `cloned`
    /// (`(lblock, pblock, count)`, before its rewrite) at what `ino` maps
    /// there now, where the bytes are the same (see the module comment).
    /// Returns the blocks repointed.
    fn repoint(&self, ino: Ino, cloned: &[(u64, u64, u64)]) -> Result<u64> {
        let mut old: Vec<(u64, u64, u64)> = cloned.iter().map(|&(l, p, n)| (p, n, l)).collect();
        old.sort_unstable();
        let mut by_lblock = cloned.to_vec();
        by_lblock.sort_unstable();
        let mut left = self.vol().references_left(&old);
        let (mut from, mut waiting) = (0, Waiting::default());
        while left > 0 {
            let inos = self.next_inodes(&mut from)?;
            if inos.is_empty() {
                break;
            }
            for other in inos {
                for (lg, lf, count) in self.vol().maps_into(other, &old)? {
                    left = left.saturating_sub(count);
                    // The old run of `ino` the piece lies in.
                    let k = by_lblock.partition_point(|r| r.0 <= lf).saturating_sub(1);
                    let (l, p, _) = by_lblock[k];
                    let at = p + (lf - l);
                    waiting.add(at, at + count, ino, lf, other, lg);
                }
            }
        }
        self.repoint_waiting(waiting, None)
    }

    /// One chunk; on ENOSPC while a commit is in flight, again after it.
    fn chunk(&self, ino: Ino, from: u64, to: u64, unshare: bool) -> Result<u64> {
        self.retrying_enospc(|v| v.defrag_chunk(ino, from, to, unshare))
    }
}
