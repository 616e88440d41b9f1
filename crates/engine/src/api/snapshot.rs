//! API layer: snapshots of the whole volume — create, list, delete and
//! the background reclaim of a deleted one's space. A snapshot is taken by
//! a unify (one commit, no walk of any tree); the frontend and backend do
//! the work (`frontend/snapshot.rs`, `backend/snapshot.rs`). Reading a
//! snapshot is opening it (`OpenOptions::snapshot`).

use super::Fs;
use crate::error::{Errno, Error, Result};
use crate::types::{SnapOrigin, SnapshotInfo};

impl Fs {
    /// Take a snapshot named `name` of everything done before this call:
    /// the open delta is committed by a unify that records the snapshot.
    /// Errors: EEXIST (the name is taken), EINVAL (empty, longer than 255
    /// bytes, or holding '/' or NUL), EROFS (read-only), ENOSPC.
    pub fn snapshot_create(&self, name: &[u8]) -> Result<SnapshotInfo> {
        self.snapshot_take(name, None)
    }

    /// [`Fs::snapshot_create`] for a snapshot received from another volume
    /// (`tux3 receive`): it records `origin`, the identity the stream
    /// named, which [`SnapshotInfo::origin`] reports from then on. EEXIST
    /// also when a snapshot of that origin is here already.
    pub fn snapshot_create_received(&self, name: &[u8], origin: SnapOrigin) -> Result<SnapshotInfo> {
        self.snapshot_take(name, Some(origin))
    }

    /// The snapshot (not deleted) whose origin is `origin`, if any.
    pub fn snapshot_by_origin(&self, origin: SnapOrigin) -> Result<Option<SnapshotInfo>> {
        Ok(self.shared_vol().snapshot_by_origin(origin))
    }

    /// This volume's id (the superblock's), which names the snapshots
    /// taken here wherever they are sent.
    pub fn volume_id(&self) -> u64 {
        self.shared_vol().volume_id()
    }

    fn snapshot_take(&self, name: &[u8], origin: Option<SnapOrigin>) -> Result<SnapshotInfo> {
        self.vol().snapshot_request(name, origin)?;
        // The turn serializes commits: the unify that takes the snapshot
        // is this one, or one that froze after the request.
        self.shared.commit(true)?;
        self.shared_vol()
            .snapshot_info(name)
            .ok_or(Error::Posix(Errno::EIO))
    }

    /// Every snapshot, oldest first, with its space accounting (deleted
    /// ones whose space is still coming back included, marked `deleting`).
    pub fn snapshot_list(&self) -> Result<Vec<SnapshotInfo>> {
        Ok(self.shared_vol().snapshot_infos())
    }

    /// The first snapshot whose id is `id` or more (deleted ones whose
    /// space is still coming back included): a listing one at a time, each
    /// step costing what that snapshot's accounting does.
    pub fn snapshot_from(&self, id: u64) -> Result<Option<SnapshotInfo>> {
        Ok(self.shared_vol().snapshot_from(id))
    }

    /// Delete the snapshot `name`: the name goes at once (durable when this
    /// returns); its space comes back in bounded batches, one per delta
    /// commit, resumed after a crash or unmount. ENOENT if there is none.
    pub fn snapshot_delete(&self, name: &[u8]) -> Result<()> {
        self.vol().snapshot_delete(name)?;
        self.shared.sync()?;
        // The delta committer, if there is one, goes on with the reclaim.
        if let Some(wake) = &self.wake_committer {
            let _ = wake.try_send(());
        }
        Ok(())
    }

    /// Make the live volume what snapshot `name` holds; every snapshot
    /// stays, newer ones included. Meant for a volume no one else uses:
    /// EBUSY while any handle is held. Reads both images whole.
    pub fn snapshot_rollback(&self, name: &[u8]) -> Result<()> {
        // No commit of either kind runs meanwhile; the rollback commits
        // under the volume's exclusive hold, as close does.
        self.shared
            .with_commit_lock(|| self.vol().snapshot_rollback(name))
    }

    /// Reclaim the space of deleted snapshots until none is left (each
    /// batch its own commit), calling `progress(left)` between batches with
    /// the dead extents still to free. Offline tools call this before they
    /// close; a mount reclaims in the background instead.
    pub fn snapshot_reclaim(&self, progress: &mut dyn FnMut(u64)) -> Result<()> {
        loop {
            let left = {
                let v = self.shared_vol();
                if v.is_read_only() || !v.reclaiming() {
                    return Ok(());
                }
                v.snapshot_infos().iter().map(|s| s.reclaim_left).sum()
            };
            progress(left);
            self.shared.commit(false)?;
        }
    }
}
