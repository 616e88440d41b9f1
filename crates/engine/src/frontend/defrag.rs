//! Frontend layer: the steps of defragmenting one file, each run under the
//! exclusive delta guard by `api/defrag.rs`, which strings them together
//! and commits between batches.
//!
//! Defrag moves no data itself. It makes the file's blocks dirty again
//! with the contents they have, and the commit does the rest as for any
//! write: `allocate_data` takes each run of dirty pages as one request
//! near the file's goal, maps the new blocks (checksums computed from the
//! pages), and frees the old ones — or, for blocks a snapshot holds,
//! puts them on the dead list. A crash leaves each block in its old place
//! or its new one, with the same contents either way.
//!
//! * [`Volume::defrag_plan`]: the file's extents now, what a snapshot
//!   shares, and the logical ranges worth rewriting;
//! * [`Volume::defrag_aim`]: point the file's goal at free room for the
//!   next batch (its leaves go right after that room, `Inode::leaf_goal`);
//! * [`Volume::defrag_chunk`]: read a small range and make it dirty.
//!   Under the guard nothing else runs, so the read is of the newest
//!   contents: a page dirty already is left as it is (it holds newer data
//!   than the block), and a page under writeback or a clean page is the
//!   contents, not the device.
//!
//! Calls the cache (pages), structures (extent trees) and the backend's
//! free-space questions.

use super::file::{check_file, verify};
use super::relocate_read::Prefetched;
use super::Volume;
use crate::backend::alloc::SharedExtents;
use crate::backend::free_space;
use crate::cache::pages::PageMap;
use crate::error::{err, Errno, Result};
use crate::structures::extent::{self, Extent};
use crate::structures::extent_range;
use crate::types::Ino;
use std::sync::atomic::Ordering::Relaxed;

/// Blocks read from the device in one request.
const READ_BLOCKS: u64 = 256;

/// A batch follows the one before if it finds room within this many
/// blocks of its end (past the leaves that batch's commit wrote there).
const FOLLOW_WITHIN: u64 = 4096;

/// What defrag sees of a file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DefragPlan {
    /// Physically contiguous runs of its map (preallocated runs count).
    pub extents: u64,
    /// Bytes in written extents a snapshot shares.
    pub shared_bytes: u64,
    /// Pieces `(lblock, pblock, count)` of the ranges to rewrite whose
    /// blocks other references share too (clones, or the file itself at
    /// another offset), in logical order: where to look for the other
    /// mappings once the file has its new copy.
    pub cloned: Vec<(u64, u64, u64)>,
    /// Logical ranges `(lblock, count)` worth rewriting, in order: each a
    /// stretch of logically contiguous blocks defrag may move that lies in
    /// more runs than one per `good_run` blocks.
    pub ranges: Vec<(u64, u64)>,
}

impl DefragPlan {
    /// Blocks in [`DefragPlan::ranges`].
    pub fn blocks(&self) -> u64 {
        self.ranges.iter().map(|r| r.1).sum()
    }
}

/// Who else may hold a file's blocks: the snapshots (the newest being
/// `held_upto`) and other files (the shared-extent table).
#[derive(Clone, Copy)]
pub struct Holders<'a> {
    pub held_upto: Option<u32>,
    pub table: &'a SharedExtents,
}

impl Holders<'_> {
    /// Whether a snapshot holds `e`'s blocks: a rewrite would leave the
    /// old copy in place for it, taking space twice while it lasts.
    fn snapshot(&self, e: &Extent) -> bool {
        !e.unwritten && self.held_upto.is_some_and(|s| e.birth <= s)
    }

    /// Whether defrag moves `e`: written, and no snapshot holds it unless
    /// `unshare`. Blocks other files share (clones) move too: the files
    /// that map them are pointed at the new copy afterwards
    /// ([`crate::Fs::defrag`]), so they take no more space.
    fn movable(&self, e: &Extent, unshare: bool) -> bool {
        !e.unwritten && (unshare || !self.snapshot(e))
    }
}

