//! Frontend layer: handles and orphans. A handle is a reference someone
//! outside the engine holds on an inode: an open file or directory, or
//! (through the FUSE mount) each lookup the kernel has not yet forgotten.
//! An inode whose last name is removed while a handle is held stays alive
//! until the last handle is released, so reads and writes through open file
//! descriptors keep working, as POSIX requires. A directory too (its name
//! gone by rmdir or a rename over it): it is empty, nothing can be made in
//! it, and its attributes and extended attributes still answer. Such an orphan is on the backend's orphan list
//! (`be.orphans`), which the log makes durable (`Orphan` records, re-logged
//! by each unify): after a crash the next writable open frees what the list
//! holds ([`Volume::free_replayed_orphans`]); a clean close frees them too.
//! SEEK_DATA / SEEK_HOLE also live here, and where a file's written blocks
//! lie on the device ([`Volume::data_runs`]).
//!
//! Calls the backend's orphan list, the cache and structures (extent trees).

use super::{MayLoad, Staged, Volume};
use crate::cache::Inode;
use crate::device::Device;
use crate::error::{err, Errno, Error, Result};
use crate::structures::extent;
use crate::types::*;
use parking_lot::{Mutex, MutexGuard};
use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;

/// Shards of the open-handle counts: opens and releases of different
/// files seldom meet on one lock.
const HANDLE_SHARDS: usize = 16;

/// Open handles per inode, in shards by inode number.
#[derive(Default)]
pub(super) struct Handles([Mutex<HashMap<Ino, u64>>; HANDLE_SHARDS]);

impl Handles {
    /// The shard holding `ino`'s count, locked.
    pub(super) fn of(&self, ino: Ino) -> MutexGuard<'_, HashMap<Ino, u64>> {
        self.0[ino as usize % HANDLE_SHARDS].lock()
    }

    /// The shard holding `ino`'s count, through exclusive access.
    fn of_mut(&mut self, ino: Ino) -> &mut HashMap<Ino, u64> {
        self.0[ino as usize % HANDLE_SHARDS].get_mut()
    }

    fn clear(&mut self) {
        for s in &mut self.0 {
            s.get_mut().clear();
        }
    }

    /// No handle is held.
    pub(super) fn is_empty(&mut self) -> bool {
        self.0.iter_mut().all(|s| s.get_mut().is_empty())
    }
}

impl Volume {
    pub fn open_handle(&mut self, ino: Ino) -> Result<()> {
        self.inode(ino)?;
        *self.handles.of_mut(ino).entry(ino).or_insert(0) += 1;
        Ok(())
    }

    /// Drop `count` of `ino`'s references; frees an orphan after its last.
    pub fn release_handles(&mut self, ino: Ino, count: u64) -> Result<()> {
        let left = match self.handles.of_mut(ino).get_mut(&ino) {
            Some(n) => {
                *n = n.saturating_sub(count);
                *n
            }
            None => return Ok(()),
        };
        if left == 0 {
            self.handles.of_mut(ino).remove(&ino);
            if self.be.orphans.contains(&ino) && !self.be.read_only {
                self.free_inode(ino)?;
                self.changed.store(true, Relaxed);
            }
        }
        Ok(())
    }

    /// Every handle ends (the volume closes): free every orphan.
    pub(super) fn release_all(&mut self) -> Result<()> {
        self.handles.clear();
        let orphans: Vec<Ino> = self.be.orphans.iter().copied().collect();
        for ino in orphans {
            self.free_inode(ino)?;
            self.changed.store(true, Relaxed);
        }
        Ok(())
    }

    /// Free the orphans replay found: nobody can hold them open after a
    /// mount. They join the first delta (one `Drop` each); until it commits
    /// they stay on the durable list. An entry that is not an inode with
    /// link count 0, or is a directory with entries (only damage makes
    /// either), is not freed but leaves the list; fsck reports it.
    pub(super) fn free_replayed_orphans(&mut self) -> Result<()> {
        let listed: Vec<Ino> = self.be.orphans.iter().copied().collect();
        for ino in listed {
            let orphan = match self.inode(ino) {
                Ok(i) if i.attrs.nlink != 0 => false,
                Ok(i) if i.is_dir() => self.is_empty_dir(ino)?,
                Ok(_) => true,
                Err(Error::Posix(Errno::ENOENT)) => false,
                Err(e) => return Err(e),
            };
            self.be.orphans.remove(&ino);
            if orphan {
                self.free_inode(ino)?;
                self.changed.store(true, Relaxed);
            }
        }
        Ok(())
    }

