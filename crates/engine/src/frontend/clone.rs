//! Frontend layer: sharing blocks between files — cloning a run of whole
//! blocks (copy_file_range(2), `tux3 clone`) and deduplicating one.
//!
//! A clone maps the destination's blocks to the source's physical blocks,
//! with the source extents' births and checksums, and adds a reference to
//! each in the shared-extent table (`backend/alloc/shared.rs`); no data is
//! read or written. What the destination mapped there before is freed as
//! an overwrite would free it (one reference less if it was shared). A
//! later write to either file goes to new blocks at commit, as every write
//! does, and frees its old ones through the same table: the other file
//! keeps its data.
//!
//! The cost is per extent, so a clone is one batch: the source range's
//! entries are taken in one pass as they are stored (`extent_range::lifted`),
//! the destination range emptied once and the entries put in with one
//! descent into filled leaves (`Tree::insert_sorted`), and each run of
//! physically contiguous blocks gains its reference in one change of the
//! table (one `Share` record, not one per extent).
//!
//! Only blocks on the device are shared: a block of the source with a page
//! dirty or under writeback (its data not yet written where the map says)
//! is copied as a page instead. The API commits the source first when it
//! has such pages, so a clone after a write shares too.
//!
//! Calls the cache (pages), structures (extent trees) and the backend's
//! allocator, through `Volume`.

use super::file::check_file;
use super::{max_file_size, Volume};
use crate::backend::alloc::SumTable;
use crate::error::{err, Errno, Error, Result};
use crate::structures::extent::{self, Extent, Freed};
use crate::structures::extent_range;
use crate::types::*;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Clones made so far in this process, on any volume, counted by their
/// destination's inode number modulo [`CLONE_SLOTS`]: a dedupe that read
/// its ranges without the guard knows from its files' counts that no
/// clone mapped a range back to blocks it had mapped before (with other
/// bytes read meanwhile), which the mapping alone would not show. Two
/// files in one slot only cost a dedupe another read.
static CLONES: [AtomicU64; CLONE_SLOTS] = [const { AtomicU64::new(0) }; CLONE_SLOTS];
const CLONE_SLOTS: usize = 1024;

fn clone_slot(ino: Ino) -> &'static AtomicU64 {
    &CLONES[(ino % CLONE_SLOTS as u64) as usize]
}

/// What a dedupe saw of its two ranges (see [`Volume::dedupe_seen`]):
/// equal before and after its unlocked reads, the bytes read are those
/// the ranges hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DedupeSeen {
    /// The open delta (a commit may move data and reuse freed blocks).
    delta: u64,
    /// [`CLONES`] of the source and the destination.
    clones: [u64; 2],
    /// Each range's mapping: (block in the range, physical block, count,
    /// unwritten), source then destination.
    maps: [Vec<(u64, u64, u64, bool)>; 2],
    /// Pages dirty or under writeback in either range.
    pub unwritten: bool,
}

/// Where a file's blocks lie on the device and their checksums
/// ([`Volume::on_device`]).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct OnDevice {
    /// The device block of each block.
    pub at: Vec<u64>,
    /// Its checksum, on a volume with data checksums.
    pub sums: Vec<Option<u32>>,
}

/// What sharing has saved on a volume (see [`crate::Fs::sharing`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sharing {
    /// Extents of the shared-extent table (ranges with two or more references).
    pub extents: u64,
    /// Blocks those extents cover.
    pub blocks: u64,
    /// References beyond the first, summed over those blocks: the blocks
    /// that sharing saves.
    pub saved_blocks: u64,
    /// Blocks whose checksums the checksum table holds (a clone's).
    pub table_sums: u64,
}

/// How a clone of `n` bytes splits: the bytes copied before and after,
/// and the whole blocks shared between them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ClonePlan {
    /// Bytes the clone makes (`len` clipped to the source's size).
    pub n: u64,
    /// Bytes from the start copied (up to the destination's first block
    /// boundary; all of them when the offsets differ within a block).
    pub head: u64,
    /// Whole blocks shared: source block, destination block, count.
    pub src_block: u64,
    pub dst_block: u64,
    pub blocks: u64,
    /// The destination's size once the shared blocks are mapped.
    pub size_after: u64,
}

impl ClonePlan {
    /// Bytes copied after the shared blocks.
    pub fn tail(&self, bs: u64) -> u64 {
        self.n - self.head - (self.blocks * bs).min(self.n - self.head)
    }
}

/// `count` blocks of `src` from `src_block`, to go to `dst` from `dst_block`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockRun {
    pub src: Ino,
    pub src_block: u64,
    pub dst: Ino,
    pub dst_block: u64,
    pub count: u64,
}

