//! Frontend layer: creates, links, unlinks and renames under the shared delta guard, many
//! at once (see `frontend/shared.rs` for the protocol: `None` means "run
//! me again exclusively", having changed nothing).
//!
//! Locks, in this order, and each only while needed:
//! - the directory's inode (its entries: one descent finds the name and
//!   where a new entry goes, the change goes there);
//! - for an unlink, the named inode, tried without waiting (a holder makes
//!   the unlink run exclusively instead, so no two operations can wait for
//!   each other's inodes; one not in cache is loaded with the directory let
//!   go, `Named::Load`, and the unlink starts again: the inode-table nodes
//!   its load reads go back to the API, which reads them without the guard,
//!   `ColdNode`);
//! - the namespace books (`Books`), a short leaf lock.
//!
//! Inode numbers come from an atomic counter above every number in use
//! (`Volume::max_ino`). What only exclusive access may change — the
//! allocator, the inode table, the log's records and the orphan list — an
//! unlink leaves in `Books::unsettled` for the next exclusive holder
//! (`Volume::settle`, run before any exclusive operation and every freeze),
//! so it lands in the same delta as the unlink. Until then the freed number
//! is in no cache (an operation still holding its cell finds it gone; a
//! load from the inode table, which still has its record, finds it in its
//! shard's freed set: ENOENT either way), its blocks stay in use, and a new
//! orphan is listed in `unsettled`.
//!
//! Directories are made and removed here too, hard links added and
//! files renamed (a named inode not in cache loaded as for an unlink).
//! The look-up in a directory reads the device only through
//! `ColdReads`: a node of its tree not in memory goes back to the API
//! (`ColdNode`), which reads it with no lock held and asks again.
//! Renaming a directory, exchanges and symlinks stay exclusive.
//!
//! Calls the cache, structures (directory trees) and log (`Orphan`, `Drop`
//! records, handed to the backend at settle).

use super::{check_name, fresh_inode, has_no_entries, live_dir, load_tree, probe_in};
use crate::cache::{Inode, InodeGuard};
use crate::error::{err, Errno, Result};
use crate::frontend::load::{ColdNode, MayLoad, Staged, Warm};
use crate::frontend::Volume;
use crate::log::{push_drop, Record};
use crate::structures::btree::Spot;
use crate::structures::dirent::{self, Lookup};
use crate::types::*;
use std::sync::atomic::Ordering::Relaxed;

/// `Some(Named::Done(Err))` out of a shared operation on a named inode.
macro_rules! or_done {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(e) => return Some(Named::Done(Err(e))),
        }
    };
}

/// `Some(Ok(Err(cold)))` out of a shared operation that met a node only
/// on disk, having changed nothing.
macro_rules! or_cold {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(cold) => return Some(Ok(Err(cold))),
        }
    };
}

/// `Some(Named::Cold)` out of a shared operation on a named inode.
macro_rules! or_named_cold {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(cold) => return Some(Named::Cold(cold)),
        }
    };
}

/// How far a shared operation on a named inode got: done (its outcome),
/// or stopped, having changed nothing, at a named inode not in cache,
/// which the caller loads before it starts again, or at a tree node only
/// on disk, which goes back to the API.
enum Named<T> {
    Done(Result<T>),
    Load(Ino),
    Cold(ColdNode),
}

/// A directory locked with what was found in it, or the node of its tree
/// to read first.
type Located<T> = std::result::Result<(InodeGuard, T), ColdNode>;

