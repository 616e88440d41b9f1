//! Backend layer: the block allocator — the whole free-space bitmap in
//! memory, the changes of the current delta (logged as Balloc/Bfree records
//! at commit), and the pinned set: blocks freed but still referenced by the
//! durable image.
//!
//! Invariant A1: a block is handed out only if its bit is clear and it is
//! not pinned, so no allocation ever overwrites a block that the durable
//! image (last unify + committed log) still references (asserted in debug
//! builds by `alloc`, the one path that hands blocks out; `apply_alloc`
//! marks blocks the image already references: replay, mkfs, repair).
//! Invariant A2: pins are released only after the commit that freed the
//! block is durable (`unpin_committed`, called by `Backend::finish`, which
//! names the delta made durable: asserted in debug builds to be at least the
//! delta whose frees are pinned).
//!
//! Snapshots: a block freed by the live volume whose birth (the
//! generation it was written in) is at or below the newest snapshot is
//! held by a snapshot. `free_born` leaves it in use and queues it in
//! `dying`, for the snapshot table's dead list (`backend/snapshot.rs`).
//!
//! Calls structures (bitmap block encoding).

use crate::error::{err, Errno, Result};
use crate::structures::bitmap;
use std::collections::{BTreeSet, VecDeque};

pub struct Allocator {
    /// 1 bit per block: in use.
    used: Vec<u64>,
    /// 1 bit per block: freed in an uncommitted or not-yet-durable delta.
    pinned: Vec<u64>,
    blocks: u64,
    /// Blocks whose bit is clear and that are not pinned.
    available: u64,
    /// Bits clear (free in the persisted sense, pinned or not).
    free: u64,
    bits_per_block: u64,
    /// Bitmap blocks whose bits changed since the last unify.
    pub dirty: BTreeSet<u64>,
    /// Allocations and frees of the current delta, for the log.
    pub delta_allocs: Vec<(u64, u64)>,
    pub delta_frees: Vec<(u64, u64)>,
    /// Frees still pinned after the current delta's records were taken
    /// (released once the commit is durable).
    committing_frees: Vec<(u64, u64)>,
    /// The delta whose records took `committing_frees` last (A2).
    committing_delta: Option<u64>,
    /// Frees durable already, still pinned for the reads in the device
    /// that may have mapped them: (read epoch, ranges), oldest first
    /// (`backend/readers.rs`).
    held_for_reads: VecDeque<(u64, Vec<(u64, u64)>)>,
    /// Generation of the blocks allocated now (the birth they get).
    pub generation: u32,
    /// The newest snapshot not being deleted: a block born at or below it
    /// that the live volume frees stays in use, on the dead list.
    pub held_upto: Option<u32>,
    /// Blocks the live volume freed that a snapshot holds: `(start,
    /// count, birth)`, not yet on the dead list.
    pub dying: Vec<(u64, u64, u32)>,
}

fn get(v: &[u64], b: u64) -> bool {
    v[(b / 64) as usize] & (1 << (b % 64)) != 0
}
fn set(v: &mut [u64], b: u64, on: bool) {
    let w = &mut v[(b / 64) as usize];
    if on {
        *w |= 1 << (b % 64)
    } else {
        *w &= !(1 << (b % 64))
    }
}

impl Allocator {
    /// An allocator for `blocks` blocks, all free.
    pub fn new(blocks: u64, block_size: usize) -> Allocator {
        let words = blocks.div_ceil(64) as usize;
        Allocator {
            used: vec![0; words],
            pinned: vec![0; words],
            blocks,
            available: blocks,
            free: blocks,
            bits_per_block: bitmap::bits_per_block(block_size),
            dirty: BTreeSet::new(),
            delta_allocs: Vec::new(),
            delta_frees: Vec::new(),
            committing_frees: Vec::new(),
            committing_delta: None,
            held_for_reads: VecDeque::new(),
            generation: 0,
            held_upto: None,
            dying: Vec::new(),
        }
    }

    pub fn blocks(&self) -> u64 {
        self.blocks
    }
    /// Blocks that can be allocated now.
    pub fn available(&self) -> u64 {
        self.available
    }
    /// Blocks free in the persisted sense (including pinned ones).
    pub fn free(&self) -> u64 {
        self.free
    }
    pub fn is_used(&self, b: u64) -> bool {
        b < self.blocks && get(&self.used, b)
    }
    pub fn is_pinned(&self, b: u64) -> bool {
        b < self.blocks && get(&self.pinned, b)
    }

    /// Load bitmap block `index`'s bit bytes (at open).
    pub fn load_bits(&mut self, index: u64, bits: &[u8]) {
        let first = index * self.bits_per_block;
        for (i, byte) in bits.iter().enumerate() {
            if *byte == 0 {
                continue;
            }
            for j in 0..8 {
                let b = first + (i * 8 + j) as u64;
                if byte & (1 << j) != 0 && b < self.blocks && !get(&self.used, b) {
                    set(&mut self.used, b, true);
                    self.free -= 1;
                    self.available -= 1;
                }
            }
        }
    }

