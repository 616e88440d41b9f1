//! Frontend layer: namespace operations — lookup, create (mknod, mkdir,
//! symlink), link, unlink, rmdir, rename and readdir. Directory entries live
//! in each directory's hashed tree (`structures/dirent.rs`).
//!
//! A name is looked up once per operation: the lookup's probe of the
//! directory tree gives the entry's place (to remove it) or the name's
//! lowest free position and its place (to create it), and the change goes
//! there without searching the tree again while the tree is unchanged
//! since (`Tree::holds`); after another change to the same directory (a
//! rename's first half) the position is looked for again.
//!
//! Calls the cache, structures (directory trees) and log (`Orphan`,
//! `Drop` records for the backend).

use super::Volume;
use crate::cache::Inode;
use crate::device::Device;
use crate::error::{err, Errno, Error, Result};
use crate::log::Record;
use crate::structures::btree::{Node, Spot};
use crate::structures::dirent::{self, DirentRef, Lookup};
use crate::structures::extent;
use crate::structures::inode::InodeAttrs;
use crate::types::*;
use std::ops::ControlFlow;
use std::sync::atomic::Ordering::Relaxed;

/// What freeing an inode gives back ([`Volume::release`]).
pub(super) struct Freed {
    /// Its tree's blocks and its data: (start, count, birth).
    blocks: Vec<(u64, u64, u32)>,
    /// Its last image with link count 0 (files and symlinks without tree
    /// changes only; see `Books::freed_images`).
    image: Option<Vec<u8>>,
}

/// An entry found by name: its place in the directory tree, what it names.
pub(super) struct Found {
    pub(super) spot: Spot,
    pub(super) ino: Ino,
    pub(super) kind: FileType,
}

/// Check a symlink's target.
pub(super) fn check_target(target: &[u8]) -> Result<()> {
    if target.is_empty() {
        return err(Errno::ENOENT);
    }
    if target.contains(&0) {
        return err(Errno::EINVAL);
    }
    if target.len() > SYMLINK_MAX {
        return err(Errno::ENAMETOOLONG);
    }
    Ok(())
}

/// Check a name for a new entry.
pub(super) fn check_name(name: &[u8]) -> Result<()> {
    if name.len() > NAME_MAX {
        return err(Errno::ENAMETOOLONG);
    }
    if name.is_empty() || name.contains(&b'/') || name.contains(&0) || name == b"." || name == b".." {
        return err(Errno::EINVAL);
    }
    Ok(())
}

impl Volume {
    /// Look `name` up in directory `dir`: its entry, or (absent) its
    /// lowest free position and where that goes.
    fn probe(&mut self, dir: Ino, name: &[u8]) -> Result<Lookup> {
        self.in_dir(dir, |d, dev| probe_in(d, dev, name))
    }

    /// Run `f` on directory `dir` and the device. If it read blocks (nodes
    /// of the tree loaded here, under the exclusive guard), note the
    /// directory for the bound on its leaves, as a shared operation's reads
    /// are (`Volume::staged`); a read elsewhere meanwhile only costs the
    /// next eviction step a count.
    fn in_dir<T>(&mut self, dir: Ino, f: impl FnOnce(&mut Inode, &dyn Device) -> Result<T>) -> Result<T> {
        let dev = self.be.dev.clone();
        let reads = dev.counters().reads;
        let r = f(self.dir(dir)?, dev.as_ref());
        if dev.counters().reads != reads {
            self.cache.note_grown(dir);
        }
        r
    }

    /// Find `name` in directory `dir`.
    pub(super) fn find(&mut self, dir: Ino, name: &[u8]) -> Result<Option<Found>> {
        Ok(match self.probe(dir, name)? {
            Lookup::Found { ino, kind, spot } => Some(Found { spot, ino, kind }),
            Lookup::Absent { .. } => None,
        })
    }

