//! Frontend layer: the operations that run under the shared delta guard,
//! many at once. The API holds the volume shared (Tux3's change_begin /
//! change_end: a freeze takes it exclusively, so it waits only for the
//! operations still inside the delta) and calls these with `&Volume`.
//! Creates, unlinks and renames of files run so too
//! (`namespace/shared.rs`).
//!
//! Each operation locks only what it touches:
//! - the inode it works on (its own mutex, `cache/inode.rs`): a file's data
//!   and attributes, a directory's entries. The namespace operations hold a
//!   directory (two, in inode-number order, for a rename between them)
//!   and then the inodes its entries name, taken without waiting;
//! - after that, at most one short leaf lock at a time: the delta's dirty
//!   set, its data-changed set, the clean-page books, the open handles, the
//!   namespace books, a shard of the inode map. Counters (dirty bytes,
//!   reservations, "changed", the highest inode number) are atomics.
//!
//! Everything else in the volume (the allocator, the inode table, the log,
//! the orphan list) is read-only here; only exclusive access changes it
//! (what a shared unlink owes them waits in the books, `Volume::settle`).
//! An inode not in cache is loaded here too (`load.rs`). An operation that
//! needs more — a commit to make room, an orphan to free, a size change, a
//! directory moved or removed — returns `None` having changed nothing, and
//! the API runs it again exclusively.
//!
//! Tree nodes not loaded yet (the inode table's, a directory's, a file's
//! extent map) are read with no lock held (`load.rs`: the operation hands
//! the node back and is asked again); a file's data is read after its
//! lock and the delta guard
//! are let go ([`PlannedRead`]), so reads of one file run in parallel and a
//! freeze never waits for a read in the device. A block such a read maps is
//! not handed out again until the read is done: it enters the current read
//! epoch before it lets go of its file, and a commit's frees wait for the
//! epochs before them to drain (`backend/readers.rs`).
//!
//! Calls the rest of the frontend (`Volume`'s read-only state, the file and
//! namespace helpers) and the cache.

use super::file::{
    check_file, new_pages, plan_read, read_blocks, read_from, set_attrs, write_end, DeviceRead,
};
use super::load::{MayLoad, Staged, Warm};
use super::namespace::{probe_in, readdir_of};
use super::read_many::read_blocks_many;
use super::Volume;
use crate::backend::readers::ReadTicket;
use crate::cache::Inode;
use crate::device::Device;
use crate::error::{err, Errno, Result};
use crate::structures::dirent::Lookup;
use crate::types::*;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// Take away `strip`'s privileges from non-directory `i` (see
/// [`StripPrivs`]); whether anything changed.
pub(super) fn strip_locked(i: &mut Inode, strip: StripPrivs) -> bool {
    if strip == StripPrivs::Nothing || i.kind() == FileType::Directory {
        return false;
    }
    let mut changed = i.attrs.xattrs.remove(XATTR_CAPS).is_some();
    if strip == StripPrivs::CapsAndIds {
        let mode = i.attrs.mode;
        let mut kill = libc::S_ISUID;
        if mode & libc::S_IXGRP != 0 {
            kill |= libc::S_ISGID;
        }
        i.attrs.mode = mode & !kill;
        changed |= i.attrs.mode != mode;
    }
    changed
}

/// What a shared write did.
pub struct Written {
    pub bytes: usize,
    /// Half the limit is dirty and no commit is in flight: the delta
    /// committer should take the delta now.
    pub wants_commit: bool,
}

impl Volume {
    /// `i` changed in the open delta (the caller holds its lock). Only its
    /// first change in the delta takes the dirty set's lock.
    pub(super) fn touch_locked(&self, i: &mut Inode) {
        if i.delta != self.be.delta {
            i.delta = self.be.delta;
            self.touched(i.ino);
        } else if !self.changed.load(Relaxed) {
            self.changed.store(true, Relaxed);
        }
    }

    /// With `hold`, a handle is taken on `ino` while it is locked, as by
    /// [`Volume::lookup_shared`].
    pub fn getattr_shared(&self, ino: Ino, hold: bool) -> Option<Result<Attr>> {
        let i = or_fail!(self.inode_shared(ino));
        if hold {
            // No handle reaches an xattr file (a forged one gives ESTALE).
            or_fail!(super::xattr::not_xattr_file(&i.attrs));
            self.hold_locked(ino);
        }
        Some(Ok(i.attr(self.be.bs as u32)))
    }