/// Whether `b` goes on where `a` ends, logically and physically.
fn follows(a: &Extent, b: &Extent) -> bool {
    a.end() == b.lblock && a.physical(a.end()) == b.pblock && a.unwritten == b.unwritten
}

/// The plan for a file whose map is `extents` (in logical order): a
/// stretch in one run per `good_run` blocks (or fewer) is left as it is.
pub fn plan(extents: &[Extent], holders: Holders, unshare: bool, good_run: u64, bs: u64) -> DefragPlan {
    let mut p = DefragPlan::default();
    let mut prev: Option<&Extent> = None;
    for e in extents {
        if prev.is_none_or(|a| !follows(a, e)) {
            p.extents += 1;
        }
        if holders.snapshot(e) {
            p.shared_bytes += e.count * bs;
        }
        prev = Some(e);
    }
    // Stretches of movable blocks, with the runs each lies in.
    let movable = |e: &Extent| holders.movable(e, unshare);
    let mut stretch: Option<(u64, u64, u64)> = None; // (start, end, runs)
    let mut last: Option<&Extent> = None;
    let close = |s: Option<(u64, u64, u64)>, ranges: &mut Vec<(u64, u64)>| {
        let good_run = good_run.max(1);
        if let Some((start, end, _)) = s.filter(|(start, end, runs)| *runs > (end - start).div_ceil(good_run))
        {
            ranges.push((start, end - start));
        }
    };
    for e in extents.iter().filter(|e| movable(e)) {
        stretch = match (stretch, last) {
            (Some((start, end, runs)), Some(a)) if end == e.lblock => {
                Some((start, e.end(), runs + u64::from(!follows(a, e))))
            }
            (s, _) => {
                close(s, &mut p.ranges);
                Some((e.lblock, e.end(), 1))
            }
        };
        last = Some(e);
    }
    close(stretch, &mut p.ranges);
    p.cloned = cloned(extents, &p.ranges, holders, unshare);
    p
}

/// The pieces of the movable extents of `extents` inside `ranges` whose
/// blocks the shared-extent table counts more than one reference to.
fn cloned(
    extents: &[Extent],
    ranges: &[(u64, u64)],
    holders: Holders,
    unshare: bool,
) -> Vec<(u64, u64, u64)> {
    let mut out = Vec::new();
    for &(from, count) in ranges {
        for e in extents
            .iter()
            .filter(|e| e.lblock < from + count && e.end() > from && holders.movable(e, unshare))
        {
            let e = e.piece(e.lblock.max(from), e.end().min(from + count));
            for (p, n, refs) in holders.table.pieces(e.pblock, e.count) {
                if refs >= 2 {
                    out.push((e.lblock + (p - e.pblock), p, n));
                }
            }
        }
    }
    out
}

impl Volume {
    /// The defrag plan of regular file `ino` as its map is now (EISDIR for
    /// a directory, EINVAL for other kinds), a run of `good_run` blocks
    /// being good enough.
    pub fn defrag_plan(&mut self, ino: Ino, unshare: bool, good_run: u64) -> Result<DefragPlan> {
        let (bs, dev, held) = (self.bs(), self.be.dev.clone(), self.be.alloc.held_upto);
        let i = self.inode(ino)?;
        check_file(i)?;
        let extents = extent::all(&mut i.tree, dev.as_ref())?;
        let holders = Holders {
            held_upto: held,
            table: &self.be.alloc.shared,
        };
        Ok(plan(&extents, holders, unshare, good_run, bs))
    }

