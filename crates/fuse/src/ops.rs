//! The `fuser::Filesystem` implementation: each FUSE request becomes one call
//! of the engine API [`tux3::Fs`] (see `adapter.rs` for the state and the
//! shared helpers), and its result becomes the reply.
//!
//! Calls only [`tux3::Fs`].

use super::adapter::{
    einval, empty, is_snapshot_ioctl, may_keep_ids, negative_attr, time_or_now, xattr_reply,
};
use super::{
    errno, file_attr, file_type, from_system_time, generation, IOC_SYNC, MAX_BACKGROUND, MAX_READAHEAD,
    MAX_WRITE, TTL,
};
use super::{uring, Tux3Fuse};
use fuser::{
    FileHandle, Filesystem, Generation, INodeNo, InitFlags, IoctlFlags, KernelConfig, LockOwner, OpenFlags,
    RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty,
    ReplyEntry, ReplyIoctl, ReplyLseek, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow,
    WriteFlags,
};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::SystemTime;
use tux3::error::Errno;
use tux3::types::{Attr, RenameFlags as EngineRenameFlags, SetAttr};

impl Filesystem for Tux3Fuse {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        if let Err(max) = config.set_max_write(MAX_WRITE) {
            let _ = config.set_max_write(max);
        }
        if let Err(max) = config.set_max_readahead(MAX_READAHEAD) {
            let _ = config.set_max_readahead(max);
        }
        // Read-ahead and other background requests in flight at once
        // (the kernel's default is 12): a 1 MiB read-ahead is 1 MiB
        // requests, several of them queued ahead of the reader.
        let _ = config.set_max_background(MAX_BACKGROUND);
        let _ = config.set_congestion_threshold(MAX_BACKGROUND * 3 / 4);
        // Listings with each entry's attributes where they save lookups
        // (the kernel picks: the first batch of a listing, and directories
        // whose entries are then looked up, as by `ls -l`).
        let _ = config.add_capabilities(InitFlags::FUSE_DO_READDIRPLUS | InitFlags::FUSE_READDIRPLUS_AUTO);
        // Lookups and readdirs of one directory may run in parallel: the
        // engine serializes what needs it.
        let _ = config.add_capabilities(InitFlags::FUSE_PARALLEL_DIROPS);
        // We take privileges away on write, truncate and chown ourselves,
        // which saves a getxattr round trip before every write.
        self.set_strips_privs(
            config
                .add_capabilities(InitFlags::FUSE_HANDLE_KILLPRIV_V2)
                .is_ok(),
        );
        // POSIX ACLs, checked by the kernel (which needs
        // default_permissions for that) and kept by the engine; the umask
        // is then ours to apply (`Tux3Fuse::create_mode`).
        if self.opts.default_permissions {
            let acl = InitFlags::FUSE_POSIX_ACL | InitFlags::FUSE_DONT_MASK;
            self.set_acls(config.add_capabilities(acl).is_ok());
        }
        // File handles that outlive the kernel's inode (inode number and
        // generation; `.` and `..` lookups turn them back into files).
        let _ = config.add_capabilities(InitFlags::FUSE_EXPORT_SUPPORT);
        if self.opts.uring != Some(false) && uring::kernel_enabled() {
            self.set_uring(config.add_capabilities(InitFlags::FUSE_OVER_IO_URING).is_ok());
        }
        if self.opts.writeback_cache {
            config
                .add_capabilities(InitFlags::FUSE_WRITEBACK_CACHE)
                .map_err(|_| std::io::Error::other("the kernel does not support the FUSE writeback cache"))?;
        }
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.lookup_held(parent.0, name.as_bytes()) {
            // A negative entry: the kernel caches the absence for TTL.
            Err(e) if e.errno() == Errno::ENOENT => {
                let mut attr = file_attr(&negative_attr());
                attr.ino = INodeNo(0);
                reply.entry(&TTL, &attr, Generation(0));
            }
            Ok(attr) => reply.entry(&TTL, &file_attr(&attr), Generation(generation(&attr))),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn forget(&self, req: &Request, ino: INodeNo, nlookup: u64) {
        // Let more FORGETs gather in the kernel first (forgets.rs).
        self.forgets.linger(req.unique().0);
        #[cfg(feature = "test-hooks")]
        crate::test_hooks::forget(req.unique().0);
        Tux3Fuse::forget(self, ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.fs.getattr(ino.0) {
            Ok(attr) => reply.attr(&TTL, &file_attr(&attr)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let set = SetAttr {
            mode,
            uid,
            gid,
            size,
            atime: atime.map(time_or_now),
            mtime: mtime.map(time_or_now),
            ctime: ctime.map(from_system_time),
        };
        // fuser does not pass FATTR_KILL_SUIDGID on: the caller's
        // capabilities are read from /proc instead.
        let strips = self.setattr_strips(&set, || may_keep_ids(req.pid()));
        match self.setattr(ino.0, &set, strips) {
            Ok(attr) => reply.attr(&TTL, &file_attr(&attr)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.fs.readlink(ino.0) {
            Ok(target) => reply.data(&target),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let mode = self.create_mode(parent.0, mode, umask);
        let r = self
            .owner(req.uid(), req.gid(), parent.0)
            .and_then(|(uid, gid, _)| {
                self.fs
                    .mknod_held(parent.0, name.as_bytes(), mode, u64::from(rdev), uid, gid)
            });
        self.entry(parent.0, r, reply);
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        let mode = self.create_mode(parent.0, mode, umask);
        let r = self
            .owner(req.uid(), req.gid(), parent.0)
            .and_then(|(uid, gid, sgid)| {
                self.fs
                    .mkdir_held(parent.0, name.as_bytes(), mode | sgid, uid, gid)
            });
        self.entry(parent.0, r, reply);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        empty(self.fs.unlink(parent.0, name.as_bytes()), reply);
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        empty(self.fs.rmdir(parent.0, name.as_bytes()), reply);
    }

    fn symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        let r = self
            .owner(req.uid(), req.gid(), parent.0)
            .and_then(|(uid, gid, _)| {
                let target = target.as_os_str().as_bytes();
                self.fs
                    .symlink_held(parent.0, link_name.as_bytes(), target, uid, gid)
            });
        self.entry(parent.0, r, reply);
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let r = EngineRenameFlags::from_bits(flags.bits())
            .ok_or_else(einval)
            .and_then(|f| {
                self.fs
                    .rename(parent.0, name.as_bytes(), newparent.0, newname.as_bytes(), f)
            });
        empty(r, reply);
    }

    fn link(&self, _req: &Request, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        let r = self.fs.link_held(ino.0, newparent.0, newname.as_bytes());
        self.entry(newparent.0, r, reply);
    }

    fn open(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        // A file handle holds nothing here: the kernel's lookup count keeps
        // an unlinked file alive (`Tux3Fuse::found`). ENOSYS tells the
        // kernel so (`no_open`): it sends no more OPEN, and no RELEASE for
        // files opened without one, two round trips per open saved; it
        // then opens files with `FOPEN_KEEP_CACHE` — the page cache stays
        // valid across opens, which is coherent: only we change the volume.
        reply.error(fuser::Errno::ENOSYS);
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        thread_local! {
            /// This thread's read buffer, kept from request to request.
            static BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        BUF.with_borrow_mut(|buf| {
            let size = size as usize;
            if buf.len() < size {
                buf.resize(size, 0);
            }
            match self.read_into(ino.0, offset, &mut buf[..size]) {
                Ok(n) => reply.data(&buf[..n]),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let kill_suidgid = write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID);
        match Tux3Fuse::write(self, ino.0, offset, data, kill_suidgid) {
            Ok(n) => reply.written(n as u32),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn flush(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _owner: LockOwner, reply: ReplyEmpty) {
        // Data reaches the engine at each write, so a close has nothing to
        // flush: ENOSYS makes the kernel stop sending FLUSH (`no_flush`).
        reply.error(fuser::Errno::ENOSYS);
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        // Only a handle from OPEN or CREATE is released, and both are
        // refused (ENOSYS), so none comes; one that did would hold nothing.
        reply.ok();
    }

    fn fsync(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, datasync: bool, reply: ReplyEmpty) {
        // Answered from the fsync committer once durable: this request
        // thread is free at once, so any number of fsyncs can wait for the
        // same group commit.
        self.fs
            .fsync_then(ino.0, datasync, Box::new(move |r| empty(r, reply)));
    }

    fn opendir(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        // A directory handle holds nothing here. ENOSYS tells the kernel so
        // (`FUSE_NO_OPENDIR_SUPPORT`): it sends no more OPENDIR nor
        // RELEASEDIR, two round trips per directory open, and opens
        // directories with `FOPEN_KEEP_CACHE | FOPEN_CACHE_DIR` — it may
        // cache listings, which is coherent: only we change the volume, and
        // every change through the mount resets the cache.
        reply.error(fuser::Errno::ENOSYS);
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let add = |ino, next, kind, name: &[u8]| {
            reply.add(INodeNo(ino), next, file_type(kind), OsStr::from_bytes(name))
        };
        match self.fill_dir(ino.0, offset, add) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let add = |attr: &Attr, next, name: &[u8]| {
            let name = OsStr::from_bytes(name);
            reply.add(
                INodeNo(attr.ino),
                next,
                name,
                &TTL,
                &file_attr(attr),
                Generation(generation(attr)),
            )
        };
        match self.fill_dir_plus(ino.0, offset, add) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn fsyncdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, datasync: bool, reply: ReplyEmpty) {
        // Answered from the fsync committer once durable: this request
        // thread is free at once, so any number of fsyncs can wait for the
        // same group commit.
        self.fs
            .fsync_then(ino.0, datasync, Box::new(move |r| empty(r, reply)));
    }

    fn ioctl(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: IoctlFlags,
        cmd: u32,
        in_data: &[u8],
        _out_size: u32,
        reply: ReplyIoctl,
    ) {
        // `tux3 snapshot`: the kernel copied the argument in (its size is
        // in `cmd`) and copies the answer out, up to that size. Create and
        // delete commit on this request thread, as a sync does.
        if is_snapshot_ioctl(cmd) {
            return match self.snapshot_ioctl(req.uid(), cmd, in_data) {
                Ok(out) => reply.ioctl(0, &out),
                Err(e) => reply.error(errno(&e)),
            };
        }
        if let Some(r) = self.flags_ioctl(ino.0, cmd, in_data) {
            return match r {
                Ok(out) => reply.ioctl(0, &out),
                Err(e) => reply.error(errno(&e)),
            };
        }
        if cmd != IOC_SYNC {
            return reply.error(fuser::Errno::from_i32(libc::ENOTTY));
        }
        // A whole commit on this request thread: the others serve on.
        match self.fs.sync() {
            Ok(()) => reply.ioctl(0, &[]),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        match self.fs.statfs() {
            Ok(s) => reply.statfs(
                s.blocks,
                s.blocks_free,
                s.blocks_free,
                s.files,
                s.files_free,
                s.block_size,
                s.name_max,
                s.block_size,
            ),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn setxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        position: u32,
        reply: ReplyEmpty,
    ) {
        empty(
            Tux3Fuse::setxattr(self, ino.0, name.as_bytes(), value, flags, position),
            reply,
        );
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        xattr_reply(self.fs.getxattr(ino.0, name.as_bytes()), size, reply);
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        xattr_reply(Tux3Fuse::listxattr(self, ino.0), size, reply);
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        empty(self.fs.removexattr(ino.0, name.as_bytes()), reply);
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        // With default_permissions the kernel checks access itself.
        reply.ok();
    }

    fn create(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        // ENOSYS once (`no_create`): the kernel then creates with MKNOD and
        // opens without a request (no OPEN, see `open`), so a created file
        // needs no RELEASE either — one round trip instead of two. The
        // kernel keeps `open(O_CREAT)`'s semantics: O_EXCL, and no
        // permission check of the new file's mode on that first open.
        reply.error(fuser::Errno::ENOSYS);
    }

    fn lseek(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        match Tux3Fuse::lseek(self, ino.0, offset, whence) {
            Ok(pos) => reply.offset(pos),
            Err(e) => reply.error(errno(&e)),
        }
    }
}
