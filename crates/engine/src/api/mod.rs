//! API layer (top of the engine): the library's public surface. [`Fs`] is a
//! mounted volume; every method is one POSIX-like operation and returns
//! POSIX errors as values. Owns the delta guard (the volume), the commit scheduling and
//! its threads (`commit.rs`), the one-shot answer a blocking fsync waits
//! for (`answer.rs`), and opening an image by path (`image.rs`).
//!
//! This layer holds no filesystem logic: it takes the volume — shared for
//! the operations that may run together (`frontend/shared.rs`: stat,
//! lookup, read, readdir, write, setattr without a size change, handles),
//! exclusively for the rest or when a shared try says it needs more — and
//! calls the frontend (namespace and file operations in cache, `Volume`),
//! which drives the backend. May call every layer below; besides the frontend it
//! uses the backend (mkfs, commit jobs), the device layer (counters) and
//! the base modules.

mod answer;
mod atime;
mod clone;
mod commit;
mod dedupe;
mod defrag;
mod falloc;
mod guard;
mod image;
mod inode_flags;
mod integrity;
mod layout;
mod receive;
mod relocate;
mod relocate_shared;
mod resize;
mod snapshot;
mod trim;

use crate::device::{CounterSnapshot, Device};
use crate::error::Result;
use crate::frontend::{ColdNode, MayLoad, Pressure, ReadNode, Staged, TreeNeed, Volume};
pub use crate::memory_budget::{
    default_clean_limit, default_dir_leaf_limit, default_dirty_limit, default_inode_limit, usable_memory,
};
pub use crate::types::*;
pub use clone::Sharing;
pub use commit::FsyncDone;
use commit::{Phase, Shared, Worker};
pub use dedupe::{DedupeRange, ReadRange};
pub use defrag::{DefragOptions, DefragReport};
pub use image::open_path;
pub use integrity::BadDataReport;
pub use resize::Resized;
use std::sync::Arc;
pub use trim::TrimReport;

/// At most this many nodes are read without the guard for one operation
/// (each read is followed by a new try, which finds the nodes read before
/// in memory or staged); a walk that needs more runs exclusively.
const COLD_ROUNDS: usize = 64;

/// A mounted tux3 volume.
///
/// `Fs` is `Send + Sync`; operations run in cache, most of them in
/// parallel (each under its inode's lock), and a commit's device I/O runs
/// outside every lock they take. A background thread ends a delta
/// every `commit_interval`, and early under dirty pressure. Dropping an `Fs`
/// without [`Fs::close`] loses the uncommitted delta, exactly as a crash
/// would; nothing committed is lost.
pub struct Fs {
    shared: Arc<Shared>,
    /// The delta committer (when `commit_interval` is set) and the fsync
    /// committer (when writable); stopped in this order on close or drop.
    workers: Vec<Worker>,
    /// Wakes the delta committer to commit early (half the dirty limit is dirty).
    wake_committer: Option<crossbeam_channel::Sender<()>>,
}

impl Drop for Fs {
    fn drop(&mut self) {
        for w in self.workers.drain(..) {
            w.stop();
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
        let writable = !opts.read_only;
        let fsync_strict = opts.fsync_strict;
        let shared = Arc::new(Shared::new(Volume::open(dev, opts)?, fsync_strict));
        let mut fs = Fs {
            shared,
            workers: Vec::new(),
            wake_committer: None,
        };
        fs.load_data_errors();
        if let Some(every) = interval {
            let (committer, wake) = Worker::delta_committer(&fs.shared, every)?;
            fs.workers.push(committer);
            fs.wake_committer = Some(wake);
        }
        if writable {
            fs.workers.push(Worker::fsync_committer(&fs.shared)?);
        }
        Ok(fs)
    }

    /// The volume, exclusively.
    fn vol(&self) -> guard::Exclusive<'_, Volume> {
        self.shared.vol()
    }