    /// A handle on inode `ino`: the handle of a kernel lookup
    /// ([`Volume::open_handle_shared`]). Directories are held as files
    /// are: one whose name goes while the kernel holds it (open, or
    /// cached) stays as an orphan, so `fstat`, `fchmod` and the like keep
    /// working on it. The caller holds the inode locked, or no name
    /// reaches it yet.
    pub(super) fn hold_locked(&self, ino: Ino) {
        *self.handles.of(ino).entry(ino).or_insert(0) += 1;
    }

    /// The attributes of the inode `name` names in `parent`; or (`Err`)
    /// the node its directory's tree or the inode's load needs first, for
    /// the API to read without the guard (`ColdNode`) before it asks
    /// again with the blocks read so far (`staged`).
    /// The entry is read with the directory locked, the inode loaded with
    /// it let go; an inode freed in between (a rename replaced the name,
    /// or an unlink removed it) sends the lookup round again: a name a
    /// rename replaces never goes missing.
    /// With `hold`, a handle is taken on what is found while it is locked,
    /// as [`Volume::open_handle_shared`] takes one: a rename, unlink or
    /// rmdir cannot free it between the lookup and the handle.
    pub fn lookup_shared(&self, parent: Ino, name: &[u8], hold: bool, staged: &Staged) -> MayLoad<Attr> {
        for _ in 0..3 {
            let found = {
                let mut d = or_fail!(self.inode_shared(parent));
                match or_fail!(self.staged(d.dir_ino(), staged, |dev| probe_in(&mut d, dev, name))) {
                    Ok(found) => found,
                    Err(cold) => return Some(Ok(Err(cold))),
                }
            };
            let Lookup::Found { ino, .. } = found else {
                return Some(err(Errno::ENOENT));
            };
            match self.inode_or_cold(ino) {
                Ok(Warm::Ready(i)) => {
                    if hold {
                        self.hold_locked(ino);
                    }
                    return Some(Ok(Ok(i.attr(self.be.bs as u32))));
                }
                Ok(Warm::Cold(cold)) => return Some(Ok(Err(cold))),
                Err(e) if e.errno() == Errno::ENOENT => {}
                Err(e) => return Some(Err(e)),
            }
        }
        // Still naming an inode the table lacks: the exclusive lookup
        // reports the damage.
        None
    }

    /// [`Volume::readlink`] under the shared guard; a target length out of
    /// bounds (damage) is reported by the exclusive path. `Err`: a block
    /// of the target (or of its extent map) to read first, as for
    /// [`Volume::lookup_shared`].
    pub fn readlink_shared(&self, ino: Ino, staged: &Staged) -> MayLoad<Vec<u8>> {
        let mut i = or_fail!(self.inode_shared(ino));
        if i.kind() != FileType::Symlink {
            return Some(err(Errno::EINVAL));
        }
        if i.attrs.size == 0 || i.attrs.size > SYMLINK_MAX as u64 {
            return None;
        }
        let size = i.attrs.size as usize;
        let bs = self.bs();
        let sums = self.be.alloc.sums.handle();
        Some(self.staged(None, staged, |dev| read_from(&mut i, dev, &sums, bs, 0, size)))
    }

    /// Up to `max` entries of directory `ino` from `pos`; or (`Err`) the
    /// node of its tree to read first (as for [`Volume::lookup_shared`]).
    pub fn readdir_shared(&self, ino: Ino, pos: u64, max: usize, staged: &Staged) -> MayLoad<Vec<DirEntry>> {
        let mut d = or_fail!(self.inode_shared(ino));
        Some(self.staged(d.dir_ino(), staged, |dev| readdir_of(&mut d, dev, pos, max)))
    }

    /// A read of at most `size` bytes at `offset` of `ino`, planned (see
    /// [`PlannedRead`]).
    pub fn plan_read_shared(
        &self,
        ino: Ino,
        offset: u64,
        size: usize,
        staged: &Staged,
    ) -> MayLoad<PlannedRead<Vec<u8>>> {
        self.plan_unlocked(ino, offset, staged, None, |i| {
            vec![0u8; i.attrs.size.saturating_sub(offset).min(size as u64) as usize]
        })
    }

