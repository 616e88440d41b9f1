//! Fast fsync: commit one inode's changes ahead of the open delta, as an
//! fsync commit in the log — its record (inode image), its dirty data inline
//! in the log blocks, and the directory entry that names it if that is new —
//! with a single flush. The open delta keeps the same changes; its full
//! commit later supersedes the fsync commit (replay skips fsync commits that
//! a full commit follows).
//!
//! The fast path applies when the inode's pending changes are simple: a
//! regular file or symlink whose extent tree has no pending change, with at
//! most [`INLINE_PAGES`] dirty pages, not linked, unlinked or renamed in the
//! open delta, and, if it was created in the open delta, created in a
//! directory that is itself durable and untouched otherwise. Anything else
//! falls back to a full delta commit, which is always correct.
//!
//! An orphan (link count 0, kept by an open handle) qualifies once its
//! unlink is durable; its fsync commit carries an `Orphan` record next to
//! its image, so every commit that writes a link count of 0 for an open
//! inode also lists it as an orphan.

//! An fsync commit may also go ahead of a delta commit in flight, while that
//! commit writes its data (before it is sealed, `Volume::seal`), when the
//! delta in flight holds no change to the fsynced inodes (or the directory
//! of a new name) that an fsync commit has not made durable already — or
//! only data and attributes of theirs, whose frozen pages it then logs too
//! ([`Frozen::coverable`]): the fsync commit then depends on nothing the
//! commit in flight writes, and the commit's log follows it in the chain.
//! Replay keeps such an fsync commit live after that delta's commit (it
//! carries the next delta's number). Otherwise the fsync waits for the
//! commit in flight. The same holds ahead of a unify that does not start a
//! fresh log (`CommitJob::holds_log`).

use super::Volume;
use crate::api::types::*;
use crate::backend::commit::CommitJob;
use crate::error::Result;
use crate::log::Record;
use std::collections::HashSet;

/// Most dirty pages an inode may have for the fast path.
pub const INLINE_PAGES: usize = 16;
/// Bytes of file data per inline record (fits a 1 KiB log block).
pub const INLINE_CHUNK: usize = 896;

/// The delta commit in flight, as fsync commits may go ahead of it (while
/// it writes its data).
pub struct Frozen {
    /// Inodes it changes that no fsync commit has made durable already.
    pub uncovered: HashSet<Ino>,
    /// Those of them whose only changes there are file data and attributes
    /// (a regular file or symlink, no name or link change, no tree change
    /// but its data's mapping, its name durable): an fsync commit makes
    /// one durable by logging its frozen pages too.
    pub coverable: HashSet<Ino>,
}

/// What an fsync needs.
pub enum FsyncPlan {
    /// Nothing of these inodes is pending: they are durable already.
    Nothing,
    /// Their changes need a full delta commit.
    Full,
    /// The delta commit in flight holds changes of theirs: plan again once
    /// it is durable.
    Wait,
    /// An fsync commit, frozen; the caller writes it and calls `finish`.
    Job(Box<CommitJob>),
}

/// What an fsync commit changes in the volume once it is prepared.
#[derive(Default)]
struct Logged {
    records: Vec<Record>,
    /// Pages copied into the log: (inode, block).
    pages: Vec<(Ino, u64)>,
    /// New directory positions the commit makes durable.
    keys: Vec<(Ino, u64)>,
    /// The images it logs.
    images: Vec<(Ino, Vec<u8>)>,
    /// Directories whose image it logs (few: a group's new names).
    dirs: Vec<Ino>,
}

impl Volume {
    /// Plan an fsync of `inos` (a group: one commit serves them all).
    pub fn fsync_plan(&mut self, inos: &[Ino]) -> Result<FsyncPlan> {
        if self.be.read_only {
            return Ok(FsyncPlan::Nothing);
        }
        if self.failed {
            return Err(crate::error::Error::Posix(crate::error::Errno::EIO));
        }
        debug_assert!(
            !self.fsync_in_flight,
            "P1: a second fsync commit planned while one is in flight"
        );
        // Inodes whose changes in the commit in flight this one covers.
        let mut frozen_too = Vec::new();
        if self.in_flight {
            // Only ahead of a delta commit writing its data, and only when
            // that commit holds nothing of these inodes not yet durable — or
            // only their data and attributes, which this commit logs too.
            let Some(frozen) = &self.frozen else {
                return Ok(FsyncPlan::Wait);
            };
            let waits = |ino: &Ino| {
                (frozen.uncovered.contains(ino) && !frozen.coverable.contains(ino))
                    || self.be.orphans.contains(ino)
                    || self
                        .new_names
                        .get(ino)
                        .is_some_and(|(dir, _, _)| frozen.uncovered.contains(dir))
            };
            if inos.iter().any(waits) {
                return Ok(FsyncPlan::Wait);
            }
            frozen_too = inos
                .iter()
                .copied()
                .filter(|i| frozen.uncovered.contains(i))
                .collect();
        }
        let dirty: Vec<Ino> = inos
            .iter()
            .copied()
            .filter(|i| self.cache.dirty.contains(i) || frozen_too.contains(i))
            .collect();
        for &ino in &dirty {
            if !self.fsync_eligible(ino)? {
                return Ok(FsyncPlan::Full);
            }
        }
        let mut logged = Logged::default();
        for &ino in &dirty {
            self.fsync_records(ino, &mut logged)?;
        }
        if logged.records.is_empty() {
            return Ok(FsyncPlan::Nothing);
        }
        let job = self.be.prepare_fsync(&logged.records)?;
        // The records are in the log's tail now: their pages and entries
        // count as logged.
        for (ino, lblock) in logged.pages {
            if let Some(i) = self.cache.map.get_mut(&ino) {
                i.pages.mark_logged(lblock);
            }
        }
        for key in logged.keys {
            self.added_keys.remove(&key);
        }
        self.fsync_logged.extend(logged.images);
        // Everything of theirs is in this commit now, frozen changes too.
        if let Some(frozen) = &mut self.frozen {
            for ino in &frozen_too {
                frozen.uncovered.remove(ino);
                frozen.coverable.remove(ino);
            }
        }
        self.fsync_in_flight = true;
        self.in_flight_bytes += job.data_bytes();
        Ok(FsyncPlan::Job(Box::new(job)))
    }

