//! Backend layer: giving blocks that are free for good back to the device
//! (discard: a hole in an image file, TRIM/UNMAP on a block device).
//!
//! A block is free for good when no durable image and no snapshot refers
//! to it and no read in flight may still map it: its bit is clear and it
//! is not pinned. A block the live volume frees is pinned until the commit
//! that frees it is durable and the reads that may have mapped it are done
//! (`alloc.rs`, A2 and `held_for_reads`); a block a snapshot holds never
//! reaches the free path (it goes to the dead list, and comes free through
//! the same pins when reclaim frees it). These are exactly the blocks the
//! allocator may hand out and overwrite (A1): discarding one is no more
//! than overwriting it, so a discard never loses a referenced block.
//!
//! Two ways in:
//! * online (`OpenOptions::discard`, `-o discard`): [`Backend::finish`]
//!   releases a commit's pins, then [`Backend::discard_released`] discards
//!   what they freed, one request per coalesced range, all before the
//!   volume is let go of, so no allocation can hand a block out (and a
//!   write land on it) before its discard is done;
//! * on demand (`tux3 fstrim`): [`Backend::trim_batch`] discards the free
//!   ranges of a window of the volume; the caller holds the volume for one
//!   batch at a time ([`TRIM_SCAN`] blocks looked at, [`TRIM_BATCH`]
//!   discarded at most).
//!
//! A device that cannot discard is not an error: online discard says so
//! once and stops asking; a trim reports ENOTSUP. Other discard failures
//! lose nothing (the blocks stay free) and are said once per mount.
//!
//! Calls the allocator and the device.

use super::Backend;
use crate::error::{err, Errno, Result};
use std::io::ErrorKind;

/// Blocks of the volume one trim batch looks at, at most.
pub const TRIM_SCAN: u64 = 1 << 20;
/// Blocks one trim batch discards, at most.
pub const TRIM_BATCH: u64 = 1 << 16;

/// The volume's discard state.
#[derive(Debug, Default)]
pub struct Discard {
    /// Discard what each commit frees (`OpenOptions::discard`).
    pub online: bool,
    /// The device said it cannot discard (said once).
    unsupported: bool,
    /// A discard failed otherwise (said once).
    failed: bool,
    /// Blocks discarded since open, online and by trims.
    pub blocks: u64,
}

/// What one trim batch did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrimStep {
    /// Where the next batch starts (the end of the range when done).
    pub next: u64,
    /// Blocks discarded.
    pub blocks: u64,
}

impl Backend {
    /// A block no durable image, snapshot or read in flight refers to.
    fn free_for_good(&self, b: u64) -> bool {
        b < self.alloc.blocks() && !self.alloc.is_used(b) && !self.alloc.is_pinned(b)
    }

    /// After a commit released its pins: take the ranges that came free
    /// for good and, with online discard on, discard them (a device that
    /// cannot is asked once). The allocator's list is emptied either way.
    pub(crate) fn discard_released(&mut self) {
        let ranges = self.alloc.take_released();
        if !self.discard.online || self.discard.unsupported || self.read_only {
            return;
        }
        for (start, count) in ranges {
            debug_assert!(
                (start..start + count).all(|b| self.free_for_good(b)),
                "discard of {start}+{count}, not all free for good"
            );
            if let Err(e) = self.discard_range(start, count) {
                if !self.discard.failed {
                    self.discard.failed = true;
                    tracing::warn!(
                        "tux3: {}: discard of blocks {start}+{count} failed: {e} (the blocks stay free; \
                         further failures are not reported)",
                        self.dev.name()
                    );
                }
            }
            if self.discard.unsupported {
                return;
            }
        }
    }

    /// Discard `count` blocks from `start`. A device that cannot discard
    /// marks the volume so (said once) and counts as done.
    fn discard_range(&mut self, start: u64, count: u64) -> std::io::Result<()> {
        match self.dev.discard(start, count) {
            Ok(()) => {
                self.discard.blocks += count;
                Ok(())
            }
            Err(e) if e.kind() == ErrorKind::Unsupported => {
                if !self.discard.unsupported {
                    self.discard.unsupported = true;
                    tracing::warn!(
                        "tux3: {}: the device cannot discard; freed blocks are not given back to it",
                        self.dev.name()
                    );
                }
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// One batch of a trim of blocks `from..end`: discard each run of at
    /// least `min` blocks free for good, looking at [`TRIM_SCAN`] blocks
    /// and discarding [`TRIM_BATCH`] at most (a longer run goes on in the
    /// next batch). EROFS on a read-only volume; ENOTSUP if the device
    /// cannot discard.
    pub fn trim_batch(&mut self, from: u64, end: u64, min: u64) -> Result<TrimStep> {
        if self.read_only {
            return err(Errno::EROFS);
        }
        if self.discard.unsupported {
            return err(Errno::ENOTSUP);
        }
        let end = end.min(self.alloc.blocks());
        let stop = end.min(from.saturating_add(TRIM_SCAN));
        let min = min.max(1);
        let (mut b, mut done) = (from, 0);
        while b < stop && done < TRIM_BATCH {
            if !self.free_for_good(b) {
                b += 1;
                continue;
            }
            // Far enough to tell the run is long enough, and no further
            // than this batch discards.
            let reach = end.min(b.saturating_add(min.max(TRIM_BATCH - done)));
            let mut e = b + 1;
            while e < reach && self.free_for_good(e) {
                e += 1;
            }
            if e - b < min {
                b = e;
                continue;
            }
            let take = (e - b).min(TRIM_BATCH - done);
            self.discard_range(b, take)?;
            if self.discard.unsupported {
                return err(Errno::ENOTSUP);
            }
            done += take;
            b += take;
        }
        Ok(TrimStep {
            next: b,
            blocks: done,
        })
    }
}
