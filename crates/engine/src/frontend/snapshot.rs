//! Frontend layer: the snapshot requests of the open delta — a snapshot
//! asked for (taken by the next unify), a snapshot deleted (its
//! `SnapDelete` rides in the open delta), and what the table reports.
//! The mechanism (births, the dead list, reclaim) is the backend's
//! (`backend/snapshot.rs`).

use super::Volume;
use crate::backend::snapshot::{check_name, Pending};
use crate::error::{err, Errno, Result};
use crate::log::Record;
use crate::types::{SnapOrigin, SnapshotInfo, Timespec};
use std::sync::atomic::Ordering::Relaxed;

impl Volume {
    /// Ask for a snapshot named `name`, taken by the next unify; with
    /// `received`, one received from another volume, recording the origin
    /// the stream named. EEXIST also when a snapshot of that origin is
    /// here already.
    pub fn snapshot_request(&mut self, name: &[u8], received: Option<SnapOrigin>) -> Result<()> {
        if self.be.read_only || self.failed {
            return err(Errno::EROFS);
        }
        check_name(name)?;
        let snaps = &self.be.snaps;
        if snaps.find(name).is_some() || snaps.pending.iter().any(|p| p.name == name) {
            return err(Errno::EEXIST);
        }
        // Its record and the table's nodes are written by the unify that
        // takes it: an ordinary change's space.
        self.begin_change(super::space::SNAPSHOT_BLOCKS)?;
        let received = received.map(|o| (o.volume, o.id));
        if let Some(o) = received {
            if self
                .snapshot_by_origin(SnapOrigin { volume: o.0, id: o.1 })
                .is_some()
            {
                return err(Errno::EEXIST);
            }
        }
        self.be.snaps.pending.push(Pending {
            name: name.to_vec(),
            created: Timespec::now().sec,
            received,
        });
        Ok(())
    }

    /// This volume's id (the superblock's).
    pub fn volume_id(&self) -> u64 {
        self.be.sb.volume_id
    }

    /// The snapshot (not deleted) whose origin is `origin`, if any.
    pub fn snapshot_by_origin(&self, origin: SnapOrigin) -> Option<SnapshotInfo> {
        let volume = self.be.sb.volume_id;
        self.be
            .snaps
            .records
            .values()
            .find(|r| !r.deleting && r.origin(volume) == (origin.volume, origin.id))
            .map(|r| self.info(r))
    }

    /// Delete the snapshot named `name` in the open delta: its name goes,
    /// and the allocator stops keeping what only it holds.
    pub fn snapshot_delete(&mut self, name: &[u8]) -> Result<()> {
        if self.be.read_only || self.failed {
            return err(Errno::EROFS);
        }
        let Some(id) = self.be.snaps.find(name).map(|r| r.id) else {
            return err(Errno::ENOENT);
        };
        let dev = self.be.dev.clone();
        self.be.snaps.mark_deleting(dev.as_ref(), id)?;
        self.be.records.push(Record::SnapDelete { id });
        self.be.alloc.held_upto = self.be.snaps.held_upto();
        self.changed.store(true, Relaxed);
        Ok(())
    }

    /// The snapshot table, oldest first.
    pub fn snapshot_infos(&self) -> Vec<SnapshotInfo> {
        self.be.snaps.records.values().map(|r| self.info(r)).collect()
    }

    /// The first snapshot whose id is `id` or more, if any.
    pub fn snapshot_from(&self, id: u64) -> Option<SnapshotInfo> {
        self.be
            .snaps
            .records
            .range(id..)
            .next()
            .map(|(_, r)| self.info(r))
    }

    /// The snapshot named `name` (not deleted), if any.
    pub fn snapshot_info(&self, name: &[u8]) -> Option<SnapshotInfo> {
        self.be.snaps.find(name).map(|r| self.info(r))
    }

    fn info(&self, r: &crate::backend::snapshot::SnapRecord) -> SnapshotInfo {
        let bs = self.be.bs as u64;
        let snaps = &self.be.snaps;
        SnapshotInfo {
            id: r.id,
            name: r.name.clone(),
            created: r.created,
            deleting: r.deleting,
            reclaim_left: if r.deleting { snaps.reclaim_left(r.id) } else { 0 },
            unique_bytes: snaps.unique_blocks(r.id) * bs,
            referenced_bytes: r.referenced * bs,
            origin: {
                let (volume, id) = r.origin(self.be.sb.volume_id);
                SnapOrigin { volume, id }
            },
        }
    }

