//! API layer: the delta guard as the API hands it out (the volume behind
//! its `RwLock`, shared or exclusive) and, in debug builds, a count of the
//! guards each thread holds, so that the commit steps that do device I/O
//! can assert they run without one (invariant P3: the frontend waits for
//! the media only by backpressure).
//!
//! The one exception P3 allows, a commit under the exclusive guard when
//! free space runs short (`Volume::reserve`), commits from inside the
//! frontend and never reaches these checks.
//!
//! Calls nothing else in the crate.

use parking_lot::{RwLockReadGuard, RwLockWriteGuard};
use std::ops::{Deref, DerefMut};

#[cfg(debug_assertions)]
thread_local! {
    /// Delta guards this thread holds (P3).
    static HELD: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// One guard counted for its thread while it lives (nothing in release
/// builds). Guards are not `Send`, so it is dropped where it was made.
struct Held;

impl Held {
    fn new() -> Held {
        #[cfg(debug_assertions)]
        HELD.with(|h| h.set(h.get().saturating_add(1)));
        Held
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        #[cfg(debug_assertions)]
        HELD.with(|h| h.set(h.get().saturating_sub(1)));
    }
}

/// A delta guard (`G`: the lock's shared or exclusive guard of the
/// volume), counted for its thread while it lives.
pub(super) struct Counted<G> {
    guard: G,
    _held: Held,
}

/// The delta guard held exclusively.
pub(super) type Exclusive<'a, V> = Counted<RwLockWriteGuard<'a, V>>;
/// The delta guard held shared with other operations of the delta.
pub(super) type Shared<'a, V> = Counted<RwLockReadGuard<'a, V>>;

impl<G> Counted<G> {
    pub(super) fn new(guard: G) -> Self {
        Counted {
            guard,
            _held: Held::new(),
        }
    }
}

impl<G: Deref> Deref for Counted<G> {
    type Target = G::Target;
    fn deref(&self) -> &G::Target {
        &self.guard
    }
}

impl<G: DerefMut> DerefMut for Counted<G> {
    fn deref_mut(&mut self) -> &mut G::Target {
        &mut self.guard
    }
}

/// P3, checked before a commit's device I/O (`io` names it): this thread
/// holds no delta guard, shared or exclusive.
pub(super) fn assert_unguarded(io: &str) {
    #[cfg(debug_assertions)]
    HELD.with(|h| {
        assert!(h.get() == 0, "P3: {io} with the delta guard held");
    });
    #[cfg(not(debug_assertions))]
    let _ = io;
}

#[cfg(all(test, debug_assertions))]
mod tests {
    use super::*;
    use parking_lot::RwLock;

    #[test]
    fn io_without_a_guard_passes_and_guards_are_counted_until_dropped() {
        let lock = RwLock::new(0u32);
        assert_unguarded("nothing held");
        {
            let mut g = Exclusive::new(lock.write());
            *g += 1;
        }
        {
            let a = Shared::new(lock.read());
            let b = Shared::new(lock.read());
            assert_eq!(*a + *b, 2);
        }
        assert_unguarded("every guard dropped");
    }

    #[test]
    #[should_panic(expected = "P3: a flush with the delta guard held")]
    fn io_under_the_exclusive_guard_fails() {
        let lock = RwLock::new(0u32);
        let _g = Exclusive::new(lock.write());
        assert_unguarded("a flush");
    }

    #[test]
    #[should_panic(expected = "P3: a write with the delta guard held")]
    fn io_under_a_shared_guard_fails() {
        let lock = RwLock::new(0u32);
        let _g = Shared::new(lock.read());
        assert_unguarded("a write");
    }
}

#[cfg(all(test, feature = "loom"))]
mod loom_tests {
    use super::Counted;
    use loom::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    use loom::sync::{Arc, RwLock};
    use loom::thread;

    use crate::loom_model as model;

    /// What the delta guard stands over here: the number of the open delta
    /// (the volume's, behind the lock) and, beside it, the changes each
    /// delta has (atomics, as the leaf locks that hold the real ones are
    /// taken under the shared guard by many operations at once).
    struct Volume {
        guard: RwLock<usize>,
        changes: [AtomicUsize; 2],
        /// Operations inside the guard now.
        inside: AtomicUsize,
    }

    /// Two operations each join the open delta under the shared guard (the
    /// real `Counted` over loom's guards) and record one change in it; a
    /// freeze takes the guard exclusively, sees the frozen delta's changes
    /// and opens the next. No operation is inside while the freeze is, no
    /// change joins a delta after its freeze saw it, and each change is
    /// counted once, in the delta its operation read. With an operation
    /// that records its change after dropping its guard this fails: the
    /// freeze sees delta 0 without the change that read delta 0.
    #[test]
    fn no_change_joins_a_delta_after_its_freeze() {
        model(|| {
            let v = Arc::new(Volume {
                guard: RwLock::new(0),
                changes: [AtomicUsize::new(0), AtomicUsize::new(0)],
                inside: AtomicUsize::new(0),
            });
            let ops: Vec<_> = (0..2)
                .map(|_| {
                    let v = v.clone();
                    thread::spawn(move || {
                        let g = Counted::new(v.guard.read().unwrap());
                        v.inside.fetch_add(1, SeqCst);
                        let delta = *g;
                        v.changes[delta].fetch_add(1, SeqCst);
                        v.inside.fetch_sub(1, SeqCst);
                        drop(g);
                        delta
                    })
                })
                .collect();
            let (frozen, seen) = {
                let mut g = Counted::new(v.guard.write().unwrap());
                assert_eq!(v.inside.load(SeqCst), 0, "an operation inside a freeze");
                let frozen = *g;
                let seen = v.changes[frozen].load(SeqCst);
                *g += 1;
                (frozen, seen)
            };
            let mut joined = [0; 2];
            for op in ops {
                joined[op.join().unwrap()] += 1;
            }
            assert_eq!(
                v.changes[frozen].load(SeqCst),
                seen,
                "a change joined delta {frozen} after its freeze"
            );
            for (d, n) in joined.iter().enumerate() {
                assert_eq!(v.changes[d].load(SeqCst), *n, "delta {d}'s changes");
            }
            assert_eq!(*v.guard.read().unwrap(), frozen + 1);
        });
    }
}