    /// Bit bytes of bitmap block `index` (for writing it).
    pub fn bits(&self, index: u64, block_size: usize) -> Vec<u8> {
        let mut out = vec![0u8; block_size - bitmap::HEADER];
        let first = index * self.bits_per_block;
        for (i, byte) in out.iter_mut().enumerate() {
            for j in 0..8 {
                let b = first + (i * 8 + j) as u64;
                if b < self.blocks && get(&self.used, b) {
                    *byte |= 1 << j;
                }
            }
        }
        out
    }

    fn mark(&mut self, start: u64, count: u64, on: bool) {
        for b in start..start + count {
            set(&mut self.used, b, on);
            self.dirty.insert(b / self.bits_per_block);
        }
    }

    /// Replay or mkfs: mark `[start, start+count)` in use. Errors (as
    /// corruption of `log_block`) if out of range.
    pub fn apply_alloc(&mut self, start: u64, count: u64) -> bool {
        if start.checked_add(count).is_none_or(|e| e > self.blocks) {
            return false;
        }
        for b in start..start + count {
            if !get(&self.used, b) {
                set(&mut self.used, b, true);
                self.dirty.insert(b / self.bits_per_block);
                self.free -= 1;
                if !get(&self.pinned, b) {
                    self.available -= 1;
                }
            }
        }
        true
    }

    /// Replay: mark `[start, start+count)` free (not pinned: the delta that
    /// freed them is durable).
    pub fn apply_free(&mut self, start: u64, count: u64) -> bool {
        if start.checked_add(count).is_none_or(|e| e > self.blocks) {
            return false;
        }
        for b in start..start + count {
            if get(&self.used, b) {
                set(&mut self.used, b, false);
                self.dirty.insert(b / self.bits_per_block);
                self.free += 1;
                self.available += 1;
            }
        }
        true
    }

    /// Allocate up to `want` contiguous blocks near `goal` (at least one).
    /// The allocation is recorded for the log unless `logged` is false.
    pub fn alloc(&mut self, goal: u64, want: u64, logged: bool) -> Result<(u64, u64)> {
        if self.available == 0 || want == 0 {
            return err(Errno::ENOSPC);
        }
        let n = self.blocks;
        let goal = if goal >= n { 2 } else { goal.max(2) };
        let mut b = goal;
        let mut wrapped = false;
        loop {
            if b >= n {
                if wrapped {
                    return err(Errno::ENOSPC);
                }
                wrapped = true;
                b = 2;
            }
            if wrapped && b >= goal {
                return err(Errno::ENOSPC);
            }
            // Skip full words quickly.
            let w = (b / 64) as usize;
            if b % 64 == 0 && (self.used[w] | self.pinned[w]) == u64::MAX {
                b += 64;
                continue;
            }
            if !get(&self.used, b) && !get(&self.pinned, b) {
                let mut len = 1;
                while len < want && b + len < n && !get(&self.used, b + len) && !get(&self.pinned, b + len) {
                    len += 1;
                }
                self.check_fresh(b, len);
                self.mark(b, len, true);
                self.free -= len;
                self.available -= len;
                if logged {
                    self.delta_allocs.push((b, len));
                }
                return Ok((b, len));
            }
            b += 1;
        }
    }

    /// A1, in debug builds: no block of `start..start+len`, about to be
    /// handed out, is in use or pinned.
    fn check_fresh(&self, start: u64, len: u64) {
        if !cfg!(debug_assertions) {
            return;
        }
        for b in start..start + len {
            debug_assert!(!get(&self.used, b), "A1: block {b} handed out while in use");
            debug_assert!(!get(&self.pinned, b), "A1: block {b} handed out while pinned");
        }
    }

    /// Give back block `b`, handed out unlogged (`alloc(.., false)`) and
    /// referenced by nothing yet: a log layout that could not be finished.
    pub fn unreserve(&mut self, b: u64) {
        if b < self.blocks && get(&self.used, b) {
            set(&mut self.used, b, false);
            self.free += 1;
            if !get(&self.pinned, b) {
                self.available += 1;
            }
        }
    }

    /// Allocate one block near `goal`.
    pub fn alloc_one(&mut self, goal: u64) -> Result<u64> {
        Ok(self.alloc(goal, 1, true)?.0)
    }

    /// Free `[start, start+count)`: clear the bits now, pin them until the
    /// current delta is durable (A2).
    /// Blocks outside the volume or already free are ignored (they can only
    /// come from corrupt metadata, which fsck reports).
    pub fn free_range(&mut self, start: u64, count: u64) {
        let end = start.saturating_add(count).min(self.blocks);
        for b in start.min(end)..end {
            if get(&self.used, b) {
                set(&mut self.used, b, false);
                set(&mut self.pinned, b, true);
                self.dirty.insert(b / self.bits_per_block);
                self.free += 1;
            }
        }
        // Log only what lies inside the volume: replay rejects anything else.
        if start < end {
            self.delta_frees.push((start, end - start));
        }
    }

