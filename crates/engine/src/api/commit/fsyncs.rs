//! API layer, commit scheduling: the fsync side — fsyncs queued for the
//! next group commit, the fsync committer thread that plans and writes a
//! group's log blocks, and the flusher thread that serves every group
//! written by the time it flushes with that one flush and finishes them in
//! order (the parent module's comment has the locks and their order).
//!
//! Calls the frontend (`fsync_plan`, `encode_log`, `finish`) and the
//! backend's commit jobs, through the parent's `Shared`.

use super::*;

impl Shared {
    /// Make `ino` durable and call `done` with the outcome. A lone fsync
    /// (nothing queued, no fsync commit under way) that an fsync commit can
    /// serve at once is committed right here, on the caller's thread, which
    /// saves waking the committer; any other is queued for the next group
    /// commit.
    pub(in crate::api) fn fsync(&self, ino: Ino, done: FsyncDone) {
        {
            let mut q = self.fsyncs.lock();
            if q.committing || !q.waiting.is_empty() || q.stop || self.flushes.count() > 0 {
                q.waiting.push((ino, done));
                drop(q);
                self.fsync_wake.notify_one();
                return;
            }
            q.committing = true;
        }
        let r = self.fsync_group(&[ino], false);
        let mut q = self.fsyncs.lock();
        q.committing = false;
        let r = match r {
            Some(r) => r,
            None => {
                q.waiting.push((ino, done));
                drop(q);
                self.fsync_wake.notify_one();
                return;
            }
        };
        // Queued fsyncs (or a stopping committer) waited for this one;
        // with neither, the committer sleeps on and is not woken.
        let wake = !q.waiting.is_empty() || q.stop;
        drop(q);
        if wake {
            self.fsync_wake.notify_one();
        }
        done(r);
    }

    /// The committer waits for a large group's flush (for tests).
    pub(in crate::api) fn committer_holds_back(&self) -> bool {
        self.holding_back.load(Ordering::SeqCst)
    }

    /// A delta commit waits for fsync commits ahead of it (for tests).
    pub(in crate::api) fn delta_waits_for_fsyncs(&self) -> bool {
        self.delta_waits_for_fsyncs.load(Ordering::SeqCst)
    }

    /// Queue fsyncs of several inodes at once: the committer takes them as
    /// one group.
    pub(in crate::api) fn queue_fsyncs(&self, fsyncs: Vec<(Ino, FsyncDone)>) {
        self.fsyncs.lock().waiting.extend(fsyncs);
        self.fsync_wake.notify_one();
    }

    /// Fsyncs queued and not yet taken by a commit.
    pub(in crate::api) fn queued_fsyncs(&self) -> usize {
        self.fsyncs.lock().waiting.len()
    }

    /// The fsync committer: waits for queued fsyncs, then commits every
    /// queued inode at once — one log write for the whole group — and hands
    /// the job to the flusher (`run_flusher`), which answers them once its
    /// flush returns. Fsyncs that arrive meanwhile form the next group,
    /// written while the flusher waits; batching comes only from commits
    /// being busy, there is no timed wait.
    pub(super) fn run_fsync_committer(&self) {
        std::thread::scope(|s| {
            let (to_flusher, flusher) = bounded::<Written>(FLUSH_QUEUE);
            let flusher_thread = std::thread::Builder::new()
                .name("tux3-flush".into())
                .spawn_scoped(s, move || self.run_flusher(flusher));
            if let Err(e) = flusher_thread {
                tracing::error!("no flusher thread ({e}): fsync commits flush one at a time");
                self.commit_fsyncs(None);
                return;
            }
            self.commit_fsyncs(Some(&to_flusher));
        });
    }

    /// The committer's loop: each group is committed whole here, or written
    /// here and flushed by the flusher behind `to_flusher`.
    pub(super) fn commit_fsyncs(&self, to_flusher: Option<&Sender<Written>>) {
        loop {
            {
                let mut q = self.fsyncs.lock();
                while (q.waiting.is_empty() || q.committing) && !q.stop {
                    self.fsync_wake.wait(&mut q);
                }
                // On stop, an inline commit still finishes on its thread.
                while q.committing {
                    self.fsync_wake.wait(&mut q);
                }
                if q.waiting.is_empty() {
                    return;
                }
                q.committing = true;
            }
            let group = std::mem::take(&mut self.fsyncs.lock().waiting);
            let mut inos: Vec<Ino> = group.iter().map(|(ino, _)| *ino).collect();
            inos.sort_unstable();
            inos.dedup();
            let written = to_flusher.and_then(|_| self.try_fsync_write(&inos));
            let r = match written {
                Some(r) => r,
                None => {
                    // Committed whole here: only after the groups before it
                    // have finished, so that groups finish in chain order.
                    self.flushes.wait_none();
                    self.fsync_group(&inos, true)
                        .unwrap_or(Err(Error::Posix(crate::error::Errno::EIO)))
                        .map(|()| None)
                }
            };
            // Counted in `flushes` already: an fsync that comes now queues
            // for the next group instead of committing inline.
            self.fsyncs.lock().committing = false;
            match (r, to_flusher) {
                (Ok(Some(job)), Some(tx)) => {
                    let large = group.len() >= PIPELINE_BELOW;
                    if let Err(back) = tx.send(Written { job, group }) {
                        // The flusher is gone (it never is while we run).
                        self.flush_and_finish(vec![back.into_inner()]);
                    }
                    // A large group is batching well already: the next one
                    // waits for its flush and grows meanwhile, rather than
                    // start early and cost a commit per fewer fsyncs.
                    if large {
                        self.holding_back.store(true, Ordering::SeqCst);
                        self.flushes.wait_none();
                        self.holding_back.store(false, Ordering::SeqCst);
                    }
                }
                (r, _) => {
                    let r = r.map(drop);
                    for (_, done) in group {
                        done(shared_outcome(&r));
                    }
                }
            }
        }
    }

