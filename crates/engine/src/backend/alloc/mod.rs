//! Backend layer: the block allocator — free space by allocation group
//! (the blocks one bitmap block covers), the changes of the current delta
//! (logged as Balloc/Bfree records at commit), and the pinned set: blocks
//! freed but still referenced by the durable image.
//!
//! Memory and cost do not grow with the volume's size: a group nothing
//! ever used holds no bits (`group.rs`), only its counts and a hint of its
//! longest free run, so an empty 16 TiB volume costs 16 bytes per 127 MiB.
//! A request is served from a free run of the size asked for, the first
//! at or after the goal (the groups' hints skip those that cannot hold
//! it); only when no group has such a run does it take the longest run
//! there is (ARCHITECTURE.md, "Allocation"). A file written at its end
//! over several deltas keeps the free run after it (its room) for its
//! next delta's data: metadata and other files start outside the rooms
//! while they can (`alloc_outside_rooms`).
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
//! Calls structures (bitmap block geometry).

mod frees;
mod group;
mod rooms;
pub mod shared;
pub mod sums;
#[cfg(test)]
mod tests;

use crate::error::{err, Errno, Result};
use crate::structures::bitmap;
use group::{set, Group};
pub use rooms::ROOM;
pub use shared::{SharedExtents, SharedRun};
use std::collections::{BTreeSet, VecDeque};
pub use sums::{SumChunk, SumTable, SumsHandle};

pub struct Allocator {
    groups: Vec<Group>,
    blocks: u64,
    /// Blocks at or past this are never handed out (a shrink in progress).
    limit: u64,
    /// Blocks clear and not pinned, in the whole volume.
    available: u64,
    /// Of those, the blocks at or past `limit`.
    past_limit: u64,
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
    /// Blocks unpinned and free since the last `take_released`: free for
    /// good (no durable image or snapshot refers to them, no read in
    /// flight may map them), for discard (`backend/discard.rs`).
    released: Vec<(u64, u64)>,
    /// Generation of the blocks allocated now (the birth they get).
    pub generation: u32,
    /// The newest snapshot not being deleted: a block born at or below it
    /// that the live volume frees stays in use, on the dead list.
    pub held_upto: Option<u32>,
    /// Blocks the live volume freed that a snapshot holds: `(start,
    /// count, birth)`, not yet on the dead list.
    pub dying: Vec<(u64, u64, u32)>,
    /// Blocks two or more references of the live volume map (`shared.rs`).
    pub shared: SharedExtents,
    /// Checksums of data blocks kept by device block (`sums.rs`): an entry
    /// goes when its block is freed for reuse ([`Allocator::free_range`]).
    pub sums: SumTable,
    /// Where the data streams of the last `ROOM_DELTAS` deltas ended, and
    /// the delta (counted by `age_rooms`) of each (`keep_room`): the free
    /// run from each, up to `ROOM` blocks, is kept for the stream's next
    /// data; metadata and new files' data go elsewhere
    /// (`alloc_outside_rooms`).
    rooms: Vec<(u64, u64)>,
    room_clock: u64,
    /// The rooms whose streams have data in the delta being committed
    /// (`streams_writing`): only those keep other files' data out.
    writing: Vec<u64>,
}

impl Allocator {
    /// An allocator for `blocks` blocks, all free.
    pub fn new(blocks: u64, block_size: usize) -> Allocator {
        let bpb = bitmap::bits_per_block(block_size);
        let mut a = Allocator {
            groups: Vec::new(),
            blocks: 0,
            limit: 0,
            available: 0,
            past_limit: 0,
            free: 0,
            bits_per_block: bpb,
            dirty: BTreeSet::new(),
            delta_allocs: Vec::new(),
            delta_frees: Vec::new(),
            committing_frees: Vec::new(),
            committing_delta: None,
            held_for_reads: VecDeque::new(),
            released: Vec::new(),
            generation: 0,
            held_upto: None,
            dying: Vec::new(),
            shared: SharedExtents::default(),
            sums: SumTable::default(),
            rooms: Vec::new(),
            room_clock: 0,
            writing: Vec::new(),
        };
        a.grow(blocks);
        a
    }

