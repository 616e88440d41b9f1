//! Gathering the kernel's FORGETs into batches while the io_uring queues
//! carry the requests.
//!
//! With FUSE over io_uring the kernel still sends FORGET through
//! `/dev/fuse` (and INTERRUPT, which is rare), so each forgotten inode wakes
//! one of the `/dev/fuse` threads blocked in `read` (`devfuse.rs`): one wake-up per unlink, per
//! rename over an existing name, per inode dropped from the kernel's cache.
//! That thread usually sleeps on the other, idle CPU, so each FORGET cost a
//! wake-up from halt and a context switch in and out: a quarter of the
//! daemon's CPU in a run of unlinks.
//!
//! So a thread that reads a FORGET (or a BATCH_FORGET) first waits
//! [`LINGER`] holding a gate, then handles it. The other threads, woken by
//! the next FORGETs, queue at the gate; once none is left in `read` the
//! kernel only queues the FORGETs that follow and hands them over in one
//! BATCH_FORGET at the next read, which finds it waiting. Wake-ups then
//! come about once per LINGER, whatever the rate of FORGETs. Nothing waits
//! for a FORGET: it only lets an orphan go, which can happen a few
//! milliseconds later. Through `/dev/fuse` alone (no queues) every request
//! comes that way, and nothing lingers.
//!
//! A BATCH_FORGET is handed over one inode at a time, all with the
//! request's id: only the first of a request lingers.
//!
//! Calls nothing of the engine.

use parking_lot::Mutex;
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How long a thread that took FORGETs keeps away from `/dev/fuse`: FORGETs
/// that come meanwhile wait in the kernel's queue. An INTERRUPT waits at
/// most this long more.
pub(crate) const LINGER: Duration = Duration::from_millis(1);

/// The gate of the `/dev/fuse` threads that took FORGETs.
#[derive(Default)]
pub(crate) struct ForgetBatcher {
    /// The io_uring queues carry the requests: only FORGET and INTERRUPT
    /// come through `/dev/fuse`.
    queues_up: AtomicBool,
    /// Held by the thread that lingers.
    gate: Mutex<()>,
}

thread_local! {
    /// The request whose FORGETs this thread last lingered for.
    static LINGERED_FOR: Cell<Option<u64>> = const { Cell::new(None) };
}

impl ForgetBatcher {
    /// The queues carry the requests from now on (`true`), or no longer.
    pub(crate) fn set_queues_up(&self, up: bool) {
        self.queues_up.store(up, Ordering::Relaxed);
    }

    /// Called by a `/dev/fuse` thread before it handles a FORGET of request
    /// `unique`: while the queues carry the requests, and unless it did so
    /// for this request already, wait for the gate and hold it for
    /// [`LINGER`]. Returns whether it lingered.
    pub(crate) fn linger(&self, unique: u64) -> bool {
        #[cfg(feature = "test-hooks")]
        let linger = match crate::test_hooks::FORGET_LINGER_US.load(Ordering::Relaxed) {
            0 => LINGER,
            us => Duration::from_micros(us),
        };
        #[cfg(not(feature = "test-hooks"))]
        let linger = LINGER;
        self.linger_with(unique, || std::thread::sleep(linger))
    }

    /// [`Self::linger`], spending the time in `wait` while holding the gate.
    fn linger_with(&self, unique: u64, wait: impl FnOnce()) -> bool {
        if !self.queues_up.load(Ordering::Relaxed) || LINGERED_FOR.get() == Some(unique) {
            return false;
        }
        LINGERED_FOR.set(Some(unique));
        let _held = self.gate.lock();
        wait();
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::{Arc, Barrier};

    #[test]
    fn lingers_once_per_request_while_the_queues_are_up() {
        let b = ForgetBatcher::default();
        assert!(!b.linger(7), "no queues: handled at once");
        b.set_queues_up(true);
        assert!(b.linger(7), "the queues are up now");
        assert!(!b.linger(7), "the rest of a batch does not linger again");
        assert!(b.linger(8), "the next request does");
        b.set_queues_up(false);
        assert!(!b.linger(9));
    }

    #[test]
    fn lingering_threads_hold_the_gate_one_at_a_time() {
        // Eight threads start lingering together; each counts itself in
        // while it holds the gate and yields a while: never two at once.
        let b = Arc::new(ForgetBatcher::default());
        b.set_queues_up(true);
        let inside = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let start = Arc::new(Barrier::new(8));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (b, inside, most, start) = (b.clone(), inside.clone(), most.clone(), start.clone());
                std::thread::spawn(move || {
                    start.wait();
                    b.linger_with(1, || {
                        let n = inside.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(n, Ordering::SeqCst);
                        for _ in 0..100 {
                            std::thread::yield_now();
                        }
                        inside.fetch_sub(1, Ordering::SeqCst);
                    })
                })
            })
            .collect();
        for th in threads {
            assert!(th.join().expect("a lingering thread panicked"));
        }
        assert_eq!(
            most.load(Ordering::SeqCst),
            1,
            "two threads held the gate at once"
        );
    }
}
