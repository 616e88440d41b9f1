//! Frontend layer: the delta pipeline as one state machine — where a delta
//! commit and an fsync commit are, the only place their states change, the
//! invariants each transition guards (ARCHITECTURE.md, "Pipeline
//! invariants"), and the "durable up to delta N" counter that syncs wait on.
//!
//! ```text
//!  delta N:  open ──freeze──▶ frozen ──encode_log──▶ writing log ──log_written──▶ flushing
//!             ▲    (P1,P2)     (data I/O;             (fsync commits            (fsync commits
//!             │                 fsync commits may      wait)                      may follow)
//!             │                 go ahead: `Frozen`)                                  │
//!             │                                                                      ▼
//!             └────────── delta N+1 is open from the freeze on ◀── finish ── durable (≤ N)
//!                                                                   (P4)     └─ unified, when
//!                                                                               it was a unify
//!  fsync:    idle ──fsync_plan──▶ writing log ──fsync_written──▶ flushing ──finish──▶ durable
//!                 (P1: one writes at    blocks       (the log's tail   (one flush may
//!                  a time; during a                   passes on: the    serve several;
//!                  delta commit only                  next fsync commit they finish in
//!                  while it writes its                may write while   order)
//!                  data, for inodes it                this one flushes)
//!                  allows, or once its
//!                  log is written)
//! ```
//!
//! Fsync commits form a pipeline of their own: while one waits for its
//! flush, the next is planned and writes its log blocks after it in the
//! chain, and that one's flush makes both durable. A delta freezes only
//! when no fsync commit is in flight at all ([`FsyncFlushes::wait_none`]),
//! and encodes its log only once the fsync commits that went ahead of it
//! are durable: what of the log is not durable yet is then at most one
//! delta commit and the fsync commits after it (what fsck accepts at the
//! end of the log after a crash).
//! A commit that finishes after an earlier one failed fails too: the chain
//! passes through the failed one's blocks.
//!
//! A unify is a delta commit that may hold the log to itself (a fresh log):
//! then no fsync commit goes ahead of it (`frozen` is `None`) and it never
//! enters "flushing" separately; its superblock is its commit.
//!
//! Lock order, outermost first (nobody takes an earlier lock while holding
//! a later one):
//! 1. the commit turn ([`Durability::turn`]: one delta commit at a time);
//! 2. the log tail (`api/commit.rs`: an fsync commit from plan to its log
//!    written, a delta commit while it freezes and from its log's encoding
//!    to its log written — each time once no fsync commit is in flight);
//! 3. the volume — the delta guard: shared by the operations of
//!    `frontend/shared.rs`, exclusive for every other operation and for each
//!    step of a commit that touches the volume (never across device I/O);
//! 4. inode locks (`cache/inode.rs`): one, or for a namespace change under
//!    the shared guard its directory (two directories in inode-number
//!    order) and then the inodes their entries name, those taken without
//!    waiting (`try_lock`: a held one sends the change to the exclusive
//!    path), so no two operations wait for each other's inodes;
//! 5. one leaf lock at a time: the dirty set, the data-changed set, the
//!    clean-page books, the open handles, the namespace books, a shard of
//!    the inode map, the inode table (`frontend/load.rs`: held to descend
//!    in memory or to put in place a node read without it), the read
//!    epochs (`backend/readers.rs`: entered while the inode whose tree
//!    leads to the block is still locked), the notes of directories grown
//!    (`InodeCache::note_grown`); or the durability counter's state (never
//!    held across anything). Under the exclusive guard nobody else holds
//!    any of 4 and 5, so the order there is free; or the count of fsync
//!    commits waiting for their flush
//!    ([`FsyncFlushes`], never held across anything);
//! 6. inside the device, its own locks (`device/batch.rs`, `device/file.rs`:
//!    a batch of writes, the wait for urgent I/O), taken by a device call
//!    and let go before it returns; a device call takes nothing above.
//!
//! Beside that order, the fsync queue (`api/commit.rs`: `Shared::fsyncs`,
//! the fsyncs waiting for the next group commit) is taken with none of
//! 1–5 held and takes none of them; the count of [`FsyncFlushes`] is the
//! one lock looked at under it.
//!
//! Where the pipeline invariants are asserted (debug builds): P1 at each
//! transition below; P2 where a write would change a page a commit holds
//! (`cache/pages.rs`); P3 before each device I/O step of a commit
//! (`api/guard.rs`, called from `api/commit.rs`); P4 in `Volume::finish`;
//! P5 after an exclusive write (`api/file.rs`); P6 in `Volume::freeze`.
//!
//! Calls nothing: the volume owns a [`Pipeline`], the API a [`Durability`].

use super::fsync::Frozen;

