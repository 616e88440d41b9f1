//! Frontend layer: fallocate(2) — preallocating (unwritten extents, read as
//! zeros until written, which the backend then fills in place), punching
//! holes, zeroing ranges, and collapsing or inserting block-aligned ranges.
//! Each mode checks everything it needs, space included, before it
//! changes anything, so a failure leaves the file as it was.
//!
//! Blocks are allocated here, under the exclusive delta guard, not at
//! commit: the space is taken when the call returns (ENOSPC then, never
//! later), and `blocks` (st_blocks) counts it at once.
//!
//! Calls the cache (pages), structures (extent trees) and the backend's
//! allocator, through `Volume`.

use super::file::check_file;
use super::{max_file_size, Volume};
use crate::error::{err, Errno, Result};
use crate::structures::extent::{self, Extent, Freed};
use crate::structures::extent_range;
use crate::types::*;
use std::sync::atomic::Ordering::Relaxed;

use libc::{
    FALLOC_FL_COLLAPSE_RANGE as FALLOC_COLLAPSE_RANGE, FALLOC_FL_INSERT_RANGE as FALLOC_INSERT_RANGE,
    FALLOC_FL_KEEP_SIZE as FALLOC_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE as FALLOC_PUNCH_HOLE,
    FALLOC_FL_ZERO_RANGE as FALLOC_ZERO_RANGE,
};

/// What a fallocate call asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    /// Mode 0 (extends the size) or KEEP_SIZE.
    Allocate {
        keep: bool,
    },
    Punch,
    Zero {
        keep: bool,
    },
    Collapse,
    Insert,
}

/// The operation `mode` asks for, or the error ext4 gives: EOPNOTSUPP for
/// bits or combinations it does not take (PUNCH_HOLE needs KEEP_SIZE;
/// COLLAPSE_RANGE and INSERT_RANGE take no other bit).
fn parse(mode: i32) -> Result<Op> {
    let keep = mode & FALLOC_KEEP_SIZE != 0;
    match mode & !FALLOC_KEEP_SIZE {
        0 => Ok(Op::Allocate { keep }),
        FALLOC_PUNCH_HOLE if keep => Ok(Op::Punch),
        FALLOC_ZERO_RANGE => Ok(Op::Zero { keep }),
        FALLOC_COLLAPSE_RANGE if !keep => Ok(Op::Collapse),
        FALLOC_INSERT_RANGE if !keep => Ok(Op::Insert),
        _ => err(Errno::ENOTSUP),
    }
}

/// Blocks a change of the extent map over `pieces` ranges may add to the
/// tree's leaves (their new places at commit), beyond the usual few.
fn map_cost(pieces: usize) -> u64 {
    4 + pieces as u64 / 16
}

impl Volume {
    /// fallocate(2) of `len` bytes at `offset` of `ino` in `mode`.
    pub fn fallocate(&mut self, ino: Ino, mode: i32, offset: u64, len: u64) -> Result<()> {
        let op = parse(mode)?;
        if len == 0 {
            return err(Errno::EINVAL);
        }
        let i = self.inode(ino)?;
        // An append-only file takes preallocation only, an immutable one
        // nothing (as the VFS checks before a local filesystem sees it).
        let a = &i.attrs;
        if a.flags & flags::IMMUTABLE != 0 || (a.flags & flags::APPEND != 0 && mode & !FALLOC_KEEP_SIZE != 0)
        {
            return err(Errno::EPERM);
        }
        if i.is_dir() {
            return err(Errno::EISDIR);
        }
        if check_file(i).is_err() {
            return err(Errno::ENODEV);
        }
        let bs = self.bs();
        let end = offset
            .checked_add(len)
            .filter(|&e| e <= max_file_size(bs))
            .ok_or(crate::error::Error::Posix(Errno::EFBIG))?;
        match op {
            Op::Allocate { keep } => self.preallocate(ino, offset, end, keep),
            Op::Punch => self.punch_hole(ino, offset, end),
            Op::Zero { keep } => self.zero_range(ino, offset, end, keep),
            Op::Collapse => self.collapse_range(ino, offset, end),
            Op::Insert => self.insert_range(ino, offset, end),
        }?;
        let now = Timespec::now();
        let i = self.inode(ino)?;
        i.attrs.mtime = now;
        i.attrs.ctime = now;
        self.touch(ino);
        self.data_changed.get_mut().insert(ino);
        Ok(())
    }

