//! Replies committed at idle CPU priority (`-o idle_queues`, the
//! default): so that the caller a reply wakes runs on the queue thread's
//! own CPU.
//!
//! A request is two wake-ups: the caller's request wakes the queue thread
//! of its CPU (same CPU: cheap), and the reply wakes the caller. When the
//! reply is committed the queue thread still runs, so the scheduler puts
//! the caller on another, idle CPU if there is one. On a virtual machine
//! whose idle vCPUs halt, waking a task there costs an exit to the host:
//! tens of microseconds, more than the request itself (BENCHMARKS.md,
//! "Where a request's time goes"). A CPU that runs only `SCHED_IDLE` tasks
//! counts as idle when the scheduler places a woken task, so a queue thread
//! that commits its replies at `SCHED_IDLE` gets the caller woken on its
//! own CPU; the caller preempts it at once and sends its next request
//! there, and the queue thread goes on when the caller waits. No CPU is
//! woken from halt.
//!
//! `ring.rs` commits only a lone reply to a lone request so, and only
//! while some CPU is idle (`idle_cpus.rs`): with 8 to 32 dbench clients
//! keeping both CPUs busy the priority changes bought nothing and cost
//! 5–10% of dbench's speed (bench/wakeups.md). After such a commit the
//! thread stays at idle priority while the caller runs. If the caller's
//! next request is there when the thread runs again (the ring's
//! `IORING_SQ_TASKRUN` flag, no system call), the thread serves it at idle
//! priority too, if it is a short one ([`short_request`]): a name or
//! attribute operation, or a write of at most [`SMALL_WRITE`] right after
//! one ([`served_idle`]: a file made and written at once, as a tree of
//! small files is: 12% more of those a second, bench/wakeups.md).
//! So a run of metadata calls costs no priority
//! change at all, where two `sched_setscheduler` calls per request (about
//! 3.6 µs here) and a second `io_uring_enter` took a third of the daemon's
//! CPU. The thread goes back to normal priority before it sleeps, and
//! before it serves anything else: at idle priority all the time, every
//! task woken near its CPU (the commit and flush threads, a writer) landed
//! there and preempted it in the middle of requests, and beside a stream
//! of buffered writes a small fsync's 90th percentile went from 2.4 to 7.5
//! ms (1.5 to 8.5 ms when writes and fsyncs were served at idle priority
//! in a run of requests).
//!
//! The danger of idle priority is starvation: a `SCHED_IDLE` thread gets
//! almost no CPU while a normal task of its scheduling group is runnable on
//! its CPU. So the thread times each commit at idle priority: one that
//! took [`STARVED`] or more (it was kept off its CPU) sends it back to
//! committing at normal priority, for a back-off that doubles (1 s up to
//! 64 s) while starvation recurs soon after each try. Being preempted by
//! the caller it woke counts too, but only for the caller's own time until
//! its next request, far below [`STARVED`] in the workloads this is for.
//! A thread kept off its CPU between commits cannot time itself: the
//! sampler of `idle_cpus.rs` puts it back at normal priority when it has
//! made no progress for [`STARVED`], which backs it off the same way.
//!
//! Called by `ring.rs` and `mod.rs`; calls the kernel
//! (`sched_setscheduler`) and `idle_cpus.rs`.

#[cfg(test)]
use super::idle_cpus::RESCUE_EVERY;
use super::idle_cpus::{CpuState, QueueIdle};
use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A commit at idle priority this long: the thread was kept off its CPU.
pub const STARVED: Duration = Duration::from_millis(2);

/// A rescue this soon after the last one backs the thread off.
const RESCUE_RECUR: Duration = Duration::from_secs(1);

/// The first back-off at normal priority after starving, and the longest.
const BACKOFF_MIN: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(64);

/// When to commit at idle priority (unit-tested below, apart from the
/// system calls).
#[derive(Debug)]
pub struct Watch {
    /// When the sampler last put the thread back at normal priority.
    last_rescue: Option<Instant>,
    /// When commits last went back to idle priority.
    idle_since: Instant,
    /// Commits stay at normal priority until then.
    until: Instant,
    backoff: Duration,
}

