//! Frontend layer: repair hooks for `fsck --repair`
//! (`crates/tools/src/fsck/fix.rs`) — small, direct
//! changes to a mounted volume that the checker has proven right — set a
//! link count or a `blocks` attribute, free leaked blocks, mark referenced
//! blocks in use, take out an inode record that does not decode and the
//! entries that name an inode that is not there. Each change joins the current delta like any operation;
//! the caller unifies afterwards.
//!
//! Calls the cache (inodes) and the backend's allocator.

use super::Volume;
use crate::error::{err, Errno, Error, Result};
use crate::structures::xattr_file::S_IFXATTR;
use crate::types::Ino;

impl Volume {
    fn repair_begin(&self) -> Result<()> {
        if self.be.read_only {
            return err(Errno::EROFS);
        }
        if self.failed {
            return err(Errno::EIO);
        }
        Ok(())
    }

    /// Set the link count of `ino`.
    pub fn repair_nlink(&mut self, ino: Ino, nlink: u32) -> Result<()> {
        self.repair_begin()?;
        self.inode(ino)?.attrs.nlink = nlink;
        self.touch(ino);
        Ok(())
    }

    /// Set the `blocks` attribute (data blocks held) of `ino`.
    pub fn repair_blocks(&mut self, ino: Ino, blocks: u64) -> Result<()> {
        self.repair_begin()?;
        self.inode(ino)?.attrs.blocks = blocks;
        self.touch(ino);
        Ok(())
    }

    /// Free blocks that are in use but referenced by nothing.
    pub fn repair_free(&mut self, start: u64, count: u64) -> Result<()> {
        self.repair_begin()?;
        self.be.alloc.free_range(start, count);
        Ok(())
    }

    /// Drop `owner`'s reference to xattr file `xf` if it names it (`owner`
    /// 0: none does), and free `xf` if it is an xattr file.
    pub fn repair_xattr_file(&mut self, owner: Ino, xf: Ino) -> Result<()> {
        self.repair_begin()?;
        if owner != 0 {
            let o = self.inode(owner)?;
            if o.attrs.xattr_file == xf {
                o.attrs.xattr_file = 0;
                o.spilled = None;
                self.touch(owner);
            }
        }
        match self.inode(xf) {
            Ok(x) if x.attrs.mode & libc::S_IFMT == S_IFXATTR => self.free_inode(xf),
            Ok(_) | Err(Error::Posix(Errno::ENOENT)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Mark referenced blocks in use that the bitmap says are free.
    pub fn repair_mark_used(&mut self, start: u64, count: u64) -> Result<()> {
        self.repair_begin()?;
        if !self.be.alloc.apply_alloc(start, count) {
            return Err(Error::corrupt(
                start,
                format!("{count} blocks outside the volume"),
            ));
        }
        self.be.alloc.delta_allocs.push((start, count));
        Ok(())
    }

    /// Take inode `ino`'s record out of the inode table, whatever it holds
    /// (it does not decode): the blocks it reached are leaked blocks the
    /// same repair frees, and the entries naming it go by
    /// [`Volume::repair_drop_entry`].
    pub fn repair_drop_record(&mut self, ino: Ino) -> Result<()> {
        self.repair_begin()?;
        let dev = self.be.dev.clone();
        self.cache.remove(ino);
        self.be.orphans.remove(&ino);
        self.be.itable.get_mut().remove(dev.as_ref(), ino)?;
        Ok(())
    }

    /// Remove the entry `name` of directory `dir`, which names an inode
    /// that is not there, as an unlink changes the directory (nothing
    /// else: there is no inode to unlink).
    pub fn repair_drop_entry(&mut self, dir: Ino, name: &[u8]) -> Result<()> {
        self.repair_begin()?;
        let e = self.find(dir, name)?.ok_or(Error::Posix(Errno::ENOENT))?;
        self.remove_entry(dir, &e.spot, e.ino)
    }
}