    /// Mode 0 and KEEP_SIZE: unwritten extents over every hole of the
    /// blocks `offset..end` meets.
    fn preallocate(&mut self, ino: Ino, offset: u64, end: u64, keep: bool) -> Result<()> {
        let bs = self.bs();
        let (first, last) = (offset / bs, end.div_ceil(bs));
        let dev = self.be.dev.clone();
        let holes = extent_range::holes(&mut self.inode(ino)?.tree, dev.as_ref(), first, last)?;
        self.reserve_blocks(holes.iter().map(|h| h.1).sum(), holes.len(), 0)?;
        self.fill_holes(ino, &holes)?;
        self.grow_to(ino, end, keep)
    }

    /// Take space for `now` blocks allocated at once over `pieces` ranges,
    /// the metadata their extents need and `later` blocks the commit
    /// allocates: ENOSPC, with nothing changed, if the volume cannot hold
    /// them (after a commit has released what it can).
    pub(super) fn reserve_blocks(&mut self, now: u64, pieces: usize, later: u64) -> Result<()> {
        self.begin_change(now + map_cost(pieces) + later)?;
        // The blocks allocated now leave the free count: their reservation
        // would count them twice.
        self.reserved.fetch_sub(now, Relaxed);
        Ok(())
    }

    /// Map each hole of `holes` to newly allocated blocks, as unwritten
    /// extents born now; the space is reserved already.
    pub(super) fn fill_holes(&mut self, ino: Ino, holes: &[(u64, u64)]) -> Result<()> {
        let dev = self.be.dev.clone();
        let birth = self.be.alloc.generation;
        let cursor = self.be.data_cursor;
        let i = self
            .cache
            .get_mut(ino)
            .ok_or(crate::error::Error::Posix(Errno::ENOENT))?;
        let mut goal = if i.goal != 0 { i.goal } else { cursor };
        for &(start, count) in holes {
            let mut done = 0;
            while done < count {
                let (pblock, n) = self.be.alloc.alloc(goal, count - done, true)?;
                let e = Extent {
                    lblock: start + done,
                    pblock,
                    count: n,
                    birth,
                    unwritten: true,
                    sums: Vec::new(),
                    table_sums: false,
                };
                extent::map_extent(&mut i.tree, dev.as_ref(), &e)?;
                i.attrs.blocks += n;
                goal = pblock + n;
                done += n;
            }
        }
        i.goal = goal;
        Ok(())
    }

    /// Without KEEP_SIZE: the size becomes at least `end`.
    fn grow_to(&mut self, ino: Ino, end: u64, keep: bool) -> Result<()> {
        let i = self.inode(ino)?;
        if !keep && end > i.attrs.size {
            i.attrs.size = end;
        }
        Ok(())
    }

    /// PUNCH_HOLE | KEEP_SIZE: bytes `offset..end` read as zeros; the
    /// whole blocks among them are unmapped and freed.
    fn punch_hole(&mut self, ino: Ino, offset: u64, end: u64) -> Result<()> {
        self.begin_release(map_cost(2) + 2)?;
        self.zero_edges(ino, offset, end)?;
        let bs = self.bs();
        self.unmap_blocks(ino, offset.div_ceil(bs), end / bs, false)
    }

    /// ZERO_RANGE: bytes `offset..end` read as zeros and every block they
    /// meet is allocated — written blocks wholly inside are freed and
    /// replaced by unwritten ones, holes preallocated, partial blocks
    /// zeroed in place.
    fn zero_range(&mut self, ino: Ino, offset: u64, end: u64, keep: bool) -> Result<()> {
        let bs = self.bs();
        let (first, last) = (offset / bs, end.div_ceil(bs));
        let (whole_from, whole_to) = (offset.div_ceil(bs), end / bs);
        let dev = self.be.dev.clone();
        let tree = &mut self.inode(ino)?.tree;
        let mut holes = extent_range::holes(tree, dev.as_ref(), first, last)?;
        let written: Vec<_> = extent_range::clipped(tree, dev.as_ref(), whole_from, whole_to)?
            .into_iter()
            .filter(|e| !e.unwritten)
            .collect();
        // Written blocks are replaced now; two partial blocks may take a
        // page each at commit.
        let now = holes.iter().map(|h| h.1).sum::<u64>() + written.iter().map(|e| e.count).sum::<u64>();
        self.reserve_blocks(now, holes.len() + written.len(), 2)?;
        self.zero_edges(ino, offset, end)?;
        self.unmap_blocks(ino, whole_from, whole_to, true)?;
        let tree = &mut self.inode(ino)?.tree;
        holes = extent_range::holes(tree, dev.as_ref(), first, last)?;
        self.fill_holes(ino, &holes)?;
        self.grow_to(ino, end, keep)
    }

