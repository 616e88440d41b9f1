//! Backend layer, allocator: the free path — blocks freed in the current
//! delta (cleared and pinned until the delta is durable, invariant A2),
//! a shared block losing one reference instead, a block a snapshot holds
//! going to `dying` for the dead list, the delta's changes taken for its
//! log, and the pins released once the commit is durable and the reads
//! that may have mapped the blocks are done. A block freed for reuse
//! drops its entry in the checksum table (`sums.rs`) in the same delta.
//!
//! Calls the allocator's bitmap (`mod.rs`).

use super::{coalesce, Allocator, DeltaChanges};

impl Allocator {
    /// Free `[start, start+count)`: clear the bits now, pin them until the
    /// current delta is durable (A2).
    /// Blocks outside the volume or already free are ignored (they can only
    /// come from corrupt metadata, which fsck reports).
    pub fn free_range(&mut self, start: u64, count: u64) {
        let end = start.saturating_add(count).min(self.blocks);
        for b in start.min(end)..end {
            if self.is_used(b) {
                self.set_pinned(b, true);
                self.set_used(b, false);
                self.free += 1;
            }
        }
        // Log only what lies inside the volume: replay rejects anything else.
        if start < end {
            self.sums.forget(start, end - start);
            self.touch(start, end - start);
            self.delta_frees.push((start, end - start));
        }
    }

    /// Free `[start, start+count)`, blocks of the live volume's trees born
    /// in generation `birth`: as [`Allocator::free_range`], unless a
    /// snapshot holds them (born at or below the newest snapshot), when
    /// they stay in use and go to `dying`.
    /// A shared block (`shared.rs`) loses one reference instead.
    pub fn free_born(&mut self, start: u64, count: u64, birth: u32) {
        if !self.shared.is_empty() && self.shared.any_shared(start, count) {
            for (s, c) in self.shared.drop_ref(start, count) {
                self.free_unshared(s, c, birth);
            }
        } else {
            self.free_unshared(start, count, birth);
        }
    }

    fn free_unshared(&mut self, start: u64, count: u64, birth: u32) {
        if self.held_upto.is_some_and(|s| birth <= s) {
            let end = start.saturating_add(count).min(self.blocks);
            if start < end {
                self.dying.push((start, end - start, birth));
            }
        } else {
            self.free_range(start, count);
        }
    }

    /// Take this delta's changes as coalesced (allocs, frees) for the log
    /// of delta `delta`; the frees stay pinned until
    /// [`Allocator::unpin_committed`] names a durable delta at least as new.
    pub fn take_delta(&mut self, delta: u64) -> DeltaChanges {
        let allocs = coalesce(std::mem::take(&mut self.delta_allocs));
        let frees = coalesce(std::mem::take(&mut self.delta_frees));
        self.committing_frees.extend_from_slice(&frees);
        self.committing_delta = Some(delta);
        (allocs, frees)
    }

    /// The commit that took the last delta is durable: release its pins
    /// once the reads of `epoch` and before are done (`drained`), since
    /// they may have mapped the blocks before they were freed
    /// (`backend/readers.rs`); and release those held back before whose
    /// reads are done now.
    /// `durable`: the delta whose commit's final flush returned (None if
    /// it did not), at least the delta that took the frees (A2, asserted
    /// in debug builds).
    pub fn unpin_committed(&mut self, durable: Option<u64>, epoch: u64, drained: impl Fn(u64) -> bool) {
        if let Some(d) = self.committing_delta {
            debug_assert!(
                durable.is_some_and(|n| d <= n),
                "A2: pins of delta {d}'s frees released when the durable delta is {durable:?}"
            );
        }
        let frees = std::mem::take(&mut self.committing_frees);
        if !frees.is_empty() {
            self.held_for_reads.push_back((epoch, frees));
        }
        while self.held_for_reads.front().is_some_and(|(e, _)| drained(*e)) {
            if let Some((_, frees)) = self.held_for_reads.pop_front() {
                self.unpin(frees);
            }
        }
    }

    fn unpin(&mut self, frees: Vec<(u64, u64)>) {
        for &(s, c) in &frees {
            for b in s..s + c {
                if self.is_pinned(b) {
                    self.set_pinned(b, false);
                    if !self.is_used(b) {
                        self.available += 1;
                    }
                }
            }
            self.raise_hints(s, c);
        }
        self.released.extend(frees);
    }
}
