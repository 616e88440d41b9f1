//! Frontend layer: the steps of a resize that need the volume's lock, for
//! `Fs::resize` (api/resize.rs), which runs the unifies between them.
//!
//! Growing: the device grows first, then the superblock in memory takes
//! the new size (and the `SPARSE_BITMAP` flag: the new bitmap blocks are
//! holes), and only once a unify has made that superblock durable does
//! the allocator hand out the new blocks. So no log record ever names a
//! block past the size of the durable superblock, and a crash at any point
//! leaves the old size or the new one.
//!
//! Shrinking: the allocator stops handing out blocks past the new end, the
//! bitmap blocks of the groups past it are marked changed (a unify leaves
//! them out, being clear, or frees their place), and unifies move the log
//! and bitmap below the end; once nothing past the end is in use or
//! pinned the superblock takes the new size, and after the unify that
//! writes it the device is cut.
//!
//! Calls the backend (allocator, superblock) and the device.

use super::Volume;
use crate::backend::mkfs::MIN_BLOCKS;
use crate::error::{Errno, Error, Result};
use crate::structures::bitmap;

impl Volume {
    fn check_resizable(&self) -> Result<()> {
        if self.be.read_only || self.failed {
            return Err(Error::Posix(Errno::EROFS));
        }
        Ok(())
    }

    /// The volume's size in blocks, as the allocator has it.
    pub fn size_blocks(&self) -> u64 {
        self.be.alloc.blocks()
    }

    /// Grow, step 1: the device to `blocks`, and the superblock the next
    /// unify writes.
    pub fn grow_begin(&mut self, blocks: u64) -> Result<()> {
        self.check_resizable()?;
        self.be.dev.resize(blocks)?;
        let bs = self.be.bs;
        let sb = &mut self.be.sb;
        sb.block_count = blocks;
        sb.bitmap_blocks = bitmap::blocks_needed(bs, blocks);
        sb.sparse_bitmap = true;
        Ok(())
    }

    /// Grow, step 2, after a unify made the new size durable: the new
    /// blocks are free.
    pub fn grow_end(&mut self, blocks: u64) {
        self.be.alloc.grow(blocks);
    }

    /// Shrink, step 1: nothing new past `blocks`; the bitmap blocks of the
    /// groups past it are to be left out or moved.
    pub fn shrink_begin(&mut self, blocks: u64) -> Result<()> {
        self.check_resizable()?;
        if blocks < MIN_BLOCKS {
            return Err(Error::BadImage(format!(
                "a volume needs at least {MIN_BLOCKS} blocks, not {blocks}"
            )));
        }
        // What is in use, with room for the unifies' metadata, must fit.
        let used = self.be.alloc.blocks() - self.be.alloc.free() + self.reserve_now().total();
        if used > blocks {
            tracing::warn!(
                "resize: {used} blocks are in use or kept for metadata: more than fit in {blocks}"
            );
            return Err(Error::Posix(Errno::ENOSPC));
        }
        self.be.sb.sparse_bitmap = true;
        let alloc = &mut self.be.alloc;
        alloc.set_limit(blocks);
        let (first, last) = (alloc.index_of(blocks), alloc.index_of(alloc.blocks() - 1));
        alloc.dirty.extend(first..=last);
        Ok(())
    }

    /// Blocks past `blocks` still in use or pinned.
    pub fn shrink_taken(&self, blocks: u64) -> u64 {
        self.be.alloc.taken_past(blocks)
    }

    /// The first block at or past `blocks` in use or pinned (for messages).
    pub fn first_taken_past(&self, blocks: u64) -> u64 {
        let end = self.be.alloc.blocks();
        match self.be.alloc.free_runs(blocks, end, 1).first() {
            Some(&(start, len)) if start == blocks => start.saturating_add(len),
            _ => blocks,
        }
    }

    /// Shrink, step 2, once nothing past `blocks` is in use or pinned: the
    /// superblock the next unify writes takes the new size. The bitmap
    /// blocks past its bitmap file's new end must be holes already.
    pub fn shrink_cut(&mut self, blocks: u64) -> Result<()> {
        let taken = self.shrink_taken(blocks);
        if taken != 0 {
            return Err(Error::Posix(Errno::ENOSPC));
        }
        let bs = self.be.bs;
        let (old, new) = (self.be.sb.bitmap_blocks, bitmap::blocks_needed(bs, blocks));
        // The bitmap blocks past the file's new end are all clear now, and
        // nothing can set a bit there again; but a unify may have written
        // one that its own relocation cleared afterwards (the last block in
        // use there an old bitmap block or bitmap-file node it moved): that
        // one is mapped still and not marked changed. Marked, the next
        // unify — the one that writes the new size — leaves them all holes,
        // as the new bitmap file must (a mount refuses a block mapped past
        // its end).
        self.be.alloc.dirty.extend(new..old.max(new));
        self.be.sb.block_count = blocks;
        self.be.sb.bitmap_blocks = new;
        Ok(())
    }

    /// Shrink, step 3, after a unify made the new size durable: the
    /// allocator and the device lose the tail.
    pub fn shrink_end(&mut self, blocks: u64) -> Result<()> {
        if !self.be.alloc.truncate(blocks) {
            return Err(Error::Posix(Errno::EBUSY));
        }
        self.be.dev.resize(blocks)?;
        Ok(())
    }

    /// Give up a shrink: the whole volume is allocatable again.
    pub fn shrink_abandon(&mut self) {
        let blocks = self.be.alloc.blocks();
        self.be.alloc.set_limit(blocks);
    }
}