    /// The flusher: takes the jobs the committer wrote, all that are
    /// waiting at once, and makes them durable with one flush.
    pub(super) fn run_flusher(&self, jobs: Receiver<Written>) {
        while let Ok(first) = jobs.recv() {
            let mut batch = vec![first];
            batch.extend(jobs.try_iter());
            self.flush_and_finish(batch);
        }
    }

    /// One flush for `batch` (each written before it was issued), then
    /// each job finished in the order they were written, and their fsyncs
    /// answered.
    pub(super) fn flush_and_finish(&self, mut batch: Vec<Written>) {
        let mut r = Ok(());
        if let Some((last, rest)) = batch.split_last_mut() {
            guard::assert_unguarded("an fsync group's flush");
            r = last.job.flush_urgent();
            if r.is_ok() {
                for w in rest {
                    w.job.flushed_by_another();
                }
            }
        }
        let mut outcomes = Vec::with_capacity(batch.len());
        let mut retired = Vec::with_capacity(batch.len());
        {
            let mut vol = self.vol();
            for w in batch {
                let mine = match &r {
                    Ok(()) => Ok(()),
                    Err(e) => Err(Error::Posix(e.errno())),
                };
                match vol.finish(w.job, mine) {
                    Ok(gone) => {
                        retired.push(gone);
                        outcomes.push((Ok(()), w.group));
                    }
                    Err(e) => outcomes.push((Err(e), w.group)),
                }
                self.flushes.end();
            }
        }
        drop(retired);
        for (r, group) in outcomes {
            for (_, done) in group {
                done(shared_outcome(&r));
            }
        }
    }

    /// Plan an fsync commit of `inos` and write its log blocks, counted in
    /// `flushes`, the log's tail passed on: the caller has it flushed.
    /// `Ok(None)` when nothing of theirs is pending; `None` when they need
    /// a full commit or the delta commit in flight (as
    /// [`Shared::try_fsync_commit`]).
    pub(super) fn try_fsync_write(&self, inos: &[Ino]) -> Option<Result<Option<CommitJob>>> {
        if self.fsync_strict {
            return None;
        }
        let log = self.log.lock();
        let mut job = match self.plan_fsync(inos)? {
            Ok(Some(job)) => job,
            other => return Some(other),
        };
        guard::assert_unguarded("an fsync commit's log writes");
        if let Err(e) = job.write_log_blocks_urgent() {
            // Finishing a failed job only hands its error back.
            return Some(match self.vol().finish(job, Err(e)) {
                Err(e) => Err(e),
                Ok(_) => Err(Error::Posix(crate::error::Errno::EIO)),
            });
        }
        self.vol().fsync_written(&mut job);
        self.flushes.begin();
        drop(log);
        Some(Ok(Some(job)))
    }

    /// Make `inos` durable: by an fsync commit if they qualify — ahead of
    /// a delta commit writing its data if they need nothing from it — else
    /// by a full commit (after the one in flight). Without `wait`, `None`
    /// instead of waiting for a commit in flight.
    pub(super) fn fsync_group(&self, inos: &[Ino], wait: bool) -> Option<Result<()>> {
        if !self.fsync_strict {
            if let Some(r) = self.try_fsync_commit(inos) {
                return Some(r);
            }
        }
        let turn = if wait {
            self.durability.turn()
        } else {
            self.durability.try_turn()?
        };
        if self.fsync_strict {
            return Some(self.commit_locked(&turn, false, During::none()));
        }
        Some(match self.try_fsync_commit(inos) {
            Some(r) => r,
            None => self.commit_locked(&turn, false, During::none()),
        })
    }

    /// An fsync commit of `inos`, if one can serve them now; `None` when
    /// they need a full commit or the delta commit in flight.
    pub(super) fn try_fsync_commit(&self, inos: &[Ino]) -> Option<Result<()>> {
        let _log = self.log.lock();
        let mut job = match self.plan_fsync(inos)? {
            Ok(Some(job)) => job,
            other => return Some(other.map(drop)),
        };
        guard::assert_unguarded("an fsync commit's writes and flush");
        let r = job.write();
        Some(self.vol().finish(job, r).map(drop))
    }

    /// Plan an fsync commit of `inos`; the caller holds the log's tail.
    /// `Ok(None)`: nothing of theirs is pending; `None`: they need a full
    /// commit or the delta commit in flight.
    pub(super) fn plan_fsync(&self, inos: &[Ino]) -> Option<Result<Option<CommitJob>>> {
        match self.vol().fsync_plan(inos) {
            Err(e) => Some(Err(e)),
            Ok(FsyncPlan::Nothing) => Some(Ok(None)),
            Ok(FsyncPlan::Full | FsyncPlan::Wait) => None,
            Ok(FsyncPlan::Job(job)) => Some(Ok(Some(*job))),
        }
    }
}
