//! Queue threads at idle CPU priority (`-o idle_queues`, off by default):
//! so that the caller a reply wakes runs on the queue thread's own CPU.
//!
//! A request is two wake-ups: the caller's request wakes the queue thread
//! of its CPU (same CPU: cheap), and the reply wakes the caller. When the
//! reply is committed the queue thread still runs, so the scheduler puts
//! the caller on another, idle CPU if there is one. On a virtual machine
//! whose idle vCPUs halt, waking a task there costs an exit to the host:
//! tens of microseconds, more than the request itself (BENCHMARKS.md,
//! "Where a request's time goes"). A CPU that runs only `SCHED_IDLE` tasks
//! counts as idle when the scheduler places a woken task, so with the queue
//! thread at `SCHED_IDLE` the caller is woken on the same CPU, preempts the
//! queue thread at once, and sends its next request there: no CPU is woken
//! from halt, and both tasks stay where their caches are.
//!
//! The danger of idle priority is starvation: a `SCHED_IDLE` thread gets
//! almost no CPU while a normal task of its scheduling group is runnable on
//! its CPU. Where the kernel's autogroup is on, a mount daemon (a session of
//! its own) is a group of its own and competes as a whole, but not every
//! setup gives it that. So each queue thread watches, between two returns
//! from its ring, how long it waited runnable for its CPU (the kernel's
//! `run_delay`, /proc/thread-self/schedstat). [`STARVED`] or more at once
//! sends it back to normal priority; it tries idle priority again after a
//! back-off that doubles (1 s up to 64 s) while starvation recurs soon after
//! each try. A waiting request is so held up at most one such wait per
//! try. Being preempted by the caller it woke counts as run delay too, but
//! only for the caller's own time between two requests, which is far below
//! [`STARVED`] in the workloads this is for.
//!
//! Why it is not the default: a CPU running an idle-priority queue thread
//! also draws every other task woken near it (the commit and flush
//! threads, a writer), and each preempts the queue thread in the middle of
//! a request, in waits too short for the watch. With a stream of buffered
//! writes beside a small fsync every 50 ms, the fsync's 90th percentile
//! went from 2.4 ms to 7.5 ms (bench/wakeups.md): against DESIGN.md's
//! target that a background stream must not inflate an fsync's latency.
//!
//! Called by `ring.rs` only; calls the kernel (`sched_setscheduler`).

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

/// A wait this long runnable between two returns from the ring: starved.
pub const STARVED: Duration = Duration::from_millis(2);

/// The first back-off at normal priority after starving, and the longest.
const BACKOFF_MIN: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(64);

/// What the watch asks of the thread after a return from the ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Stay,
    /// Starved: back to normal priority.
    ToNormal,
    /// The back-off is over: idle priority again.
    ToIdle,
}

/// The decision, apart from the system calls (unit-tested below).
#[derive(Debug)]
pub struct Watch {
    idle: bool,
    /// Total run delay (ns) at the last look, while idle.
    last: u64,
    /// When idle priority was last taken, and (at normal) until when the
    /// back-off lasts.
    idle_since: Instant,
    until: Instant,
    backoff: Duration,
}

impl Watch {
    /// A thread that just took idle priority with `delay` ns of run delay.
    pub fn new(now: Instant, delay: u64) -> Watch {
        Watch {
            idle: true,
            last: delay,
            idle_since: now,
            until: now,
            backoff: BACKOFF_MIN,
        }
    }

    /// After a return from the ring at `now`; `delay` reads the thread's
    /// total run delay (asked for only when needed: at idle priority, and
    /// when going back to it). `None` from it: stay at normal priority.
    pub fn after_wait(&mut self, now: Instant, delay: impl FnOnce() -> Option<u64>) -> Change {
        if self.idle {
            let Some(d) = delay() else {
                self.idle = false;
                self.until = now + BACKOFF_MAX;
                return Change::ToNormal;
            };
            let waited = d.saturating_sub(self.last);
            self.last = d;
            if waited < STARVED.as_nanos() as u64 {
                return Change::Stay;
            }
            // Starved again soon after the last try: wait longer this time.
            self.backoff = if now.duration_since(self.idle_since) < 2 * self.backoff {
                (self.backoff * 2).min(BACKOFF_MAX)
            } else {
                BACKOFF_MIN
            };
            self.idle = false;
            self.until = now + self.backoff;
            return Change::ToNormal;
        }
        if now < self.until {
            return Change::Stay;
        }
        match delay() {
            Some(d) => {
                self.idle = true;
                self.last = d;
                self.idle_since = now;
                Change::ToIdle
            }
            None => {
                self.until = now + BACKOFF_MAX;
                Change::Stay
            }
        }
    }

    /// Whether the thread is at idle priority.
    #[cfg(test)]
    pub fn idle(&self) -> bool {
        self.idle
    }
}

/// A queue thread's idle priority and the watch over it.
pub struct IdlePriority {
    schedstat: File,
    watch: Watch,
}

