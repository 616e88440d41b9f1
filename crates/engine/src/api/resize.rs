//! API layer: `Fs::resize` — grow or shrink a volume, mounted or not
//! (`tux3 resize`). The steps under the volume's lock are the frontend's
//! (frontend/resize.rs); between them this runs the unifies that make each
//! step durable, so a crash at any point leaves the old size or the new
//! one with everything intact (ARCHITECTURE.md, "Resize").
//!
//! Calls the frontend's resize steps and the commit pipeline.

use super::Fs;
use crate::error::{Errno, Error, Result};

/// Unifies a shrink runs at most, after the relocation, waiting for the
/// log, the bitmap and the branches marked to leave the tail (each moves
/// what the one before freed).
const SHRINK_UNIFIES: usize = 4;
/// Relocation passes a shrink makes at most.
const SHRINK_PASSES: usize = 3;

/// What a resize did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resized {
    pub old_blocks: u64,
    pub new_blocks: u64,
    /// Shrinking: blocks of data moved below the new end and tree nodes
    /// marked to move there.
    pub moved_blocks: u64,
}

impl Fs {
    /// Make the volume `blocks` long. Growing takes the same time at any
    /// size (the new bitmap blocks are holes). Shrinking needs what is in
    /// use to fit (else ENOSPC) and moves everything past the new end
    /// below it — file data, preallocated extents, tree nodes, the log and
    /// the bitmap — in batches with commits between (api/relocate.rs);
    /// blocks a snapshot holds there fail it with EBUSY before anything
    /// moves, the log naming the snapshots. A failed shrink leaves the
    /// volume its size and its contents (what moved stays moved).
    pub fn resize(&self, blocks: u64) -> Result<Resized> {
        let old = self.shared.vol().size_blocks();
        let mut done = Resized {
            old_blocks: old,
            new_blocks: blocks,
            moved_blocks: 0,
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
            done.moved_blocks = r?;
        }
        Ok(done)
    }

    /// Blocks the volume's device holds now (to grow to "max").
    pub fn device_capacity(&self) -> Result<u64> {
        Ok(self.device().capacity()?)
    }

    /// Returns the blocks the relocation moved or marked.
    fn shrink(&self, blocks: u64) -> Result<u64> {
        let mut moved = 0;
        // What changed while a pass ran (a file made or grown before the
        // limit took hold, meanwhile committed) gets another pass.
        for _ in 0..SHRINK_PASSES {
            // Every inode in the inode table (a file made in the open
            // delta may hold preallocated blocks past the end).
            self.shared.commit(false)?;
            moved += self.checked(self.relocate(blocks))?;
            for _ in 0..SHRINK_UNIFIES {
                self.shared.commit(true)?;
                if self.shared.vol().shrink_taken(blocks) == 0 {
                    break;
                }
            }
            let taken = self.shared.vol().shrink_taken(blocks);
            if taken == 0 {
                break;
            }
            tracing::info!("resize: {taken} blocks past the new end still in use after a pass: another");
        }
        {
            let mut v = self.shared.vol();
            let taken = v.shrink_taken(blocks);
            if taken != 0 {
                tracing::warn!(
                    "resize: {taken} blocks past the new end ({blocks} blocks) are still in use \
                     after {SHRINK_PASSES} passes moving what lay there (the first at block {}; \
                     a snapshot taken meanwhile?)",
                    v.first_taken_past(blocks)
                );
                return Err(Error::Posix(Errno::EBUSY));
            }
            v.shrink_cut(blocks)?;
        }
        // Both superblock copies name the new size before the tail goes.
        self.shared.commit(true)?;
        self.shared.commit(true)?;
        self.shared.vol().shrink_end(blocks)?;
        Ok(moved)
    }
}