impl Volume {
    /// [`Volume::mknod`] (any type but a symlink) under the shared guard;
    /// `Err`: the node of the directory's tree to read first, for the API
    /// to read without the guard before it asks again with `staged`.
    /// With `hold`, a handle is taken on the new inode while the directory
    /// is still locked, so nothing can free it first.
    #[allow(clippy::too_many_arguments)]
    pub fn mknod_shared(
        &self,
        parent: Ino,
        name: &[u8],
        mode: u32,
        rdev: u64,
        uid: u32,
        gid: u32,
        hold: bool,
        staged: &Staged,
    ) -> MayLoad<Attr> {
        let kind = or_fail!(FileType::from_mode(mode).ok_or(crate::error::Error::Posix(Errno::EINVAL)));
        if kind == FileType::Symlink {
            return Some(err(Errno::EINVAL));
        }
        let dev = self.be.dev.as_ref();
        let (mut d, free) = or_cold!(or_fail!(self.absent_in(parent, name, staged)?));
        if crate::frontend::flags::frozen(&d.attrs) {
            return None;
        }
        or_fail!(self.reserve_shared(3)?);
        let Some(free) = free else {
            // Every position of the name's hash is taken.
            return Some(err(Errno::ENOSPC));
        };
        let ino = self.max_ino.fetch_add(1, Relaxed) + 1;
        if ino >= 1 << 48 {
            return Some(err(Errno::ENOSPC));
        }
        let mut inode = fresh_inode(ino, parent, kind, mode, rdev, uid, gid, self.be.delta);
        super::super::xattr::inherit_acl(&d.attrs, &mut inode);
        let attr = inode.attr(self.be.bs as u32);
        self.cache.insert_shared(inode);
        self.touched(ino);
        or_fail!(d.tree.insert_at(dev, &free, dirent::encode(ino, kind, name)));
        if hold {
            // (The name is in, but nobody finds it before `d` is let go.)
            self.hold_locked(ino);
        }
        let now = Timespec::now();
        d.attrs.mtime = now;
        d.attrs.ctime = now;
        let is_dir = kind == FileType::Directory;
        if is_dir {
            d.attrs.nlink += 1;
        }
        self.touch_locked(&mut d);
        let mut books = self.books.lock();
        books.names.add((parent, free.key), ino);
        if is_dir {
            books.ns_touched.insert(parent);
        }
        Some(Ok(Ok(attr)))
    }

    /// Directory `dir` locked, where `name` (checked) is not: with the
    /// free position a new entry of that name takes (`None`: every one of
    /// its hash is taken). ENOTDIR, a bad name or EEXIST otherwise (ENOENT
    /// for no such directory, or one whose last name is gone); `Err`: a
    /// node of its tree not in memory nor `staged`.
    fn absent_in(&self, dir: Ino, name: &[u8], staged: &Staged) -> Option<Result<Located<Option<Spot>>>> {
        let mut d = or_fail!(self.inode_shared(dir));
        if !d.is_dir() {
            return Some(err(Errno::ENOTDIR));
        }
        or_fail!(live_dir(&d));
        or_fail!(check_name(name));
        match or_cold!(or_fail!(
            self.staged(d.dir_ino(), staged, |dev| probe_in(&mut d, dev, name))
        )) {
            Lookup::Absent { free } => Some(Ok(Ok((d, free)))),
            Lookup::Found { .. } => Some(err(Errno::EEXIST)),
        }
    }

    /// Directory `dir` locked, with the entry `name` names there: its
    /// inode, type and place. ENOTDIR or ENOENT otherwise; `Err` as for
    /// [`Volume::absent_in`].
    fn found_in(
        &self,
        dir: Ino,
        name: &[u8],
        staged: &Staged,
    ) -> Option<Result<Located<(Ino, FileType, Spot)>>> {
        let mut d = or_fail!(self.inode_shared(dir));
        if !d.is_dir() {
            return Some(err(Errno::ENOTDIR));
        }
        match or_cold!(or_fail!(
            self.staged(d.dir_ino(), staged, |dev| probe_in(&mut d, dev, name))
        )) {
            Lookup::Found { ino, kind, spot } => Some(Ok(Ok((d, (ino, kind, spot))))),
            Lookup::Absent { .. } => Some(err(Errno::ENOENT)),
        }
    }

    /// [`Volume::unlink`] under the shared guard, when nobody holds the
    /// named inode. One not in cache is loaded (with the directory let go)
    /// and the unlink starts again.
    /// `Err`: the inode-table node loading the named inode needs first,
    /// for the API to read without the guard before it asks again.
    pub fn unlink_shared(&self, parent: Ino, name: &[u8], staged: &Staged) -> MayLoad<()> {
        self.loading_named(|| self.unlink_shared_once(parent, name, staged))
    }

