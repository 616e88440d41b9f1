//! The adapter's state and the helpers its requests share: the `Fs` being
//! served, the mount options, the parent of each directory the kernel knows
//! (for the `..` entry of `readdir`; learned from lookups, dropped on
//! forget), and the conversions of results into replies.
//!
//! Calls only [`crate::Fs`].

use super::{errno, file_attr, file_type, from_system_time, FuseOptions, TTL};
use crate::api::types::{Attr, FileType, Ino, SetAttr, StripPrivs, Timespec, ROOT_INO};
use crate::error::{Errno, Error, Result};
use crate::Fs;
use fuser::{
    FopenFlags, Generation, INodeNo, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyXattr, Request, TimeOrNow,
    WriteFlags,
};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;

/// Directory entries fetched from the engine per `readdir` call; a reply
/// buffer (one page) holds about this many entries with short names.
const READDIR_BATCH: usize = 128;

/// Flags of every opened file: the page cache stays valid across opens (only
/// we change the volume), and `close` needs no FLUSH round trip (flush is a
/// no-op: data goes to the engine at each write).
pub(super) const OPEN_FLAGS: FopenFlags = FopenFlags::FOPEN_KEEP_CACHE.union(FopenFlags::FOPEN_NOFLUSH);

/// A mounted volume as a FUSE filesystem.
pub struct Tux3Fuse {
    pub(super) fs: Arc<Fs>,
    pub(super) opts: FuseOptions,
    /// Parent of each directory the kernel holds an inode for.
    pub(super) parents: Mutex<HashMap<Ino, Ino>>,
    /// The kernel leaves taking privileges away on write, truncate and
    /// chown to us (`FUSE_HANDLE_KILLPRIV_V2`), so it need not ask for
    /// `security.capability` before every write.
    pub(super) strips_privs: bool,
}

impl Tux3Fuse {
    /// Serve `fs` with the given options.
    pub fn new(fs: Arc<Fs>, opts: FuseOptions) -> Tux3Fuse {
        Tux3Fuse {
            fs,
            opts,
            parents: Mutex::new(HashMap::new()),
            strips_privs: false,
        }
    }

    /// What a write takes away: the kernel marks the writes whose caller
    /// lacks `CAP_FSETID`.
    pub(super) fn write_strips(&self, flags: WriteFlags) -> StripPrivs {
        match (
            self.strips_privs,
            flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID),
        ) {
            (false, _) => StripPrivs::Nothing,
            (true, false) => StripPrivs::Caps,
            (true, true) => StripPrivs::CapsAndIds,
        }
    }

    /// What a setattr takes away. A chown takes the IDs always; a truncate
    /// takes them from a caller without `CAP_FSETID`. The kernel flags that
    /// (`FATTR_KILL_SUIDGID`) but fuser does not pass the flag on, so the
    /// caller's effective capabilities are read from `/proc` instead.
    pub(super) fn setattr_strips(&self, req: &Request, set: &SetAttr) -> StripPrivs {
        if !self.strips_privs {
            StripPrivs::Nothing
        } else if set.uid.is_some() || set.gid.is_some() {
            StripPrivs::CapsAndIds
        } else if set.size.is_some() {
            if may_keep_ids(req.pid()) {
                StripPrivs::Caps
            } else {
                StripPrivs::CapsAndIds
            }
        } else {
            StripPrivs::Nothing
        }
    }

    /// Remember `attr`'s parent when it is a directory.
    pub(super) fn learn(&self, parent: Ino, attr: &Attr) {
        if attr.kind == FileType::Directory {
            self.parents.lock().insert(attr.ino, parent);
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

    /// Reply to a request that produced a new or found entry.
    pub(super) fn entry(&self, parent: Ino, r: Result<Attr>, reply: ReplyEntry) {
        match r {
            Ok(attr) => {
                self.learn(parent, &attr);
                reply.entry(&TTL, &file_attr(&attr), Generation(0));
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    /// Owner of a new inode in `parent`: the caller, except that a setgid
    /// directory gives its group (and, to new directories, its setgid bit).
    /// Returns `(uid, gid, extra mode bits for a directory)`.
    ///
    /// Workaround: the engine's create calls take uid/gid as given and do
    /// not apply this rule (inode_init_owner in the kernel), so the adapter
    /// asks for the parent's attributes first.
    pub(super) fn owner(&self, req: &Request, parent: Ino) -> Result<(u32, u32, u32)> {
        let dir = self.fs.getattr(parent)?;
        if dir.mode & libc::S_ISGID != 0 {
            Ok((req.uid(), dir.gid, libc::S_ISGID))
        } else {
            Ok((req.uid(), req.gid(), 0))
        }
    }

    /// Fill a `readdir` reply from position `offset`: `.` has offset 0 and
    /// continues at 1, `..` continues at 2, engine entries continue at their
    /// own positions (which are far above 2).
    pub(super) fn fill_dir(&self, ino: Ino, offset: u64, reply: &mut ReplyDirectory) -> Result<()> {
        let dir = fuser::FileType::Directory;
        if offset < 1 && reply.add(INodeNo(ino), 1, dir, ".") {
            return Ok(());
        }
        if offset < 2 && reply.add(INodeNo(self.parent_of(ino)), 2, dir, "..") {
            return Ok(());
        }
        let mut pos = if offset <= 2 { 0 } else { offset };
        loop {
            let batch = self.fs.readdir(ino, pos, READDIR_BATCH)?;
            for e in &batch {
                if reply.add(
                    INodeNo(e.ino),
                    e.next,
                    file_type(e.kind),
                    OsStr::from_bytes(&e.name),
                ) {
                    return Ok(());
                }
                pos = e.next;
            }
            if batch.len() < READDIR_BATCH {
                return Ok(());
            }
        }
    }
}

/// `TimeOrNow` to engine time.
pub(super) fn time_or_now(t: TimeOrNow) -> Timespec {
    match t {
        TimeOrNow::Now => Timespec::now(),
        TimeOrNow::SpecificTime(t) => from_system_time(t),
    }
}

/// Reply to an extended-attribute read: the size when asked for it, ERANGE
/// when the caller's buffer is too small, else the bytes.
pub(super) fn xattr_reply(bytes: &[u8], size: u32, reply: ReplyXattr) {
    if size == 0 {
        match u32::try_from(bytes.len()) {
            Ok(n) => reply.size(n),
            Err(_) => reply.error(fuser::Errno::E2BIG),
        }
    } else if bytes.len() > size as usize {
        reply.error(fuser::Errno::ERANGE);
    } else {
        reply.data(bytes);
    }
}

/// Reply with nothing or an error.
pub(super) fn empty(r: Result<()>, reply: ReplyEmpty) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(errno(&e)),
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

/// `CAP_FSETID` (linux/capability.h): keep set-user-ID and set-group-ID
/// across a change.
const CAP_FSETID: u32 = 4;

/// Whether thread `pid` (as a FUSE request names its caller) holds
/// `CAP_FSETID` in its effective set (`CapEff` in `/proc/PID/status`). A
/// caller that cannot be read (gone already) is taken not to hold it:
/// taking the IDs away is the safe side.
fn may_keep_ids(pid: u32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << CAP_FSETID) != 0)
}