    /// A read into `out` at `offset` of `ino`, planned; with `access`, it
    /// moves the file's access time as that rule says at that time, under
    /// the lock it takes anyway ([`Volume::access_locked`]).
    pub fn plan_read_into_shared<'o>(
        &self,
        ino: Ino,
        offset: u64,
        out: &'o mut [u8],
        staged: &Staged,
        access: Option<(AtimeRule, Timespec)>,
    ) -> MayLoad<PlannedRead<&'o mut [u8]>> {
        self.plan_unlocked(ino, offset, staged, access, |_| out)
    }

    /// Plan a read at `offset` of `ino` into the buffer `buf` makes: the
    /// file is locked only while dirty pages are copied and extents mapped.
    /// A read that needs the device enters the current read epoch before
    /// the file is let go, so a free of a block it mapped comes after that
    /// and waits for it (`backend/readers.rs`). A node of its extent tree
    /// not in memory nor `staged` stops it (`Err`, as for
    /// [`Volume::lookup_shared`]). With `access`, the read moves the
    /// file's access time as that rule says at that time, under the same
    /// lock ([`Volume::access_locked`]), once it is planned.
    pub(super) fn plan_unlocked<B: AsMut<[u8]>>(
        &self,
        ino: Ino,
        offset: u64,
        staged: &Staged,
        access: Option<(AtimeRule, Timespec)>,
        buf: impl FnOnce(&Inode) -> B,
    ) -> MayLoad<PlannedRead<B>> {
        let bs = self.bs();
        let mut i = or_fail!(self.inode_shared(ino));
        or_fail!(check_file(&i));
        let mut out = buf(&i);
        let sums = self.be.alloc.sums.handle();
        let planned = match or_fail!(self.staged(None, staged, |dev| Ok(plan_read(
            &mut i,
            dev,
            &sums,
            bs,
            offset,
            out.as_mut()
        )))) {
            Ok(planned) => planned,
            Err(cold) => return Some(Ok(Err(cold))),
        };
        let entered = match &planned {
            Ok((_, reads)) if !reads.is_empty() => Some(self.be.readers.enter()),
            _ => None,
        };
        if let (Ok(_), Some((rule, now))) = (&planned, access) {
            // An access time that cannot move now (no room) stays.
            let _ = self.access_locked(&mut i, rule, now);
        }
        drop(i);
        Some(planned.map(|(n, reads)| {
            Ok(PlannedRead {
                out,
                n,
                reads,
                dev: self.be.dev.clone(),
                bs,
                _entered: entered,
            })
        }))
    }

    pub fn getxattr_shared(&self, ino: Ino, name: &[u8]) -> Option<Result<Vec<u8>>> {
        or_fail!(super::xattr::check_xattr_name(name));
        let i = or_fail!(self.inode_shared(ino));
        // `None` (run exclusively): its xattr file is not read yet.
        Some(match super::xattr::value_of(&i, name)? {
            Some(v) => Ok(v),
            None => err(Errno::ENODATA),
        })
    }

    pub fn listxattr_shared(&self, ino: Ino) -> Option<Result<Vec<Vec<u8>>>> {
        let i = or_fail!(self.inode_shared(ino));
        if i.attrs.xattr_file != 0 && i.spilled.is_none() {
            return None; // its xattr file is read exclusively
        }
        Some(Ok(super::xattr::names_of(&i)))
    }

    /// Take a handle. Handles are taken and released under the inode's
    /// lock, so a shared unlink holding it sees them settled.
    pub fn open_handle_shared(&self, ino: Ino) -> Option<Result<()>> {
        let _i = or_fail!(self.inode_shared(ino));
        *self.handles.of(ino).entry(ino).or_insert(0) += 1;
        Some(Ok(()))
    }

    /// Release `count` handles; `None` when they are the last ones of an
    /// orphan, which must then be freed.
    pub fn release_handles_shared(&self, ino: Ino, count: u64) -> Option<Result<()>> {
        let _i = self.cache.lock(ino)?; // (a handle keeps it cached)
                                        // (Only an operation holding the inode makes it an orphan.)
        let orphan = self.be.orphans.contains(&ino) || self.orphan_unsettled(ino);
        let mut handles = self.handles.of(ino);
        match handles.get_mut(&ino) {
            None => {}
            Some(n) if *n > count => *n -= count,
            Some(_) if orphan && !self.be.read_only => return None,
            Some(_) => {
                handles.remove(&ino);
            }
        }
        Some(Ok(()))
    }

    /// Whether an fsync of `ino` needs no commit (see `Fs::fsync`): its
    /// error for an unknown inode, `true` on a read-only volume or for an
    /// fdatasync with nothing to make durable.
    pub fn fsync_needless_shared(&self, ino: Ino, datasync: bool, strict: bool) -> Option<Result<bool>> {
        if !self.cache.contains(ino) {
            return None;
        }
        Some(Ok(
            self.be.read_only || datasync && !strict && self.datasync_needless(ino)
        ))
    }

    /// Write `data` at `offset` of `ino` and take away `strip`'s
    /// privileges in the same change. `None` when the write must wait for
    /// a commit (dirty pressure) or the space is not there now.
    pub fn write_shared(
        &self,
        ino: Ino,
        offset: u64,
        data: &[u8],
        strip: StripPrivs,
    ) -> Option<Result<Written>> {
        let bs = self.bs();
        let mut i = or_fail!(self.inode_shared(ino));
        or_fail!(check_file(&i));
        or_fail!(super::flags::may_write(&i.attrs, offset));
        if data.is_empty() {
            return Some(Ok(Written {
                bytes: 0,
                wants_commit: false,
            }));
        }
        if self.over_dirty_limit(Some(&i.pages), offset, data.len()) {
            return None;
        }
        let end = or_fail!(write_end(bs, offset, data.len()));
        or_fail!(self.reserve_shared(new_pages(&i, bs, offset, end) + 2)?);
        or_fail!(self.copy_into(&mut i, offset, end, data));
        if strip_locked(&mut i, strip) {
            i.attrs.ctime = Timespec::now();
            self.touch_locked(&mut i);
        }
        let stream = self.is_stream(Some(&i.pages));
        drop(i);
        Some(Ok(Written {
            bytes: data.len(),
            wants_commit: self.wants_commit_of(stream),
        }))
    }

    /// A setattr that changes no size, and `strip`'s privileges after it;
    /// `None` for a size change (truncate, extend).
    pub fn setattr_shared(&self, ino: Ino, set: &SetAttr, strip: StripPrivs) -> Option<Result<Attr>> {
        if set.size.is_some() {
            return None;
        }
        let mut i = or_fail!(self.inode_shared(ino));
        or_fail!(super::flags::may_change(&i.attrs));
        or_fail!(self.reserve_shared(3)?);
        set_attrs(&mut i, set, Timespec::now());
        if strip_locked(&mut i, strip) {
            i.attrs.ctime = Timespec::now();
        }
        self.touch_locked(&mut i);
        Some(Ok(i.attr(self.be.bs as u32)))
    }
}

