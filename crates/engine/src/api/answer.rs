//! API layer: a one-shot answer that a thread waits for, parked — how
//! [`super::Fs::fsync`] waits for the group commit that serves it.
//!
//! A channel would do, but its receiver spins and yields before it parks:
//! with a thousand threads waiting for group commits on two CPUs, that
//! spinning took the CPU the committer needed to answer them. Here the
//! waiter parks at once and the answer costs one unpark.
//!
//! Calls nothing else in the crate.

use parking_lot::Mutex;
use std::sync::Arc;
use std::thread::{self, Thread};

/// Where the answer goes, and the thread to wake when it is there.
struct Slot<T> {
    value: Mutex<Option<T>>,
    waiter: Thread,
}

/// The giving side: [`Giver::give`] once; dropped without giving (its
/// holder was dropped, say by a thread that panicked), it gives the
/// fallback, so the waiter never waits for nothing.
pub(super) struct Giver<T> {
    slot: Arc<Slot<T>>,
    /// `None` once given.
    fallback: Option<T>,
}

/// The waiting side, for the thread that made the pair.
pub(super) struct Waiter<T> {
    slot: Arc<Slot<T>>,
}

/// A giver and a waiter for an answer the calling thread will wait for;
/// `fallback` is the answer if the giver is dropped unused.
pub(super) fn for_this_thread<T>(fallback: T) -> (Giver<T>, Waiter<T>) {
    let slot = Arc::new(Slot {
        value: Mutex::new(None),
        waiter: thread::current(),
    });
    (
        Giver {
            slot: slot.clone(),
            fallback: Some(fallback),
        },
        Waiter { slot },
    )
}

impl<T> Slot<T> {
    fn give(&self, value: T) {
        *self.value.lock() = Some(value);
        self.waiter.unpark();
    }
}

impl<T> Giver<T> {
    /// Give the answer and wake the waiter (from any thread).
    pub(super) fn give(mut self, value: T) {
        self.fallback = None;
        self.slot.give(value);
    }
}

impl<T> Drop for Giver<T> {
    fn drop(&mut self) {
        if let Some(fallback) = self.fallback.take() {
            self.slot.give(fallback);
        }
    }
}

impl<T> Waiter<T> {
    /// Wait until the answer is given (on the thread that made the pair).
    pub(super) fn wait(self) -> T {
        loop {
            if let Some(v) = self.slot.value.lock().take() {
                return v;
            }
            // An unpark given before this park makes it return at once; a
            // spurious return loops.
            thread::park();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_given_before_or_after_the_wait_is_received() {
        let (giver, waiter) = for_this_thread(0);
        giver.give(1);
        assert_eq!(waiter.wait(), 1);
        for _ in 0..100 {
            let (giver, waiter) = for_this_thread(0u32);
            let t = thread::spawn(move || giver.give(7));
            assert_eq!(waiter.wait(), 7);
            t.join().unwrap();
        }
    }

    #[test]
    fn a_giver_dropped_unused_gives_the_fallback() {
        let (giver, waiter) = for_this_thread(9u32);
        let t = thread::spawn(move || drop(giver));
        assert_eq!(waiter.wait(), 9);
        t.join().unwrap();
    }
}