    pub fn blocks(&self) -> u64 {
        self.blocks
    }
    /// Blocks at or past this are not handed out (a shrink in progress).
    pub fn limit(&self) -> u64 {
        self.limit
    }
    /// Blocks that can be allocated now.
    pub fn available(&self) -> u64 {
        self.available - self.past_limit
    }
    /// Blocks free in the persisted sense (including pinned ones).
    pub fn free(&self) -> u64 {
        self.free
    }
    /// Bytes of memory the free-space state takes (counts, hints, bits).
    pub fn memory(&self) -> usize {
        let words = self.words();
        self.groups.capacity() * std::mem::size_of::<Group>()
            + self.groups.iter().filter(|g| g.bits.is_some()).count() * words * 16
    }
    /// Bitmap blocks whose group holds any bits (the rest are all free).
    pub fn groups_loaded(&self) -> usize {
        self.groups.iter().filter(|g| g.bits.is_some()).count()
    }

    fn words(&self) -> usize {
        (self.bits_per_block as usize).div_ceil(64)
    }
    /// (group, index in it) of block `b`.
    fn at(&self, b: u64) -> (usize, u32) {
        (
            (b / self.bits_per_block) as usize,
            (b % self.bits_per_block) as u32,
        )
    }
    pub fn is_used(&self, b: u64) -> bool {
        let (g, i) = self.at(b);
        b < self.blocks && self.groups[g].is_used(i)
    }
    pub fn is_pinned(&self, b: u64) -> bool {
        let (g, i) = self.at(b);
        b < self.blocks && self.groups[g].is_pinned(i)
    }
    /// Whether bitmap block `index` has no bit set (a sparse bitmap leaves
    /// it out).
    pub fn is_clear(&self, index: u64) -> bool {
        self.groups.get(index as usize).is_none_or(|g| g.free == g.size)
    }

    /// Make the volume `blocks` long (not shorter): the new blocks are free.
    pub fn grow(&mut self, blocks: u64) {
        let bpb = self.bits_per_block;
        if blocks <= self.blocks {
            return;
        }
        let added = blocks - self.blocks;
        let n = self.groups.len() as u64;
        if let Some(last) = self.groups.last_mut() {
            let size = (blocks - (n - 1) * bpb).min(bpb) as u32;
            let more = size - last.size;
            (last.size, last.free, last.avail) = (size, last.free + more, last.avail + more);
            last.hint = last.avail;
        }
        let total = blocks.div_ceil(bpb) as usize;
        let first = self.groups.len();
        self.groups.reserve_exact(total - first);
        for g in first..total {
            let size = (blocks - g as u64 * bpb).min(bpb) as u32;
            self.groups.push(Group::empty(size));
        }
        self.blocks = blocks;
        self.limit = blocks;
        self.past_limit = 0;
        self.free += added;
        self.available += added;
    }

    /// Hand out no block at or past `limit` (a shrink to it in progress);
    /// `blocks()` lifts it.
    pub fn set_limit(&mut self, limit: u64) {
        self.limit = limit.clamp(2, self.blocks);
        self.past_limit = self
            .free_runs(self.limit, self.blocks, usize::MAX)
            .iter()
            .map(|r| r.1)
            .sum();
    }

    /// Blocks at or past `from` in use or pinned.
    pub fn taken_past(&self, from: u64) -> u64 {
        let free: u64 = self
            .free_runs(from, self.blocks, usize::MAX)
            .iter()
            .map(|r| r.1)
            .sum();
        self.blocks.saturating_sub(from) - free
    }

    /// Make the volume `blocks` long, all of whose blocks past that are
    /// free and unpinned (see [`Allocator::taken_past`]): false, changing
    /// nothing, if some are not.
    pub fn truncate(&mut self, blocks: u64) -> bool {
        if blocks >= self.blocks || self.taken_past(blocks) != 0 {
            return blocks == self.blocks;
        }
        let bpb = self.bits_per_block;
        let cut = self.blocks - blocks;
        self.groups.truncate(blocks.div_ceil(bpb) as usize);
        let n = self.groups.len() as u64;
        if let Some(last) = self.groups.last_mut() {
            let size = (blocks - (n - 1) * bpb).min(bpb) as u32;
            let less = last.size - size;
            (last.size, last.free, last.avail) = (size, last.free - less, last.avail - less);
            last.settle();
        }
        self.groups.shrink_to_fit();
        self.dirty.retain(|&i| i < n);
        self.blocks = blocks;
        self.limit = blocks;
        self.free -= cut;
        self.available -= cut;
        self.past_limit = 0;
        true
    }

