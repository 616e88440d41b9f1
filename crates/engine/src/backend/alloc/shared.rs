//! Backend layer, allocator: the shared-extent table — ranges of blocks
//! that two or more references of the live volume map (clones, dedupe),
//! with their reference count. A block not in the table has one reference
//! if it is in use by a file, none if it is free: the table holds only
//! what sharing added, so a volume that never shared anything has none.
//!
//! A reference is one extent entry of a live file's tree mapping the
//! block. Sharing a range adds one reference to every block of it; a free
//! of a shared block (`Allocator::free_born`) takes one away instead of
//! freeing it, and only the last reference frees it (to the dead list, if
//! a snapshot holds it: the block's birth is its first write's, so the
//! snapshots that hold it are exactly those of `[birth, last death)`).
//!
//! The cost is per extent: an entry is a run of blocks with one count,
//! split only where counts differ. Changes are noted by key (`dirty`) so
//! that a commit logs them (`Share` records) and writes them to the
//! snapshot table's tree (`backend/shared_table.rs`).
//!
//! Calls nothing outside the allocator.

use std::collections::{BTreeMap, BTreeSet};

/// Longest run one entry holds (its count is logged in 32 bits).
pub const MAX_ENTRY: u64 = u32::MAX as u64;

/// One entry: `count` blocks from its key, each with `refs` (≥ 2) references.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedRun {
    pub count: u64,
    pub refs: u32,
}

/// The table, in memory whole.
#[derive(Debug, Default, Clone)]
pub struct SharedExtents {
    runs: BTreeMap<u64, SharedRun>,
    /// Keys inserted, changed or removed since the last `take_dirty`.
    dirty: BTreeSet<u64>,
    /// Blocks in the table, and references beyond the first over them.
    blocks: u64,
    extra: u64,
}