/// Blocks a change of the extent map over `pieces` extents may add to the
/// trees' leaves at commit, beyond the usual few.
fn map_cost(pieces: u64) -> u64 {
    4 + pieces / 8
}

impl Volume {
    /// Check a clone of `len` bytes from `src_off` of `src` to `dst_off`
    /// of `dst` and split it (see [`crate::Fs::clone_range`]).
    pub fn clone_plan(
        &mut self,
        src: Ino,
        src_off: u64,
        dst: Ino,
        dst_off: u64,
        len: u64,
    ) -> Result<ClonePlan> {
        let bs = self.bs();
        let s = self.inode(src)?;
        check_file(s)?;
        let src_size = s.attrs.size;
        let d = self.inode(dst)?;
        check_file(d)?;
        if d.attrs.flags & (flags::IMMUTABLE | flags::APPEND) != 0 {
            return err(Errno::EPERM);
        }
        let dst_size = d.attrs.size;
        let n = len.min(src_size.saturating_sub(src_off));
        if n == 0 {
            return Ok(ClonePlan {
                size_after: dst_size,
                ..ClonePlan::default()
            });
        }
        if src == dst && src_off < dst_off + n && dst_off < src_off + n {
            return err(Errno::EINVAL);
        }
        let end = dst_off
            .checked_add(n)
            .filter(|&e| e <= max_file_size(bs))
            .ok_or(Error::Posix(Errno::EFBIG))?;
        let mut plan = ClonePlan {
            n,
            head: n,
            size_after: dst_size.max(end),
            ..ClonePlan::default()
        };
        if src_off % bs != dst_off % bs {
            return Ok(plan);
        }
        let head = ((bs - dst_off % bs) % bs).min(n);
        // The source's last block may be shared whole when the clone ends
        // at its end of file and at or past the destination's: the bytes
        // past the end are zeros in both (F1).
        let whole_tail = src_off + n == src_size && end >= dst_size;
        let rest = n - head;
        let blocks = if whole_tail { rest.div_ceil(bs) } else { rest / bs };
        plan.head = head;
        plan.src_block = (src_off + head) / bs;
        plan.dst_block = (dst_off + head) / bs;
        plan.blocks = blocks;
        Ok(plan)
    }

    /// Whether blocks `from..from+count` of `ino` have pages dirty or under
    /// writeback (their data is not on the device yet).
    pub fn has_unwritten_pages(&mut self, ino: Ino, from: u64, count: u64) -> Result<bool> {
        let i = self.inode(ino)?;
        Ok(i.pages.next_from(from).is_some_and(|k| k < from + count))
    }

    /// Map `count` blocks of `dst` from `dst_block` to the blocks `src`
    /// maps from `src_block` (shared; pages copied), and make `dst`'s size
    /// at least `size_after`. `touch`: change its mtime and ctime.
    pub fn clone_blocks(&mut self, run: BlockRun, size_after: u64, touch: bool) -> Result<()> {
        let BlockRun {
            src,
            src_block,
            dst,
            dst_block,
            count,
        } = run;
        let bs = self.bs();
        let dev = self.be.dev.clone();
        clone_slot(dst).fetch_add(1, Relaxed);
        let (from, to) = (src_block, src_block + count);
        let s = self.inode(src)?;
        let lifted = extent_range::lifted(&mut s.tree, dev.as_ref(), from, to, dst_block)?;
        let mut pages = Vec::new();
        let mut at = from;
        while let Some(k) = s.pages.next_from(at).filter(|&k| k < to) {
            if let Some(p) = s.pages.get(k) {
                pages.push((k, p.data.clone()));
            }
            at = k + 1;
        }
        self.begin_change(map_cost(lifted.entries.len() as u64 + 2) + pages.len() as u64)?;
        let mut entries = sums_to_table(&mut self.be.alloc.sums, dev.as_ref(), lifted.entries)?;
        // The destination's old blocks there go; its pages too.
        let d = self.inode(dst)?;
        let clean_before = d.pages.clean_len();
        let dropped = d.pages.drop_range(dst_block, dst_block + count) as u64;
        let clean_after = d.pages.clean_len();
        let freed: Vec<Freed> = extent::punch(&mut d.tree, dev.as_ref(), dst_block, dst_block + count)?;
        // The range is empty now: the source's entries go in as they are,
        // in one pass, and each physical run gains a reference at once.
        extent_range::join_before(&mut d.tree, dev.as_ref(), &mut entries)?;
        d.tree.insert_sorted(dev.as_ref(), entries)?;
        let mapped = lifted.blocks;
        for &(start, n) in &lifted.runs {
            self.be.alloc.shared.add_ref(start, n);
        }
        let n: u64 = freed.iter().map(|f| f.1).sum();
        let d = self.inode(dst)?;
        d.attrs.blocks = (d.attrs.blocks + mapped).saturating_sub(n);
        for &(s, c, born) in &freed {
            self.be.alloc.free_born(s, c, born);
        }
        let dirty = self.dirty_bytes.get_mut();
        *dirty = dirty.saturating_sub(dropped * bs);
        self.clean.get_mut().changed(dst, clean_before, clean_after, bs);
        // Pages not on the device yet are copied (written at commit).
        let delta = self.be.delta;
        for (k, data) in pages {
            let d = self.inode(dst)?;
            let lblock = dst_block + (k - src_block);
            let was_dirty = d.pages.is_dirty(lblock);
            *d.pages.page_mut(lblock, delta, Vec::new) = data.as_ref().clone();
            if !was_dirty {
                self.dirty_bytes.fetch_add(bs, Relaxed);
            }
        }
        let d = self.inode(dst)?;
        if size_after > d.attrs.size {
            d.attrs.size = size_after;
        }
        if touch {
            let now = Timespec::now();
            d.attrs.mtime = now;
            d.attrs.ctime = now;
        }
        self.touch(dst);
        self.data_changed.get_mut().insert(dst);
        Ok(())
    }