    /// Run `once`; if it stopped at a named inode not in cache, load that
    /// inode (no lock held) and run it again, or hand back the inode-table
    /// node its load must read first (`Err`). A third stop at a named
    /// inode (a rename names two) sends the operation to the exclusive
    /// path.
    fn loading_named<T>(&self, once: impl Fn() -> Option<Named<T>>) -> MayLoad<T> {
        for _ in 0..3 {
            match once()? {
                Named::Done(r) => return Some(r.map(Ok)),
                Named::Cold(cold) => return Some(Ok(Err(cold))),
                Named::Load(ino) => match self.inode_or_cold(ino) {
                    Ok(Warm::Ready(i)) => drop(i),
                    Ok(Warm::Cold(cold)) => return Some(Ok(Err(cold))),
                    // Freed since its entry was read (the directories were
                    // let go to load it: another operation removed its
                    // last name meanwhile): look the names up again. An
                    // entry that still names it goes to the exclusive
                    // path after the last round, which reports the damage.
                    Err(e) if e.errno() == Errno::ENOENT => {}
                    Err(e) => return Some(Err(e)),
                },
            }
        }
        None
    }

    fn unlink_shared_once(&self, parent: Ino, name: &[u8], staged: &Staged) -> Option<Named<()>> {
        let dev = self.be.dev.as_ref();
        let (mut d, (ino, kind, spot)) = or_named_cold!(or_done!(self.found_in(parent, name, staged)?));
        if kind == FileType::Directory {
            return Some(Named::Done(err(Errno::EISDIR)));
        }
        if ino == parent {
            return None; // damage: the exclusive path reports it
        }
        let Some(mut i) = self.cache.try_lock(ino) else {
            return (!self.cache.contains(ino)).then_some(Named::Load(ino));
        };
        if i.attrs.xattr_file != 0 {
            return None; // its xattr file may go too: exclusively
        }
        or_named_cold!(or_done!(self.preload_freed(&mut i, staged)));
        if crate::frontend::flags::frozen(&d.attrs) || crate::frontend::flags::frozen(&i.attrs) {
            return None;
        }
        or_done!(self.reserve_release_shared(2)?);
        or_done!(d.tree.remove_at(dev, &spot));
        let now = Timespec::now();
        d.attrs.mtime = now;
        d.attrs.ctime = now;
        self.touch_locked(&mut d);
        {
            let mut books = self.books.lock();
            books.ns_touched.insert(ino);
            books.names.remove((parent, spot.key), ino);
        }
        drop(d);
        Some(Named::Done(self.drop_link_shared(i, now)))
    }

    /// [`Volume::link`] under the shared guard, when the inode is cached
    /// and nobody holds it: the directory is locked first, then the inode
    /// is tried (as an unlink does).
    /// `Err` as for [`Volume::mknod_shared`]; `hold` too.
    pub fn link_shared(
        &self,
        ino: Ino,
        newparent: Ino,
        newname: &[u8],
        hold: bool,
        staged: &Staged,
    ) -> MayLoad<Attr> {
        if ino == newparent {
            return None;
        }
        // Loaded first if need be (ENOENT for no such inode), with no
        // other lock held.
        drop(or_fail!(self.inode_shared(ino)));
        let dev = self.be.dev.as_ref();
        let (mut d, free) = or_cold!(or_fail!(self.absent_in(newparent, newname, staged)?));
        let mut i = self.cache.try_lock(ino)?;
        if i.is_dir() {
            return Some(err(Errno::EPERM));
        }
        // An orphan cannot get a name back (as in Linux); a file made
        // without one may get its first, exclusively (`Volume::link`).
        if i.attrs.nlink == 0 {
            return None;
        }
        if i.attrs.nlink >= u32::MAX - 1 {
            return Some(err(Errno::EMLINK));
        }
        if crate::frontend::flags::frozen(&d.attrs) || crate::frontend::flags::frozen(&i.attrs) {
            return None;
        }
        or_fail!(self.reserve_shared(2)?);
        let Some(free) = free else {
            return Some(err(Errno::ENOSPC));
        };
        let kind = i.kind();
        or_fail!(d.tree.insert_at(dev, &free, dirent::encode(ino, kind, newname)));
        let now = Timespec::now();
        d.attrs.mtime = now;
        d.attrs.ctime = now;
        self.touch_locked(&mut d);
        i.attrs.nlink += 1;
        i.attrs.ctime = now;
        self.touch_locked(&mut i);
        if hold {
            self.hold_locked(ino);
        }
        {
            let mut books = self.books.lock();
            books.ns_touched.insert(ino);
            books.names.add((newparent, free.key), ino);
        }
        Some(Ok(Ok(i.attr(self.be.bs as u32))))
    }