    /// Whether `ino` must outlive its last name.
    pub(super) fn is_open(&self, ino: Ino) -> bool {
        self.handles.of(ino).get(&ino).is_some_and(|n| *n > 0)
    }

    pub fn seek_data(&mut self, ino: Ino, offset: u64, data: bool) -> Result<u64> {
        let bs = self.bs();
        let dev = self.be.dev.clone();
        seek_in(self.inode(ino)?, dev.as_ref(), bs, offset, data)
    }

    /// [`Volume::seek_data`] under the shared guard, holding the file's
    /// lock; `Err`: a node of its extent map to read first, with no lock
    /// held, before the API asks again with `staged`.
    pub fn seek_data_shared(&self, ino: Ino, offset: u64, data: bool, staged: &Staged) -> MayLoad<u64> {
        let mut i = or_fail!(self.inode_shared(ino));
        Some(self.staged(None, staged, |dev| seek_in(&mut i, dev, self.bs(), offset, data)))
    }
}

impl Volume {
    /// The written extents of regular file `ino` over its blocks
    /// `first..first + count`, cut to that range and joined where they go
    /// on on the device: where its data lies as last written back (a block
    /// with a dirty page may hold other bytes by now).
    pub fn data_runs(&mut self, ino: Ino, first: u64, count: u64) -> Result<Vec<DataRun>> {
        let dev = self.be.dev.clone();
        runs_in(self.inode(ino)?, dev.as_ref(), first, count)
    }

    /// [`Volume::data_runs`] under the shared guard (see
    /// [`Volume::seek_data_shared`]).
    pub fn data_runs_shared(
        &self,
        ino: Ino,
        first: u64,
        count: u64,
        staged: &Staged,
    ) -> MayLoad<Vec<DataRun>> {
        let mut i = or_fail!(self.inode_shared(ino));
        Some(self.staged(None, staged, |dev| runs_in(&mut i, dev, first, count)))
    }
}

/// [`Volume::data_runs`] of `i`, held.
fn runs_in(i: &mut Inode, dev: &dyn Device, first: u64, count: u64) -> Result<Vec<DataRun>> {
    if i.kind() != FileType::Regular {
        return err(Errno::EINVAL);
    }
    let end = first.saturating_add(count);
    let mut out: Vec<DataRun> = Vec::new();
    let mut lblock = first;
    while lblock < end {
        let Some(e) = extent::lookup(&mut i.tree, dev, lblock)? else {
            match extent::next(&mut i.tree, dev, lblock)? {
                Some(e) if e.lblock > lblock => {
                    lblock = e.lblock;
                    continue;
                }
                _ => break,
            }
        };
        let stop = e.end().min(end);
        if !e.unwritten {
            let run = DataRun {
                lblock,
                pblock: e.physical(lblock),
                count: stop - lblock,
            };
            match out.last_mut() {
                Some(l) if l.lblock + l.count == run.lblock && l.pblock + l.count == run.pblock => {
                    l.count += run.count;
                }
                _ => out.push(run),
            }
        }
        lblock = stop.max(lblock + 1);
    }
    Ok(out)
}

/// The first offset at or after `offset` of file `i` (held) that holds data
/// (`data`) or lies in a hole; ENXIO past the end of file.
fn seek_in(i: &mut Inode, dev: &dyn Device, bs: u64, offset: u64, data: bool) -> Result<u64> {
    if i.kind() != FileType::Regular {
        return err(Errno::EINVAL);
    }
    let size = i.attrs.size;
    if offset >= size {
        return err(Errno::ENXIO);
    }
    let mut lblock = offset / bs;
    let last = (size - 1) / bs;
    while lblock <= last {
        // Preallocated (unwritten) blocks are a hole until written, as on
        // ext4 and XFS.
        let has = i.pages.get(lblock).is_some()
            || extent::lookup(&mut i.tree, dev, lblock)?.is_some_and(|e| !e.unwritten);
        if has == data {
            return Ok((lblock * bs).max(offset));
        }
        // Skip ahead: to the next extent start (looking for data) or
        // past this extent (looking for a hole).
        let next = if data {
            let e = extent::next(&mut i.tree, dev, lblock + 1)?;
            let p = i.pages.next_after(lblock);
            match (e.map(|e| e.lblock), p) {
                (Some(a), Some(b)) => a.min(b),
                (Some(a), None) => a,
                (None, Some(b)) => b,
                (None, None) => last + 1,
            }
        } else {
            lblock + 1
        };
        lblock = next.max(lblock + 1);
    }
    if data {
        err(Errno::ENXIO)
    } else {
        Ok(size)
    }
}
