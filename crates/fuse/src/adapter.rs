//! The adapter's state and the helpers its requests share, whichever
//! transport brought them (`/dev/fuse` or io_uring; both decoded by
//! `uring/dispatch.rs`): the `Fs` being served, the mount options, the parent of each
//! directory the kernel knows (for the `..` entry of `readdir`; learned from
//! lookups, dropped on forget), and the request logic both transports
//! answer from. The ioctls the server answers itself are in `ioctls.rs`.
//!
//! Calls only [`tux3::Fs`].

use super::forgets::ForgetBatcher;
use super::idle_poll::Waker;
use super::listing::ListingAdvice;
use super::remount::Live;
use super::uring::args::CopyFileRangeIn;
use super::FuseOptions;
use fuser::{INodeNo, Notifier};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use tux3::error::{Errno, Error, Result};
use tux3::types::{Attr, FileType, Ino, SetAttr, StripPrivs, Timespec, XattrMode, ROOT_INO};
use tux3::Fs;

/// The most a `FUSE_COPY_FILE_RANGE` clones: its reply counts the bytes
/// in 32 bits. A multiple of 1 MiB, so every chunk but the last starts
/// and ends on a block boundary and shares whole blocks.
pub(super) const COPY_RANGE_32_MAX: u64 = (u32::MAX as u64) & !((1 << 20) - 1);

/// Directory entries fetched from the engine per `readdir` call; a reply
/// buffer (one page) holds about this many entries with short names.
const READDIR_BATCH: usize = 128;

/// The same for `readdirplus`, whose entries carry their attributes: a
/// page holds about 25 of them.
const READDIRPLUS_BATCH: usize = 32;

/// A mounted volume as a FUSE filesystem. Clones share one state: fuser
/// holds one (for INIT), each request thread another.
#[derive(Clone)]
pub struct Tux3Fuse {
    pub(super) fs: Arc<Fs>,
    pub(super) opts: FuseOptions,
    /// Parent of each directory the kernel holds an inode for.
    pub(super) parents: Arc<Mutex<HashMap<Ino, Ino>>>,
    /// The kernel leaves taking privileges away on write, truncate and
    /// chown to us (`FUSE_HANDLE_KILLPRIV_V2`), so it need not ask for
    /// `security.capability` before every write. Set at INIT.
    strips_privs: Arc<AtomicBool>,
    /// The kernel agreed at INIT to send requests through io_uring.
    uring: Arc<AtomicBool>,
    /// The kernel enforces POSIX ACLs and leaves the umask to us
    /// (`FUSE_POSIX_ACL`, `FUSE_DONT_MASK`). Set at INIT.
    acls: Arc<AtomicBool>,
    /// Sends invalidations to the kernel; set once the session exists.
    notifier: Arc<OnceLock<Notifier>>,
    /// Whether listings carry attributes (io_uring only).
    pub(super) listings: Arc<ListingAdvice>,
    /// Wakes the idle pollers (`-o idle_poll`); set before the queues start.
    idle: Arc<OnceLock<Waker>>,
    /// Gathers FORGETs into batches while the io_uring queues are up.
    pub(super) forgets: Arc<ForgetBatcher>,
    /// What a remount may change (`remount.rs`).
    pub(super) live: Arc<Live>,
    /// The scrub the server runs (`scrub.rs`).
    pub(super) scrub: Arc<super::scrub::ScrubSlot>,
    /// The dedupe the server runs (`dedupe.rs`).
    pub(super) dedupe: Arc<super::dedupe::DedupeSlot>,
}

impl Tux3Fuse {
    /// Serve `fs` with the given options.
    pub fn new(fs: Arc<Fs>, opts: FuseOptions) -> Tux3Fuse {
        Tux3Fuse {
            fs,
            parents: Arc::new(Mutex::new(HashMap::new())),
            strips_privs: Arc::new(AtomicBool::new(false)),
            uring: Arc::new(AtomicBool::new(false)),
            acls: Arc::new(AtomicBool::new(false)),
            notifier: Arc::new(OnceLock::new()),
            listings: Arc::default(),
            idle: Arc::new(OnceLock::new()),
            forgets: Arc::default(),
            live: Arc::new(Live::new(opts.read_only, opts.atime_rule, opts.diratime)),
            scrub: Arc::default(),
            dedupe: Arc::default(),
            opts,
        }
    }

    /// Give the adapter the session's notifier (once it is mounted).
    pub(super) fn set_notifier(&self, notifier: Notifier) {
        let _ = self.notifier.set(notifier);
    }

