//! Keeping idle CPUs awake while requests flow (`-o idle_poll=US`, off by
//! default).
//!
//! A FUSE request wakes the server, and its reply wakes the caller, most
//! often on the other CPU, which is idle. On a virtual machine whose idle
//! vCPUs halt at once (cpuidle `haltpoll` with `guest_halt_poll_ns` 0, as
//! here), waking a task on a halted vCPU costs an exit to the host: about
//! two thirds of a create's time through the mount (`bench/wakeups.md`).
//! The kernel's answer is halt polling (`guest_halt_poll_ns`), a machine
//! setting. This is the same idea inside the server: one thread per CPU,
//! pinned there, at `SCHED_IDLE` priority (it runs only when nothing else
//! wants the CPU, and the scheduler treats its CPU as idle when it places
//! a woken task), spins for `window` after the last request the io_uring
//! queues took, so the CPU stays out of halt and a wake-up there is cheap.
//! Then it sleeps until the next request. It costs CPU time (the spinning
//! counts as the server's) and power while requests come more often than
//! `window` apart, and nothing otherwise; it changes no answer.
//!
//! Calls nothing of the filesystem.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::thread::{self, JoinHandle, Thread};
use std::time::{Duration, Instant};

/// The polling threads of a mount.
pub struct IdlePoll {
    shared: Arc<State>,
    threads: Vec<JoinHandle<()>>,
}

struct State {
    start: Instant,
    /// When the last request was taken, in ns since `start`.
    last: AtomicU64,
    window: u64,
    /// Some poller sleeps: the next request wakes them.
    asleep: AtomicBool,
    stop: AtomicBool,
    pollers: Vec<Thread>,
}

/// The latest `window` a mount may ask for: longer only burns more CPU.
pub const MAX_WINDOW: Duration = Duration::from_millis(10);

impl IdlePoll {
    /// Start a polling thread on each of `cpus` CPUs, spinning for
    /// `window` after each request.
    pub fn start(cpus: usize, window: Duration) -> io::Result<IdlePoll> {
        let window = window.min(MAX_WINDOW).as_nanos() as u64;
        let mut threads = Vec::with_capacity(cpus);
        let (tx, rx) = std::sync::mpsc::channel::<Arc<State>>();
        let rx = Arc::new(std::sync::Mutex::new(rx));
        // Every poller is pinned and at idle priority when this returns.
        // (Should a spawn fail, those started find the channel closed.)
        let (ack_tx, ack_rx) = std::sync::mpsc::channel::<()>();
        for cpu in 0..cpus {
            let (rx, ack) = (rx.clone(), ack_tx.clone());
            threads.push(
                thread::Builder::new()
                    .name(format!("tux3-poll{cpu}"))
                    .spawn(move || {
                        settle_on(cpu);
                        let _ = ack.send(());
                        let state = rx.lock().ok().and_then(|r| r.recv().ok());
                        if let Some(state) = state {
                            poll(&state);
                        }
                    })?,
            );
        }
        for _ in 0..cpus {
            let _ = ack_rx.recv();
        }
        let shared = Arc::new(State {
            start: Instant::now(),
            last: AtomicU64::new(0),
            window,
            asleep: AtomicBool::new(true),
            stop: AtomicBool::new(false),
            pollers: threads.iter().map(|t| t.thread().clone()).collect(),
        });
        for _ in 0..cpus {
            let _ = tx.send(shared.clone());
        }
        Ok(IdlePoll { shared, threads })
    }

    /// What the queue threads call [`Waker::note`] on.
    pub fn waker(&self) -> Waker {
        Waker(self.shared.clone())
    }
}

/// Dropped (at unmount, or when a mount fails), the pollers stop and are
/// waited for.
impl Drop for IdlePoll {
    fn drop(&mut self) {
        self.shared.stop.store(true, Relaxed);
        for t in &self.shared.pollers {
            t.unpark();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// The pollers' side the queue threads hold.
#[derive(Clone)]
pub struct Waker(Arc<State>);

impl Waker {
    /// A queue took a request: keep the CPUs awake for another window.
    pub fn note(&self) {
        let s = &self.0;
        s.last.store(s.start.elapsed().as_nanos() as u64, Relaxed);
        if s.asleep.load(Relaxed) && s.asleep.swap(false, Relaxed) {
            for t in &s.pollers {
                t.unpark();
            }
        }
    }
}

/// Pin the calling thread to `cpu` and give it idle priority.
fn settle_on(cpu: usize) {
    // SAFETY: cpu_set_t and sched_param are plain data, set through libc.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set);
        let param = libc::sched_param { sched_priority: 0 };
        libc::sched_setscheduler(0, libc::SCHED_IDLE, &param);
    }
}

/// A poller's life: spin while requests are less than a window old, then
/// sleep until [`Waker::note`] wakes it.
fn poll(s: &State) {
    while !s.stop.load(Relaxed) {
        let now = s.start.elapsed().as_nanos() as u64;
        if now.saturating_sub(s.last.load(Relaxed)) < s.window {
            std::hint::spin_loop();
            continue;
        }
        s.asleep.store(true, Relaxed);
        // A request noted between the check and here finds `asleep` set
        // and unparks us; an unpark before the park makes it return.
        if now.saturating_sub(s.last.load(Relaxed)) >= s.window {
            thread::park();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pollers_go_back_to_sleep_after_a_request_and_stop() {
        let p = IdlePoll::start(2, Duration::from_micros(200)).unwrap_or_else(|e| panic!("{e}"));
        let w = p.waker();
        for _ in 0..3 {
            w.note();
            // Spinning for the window, then asleep again (this loop ends
            // only if they do go back to sleep).
            while !p.shared.asleep.load(Relaxed) {
                thread::yield_now();
            }
        }
        // Dropping ends parked and spinning pollers alike.
        w.note();
        drop(p);
    }
}
