//! The ioctls the server answers itself, whichever transport brought them:
//! inode flags (`FS_IOC_GETFLAGS`, `FS_IOC_SETFLAGS` and their fsxattr
//! forms: `lsattr`, `chattr`, `xfs_io`), with the conversion between inode
//! flags and `FS_XFLAG_*`, and the volume's (snapshots, mount info,
//! remount, resize, scrub and trim), with who may send which.
//!
//! Calls only [`tux3::Fs`], and the argument codecs of `snapshot.rs`,
//! `remount.rs`, `scrub.rs` and `trim.rs`.

use super::adapter::{einval, Tux3Fuse};
use super::snapshot::{decode_name, encode_snapshot, list_index};
use super::{IOC_SNAPSHOT_CREATE, IOC_SNAPSHOT_DELETE, IOC_SNAPSHOT_LIST};
use tux3::error::{Errno, Error, Result};
use tux3::types::Ino;

impl Tux3Fuse {
    /// Serve an inode flags ioctl (`FS_IOC_GETFLAGS`, `FS_IOC_SETFLAGS`,
    /// `FS_IOC_FSGETXATTR`, `FS_IOC_FSSETXATTR`: what `lsattr`, `chattr`
    /// and `xfs_io` send, the kernel's permission checks done) on `ino`
    /// with argument `arg`; returns what goes back out. `None` for another
    /// command.
    pub(super) fn flags_ioctl(&self, ino: Ino, cmd: u32, arg: &[u8]) -> Option<Result<Vec<u8>>> {
        let word = |a: &[u8]| a.get(..4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
        Some(match cmd {
            FS_IOC_GETFLAGS | FS_IOC32_GETFLAGS => self.fs.flags(ino).map(|f| f.to_le_bytes().to_vec()),
            FS_IOC_SETFLAGS | FS_IOC32_SETFLAGS => match word(arg) {
                Some(f) => self.fs.set_flags(ino, f).map(|()| Vec::new()),
                None => Err(einval()),
            },
            FS_IOC_FSGETXATTR => self.fs.flags(ino).map(|f| {
                let mut out = vec![0u8; FSXATTR_LEN];
                out[..4].copy_from_slice(&xflags_of(f).to_le_bytes());
                out
            }),
            FS_IOC_FSSETXATTR => match word(arg) {
                Some(x) if arg.len() >= FSXATTR_LEN => self.fs.flags(ino).and_then(|old| {
                    // The flags with no fsxattr form (dirsync) are kept.
                    let keep = old & !xflags_of_inverse(u32::MAX);
                    match flags_of_xflags(x) {
                        Some(f) => self.fs.set_flags(ino, keep | f).map(|()| Vec::new()),
                        None => Err(Error::Posix(Errno::ENOTSUP)),
                    }
                }),
                _ => Err(einval()),
            },
            _ => return None,
        })
    }

    /// Serve a snapshot ioctl ([`is_snapshot_ioctl`]) sent by user `uid`
    /// with argument `arg`; returns what goes back out. Create and delete
    /// change the whole volume while any process that may open a file of
    /// the mount may send an ioctl, so they are refused (EPERM) to all but
    /// root and the user this server runs as (the mounter). Create and
    /// delete commit, so the caller must be a thread that may block.
    pub(super) fn snapshot_ioctl(&self, uid: u32, cmd: u32, arg: &[u8]) -> Result<Vec<u8>> {
        if cmd == IOC_SNAPSHOT_LIST {
            let from = list_index(arg).ok_or_else(einval)?;
            let s = self.fs.snapshot_from(from)?;
            return Ok(encode_snapshot(from, s.as_ref()).to_vec());
        }
        // SAFETY: geteuid has no preconditions.
        let may_change = uid == 0 || uid == unsafe { libc::geteuid() };
        if cmd == crate::IOC_SCRUB {
            return self.scrub.ioctl(&self.fs, arg, may_change);
        }
        if cmd == crate::IOC_FSTRIM || cmd == crate::FITRIM {
            return crate::trim::ioctl(&self.fs, arg, may_change);
        }
        if !may_change {
            return Err(Error::Posix(Errno::EPERM));
        }
        if cmd == crate::IOC_REMOUNT {
            return self.remount(arg).map(|()| Vec::new());
        }
        if cmd == crate::IOC_RESIZE {
            let bytes = word64(arg).ok_or_else(einval)?;
            let bs = u64::from(self.fs.statfs()?.block_size);
            let blocks = if bytes == 0 {
                self.fs.device_capacity()?
            } else {
                bytes / bs
            };
            let r = self.fs.resize(blocks)?;
            let mut out = r.old_blocks.to_ne_bytes().to_vec();
            out.extend_from_slice(&r.new_blocks.to_ne_bytes());
            return Ok(out);
        }
        if cmd == crate::IOC_MOUNT_INFO {
            let mut out = vec![0u8; crate::MOUNT_INFO_LEN];
            let (src, opts) = (self.opts.fsname.as_bytes(), self.opts.mount_options.as_bytes());
            if src.len() + opts.len() + 2 > out.len() {
                return Err(Error::Posix(Errno(libc::ENAMETOOLONG)));
            }
            out[..src.len()].copy_from_slice(src);
            out[src.len() + 1..src.len() + 1 + opts.len()].copy_from_slice(opts);
            return Ok(out);
        }
        let name = decode_name(arg).ok_or_else(einval)?;
        match cmd {
            IOC_SNAPSHOT_CREATE => self.fs.snapshot_create(name).map(|_| Vec::new()),
            IOC_SNAPSHOT_DELETE => self.fs.snapshot_delete(name).map(|()| Vec::new()),
            _ => Err(Error::Posix(Errno(libc::ENOTTY))),
        }
    }
}

/// Whether `cmd` is one of the volume's ioctls: snapshots (create, delete,
/// list), mount info, remount, scrub and trim (ours and FITRIM).
pub(super) fn is_snapshot_ioctl(cmd: u32) -> bool {
    matches!(
        cmd,
        IOC_SNAPSHOT_CREATE
            | IOC_SNAPSHOT_DELETE
            | IOC_SNAPSHOT_LIST
            | crate::IOC_MOUNT_INFO
            | crate::IOC_REMOUNT
            | crate::IOC_SCRUB
            | crate::IOC_RESIZE
            | crate::IOC_FSTRIM
            | crate::FITRIM
    )
}

/// The first 8 bytes of an ioctl argument, native order.
fn word64(arg: &[u8]) -> Option<u64> {
    Some(u64::from_ne_bytes(arg.get(..8)?.try_into().ok()?))
}

/// Whether `cmd` is one of [`Tux3Fuse::flags_ioctl`]'s.
pub(super) fn is_flags_ioctl(cmd: u32) -> bool {
    [
        FS_IOC_GETFLAGS,
        FS_IOC32_GETFLAGS,
        FS_IOC_SETFLAGS,
        FS_IOC32_SETFLAGS,
        FS_IOC_FSGETXATTR,
        FS_IOC_FSSETXATTR,
    ]
    .contains(&cmd)
}

/// `FS_IOC_GETFLAGS` (`_IOR('f', 1, long)`) and its 32-bit form.
const FS_IOC_GETFLAGS: u32 = 0x8008_6601;
const FS_IOC32_GETFLAGS: u32 = 0x8004_6601;
/// `FS_IOC_SETFLAGS` (`_IOW('f', 2, long)`) and its 32-bit form.
const FS_IOC_SETFLAGS: u32 = 0x4008_6602;
const FS_IOC32_SETFLAGS: u32 = 0x4004_6602;
/// `FS_IOC_FSGETXATTR`, `FS_IOC_FSSETXATTR` (`struct fsxattr`, 28 bytes).
const FS_IOC_FSGETXATTR: u32 = 0x801c_581f;
const FS_IOC_FSSETXATTR: u32 = 0x401c_5820;
const FSXATTR_LEN: usize = 28;

/// Inode flags and their `FS_XFLAG_*` forms.
const XFLAGS: [(u32, u32); 5] = [
    (tux3::types::flags::IMMUTABLE, 0x8),
    (tux3::types::flags::APPEND, 0x10),
    (tux3::types::flags::SYNC, 0x20),
    (tux3::types::flags::NOATIME, 0x40),
    (tux3::types::flags::NODUMP, 0x80),
];

/// The `FS_XFLAG_*` form of inode flags `f`.
fn xflags_of(f: u32) -> u32 {
    XFLAGS.iter().filter(|(fl, _)| f & fl != 0).map(|(_, x)| x).sum()
}

/// The inode flags that have an `FS_XFLAG_*` form, of `f`.
fn xflags_of_inverse(f: u32) -> u32 {
    XFLAGS
        .iter()
        .filter(|(fl, _)| f & fl != 0)
        .map(|(fl, _)| fl)
        .sum()
}

/// Inode flags from `FS_XFLAG_*` flags; `None` if one has no inode flag.
fn flags_of_xflags(x: u32) -> Option<u32> {
    let known: u32 = XFLAGS.iter().map(|(_, x)| x).sum();
    (x & !known == 0).then(|| {
        XFLAGS
            .iter()
            .filter(|(_, xf)| x & xf != 0)
            .map(|(fl, _)| fl)
            .sum()
    })
}
