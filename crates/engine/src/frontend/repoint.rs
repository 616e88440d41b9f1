//! Frontend layer: finding the other files that map blocks a defrag is
//! moving, so that they can be pointed at the file's new copy
//! (`api/defrag.rs` does the pointing, with a byte-compared dedupe).
//!
//! The shared-extent table counts a block's references but does not say
//! who holds them, so the files are found by reading every file's map:
//! [`Volume::maps_into`] answers for one inode, and
//! [`Volume::references_left`] says how many block references are still
//! out there, so that the walk can stop once it has found them all.
//!
//! Calls the cache (inodes), structures (extent trees) and the backend's
//! shared-extent table, through `Volume`.

use super::Volume;
use crate::error::{Errno, Error, Result};
use crate::structures::btree::TreeKind;
use crate::structures::extent;
use crate::types::{FileType, Ino};

/// Blocks a moved file mapped before its rewrite: `(pblock, count,
/// lblock)`, sorted by `pblock`, not overlapping.
pub type OldBlocks = [(u64, u64, u64)];

impl Volume {
    /// Where regular file `ino` maps any of `old`'s blocks (written
    /// extents only): `(its lblock, the moved file's lblock, count)` for
    /// each piece, in its logical order. Nothing for an inode gone since
    /// it was listed, or not a regular file.
    pub fn maps_into(&mut self, ino: Ino, old: &OldBlocks) -> Result<Vec<(u64, u64, u64)>> {
        let dev = self.be.dev.clone();
        let i = match self.inode(ino) {
            Ok(i) => i,
            Err(Error::Posix(Errno::ENOENT)) => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        if i.kind() != FileType::Regular || i.tree.kind != TreeKind::Extents {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        for e in extent::all(&mut i.tree, dev.as_ref())?
            .iter()
            .filter(|e| !e.unwritten)
        {
            // The old runs that may meet `e`: from the last one starting
            // at or before it.
            let first = old.partition_point(|r| r.0 <= e.pblock).saturating_sub(1);
            for &(p, n, l) in old[first..].iter().take_while(|r| r.0 < e.pblock + e.count) {
                let (s, t) = (p.max(e.pblock), (p + n).min(e.pblock + e.count));
                if s < t {
                    out.push((e.lblock + (s - e.pblock), l + (s - p), t - s));
                }
            }
        }
        Ok(out)
    }

    /// Block references to `old`'s blocks the live files still hold, as
    /// the shared-extent table counts them (a block it does not list
    /// counts one).
    pub fn references_left(&self, old: &OldBlocks) -> u64 {
        let table = &self.be.alloc.shared;
        old.iter()
            .flat_map(|&(p, n, _)| table.pieces(p, n))
            .map(|(_, n, refs)| n * u64::from(refs.max(1)))
            .sum()
    }
}