    /// [`Volume::rmdir`] under the shared guard, when nobody holds the
    /// directory named (so nothing is being made in it). One not in cache
    /// is loaded, as by an unlink.
    /// `Err` as for [`Volume::unlink_shared`].
    pub fn rmdir_shared(&self, parent: Ino, name: &[u8], staged: &Staged) -> MayLoad<()> {
        self.loading_named(|| self.rmdir_shared_once(parent, name, staged))
    }

    fn rmdir_shared_once(&self, parent: Ino, name: &[u8], staged: &Staged) -> Option<Named<()>> {
        let dev = self.be.dev.as_ref();
        let (mut d, (ino, kind, spot)) = or_named_cold!(or_done!(self.found_in(parent, name, staged)?));
        if kind != FileType::Directory {
            return Some(Named::Done(err(Errno::ENOTDIR)));
        }
        if ino == parent {
            return None; // damage: the exclusive path reports it
        }
        let Some(mut c) = self.cache.try_lock(ino) else {
            return (!self.cache.contains(ino)).then_some(Named::Load(ino));
        };
        if !c.is_dir() || c.attrs.xattr_file != 0 {
            return None; // damage, or an xattr file to free: exclusively
        }
        let empty = or_named_cold!(or_done!(
            self.staged(c.dir_ino(), staged, |dev| has_no_entries(&mut c, dev))
        ));
        if !empty {
            return Some(Named::Done(err(Errno::ENOTEMPTY)));
        }
        or_named_cold!(or_done!(
            self.staged(c.dir_ino(), staged, |dev| load_tree(&mut c, dev))
        ));
        if crate::frontend::flags::frozen(&d.attrs) || crate::frontend::flags::frozen(&c.attrs) {
            return None;
        }
        or_done!(self.reserve_release_shared(2)?);
        or_done!(d.tree.remove_at(dev, &spot));
        let now = Timespec::now();
        d.attrs.mtime = now;
        d.attrs.ctime = now;
        d.attrs.nlink = d.attrs.nlink.saturating_sub(1);
        self.touch_locked(&mut d);
        {
            let mut books = self.books.lock();
            books.ns_touched.extend([parent, ino]);
            books.names.remove((parent, spot.key), ino);
        }
        drop(d);
        c.attrs.ctime = now;
        c.attrs.nlink = 0;
        Some(Named::Done(self.unnamed_shared(c)))
    }

    /// [`Volume::rename`] under the shared guard, for a source that is
    /// not a directory (no parent or link count of a directory changes),
    /// without `exchange`, when the directories are cached and nobody
    /// holds the inodes involved (one not in cache is loaded, as by an
    /// unlink). Two directories are locked in inode-number order.
    /// `Err` as for [`Volume::unlink_shared`].
    pub fn rename_shared(
        &self,
        parent: Ino,
        name: &[u8],
        newparent: Ino,
        newname: &[u8],
        flags: RenameFlags,
        staged: &Staged,
    ) -> MayLoad<()> {
        self.loading_named(|| self.rename_shared_once((parent, name), (newparent, newname), flags, staged))
    }

