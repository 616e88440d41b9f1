//! Engine API: the library's public surface. [`Fs`] is a mounted volume; every
//! method is one POSIX-like operation and returns POSIX errors as values.
//!
//! This layer holds no filesystem logic: it takes the volume lock and calls the
//! frontend (namespace and file operations in cache) or the backend (commit).

pub mod types;

use crate::device::{CounterSnapshot, Device};
use crate::error::Result;
use crate::frontend::fsync::FsyncPlan;
use crate::frontend::Volume;
use crossbeam_channel::{bounded, RecvTimeoutError, Sender};
use parking_lot::{Mutex, MutexGuard};
use std::sync::Arc;
use std::thread::JoinHandle;
pub use types::*;

/// A mounted tux3 volume.
///
/// `Fs` is `Send + Sync`; operations run in cache under one lock, and a
/// commit's device I/O runs outside it. A background thread ends a delta
/// every `commit_interval`. Dropping an `Fs` without [`Fs::close`] loses the
/// uncommitted delta, exactly as a crash would; nothing committed is lost.
pub struct Fs {
    shared: Arc<Shared>,
    flusher: Option<Flusher>,
}

/// State shared with the background commit thread.
struct Shared {
    volume: Mutex<Volume>,
    /// Serializes commits: held from freeze to finish, so fsyncs arriving
    /// while a commit is in flight wait and then share the next one.
    commit: Mutex<()>,
    /// Inodes whose fsync is waiting for the commit lock (group commit).
    pending_fsyncs: Mutex<std::collections::HashSet<Ino>>,
    /// `fsync` commits the whole delta (strict ordering).
    fsync_strict: bool,
}

/// The background thread that ends deltas by time.
struct Flusher {
    stop: Sender<()>,
    thread: JoinHandle<()>,
}

impl Shared {
    /// Freeze the delta under the volume lock, write it without the lock
    /// (other operations go on in the next delta meanwhile), then finish.
    /// Callers that find nothing to commit return at once: everything before
    /// them is durable, because commits are serialized.
    fn commit(&self, unify: bool) -> Result<()> {
        let _serial = self.commit.lock();
        self.commit_locked(unify)
    }

    /// A full commit; the caller holds the commit lock.
    fn commit_locked(&self, unify: bool) -> Result<()> {
        let Some(mut job) = self.volume.lock().freeze(unify)? else {
            return Ok(());
        };
        let r = job.write();
        self.volume.lock().finish(job, r)
    }

    /// fsync with group commit: register, wait for the commit lock; if a
    /// commit meanwhile took this inode, it is durable (that commit finished
    /// before the lock was free); otherwise commit every registered inode
    /// in one fsync commit — one log write and one flush for the group.
    fn fsync(&self, ino: Ino) -> Result<()> {
        self.pending_fsyncs.lock().insert(ino);
        let _serial = self.commit.lock();
        let group: Vec<Ino> = {
            let mut pending = self.pending_fsyncs.lock();
            if !pending.contains(&ino) {
                return Ok(());
            }
            pending.drain().collect()
        };
        let plan = self.volume.lock().fsync_plan(&group)?;
        match plan {
            FsyncPlan::Nothing => Ok(()),
            FsyncPlan::Full => self.commit_locked(false),
            FsyncPlan::Job(mut job) => {
                let r = job.write();
                self.volume.lock().finish(*job, r)
            }
        }
    }
}

impl Flusher {
    /// Start the thread; it holds only a weak reference to the volume.
    fn start(shared: &Arc<Shared>, every: std::time::Duration) -> Result<Flusher> {
        let (stop, stopped) = bounded::<()>(1);
        let weak = Arc::downgrade(shared);
        let thread = std::thread::Builder::new()
            .name("tux3-commit".into())
            .spawn(move || loop {
                if !matches!(stopped.recv_timeout(every), Err(RecvTimeoutError::Timeout)) {
                    return;
                }
                let Some(shared) = weak.upgrade() else { return };
                if let Err(e) = shared.commit(false) {
                    tracing::error!("periodic commit failed: {e}");
                }
            })?;
        Ok(Flusher { stop, thread })
    }

    fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.thread.join();
    }
}

impl Drop for Fs {
    fn drop(&mut self) {
        if let Some(f) = self.flusher.take() {
            f.stop();
        }
    }
}