    /// Add an entry for `name` naming `ino` of type `kind`; the name must
    /// not exist. `free` is the name's free position from its lookup: used
    /// if the tree is unchanged since, else looked for again. Returns the
    /// position.
    pub(super) fn add_entry(
        &mut self,
        dir: Ino,
        name: &[u8],
        ino: Ino,
        kind: FileType,
        free: Option<Spot>,
    ) -> Result<u64> {
        let key = self.in_dir(dir, |d, dev| {
            let spot = match free {
                Some(s) if d.tree.holds(&s) => s,
                _ => dirent::free_position(&mut d.tree, dev, name)?.ok_or(Error::Posix(Errno::ENOSPC))?,
            };
            d.tree.insert_at(dev, &spot, dirent::encode(ino, kind, name))?;
            let now = Timespec::now();
            d.attrs.mtime = now;
            d.attrs.ctime = now;
            Ok(spot.key)
        })?;
        self.touch(dir);
        self.books.get_mut().names.add((dir, key), ino);
        Ok(key)
    }

    /// Remove the entry at `at.key` of `dir`, which names `ino` (`at`: its
    /// place, from its lookup).
    pub(super) fn remove_entry(&mut self, dir: Ino, at: &Spot, ino: Ino) -> Result<()> {
        self.in_dir(dir, |d, dev| {
            d.tree.remove_at(dev, at)?;
            let now = Timespec::now();
            d.attrs.mtime = now;
            d.attrs.ctime = now;
            Ok(())
        })?;
        self.touch(dir);
        self.books.get_mut().names.remove((dir, at.key), ino);
        Ok(())
    }

    pub(super) fn is_empty_dir(&mut self, ino: Ino) -> Result<bool> {
        self.in_dir(ino, has_no_entries)
    }

    pub fn lookup(&mut self, parent: Ino, name: &[u8]) -> Result<Attr> {
        match self.find(parent, name)? {
            Some(e) => self.getattr(e.ino),
            None => err(Errno::ENOENT),
        }
    }

    /// The parent of directory `ino`; ENOTDIR for other files.
    pub fn dir_parent(&mut self, ino: Ino) -> Result<Ino> {
        Ok(self.dir(ino)?.attrs.parent)
    }

    /// Create a node of type `mode & S_IFMT` (not a symlink).
    pub fn mknod(
        &mut self,
        parent: Ino,
        name: &[u8],
        mode: u32,
        rdev: u64,
        uid: u32,
        gid: u32,
    ) -> Result<Attr> {
        let kind = FileType::from_mode(mode).ok_or(Error::Posix(Errno::EINVAL))?;
        if kind == FileType::Symlink {
            return err(Errno::EINVAL);
        }
        let ino = self.new_inode(parent, name, mode, rdev, uid, gid, None)?;
        self.getattr(ino)
    }

