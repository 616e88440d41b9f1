//! API layer: inode flags (`chattr`), and the two that decide when a
//! change is durable. `sync` (`FS_SYNC_FL`, chattr +S) makes a file's
//! writes and attribute changes durable before they return, as `O_SYNC`
//! does; on a directory, like `dirsync` (`FS_DIRSYNC_FL`, chattr +D), it
//! makes changes to the directory's entries (create, link, unlink, rename
//! in or out, mkdir, rmdir, symlink, mknod) durable before they return, as
//! `mount -o dirsync` does for every directory.
//!
//! Calls the rest of the API (fsync, sync) and the frontend's flags.

use super::Fs;
use crate::error::Result;
use crate::types::{flags, Ino};

impl Fs {
    /// The inode flags of `ino` ([`crate::types::flags`]).
    pub fn flags(&self, ino: Ino) -> Result<u32> {
        self.warm(ino);
        if let Some(r) = self.shared_vol().flags_shared(ino) {
            return r;
        }
        self.vol().flags(ino)
    }

    /// Set the inode flags of `ino` (`chattr`); EOPNOTSUPP for a flag the
    /// engine does not keep. Who may set which is the caller's to check.
    pub fn set_flags(&self, ino: Ino, flags: u32) -> Result<()> {
        self.warm(ino);
        self.vol().set_flags(ino, flags)
    }

    /// `r`, the result of a change to `ino`, once the change is durable if
    /// `ino` has the sync flag (the error of making it so, if any).
    pub(super) fn synced<T>(&self, ino: Ino, r: Result<T>) -> Result<T> {
        let v = r?;
        if self.flags(ino).is_ok_and(|f| f & flags::SYNC != 0) {
            self.fsync(ino, false)?;
        }
        Ok(v)
    }

    /// `r`, the result of a change to the entries of `dirs`, once the
    /// change is durable if one of them has the dirsync or sync flag. A
    /// whole commit: it carries the entries of both directories of a
    /// rename and the inodes they name.
    pub(super) fn dir_synced<T>(&self, dirs: &[Ino], r: Result<T>) -> Result<T> {
        let v = r?;
        let wants = |d: Ino| {
            self.flags(d)
                .is_ok_and(|f| f & (flags::DIRSYNC | flags::SYNC) != 0)
        };
        if dirs.iter().any(|&d| wants(d)) {
            self.sync()?;
        }
        Ok(v)
    }
}