    /// The ranges `(start, count)` unpinned (by
    /// [`Allocator::unpin_committed`]) and free since the last call, sorted
    /// and coalesced: free for good, past the reads that may have mapped
    /// them. Blocks handed out again since are left out.
    pub fn take_released(&mut self) -> Vec<(u64, u64)> {
        let all = coalesce(std::mem::take(&mut self.released));
        let mut out: Vec<(u64, u64)> = Vec::with_capacity(all.len());
        for (s, c) in all {
            let free = |b: &u64| *b < self.blocks && !self.is_used(*b) && !self.is_pinned(*b);
            for b in (s..s + c).filter(free) {
                match out.last_mut() {
                    Some((ls, lc)) if *ls + *lc == b => *lc += 1,
                    _ => out.push((b, 1)),
                }
            }
        }
        out
    }

    /// Runs of blocks free and not pinned in `[from, to)`, in order, at
    /// most `max` of them: (start, count).
    pub fn free_runs(&self, from: u64, to: u64, max: usize) -> Vec<(u64, u64)> {
        let to = to.min(self.blocks);
        let mut out: Vec<(u64, u64)> = Vec::new();
        let mut b = from.max(2);
        while b < to && out.len() < max {
            let (g, i) = self.at(b);
            let base = g as u64 * self.bits_per_block;
            for (s, n) in self.groups[g].free_runs(i) {
                let (s, e) = (base + u64::from(s), (base + u64::from(s + n)).min(to));
                if s >= e {
                    break;
                }
                let full = out.len() >= max;
                match out.last_mut() {
                    Some((ls, lc)) if *ls + *lc == s => *lc += e - s,
                    _ if full => break,
                    _ => out.push((s, e - s)),
                }
            }
            b = base + self.bits_per_block;
        }
        out
    }

    /// Call `f(start, count)` on each run of blocks free and not pinned in
    /// `[from, to)`, in order, until it returns false; the runs are taken
    /// a batch at a time, so a fragmented volume's are never all in memory.
    pub fn for_free_runs(&self, from: u64, to: u64, mut f: impl FnMut(u64, u64) -> bool) {
        const BATCH: usize = 1024;
        let mut from = from;
        loop {
            let batch = self.free_runs(from, to, BATCH);
            // A full batch's last run may go on past where it stopped:
            // it is taken whole by the next batch.
            let full = batch.len() >= BATCH;
            let take = if full { batch.len() - 1 } else { batch.len() };
            for &(s, n) in &batch[..take] {
                if !f(s, n) {
                    return;
                }
            }
            if !full {
                return;
            }
            from = batch[take].0;
        }
    }

    /// Load bitmap block `index`'s bit bytes (at open).
    pub fn load_bits(&mut self, index: u64, bits: &[u8]) {
        let words = self.words();
        let Some(g) = self.groups.get_mut(index as usize) else {
            return;
        };
        let size = u64::from(g.size);
        let mut added = 0u64;
        for (w, chunk) in bits.chunks(8).enumerate().take(words) {
            let mut le = [0u8; 8];
            le[..chunk.len()].copy_from_slice(chunk);
            let mut word = u64::from_le_bytes(le);
            let base = w as u64 * 64;
            if base >= size {
                break;
            }
            if base + 64 > size {
                word &= (1u64 << (size - base)) - 1;
            }
            if word == 0 {
                continue;
            }
            let b = g.bits_mut(words);
            let new = word & !b.used[w] & !b.pinned[w];
            b.used[w] |= word;
            added += u64::from(new.count_ones());
        }
        g.free -= added as u32;
        g.avail -= added as u32;
        g.settle();
        self.free -= added;
        self.available -= added;
    }

    /// Bit bytes of bitmap block `index` (for writing it).
    pub fn bits(&self, index: u64, block_size: usize) -> Vec<u8> {
        let mut out = vec![0u8; block_size - bitmap::HEADER];
        let Some(bits) = self.groups.get(index as usize).and_then(|g| g.bits.as_ref()) else {
            return out;
        };
        for (chunk, word) in out.chunks_mut(8).zip(bits.used.iter()) {
            chunk.copy_from_slice(&word.to_le_bytes()[..chunk.len()]);
        }
        out
    }