    /// Aim `ino`'s next allocations at room for `batch` blocks, with
    /// `rest` blocks (this batch included) still to come: right after
    /// `prefer` (the block after the last batch; past the leaves written
    /// there) if `batch` blocks are free there, else in the first free run
    /// that takes `rest` blocks and some leaves, else in the longest free
    /// run. The leaves the batch's commits write go right after its room,
    /// as a fresh file's go after each delta's data: near the data they
    /// map, and never in the middle of a batch, however many commits it
    /// takes. Returns the goal; ENOSPC when nothing is free.
    ///
    /// A run's head is left free where the run is long enough (a
    /// sixteenth of `rest`, and 1024 blocks): what allocates first-fit from
    /// just before the run — the log's next block above all, taken at
    /// every commit — fills it, instead of the block after a batch.
    pub fn defrag_aim(&mut self, ino: Ino, prefer: Option<u64>, batch: u64, rest: u64) -> Result<u64> {
        let alloc = &self.be.alloc;
        let need = rest + rest / 256 + 64;
        let head = rest / 16 + 1024;
        let follow = prefer.and_then(|g| free_space::free_after(alloc, g, batch, FOLLOW_WITHIN));
        let goal = match follow {
            Some(g) => g,
            None => match free_space::free_run(alloc, need) {
                Some((start, len)) => start + len.saturating_sub(need).min(head),
                None => return err(Errno::ENOSPC),
            },
        };
        let i = self.inode(ino)?;
        i.goal = goal;
        i.leaf_goal = goal.saturating_add(batch);
        Ok(goal)
    }

    /// The block after the one that maps logical block `lblock` of `ino`
    /// now (where the next batch should follow), if it is mapped.
    pub fn defrag_follow(&mut self, ino: Ino, lblock: u64) -> Result<Option<u64>> {
        let dev = self.be.dev.clone();
        let i = self.inode(ino)?;
        let e = extent::lookup(&mut i.tree, dev.as_ref(), lblock)?;
        Ok(e.map(|e| e.physical(lblock) + 1))
    }

    /// Defrag of `ino` is over: its leaves follow its data again.
    pub fn defrag_done(&mut self, ino: Ino) {
        if let Some(i) = self.cache.get_mut(ino) {
            i.leaf_goal = 0;
        }
    }

    /// Make the movable blocks of `[from, to)` of `ino` dirty with the
    /// contents they hold (see the module comment): those of written
    /// extents no snapshot shares, or (`unshare`) of every written extent.
    /// Returns how many it made dirty. Space for them is reserved first
    /// (ENOSPC if there is none); a block failing its checksum fails the
    /// chunk with `Error::BadData`, the blocks before it staying dirty
    /// with their unchanged contents.
    pub fn defrag_chunk(&mut self, ino: Ino, from: u64, to: u64, unshare: bool) -> Result<u64> {
        let (dev, held) = (self.be.dev.clone(), self.be.alloc.held_upto);
        check_file(self.inode(ino)?)?;
        self.begin_change(to.saturating_sub(from) + 2)?;
        let clipped = extent_range::clipped(&mut self.inode(ino)?.tree, dev.as_ref(), from, to)?;
        let holders = Holders {
            held_upto: held,
            table: &self.be.alloc.shared,
        };
        // Checksums kept in the table come with them: every block read is
        // checked before it is written again with a checksum of its own.
        let sums = self.be.alloc.sums.handle();
        let targets: Vec<Extent> = clipped
            .into_iter()
            .filter(|e| holders.movable(e, unshare))
            .map(|e| sums.resolve(&e))
            .collect();
        self.redirty(ino, &targets, None)
    }