    fn rename_shared_once(
        &self,
        (parent, name): (Ino, &[u8]),
        (newparent, newname): (Ino, &[u8]),
        flags: RenameFlags,
        staged: &Staged,
    ) -> Option<Named<()>> {
        if flags.exchange || flags.whiteout.is_some() {
            return None;
        }
        let dev = self.be.dev.as_ref();
        let (mut a, mut b) = if parent == newparent {
            (self.cache.lock(parent)?, None)
        } else if parent < newparent {
            let a = self.cache.lock(parent)?;
            (a, Some(self.cache.lock(newparent)?))
        } else {
            let b = self.cache.lock(newparent)?;
            (self.cache.lock(parent)?, Some(b))
        };
        // The checks in the order of the exclusive rename (Linux's).
        if !a.is_dir() {
            return Some(Named::Done(err(Errno::ENOTDIR)));
        }
        if name.len() > NAME_MAX {
            return Some(Named::Done(err(Errno::ENAMETOOLONG)));
        }
        if !b.as_ref().is_none_or(|b| b.is_dir()) {
            return Some(Named::Done(err(Errno::ENOTDIR)));
        }
        or_done!(live_dir(b.as_deref().unwrap_or(&a)));
        or_done!(check_name(newname));
        let found = or_named_cold!(or_done!(
            self.staged(a.dir_ino(), staged, |dev| probe_in(&mut a, dev, name))
        ));
        let Lookup::Found { ino, kind, spot } = found else {
            return Some(Named::Done(err(Errno::ENOENT)));
        };
        if kind == FileType::Directory {
            return None;
        }
        let d = b.as_deref_mut().unwrap_or(&mut a);
        let (target, free) = match or_named_cold!(or_done!(
            self.staged(d.dir_ino(), staged, |dev| probe_in(d, dev, newname))
        )) {
            Lookup::Found { ino, kind, spot } => (Some((ino, kind, spot)), None),
            Lookup::Absent { free } => (None, free),
        };
        if flags.noreplace && target.is_some() {
            return Some(Named::Done(err(Errno::EEXIST)));
        }
        if let Some((t, tkind, _)) = &target {
            if *t == ino {
                return Some(Named::Done(Ok(())));
            }
            if *tkind == FileType::Directory {
                // An error, but which one takes the exclusive path's
                // checks (a directory above the source: ENOTEMPTY).
                return None;
            }
        }
        if [parent, newparent].contains(&ino)
            || target
                .as_ref()
                .is_some_and(|t| [parent, newparent].contains(&t.0))
        {
            return None; // damage: the exclusive path reports it
        }
        // A named inode not in cache is loaded (the directories let go)
        // and the rename starts again; one held sends it to the exclusive
        // path.
        let named = |ino| match self.cache.try_lock(ino) {
            Some(i) => Ok(i),
            None if self.cache.contains(ino) => Err(None),
            None => Err(Some(Named::Load(ino))),
        };
        let mut src = match named(ino) {
            Ok(i) => i,
            Err(stop) => return stop,
        };
        let mut tgt = match &target {
            Some((t, _, _)) => match named(*t) {
                Ok(i) => Some(i),
                Err(stop) => return stop,
            },
            None => None,
        };
        if let Some(t) = tgt.as_mut() {
            if t.attrs.xattr_file != 0 {
                return None; // its xattr file may go too: exclusively
            }
            or_named_cold!(or_done!(self.preload_freed(t, staged)));
        }
        // Immutable or append-only inodes go to the exclusive path, which
        // checks them.
        let frozen = crate::frontend::flags::frozen;
        if frozen(&a.attrs)
            || b.as_ref().is_some_and(|b| frozen(&b.attrs))
            || frozen(&src.attrs)
            || tgt.as_ref().is_some_and(|t| frozen(&t.attrs))
        {
            return None;
        }
        or_done!(self.reserve_shared(4)?);
        let now = Timespec::now();
        if let Some((_, _, tspot)) = &target {
            let d = b.as_deref_mut().unwrap_or(&mut a);
            or_done!(d.tree.remove_at(dev, tspot));
        }
        or_done!(a.tree.remove_at(dev, &spot));
        a.attrs.mtime = now;
        a.attrs.ctime = now;
        self.touch_locked(&mut a);
        let d = b.as_deref_mut().unwrap_or(&mut a);
        // The position the lookup found free, unless a removal above
        // changed the tree (then looked for again).
        let at = match free {
            Some(s) if d.tree.holds(&s) => s,
            _ => match or_done!(dirent::free_position(&mut d.tree, dev, newname)) {
                Some(s) => s,
                None => return Some(Named::Done(err(Errno::ENOSPC))),
            },
        };
        or_done!(d.tree.insert_at(dev, &at, dirent::encode(ino, kind, newname)));
        d.attrs.mtime = now;
        d.attrs.ctime = now;
        self.touch_locked(d);
        {
            let mut books = self.books.lock();
            books.ns_touched.insert(ino);
            if let Some((t, _, tspot)) = &target {
                books.ns_touched.insert(*t);
                books.names.remove((newparent, tspot.key), *t);
            }
            books.names.remove((parent, spot.key), ino);
            books.names.add((newparent, at.key), ino);
        }
        drop((a, b));
        if parent != newparent {
            // A file's parent hint follows it.
            src.attrs.parent = newparent;
        }
        src.attrs.ctime = now;
        self.touch_locked(&mut src);
        drop(src);
        Some(Named::Done(match tgt.take() {
            Some(t) => self.drop_link_shared(t, now),
            None => Ok(()),
        }))
    }