    /// Common part of every create: checks, inode, entry, link counts.
    /// The inode gets `number` if given (`frontend/receive.rs`), else one
    /// near `parent`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new_inode(
        &mut self,
        parent: Ino,
        name: &[u8],
        mode: u32,
        rdev: u64,
        uid: u32,
        gid: u32,
        number: Option<Ino>,
    ) -> Result<Ino> {
        live_dir(self.dir(parent)?)?;
        check_name(name)?;
        let Lookup::Absent { free } = self.probe(parent, name)? else {
            return err(Errno::EEXIST);
        };
        super::flags::may_name_in(&self.dir(parent)?.attrs)?;
        self.begin_change(3)?;
        let kind = FileType::from_mode(mode).ok_or(Error::Posix(Errno::EINVAL))?;
        let is_dir = kind == FileType::Directory;
        if free.is_none() {
            // Every position of the name's hash is taken.
            return err(Errno::ENOSPC);
        }
        let ino = match number {
            Some(n) => self.claim_ino(n)?,
            None => self.alloc_ino(parent)?,
        };
        let mut inode = fresh_inode(ino, parent, kind, mode, rdev, uid, gid, self.be.delta);
        if number.is_none() && kind != FileType::Symlink {
            super::xattr::inherit_acl(&self.dir(parent)?.attrs, &mut inode);
        }
        self.cache.insert(inode);
        self.touch(ino);
        self.add_entry(parent, name, ino, kind, free)?;
        if is_dir {
            self.dir(parent)?.attrs.nlink += 1;
            self.books.get_mut().ns_touched.insert(parent);
        }
        Ok(ino)
    }

    pub fn symlink(&mut self, parent: Ino, name: &[u8], target: &[u8], uid: u32, gid: u32) -> Result<Attr> {
        check_target(target)?;
        let ino = self.new_inode(parent, name, libc::S_IFLNK | 0o777, 0, uid, gid, None)?;
        self.copy_to_pages(ino, 0, target)?;
        self.getattr(ino)
    }

    pub fn readlink(&mut self, ino: Ino) -> Result<Vec<u8>> {
        let i = self.inode(ino)?;
        if i.kind() != FileType::Symlink {
            return err(Errno::EINVAL);
        }
        if i.attrs.size == 0 || i.attrs.size > SYMLINK_MAX as u64 {
            return Err(Error::corrupt(
                i.tree.unified.addr,
                format!(
                    "symlink {ino}: target length {} is not 1..={SYMLINK_MAX}",
                    i.attrs.size
                ),
            ));
        }
        let size = i.attrs.size as usize;
        self.read_data(ino, 0, size)
    }

    pub fn link(&mut self, ino: Ino, newparent: Ino, newname: &[u8]) -> Result<Attr> {
        self.inode(ino)?;
        live_dir(self.dir(newparent)?)?;
        check_name(newname)?;
        let Lookup::Absent { free } = self.probe(newparent, newname)? else {
            return err(Errno::EEXIST);
        };
        if self.inode(ino)?.is_dir() {
            return err(Errno::EPERM);
        }
        // An orphan (no name left, kept by a handle) cannot get a name back,
        // as in Linux: it stays on the orphan list until freed. A file made
        // without one (`tmpfile`) can, once.
        let unnamed = self.inode(ino)?.attrs.nlink == 0;
        if unnamed && !self.books.get_mut().linkable.contains(&ino) {
            return err(Errno::ENOENT);
        }
        if self.inode(ino)?.attrs.nlink >= u32::MAX - 1 {
            return err(Errno::EMLINK);
        }
        super::flags::may_change(&self.inode(ino)?.attrs)?;
        super::flags::may_name_in(&self.dir(newparent)?.attrs)?;
        self.begin_change(2)?;
        self.books.get_mut().ns_touched.insert(ino);
        let kind = self.inode(ino)?.kind();
        self.add_entry(newparent, newname, ino, kind, free)?;
        let i = self.inode(ino)?;
        i.attrs.nlink += 1;
        i.attrs.ctime = Timespec::now();
        self.touch(ino);
        if unnamed {
            self.named(ino);
        }
        self.getattr(ino)
    }

    pub fn unlink(&mut self, parent: Ino, name: &[u8]) -> Result<()> {
        self.dir(parent)?;
        let e = self.find(parent, name)?.ok_or(Error::Posix(Errno::ENOENT))?;
        if e.kind == FileType::Directory {
            return err(Errno::EISDIR);
        }
        self.may_unname(parent, e.ino)?;
        self.begin_release(2)?;
        self.books.get_mut().ns_touched.insert(e.ino);
        self.remove_entry(parent, &e.spot, e.ino)?;
        self.drop_link(e.ino)
    }

    pub fn rmdir(&mut self, parent: Ino, name: &[u8]) -> Result<()> {
        self.dir(parent)?;
        let e = self.find(parent, name)?.ok_or(Error::Posix(Errno::ENOENT))?;
        if e.kind != FileType::Directory {
            return err(Errno::ENOTDIR);
        }
        if !self.is_empty_dir(e.ino)? {
            return err(Errno::ENOTEMPTY);
        }
        self.may_unname(parent, e.ino)?;
        self.begin_release(2)?;
        self.books.get_mut().ns_touched.extend([parent, e.ino]);
        self.remove_entry(parent, &e.spot, e.ino)?;
        self.dir(parent)?.attrs.nlink -= 1;
        self.drop_dir(e.ino)
    }

    /// [`flags::may_unname`] of `victim`'s name in `dir`.
    fn may_unname(&mut self, dir: Ino, victim: Ino) -> Result<()> {
        let d = self.dir(dir)?.attrs.flags;
        let v = self.inode(victim)?.attrs.flags;
        if super::flags::frozen_flags(d) || super::flags::frozen_flags(v) {
            return err(Errno::EPERM);
        }
        Ok(())
    }

    /// One name of `ino` is gone: drop its link count; at zero it becomes
    /// an orphan or is freed ([`Volume::unnamed`]).
    fn drop_link(&mut self, ino: Ino) -> Result<()> {
        let i = self.inode(ino)?;
        i.attrs.nlink = i.attrs.nlink.saturating_sub(1);
        i.attrs.ctime = Timespec::now();
        if i.attrs.nlink == 0 {
            return self.unnamed(ino);
        }
        self.touch(ino);
        Ok(())
    }

    /// The name of directory `ino` (empty) is gone, by rmdir or a rename
    /// over it: its link count drops to 0 and it goes as a file's last
    /// name does ([`Volume::unnamed`]).
    fn drop_dir(&mut self, ino: Ino) -> Result<()> {
        let i = self.dir(ino)?;
        i.attrs.nlink = 0;
        i.attrs.ctime = Timespec::now();
        self.unnamed(ino)
    }

    /// `ino` has no name left (link count 0). Held by a handle (an open
    /// file or directory, or one the kernel knows), it becomes an orphan,
    /// freed at its last handle; otherwise it is freed now.
    fn unnamed(&mut self, ino: Ino) -> Result<()> {
        if self.is_open(ino) {
            // On the durable orphan list in the same delta that writes the
            // link count 0, so a crash never leaves it unlisted.
            self.be.orphans.insert(ino);
            self.be.records.push(Record::Orphan { ino });
            self.touch(ino);
            return Ok(());
        }
        self.free_inode(ino)
    }

    /// Free an inode: its tree's blocks, its data, its inode-table record.
    pub(super) fn free_inode(&mut self, ino: Ino) -> Result<()> {
        let dev = self.be.dev.clone();
        self.inode(ino)?;
        let Some(mut inode) = self.cache.remove(ino) else {
            return Ok(());
        };
        let freed = self.release(&mut inode, dev.as_ref())?;
        for (s, c, born) in freed.blocks {
            self.be.alloc.free_born(s, c, born);
        }
        let books = self.books.get_mut();
        if let Some(image) = freed.image {
            books.freed_images.insert(ino, &image);
        }
        books.freed_inos.insert(ino);
        books.linkable.remove(&ino);
        crate::log::push_drop(&mut self.be.records, ino);
        self.be.orphans.remove(&ino);
        self.be.named.remove(&ino);
        self.be.itable.get_mut().remove(dev.as_ref(), ino)?;
        // Its xattr file goes with it, in the same delta.
        if inode.attrs.xattr_file != 0 {
            self.books.get_mut().xattr_files.insert(ino);
            self.free_owned_xattr_file(ino, inode.attrs.xattr_file)?;
        }
        Ok(())
    }

    /// What freeing `inode` gives back (the caller holds it, out of the
    /// cache or about to leave it): its clean and dirty pages leave the
    /// books here; its blocks and last image are returned.
    pub(super) fn release(&self, inode: &mut Inode, dev: &dyn Device) -> Result<Freed> {
        let bs = self.be.bs as u64;
        let ino = inode.ino;
        self.clean.lock().changed(ino, inode.pages.clean_len(), 0, bs);
        let image = (matches!(inode.kind(), FileType::Regular | FileType::Symlink)
            && !inode.tree.has_dirty_leaves())
        .then(|| {
            let mut attrs = inode.attrs.clone();
            attrs.nlink = 0;
            attrs.encode()
        });
        // (start, count, birth): a snapshot may hold some of them.
        let mut blocks: Vec<(u64, u64, u32)> = Vec::new();
        if !inode.is_dir() {
            for e in extent::all(&mut inode.tree, dev)? {
                blocks.push((e.pblock, e.count, e.birth));
            }
        }
        inode.tree.visit(dev, &mut |addr, _, _, node: &Node| {
            if addr != 0 {
                blocks.push((addr, 1, node.birth()));
            }
            Ok(())
        })?;
        blocks.extend(
            inode
                .tree
                .freed
                .iter()
                .chain(inode.tree.retired.iter())
                .map(|&(b, born)| (b, 1, born)),
        );
        let pages = inode.pages.len() as u64 * bs;
        let _ = self
            .dirty_bytes
            .fetch_update(Relaxed, Relaxed, |d| Some(d.saturating_sub(pages)));
        Ok(Freed { blocks, image })
    }

    /// ctime update of a renamed inode.
    fn changed(&mut self, ino: Ino) -> Result<()> {
        self.inode(ino)?.attrs.ctime = Timespec::now();
        self.touch(ino);
        Ok(())
    }

    pub fn readdir(&mut self, ino: Ino, pos: u64, max: usize) -> Result<Vec<DirEntry>> {
        self.in_dir(ino, |d, dev| readdir_of(d, dev, pos, max))
    }
}