    /// Zero the bytes of `offset..end` in its first and last block when
    /// the range covers them only in part, within the file's size, where
    /// the block holds data (a page or a written extent).
    fn zero_edges(&mut self, ino: Ino, offset: u64, end: u64) -> Result<()> {
        let bs = self.bs();
        let size = self.inode(ino)?.attrs.size;
        // Blocks wholly inside the range are unmapped instead.
        let whole = offset.div_ceil(bs)..end / bs;
        let end = end.min(size);
        if offset >= end {
            return Ok(());
        }
        let mut edges = vec![offset / bs];
        if (end - 1) / bs != offset / bs {
            edges.push((end - 1) / bs);
        }
        let dev = self.be.dev.clone();
        // Both edges are read before either changes, so that a failed read
        // leaves the file as it was.
        let mut zeroed = Vec::new();
        for lblock in edges {
            let start = lblock * bs;
            let (from, to) = (offset.max(start) - start, end.min(start + bs) - start);
            if whole.contains(&lblock) {
                continue;
            }
            let i = self.inode(ino)?;
            let mapped = extent::lookup(&mut i.tree, dev.as_ref(), lblock)?.is_some_and(|e| !e.unwritten);
            if !mapped && i.pages.content(lblock).is_none() {
                continue;
            }
            let mut b = self.block(ino, lblock)?;
            b[from as usize..to as usize].fill(0);
            zeroed.push((lblock, b));
        }
        for (lblock, b) in zeroed {
            let i = self.inode(ino)?;
            let clean_before = i.pages.clean_len();
            let was_dirty = i.pages.is_dirty(lblock);
            let delta = self.be.delta;
            let i = self.inode(ino)?;
            *i.pages.page_mut(lblock, delta, Vec::new) = b;
            let clean_after = i.pages.clean_len();
            if !was_dirty {
                self.dirty_bytes.fetch_add(bs, Relaxed);
            }
            self.clean.get_mut().changed(ino, clean_before, clean_after, bs);
        }
        Ok(())
    }

    /// Drop the pages of blocks `from..to` and unmap them, freeing their
    /// blocks (a snapshot's go to the dead list); `written_only`: leave
    /// unwritten extents mapped.
    fn unmap_blocks(&mut self, ino: Ino, from: u64, to: u64, written_only: bool) -> Result<()> {
        if from >= to {
            return Ok(());
        }
        let bs = self.bs();
        let dev = self.be.dev.clone();
        let i = self.inode(ino)?;
        let clean_before = i.pages.clean_len();
        let dropped = i.pages.drop_range(from, to) as u64;
        let clean_after = i.pages.clean_len();
        let mut freed = Vec::new();
        if written_only {
            for e in extent_range::clipped(&mut i.tree, dev.as_ref(), from, to)? {
                if !e.unwritten {
                    freed.extend(extent::punch(&mut i.tree, dev.as_ref(), e.lblock, e.end())?);
                }
            }
        } else {
            freed = extent::punch(&mut i.tree, dev.as_ref(), from, to)?;
        }
        self.give_back(ino, &freed)?;
        let d = self.dirty_bytes.get_mut();
        *d = d.saturating_sub(dropped * bs);
        self.clean.get_mut().changed(ino, clean_before, clean_after, bs);
        Ok(())
    }

    /// Give back `freed`, unmapped from `ino`: its block count drops, and
    /// each range is freed with its birth.
    pub(super) fn give_back(&mut self, ino: Ino, freed: &[Freed]) -> Result<()> {
        let n: u64 = freed.iter().map(|f| f.1).sum();
        let i = self.inode(ino)?;
        i.attrs.blocks = i.attrs.blocks.saturating_sub(n);
        for &(s, c, born) in freed {
            self.be.alloc.free_born(s, c, born);
        }
        Ok(())
    }

