//! API layer: making changes durable — fsync and fdatasync (answered at
//! once when nothing needs a commit, else queued for the fsync committer's
//! next group commit), sync, unify, the delta committer's periodic commit,
//! and the hooks tests use to look at or step into the commit pipeline.
//!
//! Calls the commit scheduling (`commit.rs`: `Shared::fsync`, `sync`,
//! `commit`, `commit_with`), the one-shot answer a blocking fsync waits for
//! (`answer.rs`) and the frontend (`Volume::fsync_needless_shared`,
//! `datasync_needless`).

use super::commit::Phase;
use super::{answer, Fs, FsyncDone};
use crate::error::Result;
use crate::types::Ino;

impl Fs {
    /// What the delta committer does each `commit_interval`: commit the
    /// open delta unless it holds access times alone (those wait for a
    /// sync, an unmount or the next real change). Whether it committed.
    pub fn commit_by_time(&self) -> Result<bool> {
        self.shared.commit_by_time(false)
    }

    /// Make `ino`'s data and metadata durable. Fast (the default): only
    /// this inode's changes and the new entry naming it go out, ahead of the
    /// open delta, with one flush; concurrent fsyncs share one commit. With
    /// `fsync_strict`, the whole delta commits (strict ordering).
    /// With `datasync` (fdatasync), nothing is written when only attributes
    /// that reading the data back does not need (times, mode, owner,
    /// xattrs) changed since the data, size and names were last durable;
    /// otherwise it is an fsync (the inode record rides along anyway).
    pub fn fsync(&self, ino: Ino, datasync: bool) -> Result<()> {
        // Answered EIO if the callback is dropped without being called.
        let eio = Err(crate::error::Error::Posix(crate::error::Errno::EIO));
        let (giver, waiter) = answer::for_this_thread(eio);
        self.fsync_then(ino, datasync, Box::new(move |r| giver.give(r)));
        waiter.wait()
    }

    /// [`Fs::fsync`] without waiting: `done` is called with the outcome once
    /// the commit that covers `ino` is durable (from the fsync committer
    /// thread), or at once for an unknown inode or a read-only volume. Every
    /// fsync queued while a commit is in flight joins the next group commit,
    /// so a server can keep thousands of fsyncs waiting on a few threads.
    pub fn fsync_then(&self, ino: Ino, datasync: bool, done: FsyncDone) {
        if let Some(done) = self.fsync_at_once(ino, datasync, done) {
            self.shared.fsync(ino, done);
        }
    }

    /// Answer an fsync that needs no commit — an unknown inode (its error),
    /// a read-only volume or an fdatasync with no data to make durable
    /// (nothing to do) — and give `done` back otherwise.
    fn fsync_at_once(&self, ino: Ino, datasync: bool, done: FsyncDone) -> Option<FsyncDone> {
        // (An inode let go of since its last change is loaded again here,
        // so that the check below runs shared.)
        self.warm(ino);
        let strict = self.shared.fsync_strict();
        let shared = self.shared_vol().fsync_needless_shared(ino, datasync, strict);
        let ready = shared.unwrap_or_else(|| {
            let mut v = self.vol();
            let needless = datasync && !self.shared.fsync_strict() && v.datasync_needless(ino);
            v.getattr(ino).map(|_| v.is_read_only() || needless)
        });
        match ready {
            Err(e) => done(Err(e)),
            Ok(true) => done(Ok(())),
            Ok(false) => return Some(done),
        }
        None
    }

    /// [`Fs::fsync`] of several inodes queued at once, so that one group
    /// commit serves them all (as concurrent fsyncs share one); waits for
    /// all. For tests of group commits.
    #[doc(hidden)]
    pub fn fsync_group(&self, inos: &[Ino]) -> Result<()> {
        let (tx, rx) = crossbeam_channel::unbounded();
        let mut queued = Vec::new();
        for &ino in inos {
            let tx = tx.clone();
            let done: FsyncDone = Box::new(move |r| {
                let _ = tx.send(r);
            });
            if let Some(done) = self.fsync_at_once(ino, false, done) {
                queued.push((ino, done));
            }
        }
        self.shared.queue_fsyncs(queued);
        drop(tx);
        let mut out = Ok(());
        for r in rx.iter() {
            if out.is_ok() {
                out = r;
            }
        }
        out
    }

    /// Make everything done before this call durable: commit the current
    /// delta and wait. Concurrent syncs share one commit (one that froze
    /// after a sync was called serves it).
    pub fn sync(&self) -> Result<()> {
        self.shared.sync()
    }

    /// Writes waiting for the commit in flight, under dirty pressure or for
    /// the space it pins (for tests).
    #[doc(hidden)]
    pub fn pending_writes(&self) -> usize {
        self.shared
            .writes_waiting
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Records that shared unlinks left for the next exclusive holder
    /// (for tests).
    #[doc(hidden)]
    pub fn unsettled_records(&self) -> u64 {
        self.shared_vol().unsettled_len()
    }

    /// Syncs waiting for a commit to serve them (for tests).
    #[doc(hidden)]
    pub fn pending_syncs(&self) -> usize {
        self.shared.syncs_waiting()
    }

    /// [`Fs::sync`], calling `during` while the commit is in flight: after
    /// its data is written, before its log. For tests of what may happen
    /// meanwhile (an fsync commit may go ahead of it); `during` must not
    /// wait for this commit.
    #[doc(hidden)]
    pub fn sync_with(&self, during: impl FnOnce()) -> Result<()> {
        self.shared.commit_with(false, Phase::Data, during)
    }

    /// [`Fs::sync`], calling `during` once the commit's log is written,
    /// before its flush: fsync commits made meanwhile follow it in the log
    /// (see [`Fs::sync_with`]).
    #[doc(hidden)]
    pub fn sync_with_log_written(&self, during: impl FnOnce()) -> Result<()> {
        self.shared.commit_with(false, Phase::LogWritten, during)
    }

    /// [`Fs::unify`], calling `during` while the unify writes its data and
    /// metadata, before its superblock (see [`Fs::sync_with`]).
    #[doc(hidden)]
    pub fn unify_with(&self, during: impl FnOnce()) -> Result<()> {
        self.shared.commit_with(true, Phase::Data, during)
    }

    /// Commit and then unify: write all retained metadata and restart the log.
    pub fn unify(&self) -> Result<()> {
        if self.vol().is_read_only() {
            return Err(crate::error::Error::Posix(crate::error::Errno::EROFS));
        }
        self.shared.commit(true)
    }

    /// Fsyncs waiting to join the next group commit (for tests).
    #[doc(hidden)]
    pub fn pending_fsyncs(&self) -> usize {
        self.shared.queued_fsyncs()
    }

    /// The fsync committer waits for a large group's flush before it takes
    /// the next group (for tests).
    #[doc(hidden)]
    pub fn fsync_committer_holds_back(&self) -> bool {
        self.shared.committer_holds_back()
    }

    /// A delta commit that let fsync commits go ahead of it waits for them
    /// to be durable before it encodes its log (for tests).
    #[doc(hidden)]
    pub fn delta_waits_for_fsyncs(&self) -> bool {
        self.shared.delta_waits_for_fsyncs()
    }
}
