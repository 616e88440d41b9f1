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
//! Only the commit runs at idle priority: the thread serves requests and
//! sleeps at normal priority. At idle priority all the time, every task
//! woken near the thread's CPU (the commit and flush threads, a writer)
//! landed there and preempted it in the middle of requests: beside a
//! stream of buffered writes a small fsync's 90th percentile went from
//! 2.4 to 7.5 ms. Two `sched_setscheduler` calls per commit cost about
//! 3.6 µs here; `ring.rs` spends them only on a lone reply to a lone
//! request, and only while some CPU is idle (below): with 8 to 32 dbench
//! clients keeping both CPUs busy they bought nothing and cost 5–10% of
//! dbench's speed (bench/wakeups.md).
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
//! The trick pays only when a CPU would otherwise be woken from halt, that
//! is when some CPU sits idle. [`IdleCpus`] samples the CPUs' idle time
//! (/proc/stat) every 100 ms while requests flow, and sleeps without a
//! timer while none do; with no CPU idle for at
//! least [`IDLE_SHARE`] of the last sample, replies are committed at normal
//! priority and the two priority changes are saved.
//!
//! Called by `ring.rs` and `mod.rs`; calls the kernel
//! (`sched_setscheduler`, /proc/stat).

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// The share of a sample some CPU must have been idle for idle-priority
/// commits to be worth their cost.
pub const IDLE_SHARE: f64 = 0.25;

/// How often [`IdleCpus`] samples while requests flow (it sleeps until the
/// next one when a sample saw none).
const SAMPLE: Duration = Duration::from_millis(100);

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
    cpus: Arc<Shared>,
}

impl IdlePriority {
    /// `None` if the kernel refuses the calling thread idle priority (or
    /// normal priority back).
    pub fn start(cpus: CpuState) -> Option<IdlePriority> {
        set_policy(libc::SCHED_IDLE).ok()?;
        set_policy(libc::SCHED_OTHER).ok()?;
        Some(IdlePriority {
            watch: Watch::new(Instant::now()),
            cpus: cpus.0,
        })
    }

