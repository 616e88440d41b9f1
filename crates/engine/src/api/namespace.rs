//! API layer: the namespace — lookup, create (files, directories, device
//! nodes, symlinks, files without a name), link, unlink, rmdir, rename,
//! readlink, readdir and a directory's parent, with the `*_held` forms that
//! take a handle in the same step. Each runs under the shared delta guard
//! when the frontend can (`frontend/shared.rs`,
//! `frontend/namespace/shared.rs`), and exclusively otherwise, after the
//! nodes it needs are read with no guard held (`Fs::warm` and
//! `Fs::warming`, in `mod.rs`).
//!
//! Calls the frontend (`Volume::lookup`, `mknod`, `symlink`, `link`,
//! `unlink`, `rmdir`, `rename`, `readdir` and their shared forms) and the
//! rest of the API (`Fs::dir_synced` for a directory flagged sync).

use super::{held, Fs};
use crate::error::Result;
use crate::frontend::TreeNeed;
use crate::types::{Attr, DirEntry, FileType, Ino, RenameFlags};

impl Fs {
    /// Find `name` in directory `parent`.
    pub fn lookup(&self, parent: Ino, name: &[u8]) -> Result<Attr> {
        self.warm(parent);
        if let Some(r) = self.warming(|v, s| v.lookup_shared(parent, name, false, s)) {
            return r;
        }
        self.vol().lookup(parent, name)
    }

    /// [`Fs::lookup`], and a handle taken on what it finds unless it is a
    /// directory ([`Fs::open_handle`]), in one step: an unlink or a rename
    /// over the name cannot free the file between the two (a server that
    /// holds a handle per kernel lookup would otherwise answer ENOENT for
    /// a name that never went missing).
    pub fn lookup_held(&self, parent: Ino, name: &[u8]) -> Result<Attr> {
        self.warm(parent);
        if let Some(r) = self.warming(|v, s| v.lookup_shared(parent, name, true, s)) {
            return r;
        }
        let mut v = self.vol();
        let attr = v.lookup(parent, name)?;
        held(&mut v, attr, true)
    }

    /// The parent of directory `ino` (the root's is itself); ENOTDIR for
    /// any other file.
    pub fn dir_parent(&self, ino: Ino) -> Result<Ino> {
        self.warm(ino);
        self.vol().dir_parent(ino)
    }

    /// Create a regular file. `mode` holds the permission bits.
    pub fn create(&self, parent: Ino, name: &[u8], mode: u32, uid: u32, gid: u32) -> Result<Attr> {
        self.mknod(parent, name, libc::S_IFREG | (mode & 0o7777), 0, uid, gid)
    }

    /// Create a node of any non-directory type: `mode` carries the `S_IFMT`
    /// bits (regular, fifo, character or block device, socket).
    pub fn mknod(&self, parent: Ino, name: &[u8], mode: u32, rdev: u64, uid: u32, gid: u32) -> Result<Attr> {
        self.mknod_as(parent, name, mode, rdev, uid, gid, false)
    }

    /// [`Fs::mknod`] (a directory too), and a handle taken on the new
    /// node, in one step (as [`Fs::lookup_held`]): no
    /// lookup, unlink and release by others can free it first.
    pub fn mknod_held(
        &self,
        parent: Ino,
        name: &[u8],
        mode: u32,
        rdev: u64,
        uid: u32,
        gid: u32,
    ) -> Result<Attr> {
        self.mknod_as(parent, name, mode, rdev, uid, gid, true)
    }

    #[allow(clippy::too_many_arguments)]
    fn mknod_as(
        &self,
        parent: Ino,
        name: &[u8],
        mode: u32,
        rdev: u64,
        uid: u32,
        gid: u32,
        hold: bool,
    ) -> Result<Attr> {
        let r = self.mknod_now(parent, name, mode, rdev, uid, gid, hold);
        self.dir_synced(&[parent], r)
    }

    #[allow(clippy::too_many_arguments)]
    fn mknod_now(
        &self,
        parent: Ino,
        name: &[u8],
        mode: u32,
        rdev: u64,
        uid: u32,
        gid: u32,
        hold: bool,
    ) -> Result<Attr> {
        self.warm(parent);
        if let Some(r) = self.warming(|v, s| v.mknod_shared(parent, name, mode, rdev, uid, gid, hold, s)) {
            return r;
        }
        let mut v = self.vol();
        let attr = v.mknod(parent, name, mode, rdev, uid, gid)?;
        held(&mut v, attr, hold)
    }

    /// Make a regular file with no name in directory `parent`
    /// (`O_TMPFILE`): permission bits from `mode`, owned by `uid` and
    /// `gid`. The caller holds one handle on it (give it back with
    /// [`Fs::release_handle`]): the file is an orphan, gone at its last
    /// handle, or at the next mount after a crash, unless [`Fs::link`]
    /// names it first (once).
    pub fn tmpfile(&self, parent: Ino, mode: u32, uid: u32, gid: u32) -> Result<Attr> {
        self.warm(parent);
        self.vol().tmpfile(parent, mode, uid, gid)
    }

    /// Create a directory.
    pub fn mkdir(&self, parent: Ino, name: &[u8], mode: u32, uid: u32, gid: u32) -> Result<Attr> {
        self.mknod(parent, name, libc::S_IFDIR | (mode & 0o7777), 0, uid, gid)
    }

    /// [`Fs::mkdir`] and a handle on the new directory, in one step (as
    /// [`Fs::mknod_held`]).
    pub fn mkdir_held(&self, parent: Ino, name: &[u8], mode: u32, uid: u32, gid: u32) -> Result<Attr> {
        self.mknod_held(parent, name, libc::S_IFDIR | (mode & 0o7777), 0, uid, gid)
    }