impl Watch {
    pub fn new(now: Instant) -> Watch {
        Watch {
            last_rescue: None,
            idle_since: now,
            until: now,
            backoff: BACKOFF_MIN,
        }
    }

    /// Whether the commit at `now` goes at idle priority.
    pub fn idle_at(&mut self, now: Instant) -> bool {
        if now < self.until {
            return false;
        }
        if self.until > self.idle_since {
            // The back-off is over.
            self.idle_since = now;
        }
        true
    }

    /// The sampler put the thread back at normal priority at `now` (it made
    /// no progress for [`STARVED`]); true if that backs it off. A lone
    /// rescue does not: a burst of work of another thread on the CPU (a
    /// delta commit) starves it once, and a back-off would cost every
    /// request of the next second its idle-priority commit. A second one
    /// within [`RESCUE_RECUR`] does, as from a starved commit.
    pub fn rescued(&mut self, now: Instant) -> bool {
        let recurs = self
            .last_rescue
            .is_some_and(|t| now.saturating_duration_since(t) < RESCUE_RECUR);
        self.last_rescue = Some(now);
        recurs && self.committed(now, STARVED)
    }

    /// A commit at idle priority ended at `now` after `took`; true if it
    /// starved (commits go at normal priority for a while).
    pub fn committed(&mut self, now: Instant, took: Duration) -> bool {
        if took < STARVED {
            return false;
        }
        // Starved again soon after the last try: wait longer this time.
        self.backoff = if now.duration_since(self.idle_since) < 2 * self.backoff {
            (self.backoff * 2).min(BACKOFF_MAX)
        } else {
            BACKOFF_MIN
        };
        self.until = now + self.backoff;
        true
    }
}

/// A queue thread's idle-priority commits and the watch over them.
pub struct IdlePriority {
    watch: Watch,
    cpus: CpuState,
    /// This thread, as the sampler watches it.
    me: Arc<QueueIdle>,
    /// The thread runs at idle priority now.
    idle_now: bool,
    /// The last request it served was a short one ([`short_request`]).
    after_short: bool,
}

impl IdlePriority {
    /// `None` if the kernel refuses the calling thread idle priority (or
    /// normal priority back).
    pub fn start(cpus: CpuState) -> Option<IdlePriority> {
        set_policy(libc::SCHED_IDLE).ok()?;
        set_policy(libc::SCHED_OTHER).ok()?;
        Some(IdlePriority {
            watch: Watch::new(Instant::now()),
            me: cpus.register(),
            cpus,
            idle_now: false,
            after_short: false,
        })
    }

    /// Run `commit` (the system call that commits the replies queued) at
    /// idle priority, unless no CPU is idle or the thread is backed off.
    /// The thread stays at idle priority after it: [`Self::before_wait`]
    /// and [`Self::normal`] end that.
    pub fn commit<R>(&mut self, commit: impl FnOnce() -> R) -> R {
        self.cpus.request();
        #[cfg(feature = "test-hooks")]
        let always = crate::test_hooks::IDLE_COMMITS_ALWAYS.load(Ordering::Relaxed);
        #[cfg(not(feature = "test-hooks"))]
        let always = false;
        let start = Instant::now();
        self.take_rescue(start);
        if (!always && !self.cpus.some_idle()) || !self.watch.idle_at(start) {
            self.normal();
            return commit();
        }
        self.me.progress(self.cpus.ns(start));
        if !self.idle_now {
            if set_policy(libc::SCHED_IDLE).is_err() {
                self.me.normal();
                return commit();
            }
            self.idle_now = true;
            self.cpus.going_idle();
        }
        let r = commit();
        let end = Instant::now();
        let starved = self.watch.committed(end, end - start);
        if starved {
            self.normal();
        }
        #[cfg(feature = "test-hooks")]
        crate::test_hooks::idle_commit(starved);
        r
    }

