//! The CPUs' idle sampler and the rescue of starved queue threads, for the
//! idle-priority replies of `priority.rs`.
//!
//! The trick pays only when a CPU would otherwise be woken from halt, that
//! is when some CPU sits idle. [`IdleCpus`] samples the CPUs' idle time
//! (/proc/stat) every [`SAMPLE`] while requests flow, and sleeps without a
//! timer while none do; with no CPU idle for at least [`IDLE_SHARE`] of the
//! last sample, replies are committed at normal priority and the priority
//! changes are saved.
//!
//! A queue thread at idle priority gets almost no CPU while a normal task
//! of its scheduling group is runnable on its CPU, and it is pinned there,
//! so no idle CPU takes it over. It cannot notice that itself while it is
//! kept off its CPU. So while some queue thread is at idle priority the
//! same thread looks every [`RESCUE_EVERY`]: one that has made no progress
//! (committed nothing) for [`STARVED`] and spent a quarter of the time
//! since the last look waiting on its CPU's run queue (its schedstat) is
//! put back at normal priority from here, and told so
//! ([`QueueIdle::rescued`]). A thread busy with a long request is left
//! alone: it makes no progress either, but does not wait.
//!
//! Called by `priority.rs` and `mod.rs`; calls the kernel
//! (`sched_setscheduler` on a queue thread, /proc/stat).

use super::priority::STARVED;
use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// The share of a sample some CPU must have been idle for idle-priority
/// commits to be worth their cost.
pub const IDLE_SHARE: f64 = 0.25;

/// How often [`IdleCpus`] samples while requests flow (it sleeps until the
/// next one when a sample saw none).
const SAMPLE: Duration = Duration::from_millis(100);

/// How often the queue threads at idle priority are checked for progress
/// while one is.
pub const RESCUE_EVERY: Duration = Duration::from_millis(4);

/// One queue thread's standing, shared with the sampler.
pub struct QueueIdle {
    /// The thread's id, for `sched_setscheduler`.
    tid: libc::pid_t,
    /// Nanoseconds since the sampler's epoch of the thread's last commit at
    /// idle priority while it stays there; 0 while at normal priority.
    since: AtomicU64,
    /// The sampler put the thread back at normal priority.
    pub rescued: AtomicBool,
}

impl QueueIdle {
    /// The thread went or stays at idle priority, making progress at `ns`.
    pub fn progress(&self, ns: u64) {
        self.since.store(ns.max(1), Ordering::SeqCst);
    }

    /// The thread is back at normal priority.
    pub fn normal(&self) {
        self.since.store(0, Ordering::Release);
    }
}

/// A queue thread seen without progress: its last progress
/// ([`QueueIdle::since`]) and its run queue wait then, in nanoseconds.
type Seen = (u64, u64);

/// What [`IdleCpus`] shares with the queue threads.
struct Shared {
    /// Some CPU was idle for [`IDLE_SHARE`] of the last sample.
    some_idle: AtomicBool,
    /// A commit was asked for since the sampler last looked. Written only
    /// when it changes, so the queue threads' commits only read it.
    flowing: AtomicBool,
    /// The sampler sleeps until the next commit, which sends on `wake`.
    parked: AtomicBool,
    /// The sampler looks every [`RESCUE_EVERY`]; while it does not, a
    /// thread going to idle priority sends on `wake`.
    watching: AtomicBool,
    wake: Sender<()>,
    /// Where [`QueueIdle::since`] counts from.
    epoch: Instant,
    /// The queue threads that may go to idle priority, each with the
    /// sampler's note of its last progress and run queue wait when it was
    /// last seen without progress.
    queues: Mutex<Vec<(Arc<QueueIdle>, Option<Seen>)>>,
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
            watching: AtomicBool::new(false),
            wake,
            epoch: Instant::now(),
            queues: Mutex::new(Vec::new()),
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

    /// Put every queue thread at idle priority that made no progress for
    /// [`STARVED`] and waited on its CPU's run queue since the last round
    /// for a quarter of [`RESCUE_EVERY`] back at normal priority; whether
    /// some queue thread is at idle priority.
    fn rescue(&self) -> bool {
        self.rescue_at(self.epoch.elapsed().as_nanos() as u64, &run_delay)
    }