/// A file read whose dirty pages are copied and extents mapped, with the
/// device reads still to do ([`PlannedRead::read`]), which need neither the
/// file nor the delta guard: the read holds its epoch, so no block it
/// mapped is handed out again before it is dropped.
pub struct PlannedRead<B> {
    out: B,
    n: usize,
    reads: Vec<DeviceRead>,
    dev: Arc<dyn Device>,
    bs: u64,
    _entered: Option<ReadTicket>,
}

impl<B: AsMut<[u8]>> PlannedRead<B> {
    /// Make the device reads: the number of bytes read (short only at end
    /// of file) and the buffer.
    pub fn read(self) -> Result<(usize, B)> {
        self.read_in_epoch().map(|(n, out, _)| (n, out))
    }

    /// [`PlannedRead::read`], also handing back the read epoch it entered
    /// (if it maps any block), so that its blocks stay as read while the
    /// caller holds it.
    pub(super) fn read_in_epoch(mut self) -> Result<(usize, B, Option<ReadTicket>)> {
        read_blocks(self.dev.as_ref(), self.bs, self.out.as_mut(), &self.reads)?;
        Ok((self.n, self.out, self._entered))
    }

    /// [`PlannedRead::read`] of each of `plans`, their device reads made
    /// together (`file::read_blocks_many`: reads that follow one another
    /// on the device are one). One result per plan, in order.
    pub fn read_all(plans: Vec<PlannedRead<B>>) -> Vec<Result<(usize, B)>> {
        let Some(first) = plans.first() else {
            return Vec::new();
        };
        let (dev, bs) = (first.dev.clone(), first.bs);
        let mut plans = plans;
        let results = {
            let mut jobs: Vec<(&mut [u8], &[DeviceRead])> = plans
                .iter_mut()
                .map(|p| (p.out.as_mut(), p.reads.as_slice()))
                .collect();
            read_blocks_many(dev.as_ref(), bs, &mut jobs)
        };
        plans
            .into_iter()
            .zip(results)
            .map(|(p, r)| r.map(|()| (p.n, p.out)))
            .collect()
    }

    /// The one block the read maps, when it reads exactly one device block
    /// from its start into the start of its buffer.
    pub(super) fn sole_block(&self) -> Option<u64> {
        match &self.reads[..] {
            [r] => r.block_at_start(),
            _ => None,
        }
    }
}
