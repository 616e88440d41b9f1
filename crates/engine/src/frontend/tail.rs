//! Frontend layer: the block a truncate cuts into, read before the
//! truncate with no lock held. A truncate runs under the exclusive guard
//! and zeroes the tail of the last block it keeps (F1), so that block must
//! be in memory then; on a cold file it would be read from the device
//! there, and every other operation and commit would wait for it.
//!
//! So the API first plans a read of that block as any shared read does
//! (`Volume::plan_unlocked`: the block mapped under the file's lock, the
//! read epoch entered), reads it with no lock, and offers it to the file as
//! a clean page ([`Volume::keep_tail_shared`]), which keeps it only if the
//! file still maps that block to the same device block and holds no page
//! of it — then the content read is the block's: a block the file still
//! maps was not written since (a change goes to a page, and a commit writes
//! it elsewhere), nor freed and reused, since the read's epoch is held
//! until the page is kept. The truncate then finds it in cache. A race
//! lost (a write, a commit, an eviction in between) only means the
//! truncate reads the block itself, as before.
//!
//! Calls the rest of the frontend (the shared read planning, extent
//! lookups through `Staged`) and the cache.

use super::load::{MayLoad, Staged};
use super::shared::PlannedRead;
use super::Volume;
use crate::backend::readers::ReadTicket;
use crate::error::Result;
use crate::structures::extent;
use crate::types::Ino;
use std::sync::Arc;

/// The read of the block a truncate keeps part of, planned.
pub struct TailPlan {
    lblock: u64,
    pblock: u64,
    planned: PlannedRead<Vec<u8>>,
}

/// That block, read: to offer to the file ([`Volume::keep_tail_shared`]).
pub struct TailBlock {
    lblock: u64,
    pblock: u64,
    data: Vec<u8>,
    _entered: Option<ReadTicket>,
}

impl TailPlan {
    /// Read the block (device I/O; no lock may be held).
    pub fn read(self) -> Result<TailBlock> {
        let (_, data, entered) = self.planned.read_in_epoch()?;
        Ok(TailBlock {
            lblock: self.lblock,
            pblock: self.pblock,
            data,
            _entered: entered,
        })
    }
}

impl Volume {
    /// Before a truncate of `ino` to `size`: the read of the block it will
    /// cut into, if that block is on the device only. `None` when there is
    /// nothing to read: no cut into a block, a hole, a page in cache.
    pub fn plan_tail_shared(&self, ino: Ino, size: u64, staged: &Staged) -> MayLoad<Option<TailPlan>> {
        let bs = self.bs();
        let lblock = size / bs;
        {
            let i = or_fail!(self.inode_shared(ino));
            if size >= i.attrs.size || size.is_multiple_of(bs) || i.pages.content(lblock).is_some() {
                return Some(Ok(Ok(None)));
            }
        }
        let planned = match self.plan_unlocked(ino, lblock * bs, staged, None, |_| vec![0u8; bs as usize])? {
            Ok(Ok(planned)) => planned,
            Ok(Err(cold)) => return Some(Ok(Err(cold))),
            Err(e) => return Some(Err(e)),
        };
        Some(Ok(Ok(planned.sole_block().map(|pblock| TailPlan {
            lblock,
            pblock,
            planned,
        }))))
    }

    /// Keep `tail` as a clean page of `ino` if the file still maps its
    /// block there and holds no page of it (see the module comment);
    /// otherwise, or if `ino` cannot be had under the shared guard, drop it.
    pub fn keep_tail_shared(&self, ino: Ino, tail: TailBlock) {
        let bs = self.bs();
        let Ok(mut i) = self.inode_shared(ino) else { return };
        if i.pages.content(tail.lblock).is_some() || tail.data.len() != bs as usize {
            return;
        }
        // Only nodes in memory: a node on disk would mean the map changed.
        let mapped = self.staged(None, &Staged::default(), |dev| {
            extent::lookup(&mut i.tree, dev, tail.lblock)
        });
        let Ok(Ok(Some(e))) = mapped else { return };
        if e.unwritten || e.pblock + (tail.lblock - e.lblock) != tail.pblock {
            return;
        }
        let before = i.pages.clean_len();
        i.pages.keep_clean(tail.lblock, Arc::new(tail.data));
        let after = i.pages.clean_len();
        self.clean.lock().changed(ino, before, after, bs);
    }
}