    /// Make the blocks of `targets` (written extents of `ino`, clipped to
    /// what is to move) dirty with the contents they hold: a dirty page is
    /// left as it is, a cached one copied, one that `read` holds as read
    /// from where it is mapped now taken from there (a shrink's,
    /// `frontend/relocate_read.rs`), the rest read from the device and
    /// verified. Returns how many it made dirty; the caller has reserved
    /// their space.
    pub(super) fn redirty(&mut self, ino: Ino, targets: &[Extent], read: Option<&Prefetched>) -> Result<u64> {
        let (bs, dev, delta) = (self.bs(), self.be.dev.clone(), self.be.delta);
        let i = self.inode(ino)?;
        let clean_before = i.pages.clean_len();
        let mut dirtied = 0;
        let mut buf = Vec::new();
        for e in targets {
            let mut b = e.lblock;
            while b < e.end() {
                if i.pages.is_dirty(b) {
                    b += 1;
                    continue;
                }
                if let Some(data) = i.pages.content(b).cloned() {
                    i.pages.page_mut(b, delta, || data.as_ref().clone());
                    dirtied += 1;
                    b += 1;
                    continue;
                }
                // Uncached blocks: read already, or read in one request.
                let mut n = 1;
                while b + n < e.end() && n < READ_BLOCKS && i.pages.content(b + n).is_none() {
                    n += 1;
                }
                // Both kinds of read checked each block against its
                // checksum: the commit takes it as known.
                if let Some((data, got)) = read.and_then(|p| p.blocks_of(ino, e, b, n, bs)) {
                    for (k, block) in data.chunks(bs as usize).enumerate() {
                        fill_checked(&mut i.pages, e, b + k as u64, delta, block);
                    }
                    dirtied += got;
                    b += got;
                    continue;
                }
                buf.resize((n * bs) as usize, 0);
                crate::device::read_named(dev.as_ref(), e.physical(b), &mut buf)?;
                for (k, block) in buf.chunks(bs as usize).enumerate() {
                    verify(ino, e, b + k as u64, block)?;
                }
                for (k, block) in buf.chunks(bs as usize).enumerate() {
                    fill_checked(&mut i.pages, e, b + k as u64, delta, block);
                }
                dirtied += n;
                b += n;
            }
        }
        let clean_after = i.pages.clean_len();
        if dirtied > 0 {
            self.dirty_bytes.fetch_add(dirtied * bs, Relaxed);
            self.touch(ino);
        }
        if clean_before != clean_after {
            self.clean.get_mut().changed(ino, clean_before, clean_after, bs);
        }
        Ok(dirtied)
    }
}

/// A new dirty page at `at` holding `block`, read from where `e` maps it
/// and checked against its checksum there: the page takes that checksum,
/// so the commit need not compute it again.
fn fill_checked(pages: &mut PageMap, e: &Extent, at: u64, delta: u64, block: &[u8]) {
    pages.page_mut(at, delta, || block.to_vec());
    if let Some(sum) = e.sum_at(at) {
        pages.set_sum(at, sum);
    }
}

#[cfg(test)]
mod tests {
    static NO_TABLE: std::sync::LazyLock<SharedExtents> = std::sync::LazyLock::new(SharedExtents::default);

    fn held(held_upto: Option<u32>) -> Holders<'static> {
        Holders {
            held_upto,
            table: &NO_TABLE,
        }
    }

    use super::*;

    fn x(lblock: u64, pblock: u64, count: u64, birth: u32) -> Extent {
        Extent::written(lblock, pblock, count, birth)
    }

    #[test]
    fn a_plan_counts_runs_and_picks_the_stretches_in_pieces() {
        // 0..4 in two runs, a hole, 10..12 in one run, 12..14 shared.
        let map = [
            x(0, 100, 2, 2),
            x(2, 50, 2, 2),
            x(10, 200, 2, 3),
            x(12, 202, 2, 1),
        ];
        let p = plan(&map, held(Some(1)), false, 1000, 4096);
        assert_eq!(p.extents, 3, "10..14 is one run across births");
        assert_eq!(p.shared_bytes, 2 * 4096);
        assert_eq!(p.ranges, vec![(0, 4)], "10..12 lies in one run already");
        // With --unshare, 10..14 is still one run: nothing to gain there.
        assert_eq!(plan(&map, held(Some(1)), true, 1000, 4096).ranges, vec![(0, 4)]);
        // Runs of two blocks are good enough for a two-block batch.
        assert!(plan(&map, held(Some(1)), false, 2, 4096).ranges.is_empty());
        // A shared block between two movable ones splits the stretch.
        let map = [x(0, 100, 1, 2), x(1, 7, 1, 1), x(2, 300, 1, 2)];
        assert!(plan(&map, held(Some(1)), false, 1000, 4096).ranges.is_empty());
        assert_eq!(plan(&map, held(Some(1)), true, 1000, 4096).ranges, vec![(0, 3)]);
        // No snapshot: nothing is shared.
        let p = plan(&map, held(None), false, 1000, 4096);
        assert_eq!((p.shared_bytes, p.ranges.clone()), (0, vec![(0, 3)]));
        assert_eq!(p.blocks(), 3);
    }
}