    /// Free `[start, start+count)`, blocks of the live volume's trees born
    /// in generation `birth`: as [`Allocator::free_range`], unless a
    /// snapshot holds them (born at or below the newest snapshot), when
    /// they stay in use and go to `dying`.
    pub fn free_born(&mut self, start: u64, count: u64, birth: u32) {
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
        for (s, c) in frees {
            for b in s..s + c {
                if get(&self.pinned, b) {
                    set(&mut self.pinned, b, false);
                    if !get(&self.used, b) {
                        self.available += 1;
                    }
                }
            }
        }
    }

    /// Bitmap block holding block `b`'s bit.
    pub fn index_of(&self, b: u64) -> u64 {
        b / self.bits_per_block
    }
}

/// Block ranges (start, count) a delta allocated and freed.
pub type DeltaChanges = (Vec<(u64, u64)>, Vec<(u64, u64)>);

/// Sort and merge adjacent ranges.
pub fn coalesce(mut v: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    v.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(v.len());
    for (s, c) in v {
        match out.last_mut() {
            Some((ls, lc)) if *ls + *lc == s && *lc + c <= u32::MAX as u64 => *lc += c,
            _ => out.push((s, c)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn freed_blocks_stay_pinned_until_durable() {
        let mut a = Allocator::new(100, 1024);
        a.apply_alloc(0, 2);
        let (s, n) = a.alloc(10, 5, true).unwrap();
        assert_eq!((s, n), (10, 5));
        a.free_range(10, 5);
        // Pinned: the next allocation must not reuse them.
        assert_eq!(a.alloc(10, 1, true).unwrap().0, 15);
        let (allocs, frees) = a.take_delta(1);
        assert_eq!(allocs, vec![(10, 6)]);
        assert_eq!(frees, vec![(10, 5)]);
        assert_eq!(a.alloc(10, 1, true).unwrap().0, 16);
        a.unpin_committed(Some(1), 0, |_| true);
        assert_eq!(a.alloc(10, 1, true).unwrap().0, 10);
    }

    #[test]
    fn durable_frees_wait_for_the_reads_that_may_have_mapped_them() {
        let mut a = Allocator::new(100, 1024);
        a.apply_alloc(0, 2);
        assert_eq!(a.alloc(10, 4, true).unwrap(), (10, 4));
        a.free_range(10, 4);
        a.take_delta(1);
        // Durable, but a read of epoch 3 or before is in the device.
        a.unpin_committed(Some(1), 3, |e| e < 3);
        assert_eq!(a.alloc(10, 1, true).unwrap().0, 14, "held for the read");
        a.free_range(14, 1);
        a.take_delta(2);
        // The next commit's end: epoch 3's reads are done, epoch 4's not.
        a.unpin_committed(Some(2), 4, |e| e <= 3);
        assert_eq!(
            a.alloc(10, 4, true).unwrap(),
            (10, 4),
            "released once the read is done"
        );
        assert_eq!(
            a.alloc(14, 1, true).unwrap().0,
            15,
            "its own frees wait for epoch 4"
        );
        a.unpin_committed(Some(2), 5, |_| true);
        assert_eq!(a.alloc(14, 1, true).unwrap().0, 14);
    }

    #[test]
    fn exhaustion_is_enospc() {
        let mut a = Allocator::new(10, 1024);
        a.apply_alloc(0, 2);
        for _ in 0..8 {
            a.alloc_one(0).unwrap();
        }
        assert_eq!(a.alloc_one(0).unwrap_err().errno(), Errno::ENOSPC);
        assert_eq!(a.available(), 0);
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "A1: block 10 handed out while pinned")]
    fn a_pinned_block_fails_a1() {
        let mut a = Allocator::new(100, 1024);
        a.apply_alloc(0, 2);
        a.alloc(10, 1, true).unwrap();
        a.free_range(10, 1);
        // The search skips it; the check itself must catch it too.
        a.check_fresh(10, 1);
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "A2")]
    fn unpinning_before_the_freeing_delta_is_durable_fails_a2() {
        let mut a = Allocator::new(100, 1024);
        a.apply_alloc(0, 2);
        a.alloc(10, 1, true).unwrap();
        a.free_range(10, 1);
        a.take_delta(7);
        // Only delta 6 is durable: delta 7's frees must stay pinned.
        a.unpin_committed(Some(6), 0, |_| true);
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "A2")]
    fn unpinning_before_the_final_flush_fails_a2() {
        let mut a = Allocator::new(100, 1024);
        a.apply_alloc(0, 2);
        a.alloc(10, 1, true).unwrap();
        a.free_range(10, 1);
        a.take_delta(7);
        a.unpin_committed(None, 0, |_| true);
    }
}
