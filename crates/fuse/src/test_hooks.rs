//! Faults injected on purpose by tests, compiled only with the `test-hooks`
//! feature (the crate's own tests turn it on; nothing else should): a
//! counter of the requests the io_uring queue threads served, and the
//! request at which one of them panics, as a bug would; counters of the
//! commits made at idle priority.
//!
//! Calls nothing; read by `uring/ring.rs`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The ring request (counted from 1, over every queue thread) whose queue
/// thread panics just before serving it; 0: none.
pub static RING_PANIC_AT: AtomicU64 = AtomicU64::new(0);

static RING_REQUESTS: AtomicU64 = AtomicU64::new(0);

/// Requests the queue threads have taken so far.
pub fn ring_requests() -> u64 {
    RING_REQUESTS.load(Ordering::SeqCst)
}

/// Ring entries whose buffers were leaked because a queue thread ended
/// while the kernel might still write into them.
pub fn leaked_ring_slots() -> usize {
    crate::uring::leaked_slots()
}

/// Commit at idle priority whatever the CPUs' idle sampler says (so a
/// test need not depend on how busy the machine is).
pub static IDLE_COMMITS_ALWAYS: AtomicBool = AtomicBool::new(false);

static IDLE_COMMITS: AtomicU64 = AtomicU64::new(0);
static STARVED_COMMITS: AtomicU64 = AtomicU64::new(0);

/// Commits the queue threads made at idle priority (`-o idle_queues`), and
/// how many of them starved (sending their thread back to normal priority
/// for a while).
pub fn idle_commits() -> (u64, u64) {
    (
        IDLE_COMMITS.load(Ordering::SeqCst),
        STARVED_COMMITS.load(Ordering::SeqCst),
    )
}

/// Called by a queue thread after a commit at idle priority.
pub(crate) fn idle_commit(starved: bool) {
    IDLE_COMMITS.fetch_add(1, Ordering::SeqCst);
    if starved {
        STARVED_COMMITS.fetch_add(1, Ordering::SeqCst);
    }
}

/// Called by a queue thread holding a request, before serving it.
pub(crate) fn ring_request() {
    let n = RING_REQUESTS.fetch_add(1, Ordering::SeqCst) + 1;
    if n == RING_PANIC_AT.load(Ordering::SeqCst) {
        panic!("test hook: the queue thread panics at ring request {n}");
    }
}
