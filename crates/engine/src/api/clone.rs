//! API layer: sharing blocks between files — [`Fs::clone_range`] (what
//! copy_file_range(2) and `tux3 clone` ask for) and [`Fs::dedupe_range`]
//! (what `tux3 dedupe` asks for), each under the exclusive delta guard, so
//! a clone or a dedupe is one change in one delta.
//!
//! Calls the frontend (`Volume::clone_range`, `Volume::dedupe_range`).

use super::Fs;
use crate::error::Result;
use crate::types::Ino;

/// What sharing has saved on a volume (see [`Fs::sharing`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sharing {
    /// Extents of the shared-extent table (ranges with two or more references).
    pub extents: u64,
    /// Blocks those extents cover.
    pub blocks: u64,
    /// References beyond the first, summed over those blocks: the blocks
    /// that sharing saves.
    pub saved_blocks: u64,
}

impl Fs {
    /// Make bytes `dst_off..dst_off+n` of regular file `dst` read as bytes
    /// `src_off..src_off+n` of regular file `src`, where `n` is `len`
    /// clipped to `src`'s size (0 at or past its end), and return `n`.
    /// `dst` grows to `dst_off + n` if it is shorter; its mtime and ctime
    /// change. The blocks both ranges cover whole are shared (no data is
    /// read or written; a later write to either file takes new blocks and
    /// never changes the other), the partial blocks at the edges are
    /// copied, holes and preallocated ranges of `src` become holes in
    /// `dst`. Errors: EISDIR or EINVAL for a file that is not regular,
    /// EINVAL for overlapping ranges of one file, EFBIG past the largest
    /// file, EPERM for an immutable or append-only `dst`, ENOSPC.
    pub fn clone_range(&self, src: Ino, src_off: u64, dst: Ino, dst_off: u64, len: u64) -> Result<u64> {
        self.retrying_enospc(|vol| vol.clone_range(src, src_off, dst, dst_off, len))
    }

    /// Share the blocks of `dst_off..dst_off+len` of `dst` with those of
    /// `src_off..src_off+len` of `src` if, compared byte by byte under the
    /// guard, they hold the same bytes: then return `Some(len)`, and
    /// `None` (nothing changed) if they differ. Both offsets and `len`
    /// must be multiples of the block size (EINVAL), both ranges inside
    /// their files (EINVAL). Neither file's size or times change.
    pub fn dedupe_range(
        &self,
        src: Ino,
        src_off: u64,
        dst: Ino,
        dst_off: u64,
        len: u64,
    ) -> Result<Option<u64>> {
        self.retrying_enospc(|vol| vol.dedupe_range(src, src_off, dst, dst_off, len))
    }

    /// The shared-extent table's totals.
    pub fn sharing(&self) -> Sharing {
        self.vol().sharing()
    }
}
