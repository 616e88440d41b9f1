//! Frontend layer: the end of a delta. `freeze` hands the backend the
//! delta's dirty state as a commit job (`Backend::prepare`) and clears the
//! delta's books; the steps the API runs around the job's device I/O
//! (`encode_log`, `log_written`, `fsync_written`, `finish`) keep the
//! pipeline's state, and `finish` makes the delta (or fsync commit)
//! durable or turns the volume read-only. `commit`, `sync` and `unify` run
//! the whole sequence under the caller's lock. What a commit leaves to
//! free is a [`Retired`], dropped by the caller once it has let go of the
//! volume.
//!
//! Calls the backend (`Backend::prepare`, `encode_log`, `chain_encoded`,
//! `finish`) and its commit jobs, the pipeline (`pipeline.rs`), and the
//! clean-page books and inode trim (`evict.rs`).

use super::{evict, Volume};
use crate::backend::commit::CommitJob;
use crate::error::{err, Errno, Error, Result};
use crate::types::Ino;
use std::collections::HashSet;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// What a finished commit leaves to free ([`Volume::finish`]): dropping it
/// frees the job's and the written pages' memory.
pub struct Retired {
    _job: CommitJob,
    _pages: Vec<Arc<Vec<u8>>>,
    _trimmed: evict::Trimmed,
}

impl Volume {
    /// End the current delta: commit it (and unify when asked or when the
    /// log has grown past its limit), all under the caller's lock. Does
    /// nothing while another commit's I/O is in flight.
    pub(crate) fn commit(&mut self, unify: bool) -> Result<()> {
        if self.commit_in_flight() {
            return Ok(());
        }
        if unify && self.frees_first() {
            self.commit(false)?;
        }
        let Some(mut job) = self.freeze(unify)? else {
            return Ok(());
        };
        let r = job.write_data();
        let r = r.and_then(|()| self.encode_log(&mut job));
        let r = r.and_then(|()| job.write_log());
        self.finish(job, r).map(drop)
    }

    /// Freeze the current delta into a commit job whose I/O the caller runs
    /// without holding the volume: [`CommitJob::write_data`], then
    /// [`Volume::encode_log`], then [`CommitJob::write_log`], then
    /// [`Volume::finish`]. `None` when there is nothing to commit. Only one
    /// job may be in flight when a delta freezes.
    pub fn freeze(&mut self, unify: bool) -> Result<Option<CommitJob>> {
        self.settle();
        if self.be.read_only {
            return Ok(None);
        }
        if self.failed {
            return err(Errno::EIO);
        }
        let changed = self.changed.load(Relaxed) || self.lazy_changed.load(Relaxed);
        if !(unify || changed && self.delta_dirty()) {
            return Ok(None);
        }
        // The log at its bound makes this commit a unify, unless the
        // delta's frees must become free space first on a full volume
        // (`frees_first`): then the next commit unifies.
        let long = self.be.log.since_unify.len() as u64 >= self.opts.unify_log_blocks;
        let unify = unify || long && !self.frees_first();
        debug_assert!(
            unify || !long || self.frees_first(),
            "P6: a delta commit with the log at its bound is not a unify"
        );
        // (A unify gives trees new roots; an fsync commit that goes ahead
        // of it logs them, and replay keeps the inode table's root instead.)
        let frozen = self.frozen_state();
        match self.be.prepare(&mut self.cache, unify) {
            Ok(mut job) => {
                // Nothing may go ahead of a job that holds the log.
                self.pipeline.freeze((!job.holds_log()).then_some(frozen));
                self.in_flight_bytes += job.data_bytes();
                *self.dirty_bytes.get_mut() = 0;
                *self.reserved.get_mut() = 0;
                *self.changes.get_mut() = 0;
                self.count_unify_work();
                // Reclaim goes on in the next delta while it has work.
                *self.changed.get_mut() = self.be.snaps.reclaiming();
                *self.lazy_changed.get_mut() = false;
                // The delta's books go with the job, freed once the volume
                // is let go; the next delta's start with room for as many
                // entries (no rehash midway through a run of unlinks).
                let books = self.books.get_mut();
                let touched =
                    super::GrowingSet::with_capacity_and_hasher(books.ns_touched.len(), Default::default());
                let names = books.names.sized_like();
                let images = books.freed_images.sized_like();
                let cleared = (
                    std::mem::replace(&mut books.ns_touched, touched),
                    std::mem::replace(&mut books.names, names),
                    std::mem::replace(&mut books.freed_images, images),
                    std::mem::take(&mut books.xattr_files),
                    std::mem::take(self.data_changed.get_mut()),
                    std::mem::take(&mut self.fsync_logged),
                );
                job.keep_until_dropped(Box::new(cleared));
                Ok(Some(job))
            }
            Err(e) => {
                self.fail("freezing a delta", &e);
                Err(e)
            }
        }
    }

