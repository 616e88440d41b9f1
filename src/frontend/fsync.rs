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

use super::Volume;
use crate::api::types::*;
use crate::backend::commit::CommitJob;
use crate::error::Result;
use crate::log::Record;

/// Most dirty pages an inode may have for the fast path.
pub const INLINE_PAGES: usize = 16;
/// Bytes of file data per inline record (fits a 1 KiB log block).
pub const INLINE_CHUNK: usize = 896;

/// What an fsync needs.
pub enum FsyncPlan {
    /// Nothing of these inodes is pending: they are durable already.
    Nothing,
    /// Their changes need a full delta commit.
    Full,
    /// An fsync commit, frozen; the caller writes it and calls `finish`.
    Job(Box<CommitJob>),
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
            !self.in_flight,
            "P1: an fsync commit planned while a commit is in flight"
        );
        let mut records = Vec::new();
        let mut dirs_logged = Vec::new();
        for &ino in inos {
            if !self.cache.dirty.contains(&ino) {
                continue;
            }
            if !self.fsync_records(ino, &mut records, &mut dirs_logged)? {
                return Ok(FsyncPlan::Full);
            }
        }
        if records.is_empty() {
            // Only full-commit state may be pending (e.g. a freed inode).
            return Ok(if inos.iter().any(|i| self.cache.dirty.contains(i)) {
                FsyncPlan::Full
            } else {
                FsyncPlan::Nothing
            });
        }
        let job = self.be.prepare_fsync(&records)?;
        self.in_flight = true;
        self.in_flight_bytes = job.data_bytes();
        Ok(FsyncPlan::Job(Box::new(job)))
    }

    /// Append the records that make `ino` durable; false: not eligible.
    fn fsync_records(&mut self, ino: Ino, records: &mut Vec<Record>, dirs: &mut Vec<Ino>) -> Result<bool> {
        // Unlinked (or linked) in the open delta: the entry change needs
        // the full commit; that covers an inode that became an orphan now.
        if self.ns_touched.contains(&ino) {
            return Ok(false);
        }
        let orphan = self.be.orphans.contains(&ino);
        let new_name = self.new_names.get(&ino).cloned();
        if let Some((dir, key, _)) = &new_name {
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
        let bs = self.be.bs as u64;
        let i = self.inode(ino)?;
        if !matches!(i.kind(), FileType::Regular | FileType::Symlink) || i.tree.has_dirty_leaves() {
            return Ok(false);
        }
        let pending = i.pages.unlogged();
        if pending.len() > INLINE_PAGES {
            return Ok(false);
        }
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
        for &lblock in &pending {
            i.pages.mark_logged(lblock);
        }
        records.push(Record::InodeImage {
            ino,
            attrs: i.attrs.encode(),
        });
        if orphan {
            records.push(Record::Orphan { ino });
        }
        records.extend(data);
        if let Some((dir, key, entry)) = new_name {
            // Once logged, the entry is durable: emptying its position later
            // in this delta must keep later fsyncs off that position.
            self.added_keys.remove(&(dir, key));
            records.push(Record::DirentSet { dir, key, entry });
            if !dirs.contains(&dir) {
                dirs.push(dir);
                let d = self.inode(dir)?;
                records.push(Record::InodeImage {
                    ino: dir,
                    attrs: d.attrs.encode(),
                });
            }
        }
        Ok(true)
    }
}