    /// Create a symbolic link to `target`.
    pub fn symlink(&self, parent: Ino, name: &[u8], target: &[u8], uid: u32, gid: u32) -> Result<Attr> {
        self.symlink_as(parent, name, target, uid, gid, false)
    }

    /// [`Fs::symlink`] and a handle on the new link, in one step (as
    /// [`Fs::mknod_held`]).
    pub fn symlink_held(&self, parent: Ino, name: &[u8], target: &[u8], uid: u32, gid: u32) -> Result<Attr> {
        self.symlink_as(parent, name, target, uid, gid, true)
    }

    fn symlink_as(
        &self,
        parent: Ino,
        name: &[u8],
        target: &[u8],
        uid: u32,
        gid: u32,
        hold: bool,
    ) -> Result<Attr> {
        let r = self.symlink_now(parent, name, target, uid, gid, hold);
        self.dir_synced(&[parent], r)
    }

    fn symlink_now(
        &self,
        parent: Ino,
        name: &[u8],
        target: &[u8],
        uid: u32,
        gid: u32,
        hold: bool,
    ) -> Result<Attr> {
        self.warm(parent);
        let _ = self.warming(|v, s| v.probe_shared(parent, name, s));
        let mut v = self.vol();
        let attr = v.symlink(parent, name, target, uid, gid)?;
        held(&mut v, attr, hold)
    }

    /// The target of symlink `ino`.
    pub fn readlink(&self, ino: Ino) -> Result<Vec<u8>> {
        self.warm(ino);
        if let Some(r) = self.warming(|v, s| v.readlink_shared(ino, s)) {
            return r;
        }
        self.vol().readlink(ino)
    }

    /// Add a hard link `newparent/newname` to `ino`.
    pub fn link(&self, ino: Ino, newparent: Ino, newname: &[u8]) -> Result<Attr> {
        self.link_as(ino, newparent, newname, false)
    }

    /// [`Fs::link`] and a handle on `ino`, in one step (as
    /// [`Fs::mknod_held`]).
    pub fn link_held(&self, ino: Ino, newparent: Ino, newname: &[u8]) -> Result<Attr> {
        self.link_as(ino, newparent, newname, true)
    }

    fn link_as(&self, ino: Ino, newparent: Ino, newname: &[u8], hold: bool) -> Result<Attr> {
        let r = self.link_now(ino, newparent, newname, hold);
        self.dir_synced(&[newparent], r)
    }

    fn link_now(&self, ino: Ino, newparent: Ino, newname: &[u8], hold: bool) -> Result<Attr> {
        self.warm(ino);
        if let Some(r) = self.warming(|v, s| v.link_shared(ino, newparent, newname, hold, s)) {
            return r;
        }
        let mut v = self.vol();
        let attr = v.link(ino, newparent, newname)?;
        held(&mut v, attr, hold)
    }

    /// Remove a non-directory entry.
    pub fn unlink(&self, parent: Ino, name: &[u8]) -> Result<()> {
        let r = self.unlink_now(parent, name);
        self.dir_synced(&[parent], r)
    }

    fn unlink_now(&self, parent: Ino, name: &[u8]) -> Result<()> {
        self.warm(parent);
        if let Some(r) = self.warming(|v, s| v.unlink_shared(parent, name, s)) {
            return r;
        }
        self.vol().unlink(parent, name)
    }

    /// Remove an empty directory.
    pub fn rmdir(&self, parent: Ino, name: &[u8]) -> Result<()> {
        let r = self.rmdir_now(parent, name);
        self.dir_synced(&[parent], r)
    }

    fn rmdir_now(&self, parent: Ino, name: &[u8]) -> Result<()> {
        self.warm(parent);
        if let Some(r) = self.warming(|v, s| v.rmdir_shared(parent, name, s)) {
            return r;
        }
        self.vol().rmdir(parent, name)
    }

    /// Rename `parent/name` to `newparent/newname` (`renameat2` semantics).
    pub fn rename(
        &self,
        parent: Ino,
        name: &[u8],
        newparent: Ino,
        newname: &[u8],
        flags: RenameFlags,
    ) -> Result<()> {
        let r = self.rename_now(parent, name, newparent, newname, flags);
        self.dir_synced(&[parent, newparent], r)
    }

    fn rename_now(
        &self,
        parent: Ino,
        name: &[u8],
        newparent: Ino,
        newname: &[u8],
        flags: RenameFlags,
    ) -> Result<()> {
        self.warm(parent);
        self.warm(newparent);
        if let Some(r) = self.warming(|v, s| v.rename_shared(parent, name, newparent, newname, flags, s)) {
            return r;
        }
        // A directory moved, or an exchange: both entries (and the first
        // entry of a directory it replaces) found before, with no lock.
        let _ = self.warming(|v, s| v.probe_shared(parent, name, s));
        if let Some(Ok(Some((target, kind)))) = self.warming(|v, s| v.probe_shared(newparent, newname, s)) {
            self.warm(target);
            if kind == FileType::Directory {
                self.warm_tree(target, TreeNeed::FirstEntry);
            }
        }
        self.vol().rename(parent, name, newparent, newname, flags)
    }

    /// Entries of directory `ino` from position `pos` (0 = start), at most
    /// `max` of them. Positions stay valid while entries come and go: an entry
    /// present throughout is returned exactly once. `.` and `..` are not
    /// included.
    pub fn readdir(&self, ino: Ino, pos: u64, max: usize) -> Result<Vec<DirEntry>> {
        self.warm(ino);
        if let Some(r) = self.warming(|v, s| v.readdir_shared(ino, pos, max, s)) {
            return r;
        }
        self.vol().readdir(ino, pos, max)
    }
}
