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
//!
//! The fsync side (the queue, the fsync committer and the flusher) is in
//! `commit/fsyncs.rs`.

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

mod fsyncs;

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

    /// [`Shared::vol`] if no other operation holds the guard now.
    pub(super) fn try_vol(&self) -> Option<Exclusive<'_, Volume>> {
        let mut v = Exclusive::new(self.volume.try_write()?);
        v.settle();
        Some(v)
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