#[cfg(feature = "loom")]
use loom::sync::{Condvar, Mutex, MutexGuard};
#[cfg(not(feature = "loom"))]
use std::sync::{Condvar, Mutex, MutexGuard};

/// Where the delta commit in flight is.
pub(super) enum DeltaCommit {
    /// None in flight: the open delta is the only one.
    Idle,
    /// Frozen, writing its data. `Some`: what an fsync commit may go ahead
    /// of it with; `None` for a unify that holds the log (nothing may).
    Data(Option<Frozen>),
    /// Its log encoded at the tail, being written (or a unify writing its
    /// images): fsync commits wait.
    Log,
    /// Its log written, only its flush pending: an fsync commit may follow
    /// it in the chain (its flush makes both durable).
    LogWritten,
}

/// The volume's side of the pipeline: the delta commit in flight and the
/// fsync commits that are. Changed only through the transitions below
/// (under exclusive access to the volume).
pub(super) struct Pipeline {
    delta: DeltaCommit,
    /// An fsync commit is planned and writing its log blocks (it holds the
    /// log's tail).
    fsync_writing: bool,
    /// Fsync commits whose log blocks are written, waiting for their flush.
    fsync_flushing: usize,
}

impl Pipeline {
    pub(super) fn new() -> Pipeline {
        Pipeline {
            delta: DeltaCommit::Idle,
            fsync_writing: false,
            fsync_flushing: 0,
        }
    }

    /// open → frozen.
    pub(super) fn freeze(&mut self, frozen: Option<Frozen>) {
        debug_assert!(
            matches!(self.delta, DeltaCommit::Idle) && !self.fsync_in_flight(),
            "P1: a delta frozen while a commit is in flight"
        );
        self.delta = DeltaCommit::Data(frozen);
    }

    /// frozen → writing log: from here on no fsync commit goes ahead.
    pub(super) fn encode_log(&mut self) {
        debug_assert!(
            matches!(self.delta, DeltaCommit::Data(_)),
            "P1: a log encoded for no frozen delta"
        );
        self.delta = DeltaCommit::Log;
    }

    /// writing log → flushing (not for a unify that holds the log).
    pub(super) fn log_written(&mut self) {
        debug_assert!(
            matches!(self.delta, DeltaCommit::Log),
            "P1: a log written that was not being written"
        );
        self.delta = DeltaCommit::LogWritten;
    }

    /// any → idle: the delta commit ended (durable, or failed).
    pub(super) fn finish_delta(&mut self) {
        debug_assert!(
            !matches!(self.delta, DeltaCommit::Idle),
            "P1: a commit finished that was never frozen"
        );
        self.delta = DeltaCommit::Idle;
    }

    /// fsync idle → writing. The caller has checked that the delta commit
    /// in flight allows it ([`Pipeline::ahead_of`]).
    pub(super) fn plan_fsync(&mut self) {
        debug_assert!(
            !self.fsync_writing,
            "P1: a second fsync commit planned while one writes its log"
        );
        debug_assert!(
            !matches!(self.delta, DeltaCommit::Log | DeltaCommit::Data(None)),
            "P1: an fsync commit planned while a delta commit's log is being written"
        );
        self.fsync_writing = true;
    }

    /// fsync writing → flushing: its log blocks are written, the tail
    /// passes on.
    pub(super) fn fsync_written(&mut self) {
        debug_assert!(
            self.fsync_writing,
            "P1: an fsync commit's log written that was not being written"
        );
        self.fsync_writing = false;
        self.fsync_flushing += 1;
    }

    /// fsync writing or flushing → idle (`written`: it had passed the
    /// tail on).
    pub(super) fn finish_fsync(&mut self, written: bool) {
        if written {
            debug_assert!(
                self.fsync_flushing > 0,
                "P1: an fsync commit finished that was never written"
            );
            self.fsync_flushing -= 1;
        } else {
            debug_assert!(
                self.fsync_writing,
                "P1: an fsync commit finished that was never planned"
            );
            self.fsync_writing = false;
        }
    }

    /// A delta commit is in flight (frozen to finished).
    pub(super) fn delta_in_flight(&self) -> bool {
        !matches!(self.delta, DeltaCommit::Idle)
    }

    pub(super) fn fsync_in_flight(&self) -> bool {
        self.fsync_writing || self.fsync_flushing > 0
    }

    /// What an fsync commit planned now must respect: `None` when it is
    /// behind the delta commit in nothing (none in flight, or its log is
    /// written); `Some(None)` when it must wait; `Some(Some(frozen))` when
    /// it may go ahead of a delta commit writing its data, within `frozen`.
    pub(super) fn ahead_of(&mut self) -> Option<Option<&mut Frozen>> {
        match &mut self.delta {
            DeltaCommit::Idle | DeltaCommit::LogWritten => None,
            DeltaCommit::Data(Some(f)) => Some(Some(f)),
            DeltaCommit::Data(None) | DeltaCommit::Log => Some(None),
        }
    }

