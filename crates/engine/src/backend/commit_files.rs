//! Backend layer, delta commit steps 1 and 2 (`commit.rs` runs them):
//! dirty data pages allocated in runs near each file's goal, queued and
//! mapped in the file's extent tree with their checksums; then the dirty
//! leaves of the file trees moved to new addresses (leaf-map records), or
//! a small file's map written into its inode record instead.
//!
//! Calls the allocator, the cache (dirty inodes and pages) and structures
//! (extent trees).

use super::writeout::{Pages, Writes};
use super::Backend;
use crate::cache::InodeCache;
use crate::error::Result;
use crate::log::Record;
use crate::structures::extent;
use crate::structures::extent::Extent;
use crate::structures::extent_range::{self, Run};

impl Backend {
    /// Step 1: allocate each run of dirty pages contiguously near the file's
    /// goal, queue its pages (shared, not copied), and map it in the file's
    /// extent tree.
    pub(super) fn allocate_data(&mut self, cache: &mut InodeCache, data: &mut Pages) -> Result<()> {
        let dev = self.dev.clone();
        self.alloc.age_rooms();
        let dirty: Vec<crate::types::Ino> = cache.dirty.get_mut().iter().copied().collect();
        let mut writing = Vec::new();
        for ino in &dirty {
            if let Some(i) = cache.get_mut(*ino) {
                if i.goal != 0 && !i.pages.all_written() {
                    writing.push(i.goal);
                }
            }
        }
        self.alloc.streams_writing(writing);
        for ino in &dirty {
            let Some(inode) = cache.get_mut(*ino) else {
                continue;
            };
            let (pages, taken) = inode.pages.start_writeback_summed();
            // A file (not a directory, whose blocks are rewritten entry by
            // entry) written in an earlier delta of this mount: a stream
            // if written at its end again.
            let file = !inode.is_dir();
            let streams = file && inode.goal != 0;
            // On a volume with data checksums each block's CRC32C goes in
            // the extent that maps it, in the same delta as the data: the
            // one the write took while the bytes were hot, else computed.
            let summed = self.sb.data_sums;
            if summed {
                self.stats.sums_computed += taken.iter().filter(|t| t.is_none()).count() as u64;
            }
            let sums_of = |from: usize, n: u64| -> Vec<u32> {
                if !summed {
                    return Vec::new();
                }
                let range = from..from + n as usize;
                pages[range.clone()]
                    .iter()
                    .zip(&taken[range])
                    .map(|((_, p), t)| {
                        debug_assert!(
                            t.is_none_or(|t| t == extent::block_sum(p)),
                            "a page's taken sum is stale"
                        );
                        t.unwrap_or_else(|| extent::block_sum(p))
                    })
                    .collect()
            };
            let mut i = 0;
            while i < pages.len() {
                // A run of consecutive logical blocks.
                let mut j = i + 1;
                while j < pages.len() && pages[j].0 == pages[j - 1].0 + 1 {
                    j += 1;
                }
                while i < j {
                    let lblock = pages[i].0;
                    // Preallocated blocks no snapshot holds are filled in
                    // place: they never held data that a durable image
                    // reads (FORMAT.md 7.2).
                    let held = self.alloc.held_upto;
                    let want = match extent_range::run_at(
                        &mut inode.tree,
                        dev.as_ref(),
                        lblock,
                        (j - i) as u64,
                        held,
                    )? {
                        Run::Unwritten { pblock, count } => {
                            for (k, (_, p)) in pages[i..i + count as usize].iter().enumerate() {
                                data.push((pblock + k as u64, p.clone()));
                            }
                            let sums = sums_of(i, count);
                            extent_range::mark_written(&mut inode.tree, dev.as_ref(), lblock, count, sums)?;
                            inode.goal = pblock + count;
                            i += count as usize;
                            continue;
                        }
                        Run::Other { count } => count,
                    };
                    // A file's data follows its last extent (this mount's,
                    // else the block after its logical predecessor's); a
                    // new file's goes to the first room from where its
                    // directory's data begins (holes its deleted files
                    // left first).
                    let parent = inode.attrs.parent;
                    let after = match inode.goal {
                        0 if file => extent_range::after_predecessor(&mut inode.tree, dev.as_ref(), lblock)?,
                        _ => None,
                    };
                    let goal = if inode.goal != 0 {
                        inode.goal
                    } else if let Some(after) = after {
                        after
                    } else {
                        self.dir_goals.get(&parent).copied().unwrap_or(self.data_cursor)
                    };
                    // Data keeps out of the streams' rooms but its own.
                    let own = (inode.goal != 0).then_some(inode.goal);
                    let (start, n) = self.alloc.alloc_outside_rooms(goal, want, true, own)?;
                    // Written on after data an earlier mount wrote.
                    let goes_on = after.is_some();
                    for (k, (_, p)) in pages[i..i + n as usize].iter().enumerate() {
                        data.push((start + k as u64, p.clone()));
                    }
                    let birth = self.alloc.generation;
                    let mut e = Extent::written(lblock, start, n, birth);
                    e.sums = sums_of(i, n);
                    let freed = extent::map_extent(&mut inode.tree, dev.as_ref(), &e)?;
                    let freed_blocks: u64 = freed.iter().map(|f| f.1).sum();
                    for (s, c, b) in freed {
                        self.alloc.free_born(s, c, b);
                    }
                    inode.attrs.blocks = inode.attrs.blocks + n - freed_blocks;
                    inode.goal = start + n;
                    self.data_cursor = start + n;
                    // A stream (a file written at its end in this delta
                    // and in an earlier one, or going on from its data
                    // of an earlier mount) keeps the room after it for its
                    // next delta's data.
                    if (streams || goes_on) && (lblock + n) * self.bs as u64 >= inode.attrs.size {
                        self.alloc.keep_room(start + n);
                    }
                    if self.dir_goals.len() >= super::DIR_GOALS {
                        self.dir_goals.clear();
                    }
                    self.dir_goals.entry(parent).or_insert(start);
                    i += n as usize;
                }
            }
        }
        Ok(())
    }