    /// `ino`'s attributes changed without the kernel knowing (privileges
    /// taken away by a write): drop the kernel's copy, so its next
    /// permission check or `stat` asks again. Sent before the request's
    /// reply, so the caller never sees the old attributes after it.
    pub(super) fn attrs_changed(&self, ino: Ino) {
        if let Some(n) = self.notifier.get() {
            // Offset -1: the attributes only, not the cached pages. ENOENT
            // means the kernel holds no such inode: nothing to drop.
            if let Err(e) = n.inval_inode(INodeNo(ino), -1, 0) {
                if e.raw_os_error() != Some(libc::ENOENT) {
                    super::log(&format!("invalidating the attributes of inode {ino}: {e}"));
                }
            }
        }
    }

    pub(super) fn set_strips_privs(&self, on: bool) {
        self.strips_privs.store(on, Ordering::SeqCst);
    }

    /// Record that the kernel takes requests through io_uring.
    pub(super) fn set_acls(&self, on: bool) {
        self.acls.store(on, Ordering::Relaxed);
    }

    /// The mode a file made in `parent` with `mode` gets before ACLs: with
    /// ACLs on, the kernel leaves the caller's `umask` to us, and it applies
    /// unless `parent` has a default ACL (then the engine masks the mode by
    /// that instead). Without them the kernel has applied it already.
    pub(super) fn create_mode(&self, parent: Ino, mode: u32, umask: u32) -> u32 {
        if !self.acls.load(Ordering::Relaxed) {
            return mode;
        }
        match self.fs.getxattr(parent, ACL_XATTRS[1]) {
            Ok(_) => mode,
            Err(_) => mode & !(umask & 0o777),
        }
    }

    pub(super) fn set_uring(&self, on: bool) {
        self.uring.store(on, Ordering::SeqCst);
    }

    /// Whether the kernel agreed at INIT to use io_uring queues.
    pub(super) fn uring(&self) -> bool {
        self.uring.load(Ordering::SeqCst)
    }

    /// What a write takes away: the kernel marks the writes whose caller
    /// lacks `CAP_FSETID` (`FUSE_WRITE_KILL_SUIDGID`).
    pub(super) fn write_strips(&self, kill_suidgid: bool) -> StripPrivs {
        match (self.strips_privs.load(Ordering::Relaxed), kill_suidgid) {
            (false, _) => StripPrivs::Nothing,
            (true, false) => StripPrivs::Caps,
            (true, true) => StripPrivs::CapsAndIds,
        }
    }

    /// Write `data` at `offset` of `ino`, taking away what the write must
    /// (`kill_suidgid`: the kernel flagged a caller without `CAP_FSETID`
    /// writing a set-user-ID or set-group-ID file). When those bits may
    /// have gone, the kernel's copy of the mode is dropped before the reply.
    pub(super) fn write(&self, ino: Ino, offset: u64, data: &[u8], kill_suidgid: bool) -> Result<usize> {
        let strip = self.write_strips(kill_suidgid);
        let n = self.fs.write_stripping(ino, offset, data, strip)?;
        if strip == StripPrivs::CapsAndIds && n > 0 {
            self.attrs_changed(ino);
        }
        Ok(n)
    }

    /// What a setattr takes away. A chown takes the IDs always; a truncate
    /// takes them from a caller without `CAP_FSETID`, which `keeps_ids`
    /// tells (asked only then).
    pub(super) fn setattr_strips(&self, set: &SetAttr, keeps_ids: impl FnOnce() -> bool) -> StripPrivs {
        if !self.strips_privs.load(Ordering::Relaxed) {
            StripPrivs::Nothing
        } else if set.uid.is_some() || set.gid.is_some() {
            StripPrivs::CapsAndIds
        } else if set.size.is_some() {
            if keeps_ids() {
                StripPrivs::Caps
            } else {
                StripPrivs::CapsAndIds
            }
        } else {
            StripPrivs::Nothing
        }
    }

    /// Apply `set` to `ino`; with nothing to change (e.g. only a file
    /// handle), just report its attributes.
    pub(super) fn setattr(&self, ino: Ino, set: &SetAttr, strips: StripPrivs) -> Result<Attr> {
        if *set == SetAttr::default() {
            self.fs.getattr(ino)
        } else {
            self.fs.setattr_stripping(ino, set, strips)
        }
    }