    /// Make the live volume what snapshot `name` holds, keeping every
    /// snapshot (newer ones too). Two unifies, under the caller's exclusive
    /// hold of the volume and the commit turn: the first puts everything
    /// on disk; then, in memory, every block the live image holds and the
    /// snapshot does not is freed (onto the dead list where another
    /// snapshot holds it), every block the snapshot holds and the live
    /// image does not leaves the dead list, and the inode table becomes the
    /// snapshot's; the second unify writes it all, so a crash leaves one
    /// image or the other. Reads both images whole, unless the live image
    /// is the snapshot's (nothing changed since it was taken): then only
    /// the first unify. EBUSY while a handle is held (an open file, or the
    /// kernel's lookups through a mount).
    pub fn snapshot_rollback(&mut self, name: &[u8]) -> Result<()> {
        use crate::backend::snapshot::{image_blocks, merged, subtract};
        if self.be.read_only || self.failed {
            return err(Errno::EROFS);
        }
        let Some(target) = self.be.snaps.find(name).map(|r| r.itable) else {
            return err(Errno::ENOENT);
        };
        if !self.handles.is_empty() {
            return err(Errno::EBUSY);
        }
        self.commit(true)?;
        // Unchanged since the snapshot was taken (its unify's inode table
        // is the live one: any change would have written a new root):
        // nothing to do, and nothing read.
        if self.be.sb.itable == target {
            return Ok(());
        }
        let dev = self.be.dev.clone();
        let (live, _) = image_blocks(dev.as_ref(), self.be.sb.itable)?;
        let (snap, orphans) = image_blocks(dev.as_ref(), target)?;
        let revived = subtract(&snap, &merged(&live));
        // What the snapshot holds apart from the live image must still be
        // in use (on the dead list): checked before anything changes.
        for &(s, c, _) in &revived {
            if let Some(b) = (s..s + c).find(|&b| !self.be.alloc.is_used(b)) {
                return Err(crate::error::Error::corrupt(
                    b,
                    format!(
                        "snapshot {:?} references block {b}, which is free: not rolled back",
                        String::from_utf8_lossy(name)
                    ),
                ));
            }
        }
        // From here on the live image is being replaced: a failure (a
        // device read or write) leaves neither image whole in cache, so it
        // turns the volume read-only; the device still holds the last
        // durable state (the commit above).
        let r = self.rollback_swap(target, &live, &snap, orphans);
        if let Err(e) = &r {
            self.fail("rolling back to a snapshot", e);
        }
        r
    }

    /// The second half of [`Volume::snapshot_rollback`]: the snapshot's
    /// image becomes the live one, committed by a unify.
    fn rollback_swap(
        &mut self,
        target: crate::structures::superblock::Root,
        live: &[(u64, u64, u32)],
        snap: &[(u64, u64, u32)],
        orphans: Vec<u64>,
    ) -> Result<()> {
        use crate::backend::snapshot::{merged, subtract};
        let dev = self.be.dev.clone();
        let revived = subtract(snap, &merged(live));
        for (s, c, birth) in subtract(live, &merged(snap)) {
            self.be.alloc.free_born(s, c, birth);
        }
        for (s, c, _) in revived {
            self.be.snaps.revive(dev.as_ref(), s, c)?;
        }
        // The snapshot's references, counted: its shared-extent table.
        self.be.alloc.shared.rebuild(snap.iter().map(|&(s, c, _)| (s, c)));
        *self.be.itable.get_mut() =
            crate::structures::btree::Tree::open(0, crate::structures::btree::TreeKind::Itable, target);
        self.be.sb.itable = target;
        // Nothing cached of the old image stays: inodes, clean pages, the
        // numbers handed out, the orphans (an orphan of the snapshot's
        // moment is freed like any at the next open or close).
        self.cache = Default::default();
        *self.clean.get_mut() = super::clean_books(&self.opts);
        self.ino_cursor.clear();
        // Numbers given out in this session stay used (see `freed_inos`).
        self.note_itable_end()?;
        self.be.orphans = orphans.into_iter().collect();
        self.changed.store(true, Relaxed);
        self.commit(true)
    }

    /// Whether deleted snapshots still have space to give back.
    pub fn reclaiming(&self) -> bool {
        self.be.snaps.reclaiming()
    }
}
