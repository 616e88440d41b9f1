//! Engine API: the library's public surface. [`Fs`] is a mounted volume; every
//! method is one POSIX-like operation and returns POSIX errors as values.
//!
//! This layer holds no filesystem logic: it takes the volume lock and calls the
//! frontend (namespace and file operations in cache) or the backend (commit).

pub mod types;

use crate::device::{CounterSnapshot, Device};
use crate::error::Result;
use crate::frontend::Volume;
use parking_lot::Mutex;
use std::sync::Arc;
pub use types::*;

/// A mounted tux3 volume.
///
/// `Fs` is `Send + Sync`; operations from several threads are serialized on
/// one lock. Dropping an `Fs` without [`Fs::close`] loses the uncommitted
/// delta, exactly as a crash would; nothing committed is lost.
pub struct Fs {
    volume: Mutex<Volume>,
    /// Serializes commits: held from freeze to finish, so fsyncs arriving
    /// while a commit is in flight wait and then share the next one.
    commit: Mutex<()>,
}

impl Fs {
    /// Write a new, empty volume to `dev`, replacing whatever was there.
    pub fn format(dev: Arc<dyn Device>, opts: &FormatOptions) -> Result<()> {
        crate::backend::mkfs::format(dev.as_ref(), opts)
    }

    /// Open the volume on `dev`: read the superblock and replay the log into
    /// cache. Replay writes nothing to the device.
    pub fn open(dev: Arc<dyn Device>, opts: OpenOptions) -> Result<Fs> {
        Ok(Fs {
            volume: Mutex::new(Volume::open(dev, opts)?),
            commit: Mutex::new(()),
        })
    }

    /// Commit everything and release the device.
    pub fn close(self) -> Result<()> {
        self.volume.into_inner().close()
    }

    /// Find `name` in directory `parent`.
    pub fn lookup(&self, parent: Ino, name: &[u8]) -> Result<Attr> {
        self.volume.lock().lookup(parent, name)
    }

    /// Attributes of `ino`.
    pub fn getattr(&self, ino: Ino) -> Result<Attr> {
        self.volume.lock().getattr(ino)
    }

    /// Change attributes of `ino`; a size change truncates or extends.
    pub fn setattr(&self, ino: Ino, set: &SetAttr) -> Result<Attr> {
        self.volume.lock().setattr(ino, set)
    }

    /// Create a regular file. `mode` holds the permission bits.
    pub fn create(&self, parent: Ino, name: &[u8], mode: u32, uid: u32, gid: u32) -> Result<Attr> {
        self.volume
            .lock()
            .mknod(parent, name, libc::S_IFREG | (mode & 0o7777), 0, uid, gid)
    }

    /// Create a node of any non-directory type: `mode` carries the `S_IFMT`
    /// bits (regular, fifo, character or block device, socket).
    pub fn mknod(&self, parent: Ino, name: &[u8], mode: u32, rdev: u64, uid: u32, gid: u32) -> Result<Attr> {
        self.volume.lock().mknod(parent, name, mode, rdev, uid, gid)
    }

    /// Create a directory.
    pub fn mkdir(&self, parent: Ino, name: &[u8], mode: u32, uid: u32, gid: u32) -> Result<Attr> {
        self.volume
            .lock()
            .mknod(parent, name, libc::S_IFDIR | (mode & 0o7777), 0, uid, gid)
    }

    /// Create a symbolic link to `target`.
    pub fn symlink(&self, parent: Ino, name: &[u8], target: &[u8], uid: u32, gid: u32) -> Result<Attr> {
        self.volume.lock().symlink(parent, name, target, uid, gid)
    }

    /// The target of symlink `ino`.
    pub fn readlink(&self, ino: Ino) -> Result<Vec<u8>> {
        self.volume.lock().readlink(ino)
    }

    /// Add a hard link `newparent/newname` to `ino`.
    pub fn link(&self, ino: Ino, newparent: Ino, newname: &[u8]) -> Result<Attr> {
        self.volume.lock().link(ino, newparent, newname)
    }

    /// Remove a non-directory entry.
    pub fn unlink(&self, parent: Ino, name: &[u8]) -> Result<()> {
        self.volume.lock().unlink(parent, name)
    }

    /// Remove an empty directory.
    pub fn rmdir(&self, parent: Ino, name: &[u8]) -> Result<()> {
        self.volume.lock().rmdir(parent, name)
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
        self.volume.lock().rename(parent, name, newparent, newname, flags)
    }