impl IdlePriority {
    /// Put the calling thread at idle priority, watched. `None` (and the
    /// thread left as it was) if the kernel reports no run delay or refuses
    /// the policy.
    pub fn start() -> Option<IdlePriority> {
        let schedstat = File::open("/proc/thread-self/schedstat").ok()?;
        let delay = run_delay(&schedstat)?;
        set_policy(libc::SCHED_IDLE).ok()?;
        Some(IdlePriority {
            schedstat,
            watch: Watch::new(Instant::now(), delay),
        })
    }

    /// After each return from the ring.
    pub fn after_wait(&mut self) {
        let stat = &self.schedstat;
        let change = self.watch.after_wait(Instant::now(), || run_delay(stat));
        let policy = match change {
            Change::Stay => return,
            Change::ToNormal => libc::SCHED_OTHER,
            Change::ToIdle => libc::SCHED_IDLE,
        };
        if set_policy(policy).is_err() && change == Change::ToIdle {
            // Refused now though allowed at start: stay normal.
            self.watch.idle = false;
            self.watch.until = Instant::now() + BACKOFF_MAX;
        }
    }
}

/// The thread's total run delay in ns: the second field of its schedstat.
fn run_delay(schedstat: &File) -> Option<u64> {
    let mut buf = [0u8; 96];
    let n = schedstat.read_at(&mut buf, 0).ok()?;
    parse_run_delay(&buf[..n])
}

fn parse_run_delay(text: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(text).ok()?;
    text.split_ascii_whitespace().nth(1)?.parse().ok()
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

    const MS: u64 = 1_000_000;

    #[test]
    fn short_waits_keep_idle_priority() {
        let t0 = Instant::now();
        let mut w = Watch::new(t0, 5 * MS);
        for i in 1..1000u64 {
            // 1.9 ms between looks, every look: never starved.
            let c = w.after_wait(t0 + Duration::from_millis(i), || Some(5 * MS + i * 1_900_000));
            assert_eq!(c, Change::Stay, "look {i}");
        }
        assert!(w.idle());
    }

    #[test]
    fn a_long_wait_goes_normal_then_idle_after_the_backoff() {
        let t0 = Instant::now();
        let mut w = Watch::new(t0, 0);
        let t1 = t0 + Duration::from_secs(10);
        assert_eq!(w.after_wait(t1, || Some(2 * MS)), Change::ToNormal);
        assert!(!w.idle());
        // At normal priority nothing is read until the back-off is over.
        let c = w.after_wait(t1 + BACKOFF_MIN / 2, || panic!("read while normal"));
        assert_eq!(c, Change::Stay);
        assert_eq!(w.after_wait(t1 + BACKOFF_MIN, || Some(50 * MS)), Change::ToIdle);
        assert!(w.idle());
        // The delay while normal is not counted against the new try.
        let c = w.after_wait(t1 + BACKOFF_MIN + Duration::from_millis(1), || Some(51 * MS));
        assert_eq!(c, Change::Stay);
    }

    #[test]
    fn starving_again_soon_doubles_the_backoff_up_to_the_most() {
        let mut now = Instant::now();
        let mut w = Watch::new(now, 0);
        let mut delay = 0;
        let mut backoffs = Vec::new();
        for _ in 0..10 {
            // Starved right after each try.
            now += Duration::from_millis(1);
            delay += 3 * MS;
            assert_eq!(w.after_wait(now, || Some(delay)), Change::ToNormal);
            backoffs.push(w.until - now);
            now = w.until;
            assert_eq!(w.after_wait(now, || Some(delay)), Change::ToIdle);
        }
        let secs: Vec<u64> = backoffs.iter().map(Duration::as_secs).collect();
        assert_eq!(secs, [2, 4, 8, 16, 32, 64, 64, 64, 64, 64]);
        // A long good stretch at idle priority: the next starvation starts over.
        now += Duration::from_secs(1000);
        delay += 3 * MS;
        assert_eq!(w.after_wait(now, || Some(delay)), Change::ToNormal);
        assert_eq!(w.until - now, BACKOFF_MIN);
    }

    #[test]
    fn no_run_delay_to_read_means_normal_priority() {
        let t0 = Instant::now();
        let mut w = Watch::new(t0, 0);
        assert_eq!(w.after_wait(t0, || None), Change::ToNormal);
        let later = t0 + BACKOFF_MAX;
        assert_eq!(w.after_wait(later, || None), Change::Stay);
        assert!(!w.idle());
    }

    #[test]
    fn run_delay_is_the_second_field() {
        assert_eq!(parse_run_delay(b"155646504 61381 1\n"), Some(61381));
        assert_eq!(parse_run_delay(b"155646504\n"), None);
        assert_eq!(parse_run_delay(b""), None);
    }

    #[test]
    fn this_thread_reports_its_run_delay() {
        let f = File::open("/proc/thread-self/schedstat").expect("schedstat");
        assert!(run_delay(&f).is_some());
    }
}