    /// The dirty inodes of the open delta whose changes are not all durable
    /// through its fsync commits: not logged by one, or changed since (their
    /// image differs, they have unlogged pages or tree changes, or their
    /// names changed).
    pub(super) fn uncovered(&self) -> HashSet<Ino> {
        let dirty = self.cache.dirty.lock();
        let mut out = HashSet::with_capacity(dirty.len());
        out.extend(dirty.iter().copied().filter(|i| !self.fsync_covered(*i)));
        out
    }

    /// Whether an fsync commit of the open delta made `ino` durable as it
    /// is now: logged there and not changed since (same image, every page
    /// logged, no tree or name change).
    pub(crate) fn fsync_covered(&self, ino: Ino) -> bool {
        // Only an inode an fsync commit logged can be covered: the others
        // (most often all of them) are not looked up in the cache.
        let Some(image) = self.fsync_logged.get(&ino) else {
            return false;
        };
        let Some(i) = self.cache.lock(ino) else {
            return false;
        };
        let books = self.books.lock();
        !books.ns_touched.contains(&ino)
            && !books.names.pending(ino)
            && !i.tree.has_dirty_leaves()
            && !i.pages.any_unlogged()
            && i.attrs.encode() == *image
    }

    /// Between a delta commit's data and its log: encode the log at the
    /// tail as it is now. From here on no fsync commit may go ahead of it.
    pub fn encode_log(&mut self, job: &mut CommitJob) -> Result<()> {
        self.pipeline.encode_log();
        let r = self.be.encode_log(job);
        if let Err(e) = &r {
            self.fail("encoding a commit's log", e);
        }
        r
    }

    /// The delta commit in flight has written its log blocks (completed,
    /// its flush not yet issued): from here on an fsync commit may follow
    /// it in the log ([`Volume::fsync_plan`]), as if it were durable
    /// already — the fsync commit's flush makes it so. Not for a unify that
    /// starts a fresh log (its superblock is the commit).
    pub fn log_written(&mut self, job: &CommitJob) {
        debug_assert!(!job.is_fsync() && !job.holds_log());
        self.pipeline.log_written();
    }

    /// An fsync commit's log blocks are written: the log's tail passes on
    /// (the next fsync commit may be planned and written after it in the
    /// chain) while it waits for its flush.
    pub fn fsync_written(&mut self, job: &mut CommitJob) {
        debug_assert!(job.is_fsync());
        self.be.chain_encoded(job);
        self.pipeline.fsync_written();
        job.hand_on();
    }

    /// The I/O of `job` ended with `result`: on success the delta (or fsync
    /// commit) is durable; on failure the volume refuses further changes.
    /// Returns what the commit leaves to free — the job, with the pages it
    /// holds, and the pages it wrote — for the caller to drop once it has
    /// released the volume (freeing a delta's worth of pages takes
    /// milliseconds, which writers should not wait for).
    pub fn finish(&mut self, job: CommitJob, result: Result<()>) -> Result<Retired> {
        if job.is_fsync() {
            self.pipeline.finish_fsync(job.is_handed_on());
            if !job.is_handed_on() {
                self.be.chain_encoded(&job);
            }
            // Its blocks were placed on the chain and never encoded: no
            // block may follow them.
            if job.log_unwritten() && result.is_ok() {
                let e = Error::Posix(Errno::EIO);
                self.fail("an fsync commit (its log never written)", &e);
            }
        } else {
            self.pipeline.finish_delta();
        }
        self.in_flight_bytes = self.in_flight_bytes.saturating_sub(job.data_bytes());
        if let Err(e) = result {
            let what = match (job.is_fsync(), job.is_unify()) {
                (true, _) => "an fsync commit",
                (false, true) => "a unify commit",
                (false, false) => "a delta commit",
            };
            self.fail(what, &e);
            return Err(e);
        }
        // A commit that failed before this one ended (its log written
        // after the failed one's) may be unreachable in the chain: it is
        // not durable either.
        if self.failed {
            return err(Errno::EIO);
        }
        debug_assert!(
            job.is_flushed(),
            "P4: a commit finished as durable before its final flush"
        );
        self.be.finish(&job);
        let mut pages = Vec::new();
        if !job.is_fsync() {
            let bs = self.bs();
            let clean = self.clean.get_mut();
            let keep_max = clean.admits(bs);
            for ino in &job.inodes {
                if let Some(i) = self.cache.get_mut(*ino) {
                    let before = i.pages.clean_len();
                    i.pages.end_writeback(keep_max, &mut pages);
                    clean.changed(*ino, before, i.pages.clean_len(), bs);
                }
            }
            clean.evict(&mut self.cache, bs, &mut pages);
        }
        let trimmed = if job.is_fsync() {
            evict::Trimmed::default()
        } else {
            self.trim_inodes()
        };
        Ok(Retired {
            _job: job,
            _pages: pages,
            _trimmed: trimmed,
        })
    }

    pub fn sync(&mut self) -> Result<()> {
        if self.be.read_only {
            return Ok(());
        }
        self.commit(false)
    }

    /// Commit and unify, under the caller's lock.
    pub fn unify(&mut self) -> Result<()> {
        if self.be.read_only || self.failed {
            return err(Errno::EROFS);
        }
        self.commit(true)
    }
}
