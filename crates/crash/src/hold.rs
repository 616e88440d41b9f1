//! A gate that holds the next flush, once armed, until the harness lets it
//! go: how a workload puts two fsync commits in flight at once (the second
//! planned and written while the first waits for its flush), as they are
//! whenever fsyncs come faster than the device flushes. The harness's
//! device between the volume and the recording (`faults.rs`) passes each
//! flush through it, so the recording sees a held flush only when it goes
//! through, after the second commit's writes. Harness-only; the engine's
//! own write path has no such switch.
//!
//! Calls nothing of the engine.

use crossbeam_channel::{bounded, Receiver, Sender};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The gate.
pub struct HoldFlush {
    armed: AtomicBool,
    held_tx: Sender<()>,
    held_rx: Receiver<()>,
    go_tx: Sender<()>,
    go_rx: Receiver<()>,
}

impl HoldFlush {
    pub fn new() -> HoldFlush {
        let (held_tx, held_rx) = bounded(1);
        let (go_tx, go_rx) = bounded(1);
        HoldFlush {
            armed: AtomicBool::new(false),
            held_tx,
            held_rx,
            go_tx,
            go_rx,
        }
    }

    /// Hold the next flush.
    pub fn arm(&self) {
        self.armed.store(true, Ordering::SeqCst);
    }

    /// Wait (at most `limit`) until a flush is held; false if none came
    /// (the gate is then disarmed).
    pub fn wait_held(&self, limit: Duration) -> bool {
        if self.held_rx.recv_timeout(limit).is_ok() {
            return true;
        }
        // A flush may arrive just now: whichever wins, none stays held.
        if !self.armed.swap(false, Ordering::SeqCst) {
            let _ = self.held_rx.recv_timeout(limit);
            self.release();
            return true;
        }
        false
    }

    /// [`HoldFlush::wait_held`], giving up early once `gone` says the
    /// flush will not come (the commit failed before it); false then.
    pub fn wait_held_unless(&self, limit: Duration, gone: impl Fn() -> bool) -> bool {
        let deadline = std::time::Instant::now() + limit;
        loop {
            let step =
                Duration::from_millis(5).min(deadline.saturating_duration_since(std::time::Instant::now()));
            if self.held_rx.recv_timeout(step).is_ok() {
                return true;
            }
            if gone() || std::time::Instant::now() >= deadline {
                return self.wait_held(Duration::ZERO);
            }
        }
    }

    /// Let the held flush go.
    pub fn release(&self) {
        let _ = self.go_tx.try_send(());
    }

    /// A flush is about to go to the device: if armed, say so and wait
    /// until released.
    pub fn pass(&self) {
        if self.armed.swap(false, Ordering::SeqCst) {
            let _ = self.held_tx.send(());
            let _ = self.go_rx.recv();
        }
    }
}

impl Default for HoldFlush {
    fn default() -> Self {
        HoldFlush::new()
    }
}