    /// [`Pipeline::ahead_of`], read-only.
    pub(super) fn frozen_or_wait(&self) -> Option<Option<&Frozen>> {
        match &self.delta {
            DeltaCommit::Idle | DeltaCommit::LogWritten => None,
            DeltaCommit::Data(Some(f)) => Some(Some(f)),
            DeltaCommit::Data(None) | DeltaCommit::Log => Some(None),
        }
    }

    /// The frozen delta's inodes not durable yet, while fsync commits may
    /// go ahead of it.
    pub(super) fn frozen(&self) -> Option<&Frozen> {
        match &self.delta {
            DeltaCommit::Data(Some(f)) => Some(f),
            _ => None,
        }
    }
}

/// Delta numbers frozen and made durable, and whose turn it is to commit:
/// what syncs wait on. A sync needs the delta open when it was called
/// durable; every waiter wakes when a commit ends and checks its own
/// number, so one commit serves every sync that waited for it, and a
/// waiter that is served never commits. Turns go in the order they were
/// asked for (tickets), so a thread that loops on sync cannot starve a
/// writer waiting for its turn to commit under dirty pressure.
pub struct Durability {
    state: Mutex<Turns>,
    changed: Condvar,
}

struct Turns {
    /// Deltas frozen so far (the open delta is `frozen + 1`).
    frozen: u64,
    /// Every delta up to this one is durable.
    durable: u64,
    /// The next ticket to hand out.
    next: u64,
    /// The ticket whose turn it is (held, or its owner not awake yet).
    serving: u64,
    /// Tickets given up by syncs that another commit served meanwhile.
    abandoned: std::collections::BTreeSet<u64>,
}

impl Turns {
    /// The turn moves on, past tickets given up.
    fn advance(&mut self) {
        self.serving += 1;
        while self.abandoned.remove(&self.serving) {
            self.serving += 1;
        }
    }
}

/// Fsync commits whose log blocks are written and whose flush has not
/// ended yet: a delta commit freezes only when there are none (it waits,
/// holding the log's tail so that no new one starts).
pub struct FsyncFlushes {
    count: Mutex<usize>,
    none: Condvar,
}

impl Default for FsyncFlushes {
    fn default() -> Self {
        FsyncFlushes {
            count: Mutex::new(0),
            none: Condvar::new(),
        }
    }
}

impl FsyncFlushes {
    fn lock(&self) -> MutexGuard<'_, usize> {
        self.count.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// One more waits for its flush (counted before the log's tail passes on).
    pub fn begin(&self) {
        *self.lock() += 1;
    }

    /// One finished (durable or failed).
    pub fn end(&self) {
        let mut g = self.lock();
        *g -= 1;
        if *g == 0 {
            drop(g);
            self.none.notify_all();
        }
    }

    /// How many wait for their flush now.
    pub fn count(&self) -> usize {
        *self.lock()
    }

    /// Wait until none does.
    pub fn wait_none(&self) {
        let mut g = self.lock();
        while *g > 0 {
            g = self.none.wait(g).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// The right to commit the next delta; given back on drop.
pub struct Turn<'a> {
    of: &'a Durability,
}

impl Default for Durability {
    fn default() -> Self {
        Durability {
            state: Mutex::new(Turns {
                frozen: 0,
                durable: 0,
                next: 0,
                serving: 0,
                abandoned: Default::default(),
            }),
            changed: Condvar::new(),
        }
    }
}

impl Durability {
    fn lock(&self) -> MutexGuard<'_, Turns> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn wait<'a>(&self, g: MutexGuard<'a, Turns>) -> MutexGuard<'a, Turns> {
        self.changed.wait(g).unwrap_or_else(|e| e.into_inner())
    }

    /// The delta a sync called now needs durable: the open one.
    pub fn open_delta(&self) -> u64 {
        self.lock().frozen + 1
    }

    /// Every delta up to this one is durable.
    pub fn durable(&self) -> u64 {
        self.lock().durable
    }

    /// Wait until delta `n` is durable (`None`), or for a turn to commit
    /// (`Some`): the caller commits.
    pub fn wait_or_turn(&self, n: u64) -> Option<Turn<'_>> {
        let mut g = self.lock();
        let mut ticket = None;
        loop {
            if g.durable >= n {
                if let Some(t) = ticket {
                    if g.serving == t {
                        g.advance();
                        drop(g);
                        self.changed.notify_all();
                    } else {
                        g.abandoned.insert(t);
                    }
                }
                return None;
            }
            let t = *ticket.get_or_insert_with(|| {
                g.next += 1;
                g.next - 1
            });
            if g.serving == t {
                return Some(Turn { of: self });
            }
            g = self.wait(g);
        }
    }

    /// Wait for the turn and take it.
    pub fn turn(&self) -> Turn<'_> {
        let mut g = self.lock();
        let t = g.next;
        g.next += 1;
        while g.serving != t {
            g = self.wait(g);
        }
        Turn { of: self }
    }

    /// Take the turn if nobody holds it or waits for it.
    pub fn try_turn(&self) -> Option<Turn<'_>> {
        let mut g = self.lock();
        if g.next != g.serving {
            return None;
        }
        g.next += 1;
        Some(Turn { of: self })
    }
}