    /// Before a change that may drop `i`'s last link (held, not a
    /// directory): if it would then be freed (one name, no handle), every
    /// node of its tree loaded, so that freeing its blocks reads nothing;
    /// `Err`, the node to read first. Changes nothing else.
    fn preload_freed(&self, i: &mut Inode, staged: &Staged) -> Result<Result<(), ColdNode>> {
        if i.attrs.nlink > 1 || self.is_open(i.ino) {
            return Ok(Ok(()));
        }
        self.staged(i.dir_ino(), staged, |dev| load_tree(i, dev))
    }

    /// One name of `i` (held, not a directory) is gone: drop its link
    /// count; at zero it goes ([`Volume::unnamed_shared`]).
    fn drop_link_shared(&self, mut i: InodeGuard, now: Timespec) -> Result<()> {
        i.attrs.nlink = i.attrs.nlink.saturating_sub(1);
        i.attrs.ctime = now;
        if i.attrs.nlink > 0 {
            self.touch_locked(&mut i);
            return Ok(());
        }
        self.unnamed_shared(i)
    }

    /// `i` (held) has no name left (link count 0): it becomes an orphan if
    /// a handle holds it (an open file or directory, or one the kernel
    /// knows), else it is freed.
    fn unnamed_shared(&self, mut i: InodeGuard) -> Result<()> {
        let ino = i.ino;
        // (Handles are taken and released under the inode's lock, which
        // this holds: the answer stays true.)
        if self.is_open(ino) {
            // On the orphan list in the delta that writes the link count 0.
            self.touch_locked(&mut i);
            let mut books = self.books.lock();
            books.unsettled.orphans.insert(ino);
            books.unsettled.records.push(Record::Orphan { ino });
            self.unsettled_len.fetch_add(1, Relaxed);
            return Ok(());
        }
        self.free_shared(i)
    }

    /// Free inode `i` (held, with no name and no handle left) under the
    /// shared guard; what needs exclusive access waits in `unsettled`.
    fn free_shared(&self, mut i: InodeGuard) -> Result<()> {
        let ino = i.ino;
        let freed = self.release(&mut i, self.be.dev.as_ref())?;
        self.cache.remove_shared(&mut i);
        drop(i);
        let mut books = self.books.lock();
        if let Some(image) = freed.image {
            books.freed_images.insert(ino, &image);
        }
        books.freed_inos.insert(ino);
        books.unsettled.frees.extend(freed.blocks);
        books.unsettled.records.push(Record::Drop { tree: ino });
        self.unsettled_len.fetch_add(1, Relaxed);
        Ok(())
    }

    /// Records shared unlinks left for the next exclusive holder.
    pub fn unsettled_len(&self) -> u64 {
        self.unsettled_len.load(Relaxed)
    }

    /// Whether `ino` became an orphan in a shared unlink not settled yet.
    pub(in crate::frontend) fn orphan_unsettled(&self, ino: Ino) -> bool {
        self.books.lock().unsettled.orphans.contains(&ino)
    }

    /// Carry out what shared unlinks left for exclusive access, in their
    /// order: frees to the allocator, `Orphan` and `Drop` records to the
    /// log, orphans listed, freed inodes out of the inode table. Every
    /// exclusive holder runs it first. A failure to update the inode table
    /// (a device read) fails the volume, as a failed commit does.
    pub fn settle(&mut self) {
        let u = &mut self.books.get_mut().unsettled;
        if u.records.is_empty() && u.frees.is_empty() {
            return;
        }
        let u = std::mem::take(u);
        *self.unsettled_len.get_mut() = 0;
        for (s, c, born) in u.frees {
            self.be.alloc.free_born(s, c, born);
        }
        let dev = self.be.dev.clone();
        for r in u.records {
            match r {
                Record::Orphan { ino } => {
                    self.be.orphans.insert(ino);
                }
                Record::Drop { tree } => {
                    self.be.orphans.remove(&tree);
                    self.cache.unify_pending.remove(&tree);
                    if let Err(e) = self.be.itable.get_mut().remove(dev.as_ref(), tree) {
                        self.fail(&format!("removing freed inode {tree} from the inode table"), &e);
                    }
                    // Consecutive inodes freed in a row: one record.
                    push_drop(&mut self.be.records, tree);
                    continue;
                }
                _ => {}
            }
            self.be.records.push(r);
        }
        // The freed inodes' records are out of the table: loads may look.
        self.cache.forget_freed();
    }
}