    /// Step 2: give every dirty leaf of a file tree a new address and encode
    /// it into `writes`, with a `LeafMap` record (and, when unifying, do the
    /// same for their changed branches, updating each inode's unified root).
    pub(super) fn redirect_files(
        &mut self,
        cache: &mut InodeCache,
        unify: bool,
        writes: &mut Writes,
        records: &mut Vec<Record>,
    ) -> Result<()> {
        let bs = self.bs;
        // A unify writes the trees changed since the last one: those of
        // this delta's dirty inodes and those earlier deltas left pending.
        let inos: Vec<u64> = if unify {
            let mut v: Vec<u64> = cache.dirty.get_mut().iter().copied().collect();
            v.extend(std::mem::take(&mut cache.unify_pending));
            v.sort_unstable();
            v.dedup();
            v
        } else {
            cache.dirty.get_mut().iter().copied().collect()
        };
        let mut restored = Vec::new();
        let mut grown = Vec::new();
        for ino in inos {
            let Some(inode) = cache.get_mut(ino) else {
                continue;
            };
            // A small file's extents go in its inode record (which the
            // delta writes anyway) instead of a leaf block of their own.
            let inline = if self.sb.inline_maps {
                inline_map(inode, bs)?
            } else {
                None
            };
            let held = inline.is_some();
            let extents = inline.unwrap_or_default();
            let changed = inode.attrs.inline != extents;
            inode.attrs.inline = extents;
            // Held: its leaf stays clean in memory; not held (any more):
            // a leaf never written is written below.
            inode.tree.hold_inline(held);
            if changed {
                // Its record is written anew (it is dirty already, as only
                // a change to its tree changes the map; this makes sure).
                restored.push(ino);
            }
            if held {
                continue;
            }
            let is_dir = inode.is_dir();
            let tree = &mut inode.tree;
            for sep in tree.unmaps.drain(..) {
                records.push(Record::LeafUnmap { tree: ino, sep });
            }
            let mut maps = Vec::new();
            let birth = self.alloc.generation;
            let alloc = &mut self.alloc;
            // Leaves follow the data, unless defrag keeps them out of the
            // run it fills (`Inode::leaf_goal`).
            let goal = if inode.leaf_goal != 0 {
                inode.leaf_goal
            } else {
                inode.goal
            };
            let mut next_goal = goal;
            tree.redirect_leaves(
                bs,
                birth,
                &mut || {
                    let b = alloc.alloc_one(next_goal)?;
                    next_goal = b + 1;
                    Ok(b)
                },
                writes,
                &mut maps,
            )?;
            if !maps.is_empty() && is_dir {
                // Clean leaves in memory once durable: a directory's bound
                // on them counts this one at the next eviction step.
                grown.push(ino);
            }
            for (sep, addr) in maps {
                records.push(Record::LeafMap { tree: ino, sep, addr });
            }
            for (b, born) in tree.freed.drain(..) {
                self.alloc.free_born(b, 1, born);
            }
            if unify {
                let mut freed = Vec::new();
                let alloc = &mut self.alloc;
                let root =
                    tree.redirect_branches(bs, birth, &mut || alloc.alloc_one(goal), writes, &mut freed)?;
                for (b, born) in freed {
                    self.alloc.free_born(b, 1, born);
                }
                if inode.attrs.root != root {
                    inode.attrs.root = root;
                    cache.dirty.get_mut().insert(ino);
                }
            } else if tree.needs_unify() {
                cache.unify_pending.insert(ino);
            }
        }
        cache.dirty.get_mut().extend(restored);
        for ino in grown {
            cache.note_grown(ino);
        }
        Ok(())
    }
}