    /// A file was opened: while any handle is open, removing its last name
    /// keeps the inode (an orphan) until the last [`Fs::release_handle`].
    pub fn open_handle(&self, ino: Ino) -> Result<()> {
        self.volume.lock().open_handle(ino)
    }

    /// A handle of `ino` was closed; frees an orphan after its last handle.
    pub fn release_handle(&self, ino: Ino) -> Result<()> {
        self.volume.lock().release_handle(ino)
    }

    /// `lseek` with `SEEK_DATA` (`data`) or `SEEK_HOLE`: the first offset at
    /// or after `offset` that holds data (or lies in a hole). ENXIO past the
    /// end of file.
    pub fn seek_data(&self, ino: Ino, offset: u64, data: bool) -> Result<u64> {
        self.volume.lock().seek_data(ino, offset, data)
    }

    /// Read up to `size` bytes at `offset`; short only at end of file.
    pub fn read(&self, ino: Ino, offset: u64, size: usize) -> Result<Vec<u8>> {
        self.volume.lock().read(ino, offset, size)
    }

    /// Write `data` at `offset`, extending the file as needed. Returns the
    /// number of bytes written (all of them, or an error).
    pub fn write(&self, ino: Ino, offset: u64, data: &[u8]) -> Result<usize> {
        let n = self.volume.lock().write(ino, offset, data)?;
        if self.volume.lock().over_dirty_limit() {
            self.commit(false)?;
        }
        Ok(n)
    }

    /// Entries of directory `ino` from position `pos` (0 = start), at most
    /// `max` of them. Positions stay valid while entries come and go: an entry
    /// present throughout is returned exactly once. `.` and `..` are not
    /// included.
    pub fn readdir(&self, ino: Ino, pos: u64, max: usize) -> Result<Vec<DirEntry>> {
        self.volume.lock().readdir(ino, pos, max)
    }

    /// Volume statistics.
    pub fn statfs(&self) -> Result<StatFs> {
        self.volume.lock().statfs()
    }

    /// Value of extended attribute `name`; ENODATA when absent.
    pub fn getxattr(&self, ino: Ino, name: &[u8]) -> Result<Vec<u8>> {
        self.volume.lock().getxattr(ino, name)
    }

    /// Set extended attribute `name`.
    pub fn setxattr(&self, ino: Ino, name: &[u8], value: &[u8], mode: XattrMode) -> Result<()> {
        self.volume.lock().setxattr(ino, name, value, mode)
    }

    /// Names of all extended attributes of `ino`, sorted.
    pub fn listxattr(&self, ino: Ino) -> Result<Vec<Vec<u8>>> {
        self.volume.lock().listxattr(ino)
    }

    /// Remove extended attribute `name`; ENODATA when absent.
    pub fn removexattr(&self, ino: Ino, name: &[u8]) -> Result<()> {
        self.volume.lock().removexattr(ino, name)
    }

    /// Make `ino`'s data (and, unless `datasync`, its metadata) durable.
    /// In this version it commits the whole current delta.
    pub fn fsync(&self, ino: Ino, _datasync: bool) -> Result<()> {
        self.volume.lock().getattr(ino)?;
        self.commit(false)
    }

    /// Commit the current delta and wait until it is durable.
    pub fn sync(&self) -> Result<()> {
        self.commit(false)
    }

    /// Commit and then unify: write all retained metadata and restart the log.
    pub fn unify(&self) -> Result<()> {
        if self.volume.lock().is_read_only() {
            return Err(crate::error::Error::Posix(crate::error::Errno::EROFS));
        }
        self.commit(true)
    }

    /// Freeze the delta under the volume lock, write it without the lock
    /// (other operations go on in the next delta meanwhile), then finish.
    /// Callers that find nothing to commit return at once: everything before
    /// them is durable, because commits are serialized.
    fn commit(&self, unify: bool) -> Result<()> {
        let _serial = self.commit.lock();
        let Some(mut job) = self.volume.lock().freeze(unify)? else {
            return Ok(());
        };
        let r = job.write();
        self.volume.lock().finish(job, r)
    }

    /// Largest total size of one inode's extended attributes, in bytes
    /// (each attribute costs its name length + value length + 4).
    pub fn xattr_space(&self) -> usize {
        self.volume.lock().xattr_space()
    }

    /// The device's I/O counters.
    pub fn counters(&self) -> CounterSnapshot {
        self.volume.lock().device().counters()
    }

    /// Engine statistics: deltas committed, unifies, log length.
    pub fn stats(&self) -> crate::frontend::Stats {
        self.volume.lock().stats()
    }
}
