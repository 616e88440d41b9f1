//! API layer: [`Fs::fallocate`], fallocate(2) on a file — under the
//! exclusive delta guard, as it changes the file's extent map and takes
//! or gives back space at once (`frontend/falloc.rs`).
//!
//! Calls the frontend (`Volume::fallocate`) and the commit pipeline's lock.

use super::Fs;
use crate::error::{Errno, Result};
use crate::frontend::Volume;
use crate::types::Ino;

impl Fs {
    /// fallocate(2): `mode` is the kernel's (FALLOC_FL_*): 0 preallocates
    /// `len` bytes at `offset` and extends the size, KEEP_SIZE only
    /// preallocates; PUNCH_HOLE | KEEP_SIZE frees the range; ZERO_RANGE
    /// (with or without KEEP_SIZE) makes it read as zeros, preallocated;
    /// COLLAPSE_RANGE and INSERT_RANGE remove or open a block-aligned
    /// range (EINVAL when it is not aligned). Preallocated blocks read as
    /// zeros until written and writes fill them in place. Other modes and
    /// combinations: EOPNOTSUPP, as on ext4. ENOSPC changes nothing; while
    /// a commit is in flight (its frees come back once it is durable), it
    /// is retried after it.
    pub fn fallocate(&self, ino: Ino, mode: i32, offset: u64, len: u64) -> Result<()> {
        self.retrying_enospc(|vol| vol.fallocate(ino, mode, offset, len))
    }

    /// Run `op` on the volume, exclusively; on ENOSPC while a commit is in
    /// flight (its frees come back once it is durable), again after it.
    pub(super) fn retrying_enospc<T>(&self, mut op: impl FnMut(&mut Volume) -> Result<T>) -> Result<T> {
        loop {
            let mut vol = self.vol();
            let in_flight = vol.commit_in_flight();
            match op(&mut vol) {
                Err(e) if in_flight && e.errno() == Errno::ENOSPC => {
                    drop(vol);
                    self.shared.with_commit_lock(|| ());
                }
                r => return r,
            }
        }
    }
}
