//! Backend layer: read-only questions about free space that defrag asks
//! before it rewrites a file — where a free run of a given length starts,
//! and how far the free space at a block reaches. A block counts as free
//! when the allocator could hand it out now: its bit is clear and it is
//! not pinned.
//!
//! These scan the allocator block by block (`Allocator::is_used`,
//! `is_pinned`): linear in the blocks passed over, which is fine for a
//! defrag run but not for an allocation path. They stand in for an index
//! of free extents by size, which belongs in the allocator itself.
//!
//! Calls the allocator (reads only).

use super::alloc::Allocator;

/// Whether `alloc` could hand block `b` out now.
fn free(alloc: &Allocator, b: u64) -> bool {
    !alloc.is_used(b) && !alloc.is_pinned(b)
}

/// The first free run of at least `want` blocks at or after block 2 (the
/// first two hold the superblock copies), whole, as `(start, length)`; if
/// there is none, the longest free run. `None` on a volume with no free
/// block.
pub fn free_run(alloc: &Allocator, want: u64) -> Option<(u64, u64)> {
    let want = want.max(1);
    let mut best: Option<(u64, u64)> = None;
    let mut b = 2;
    let n = alloc.blocks();
    while b < n {
        if !free(alloc, b) {
            b += 1;
            continue;
        }
        let start = b;
        while b < n && free(alloc, b) {
            b += 1;
        }
        let len = b - start;
        if len >= want {
            return Some((start, len));
        }
        if best.is_none_or(|(_, l)| len > l) {
            best = Some((start, len));
        }
    }
    best
}

/// The first block at or after `from`, and before `from + within`, where
/// `want` free blocks start.
pub fn free_after(alloc: &Allocator, from: u64, want: u64, within: u64) -> Option<u64> {
    let end = from.saturating_add(within).min(alloc.blocks());
    let mut b = from;
    while b < end {
        if !free(alloc, b) {
            b += 1;
            continue;
        }
        let len = free_at(alloc, b, want);
        if len >= want {
            return Some(b);
        }
        b += len.max(1);
    }
    None
}

/// Free blocks from `start` on, counted up to `max`.
pub fn free_at(alloc: &Allocator, start: u64, max: u64) -> u64 {
    let mut len = 0;
    while len < max && start.saturating_add(len) < alloc.blocks() && free(alloc, start + len) {
        len += 1;
    }
    len
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
