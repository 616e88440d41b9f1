//! API layer: `Fs::resize` — grow or shrink a volume, mounted or not
//! (`tux3 resize`). The steps under the volume's lock are the frontend's
//! (frontend/resize.rs); between them this runs the unifies that make each
//! step durable, so a crash at any point leaves the old size or the new
//! one with everything intact (ARCHITECTURE.md, "Resize").
//!
//! Calls the frontend's resize steps and the commit pipeline.

use super::Fs;
use crate::error::{Errno, Error, Result};

/// Unifies a shrink runs at most waiting for the log and the bitmap to
/// leave the tail (each moves what the one before freed).
const SHRINK_UNIFIES: usize = 4;

/// What a resize did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resized {
    pub old_blocks: u64,
    pub new_blocks: u64,
}

impl Fs {
    /// Make the volume `blocks` long. Growing takes the same time at any
    /// size (the new bitmap blocks are holes). Shrinking needs what is in
    /// use to fit (else ENOSPC) and the blocks past the new end free:
    /// blocks the log and the bitmap hold there move below it, anything
    /// else in use there (file data, tree nodes: relocating them is not
    /// done) fails the shrink with EBUSY. A failed shrink leaves the volume
    /// as it was; the log says how many blocks were in the way.
    pub fn resize(&self, blocks: u64) -> Result<Resized> {
        let old = self.shared.vol().size_blocks();
        let done = Resized {
            old_blocks: old,
            new_blocks: blocks,
        };
        if blocks > old {
            self.shared.vol().grow_begin(blocks)?;
            self.shared.commit(true)?;
            self.shared.vol().grow_end(blocks);
            // The other superblock copy too.
            self.shared.commit(true)?;
        } else if blocks < old {
            self.shared.vol().shrink_begin(blocks)?;
            let r = self.shrink(blocks);
            if r.is_err() {
                self.shared.vol().shrink_abandon();
            }
            r?;
        }
        Ok(done)
    }

    /// Blocks the volume's device holds now (to grow to "max").
    pub fn device_capacity(&self) -> Result<u64> {
        Ok(self.device().capacity()?)
    }

    fn shrink(&self, blocks: u64) -> Result<()> {
        for _ in 0..SHRINK_UNIFIES {
            self.shared.commit(true)?;
            if self.shared.vol().shrink_taken(blocks) == 0 {
                break;
            }
        }
        {
            let mut v = self.shared.vol();
            let taken = v.shrink_taken(blocks);
            if taken != 0 {
                tracing::warn!(
                    "resize: {taken} blocks past the new end ({blocks} blocks) are in use: \
                     moving file data and tree nodes there is not supported"
                );
                return Err(Error::Posix(Errno::EBUSY));
            }
            v.shrink_cut(blocks)?;
        }
        // Both superblock copies name the new size before the tail goes.
        self.shared.commit(true)?;
        self.shared.commit(true)?;
        self.shared.vol().shrink_end(blocks)
    }
}
