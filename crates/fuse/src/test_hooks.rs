//! Faults injected on purpose by tests, compiled only with the `test-hooks`
//! feature (the crate's own tests turn it on; nothing else should): a
//! counter of the requests the io_uring queue threads served, and the
//! request at which one of them panics, as a bug would; counters of the
//! commits made at idle priority; the FORGETs taken through `/dev/fuse`,
//! and a longer wait for them to gather.
//!
//! Calls nothing; read by `uring/ring.rs`, `devfuse.rs` and `forgets.rs`.

use parking_lot::Mutex;
use std::collections::HashSet;
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

/// How long a `/dev/fuse` thread lingers after FORGETs, in microseconds,
/// instead of `forgets::LINGER`; 0: that.
pub static FORGET_LINGER_US: AtomicU64 = AtomicU64::new(0);

/// The inodes forgotten and the ids of the requests that carried them.
static FORGETS: Mutex<(u64, Option<HashSet<u64>>)> = Mutex::new((0, None));

/// Inodes the kernel forgot through `/dev/fuse` so far, and in how many
/// requests (FORGET or BATCH_FORGET).
pub fn forgets() -> (u64, usize) {
    let f = FORGETS.lock();
    (f.0, f.1.as_ref().map_or(0, HashSet::len))
}

/// Called for each inode a FORGET or BATCH_FORGET of request `unique` gives
/// back.
pub(crate) fn forget(unique: u64) {
    let mut f = FORGETS.lock();
    f.0 += 1;
    f.1.get_or_insert_with(HashSet::new).insert(unique);
}
