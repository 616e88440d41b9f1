//! Frontend layer: the volume's side of a trim (`tux3 fstrim`) — one
//! batch at a time, under the exclusive delta guard the caller holds, so no
//! allocation runs while a batch discards (`backend/discard.rs`).
//!
//! Calls the backend (`Backend::trim_batch`).

use super::Volume;
use crate::backend::discard::TrimStep;
use crate::error::{err, Errno, Result};

impl Volume {
    /// One trim batch of blocks `from..end`, runs of at least `min` blocks
    /// ([`crate::backend::Backend::trim_batch`]). EIO on a volume a failed
    /// commit left read-only, EROFS on a read-only one.
    pub fn trim_batch(&mut self, from: u64, end: u64, min: u64) -> Result<TrimStep> {
        if self.has_failed() {
            return err(Errno::EIO);
        }
        self.be.trim_batch(from, end, min)
    }

    /// Blocks of the volume, and bytes per block.
    pub fn geometry(&self) -> (u64, u64) {
        (self.be.alloc.blocks(), self.be.bs as u64)
    }

    /// Blocks discarded since open (online discard and trims).
    pub fn blocks_discarded(&self) -> u64 {
        self.be.discard.blocks
    }
}
