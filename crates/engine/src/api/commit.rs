//! API layer: commit scheduling for an open volume — the commit turn that
//! serializes deltas, the delta committer thread (periodic and early
//! commits), and the fsync committer thread that turns concurrent fsyncs
//! into group commits.
//!
//! Calls the frontend (`Volume::freeze`, `encode_log`, `fsync_plan`,
//! `finish`) and the backend's commit jobs; holds the volume (the delta guard, exclusively) only to
//! freeze, encode the log, plan and finish, never across device I/O
//! (P3: each I/O step asserts it, `api/guard.rs`).
//!
//! Two locks order the commits. The commit turn (`Durability`, in
//! `frontend/pipeline.rs` with the pipeline's states and the whole lock
//! order) serializes delta commits (held from freeze to finish); syncs wait
//! on its "durable up to delta N" counter, all woken by each commit's end,
//! instead of queueing on a lock. `log` serializes the log's tail: an fsync commit holds
//! it from plan to finish; a delta commit holds it while it freezes and from
//! encoding its log until its log blocks are written (a unify that starts a
//! fresh log, throughout). So while a delta commit writes its data, an fsync
//! commit may take the tail ahead of it; while it flushes its log, one may
//! follow it (its flush makes both durable). When both are held, the turn
//! is taken first.
//!
//! Fsync commits pipeline: the fsync committer plans a group and writes its
//! log blocks, then hands the job to the flusher thread and passes the
//! log's tail on, so the next group is planned and written while this one
//! waits for its flush. The flusher serves every job written by the time
//! it issues a flush with that one flush, and finishes them in order. A
//! delta commit freezes only once no fsync commit is in flight.

use super::guard::{self, Exclusive};
use super::Ino;
use crate::backend::commit::CommitJob;
use crate::error::{Error, Result};
use crate::frontend::fsync::FsyncPlan;
use crate::frontend::pipeline::{Durability, FsyncFlushes, Turn};
use crate::frontend::Volume;
use crossbeam_channel::{bounded, select, Receiver, Sender};
use parking_lot::{Condvar, Mutex, RwLock};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// Pause between reclaim batches (see [`Worker::delta_committer`]).
const RECLAIM_PAUSE: std::time::Duration = std::time::Duration::from_millis(10);
use std::thread::JoinHandle;

/// Called once with an fsync's outcome, from the fsync committer thread.
pub type FsyncDone = Box<dyn FnOnce(Result<()>) + Send>;

/// State shared by the API, the delta committer and the fsync committer.
pub(super) struct Shared {
    /// The volume, and the delta guard: operations that may run together
    /// hold it shared (`frontend/shared.rs`), everything else (and every
    /// step of a commit that touches the volume) exclusively.
    volume: RwLock<Volume>,
    /// Data checksum mismatches reads have found since open.
    pub(super) data_errors: AtomicU64,
    /// The volume's device writes, begun and ended (read without the guard).
    pub(super) write_epoch: Arc<crate::backend::WriteEpoch>,
    /// Whose turn it is to commit a delta, and which deltas are durable.
    durability: Durability,
    /// Serializes use of the log's tail (see the module comment).
    log: Mutex<()>,
    /// Fsync commits written and waiting for their flush.
    flushes: FsyncFlushes,
    /// Fsyncs waiting for the next group commit.
    fsyncs: Mutex<FsyncQueue>,
    /// Signalled when an fsync is queued or the committer must stop.
    fsync_wake: Condvar,
    /// `fsync` commits the whole delta (strict ordering).
    fsync_strict: bool,
    /// Syncs waiting for a commit to serve them (for tests).
    syncs_waiting: AtomicUsize,
    /// The fsync committer waits for a large group's flush (for tests).
    holding_back: AtomicBool,
    /// A delta commit waits for the fsync commits that went ahead of it
    /// before it encodes its log (for tests).
    delta_waits_for_fsyncs: AtomicBool,
    /// Writes waiting for the commit in flight under dirty pressure (for
    /// tests).
    pub(super) writes_waiting: AtomicUsize,
    /// A commit was asked for without waiting (`Fs::commit_soon`): the
    /// background committer's next wake-up commits even below its limits.
    pub(super) commit_asked: AtomicBool,
}