impl Fs {
    /// Write a new, empty volume to `dev`, replacing whatever was there.
    pub fn format(dev: Arc<dyn Device>, opts: &FormatOptions) -> Result<()> {
        crate::backend::mkfs::format(dev.as_ref(), opts)
    }

    /// Open the volume on `dev`: read the superblock and replay the log into
    /// cache. Replay writes nothing to the device.
    pub fn open(dev: Arc<dyn Device>, opts: OpenOptions) -> Result<Fs> {
        let interval = opts.commit_interval.filter(|_| !opts.read_only);
        let fsync_strict = opts.fsync_strict;
        let shared = Arc::new(Shared {
            volume: Mutex::new(Volume::open(dev, opts)?),
            commit: Mutex::new(()),
            pending_fsyncs: Mutex::new(Default::default()),
            fsync_strict,
        });
        let flusher = match interval {
            Some(every) => Some(Flusher::start(&shared, every)?),
            None => None,
        };
        Ok(Fs { shared, flusher })
    }

    fn vol(&self) -> MutexGuard<'_, Volume> {
        self.shared.volume.lock()
    }

    /// Commit everything and release the device.
    pub fn close(mut self) -> Result<()> {
        if let Some(f) = self.flusher.take() {
            f.stop();
        }
        let _serial = self.shared.commit.lock();
        self.vol().close_in_place()
    }

    /// Find `name` in directory `parent`.
    pub fn lookup(&self, parent: Ino, name: &[u8]) -> Result<Attr> {
        self.vol().lookup(parent, name)
    }

    /// Attributes of `ino`.
    pub fn getattr(&self, ino: Ino) -> Result<Attr> {
        self.vol().getattr(ino)
    }

    /// Change attributes of `ino`; a size change truncates or extends.
    pub fn setattr(&self, ino: Ino, set: &SetAttr) -> Result<Attr> {
        self.vol().setattr(ino, set)
    }

    /// Create a regular file. `mode` holds the permission bits.
    pub fn create(&self, parent: Ino, name: &[u8], mode: u32, uid: u32, gid: u32) -> Result<Attr> {
        self.vol()
            .mknod(parent, name, libc::S_IFREG | (mode & 0o7777), 0, uid, gid)
    }

    /// Create a node of any non-directory type: `mode` carries the `S_IFMT`
    /// bits (regular, fifo, character or block device, socket).
    pub fn mknod(&self, parent: Ino, name: &[u8], mode: u32, rdev: u64, uid: u32, gid: u32) -> Result<Attr> {
        self.vol().mknod(parent, name, mode, rdev, uid, gid)
    }

    /// Create a directory.
    pub fn mkdir(&self, parent: Ino, name: &[u8], mode: u32, uid: u32, gid: u32) -> Result<Attr> {
        self.vol()
            .mknod(parent, name, libc::S_IFDIR | (mode & 0o7777), 0, uid, gid)
    }

    /// Create a symbolic link to `target`.
    pub fn symlink(&self, parent: Ino, name: &[u8], target: &[u8], uid: u32, gid: u32) -> Result<Attr> {
        self.vol().symlink(parent, name, target, uid, gid)
    }

    /// The target of symlink `ino`.
    pub fn readlink(&self, ino: Ino) -> Result<Vec<u8>> {
        self.vol().readlink(ino)
    }

    /// Add a hard link `newparent/newname` to `ino`.
    pub fn link(&self, ino: Ino, newparent: Ino, newname: &[u8]) -> Result<Attr> {
        self.vol().link(ino, newparent, newname)
    }

    /// Remove a non-directory entry.
    pub fn unlink(&self, parent: Ino, name: &[u8]) -> Result<()> {
        self.vol().unlink(parent, name)
    }

    /// Remove an empty directory.
    pub fn rmdir(&self, parent: Ino, name: &[u8]) -> Result<()> {
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
        self.vol().rename(parent, name, newparent, newname, flags)
    }

    /// A file was opened: while any handle is open, removing its last name
    /// keeps the inode (an orphan) until the last [`Fs::release_handle`].
    pub fn open_handle(&self, ino: Ino) -> Result<()> {
        self.vol().open_handle(ino)
    }

    /// A handle of `ino` was closed; frees an orphan after its last handle.
    pub fn release_handle(&self, ino: Ino) -> Result<()> {
        self.vol().release_handle(ino)
    }

    /// `lseek` with `SEEK_DATA` (`data`) or `SEEK_HOLE`: the first offset at
    /// or after `offset` that holds data (or lies in a hole). ENXIO past the
    /// end of file.
    pub fn seek_data(&self, ino: Ino, offset: u64, data: bool) -> Result<u64> {
        self.vol().seek_data(ino, offset, data)
    }

    /// Read up to `size` bytes at `offset`; short only at end of file.
    pub fn read(&self, ino: Ino, offset: u64, size: usize) -> Result<Vec<u8>> {
        self.vol().read(ino, offset, size)
    }

    /// Write `data` at `offset`, extending the file as needed. Returns the
    /// number of bytes written (all of them, or an error).
    pub fn write(&self, ino: Ino, offset: u64, data: &[u8]) -> Result<usize> {
        let n = self.vol().write(ino, offset, data)?;
        // Backpressure: past the dirty limit the writer commits, waiting
        // first for any commit in flight, so dirty memory stays bounded.
        if self.vol().over_dirty_limit() {
            self.shared.commit(false)?;
        }
        Ok(n)
    }

    /// Entries of directory `ino` from position `pos` (0 = start), at most
    /// `max` of them. Positions stay valid while entries come and go: an entry
    /// present throughout is returned exactly once. `.` and `..` are not
    /// included.
    pub fn readdir(&self, ino: Ino, pos: u64, max: usize) -> Result<Vec<DirEntry>> {
        self.vol().readdir(ino, pos, max)
    }

    /// Volume statistics.
    pub fn statfs(&self) -> Result<StatFs> {
        self.vol().statfs()
    }

    /// Value of extended attribute `name`; ENODATA when absent.
    pub fn getxattr(&self, ino: Ino, name: &[u8]) -> Result<Vec<u8>> {
        self.vol().getxattr(ino, name)
    }

    /// Set extended attribute `name`.
    pub fn setxattr(&self, ino: Ino, name: &[u8], value: &[u8], mode: XattrMode) -> Result<()> {
        self.vol().setxattr(ino, name, value, mode)
    }

    /// Names of all extended attributes of `ino`, sorted.
    pub fn listxattr(&self, ino: Ino) -> Result<Vec<Vec<u8>>> {
        self.vol().listxattr(ino)
    }

    /// Remove extended attribute `name`; ENODATA when absent.
    pub fn removexattr(&self, ino: Ino, name: &[u8]) -> Result<()> {
        self.vol().removexattr(ino, name)
    }

    /// Make `ino`'s data and metadata durable. Fast (the default): only
    /// this inode's changes and the new entry naming it go out, ahead of the
    /// open delta, with one flush; concurrent fsyncs share one commit. With
    /// `fsync_strict`, the whole delta commits (strict ordering).
    /// `datasync` makes no difference: the inode record rides along anyway.
    pub fn fsync(&self, ino: Ino, _datasync: bool) -> Result<()> {
        self.vol().getattr(ino)?;
        if self.shared.fsync_strict {
            return self.shared.commit(false);
        }
        self.shared.fsync(ino)
    }

    /// Commit the current delta and wait until it is durable.
    pub fn sync(&self) -> Result<()> {
        self.shared.commit(false)
    }

    /// Commit and then unify: write all retained metadata and restart the log.
    pub fn unify(&self) -> Result<()> {
        if self.vol().is_read_only() {
            return Err(crate::error::Error::Posix(crate::error::Errno::EROFS));
        }
        self.shared.commit(true)
    }

    /// Largest total size of one inode's extended attributes, in bytes
    /// (each attribute costs its name length + value length + 4).
    pub fn xattr_space(&self) -> usize {
        self.vol().xattr_space()
    }

    /// Fsyncs waiting to join the next group commit (for tests).
    #[doc(hidden)]
    pub fn pending_fsyncs(&self) -> usize {
        self.shared.pending_fsyncs.lock().len()
    }

    /// The device's I/O counters.
    pub fn counters(&self) -> CounterSnapshot {
        self.vol().device().counters()
    }

    /// Engine statistics: deltas committed, unifies, log length.
    pub fn stats(&self) -> crate::frontend::Stats {
        self.vol().stats()
    }
}
