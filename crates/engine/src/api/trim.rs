//! API layer: [`Fs::trim`], FITRIM on the volume (`tux3 fstrim`) — every
//! run of blocks free for good in a byte range goes back to the device, in
//! bounded batches, each under the exclusive delta guard and no longer
//! (`frontend/trim.rs`, `backend/discard.rs`).
//!
//! Calls the frontend (`Volume::trim_batch`) and the commit pipeline.

use super::Fs;
use crate::error::{err, Errno, Result};

/// What [`Fs::trim`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TrimReport {
    /// Bytes discarded.
    pub bytes: u64,
    /// Bytes of the volume looked at (the range, cut to the volume).
    pub scanned: u64,
}

impl Fs {
    /// Discard every run of at least `minimum` bytes (one block at least)
    /// free for good within bytes `start..start + len` of the volume, as
    /// FITRIM does: whole blocks only, the range cut to the volume. The
    /// open delta is committed first, so what was freed before the call
    /// counts. `progress(done, total)` is called between batches with the
    /// bytes looked at so far. EINVAL if `start` lies past the volume or
    /// `minimum` is larger than it; EROFS on a read-only volume; ENOTSUP if
    /// the device cannot discard.
    pub fn trim(
        &self,
        start: u64,
        len: u64,
        minimum: u64,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<TrimReport> {
        let (blocks, bs) = self.vol().geometry();
        let size = blocks.saturating_mul(bs);
        if start >= size || minimum > size {
            return err(Errno::EINVAL);
        }
        if self.shared_vol().is_read_only() {
            return err(Errno::EROFS);
        }
        self.shared.sync()?;
        let first = start / bs;
        let end = start.saturating_add(len).min(size) / bs;
        let min = minimum.div_ceil(bs).max(1);
        let mut report = TrimReport {
            bytes: 0,
            scanned: (end.saturating_sub(first)) * bs,
        };
        let mut at = first;
        while at < end {
            let step = self.vol().trim_batch(at, end, min)?;
            report.bytes += step.blocks * bs;
            at = step.next.max(at + 1);
            progress((at - first) * bs, report.scanned);
        }
        Ok(report)
    }
}