    /// Set or clear block `b`'s used bit, counting nothing but the group's.
    fn set_used(&mut self, b: u64, on: bool) {
        let words = self.words();
        let (g, i) = self.at(b);
        let past = b >= self.limit;
        let grp = &mut self.groups[g];
        let before = grp.avail;
        let pinned = grp.is_pinned(i);
        set(&mut grp.bits_mut(words).used, i, on);
        if on {
            grp.free -= 1;
            if !pinned {
                grp.avail -= 1;
            }
        } else {
            grp.free += 1;
            if !pinned {
                grp.avail += 1;
            }
        }
        if past {
            self.past_limit = self.past_limit + u64::from(grp.avail) - u64::from(before);
        }
    }

    /// The bitmap blocks of `[start, start+count)` changed.
    fn touch(&mut self, start: u64, count: u64) {
        if count > 0 {
            let (first, last) = (self.index_of(start), self.index_of(start + count - 1));
            self.dirty.extend(first..=last);
        }
    }

    fn set_pinned(&mut self, b: u64, on: bool) {
        let words = self.words();
        let (g, i) = self.at(b);
        let past = b >= self.limit;
        let grp = &mut self.groups[g];
        let before = grp.avail;
        let used = grp.is_used(i);
        set(&mut grp.bits_mut(words).pinned, i, on);
        if !used {
            if on {
                grp.avail -= 1;
            } else {
                grp.avail += 1;
            }
        }
        if past {
            self.past_limit = self.past_limit + u64::from(grp.avail) - u64::from(before);
        }
    }

    /// Replay or mkfs: mark `[start, start+count)` in use. False if out of
    /// range.
    pub fn apply_alloc(&mut self, start: u64, count: u64) -> bool {
        if start.checked_add(count).is_none_or(|e| e > self.blocks) {
            return false;
        }
        for b in start..start + count {
            if !self.is_used(b) {
                let pinned = self.is_pinned(b);
                self.set_used(b, true);
                self.free -= 1;
                if !pinned {
                    self.available -= 1;
                }
            }
        }
        self.touch(start, count);
        self.settle(start, count);
        true
    }

    /// Replay: mark `[start, start+count)` free (not pinned: the delta that
    /// freed them is durable).
    pub fn apply_free(&mut self, start: u64, count: u64) -> bool {
        if start.checked_add(count).is_none_or(|e| e > self.blocks) {
            return false;
        }
        for b in start..start + count {
            if self.is_used(b) {
                let pinned = self.is_pinned(b);
                self.set_used(b, false);
                self.free += 1;
                if !pinned {
                    self.available += 1;
                }
            }
        }
        self.touch(start, count);
        self.raise_hints(start, count);
        true
    }

    /// Hints of the groups of `[start, start+count)` after blocks became
    /// allocatable there: their allocatable count bounds the longest run.
    fn raise_hints(&mut self, start: u64, count: u64) {
        self.for_groups(start, count, |g| {
            g.hint = g.avail;
            g.settle();
        });
    }

    fn settle(&mut self, start: u64, count: u64) {
        self.for_groups(start, count, Group::settle);
    }

    fn for_groups(&mut self, start: u64, count: u64, f: impl Fn(&mut Group)) {
        if count == 0 {
            return;
        }
        let (first, _) = self.at(start);
        let (last, _) = self.at(start + count - 1);
        let last = last.min(self.groups.len() - 1);
        for g in &mut self.groups[first..=last] {
            f(g);
        }
    }

    /// The first run of at least `want` allocatable blocks at or after
    /// `goal`, wrapping to the start of the volume: (start, length).
    fn search(&mut self, goal: u64, want: u32) -> Option<(u64, u64)> {
        let bpb = self.bits_per_block;
        let n = self.groups.len();
        let (g0, i0) = self.at(goal);
        let last = ((self.limit.max(1) - 1) / bpb) as usize;
        for step in 0..=n {
            let g = (g0 + step) % n;
            if g > last {
                continue;
            }
            let from = if step == 0 { i0 } else { 0 };
            let from = if g == 0 { from.max(2) } else { from };
            if let Some((s, len)) = self.groups[g].find(from, want) {
                let start = g as u64 * bpb + u64::from(s);
                let len = u64::from(len).min(self.limit.saturating_sub(start));
                if len >= u64::from(want) {
                    return Some((start, len));
                }
            }
            if let Some(run) = self.run_across(g, from, want) {
                return Some(run);
            }
        }
        None
    }

