//! API layer: snapshots of the whole volume — create, list, delete and
//! the background reclaim of a deleted one's space. A snapshot is taken by
//! a unify (one commit, no walk of any tree); the frontend and backend do
//! the work (`backend/snapshot.rs`). Reading a snapshot is opening it
//! (`OpenOptions::snapshot`).

use super::Fs;
use crate::error::{Errno, Error, Result};
use crate::types::SnapshotInfo;

impl Fs {
    /// Take a snapshot named `name` of everything done before this call:
    /// the open delta is committed by a unify that records the snapshot.
    /// Errors: EEXIST (the name is taken), EINVAL (empty, longer than 255
    /// bytes, or holding '/' or NUL), EROFS (read-only), ENOSPC.
    pub fn snapshot_create(&self, name: &[u8]) -> Result<SnapshotInfo> {
        let _ = name;
        Err(Error::Posix(Errno::ENOSYS))
    }

    /// Every snapshot, oldest first, with its space accounting.
    pub fn snapshot_list(&self) -> Result<Vec<SnapshotInfo>> {
        Err(Error::Posix(Errno::ENOSYS))
    }

    /// Delete the snapshot `name`: the name goes at once (durable when this
    /// returns); its space comes back in bounded batches, one per delta
    /// commit, resumed after a crash or unmount. ENOENT if there is none.
    pub fn snapshot_delete(&self, name: &[u8]) -> Result<()> {
        let _ = name;
        Err(Error::Posix(Errno::ENOSYS))
    }

    /// Reclaim the space of deleted snapshots until none is left (each
    /// batch its own commit), calling `progress(left)` between batches with
    /// the extents still to examine. Offline tools call this before they
    /// close; a mount reclaims in the background instead.
    pub fn snapshot_reclaim(&self, progress: &mut dyn FnMut(u64)) -> Result<()> {
        let _ = progress;
        Err(Error::Posix(Errno::ENOSYS))
    }
}
