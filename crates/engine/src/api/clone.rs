//! API layer: sharing blocks between files — [`Fs::clone_range`] (what
//! copy_file_range(2) and `tux3 clone` ask for) and [`Fs::dedupe_range`]
//! (what `tux3 dedupe` asks for).
//!
//! The whole blocks of a clone are shared under one hold of the exclusive
//! delta guard, so they are one change in one delta; the unaligned bytes
//! at its edges are copied by ordinary reads and writes. A source with
//! pages not yet on the device in the range is committed first, so that
//! its blocks can be shared rather than copied.
//!
//! A dedupe reads and compares both ranges without the guard and shares
//! them under it only if neither changed since it was read.
//!
//! Calls the frontend (`Volume::clone_*`, `Volume::dedupe_check`,
//! `Volume::dedupe_seen`, `Volume::same_blocks`) and the commit scheduling.

use super::Fs;
use crate::error::Result;
use crate::frontend::BlockRun;
use crate::types::Ino;

pub use crate::frontend::Sharing;

/// Bytes an edge copy moves per read and write.
const COPY_CHUNK: u64 = 1 << 20;

/// Times [`Fs::dedupe_range`] compares without the guard before it gives
/// up on a range that keeps changing and compares under the guard.
const UNLOCKED_TRIES: usize = 3;

impl Fs {
    /// Make bytes `dst_off..dst_off+n` of regular file `dst` read as bytes
    /// `src_off..src_off+n` of regular file `src`, where `n` is `len`
    /// clipped to `src`'s size (0 at or past its end), and return `n`.
    /// `dst` grows to `dst_off + n` if it is shorter; its mtime and ctime
    /// change. The blocks both ranges cover whole are shared (no data is
    /// read or written; a later write to either file takes new blocks and
    /// never changes the other), the partial blocks at the edges are
    /// copied, holes and preallocated ranges of `src` become holes in
    /// `dst`; when the offsets differ within a block everything is copied.
    /// Errors: EISDIR or EINVAL for a file that is not regular, EINVAL for
    /// overlapping ranges of one file, EFBIG past the largest file, EPERM
    /// for an immutable or append-only `dst`, ENOSPC.
    pub fn clone_range(&self, src: Ino, src_off: u64, dst: Ino, dst_off: u64, len: u64) -> Result<u64> {
        let bs = self.vol().bs();
        let plan = self.vol().clone_plan(src, src_off, dst, dst_off, len)?;
        if plan.blocks > 0 {
            if self.vol().has_unwritten_pages(src, plan.src_block, plan.blocks)? {
                self.sync()?;
            }
            self.retrying_enospc(|vol| {
                let run = BlockRun {
                    src,
                    src_block: plan.src_block,
                    dst,
                    dst_block: plan.dst_block,
                    count: plan.blocks,
                };
                vol.clone_blocks(
                    run,
                    plan.size_after.min(dst_off + plan.head + plan.blocks * bs),
                    true,
                )
            })?;
        }
        self.copy_bytes(src, src_off, dst, dst_off, plan.head)?;
        let done = plan.head + (plan.blocks * bs).min(plan.n - plan.head);
        self.copy_bytes(src, src_off + done, dst, dst_off + done, plan.n - done)?;
        Ok(plan.n)
    }

    /// Copy `len` bytes by reads and writes.
    fn copy_bytes(&self, src: Ino, src_off: u64, dst: Ino, dst_off: u64, len: u64) -> Result<()> {
        let mut done = 0;
        while done < len {
            let chunk = (len - done).min(COPY_CHUNK) as usize;
            let data = self.read(src, src_off + done, chunk)?;
            let mut buf = data;
            buf.resize(chunk, 0);
            self.write(dst, dst_off + done, &buf)?;
            done += chunk as u64;
        }
        Ok(())
    }