    /// A run of at least `want` allocatable blocks that starts in group
    /// `g` at or after `from` and goes on into the groups after it (a
    /// group's own search sees only its part): a stream's next request
    /// near the end of a group is served there, not at the next group's
    /// start, which would leave the rest of this group's run as a hole in
    /// the stream.
    fn run_across(&self, g: usize, from: u32, want: u32) -> Option<(u64, u64)> {
        let (grp, next) = (&self.groups[g], self.groups.get(g + 1)?);
        // The hints bound the run before any bits are scanned: this
        // group's part is at most its longest run, the next group's at
        // most its own unless it is wholly free (then the run may go on).
        let next_most = if next.avail == next.size {
            u64::MAX
        } else {
            u64::from(next.hint)
        };
        if u64::from(grp.hint).saturating_add(next_most) < u64::from(want) || !next.is_avail(0) {
            return None;
        }
        let s = grp.tail_start(from)?;
        let start = g as u64 * self.bits_per_block + u64::from(s);
        let len = self.run_from(start, u64::from(want));
        (len >= u64::from(want)).then_some((start, len))
    }

    /// The blocks allocatable from `b` on, at most `max`, across groups.
    fn run_from(&self, b: u64, max: u64) -> u64 {
        let mut len = 0;
        while len < max && b + len < self.limit {
            let (g, i) = self.at(b + len);
            let grp = &self.groups[g];
            let n = u64::from(grp.run_from(i, (max - len).min(u64::from(u32::MAX)) as u32));
            len += n;
            if n == 0 || u64::from(i) + n < u64::from(grp.size) {
                break;
            }
        }
        len.min(max)
    }

    /// Allocate up to `want` contiguous blocks near `goal` (at least one):
    /// the first run at or after the goal of the size asked for (at most a
    /// group's), else the longest run there is. The allocation is recorded
    /// for the log unless `logged` is false.
    pub fn alloc(&mut self, goal: u64, want: u64, logged: bool) -> Result<(u64, u64)> {
        if self.available == 0 || want == 0 {
            return err(Errno::ENOSPC);
        }
        let goal = if goal >= self.limit { 2 } else { goal.max(2) };
        let mut found = None;
        let mut size = want.min(self.bits_per_block) as u32;
        while found.is_none() {
            found = self.search(goal, size);
            if found.is_none() {
                if size == 1 {
                    return err(Errno::ENOSPC);
                }
                let best = self.groups.iter().map(|g| g.hint).max().unwrap_or(0);
                size = best.clamp(1, size - 1);
            }
        }
        let (start, _) = found.unwrap_or((goal, 0));
        let len = self.run_from(start, want);
        if len == 0 {
            return err(Errno::ENOSPC);
        }
        self.check_fresh(start, len);
        for b in start..start + len {
            self.set_used(b, true);
        }
        self.touch(start, len);
        self.settle(start, len);
        self.free -= len;
        self.available -= len;
        if logged {
            self.delta_allocs.push((start, len));
        }
        Ok((start, len))
    }

    /// Whether a run of `want` allocatable blocks exists (a look, for
    /// callers that place a whole file: defrag).
    pub fn has_run(&mut self, goal: u64, want: u64) -> Option<u64> {
        let size = want.min(self.bits_per_block) as u32;
        let (start, _) = self.search(goal.max(2), size)?;
        (self.run_from(start, want) >= want).then_some(start)
    }

    /// A1, in debug builds: no block of `start..start+len`, about to be
    /// handed out, is in use or pinned.
    fn check_fresh(&self, start: u64, len: u64) {
        if !cfg!(debug_assertions) {
            return;
        }
        for b in start..start + len {
            debug_assert!(!self.is_used(b), "A1: block {b} handed out while in use");
            debug_assert!(!self.is_pinned(b), "A1: block {b} handed out while pinned");
        }
    }

    /// Give back block `b`, handed out unlogged (`alloc(.., false)`) and
    /// referenced by nothing yet: a log layout that could not be finished.
    pub fn unreserve(&mut self, b: u64) {
        if b < self.blocks && self.is_used(b) {
            let pinned = self.is_pinned(b);
            self.set_used(b, false);
            self.free += 1;
            if !pinned {
                self.available += 1;
            }
            self.raise_hints(b, 1);
        }
    }

    /// Allocate one block near `goal`.
    pub fn alloc_one(&mut self, goal: u64) -> Result<u64> {
        self.alloc_meta(goal, true)
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