    /// SEEK_DATA / SEEK_HOLE (the kernel handles the other whences itself).
    /// ENOSYS makes the kernel stop asking and treat every file as all data
    /// up to its size: right only with the writeback cache, where the
    /// newest data and size may still be in the kernel and we would answer
    /// from stale ones.
    pub(super) fn lseek(&self, ino: Ino, offset: i64, whence: i32) -> Result<i64> {
        if self.opts.writeback_cache {
            return Err(Error::Posix(Errno(libc::ENOSYS)));
        }
        let data = match whence {
            libc::SEEK_DATA => true,
            libc::SEEK_HOLE => false,
            _ => return Err(einval()),
        };
        let enxio = || Error::Posix(Errno::ENXIO);
        let offset = u64::try_from(offset).map_err(|_| enxio())?;
        let pos = self.fs.seek_data(ino, offset, data)?;
        i64::try_from(pos).map_err(|_| enxio())
    }

    /// fallocate(2) (`FUSE_FALLOCATE`) in `mode`, the kernel's FALLOC_FL_*
    /// bits: the engine's modes and errors ([`tux3::Fs::fallocate`]).
    pub(super) fn fallocate(&self, ino: Ino, offset: u64, length: u64, mode: i32) -> Result<()> {
        self.fs.fallocate(ino, mode, offset, length)
    }

    /// copy_file_range(2) (`FUSE_COPY_FILE_RANGE`, or with `wide`
    /// `FUSE_COPY_FILE_RANGE_64`) from file `src`: a clone of the range
    /// ([`tux3::Fs::clone_range`]: the blocks it covers whole are shared,
    /// its partial edge blocks copied), returning the bytes cloned. The
    /// 32-bit reply cannot count more than [`COPY_RANGE_32_MAX`], so such
    /// a request clones at most that; the kernel asks again for the rest.
    /// Flags (none defined): EINVAL. A read-only mount or volume: EROFS,
    /// as for a write (the kernel refuses most before they get here).
    pub(super) fn copy_range(&self, src: Ino, a: &CopyFileRangeIn, wide: bool) -> Result<u64> {
        if a.flags != 0 {
            return Err(einval());
        }
        if self.opts.read_only || self.live.read_only() || self.fs.is_read_only() {
            return Err(Error::Posix(Errno::EROFS));
        }
        let len = if wide { a.len } else { a.len.min(COPY_RANGE_32_MAX) };
        self.fs.clone_range(src, a.off_in, a.nodeid_out, a.off_out, len)
    }

    /// Set extended attribute `name` (`flags`: 0, XATTR_CREATE or
    /// XATTR_REPLACE; `position` must be 0).
    pub(super) fn setxattr(
        &self,
        ino: Ino,
        name: &[u8],
        value: &[u8],
        flags: i32,
        position: u32,
    ) -> Result<()> {
        let mode = match flags {
            0 => XattrMode::Any,
            libc::XATTR_CREATE => XattrMode::Create,
            libc::XATTR_REPLACE => XattrMode::Replace,
            _ => return Err(einval()),
        };
        if position != 0 {
            return Err(einval());
        }
        // Without FUSE_POSIX_ACL the kernel passes ACLs through as plain
        // xattrs but never enforces them: refuse them rather than store
        // permissions nobody checks (cp -a then falls back to chmod).
        if ACL_XATTRS.contains(&name) && !self.acls.load(Ordering::Relaxed) {
            return Err(Error::Posix(Errno(libc::EOPNOTSUPP)));
        }
        self.fs.setxattr(ino, name, value, mode)
    }

    /// Look `name` up in directory `parent`, held ([`Tux3Fuse::found`]).
    /// `.` and `..` name the directory itself and its parent: the kernel
    /// asks for them when it turns a file handle into a file whose inode
    /// it no longer holds (`open_by_handle_at`, an NFS export), and for the
    /// parent of such a directory.
    pub(super) fn lookup_held(&self, parent: Ino, name: &[u8]) -> Result<Attr> {
        let attr = match name {
            b"." => self.fs.getattr_held(parent)?,
            b".." => self.fs.getattr_held(self.fs.dir_parent(parent)?)?,
            _ => return Ok(self.found(parent, self.fs.lookup_held(parent, name)?)),
        };
        if attr.kind == FileType::Directory {
            let up = self.fs.dir_parent(attr.ino)?;
            self.parents.lock().insert(attr.ino, up);
        }
        Ok(attr)
    }

    /// Read from `ino` into `out`; the read moves its access time as the
    /// mount's rule says.
    pub(super) fn read_into(&self, ino: Ino, offset: u64, out: &mut [u8]) -> Result<usize> {
        let rule = self.live.atime_rule(false);
        self.fs.read_into_accessed(ino, offset, out, rule)
    }

