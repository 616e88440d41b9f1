//! Backend layer, unify (`commit.rs` prepares it in place of a delta
//! commit's log): every changed branch and bitmap block redirected and
//! written, the snapshot table written and the snapshots asked for taken,
//! a new log started (with the orphan list in its head when there is one),
//! and the superblock that names the new roots.
//!
//! Calls the allocator, the snapshot table, the log and structures
//! (trees, bitmap, superblock).

use super::checks::new_log_head;
use super::writeout::Writes;
use super::{Backend, BITMAP_INO};
use crate::error::Result;
use crate::log::{Record, Tail};
use crate::structures::btree::node::FreedNode;
use crate::structures::superblock::Superblock;
use crate::structures::{bitmap, extent};
use std::collections::BTreeMap;

impl Backend {
    /// Unify after steps 1-4: branches and bitmap blocks join the writes;
    /// returns the superblock that names them and the new log head (U2,
    /// asserted here; U1 where the superblock goes out).
    pub(super) fn unify_images(&mut self, writes: &mut Writes) -> Result<Superblock> {
        let bs = self.bs;
        // The inode table's changed branches.
        let mut freed = Vec::new();
        let birth = self.alloc.generation;
        let alloc = &mut self.alloc;
        self.sb.itable = self.itable.get_mut().redirect_branches(
            bs,
            birth,
            &mut || alloc.alloc_one(2),
            writes,
            &mut freed,
        )?;
        for (b, born) in freed {
            self.alloc.free_born(b, 1, born);
        }
        // The old log is no longer needed once the superblock is durable; its
        // reserved next block becomes the new head (or, with orphans, a
        // fresh block does).
        for b in std::mem::take(&mut self.log.since_unify) {
            self.alloc.free_range(b, 1);
        }
        // The dead list takes this unify's deaths (the table is written in
        // full below: no records), then the snapshots asked for.
        self.bury(&mut Vec::new())?;
        self.take_snapshots()?;
        let (old, known) = (self.log.tail, self.log.order.known());
        let fresh = self.fresh_log_head();
        let head = self.restart_log(writes)?;
        // U2, asserted: the old chain's next block, or a fresh one written here.
        new_log_head(old, known, head, fresh, writes);
        // A table with shared runs (replayed ones too) marks the volume.
        self.sb.shared_extents |= self.snaps.shared_runs() > 0;
        self.sb.table_sums |= self.snaps.sum_chunks() > 0;
        if self.snaps.tree.needs_unify() || self.sb.has_snapshots() || self.alloc.generation != 0 {
            let dev = self.dev.clone();
            self.sb.snapshots = self.snaps.write(dev.as_ref(), &mut self.alloc, bs, writes)?;
            self.sb.generation = u64::from(self.alloc.generation);
        }
        let relocated = self.relocate_bitmap(writes)?;
        #[cfg(debug_assertions)]
        {
            let dev = self.dev.clone();
            let past = extent::all(&mut self.bitmap, dev.as_ref())?
                .into_iter()
                .find(|e| e.end() > self.sb.bitmap_blocks);
            debug_assert!(
                past.is_none(),
                "a unify leaves the bitmap file mapping {past:?}, past its {} blocks",
                self.sb.bitmap_blocks
            );
        }
        for (index, addr) in relocated.iter().filter_map(|(i, a)| Some((i, (*a)?))) {
            writes.push((
                addr,
                bitmap::encode(addr, *index, &self.alloc.bits(*index, bs), bs),
            ));
        }
        self.alloc.dirty.clear();
        let _ = self.alloc.take_delta(self.delta);
        let mut sb = self.sb.clone();
        sb.seq += 1;
        (sb.log_head, sb.log_seq, sb.log_prev_crc) = (head.next, head.seq, head.prev_crc);
        sb.next_delta = self.delta + 1;
        sb.unifies += 1;
        Ok(sb)
    }