    /// The thread is about to wait for requests: it sleeps at normal
    /// priority, unless the next request is already `pending` (its caller
    /// ran while this thread was preempted after the commit); [`Self::serving`]
    /// then keeps idle priority for a short request or a small write.
    pub fn before_wait(&mut self, pending: bool) {
        if !pending {
            self.normal();
        }
    }

    /// The thread is about to serve a request of `opcode` with `payload`
    /// bytes of arguments: it goes back to normal priority unless
    /// [`served_idle`] allows the request idle priority.
    pub fn serving(&mut self, opcode: u32, payload: usize) {
        let idle = served_idle(opcode, payload, self.after_short);
        self.after_short = short_request(opcode);
        if !idle {
            self.normal();
        }
    }

    /// Back to normal priority (a no-op if there already).
    pub fn normal(&mut self) {
        if self.idle_now {
            self.me.normal();
            self.idle_now = false;
            if !self.take_rescue(Instant::now()) {
                // Not checked: nothing takes the right away.
                let _ = set_policy(libc::SCHED_OTHER);
            }
        }
    }

    /// If the sampler put this thread back at normal priority, note it
    /// and back off as from a starved commit; whether it had.
    fn take_rescue(&mut self, now: Instant) -> bool {
        if !self.me.rescued.swap(false, Ordering::AcqRel) {
            return false;
        }
        self.idle_now = false;
        let backed_off = self.watch.rescued(now);
        #[cfg(feature = "test-hooks")]
        crate::test_hooks::idle_commit(backed_off);
        let _ = backed_off;
        true
    }
}

/// Whether a request of `opcode` is short enough to be served at idle
/// priority when it follows a reply committed so: a name or attribute
/// operation. Reads, writes, fsyncs, truncations and ioctls are served at
/// normal priority, so that a task woken on the thread's CPU cannot hold
/// them up (beside a stream of writes, a small fsync's 90th percentile
/// went from 1.5 to 8.5 ms when they were not), but for a small write
/// right after a short request ([`served_idle`]).
fn short_request(opcode: u32) -> bool {
    use super::abi::op;
    matches!(
        opcode,
        op::LOOKUP
            | op::GETATTR
            | op::READLINK
            | op::SYMLINK
            | op::MKNOD
            | op::MKDIR
            | op::UNLINK
            | op::RMDIR
            | op::RENAME
            | op::RENAME2
            | op::LINK
            | op::CREATE
            | op::OPEN
            | op::RELEASE
            | op::OPENDIR
            | op::RELEASEDIR
            | op::READDIR
            | op::READDIRPLUS
            | op::STATFS
            | op::ACCESS
            | op::GETXATTR
            | op::LISTXATTR
            | op::SETXATTR
            | op::REMOVEXATTR
            | op::FLUSH
            | op::LSEEK
    )
}

/// Most bytes a write may carry to be served at idle priority after a
/// short request.
const SMALL_WRITE: usize = 16 * 1024;

/// Whether a request of `opcode` with `payload` bytes of arguments keeps
/// idle priority, `after_short` if the request before it in the run was a
/// short one: a short request, or a small write right after one (a file
/// made or opened and written at once, the write's capability check
/// (GETXATTR) just before it). A write after another write or an fsync (a
/// stream of writes, an append and fsync beside one) goes at normal
/// priority.
fn served_idle(opcode: u32, payload: usize, after_short: bool) -> bool {
    short_request(opcode) || (opcode == super::abi::op::WRITE && after_short && payload <= SMALL_WRITE)
}

