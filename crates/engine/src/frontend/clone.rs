//! Frontend layer: sharing blocks between files — cloning a range
//! (copy_file_range(2), `tux3 clone`) and deduplicating one.
//!
//! Calls the cache (pages), structures (extent trees) and the backend's
//! allocator, through `Volume`.

use super::Volume;
use crate::api::Sharing;
use crate::error::{err, Errno, Result};
use crate::types::*;

impl Volume {
    /// See [`crate::Fs::clone_range`].
    pub fn clone_range(&mut self, src: Ino, src_off: u64, dst: Ino, dst_off: u64, len: u64) -> Result<u64> {
        let size = self.getattr(src)?.size;
        let n = len.min(size.saturating_sub(src_off));
        if src == dst && src_off < dst_off + n && dst_off < src_off + n {
            return err(Errno::EINVAL);
        }
        let mut done = 0;
        while done < n {
            let chunk = (n - done).min(1 << 20) as usize;
            let data = self.read(src, src_off + done, chunk)?;
            self.write(dst, dst_off + done, &data)?;
            done += chunk as u64;
        }
        Ok(n)
    }

    /// See [`crate::Fs::dedupe_range`].
    pub fn dedupe_range(
        &mut self,
        src: Ino,
        src_off: u64,
        dst: Ino,
        dst_off: u64,
        len: u64,
    ) -> Result<Option<u64>> {
        let a = self.read(src, src_off, len as usize)?;
        let b = self.read(dst, dst_off, len as usize)?;
        Ok((a == b).then_some(len))
    }

    /// The shared-extent table's totals.
    pub fn sharing(&self) -> Sharing {
        Sharing::default()
    }
}