    /// The volume, shared with other operations of the delta.
    fn shared_vol(&self) -> guard::Shared<'_, Volume> {
        self.shared.shared_vol()
    }

    /// Commit everything and release the device.
    pub fn close(mut self) -> Result<()> {
        for w in self.workers.drain(..) {
            w.stop();
        }
        self.shared.with_commit_lock(|| self.vol().close_in_place())
    }

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

    /// Run a shared operation that may stop at a node only on disk: an
    /// inode-table node the load of an inode it needs reads (the inode a
    /// lookup found, the one an unlink names), or a node of a directory's
    /// or file's tree. The node is read with no guard held
    /// (`frontend/load.rs`), and the operation asked again with the tree
    /// blocks read so far. `None`: run it exclusively (also after
    /// [`COLD_ROUNDS`] nodes: a walk that long reads under the guard).
    fn warming<T>(&self, op: impl Fn(&Volume, &Staged) -> MayLoad<T>) -> Option<Result<T>> {
        let mut staged = Staged::default();
        for _ in 0..COLD_ROUNDS {
            let r = op(&self.shared_vol(), &staged);
            match r? {
                Ok(Ok(v)) => return Some(Ok(v)),
                Ok(Err(cold)) => self.read_cold(cold, &mut staged),
                Err(e) => return Some(Err(e)),
            }
        }
        None
    }

    /// Load inode `ino` into the cache if it is not there, reading the
    /// inode-table nodes on its way with no guard held (`frontend/load.rs`),
    /// so that a freeze never waits for them. The operation that follows
    /// finds it in cache (or, should that fail, loads it under the guard and
    /// reports what went wrong).
    fn warm(&self, ino: Ino) {
        for _ in 0..=crate::codec::MAX_DEPTH {
            let (cold, trim, dir_trim) = {
                let v = self.shared_vol();
                (v.cold_node(ino), v.wants_trim(), v.wants_dir_trim())
            };
            // Loads may take the inode cache past its bound: the commit
            // thread keeps it there, or without one, this thread. (A
            // directory's leaves wait for the commit thread's next turn:
            // waking it early would commit early.)
            match &self.wake_committer {
                Some(wake) if trim => drop(wake.try_send(())),
                None if trim || dir_trim => self.shared.trim_inodes(),
                _ => {}
            }
            match cold {
                Some(cold) => self.read_cold(cold, &mut Staged::default()),
                None => return,
            }
        }
    }

    /// Before an exclusive operation that reads `ino`'s tree: the nodes it
    /// will read (`need`) read now, with no guard held, so that the
    /// operation finds them in memory.
    fn warm_tree(&self, ino: Ino, need: TreeNeed) {
        let _ = self.warming(|v, s| v.tree_shared(ino, need, s));
    }

    /// Before a truncate of `ino` to `size`: the block it cuts into read
    /// now, with no guard held, and kept in cache for it
    /// (`frontend/tail.rs`).
    fn warm_tail(&self, ino: Ino, size: u64) {
        let Some(Ok(Some(plan))) = self.warming(|v, s| v.plan_tail_shared(ino, size, s)) else {
            return;
        };
        if let Ok(tail) = plan.read() {
            self.shared_vol().keep_tail_shared(ino, tail);
        }
    }

    /// Read `cold` with no guard held, then put it in place (an inode-table
    /// node) or keep it in `staged` (a tree block). A read that fails
    /// leaves it to the operation's next try, which reads it under the
    /// guard or reports the error.
    fn read_cold(&self, cold: ColdNode, staged: &mut Staged) {
        if let Ok(ReadNode::Table(ino, loaded)) = cold.read(staged) {
            self.shared_vol().install_cold(ino, loaded);
        }
    }

    /// Attributes of `ino`.
    pub fn getattr(&self, ino: Ino) -> Result<Attr> {
        self.warm(ino);
        if let Some(r) = self.shared_vol().getattr_shared(ino, false) {
            return r;
        }
        self.vol().getattr(ino)
    }

    /// [`Fs::getattr`], and a handle taken on `ino` unless it is a
    /// directory, in one step (as [`Fs::lookup_held`]): for an entry of a
    /// listing the kernel will count as a lookup.
    pub fn getattr_held(&self, ino: Ino) -> Result<Attr> {
        self.warm(ino);
        if let Some(r) = self.shared_vol().getattr_shared(ino, true) {
            return r;
        }
        let mut v = self.vol();
        let attr = v.getattr(ino)?;
        held(&mut v, attr, true)
    }

    /// What the delta committer does each `commit_interval`: commit the
    /// open delta unless it holds access times alone (those wait for a
    /// sync, an unmount or the next real change). Whether it committed.
    pub fn commit_by_time(&self) -> Result<bool> {
        self.shared.commit_by_time(false)
    }

    /// The parent of directory `ino` (the root's is itself); ENOTDIR for
    /// any other file.
    pub fn dir_parent(&self, ino: Ino) -> Result<Ino> {
        self.warm(ino);
        self.vol().dir_parent(ino)
    }

    /// Change attributes of `ino`; a size change truncates or extends.
    pub fn setattr(&self, ino: Ino, set: &SetAttr) -> Result<Attr> {
        self.setattr_stripping(ino, set, StripPrivs::Nothing)
    }

    /// [`Fs::setattr`] that also takes away `strip`'s privileges from a
    /// non-directory, in the same change (after `set`'s mode, if any).
    pub fn setattr_stripping(&self, ino: Ino, set: &SetAttr, strip: StripPrivs) -> Result<Attr> {
        let r = self.setattr_now(ino, set, strip);
        self.synced(ino, r)
    }

    fn setattr_now(&self, ino: Ino, set: &SetAttr, strip: StripPrivs) -> Result<Attr> {
        self.warm(ino);
        if let Some(r) = self.shared_vol().setattr_shared(ino, set, strip) {
            return r;
        }
        if let Some(size) = set.size {
            // A truncate that cuts reads the extent map, and the block it
            // cuts into, under the exclusive guard.
            self.warm_tree(ino, TreeNeed::Cut(size));
            self.warm_tail(ino, size);
        }
        let mut vol = self.vol();
        vol.setattr(ino, set)?;
        vol.strip_privs(ino, strip)?;
        vol.getattr(ino)
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

    /// Take a handle on `ino`: a file was opened, or the kernel looked it
    /// up. While any handle is held, removing its last name keeps the inode
    /// (an orphan) until the last one is released.
    pub fn open_handle(&self, ino: Ino) -> Result<()> {
        if let Some(r) = self.shared_vol().open_handle_shared(ino) {
            return r;
        }
        self.vol().open_handle(ino)
    }

    /// A handle of `ino` was closed; frees an orphan after its last handle.
    pub fn release_handle(&self, ino: Ino) -> Result<()> {
        self.release_handles(ino, 1)
    }

    /// Release `count` handles of `ino` at once (the kernel forgetting
    /// `count` lookups); frees an orphan after its last handle. Releasing
    /// more than are held releases them all.
    pub fn release_handles(&self, ino: Ino, count: u64) -> Result<()> {
        if let Some(r) = self.shared_vol().release_handles_shared(ino, count) {
            return r;
        }
        self.vol().release_handles(ino, count)
    }

    /// `lseek` with `SEEK_DATA` (`data`) or `SEEK_HOLE`: the first offset at
    /// or after `offset` that holds data (or lies in a hole). ENXIO past the
    /// end of file.
    pub fn seek_data(&self, ino: Ino, offset: u64, data: bool) -> Result<u64> {
        self.warm(ino);
        if let Some(r) = self.warming(|v, s| v.seek_data_shared(ino, offset, data, s)) {
            return r;
        }
        self.vol().seek_data(ino, offset, data)
    }

    /// Read up to `size` bytes at `offset`; short only at end of file.
    pub fn read(&self, ino: Ino, offset: u64, size: usize) -> Result<Vec<u8>> {
        // The shared guard is let go at the end of the statement: the
        // device reads run without it.
        self.warm(ino);
        let planned = self.warming(|v, s| v.plan_read_shared(ino, offset, size, s));
        if let Some(r) = planned {
            let r = r.and_then(|p| p.read());
            return self.checked(r).map(|(n, mut out)| {
                out.truncate(n);
                out
            });
        }
        let r = self.vol().read(ino, offset, size);
        self.checked(r)
    }

    /// Read into `out` at `offset`: the number of bytes read, short only at
    /// end of file. Saves [`Fs::read`]'s buffer: file data goes straight
    /// from the device (or the dirty pages) into `out`.
    pub fn read_into(&self, ino: Ino, offset: u64, out: &mut [u8]) -> Result<usize> {
        self.read_into_as(ino, offset, out, None)
    }

    /// [`Fs::read_into`]; with `access`, the read moves `ino`'s access
    /// time as that rule says at that time (`api/atime.rs`).
    fn read_into_as(
        &self,
        ino: Ino,
        offset: u64,
        out: &mut [u8],
        access: Option<(AtimeRule, Timespec)>,
    ) -> Result<usize> {
        self.warm(ino);
        let mut staged = Staged::default();
        for _ in 0..COLD_ROUNDS {
            let planned = self
                .shared_vol()
                .plan_read_into_shared(ino, offset, out, &staged, access);
            match planned {
                Some(Ok(Ok(p))) => return self.checked(p.read().map(|(n, _)| n)),
                Some(Ok(Err(cold))) => self.read_cold(cold, &mut staged),
                Some(Err(e)) => return Err(e),
                None => break,
            }
        }
        let r = self.vol().read_into(ino, offset, out);
        if let (Ok(_), Some((rule, _))) = (&r, access) {
            // A read the shared path could not plan: its access time after
            // it (one that cannot move stays, as there).
            let _ = self.accessed(ino, rule);
        }
        self.checked(r)
    }

    /// Write `data` at `offset`, extending the file as needed. Returns the
    /// number of bytes written (all of them, or an error).
    ///
    /// Backpressure (see [`OpenOptions::dirty_limit`]): a write that would
    /// take dirty file data past the limit first waits for the commit in
    /// flight, or commits the open delta itself when none is. ENOSPC while
    /// a commit is in flight is retried once it is durable (space it pins
    /// comes back, and the write may then commit to make room).
    pub fn write(&self, ino: Ino, offset: u64, data: &[u8]) -> Result<usize> {
        self.write_stripping(ino, offset, data, StripPrivs::Nothing)
    }

    /// [`Fs::write`] that also takes away `strip`'s privileges, in the same
    /// change: what a file server does for a write by a caller it knows.
    /// A write into part of a block whose data fails its checksum fails
    /// with EIO, counted and logged as a read's would be.
    pub fn write_stripping(&self, ino: Ino, offset: u64, data: &[u8], strip: StripPrivs) -> Result<usize> {
        let r = self.write_unchecked(ino, offset, data, strip);
        let r = self.checked(r);
        self.synced(ino, r)
    }

    fn write_unchecked(&self, ino: Ino, offset: u64, data: &[u8], strip: StripPrivs) -> Result<usize> {
        self.warm(ino);
        if let Some(r) = self.shared_vol().write_shared(ino, offset, data, strip) {
            let w = r?;
            if let (true, Some(wake)) = (w.wants_commit, &self.wake_committer) {
                let _ = wake.try_send(());
            }
            return Ok(w.bytes);
        }
        loop {
            let mut vol = self.vol();
            match vol.write_pressure(ino, offset, data.len()) {
                Pressure::Clear => {
                    let in_flight = vol.commit_in_flight();
                    // P5: a write that fits leaves the dirty data held
                    // within the limit (one that does not is a write alone,
                    // or one no commit could make room for).
                    let fits = cfg!(debug_assertions) && vol.write_fits(ino, offset, data.len());
                    let written = vol.write(ino, offset, data).and_then(|n| {
                        if n > 0 {
                            vol.strip_privs(ino, strip)?;
                        }
                        Ok(n)
                    });
                    let n = match written {
                        Err(e) if in_flight && e.errno() == crate::error::Errno::ENOSPC => {
                            drop(vol);
                            self.waiting(|| self.shared.with_commit_lock(|| ()));
                            continue;
                        }
                        r => r?,
                    };
                    debug_assert!(
                        !fits || vol.held_bytes() <= vol.dirty_limit(),
                        "P5: a write within the dirty limit left {} bytes held (limit {})",
                        vol.held_bytes(),
                        vol.dirty_limit()
                    );
                    let early = vol.wants_commit(ino);
                    drop(vol);
                    if let (true, Some(wake)) = (early, &self.wake_committer) {
                        let _ = wake.try_send(());
                    }
                    return Ok(n);
                }
                Pressure::WaitCommit => {
                    drop(vol);
                    self.waiting(|| self.shared.with_commit_lock(|| ()));
                }
                Pressure::Commit => {
                    drop(vol);
                    // (A commit started meanwhile may hold the lock.)
                    self.waiting(|| self.shared.commit(false))?;
                }
            }
        }
    }

    /// A write waiting for a commit (the one in flight, or its own behind
    /// it) in `wait`, counted in [`Fs::pending_writes`] meanwhile.
    fn waiting<T>(&self, wait: impl FnOnce() -> T) -> T {
        let count = &self.shared.writes_waiting;
        count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let r = wait();
        count.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        r
    }

    /// Whether [`Fs::write`] of `len` bytes at `offset` of `ino` would
    /// wait now, for a commit that brings dirty data back under the limit
    /// (a hint: the answer may change before the write runs).
    pub fn write_would_wait(&self, ino: Ino, offset: u64, len: usize) -> bool {
        self.shared_vol().write_would_wait(ino, offset, len)
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

    /// Volume statistics: free blocks as the allocator counts them, and
    /// what an ordinary change may still take, less the reserve kept for
    /// deletes and commits (ARCHITECTURE.md, *Full volumes*).
    pub fn statfs(&self) -> Result<StatFs> {
        self.shared_vol().statfs()
    }

    /// Value of extended attribute `name`; ENODATA when absent.
    pub fn getxattr(&self, ino: Ino, name: &[u8]) -> Result<Vec<u8>> {
        self.warm(ino);
        if let Some(r) = self.shared_vol().getxattr_shared(ino, name) {
            return r;
        }
        self.vol().getxattr(ino, name)
    }

    /// Set extended attribute `name`.
    pub fn setxattr(&self, ino: Ino, name: &[u8], value: &[u8], mode: XattrMode) -> Result<()> {
        self.warm(ino);
        self.vol().setxattr(ino, name, value, mode)
    }

    /// Names of all extended attributes of `ino`, sorted.
    pub fn listxattr(&self, ino: Ino) -> Result<Vec<Vec<u8>>> {
        self.warm(ino);
        if let Some(r) = self.shared_vol().listxattr_shared(ino) {
            return r;
        }
        self.vol().listxattr(ino)
    }

    /// Remove extended attribute `name`; ENODATA when absent.
    pub fn removexattr(&self, ino: Ino, name: &[u8]) -> Result<()> {
        self.warm(ino);
        self.vol().removexattr(ino, name)
    }

    /// Make `ino`'s data and metadata durable. Fast (the default): only
    /// this inode's changes and the new entry naming it go out, ahead of the
    /// open delta, with one flush; concurrent fsyncs share one commit. With
    /// `fsync_strict`, the whole delta commits (strict ordering).
    /// With `datasync` (fdatasync), nothing is written when only attributes
    /// that reading the data back does not need (times, mode, owner,
    /// xattrs) changed since the data, size and names were last durable;
    /// otherwise it is an fsync (the inode record rides along anyway).
    pub fn fsync(&self, ino: Ino, datasync: bool) -> Result<()> {
        // Answered EIO if the callback is dropped without being called.
        let eio = Err(crate::error::Error::Posix(crate::error::Errno::EIO));
        let (giver, waiter) = answer::for_this_thread(eio);
        self.fsync_then(ino, datasync, Box::new(move |r| giver.give(r)));
        waiter.wait()
    }

    /// [`Fs::fsync`] without waiting: `done` is called with the outcome once
    /// the commit that covers `ino` is durable (from the fsync committer
    /// thread), or at once for an unknown inode or a read-only volume. Every
    /// fsync queued while a commit is in flight joins the next group commit,
    /// so a server can keep thousands of fsyncs waiting on a few threads.
    pub fn fsync_then(&self, ino: Ino, datasync: bool, done: FsyncDone) {
        if let Some(done) = self.fsync_at_once(ino, datasync, done) {
            self.shared.fsync(ino, done);
        }
    }

    /// Answer an fsync that needs no commit — an unknown inode (its error),
    /// a read-only volume or an fdatasync with no data to make durable
    /// (nothing to do) — and give `done` back otherwise.
    fn fsync_at_once(&self, ino: Ino, datasync: bool, done: FsyncDone) -> Option<FsyncDone> {
        // (An inode let go of since its last change is loaded again here,
        // so that the check below runs shared.)
        self.warm(ino);
        let strict = self.shared.fsync_strict();
        let shared = self.shared_vol().fsync_needless_shared(ino, datasync, strict);
        let ready = shared.unwrap_or_else(|| {
            let mut v = self.vol();
            let needless = datasync && !self.shared.fsync_strict() && v.datasync_needless(ino);
            v.getattr(ino).map(|_| v.is_read_only() || needless)
        });
        match ready {
            Err(e) => done(Err(e)),
            Ok(true) => done(Ok(())),
            Ok(false) => return Some(done),
        }
        None
    }

    /// [`Fs::fsync`] of several inodes queued at once, so that one group
    /// commit serves them all (as concurrent fsyncs share one); waits for
    /// all. For tests of group commits.
    #[doc(hidden)]
    pub fn fsync_group(&self, inos: &[Ino]) -> Result<()> {
        let (tx, rx) = crossbeam_channel::unbounded();
        let mut queued = Vec::new();
        for &ino in inos {
            let tx = tx.clone();
            let done: FsyncDone = Box::new(move |r| {
                let _ = tx.send(r);
            });
            if let Some(done) = self.fsync_at_once(ino, false, done) {
                queued.push((ino, done));
            }
        }
        self.shared.queue_fsyncs(queued);
        drop(tx);
        let mut out = Ok(());
        for r in rx.iter() {
            if out.is_ok() {
                out = r;
            }
        }
        out
    }

    /// Make everything done before this call durable: commit the current
    /// delta and wait. Concurrent syncs share one commit (one that froze
    /// after a sync was called serves it).
    pub fn sync(&self) -> Result<()> {
        self.shared.sync()
    }

    /// Writes waiting for the commit in flight, under dirty pressure or for
    /// the space it pins (for tests).
    #[doc(hidden)]
    pub fn pending_writes(&self) -> usize {
        self.shared
            .writes_waiting
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Syncs waiting for a commit to serve them (for tests).
    #[doc(hidden)]
    pub fn pending_syncs(&self) -> usize {
        self.shared.syncs_waiting()
    }

    /// [`Fs::sync`], calling `during` while the commit is in flight: after
    /// its data is written, before its log. For tests of what may happen
    /// meanwhile (an fsync commit may go ahead of it); `during` must not
    /// wait for this commit.
    #[doc(hidden)]
    pub fn sync_with(&self, during: impl FnOnce()) -> Result<()> {
        self.shared.commit_with(false, Phase::Data, during)
    }

    /// [`Fs::sync`], calling `during` once the commit's log is written,
    /// before its flush: fsync commits made meanwhile follow it in the log
    /// (see [`Fs::sync_with`]).
    #[doc(hidden)]
    pub fn sync_with_log_written(&self, during: impl FnOnce()) -> Result<()> {
        self.shared.commit_with(false, Phase::LogWritten, during)
    }

    /// [`Fs::unify`], calling `during` while the unify writes its data and
    /// metadata, before its superblock (see [`Fs::sync_with`]).
    #[doc(hidden)]
    pub fn unify_with(&self, during: impl FnOnce()) -> Result<()> {
        self.shared.commit_with(true, Phase::Data, during)
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
        self.shared_vol().xattr_space()
    }

    /// Fsyncs waiting to join the next group commit (for tests).
    #[doc(hidden)]
    pub fn pending_fsyncs(&self) -> usize {
        self.shared.queued_fsyncs()
    }

    /// The fsync committer waits for a large group's flush before it takes
    /// the next group (for tests).
    #[doc(hidden)]
    pub fn fsync_committer_holds_back(&self) -> bool {
        self.shared.committer_holds_back()
    }

    /// A delta commit that let fsync commits go ahead of it waits for them
    /// to be durable before it encodes its log (for tests).
    #[doc(hidden)]
    pub fn delta_waits_for_fsyncs(&self) -> bool {
        self.shared.delta_waits_for_fsyncs()
    }

    /// The device's I/O counters.
    pub fn counters(&self) -> CounterSnapshot {
        self.shared_vol().device().counters()
    }

    /// Engine statistics: deltas committed, unifies, log length, and the
    /// dirty file data held in memory (open delta and commit in flight).
    pub fn stats(&self) -> crate::frontend::Stats {
        self.shared_vol().stats()
    }

    /// Leaves of `ino`'s tree (a directory's entries, a file's extents)
    /// held in memory, as the bound on a directory's leaves counts them
    /// ([`OpenOptions::dir_leaf_limit`]); 0 for an inode not in cache.
    pub fn cached_leaves(&self, ino: Ino) -> u64 {
        self.shared_vol().cached_leaves(ino)
    }
}

/// `attr`, with a handle taken on it if `hold`: the end of a `*_held`
/// operation on the exclusive path, in the same hold as the rest.
fn held(v: &mut Volume, attr: Attr, hold: bool) -> Result<Attr> {
    if hold {
        v.not_xattr_file(attr.ino)?;
        v.open_handle(attr.ino)?;
    }
    Ok(attr)
}