impl Turn<'_> {
    /// Number the delta about to freeze. Numbered before it freezes: a
    /// sync that read the open delta before this may have been called
    /// after the freeze, so only a later commit serves it.
    pub fn number(&self) -> u64 {
        let mut g = self.of.lock();
        g.frozen += 1;
        g.frozen
    }

    /// Delta `n` (and all before it) is durable: wake every waiter.
    pub fn durable(&self, n: u64) {
        let mut g = self.of.lock();
        g.durable = g.durable.max(n);
        drop(g);
        self.of.changed.notify_all();
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        self.of.lock().advance();
        self.of.changed.notify_all();
    }
}

#[cfg(all(test, feature = "loom"))]
mod loom_tests {
    use super::*;
    use loom::sync::Arc;
    use loom::thread;

    use crate::loom_model as model;

    /// Two syncs and one committer: every sync returns only once the delta
    /// open at its call is durable, and no wake-up is lost (loom explores
    /// every interleaving; a lost one deadlocks).
    #[test]
    fn syncs_return_only_when_their_delta_is_durable() {
        model(|| {
            let d = Arc::new(Durability::default());
            let syncs: Vec<_> = (0..2)
                .map(|_| {
                    let d = d.clone();
                    thread::spawn(move || {
                        let want = d.open_delta();
                        if let Some(turn) = d.wait_or_turn(want) {
                            let n = turn.number();
                            turn.durable(n);
                        }
                        assert!(d.durable() >= want);
                    })
                })
                .collect();
            let turn = d.turn();
            let n = turn.number();
            turn.durable(n);
            drop(turn);
            for s in syncs {
                s.join().unwrap();
            }
        });
    }

    /// A sync waiting for a turn behind a commit that serves it gives its
    /// ticket up, and a later turn still comes (no ticket is lost).
    #[test]
    fn served_syncs_give_up_their_tickets() {
        model(|| {
            let d = Arc::new(Durability::default());
            let holder = d.turn();
            let want = d.open_delta();
            let sync = {
                let d = d.clone();
                thread::spawn(move || {
                    if let Some(turn) = d.wait_or_turn(want) {
                        let n = turn.number();
                        turn.durable(n);
                    }
                    assert!(d.durable() >= want);
                })
            };
            let n = holder.number();
            holder.durable(n);
            drop(holder);
            sync.join().unwrap();
            // Whatever the sync did with its ticket, the turn is free.
            drop(d.turn());
        });
    }

    /// A delta commit that waits for the fsync commits flushing returns
    /// only once every one has ended, and is never left waiting.
    #[test]
    fn a_freeze_waits_for_every_fsync_flush() {
        model(|| {
            let f = Arc::new(FsyncFlushes::default());
            let ended = Arc::new(loom::sync::atomic::AtomicUsize::new(0));
            f.begin();
            f.begin();
            let flusher = {
                let (f, ended) = (f.clone(), ended.clone());
                thread::spawn(move || {
                    for _ in 0..2 {
                        ended.fetch_add(1, loom::sync::atomic::Ordering::SeqCst);
                        f.end();
                    }
                })
            };
            f.wait_none();
            assert_eq!(ended.load(loom::sync::atomic::Ordering::SeqCst), 2);
            assert_eq!(f.count(), 0);
            flusher.join().unwrap();
        });
    }

    /// The turn is exclusive: two committers never hold it together.
    #[test]
    fn one_turn_at_a_time() {
        model(|| {
            let d = Arc::new(Durability::default());
            let inside = Arc::new(loom::sync::atomic::AtomicUsize::new(0));
            let ts: Vec<_> = (0..2)
                .map(|_| {
                    let (d, inside) = (d.clone(), inside.clone());
                    thread::spawn(move || {
                        let t = match d.try_turn() {
                            Some(t) => t,
                            None => d.turn(),
                        };
                        use loom::sync::atomic::Ordering::SeqCst;
                        assert_eq!(inside.fetch_add(1, SeqCst), 0);
                        inside.fetch_sub(1, SeqCst);
                        drop(t);
                    })
                })
                .collect();
            for t in ts {
                t.join().unwrap();
            }
        });
    }
}
