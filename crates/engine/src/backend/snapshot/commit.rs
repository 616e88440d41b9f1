//! Backend layer, snapshots: the steps a commit takes for them — burying
//! what the delta freed that a snapshot holds, and taking the snapshots
//! asked for in a unify, with what each refers to counted without a walk.
//!
//! Calls the allocator, the snapshot table, the log's record type.

use super::SnapRecord;
use crate::backend::Backend;
use crate::error::{Errno, Error, Result};
use crate::log::Record;

impl Backend {
    /// Put the blocks the delta freed that a snapshot holds on the dead
    /// list (they died in the current generation), with their `Dead`
    /// records.
    /// The shared-extent table's changes go into the table's tree too,
    /// with their `Share` records, and the checksum table's with their
    /// `Sums` records.
    pub(in crate::backend) fn bury(&mut self, records: &mut Vec<Record>) -> Result<()> {
        let dev = self.dev.clone();
        let shared = self.alloc.shared.take_dirty();
        if !shared.is_empty() {
            self.sb.shared_extents = true;
            self.snaps.sync_shared(dev.as_ref(), shared, Some(records))?;
        }
        let sums = self.alloc.sums.take_dirty();
        if !sums.is_empty() {
            self.sb.table_sums = true;
            self.snaps.sync_sums(dev.as_ref(), sums, Some(records))?;
        }
        let dying = std::mem::take(&mut self.alloc.dying);
        if dying.is_empty() {
            return Ok(());
        }
        let death = self.alloc.generation;
        self.snaps.add_dead(dev.as_ref(), dying, death, Some(records))
    }

    /// Take the snapshots asked for since the last unify: each keeps the
    /// inode table this unify wrote and closes one generation.
    pub(in crate::backend) fn take_snapshots(&mut self) -> Result<()> {
        let dev = self.dev.clone();
        for p in std::mem::take(&mut self.snaps.pending) {
            let id = self.alloc.generation;
            let Some(next) = id.checked_add(1).filter(|&g| g < u32::MAX) else {
                return Err(Error::Posix(Errno::EOVERFLOW));
            };
            let referenced = self.live_blocks()?;
            let rec = SnapRecord {
                id: u64::from(id),
                name: p.name,
                created: p.created,
                itable: self.sb.itable,
                referenced,
                deleting: false,
                received: p.received,
            };
            self.snaps.insert_record(dev.as_ref(), rec)?;
            self.alloc.generation = next;
            self.alloc.held_upto = self.snaps.held_upto();
        }
        Ok(())
    }

    /// Blocks the live image references, counted without a walk: the
    /// blocks in use less those of everything else — the superblocks, the
    /// bitmap file and its tree, the snapshot table, the dead list and the
    /// log's reserved next block (the unify has freed the old log).
    fn live_blocks(&mut self) -> Result<u64> {
        let dev = self.dev.clone();
        let mut nodes = 0u64;
        for tree in [&mut self.bitmap, &mut self.snaps.tree] {
            tree.visit(dev.as_ref(), &mut |addr, _, _, _| {
                nodes += u64::from(addr != 0);
                Ok(())
            })?;
            nodes += (tree.freed.len() + tree.retired.len()) as u64;
        }
        // The bitmap blocks the bitmap file maps (a sparse one has holes).
        let bitmap: u64 = crate::structures::extent::all(&mut self.bitmap, dev.as_ref())?
            .iter()
            .map(|e| e.count)
            .sum();
        let used = self.alloc.blocks() - self.alloc.free();
        Ok(used.saturating_sub(2 + bitmap + nodes + self.snaps.dead_blocks + 1))
    }
}