    /// The block-aligned range of a collapse or insert: its first block and
    /// length in blocks, or EINVAL.
    fn aligned(&self, offset: u64, end: u64) -> Result<(u64, u64)> {
        let bs = self.bs();
        if !offset.is_multiple_of(bs) || !end.is_multiple_of(bs) {
            return err(Errno::EINVAL);
        }
        Ok((offset / bs, (end - offset) / bs))
    }

    /// COLLAPSE_RANGE: remove bytes `offset..end` (block-aligned, ending
    /// before the end of file); what follows moves down.
    fn collapse_range(&mut self, ino: Ino, offset: u64, end: u64) -> Result<()> {
        let (first, n) = self.aligned(offset, end)?;
        let size = self.inode(ino)?.attrs.size;
        if end >= size {
            return err(Errno::EINVAL);
        }
        let dev = self.be.dev.clone();
        let moved = extent_range::clipped(&mut self.inode(ino)?.tree, dev.as_ref(), first, u64::MAX)?.len();
        self.begin_release(map_cost(moved))?;
        let bs = self.bs();
        let i = self.inode(ino)?;
        let clean_before = i.pages.clean_len();
        let dropped = i.pages.drop_range(first, first + n) as u64;
        i.pages.shift_from(first + n, n, true);
        let clean_after = i.pages.clean_len();
        let freed = extent_range::collapse(&mut i.tree, dev.as_ref(), first, n)?;
        i.attrs.size = size - (end - offset);
        self.give_back(ino, &freed)?;
        let d = self.dirty_bytes.get_mut();
        *d = d.saturating_sub(dropped * bs);
        self.clean.get_mut().changed(ino, clean_before, clean_after, bs);
        Ok(())
    }

    /// INSERT_RANGE: open a hole of `end - offset` bytes (block-aligned) at
    /// `offset`, before the end of file; what follows moves up.
    fn insert_range(&mut self, ino: Ino, offset: u64, end: u64) -> Result<()> {
        let (first, n) = self.aligned(offset, end)?;
        let bs = self.bs();
        let size = self.inode(ino)?.attrs.size;
        if offset >= size {
            return err(Errno::EINVAL);
        }
        let grown = size
            .checked_add(end - offset)
            .filter(|&s| s <= max_file_size(bs))
            .ok_or(crate::error::Error::Posix(Errno::EFBIG))?;
        let dev = self.be.dev.clone();
        let moved = extent_range::clipped(&mut self.inode(ino)?.tree, dev.as_ref(), first, u64::MAX)?.len();
        self.begin_change(map_cost(moved + 1))?;
        let i = self.inode(ino)?;
        extent_range::insert_gap(&mut i.tree, dev.as_ref(), first, n)?;
        i.pages.shift_from(first, n, false);
        i.attrs.size = grown;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The modes ext4 takes, and the errors for the rest.
    #[test]
    fn modes_parse_as_ext4_takes_them() {
        let k = FALLOC_KEEP_SIZE;
        assert_eq!(parse(0).unwrap(), Op::Allocate { keep: false });
        assert_eq!(parse(k).unwrap(), Op::Allocate { keep: true });
        assert_eq!(parse(FALLOC_PUNCH_HOLE | k).unwrap(), Op::Punch);
        assert_eq!(parse(FALLOC_ZERO_RANGE).unwrap(), Op::Zero { keep: false });
        assert_eq!(parse(FALLOC_ZERO_RANGE | k).unwrap(), Op::Zero { keep: true });
        assert_eq!(parse(FALLOC_COLLAPSE_RANGE).unwrap(), Op::Collapse);
        assert_eq!(parse(FALLOC_INSERT_RANGE).unwrap(), Op::Insert);
        for bad in [
            FALLOC_PUNCH_HOLE,
            FALLOC_PUNCH_HOLE | FALLOC_ZERO_RANGE | k,
            FALLOC_COLLAPSE_RANGE | k,
            FALLOC_INSERT_RANGE | k,
            FALLOC_COLLAPSE_RANGE | FALLOC_INSERT_RANGE,
            0x04,
            0x40,
            0x80,
            -1,
        ] {
            assert!(
                matches!(parse(bad), Err(crate::error::Error::Posix(Errno::ENOTSUP))),
                "{bad:#x}"
            );
        }
    }
}