/// The extents of `inode`'s data tree if its inode record can hold them:
/// a file's tree of one leaf never written, of at most
/// [`INLINE_EXTENTS`] extents (none: the record needs no attribute), whose
/// record then still fits a leaf.
fn inline_map(inode: &crate::cache::Inode, bs: usize) -> Result<Option<Vec<extent::Extent>>> {
    use crate::structures::btree::{Tree, TreeKind};
    use crate::structures::inode::{
        inline_cost, inline_sums_cost, FIXED_ATTRS_MAX, INLINE_EXTENTS, INLINE_SUMMED_BLOCKS,
        INLINE_TABLE_SUMS_COST,
    };
    if inode.tree.kind != TreeKind::Extents {
        return Ok(None);
    }
    let Some(entries) = inode.tree.inline_entries(INLINE_EXTENTS) else {
        return Ok(None);
    };
    let mut record = FIXED_ATTRS_MAX + inode.attrs.xattr_bytes() + inline_cost(entries.len());
    if record > Tree::max_value(bs) {
        return Ok(None);
    }
    let bounds = crate::codec::Bounds {
        block_size: bs as u32,
        block_count: u64::MAX,
    };
    let mut out = Vec::with_capacity(entries.len());
    for (k, v) in entries {
        let e = extent::decode(*k, v, 0, &bounds)?;
        // The record's form has no room for the unwritten mark.
        if e.unwritten {
            return Ok(None);
        }
        out.push(e);
    }
    // Checksums (attribute 12) for a few blocks only: a bigger file's
    // map is better in a leaf than in the inode table.
    // Extents whose checksums are in the checksum table (a clone's) cost
    // the record one byte, whatever their length.
    let summed: u64 = out.iter().filter(|e| e.is_summed()).map(|e| e.count).sum();
    let table: u64 = out.iter().filter(|e| e.table_sums).map(|e| e.count).sum();
    let all: u64 = out.iter().map(|e| e.count).sum();
    if (summed != 0 || table != 0) && (summed + table != all || summed > INLINE_SUMMED_BLOCKS) {
        return Ok(None);
    }
    record += inline_sums_cost(summed);
    if table != 0 {
        record += INLINE_TABLE_SUMS_COST;
    }
    if record > Tree::max_value(bs) {
        return Ok(None);
    }
    Ok(Some(out))
}