    /// Share the blocks of `dst_off..dst_off+len` of `dst` with those of
    /// `src_off..src_off+len` of `src` if, compared byte by byte, they hold
    /// the same bytes: then return `Some(len)`, and `None` (nothing
    /// changed) if they differ. Both offsets and `len` must be multiples
    /// of the block size, both ranges inside their files' blocks (EINVAL).
    /// Neither file's size or times change.
    ///
    /// The bytes compared are the bytes shared: both ranges are read
    /// without the guard (other operations go on meanwhile), and shared
    /// only if, under the exclusive guard, neither range has changed since
    /// it was read (the same blocks mapped, no pages unwritten, no commit
    /// and no clone in between: `Volume::dedupe_seen`). A range that did
    /// change is read again; after three such tries the
    /// compare runs under the guard.
    pub fn dedupe_range(
        &self,
        src: Ino,
        src_off: u64,
        dst: Ino,
        dst_off: u64,
        len: u64,
    ) -> Result<Option<u64>> {
        self.dedupe_range_between(src, src_off, dst, dst_off, len, &mut || ())
    }

    /// [`Fs::dedupe_range`], calling `between` after each unlocked compare
    /// and before the guard is taken again (tests make a race happen there).
    #[doc(hidden)]
    pub fn dedupe_range_between(
        &self,
        src: Ino,
        src_off: u64,
        dst: Ino,
        dst_off: u64,
        len: u64,
        between: &mut dyn FnMut(),
    ) -> Result<Option<u64>> {
        let (sb, db, count) = self.vol().dedupe_check(src, src_off, dst, dst_off, len)?;
        let run = BlockRun {
            src,
            src_block: sb,
            dst,
            dst_block: db,
            count,
        };
        for _ in 0..UNLOCKED_TRIES {
            let seen = {
                let mut vol = self.vol();
                vol.dedupe_check(src, src_off, dst, dst_off, len)?;
                if vol.same_blocks(src, sb, dst, db, count)? {
                    return Ok(Some(len));
                }
                let mut seen = vol.dedupe_seen(run)?;
                if seen.unwritten {
                    // Pages not on the device: commit them first, once a try.
                    drop(vol);
                    self.sync()?;
                    vol = self.vol();
                    vol.dedupe_check(src, src_off, dst, dst_off, len)?;
                    seen = vol.dedupe_seen(run)?;
                    if seen.unwritten {
                        continue;
                    }
                }
                seen
            };
            let a = self.read(src, src_off, len as usize)?;
            let b = self.read(dst, dst_off, len as usize)?;
            // Equal to the end of both files: a last block partly past the
            // end of file is shared only when both ends fall at the same
            // place in it (bytes past the end are zeros in both).
            let equal = a == b;
            drop((a, b));
            between();
            let done = self.retrying_enospc(|vol| {
                vol.dedupe_check(src, src_off, dst, dst_off, len)?;
                if vol.dedupe_seen(run)? != seen {
                    return Ok(None);
                }
                if equal {
                    let size = vol.getattr(dst)?.size;
                    vol.clone_blocks(run, size, false)?;
                }
                Ok(Some(equal.then_some(len)))
            })?;
            if let Some(r) = done {
                return Ok(r);
            }
        }
        // Changed under every try: compare under the guard.
        if self.vol().has_unwritten_pages(src, sb, count)?
            || self.vol().has_unwritten_pages(dst, db, count)?
        {
            self.sync()?;
        }
        self.retrying_enospc(|vol| {
            vol.dedupe_check(src, src_off, dst, dst_off, len)?;
            let a = vol.read(src, src_off, len as usize)?;
            let b = vol.read(dst, dst_off, len as usize)?;
            if a != b {
                return Ok(None);
            }
            let size = vol.getattr(dst)?.size;
            vol.clone_blocks(run, size, false)?;
            Ok(Some(len))
        })
    }

    /// The shared-extent table's totals.
    pub fn sharing(&self) -> Sharing {
        self.vol().sharing()
    }
}