/// Set the calling thread's scheduling policy (priority 0, as both take).
fn set_policy(policy: libc::c_int) -> io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: pid 0 is the calling thread; `param` outlives the call.
    if unsafe { libc::sched_setscheduler(0, policy, &param) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn short_commits_stay_at_idle_priority() {
        let t0 = Instant::now();
        let mut w = Watch::new(t0);
        for i in 1..1000u32 {
            let now = t0 + i * MS;
            assert!(w.idle_at(now));
            assert!(!w.committed(now, STARVED - Duration::from_nanos(1)), "commit {i}");
        }
    }

    #[test]
    fn a_starved_commit_backs_off_then_idle_priority_again() {
        let t0 = Instant::now();
        let mut w = Watch::new(t0);
        let t1 = t0 + Duration::from_secs(10);
        assert!(w.idle_at(t1));
        assert!(w.committed(t1, STARVED));
        assert!(!w.idle_at(t1 + BACKOFF_MIN / 2));
        assert!(w.idle_at(t1 + BACKOFF_MIN));
        assert!(!w.committed(t1 + BACKOFF_MIN, MS));
    }

    #[test]
    fn starving_again_soon_doubles_the_backoff_up_to_the_most() {
        let mut now = Instant::now();
        let mut w = Watch::new(now);
        let mut backoffs = Vec::new();
        for _ in 0..10 {
            // Starved at the first commit of each try.
            now += MS;
            assert!(w.idle_at(now));
            assert!(w.committed(now, 3 * MS));
            backoffs.push(w.until - now);
            now = w.until;
        }
        let secs: Vec<u64> = backoffs.iter().map(Duration::as_secs).collect();
        assert_eq!(secs, [2, 4, 8, 16, 32, 64, 64, 64, 64, 64]);
        // A long good stretch at idle priority: the next starvation starts over.
        assert!(w.idle_at(now));
        now += Duration::from_secs(1000);
        assert!(w.idle_at(now));
        assert!(w.committed(now, 3 * MS));
        assert_eq!(w.until - now, BACKOFF_MIN);
    }

    #[test]
    fn commits_run_at_idle_priority_and_the_thread_returns_to_normal() {
        let cpus = CpuState::for_tests();
        std::thread::spawn(move || {
            // SAFETY: plain query of the calling thread's policy.
            let policy = || unsafe { libc::sched_getscheduler(0) };
            let mut p = IdlePriority::start(cpus.clone()).unwrap();
            assert_eq!(policy(), libc::SCHED_OTHER);
            assert_eq!(p.commit(policy), libc::SCHED_IDLE);
            // The next request already there: still at idle priority.
            p.before_wait(true);
            assert_eq!(policy(), libc::SCHED_IDLE);
            assert_eq!(p.commit(policy), libc::SCHED_IDLE);
            // None: the thread sleeps at normal priority.
            p.before_wait(false);
            assert_eq!(policy(), libc::SCHED_OTHER);
            // No CPU idle: the commit stays at normal priority.
            cpus.set_some_idle(false);
            assert_eq!(p.commit(policy), libc::SCHED_OTHER);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_small_write_keeps_idle_priority_only_right_after_a_short_request() {
        use super::super::abi::op;
        assert!(served_idle(op::LOOKUP, 0, false));
        assert!(served_idle(op::WRITE, 4096, true));
        assert!(served_idle(op::WRITE, SMALL_WRITE, true));
        assert!(!served_idle(op::WRITE, SMALL_WRITE + 1, true));
        assert!(!served_idle(op::WRITE, 4096, false));
        assert!(!served_idle(op::FSYNC, 0, true));
        assert!(!served_idle(op::READ, 0, true));
        let cpus = CpuState::for_tests();
        std::thread::spawn(move || {
            // SAFETY: plain query of the calling thread's policy.
            let policy = || unsafe { libc::sched_getscheduler(0) };
            // On a loaded machine a commit at idle priority may starve
            // (or be rescued) and go back to normal priority, as it must:
            // the sequence is tried again until one runs without that.
            // One try; false if a commit starved.
            let try_once = || -> bool {
                let mut p = IdlePriority::start(cpus.clone()).unwrap();
                // A file made, its capability asked, then written: all
                // three at idle priority once the first reply went so.
                p.serving(op::MKNOD, 8);
                assert_eq!(p.commit(policy), libc::SCHED_IDLE);
                for (opcode, payload) in [(op::GETXATTR, 21), (op::WRITE, 4096)] {
                    if !p.idle_now {
                        return false;
                    }
                    p.before_wait(true);
                    p.serving(opcode, payload);
                    assert_eq!(policy(), libc::SCHED_IDLE);
                    p.commit(policy);
                }
                if !p.idle_now {
                    return false;
                }
                p.before_wait(true);
                // A second write follows a write: normal priority.
                p.serving(op::WRITE, 4096);
                assert_eq!(policy(), libc::SCHED_OTHER);
                true
            };
            assert!((0..100).any(|_| try_once()), "every try starved at idle priority");
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_thread_without_progress_is_rescued_and_backs_off_if_it_recurs() {
        let cpus = CpuState::for_tests();
        let thread_cpus = cpus.clone();
        let mut before = Instant::now();
        let (at_idle, rescued) = (std::sync::mpsc::channel(), std::sync::mpsc::channel::<()>());
        let t = std::thread::spawn(move || {
            // SAFETY: plain query of the calling thread's policy.
            let policy = || unsafe { libc::sched_getscheduler(0) };
            let mut p = IdlePriority::start(thread_cpus).unwrap();
            assert_eq!(p.commit(policy), libc::SCHED_IDLE);
            at_idle.0.send(()).unwrap();
            // Kept from progress (here: waiting) while the sampler looks.
            rescued.1.recv().unwrap();
            assert_eq!(policy(), libc::SCHED_OTHER, "the sampler put it back");
            // A first rescue: the next commit goes at idle priority again.
            assert_eq!(p.commit(policy), libc::SCHED_IDLE);
            at_idle.0.send(()).unwrap();
            rescued.1.recv().unwrap();
            assert_eq!(policy(), libc::SCHED_OTHER);
            // A second one soon after: backed off, the commits go at
            // normal priority.
            assert_eq!(p.commit(policy), libc::SCHED_OTHER);
            assert_eq!(p.commit(policy), libc::SCHED_OTHER);
            assert!(!p.idle_now);
        });
        // The thread's run queue wait, as the sampler reads it.
        let waited = std::sync::atomic::AtomicU64::new(0);
        let delay = |_| Some(waited.load(Ordering::SeqCst));
        for _ in 0..2 {
            at_idle.1.recv().unwrap();
            // Seen no later than its last progress: not rescued.
            assert!(cpus.rescue_at(before, &delay), "a thread at idle priority");
            // STARVED after it, but busy (not waiting): left alone.
            let later = Instant::now() + STARVED;
            assert!(cpus.rescue_at(later, &delay));
            assert!(cpus.rescue_at(later + STARVED, &delay), "still at idle priority");
            // Then waiting on the run queue: put back at normal priority.
            waited.fetch_add(RESCUE_EVERY.as_nanos() as u64, Ordering::SeqCst);
            assert!(cpus.rescue_at(later + 2 * STARVED, &delay));
            assert!(
                !cpus.rescue_at(later + 2 * STARVED, &delay),
                "at normal priority now"
            );
            // The thread's next progress comes after this.
            before = Instant::now();
            rescued.0.send(()).unwrap();
        }
        t.join().unwrap();
    }

    #[test]
    fn a_lone_rescue_does_not_back_off_a_second_soon_after_does() {
        let t0 = Instant::now();
        let mut w = Watch::new(t0);
        let t1 = t0 + Duration::from_secs(10);
        assert!(!w.rescued(t1));
        assert!(w.idle_at(t1));
        // Long after: still a lone one.
        let t2 = t1 + 2 * RESCUE_RECUR;
        assert!(!w.rescued(t2));
        assert!(w.idle_at(t2));
        assert!(w.rescued(t2 + RESCUE_RECUR / 2));
        assert!(!w.idle_at(t2 + RESCUE_RECUR / 2 + MS));
    }
}