    /// Start the log the unify's superblock names; returns its head, the
    /// sequence number and the `prev_crc` the head carries. Without orphans
    /// the log simply goes on: the head is the old chain's reserved next
    /// block, still empty, and carries the checksum of the block before it,
    /// so an fsync commit written there while the unify writes its data
    /// (before its superblock) extends the old chain and starts the new one
    /// alike. With orphans it is a fresh
    /// block (free in the old image, so a crash before the superblock lands
    /// cannot make it extend the old chain; the old reserved block is freed)
    /// and holds a commit of the next delta, flagged FSYNC because that
    /// delta stays open, with one `Orphan` record per orphan in ascending
    /// order. It goes out with the unify's other writes, before the flush
    /// that precedes the superblock.
    /// A fresh block also when the old chain's next block lies past the
    /// allocator's limit (a shrink moving the log out of the tail).
    pub(super) fn restart_log(&mut self, writes: &mut Writes) -> Result<Tail> {
        let old = self.log.tail;
        if !self.fresh_log_head() {
            return Ok(old);
        }
        let head = self.alloc.alloc_one(old.next)?;
        self.alloc.free_range(old.next, 1);
        self.log.tail = Tail {
            next: head,
            seq: old.seq,
            prev_crc: 0,
        };
        let records: Vec<Record> = self.orphans.iter().map(|&ino| Record::Orphan { ino }).collect();
        let images = self
            .log
            .write_delta(&mut self.alloc, records, self.delta + 1, true, self.bs)?;
        writes.extend(images.body);
        writes.push(images.commit);
        Ok(Tail {
            next: head,
            seq: old.seq,
            prev_crc: 0,
        })
    }

    /// Whether the unify starts the log in a fresh block ([`Backend::restart_log`]).
    pub(super) fn fresh_log_head(&self) -> bool {
        !self.orphans.is_empty() || self.log.tail.next >= self.alloc.limit()
    }

    /// Give every changed bitmap block a new address, updating the bitmap
    /// file's extent tree, until allocation stops changing further bitmap
    /// blocks. On a sparse bitmap a changed block whose bits are all clear
    /// becomes a hole instead (`None`), and is written after all if the
    /// relocation itself allocates in its group; so each block changes at
    /// most twice, and this ends.
    pub(super) fn relocate_bitmap(&mut self, writes: &mut Writes) -> Result<BTreeMap<u64, Option<u64>>> {
        let dev = self.dev.clone();
        let bs = self.bs;
        let sparse = self.sb.sparse_bitmap;
        let mut relocated: BTreeMap<u64, Option<u64>> = BTreeMap::new();
        loop {
            let todo: Vec<u64> = self
                .alloc
                .dirty
                .iter()
                .filter(|i| match relocated.get(i) {
                    None => true,
                    Some(None) => !self.alloc.is_clear(**i),
                    Some(Some(_)) => false,
                })
                .copied()
                .collect();
            if todo.is_empty() && !self.bitmap.needs_unify() {
                break;
            }
            for index in todo {
                let old = extent::lookup(&mut self.bitmap, dev.as_ref(), index)?;
                if sparse && self.alloc.is_clear(index) {
                    if old.is_some() {
                        for (s, c, _) in extent::punch(&mut self.bitmap, dev.as_ref(), index, index + 1)? {
                            self.alloc.free_range(s, c);
                        }
                    }
                    relocated.insert(index, None);
                    continue;
                }
                let goal = old.map_or(2, |e| e.pblock);
                let addr = self.alloc.alloc_one(goal)?;
                for (s, c, _) in extent::map(&mut self.bitmap, dev.as_ref(), index, addr, 1, 0)? {
                    self.alloc.free_range(s, c);
                }
                relocated.insert(index, Some(addr));
            }
            let mut maps = Vec::new();
            let alloc = &mut self.alloc;
            self.bitmap
                .redirect_leaves(bs, 0, &mut || alloc.alloc_one(2), writes, &mut maps)?;
            let mut freed: Vec<FreedNode> = self.bitmap.freed.drain(..).collect();
            self.bitmap.unmaps.clear();
            let alloc = &mut self.alloc;
            self.sb.bitmap =
                self.bitmap
                    .redirect_branches(bs, 0, &mut || alloc.alloc_one(2), writes, &mut freed)?;
            // The bitmap file is in no snapshot: its blocks are freed at once.
            for (b, _) in freed {
                self.alloc.free_range(b, 1);
            }
        }
        debug_assert_eq!(self.bitmap.id, BITMAP_INO);
        Ok(relocated)
    }
}