/// ENOENT for directory `d` if its last name is gone (an orphan kept by a
/// handle): nothing is made or moved into it, as in Linux, so an orphan
/// directory stays empty and freeing it frees no name.
fn live_dir(d: &Inode) -> Result<()> {
    if d.attrs.nlink == 0 {
        return err(Errno::ENOENT);
    }
    Ok(())
}

/// A new inode `ino` of type `kind` made in `parent`, changed in `delta`.
#[allow(clippy::too_many_arguments)]
fn fresh_inode(
    ino: Ino,
    parent: Ino,
    kind: FileType,
    mode: u32,
    rdev: u64,
    uid: u32,
    gid: u32,
    delta: u64,
) -> Inode {
    let now = Timespec::now();
    let is_dir = kind == FileType::Directory;
    let keep_rdev = matches!(kind, FileType::CharDevice | FileType::BlockDevice);
    let attrs = InodeAttrs {
        mode: kind.mode_bits() | (mode & 0o7777),
        uid,
        gid,
        nlink: if is_dir { 2 } else { 1 },
        rdev: if keep_rdev { rdev } else { 0 },
        // A directory's parent; for any other file, a hint: the
        // directory it was made or last renamed in (`tux3 snapshot
        // diff` names a changed file through it).
        parent,
        atime: now,
        mtime: now,
        ctime: now,
        btime: now,
        ..InodeAttrs::default()
    };
    let mut inode = Inode::new(ino, attrs);
    inode.delta = delta;
    if is_dir {
        inode.tree = crate::structures::btree::Tree::new_empty(ino, inode.tree.kind);
    }
    inode
}

