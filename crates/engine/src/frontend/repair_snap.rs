//! Frontend layer: repair hooks for the snapshot table, for `fsck
//! --repair` (`crates/tools/src/fsck/fix.rs`): put on the dead list blocks
//! a snapshot's image references that neither the live volume nor the
//! list holds (its entry was lost), and take off it an extent no snapshot
//! holds. Each change goes into the table in memory; the caller unifies
//! afterwards, which writes the table.
//!
//! Calls the backend's snapshot table and allocator.

use super::Volume;
use crate::error::{err, Errno, Result};

impl Volume {
    /// Put `start..start+count`, born in `birth`, on the dead list as dying
    /// now: every snapshot from `birth` on holds it (a snapshot that does
    /// not reference it only keeps it longer), so none of them loses it.
    /// The blocks must be in use and on no list.
    pub fn repair_bury(&mut self, start: u64, count: u64, birth: u32) -> Result<()> {
        if self.be.read_only || self.failed {
            return err(Errno::EROFS);
        }
        let death = self.be.alloc.generation;
        let free = (start..start.saturating_add(count)).any(|b| !self.be.alloc.is_used(b));
        if count == 0 || birth >= death || free || self.be.snaps.dead_overlap(start, count).is_some() {
            return err(Errno::EINVAL);
        }
        let dev = self.be.dev.clone();
        self.be
            .snaps
            .add_dead(dev.as_ref(), vec![(start, count, birth)], death, None)
    }

    /// Take the dead extent at `start` off the list, its blocks left in
    /// use: what nothing else references is a leak the next check frees.
    pub fn repair_unbury(&mut self, start: u64) -> Result<()> {
        if self.be.read_only || self.failed {
            return err(Errno::EROFS);
        }
        let dev = self.be.dev.clone();
        self.be.snaps.remove_dead(dev.as_ref(), start)?;
        Ok(())
    }
}