    /// A read of file `ino` or a listing of directory `ino` (`dir`) from
    /// its start: move its access time if the mount's rule says so. An
    /// access time the volume cannot take (full, read-only) stays as it was.
    pub(super) fn accessed(&self, ino: Ino, dir: bool) {
        let rule = self.live.atime_rule(dir);
        if let Err(e) = self.fs.accessed(ino, rule) {
            tracing::debug!("access time of inode {ino} not moved: {e}");
        }
    }

    /// The names of `ino`'s extended attributes, each ended by a NUL.
    pub(super) fn listxattr(&self, ino: Ino) -> Result<Vec<u8>> {
        let mut list = Vec::new();
        for n in self.fs.listxattr(ino)? {
            list.extend_from_slice(&n);
            list.push(0);
        }
        Ok(list)
    }

    /// An entry the kernel is about to learn (from a lookup, mknod, mkdir,
    /// symlink, link or readdirplus). The kernel counts one lookup of it
    /// per such reply and gives them back with FORGET
    /// ([`Tux3Fuse::forget`]). An inode is held by that count, as an
    /// engine handle: an unlinked file or a removed directory the kernel
    /// still knows (open, mapped, or just cached) stays an orphan until the
    /// kernel forgets it, so no OPEN or RELEASE round trip is needed for
    /// that. The handle is taken by the engine operation itself
    /// (`lookup_held`, `mknod_held`, `mkdir_held`, `symlink_held`,
    /// `link_held`, `getattr_held`), in the same step, so nothing frees
    /// the inode between the operation and the handle, and
    /// before the reply, so the FORGET can never come first; a reply the
    /// kernel never gets leaves the count one too high, which only keeps an
    /// orphan until unmount. What is left here: a directory's parent,
    /// remembered for `..`.
    pub(super) fn found(&self, parent: Ino, attr: Attr) -> Attr {
        if attr.kind == FileType::Directory {
            self.parents.lock().insert(attr.ino, parent);
        }
        attr
    }

    /// The kernel forgot `count` lookups of `ino` (its inode left the
    /// kernel's cache): release them; the last frees an orphan.
    pub(super) fn forget(&self, ino: Ino, count: u64) {
        self.parents.lock().remove(&ino);
        if let Err(e) = self.fs.release_handles(ino, count) {
            super::log(&format!("releasing inode {ino}: {e}"));
        }
    }

    /// The `..` of directory `ino`: its parent if known, else itself (the
    /// kernel does not use `d_ino` of `..`).
    pub(super) fn parent_of(&self, ino: Ino) -> Ino {
        if ino == ROOT_INO {
            return ROOT_INO;
        }
        self.parents.lock().get(&ino).copied().unwrap_or(ino)
    }

    /// Let the idle pollers know of each request the queues take.
    pub(super) fn set_idle_poll(&self, w: Waker) {
        let _ = self.idle.set(w);
    }

    /// A queue took requests: keep the idle CPUs awake (`-o idle_poll`).
    pub(super) fn note_request(&self) {
        if let Some(w) = self.idle.get() {
            w.note();
        }
    }

    /// Owner of a new inode in `parent`: the caller, except that a setgid
    /// directory gives its group (and, to new directories, its setgid bit).
    /// Returns `(uid, gid, extra mode bits for a directory)`.
    ///
    /// Workaround: the engine's create calls take uid/gid as given and do
    /// not apply this rule (inode_init_owner in the kernel), so the adapter
    /// asks for the parent's attributes first.
    pub(super) fn owner(&self, uid: u32, gid: u32, parent: Ino) -> Result<(u32, u32, u32)> {
        let dir = self.fs.getattr(parent)?;
        if dir.mode & libc::S_ISGID != 0 {
            Ok((uid, dir.gid, libc::S_ISGID))
        } else {
            Ok((uid, gid, 0))
        }
    }

    /// Fill a `readdir` reply from position `offset` through `add(ino,
    /// next, kind, name)`, which returns true once the reply is full: `.`
    /// has offset 0 and continues at 1, `..` continues at 2, engine entries
    /// continue at their own positions (which are far above 2).
    pub(super) fn fill_dir(
        &self,
        ino: Ino,
        offset: u64,
        add: impl FnMut(Ino, u64, FileType, &[u8]) -> bool,
    ) -> Result<()> {
        self.walk_dir(ino, offset, READDIR_BATCH, add)
    }