    /// Whether `ino`'s pending changes fit an fsync commit.
    fn fsync_eligible(&mut self, ino: Ino) -> Result<bool> {
        // Unlinked (or linked) in the open delta: the entry change needs
        // the full commit; that covers an inode that became an orphan now.
        if self.ns_touched.contains(&ino) {
            return Ok(false);
        }
        if let Some((dir, key, _)) = self.new_names.get(&ino) {
            // A durable entry emptied in this delta under the same name hash
            // may be this very name: logging the new entry alone would leave
            // both after replay.
            if self.new_names.contains_key(dir)
                || self.ns_touched.contains(dir)
                || self.removed_durable.contains(&(*dir, *key >> 16))
            {
                return Ok(false);
            }
        }
        let i = self.inode(ino)?;
        Ok(matches!(i.kind(), FileType::Regular | FileType::Symlink)
            && !i.tree.has_dirty_leaves()
            && i.pages.not_logged().len() <= INLINE_PAGES)
    }

    /// The commit about to be frozen, as fsync commits may go ahead of it
    /// (called at freeze, before the delta is prepared).
    pub(super) fn frozen_state(&self) -> Frozen {
        let uncovered = self.uncovered();
        let data_only = |ino: &&Ino| {
            let Some(i) = self.cache.map.get(*ino) else {
                return false;
            };
            let name_durable = self
                .new_names
                .get(*ino)
                .is_none_or(|(dir, key, _)| !self.added_keys.contains(&(*dir, *key)));
            matches!(i.kind(), FileType::Regular | FileType::Symlink)
                && !self.ns_touched.contains(*ino)
                && !self.be.orphans.contains(*ino)
                && !i.tree.has_dirty_leaves()
                && name_durable
        };
        let coverable = uncovered.iter().filter(data_only).copied().collect();
        Frozen { uncovered, coverable }
    }

    /// The records that make `ino` durable (it is eligible).
    fn fsync_records(&mut self, ino: Ino, out: &mut Logged) -> Result<()> {
        let orphan = self.be.orphans.contains(&ino);
        let new_name = self.new_names.get(&ino).cloned();
        let bs = self.be.bs as u64;
        let i = self.inode(ino)?;
        // Its dirty pages, and those the commit in flight froze that no
        // fsync commit has logged (only while that commit writes its data).
        let pending = i.pages.not_logged();
        let size = i.attrs.size;
        let mut data = Vec::new();
        for &lblock in &pending {
            let Some(page) = i.pages.get(lblock) else { continue };
            let len = size.saturating_sub(lblock * bs).min(bs) as usize;
            for offset in (0..len).step_by(INLINE_CHUNK) {
                let end = (offset + INLINE_CHUNK).min(len);
                data.push(Record::DataInline {
                    ino,
                    lblock,
                    offset: offset as u16,
                    data: page.data[offset..end].to_vec(),
                });
            }
        }
        out.pages.extend(pending.iter().map(|&b| (ino, b)));
        let attrs = i.attrs.encode();
        out.images.push((ino, attrs.clone()));
        out.records.push(Record::InodeImage { ino, attrs });
        if orphan {
            out.records.push(Record::Orphan { ino });
        }
        out.records.extend(data);
        if let Some((dir, key, entry)) = new_name {
            // Once logged, the entry is durable: emptying its position later
            // in this delta must keep later fsyncs off that position.
            out.keys.push((dir, key));
            out.records.push(Record::DirentSet { dir, key, entry });
            if !out.dirs.contains(&dir) {
                out.dirs.push(dir);
                let attrs = self.inode(dir)?.attrs.encode();
                out.images.push((dir, attrs.clone()));
                out.records.push(Record::InodeImage { ino: dir, attrs });
            }
        }
        Ok(())
    }
}
