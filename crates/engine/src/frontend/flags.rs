//! Frontend layer: inode flags (`chattr`, `FS_IOC_SETFLAGS`): reading and
//! setting them, and the rules of the two that refuse changes, as Linux
//! keeps them:
//!
//! - an immutable inode takes no change at all: no write, attribute or
//!   xattr change, no new or removed name for it, and, for a directory, no
//!   new or removed name in it;
//! - an append-only inode takes writes at its end only, and otherwise as
//!   immutable, except that an append-only directory takes new names.
//!
//! Who may set which flag (the owner, CAP_LINUX_IMMUTABLE for these two) is
//! the caller's business: the kernel checks it before a FUSE server sees
//! the request. Only clearing the flags is allowed on an inode that has them.
//!
//! Calls the cache and the inode attributes.

use super::Volume;
use crate::error::{err, Errno, Result};
use crate::structures::inode::InodeAttrs;
use crate::types::*;

const FROZEN: u32 = flags::IMMUTABLE | flags::APPEND;

/// Whether `a` may change at all (attributes, xattrs, a new link).
pub(super) fn may_change(a: &InodeAttrs) -> Result<()> {
    if a.flags & FROZEN != 0 {
        return err(Errno::EPERM);
    }
    Ok(())
}

/// Whether a write at `offset` may change `a`'s data.
pub(super) fn may_write(a: &InodeAttrs, offset: u64) -> Result<()> {
    if a.flags & flags::IMMUTABLE != 0 || (a.flags & flags::APPEND != 0 && offset != a.size) {
        return err(Errno::EPERM);
    }
    Ok(())
}

/// Whether directory `dir` may take a new name.
pub(super) fn may_name_in(dir: &InodeAttrs) -> Result<()> {
    if dir.flags & flags::IMMUTABLE != 0 {
        return err(Errno::EPERM);
    }
    Ok(())
}

/// Whether `flags` refuse changes (immutable or append-only).
pub(super) fn frozen_flags(flags: u32) -> bool {
    flags & FROZEN != 0
}

/// Whether either inode has a flag that refuses changes: the shared paths
/// leave such rare cases to the exclusive ones, which check them.
pub(crate) fn frozen(a: &InodeAttrs) -> bool {
    a.flags & FROZEN != 0
}

impl Volume {
    /// The inode flags of `ino`, under the shared guard.
    pub fn flags_shared(&self, ino: Ino) -> Option<Result<u32>> {
        Some(self.inode_shared(ino).map(|i| i.attrs.flags))
    }

    /// The inode flags of `ino`.
    pub fn flags(&mut self, ino: Ino) -> Result<u32> {
        Ok(self.inode(ino)?.attrs.flags)
    }

    /// Set the inode flags of `ino` (EOPNOTSUPP for a flag the engine does
    /// not keep; ENOSPC if the record has no room for them).
    pub fn set_flags(&mut self, ino: Ino, new: u32) -> Result<()> {
        if new & !flags::KNOWN != 0 {
            return err(Errno::ENOTSUP);
        }
        let space = self.xattr_space();
        let i = self.inode(ino)?;
        if i.attrs.flags == new {
            return Ok(());
        }
        if i.attrs.xattr_bytes() > space {
            return err(Errno::ENOSPC);
        }
        self.begin_change(2)?;
        let i = self.inode(ino)?;
        i.attrs.flags = new;
        i.attrs.ctime = Timespec::now();
        self.touch(ino);
        Ok(())
    }
}
