//! Backend layer: read-only questions about free space that defrag asks
//! before it rewrites a file — where a free run of a given length starts,
//! and how far the free space at a block reaches. A block counts as free
//! when the allocator could hand it out now: its bit is clear and it is
//! not pinned.
//!
//! They walk the allocator's free runs (`Allocator::for_free_runs`),
//! which skip what is in use a word or a group at a time.
//!
//! Calls the allocator (reads only).

use super::alloc::Allocator;

/// The first free run of at least `want` blocks at or after block 2 (the
/// first two hold the superblock copies), whole, as `(start, length)`; if
/// there is none, the longest free run. `None` on a volume with no free
/// block.
pub fn free_run(alloc: &Allocator, want: u64) -> Option<(u64, u64)> {
    let want = want.max(1);
    let (mut best, mut found): (Option<(u64, u64)>, bool) = (None, false);
    alloc.for_free_runs(2, alloc.blocks(), |s, n| {
        if best.is_none_or(|(_, l)| n > l) || n >= want {
            best = Some((s, n));
        }
        found = n >= want;
        !found
    });
    best
}

/// The first block at or after `from`, and before `from + within`, where
/// `want` free blocks start.
pub fn free_after(alloc: &Allocator, from: u64, want: u64, within: u64) -> Option<u64> {
    let end = from.saturating_add(within).min(alloc.blocks());
    let mut at = None;
    alloc.for_free_runs(from, end.saturating_add(want), |s, n| {
        if s >= end {
            return false;
        }
        if n >= want {
            at = Some(s);
        }
        at.is_none()
    });
    at
}

/// Free blocks from `start` on, counted up to `max`.
pub fn free_at(alloc: &Allocator, start: u64, max: u64) -> u64 {
    match alloc.free_runs(start, start.saturating_add(max), 1).first() {
        Some(&(s, n)) if s == start => n,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_run_long_enough_else_the_longest() {
        let mut a = Allocator::new(100, 1024);
        a.apply_alloc(0, 2);
        // Free: 2..10 (8), 12..15 (3), 20..100 (80).
        a.apply_alloc(10, 2);
        a.apply_alloc(15, 5);
        assert_eq!(free_run(&a, 3), Some((2, 8)));
        assert_eq!(free_run(&a, 9), Some((20, 80)));
        assert_eq!(free_run(&a, 80), Some((20, 80)));
        assert_eq!(free_run(&a, 81), Some((20, 80)), "none long enough: the longest");
        assert_eq!(free_at(&a, 12, 10), 3);
        assert_eq!(free_at(&a, 10, 10), 0);
        assert_eq!(free_at(&a, 95, 10), 5, "the volume's end");
        assert_eq!(free_after(&a, 9, 3, 20), Some(12));
        assert_eq!(free_after(&a, 9, 4, 20), Some(20));
        assert_eq!(free_after(&a, 9, 4, 10), None, "not within 10 blocks");
        // A pinned block is not free.
        let (s, _) = a.alloc(20, 1, true).unwrap();
        a.free_range(s, 1);
        assert_eq!(free_run(&a, 80), Some((21, 79)));
        a.apply_alloc(2, 98);
        assert_eq!(free_run(&a, 1), None);
    }
}