    /// Check a dedupe (see [`crate::Fs::dedupe_range`]): the block range
    /// of each side, or EINVAL.
    pub fn dedupe_check(
        &mut self,
        src: Ino,
        src_off: u64,
        dst: Ino,
        dst_off: u64,
        len: u64,
    ) -> Result<(u64, u64, u64)> {
        let bs = self.bs();
        if !src_off.is_multiple_of(bs) || !dst_off.is_multiple_of(bs) || !len.is_multiple_of(bs) || len == 0 {
            return err(Errno::EINVAL);
        }
        for (ino, off) in [(src, src_off), (dst, dst_off)] {
            let i = self.inode(ino)?;
            check_file(i)?;
            if off
                .checked_add(len)
                .is_none_or(|e| e > i.attrs.size.div_ceil(bs) * bs)
            {
                return err(Errno::EINVAL);
            }
        }
        let d = self.inode(dst)?;
        if d.attrs.flags & flags::IMMUTABLE != 0 {
            return err(Errno::EPERM);
        }
        if src == dst && src_off < dst_off + len && dst_off < src_off + len {
            return err(Errno::EINVAL);
        }
        Ok((src_off / bs, dst_off / bs, len / bs))
    }

    /// Whether `dst`'s blocks `dst_block..+count` are the very blocks
    /// `src` maps from `src_block` (already shared: nothing to do).
    pub fn same_blocks(
        &mut self,
        src: Ino,
        src_block: u64,
        dst: Ino,
        dst_block: u64,
        count: u64,
    ) -> Result<bool> {
        let dev = self.be.dev.clone();
        let a = extent_range::clipped(
            &mut self.inode(src)?.tree,
            dev.as_ref(),
            src_block,
            src_block + count,
        )?;
        let b = extent_range::clipped(
            &mut self.inode(dst)?.tree,
            dev.as_ref(),
            dst_block,
            dst_block + count,
        )?;
        let phys = |v: &[Extent], base: u64| -> Vec<(u64, u64, u64)> {
            let mut out: Vec<(u64, u64, u64)> = Vec::new();
            for e in v.iter().filter(|e| !e.unwritten) {
                match out.last_mut() {
                    Some((l, p, c)) if *l + *c == e.lblock - base && *p + *c == e.pblock => *c += e.count,
                    _ => out.push((e.lblock - base, e.pblock, e.count)),
                }
            }
            out
        };
        let (pa, pb) = (phys(&a, src_block), phys(&b, dst_block));
        let covered: u64 = pa.iter().map(|e| e.2).sum();
        Ok(covered == count && pa == pb)
    }

    /// What a dedupe of `run` sees now: the open delta, the clones made
    /// so far into either file, both ranges' mappings and whether either has pages not on
    /// the device. Within one delta a freed block stays pinned (never
    /// allocated again) and only a clone maps a block already in use, so
    /// if none happened and both ranges map the same blocks with no pages
    /// unwritten before and after, their bytes did not change between.
    pub fn dedupe_seen(&mut self, run: BlockRun) -> Result<DedupeSeen> {
        let dev = self.be.dev.clone();
        let mut maps = [Vec::new(), Vec::new()];
        let mut unwritten = false;
        for (k, (ino, from)) in [(run.src, run.src_block), (run.dst, run.dst_block)]
            .into_iter()
            .enumerate()
        {
            let i = self.inode(ino)?;
            let extents = extent_range::clipped(&mut i.tree, dev.as_ref(), from, from + run.count)?;
            maps[k] = extents
                .iter()
                .map(|e| (e.lblock - from, e.pblock, e.count, e.unwritten))
                .collect();
            unwritten |= self.has_unwritten_pages(ino, from, run.count)?;
        }
        Ok(DedupeSeen {
            delta: self.be.delta,
            clones: [
                clone_slot(run.src).load(Relaxed),
                clone_slot(run.dst).load(Relaxed),
            ],
            maps,
            unwritten,
        })
    }