    /// Run `commit` (the system call that commits the replies queued) at
    /// idle priority, unless no CPU is idle or the thread is backed off.
    pub fn commit<R>(&mut self, commit: impl FnOnce() -> R) -> R {
        self.cpus.request();
        #[cfg(feature = "test-hooks")]
        let always = crate::test_hooks::IDLE_COMMITS_ALWAYS.load(Ordering::Relaxed);
        #[cfg(not(feature = "test-hooks"))]
        let always = false;
        if !always && !self.cpus.some_idle.load(Ordering::Relaxed) {
            return commit();
        }
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

/// What [`IdleCpus`] shares with the queue threads.
struct Shared {
    /// Some CPU was idle for [`IDLE_SHARE`] of the last sample.
    some_idle: AtomicBool,
    /// A commit was asked for since the sampler last looked. Written only
    /// when it changes, so the queue threads' commits only read it.
    flowing: AtomicBool,
    /// The sampler sleeps until the next commit, which sends on `wake`.
    parked: AtomicBool,
    wake: Sender<()>,
}

impl Shared {
    /// Shared state (optimistic: some CPU idle, as on an idle machine) and
    /// the receiving end of its wake-ups.
    fn new() -> (Shared, Receiver<()>) {
        let (wake, woken) = crossbeam_channel::bounded(1);
        let shared = Shared {
            some_idle: AtomicBool::new(true),
            flowing: AtomicBool::new(false),
            parked: AtomicBool::new(false),
            wake,
        };
        (shared, woken)
    }

    /// A commit is asked for: noted, and the sampler woken if it sleeps.
    /// (A commit that still sees the flag of before the sampler's last
    /// look leaves it asleep; the next one wakes it.)
    fn request(&self) {
        if !self.flowing.load(Ordering::Relaxed) {
            self.flowing.store(true, Ordering::SeqCst);
            if self.parked.swap(false, Ordering::SeqCst) {
                let _ = self.wake.try_send(());
            }
        }
    }
}

/// The queue threads' view of [`IdleCpus`].
#[derive(Clone)]
pub struct CpuState(Arc<Shared>);

/// Samples the CPUs' idle time for the queue threads; the thread ends when
/// this is dropped.
pub struct IdleCpus {
    shared: Arc<Shared>,
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl IdleCpus {
    pub fn start() -> io::Result<IdleCpus> {
        let (shared, woken) = Shared::new();
        let shared = Arc::new(shared);
        let (stop, stopped) = crossbeam_channel::bounded(0);
        let s = shared.clone();
        let thread = thread::Builder::new()
            .name("tux3-idlecpus".into())
            .spawn(move || sample(&s, &stopped, &woken))?;
        Ok(IdleCpus {
            shared,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    pub fn state(&self) -> CpuState {
        CpuState(self.shared.clone())
    }
}

impl Drop for IdleCpus {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The sampler's life: every [`SAMPLE`] while commits are asked for;
/// asleep, without a timer, from a sample that saw none until the next
/// one; until `stopped` closes.
fn sample(shared: &Shared, stopped: &Receiver<()>, woken: &Receiver<()>) {
    let mut last = read_idle().unwrap_or_default();
    loop {
        if !shared.flowing.swap(false, Ordering::SeqCst) {
            // Quiet. Parked first, then checked again: a commit after the
            // check sees `parked` and wakes this thread.
            shared.parked.store(true, Ordering::SeqCst);
            if !shared.flowing.load(Ordering::SeqCst) {
                crossbeam_channel::select! {
                    recv(stopped) -> _ => return,
                    recv(woken) -> _ => {}
                }
            }
            shared.parked.store(false, Ordering::SeqCst);
            // A fresh start: the time asleep says nothing about now.
            last = read_idle().unwrap_or_default();
        }
        match stopped.recv_timeout(SAMPLE) {
            Err(RecvTimeoutError::Timeout) => {}
            _ => return,
        }
        let Some(now) = read_idle() else {
            // No /proc/stat: assume the trick pays, as it does on an idle
            // machine; the starvation watch still guards it.
            shared.some_idle.store(true, Ordering::Relaxed);
            continue;
        };
        shared
            .some_idle
            .store(some_cpu_idle(&last, &now, IDLE_SHARE), Ordering::Relaxed);
        last = now;
    }
}

/// Per CPU: (idle ticks, all ticks) from /proc/stat.
fn read_idle() -> Option<Vec<(u64, u64)>> {
    parse_idle(&std::fs::read_to_string("/proc/stat").ok()?)
}

fn parse_idle(stat: &str) -> Option<Vec<(u64, u64)>> {
    let cpus: Vec<(u64, u64)> = stat
        .lines()
        .filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit))
        .filter_map(|l| {
            let ticks: Vec<u64> = l
                .split_ascii_whitespace()
                .skip(1)
                .filter_map(|t| t.parse().ok())
                .collect();
            // user nice system idle iowait irq softirq steal ...
            let idle = ticks.get(3)? + ticks.get(4).copied().unwrap_or(0);
            Some((idle, ticks.iter().sum()))
        })
        .collect();
    (!cpus.is_empty()).then_some(cpus)
}

/// Whether some CPU was idle for `share` of the time between two samples.
fn some_cpu_idle(before: &[(u64, u64)], after: &[(u64, u64)], share: f64) -> bool {
    before.iter().zip(after).any(|(&(i0, t0), &(i1, t1))| {
        let total = t1.saturating_sub(t0);
        total > 0 && i1.saturating_sub(i0) as f64 >= share * total as f64
    })
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
    fn an_idle_cpu_is_one_idle_for_the_share_of_the_sample() {
        let stat = "cpu  10 0 10 100 0 0 0 0 0 0\n\
                    cpu0 5 0 5 50 0 0 0 0 0 0\n\
                    cpu1 5 0 5 50 0 0 0 0 0 0\n\
                    intr 1 2 3\n";
        let before = parse_idle(stat).unwrap();
        assert_eq!(before, [(50, 60), (50, 60)]);
        // 100 ticks on: cpu0 busy throughout; cpu1 idle for 15, or 25.
        assert!(!some_cpu_idle(&before, &[(50, 160), (65, 160)], IDLE_SHARE));
        assert!(some_cpu_idle(&before, &[(50, 160), (75, 160)], IDLE_SHARE));
        assert_eq!(parse_idle("intr 1\n"), None);
    }

    #[test]
    fn commits_run_at_idle_priority_and_the_thread_returns_to_normal() {
        let shared = Arc::new(Shared::new().0);
        std::thread::spawn(move || {
            // SAFETY: plain query of the calling thread's policy.
            let policy = || unsafe { libc::sched_getscheduler(0) };
            let mut p = IdlePriority {
                watch: Watch::new(Instant::now()),
                cpus: shared.clone(),
            };
            assert_eq!(policy(), libc::SCHED_OTHER);
            let during = p.commit(policy);
            assert_eq!(during, libc::SCHED_IDLE);
            assert_eq!(policy(), libc::SCHED_OTHER);
            // No CPU idle: the commit stays at normal priority.
            shared.some_idle.store(false, Ordering::Relaxed);
            assert_eq!(p.commit(policy), libc::SCHED_OTHER);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_quiet_sampler_sleeps_until_the_next_commit() {
        let cpus = IdleCpus::start().unwrap();
        let shared = cpus.state().0;
        let parks = |what: &str| {
            let start = Instant::now();
            while !shared.parked.load(Ordering::SeqCst) {
                assert!(start.elapsed() < Duration::from_secs(10), "{what}");
                std::thread::yield_now();
            }
        };
        // No commits: the sampler parks at once.
        parks("the sampler never parked");
        // A commit takes the flag and wakes it: it samples once, sees no
        // more commits, and parks again. Had it not woken, the flag would
        // stay down.
        shared.request();
        assert!(!shared.parked.load(Ordering::SeqCst));
        parks("the sampler did not wake, sample and park again");
        drop(cpus);
    }

    #[test]
    fn the_sampler_ends_when_dropped() {
        let cpus = IdleCpus::start().unwrap();
        let state = cpus.state();
        drop(cpus);
        assert_eq!(Arc::strong_count(&state.0), 1, "the sampler thread let go");
    }
}