    /// [`Self::rescue`] at `now` nanoseconds since the epoch, with the run
    /// queue waits `delay_of` gives (`None`: unknown, time alone decides).
    fn rescue_at(&self, now: u64, delay_of: &dyn Fn(libc::pid_t) -> Option<u64>) -> bool {
        let mut any = false;
        for (q, seen) in self.queues.lock().iter_mut() {
            let since = q.since.load(Ordering::Acquire);
            if since == 0 || now.saturating_sub(since) < STARVED.as_nanos() as u64 {
                any |= since != 0;
                *seen = None;
                continue;
            }
            any = true;
            // A thread busy with a long request makes no progress either,
            // but does not wait: only waiting counts.
            let delay = delay_of(q.tid);
            let waited = match (delay, *seen) {
                (Some(d), Some((s, before))) if s == since => {
                    d.saturating_sub(before) >= RESCUE_EVERY.as_nanos() as u64 / 4
                }
                (Some(_), _) => false,
                (None, _) => true,
            };
            *seen = delay.map(|d| (since, d));
            if waited {
                let param = libc::sched_param { sched_priority: 0 };
                // SAFETY: a thread of this process; `param` outlives the call.
                unsafe { libc::sched_setscheduler(q.tid, libc::SCHED_OTHER, &param) };
                q.rescued.store(true, Ordering::Release);
                q.normal();
                *seen = None;
            }
        }
        any
    }
}

/// Nanoseconds thread `tid` of this process has waited on a run queue
/// (the second field of its schedstat).
fn run_delay(tid: libc::pid_t) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?;
    s.split_ascii_whitespace().nth(1)?.parse().ok()
}

/// The queue threads' view of [`IdleCpus`].
#[derive(Clone)]
pub struct CpuState(Arc<Shared>);

impl CpuState {
    /// A commit is asked for (see [`IdleCpus`]).
    pub fn request(&self) {
        self.0.request();
    }

    /// Whether some CPU was idle enough in the last sample.
    pub fn some_idle(&self) -> bool {
        self.0.some_idle.load(Ordering::Relaxed)
    }

    /// Nanoseconds since the epoch of [`QueueIdle::since`], at `t`.
    pub fn ns(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.0.epoch).as_nanos() as u64
    }

    /// A queue thread went to idle priority (its [`QueueIdle::progress`]
    /// is set): the sampler starts watching if it does not.
    pub fn going_idle(&self) {
        if !self.0.watching.load(Ordering::SeqCst) {
            let _ = self.0.wake.try_send(());
        }
    }

    /// Watch over the calling thread while it is at idle priority.
    pub fn register(&self) -> Arc<QueueIdle> {
        let q = Arc::new(QueueIdle {
            // SAFETY: no preconditions.
            tid: unsafe { libc::gettid() },
            since: AtomicU64::new(0),
            rescued: AtomicBool::new(false),
        });
        self.0.queues.lock().push((q.clone(), None));
        q
    }

    #[cfg(test)]
    pub fn for_tests() -> CpuState {
        CpuState(Arc::new(Shared::new().0))
    }

    #[cfg(test)]
    pub fn set_some_idle(&self, idle: bool) {
        self.0.some_idle.store(idle, Ordering::Relaxed);
    }

    /// A rescue round at `t`, with the run queue waits `delay_of` gives.
    #[cfg(test)]
    pub fn rescue_at(&self, t: Instant, delay_of: &dyn Fn(libc::pid_t) -> Option<u64>) -> bool {
        self.0.rescue_at(self.ns(t), delay_of)
    }
}

/// Samples the CPUs' idle time for the queue threads, and rescues starved
/// ones; the thread ends when this is dropped.
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

/// The sampler's life: a sample every [`SAMPLE`] while commits are asked
/// for, and a rescue round every [`RESCUE_EVERY`] while a queue thread is
/// at idle priority; asleep, without a timer, from a sample that saw no
/// commit until the next one; until `stopped` closes.
fn sample(shared: &Shared, stopped: &Receiver<()>, woken: &Receiver<()>) {
    let mut last = read_idle().unwrap_or_default();
    let mut sampled = Instant::now();
    // Some queue thread was at idle priority at the last rescue round.
    let mut any_idle = false;
    loop {
        if sampled.elapsed() >= SAMPLE {
            // (A thread goes to idle priority only in a commit, which
            // raises `flowing` first.)
            if !shared.flowing.swap(false, Ordering::SeqCst) && !any_idle {
                // Quiet. Parked first, then checked again: a commit after
                // the check sees `parked` and wakes this thread.
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
                sampled = Instant::now();
                continue;
            }
            sampled = Instant::now();
            match read_idle() {
                Some(now) => {
                    shared
                        .some_idle
                        .store(some_cpu_idle(&last, &now, IDLE_SHARE), Ordering::Relaxed);
                    last = now;
                }
                // No /proc/stat: assume the trick pays, as it does on an
                // idle machine; the rescue still guards it.
                None => shared.some_idle.store(true, Ordering::Relaxed),
            }
        }
        // `watching` down before looking: a thread going to idle priority
        // after the look sees it down and wakes this one.
        shared.watching.store(false, Ordering::SeqCst);
        any_idle = shared.rescue();
        let wait = if any_idle {
            shared.watching.store(true, Ordering::SeqCst);
            RESCUE_EVERY
        } else {
            SAMPLE.saturating_sub(sampled.elapsed())
        };
        crossbeam_channel::select! {
            recv(stopped) -> _ => return,
            recv(woken) -> _ => {}
            default(wait) => {}
        }
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

#[cfg(test)]
mod tests {
    use super::*;

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