    /// [`Tux3Fuse::fill_dir`], fetching `batch` entries from the engine at
    /// a time (about what one reply holds).
    fn walk_dir(
        &self,
        ino: Ino,
        offset: u64,
        batch_len: usize,
        mut add: impl FnMut(Ino, u64, FileType, &[u8]) -> bool,
    ) -> Result<()> {
        if offset == 0 {
            // A listing from its start is one access of the directory.
            self.accessed(ino, true);
        }
        let dir = FileType::Directory;
        if offset < 1 && add(ino, 1, dir, b".") {
            return Ok(());
        }
        if offset < 2 && add(self.parent_of(ino), 2, dir, b"..") {
            return Ok(());
        }
        let mut pos = if offset <= 2 { 0 } else { offset };
        loop {
            let batch = self.fs.readdir(ino, pos, batch_len)?;
            for e in &batch {
                if add(e.ino, e.next, e.kind, &e.name) {
                    return Ok(());
                }
                pos = e.next;
            }
            if batch.len() < batch_len {
                return Ok(());
            }
        }
    }

    /// Fill a `readdirplus` reply like [`Tux3Fuse::fill_dir`], each entry
    /// with its attributes: `add(attr, next, name)`, true once the reply is
    /// full. The kernel counts every entry of the reply but `.` and `..` as
    /// a lookup, so each is held ([`Tux3Fuse::found`]): the handle taken
    /// with its attributes, and given back if the reply had no room for
    /// it. An entry whose inode is gone (removed and freed since the batch
    /// was read) is left out, as a listing may leave out a name removed
    /// while it runs; one whose attributes cannot be read otherwise ends
    /// the reply there, or fails it if it is the first.
    pub(super) fn fill_dir_plus(
        &self,
        ino: Ino,
        offset: u64,
        mut add: impl FnMut(&Attr, u64, &[u8]) -> bool,
    ) -> Result<()> {
        let mut added = false;
        let mut failed = None;
        self.walk_dir(ino, offset, READDIRPLUS_BATCH, |entry, next, _, name| {
            let dots = name == b"." || name == b"..";
            let got = if dots {
                self.fs.getattr(entry)
            } else {
                self.fs.getattr_held(entry)
            };
            let attr = match got {
                Ok(attr) => attr,
                Err(e) if e.errno() == Errno::ENOENT => return false,
                Err(e) => {
                    failed = (!added).then_some(e);
                    return true;
                }
            };
            if add(&attr, next, name) {
                // No room: the handle goes back (the kernel never learnt
                // of it, and the parent it knows of a directory stays).
                if !dots {
                    if let Err(e) = self.fs.release_handles(attr.ino, 1) {
                        super::log(&format!("releasing inode {}: {e}", attr.ino));
                    }
                }
                return true;
            }
            if !dots {
                self.found(ino, attr);
            }
            added = true;
            false
        })?;
        failed.map_or(Ok(()), Err)
    }
}

/// The answer to an extended-attribute read.
pub(super) enum XattrAnswer<'a> {
    /// The caller asked for the size only.
    Size(u32),
    Data(&'a [u8]),
}

/// The answer to an extended-attribute read of `bytes` into a buffer of
/// `size`: the size when asked for it (size 0), ERANGE when the buffer is
/// too small, else the bytes.
pub(super) fn xattr_answer(bytes: &[u8], size: u32) -> Result<XattrAnswer<'_>> {
    if size == 0 {
        u32::try_from(bytes.len())
            .map(XattrAnswer::Size)
            .map_err(|_| Error::Posix(Errno(libc::E2BIG)))
    } else if bytes.len() > size as usize {
        Err(Error::Posix(Errno::ERANGE))
    } else {
        Ok(XattrAnswer::Data(bytes))
    }
}

pub(super) fn einval() -> Error {
    Error::Posix(Errno::EINVAL)
}

/// Attributes of a negative entry (only its TTL matters to the kernel).
pub(super) fn negative_attr() -> Attr {
    Attr {
        ino: 0,
        kind: FileType::Regular,
        mode: libc::S_IFREG,
        nlink: 0,
        uid: 0,
        gid: 0,
        rdev: 0,
        size: 0,
        blocks: 0,
        atime: Timespec::default(),
        mtime: Timespec::default(),
        ctime: Timespec::default(),
        btime: Timespec::default(),
        blksize: 4096,
    }
}

/// The extended attributes that hold POSIX ACLs.
const ACL_XATTRS: [&[u8]; 2] = [b"system.posix_acl_access", b"system.posix_acl_default"];