impl SharedExtents {
    /// Runs in the table.
    pub fn len(&self) -> usize {
        self.runs.len()
    }
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }
    /// Blocks the table covers.
    pub fn blocks(&self) -> u64 {
        self.blocks
    }
    /// References beyond the first, summed over blocks: what sharing saves.
    pub fn saved(&self) -> u64 {
        self.extra
    }
    /// Every run, in block order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, SharedRun)> + '_ {
        self.runs.iter().map(|(k, r)| (*k, *r))
    }
    /// Bytes of memory the table takes, about.
    pub fn memory(&self) -> usize {
        self.runs.len() * 64
    }

    /// References of block `b` recorded here (0: not shared).
    pub fn refs(&self, b: u64) -> u32 {
        match self.runs.range(..=b).next_back() {
            Some((&k, r)) if b < k + r.count => r.refs,
            _ => 0,
        }
    }

    /// A run overlapping the one at `start` (one before it reaching into
    /// it, or one starting inside it): that run's start. `None` when there
    /// is no run at `start` or it overlaps nothing.
    pub fn overlapping(&self, start: u64) -> Option<u64> {
        let run = self.runs.get(&start)?;
        let before = self.runs.range(..start).next_back();
        if let Some((&k, _)) = before.filter(|(&k, r)| k + r.count > start) {
            return Some(k);
        }
        let end = start.saturating_add(run.count);
        self.runs.range(start + 1..end).next().map(|(&k, _)| k)
    }

    /// Whether any block of `start..start+count` is shared.
    pub fn any_shared(&self, start: u64, count: u64) -> bool {
        let end = start.saturating_add(count);
        if let Some((&k, r)) = self.runs.range(..start).next_back() {
            if k + r.count > start {
                return true;
            }
        }
        self.runs.range(start..end).next().is_some()
    }

    /// The pieces of `start..start+count` in order: (start, count, refs
    /// recorded, 0 where not shared).
    pub fn pieces(&self, start: u64, count: u64) -> Vec<(u64, u64, u32)> {
        let end = start.saturating_add(count);
        let mut out = Vec::new();
        let mut at = start;
        let first = self
            .runs
            .range(..start)
            .next_back()
            .filter(|(k, r)| *k + r.count > start)
            .map(|(k, _)| *k);
        let from = first.unwrap_or(start);
        for (&k, r) in self.runs.range(from..end) {
            let (s, e) = (k.max(at), (k + r.count).min(end));
            if s >= e {
                continue;
            }
            if s > at {
                out.push((at, s - at, 0));
            }
            out.push((s, e - s, r.refs));
            at = e;
        }
        if at < end {
            out.push((at, end - at, 0));
        }
        out
    }

    /// Split the run holding `b` (if one starts before it) so that one starts at `b`.
    fn split_at(&mut self, b: u64) {
        let Some((&k, &r)) = self.runs.range(..b).next_back() else {
            return;
        };
        if k + r.count <= b {
            return;
        }
        self.runs.insert(
            k,
            SharedRun {
                count: b - k,
                refs: r.refs,
            },
        );
        self.runs.insert(
            b,
            SharedRun {
                count: k + r.count - b,
                refs: r.refs,
            },
        );
        self.dirty.insert(k);
        self.dirty.insert(b);
    }

    /// Set the references of `start..start+count` to `refs` (below 2: not
    /// shared, no entry), splitting runs at the edges; runs longer than
    /// [`MAX_ENTRY`] are cut.
    pub fn set(&mut self, start: u64, count: u64, refs: u32) {
        if count == 0 {
            return;
        }
        let end = start + count;
        self.split_at(start);
        self.split_at(end);
        let inside: Vec<u64> = self.runs.range(start..end).map(|(k, _)| *k).collect();
        for k in inside {
            if let Some(r) = self.runs.remove(&k) {
                self.blocks -= r.count;
                self.extra -= r.count * u64::from(r.refs - 1);
            }
            self.dirty.insert(k);
        }
        if refs >= 2 {
            let mut at = start;
            while at < end {
                let c = (end - at).min(MAX_ENTRY);
                self.runs.insert(at, SharedRun { count: c, refs });
                self.dirty.insert(at);
                at += c;
            }
            self.blocks += count;
            self.extra += count * u64::from(refs - 1);
        }
    }

    /// One more reference to every block of `start..start+count`, which
    /// the live volume maps already (one reference where not shared).
    pub fn add_ref(&mut self, start: u64, count: u64) {
        for (s, c, refs) in self.pieces(start, count) {
            self.set(s, c, refs.max(1).saturating_add(1));
        }
    }

    /// Take one reference off every block of `start..start+count`; return
    /// the pieces that had none left to give (not shared: the caller frees
    /// them).
    pub fn drop_ref(&mut self, start: u64, count: u64) -> Vec<(u64, u64)> {
        let mut free = Vec::new();
        for (s, c, refs) in self.pieces(start, count) {
            if refs < 2 {
                free.push((s, c));
            } else {
                self.set(s, c, refs - 1);
            }
        }
        free
    }

    /// Replay of a `Share` record, and loading the table: the run at
    /// `start` is `count` blocks with `refs` references, or (refs 0) there
    /// is none at `start`.
    pub fn apply(&mut self, start: u64, count: u64, refs: u32) {
        if let Some(r) = self.runs.remove(&start) {
            self.blocks -= r.count;
            self.extra -= r.count * u64::from(r.refs - 1);
        }
        if refs >= 2 && count > 0 {
            self.runs.insert(start, SharedRun { count, refs });
            self.blocks += count;
            self.extra += count * u64::from(refs - 1);
        }
        self.dirty.insert(start);
    }

    /// Merge neighbours with the same count of references (after a
    /// batch of changes), so the table stays one entry per extent.
    pub fn coalesce_dirty(&mut self) {
        let keys: Vec<u64> = self.dirty.iter().copied().collect();
        for k in keys {
            // The run at or before `k`, merged with the runs after it.
            let Some((&mut_start, &first)) = self.runs.range(..=k).next_back() else {
                continue;
            };
            let (mut at, mut run) = (mut_start, first);
            if let Some((&p, &prev)) = self.runs.range(..at).next_back() {
                if p + prev.count == at && prev.refs == run.refs && prev.count + run.count <= MAX_ENTRY {
                    self.runs.remove(&at);
                    self.dirty.insert(at);
                    at = p;
                    run = SharedRun {
                        count: prev.count + run.count,
                        refs: run.refs,
                    };
                }
            }
            while let Some(&next) = self.runs.get(&(at + run.count)) {
                if next.refs != run.refs || run.count + next.count > MAX_ENTRY {
                    break;
                }
                self.runs.remove(&(at + run.count));
                self.dirty.insert(at + run.count);
                run.count += next.count;
            }
            if run != first || at != mut_start {
                self.runs.insert(at, run);
                self.dirty.insert(at);
            }
        }
    }

    /// The keys changed since the last call, each with its run now (None:
    /// no run starts there any more).
    pub fn take_dirty(&mut self) -> Vec<(u64, Option<SharedRun>)> {
        self.coalesce_dirty();
        let dirty = std::mem::take(&mut self.dirty);
        dirty
            .into_iter()
            .map(|k| (k, self.runs.get(&k).copied()))
            .collect()
    }

    /// Forget the changes noted (a loaded table is clean).
    pub fn clear_dirty(&mut self) {
        self.dirty.clear();
    }

    /// Runs where `ranges` (start, count: every reference of an image)
    /// cover a block two or more times: (start, end, references), merged
    /// where the count is the same.
    pub fn counted(ranges: impl Iterator<Item = (u64, u64)>) -> Vec<(u64, u64, u32)> {
        let mut edges: Vec<(u64, i64)> = Vec::new();
        for (s, c) in ranges.filter(|r| r.1 > 0) {
            edges.push((s, 1));
            edges.push((s.saturating_add(c), -1));
        }
        edges.sort_unstable();
        let mut out: Vec<(u64, u64, u32)> = Vec::new();
        let (mut depth, mut at) = (0i64, 0u64);
        for (b, d) in edges {
            if b > at && depth >= 2 {
                let n = depth as u32;
                match out.last_mut() {
                    Some(l) if l.1 == at && l.2 == n => l.1 = b,
                    _ => out.push((at, b, n)),
                }
            }
            depth += d;
            at = b;
        }
        out
    }

    /// Make the table what `ranges` (every reference of an image) count.
    pub fn rebuild(&mut self, ranges: impl Iterator<Item = (u64, u64)>) {
        self.clear();
        for (s, e, n) in SharedExtents::counted(ranges) {
            self.set(s, e - s, n);
        }
    }

    /// Drop everything (rollback rebuilds the table from an image).
    pub fn clear(&mut self) {
        for k in self.runs.keys() {
            self.dirty.insert(*k);
        }
        self.runs.clear();
        self.blocks = 0;
        self.extra = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The table agrees with a count per block under random shares and drops.
    fn check(t: &SharedExtents, model: &[u32]) {
        for (b, &m) in model.iter().enumerate() {
            let want = if m >= 2 { m } else { 0 };
            assert_eq!(t.refs(b as u64), want, "block {b}");
        }
        let blocks = model.iter().filter(|&&m| m >= 2).count() as u64;
        let extra: u64 = model.iter().filter(|&&m| m >= 2).map(|&m| u64::from(m - 1)).sum();
        assert_eq!((t.blocks(), t.saved()), (blocks, extra));
        // Neighbours with the same count are one run once coalesced.
        let runs: Vec<_> = t.iter().collect();
        for w in runs.windows(2) {
            assert!(w[0].0 + w[0].1.count <= w[1].0, "runs overlap");
            let touch = w[0].0 + w[0].1.count == w[1].0;
            assert!(!(touch && w[0].1.refs == w[1].1.refs), "runs {w:?} not merged");
        }
    }

    proptest! {
        #[test]
        fn shares_and_drops_agree_with_a_count_per_block(
            ops in proptest::collection::vec((any::<bool>(), 0u64..60, 1u64..20), 1..80)
        ) {
            let mut t = SharedExtents::default();
            let mut model = vec![1u32; 80];
            for (share, s, c) in ops {
                if share {
                    t.add_ref(s, c);
                    for b in s..s + c { model[b as usize] += 1; }
                } else {
                    let freed = t.drop_ref(s, c);
                    let mut want = Vec::new();
                    for b in s..s + c {
                        if model[b as usize] >= 2 { model[b as usize] -= 1; } else {
                            match want.last_mut() {
                                Some((ws, wc)) if *ws + *wc == b => *wc += 1,
                                _ => want.push((b, 1)),
                            }
                        }
                    }
                    let mut got = freed;
                    got.sort();
                    let mut merged: Vec<(u64, u64)> = Vec::new();
                    for (s, c) in got {
                        match merged.last_mut() {
                            Some((ms, mc)) if *ms + *mc == s => *mc += c,
                            _ => merged.push((s, c)),
                        }
                    }
                    prop_assert_eq!(merged, want);
                }
                let _ = t.take_dirty();
                check(&t, &model);
            }
        }

        /// Replaying the dirty keys onto the table as it was gives the table as it is.
        #[test]
        fn dirty_keys_replay_to_the_same_table(
            ops in proptest::collection::vec((any::<bool>(), 0u64..60, 1u64..20), 1..60),
            cut in 0usize..60,
        ) {
            let mut t = SharedExtents::default();
            let cut = cut.min(ops.len());
            for &(share, s, c) in &ops[..cut] {
                if share { t.add_ref(s, c); } else { t.drop_ref(s, c); }
            }
            let _ = t.take_dirty();
            let mut replica = t.clone();
            for &(share, s, c) in &ops[cut..] {
                if share { t.add_ref(s, c); } else { t.drop_ref(s, c); }
            }
            for (k, run) in t.take_dirty() {
                match run {
                    Some(r) => replica.apply(k, r.count, r.refs),
                    None => replica.apply(k, 0, 0),
                }
            }
            let a: Vec<_> = t.iter().collect();
            let b: Vec<_> = replica.iter().collect();
            prop_assert_eq!(a, b);
        }
    }
}