#[derive(Default)]
struct FsyncQueue {
    waiting: Vec<(Ino, FsyncDone)>,
    /// An fsync commit is being planned or written (by the committer, or
    /// inline by the thread of a lone fsync): fsyncs queue for the next.
    committing: bool,
    stop: bool,
}

/// Every waiter of a group gets the group's outcome; errors other than the
/// first caller's are reduced to their errno (`Error` is not `Clone`).
fn shared_outcome(r: &Result<()>) -> Result<()> {
    match r {
        Ok(()) => Ok(()),
        Err(e) => Err(Error::Posix(e.errno())),
    }
}

impl Shared {
    /// The volume, exclusively: what shared unlinks left for exclusive
    /// access is carried out first (`Volume::settle`), so every exclusive
    /// holder sees it done.
    pub(super) fn vol(&self) -> Exclusive<'_, Volume> {
        let mut v = Exclusive::new(self.volume.write());
        v.settle();
        v
    }

    /// The volume, shared with other operations of the delta.
    pub(super) fn shared_vol(&self) -> guard::Shared<'_, Volume> {
        guard::Shared::new(self.volume.read())
    }

    /// Whether every fsync commits the whole delta (`-o fsync=strict`).
    pub(super) fn fsync_strict(&self) -> bool {
        self.fsync_strict
    }

    pub(super) fn new(volume: Volume, fsync_strict: bool) -> Shared {
        Shared {
            write_epoch: volume.write_epoch(),
            volume: RwLock::new(volume),
            data_errors: AtomicU64::new(0),
            durability: Durability::default(),
            log: Mutex::new(()),
            flushes: FsyncFlushes::default(),
            fsyncs: Mutex::new(FsyncQueue::default()),
            fsync_wake: Condvar::new(),
            fsync_strict,
            syncs_waiting: AtomicUsize::new(0),
            holding_back: AtomicBool::new(false),
            delta_waits_for_fsyncs: AtomicBool::new(false),
            commit_asked: AtomicBool::new(false),
            writes_waiting: AtomicUsize::new(0),
        }
    }

    /// Freeze the delta under the exclusive guard, write it without it
    /// (other operations go on in the next delta meanwhile), then finish.
    /// Callers that find nothing to commit return at once: everything before
    /// them is durable, because commits are serialized.
    /// What the delta committer does when its interval has passed (or,
    /// `early`, when it was woken to commit): commit the open delta,
    /// unless all it holds is access times, which wait for a sync, an
    /// unmount or the next real change (lazytime). Whether it committed.
    pub(super) fn commit_by_time(&self, early: bool) -> Result<bool> {
        if !early && !self.shared_vol().changed_eagerly() {
            return Ok(false);
        }
        self.commit(false)?;
        Ok(true)
    }

    pub(super) fn commit(&self, unify: bool) -> Result<()> {
        // On a full volume a unify finds room only once the open delta's
        // frees are free space: a delta commit goes first
        // (`Volume::frees_first`).
        if unify && self.vol().frees_first() {
            let turn = self.durability.turn();
            self.commit_locked(&turn, false, During::none())?;
        }
        let turn = self.durability.turn();
        self.commit_locked(&turn, unify, During::none())
    }

    /// Make everything before this call durable. Syncs that wait while a
    /// commit is in flight are all served by the next one: a sync returns
    /// without committing again once a commit frozen after it was called
    /// is durable.
    pub(super) fn sync(&self) -> Result<()> {
        let want = self.durability.open_delta();
        self.syncs_waiting.fetch_add(1, Ordering::SeqCst);
        let turn = self.durability.wait_or_turn(want);
        self.syncs_waiting.fetch_sub(1, Ordering::SeqCst);
        match turn {
            None => Ok(()),
            Some(turn) => self.commit_locked(&turn, false, During::none()),
        }
    }

    /// Syncs waiting for a commit (for tests).
    pub(super) fn syncs_waiting(&self) -> usize {
        self.syncs_waiting.load(Ordering::SeqCst)
    }

    /// [`Shared::commit`], running `during` once at `phase` of the commit
    /// (for tests): where fsync commits may go ahead of it, or follow it.
    pub(super) fn commit_with(&self, unify: bool, phase: Phase, during: impl FnOnce()) -> Result<()> {
        let turn = self.durability.turn();
        self.commit_locked(&turn, unify, During::new(phase, during))
    }

    /// Run `f` once no commit of either kind is in flight (and none can
    /// start until `f` returns).
    pub(super) fn with_commit_lock<T>(&self, f: impl FnOnce() -> T) -> T {
        let _turn = self.durability.turn();
        let _log = self.quiet_log();
        f()
    }

    /// Steps of an eviction pass (`frontend/evict.rs`), each under an
    /// exclusive hold of its own so that operations go on between them,
    /// until the inode cache is back within its bound or a step finds
    /// nothing to let go of. Needs no commit turn: a step while a delta
    /// commit is in flight lets go of nothing.
    pub(super) fn trim_inodes(&self) {
        loop {
            let (evicted, more) = {
                let mut v = self.vol();
                let evicted = v.trim_inodes();
                (evicted, v.wants_trim())
            };
            drop(evicted);
            if !more {
                return;
            }
        }
    }

    /// The log's tail, once no fsync commit is in flight: none can start
    /// while it is held, and those waiting for their flush end without it.
    fn quiet_log(&self) -> parking_lot::MutexGuard<'_, ()> {
        let log = self.log.lock();
        self.flushes.wait_none();
        log
    }

    /// A full commit; the caller holds the commit turn.
    fn commit_locked<F: FnOnce()>(&self, turn: &Turn, unify: bool, mut during: During<F>) -> Result<()> {
        let log = self.quiet_log();
        let number = turn.number();
        let Some(mut job) = self.vol().freeze(unify)? else {
            // Nothing in it: it is as durable as every delta before it.
            turn.durable(number);
            // Still a turn to keep the inode cache within its bound (one
            // step: the commit thread takes the rest after the turn; the
            // inodes freed once the volume is let go).
            drop(log);
            let evicted = self.vol().trim_inodes();
            drop(evicted);
            return Ok(());
        };
        // A unify that starts a fresh log keeps it to itself; any other
        // commit lets fsync commits go ahead while it writes its data.
        let log = if job.holds_log() {
            Some(log)
        } else {
            drop(log);
            None
        };
        guard::assert_unguarded("a delta commit's data writes");
        let mut r = job.write_data();
        during.at(Phase::Data, job.holds_log());
        // Fsync commits that went ahead of it may still wait for their
        // flush: its log blocks go after theirs only once they are durable,
        // so that whatever of the log is not yet durable is at most one
        // delta commit and the fsync commits that follow it (what fsck
        // accepts at the end of the log after a crash).
        let mut log = Some(log.unwrap_or_else(|| {
            let log = self.log.lock();
            if self.flushes.count() > 0 {
                self.delta_waits_for_fsyncs.store(true, Ordering::SeqCst);
                self.flushes.wait_none();
                self.delta_waits_for_fsyncs.store(false, Ordering::SeqCst);
            }
            log
        }));
        if r.is_ok() {
            r = self.vol().encode_log(&mut job);
        }
        if r.is_ok() {
            guard::assert_unguarded("a delta commit's log writes");
            r = job.write_log_blocks();
        }
        // Its log written, the commit hands the tail on: an fsync commit
        // may follow it while it flushes, and that commit's flush makes
        // both durable. A unify keeps the tail until its superblock.
        if r.is_ok() && !job.holds_log() {
            self.vol().log_written(&job);
            drop(log.take());
            during.at(Phase::LogWritten, false);
        }
        if let Err(e) = r {
            // A failed commit turns the volume read-only before the log's
            // tail is let go (and before a test's callback, which may
            // fsync, runs): nothing may follow blocks that never landed.
            let failed = self.vol().finish(job, Err(e)).map(drop);
            drop(log);
            during.at(Phase::LogWritten, true);
            return failed;
        }
        during.at(Phase::LogWritten, true);
        guard::assert_unguarded("a delta commit's flush");
        let r = job.flush_log();
        let retired = self.vol().finish(job, r)?;
        turn.durable(number);
        // Freed once writers and fsyncs no longer wait on our locks.
        drop(log);
        drop(retired);
        Ok(())
    }

    /// Make `ino` durable and call `done` with the outcome. A lone fsync
    /// (nothing queued, no fsync commit under way) that an fsync commit can
    /// serve at once is committed right here, on the caller's thread, which
    /// saves waking the committer; any other is queued for the next group
    /// commit.
    pub(super) fn fsync(&self, ino: Ino, done: FsyncDone) {
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
    pub(super) fn committer_holds_back(&self) -> bool {
        self.holding_back.load(Ordering::SeqCst)
    }

    /// A delta commit waits for fsync commits ahead of it (for tests).
    pub(super) fn delta_waits_for_fsyncs(&self) -> bool {
        self.delta_waits_for_fsyncs.load(Ordering::SeqCst)
    }

    /// Queue fsyncs of several inodes at once: the committer takes them as
    /// one group.
    pub(super) fn queue_fsyncs(&self, fsyncs: Vec<(Ino, FsyncDone)>) {
        self.fsyncs.lock().waiting.extend(fsyncs);
        self.fsync_wake.notify_one();
    }

    /// Fsyncs queued and not yet taken by a commit.
    pub(super) fn queued_fsyncs(&self) -> usize {
        self.fsyncs.lock().waiting.len()
    }

    /// The fsync committer: waits for queued fsyncs, then commits every
    /// queued inode at once — one log write for the whole group — and hands
    /// the job to the flusher (`run_flusher`), which answers them once its
    /// flush returns. Fsyncs that arrive meanwhile form the next group,
    /// written while the flusher waits; batching comes only from commits
    /// being busy, there is no timed wait.
    fn run_fsync_committer(&self) {
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
    fn commit_fsyncs(&self, to_flusher: Option<&Sender<Written>>) {
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
    fn run_flusher(&self, jobs: Receiver<Written>) {
        while let Ok(first) = jobs.recv() {
            let mut batch = vec![first];
            batch.extend(jobs.try_iter());
            self.flush_and_finish(batch);
        }
    }

    /// One flush for `batch` (each written before it was issued), then
    /// each job finished in the order they were written, and their fsyncs
    /// answered.
    fn flush_and_finish(&self, mut batch: Vec<Written>) {
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
    fn try_fsync_write(&self, inos: &[Ino]) -> Option<Result<Option<CommitJob>>> {
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
    fn fsync_group(&self, inos: &[Ino], wait: bool) -> Option<Result<()>> {
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
    fn try_fsync_commit(&self, inos: &[Ino]) -> Option<Result<()>> {
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
    fn plan_fsync(&self, inos: &[Ino]) -> Option<Result<Option<CommitJob>>> {
        match self.vol().fsync_plan(inos) {
            Err(e) => Some(Err(e)),
            Ok(FsyncPlan::Nothing) => Some(Ok(None)),
            Ok(FsyncPlan::Full | FsyncPlan::Wait) => None,
            Ok(FsyncPlan::Job(job)) => Some(Ok(Some(*job))),
        }
    }
}

/// Groups of fewer fsyncs than this are followed at once by the next
/// group's log write, while they wait for their flush: they wait less, and
/// their callers come back sooner. A larger group is flushed before the
/// next starts, which then serves more fsyncs per commit (what counts when
/// thousands of callers keep the CPUs busy).
const PIPELINE_BELOW: usize = 8;

/// Fsync jobs the flusher holds at most before the committer waits.
const FLUSH_QUEUE: usize = 8;

/// An fsync commit whose log blocks are written, and the fsyncs it serves.
struct Written {
    job: CommitJob,
    group: Vec<(Ino, FsyncDone)>,
}

/// Where in a delta commit a test's callback runs ([`Shared::commit_with`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Phase {
    /// Its data written, before its log is encoded: fsync commits go ahead
    /// of it.
    Data,
    /// Its log written, before its flush: fsync commits follow it. (A unify
    /// that keeps the log to itself runs the callback after its data
    /// instead, and a commit that failed before its flush.)
    LogWritten,
}

/// A callback to run once at a phase of a commit.
struct During<F> {
    phase: Phase,
    f: Option<F>,
}

impl<F: FnOnce()> During<F> {
    fn new(phase: Phase, f: F) -> Self {
        During { phase, f: Some(f) }
    }

    /// Run it if the commit is at its phase (or `anyway`: the phase will
    /// not come).
    fn at(&mut self, now: Phase, anyway: bool) {
        if self.phase == now || anyway {
            if let Some(f) = self.f.take() {
                f();
            }
        }
    }
}

impl During<fn()> {
    fn none() -> Self {
        During {
            phase: Phase::Data,
            f: None,
        }
    }
}

/// A background thread of the volume: the delta committer or the fsync
/// committer. Stopped (and joined) when the `Fs` closes or is dropped.
pub(super) struct Worker {
    stop: Box<dyn Fn() + Send + Sync>,
    thread: JoinHandle<()>,
}

impl Worker {
    /// The thread that ends a delta every `every`, and early when a writer
    /// wakes it through the returned sender because half the dirty limit is
    /// dirty (so the next delta fills while this one is written). It holds
    /// only a weak reference to the volume.
    /// Pause between two reclaim batches of the delta committer: short, so
    /// a deleted snapshot's space comes back in a fraction of a second a
    /// gigabyte, long enough that the batches (each holding the delta
    /// guard for about a millisecond) leave room for everyone else.
    pub(super) fn delta_committer(
        shared: &Arc<Shared>,
        every: std::time::Duration,
    ) -> Result<(Worker, Sender<()>)> {
        let (stop, stopped) = bounded::<()>(1);
        let (wake, woken) = bounded::<()>(1);
        let weak = Arc::downgrade(shared);
        let thread = std::thread::Builder::new()
            .name("tux3-commit".into())
            .spawn(move || {
                // While a deleted snapshot's space is coming back, a batch
                // of it goes out every RECLAIM_PAUSE, not every `every`.
                let mut wait = every;
                loop {
                    let by_time = select! {
                        recv(stopped) -> _ => return,
                        recv(woken) -> r => match r {
                            Ok(()) => false,
                            Err(_) => return,
                        },
                        default(wait) => true,
                    };
                    let Some(shared) = weak.upgrade() else { return };
                    // A stale wake-up (the delta was committed meanwhile) is
                    // ignored, unless a commit was asked for.
                    let asked = shared
                        .commit_asked
                        .swap(false, std::sync::atomic::Ordering::AcqRel);
                    let early = asked || {
                        let v = shared.shared_vol();
                        v.may_commit_early() || v.reclaiming() || v.wants_trim()
                    };
                    if !by_time && !early {
                        continue;
                    }
                    if let Err(e) = shared.commit_by_time(early) {
                        tracing::error!("background commit failed: {e}");
                    }
                    // The commit's end took one step of an eviction pass;
                    // the rest now, outside the commit turn.
                    if shared.shared_vol().wants_trim() {
                        shared.trim_inodes();
                    }
                    wait = if shared.shared_vol().reclaiming() {
                        RECLAIM_PAUSE.min(every)
                    } else {
                        every
                    };
                }
            })?;
        Ok((
            Worker {
                stop: Box::new(move || {
                    let _ = stop.try_send(());
                }),
                thread,
            },
            wake,
        ))
    }

    /// The fsync committer thread (see [`Shared::run_fsync_committer`]).
    /// On stop it answers every fsync already queued before it exits.
    pub(super) fn fsync_committer(shared: &Arc<Shared>) -> Result<Worker> {
        let run = shared.clone();
        let thread = std::thread::Builder::new()
            .name("tux3-fsync".into())
            .spawn(move || run.run_fsync_committer())?;
        let weak = Arc::downgrade(shared);
        Ok(Worker {
            stop: Box::new(move || {
                if let Some(s) = weak.upgrade() {
                    s.fsyncs.lock().stop = true;
                    s.fsync_wake.notify_all();
                }
            }),
            thread,
        })
    }

    pub(super) fn stop(self) {
        (self.stop)();
        let _ = self.thread.join();
    }
}