/// Whether directory `d` (the caller holds its lock) has no entry.
pub(super) fn has_no_entries(d: &mut Inode, dev: &dyn Device) -> Result<bool> {
    let mut empty = true;
    d.tree.scan(dev, 0, u64::MAX, |_, _, _| {
        empty = false;
        Ok(ControlFlow::Break(()))
    })?;
    Ok(empty)
}

/// Load every node of `i`'s tree (an extent map or a directory's entries).
pub(super) fn load_tree(i: &mut Inode, dev: &dyn Device) -> Result<()> {
    i.tree.visit(dev, &mut |_, _, _, _| Ok(()))
}

/// Look `name` up in directory `d` (the caller holds its lock): its entry,
/// or (absent) its lowest free position and where that goes.
pub(super) fn probe_in(d: &mut Inode, dev: &dyn Device, name: &[u8]) -> Result<Lookup> {
    if !d.is_dir() {
        return err(Errno::ENOTDIR);
    }
    if name.len() > NAME_MAX {
        return err(Errno::ENAMETOOLONG);
    }
    dirent::lookup(&mut d.tree, dev, name)
}

/// Up to `max` entries of directory `d` from position `pos` (the caller
/// holds its lock).
pub(super) fn readdir_of(d: &mut Inode, dev: &dyn Device, pos: u64, max: usize) -> Result<Vec<DirEntry>> {
    if !d.is_dir() {
        return err(Errno::ENOTDIR);
    }
    let mut out = Vec::new();
    if max == 0 {
        return Ok(out);
    }
    // One descent, then the entries in order, read in place. The key is
    // taken as the entry's position without hashing its name again (fsck
    // checks that every name hashes to its position).
    d.tree.scan(dev, pos, u64::MAX, |k, value, leaf| {
        let e = DirentRef::parse(value, k, leaf)?;
        out.push(DirEntry {
            ino: e.ino,
            kind: e.kind,
            name: e.name.to_vec(),
            next: k + 1,
        });
        Ok(if out.len() < max {
            ControlFlow::Continue(())
        } else {
            ControlFlow::Break(())
        })
    })?;
    Ok(out)
}

mod rename;
mod shared;
#[cfg(test)]
mod tests;
mod unnamed;
