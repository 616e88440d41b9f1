//! Replies committed at idle CPU priority (`-o idle_queues`, off by
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
//! Only the commit runs at idle priority: the thread serves requests and
//! sleeps at normal priority. At idle priority all the time, every task
//! woken near the thread's CPU (the commit and flush threads, a writer)
//! landed there and preempted it in the middle of requests: beside a
//! stream of buffered writes a small fsync's 90th percentile went from
//! 2.4 to 7.5 ms. Two `sched_setscheduler` calls per commit cost about
//! 3.6 µs here; `ring.rs` spends them only on a lone reply to a lone
//! request. Still, with 8 to 32 dbench clients keeping both CPUs busy the
//! server took more CPU and dbench ran 5–10% slower, so the option is off
//! by default (bench/wakeups.md).
//!
//! The danger of idle priority is starvation: a `SCHED_IDLE` thread gets
//! almost no CPU while a normal task of its scheduling group is runnable on
//! its CPU. So the thread times each commit at idle priority: one that
//! took [`STARVED`] or more (it was kept off its CPU) sends it back to
//! committing at normal priority, for a back-off that doubles (1 s up to
//! 64 s) while starvation recurs soon after each try. Being preempted by
//! the caller it woke counts too, but only for the caller's own time until
//! its next request, far below [`STARVED`] in the workloads this is for.
//!
//! Called by `ring.rs` only; calls the kernel (`sched_setscheduler`).

use std::io;
use std::time::{Duration, Instant};

/// A commit at idle priority this long: the thread was kept off its CPU.
pub const STARVED: Duration = Duration::from_millis(2);

/// The first back-off at normal priority after starving, and the longest.
const BACKOFF_MIN: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(64);

/// When to commit at idle priority (unit-tested below, apart from the
/// system calls).
#[derive(Debug)]
pub struct Watch {
    /// When commits last went back to idle priority.
    idle_since: Instant,
    /// Commits stay at normal priority until then.
    until: Instant,
    backoff: Duration,
}

impl Watch {
    pub fn new(now: Instant) -> Watch {
        Watch {
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
}

impl IdlePriority {
    /// `None` if the kernel refuses the calling thread idle priority (or
    /// normal priority back).
    pub fn start() -> Option<IdlePriority> {
        set_policy(libc::SCHED_IDLE).ok()?;
        set_policy(libc::SCHED_OTHER).ok()?;
        Some(IdlePriority {
            watch: Watch::new(Instant::now()),
        })
    }

    /// Run `commit` (the system call that commits the replies queued) at
    /// idle priority, unless backed off.
    pub fn commit<R>(&mut self, commit: impl FnOnce() -> R) -> R {
        let start = Instant::now();
        if !self.watch.idle_at(start) || set_policy(libc::SCHED_IDLE).is_err() {
            return commit();
        }
        let r = commit();
        // Not checked: it succeeded at start, and nothing takes the right away.
        let _ = set_policy(libc::SCHED_OTHER);
        let end = Instant::now();
        let starved = self.watch.committed(end, end - start);
        #[cfg(feature = "test-hooks")]
        crate::test_hooks::idle_commit(starved);
        let _ = starved;
        r
    }
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
        std::thread::spawn(|| {
            // SAFETY: plain query of the calling thread's policy.
            let policy = || unsafe { libc::sched_getscheduler(0) };
            let mut p = IdlePriority::start().expect("idle priority allowed");
            assert_eq!(policy(), libc::SCHED_OTHER);
            let during = p.commit(policy);
            assert_eq!(during, libc::SCHED_IDLE);
            assert_eq!(policy(), libc::SCHED_OTHER);
        })
        .join()
        .unwrap();
    }
}