    /// The volume's count of device writes (`Fs::write_epoch`).
    pub fn write_epoch(&self) -> std::sync::Arc<crate::backend::WriteEpoch> {
        self.be.write_epoch.clone()
    }

    /// Where `ino`'s blocks `from..from + count` lie, block by block, and
    /// each one's checksum (`None` on a volume without them), if every
    /// one is written on the device and none has a page dirty or under
    /// writeback: then the device's bytes at those blocks are the file's.
    /// `None` if not (a hole, a preallocated block, a page not written).
    pub fn on_device(&mut self, ino: Ino, from: u64, count: u64) -> Result<Option<OnDevice>> {
        if self.has_unwritten_pages(ino, from, count)? {
            return Ok(None);
        }
        let dev = self.be.dev.clone();
        let sums = self.be.alloc.sums.handle();
        let i = self.inode(ino)?;
        let extents = extent_range::clipped(&mut i.tree, dev.as_ref(), from, from + count)?;
        let mut out = OnDevice::default();
        let mut next = from;
        for e in extents.iter().map(|e| sums.resolve(e)) {
            let e = &e;
            if e.unwritten || e.lblock != next {
                return Ok(None);
            }
            for k in 0..e.count {
                out.at.push(e.pblock + k);
                out.sums.push(e.sums.get(k as usize).copied());
            }
            next = e.end();
        }
        Ok((next == from + count).then_some(out))
    }

    /// The shared-extent table's totals.
    pub fn sharing(&self) -> Sharing {
        let t = &self.be.alloc.shared;
        Sharing {
            extents: t.len() as u64,
            blocks: t.blocks(),
            saved_blocks: t.saved(),
            table_sums: self.be.alloc.sums.read().blocks(),
        }
    }
}

/// A clone's entries as the destination maps them: an extent with its
/// checksums in it puts them in the checksum table (once however many
/// clones there are: they are there already from the second on) and
/// maps its blocks with the checksums there, so each clone costs an
/// entry per physically contiguous run, not 4 bytes per block; those
/// entries then join (the 64-block bound of an extent with checksums
/// in it does not hold for them).
fn sums_to_table(
    table: &mut SumTable,
    dev: &dyn crate::device::Device,
    entries: Vec<(u64, Vec<u8>)>,
) -> Result<Vec<(u64, Vec<u8>)>> {
    let bounds = crate::structures::bounds(dev);
    let mut out: Vec<Extent> = Vec::with_capacity(entries.len());
    let mut raw = Vec::new();
    for (k, v) in entries {
        let head = extent::decode_head(k, &v, 0, &bounds)?;
        if !head.summed && !head.table_sums {
            raw.push((out.len(), k, v));
            continue;
        }
        let e = Extent {
            lblock: k,
            pblock: head.pblock,
            count: head.count,
            birth: head.birth,
            unwritten: false,
            sums: Vec::new(),
            table_sums: true,
        };
        if head.summed {
            // The checksums straight from the value (decode_head checked
            // its length), with no vector of their own.
            let mut sums = [0u32; extent::MAX_SUMMED as usize];
            let raw = v.get(extent::SUMS_AT..).unwrap_or_default();
            for (s, c) in sums.iter_mut().zip(raw.chunks_exact(4)) {
                *s = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
            table.put(head.pblock, &sums[..(head.count as usize).min(sums.len())]);
        }
        if let Some(last) = out.last_mut() {
            if let Some((joined, rest)) = extent::join(last, &e) {
                *last = joined;
                out.extend(rest);
                continue;
            }
        }
        out.push(e);
    }
    if raw.is_empty() {
        return Ok(out.iter().map(|e| (e.lblock, extent::encode_extent(e))).collect());
    }
    // Entries without checksums (a volume without them) stay as they are.
    let mut all: Vec<(u64, Vec<u8>)> = out.iter().map(|e| (e.lblock, extent::encode_extent(e))).collect();
    all.extend(raw.into_iter().map(|(_, k, v)| (k, v)));
    all.sort_by_key(|e| e.0);
    Ok(all)
}
