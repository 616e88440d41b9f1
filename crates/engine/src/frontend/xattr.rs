//! Frontend layer: extended attributes, stored as optional attributes of the
//! inode record, so they cost no extra block. Their total cost per inode is
//! bounded by `xattr_space` (ENOSPC beyond it, as ext4 does when they do not
//! fit).
//!
//! Calls the cache and structures (the inode record's xattr cost).

use super::Volume;
use crate::error::{err, Errno, Result};
use crate::structures::inode::xattr_cost;
use crate::types::*;

pub(super) fn check_xattr_name(name: &[u8]) -> Result<()> {
    if name.is_empty() || name.len() > NAME_MAX {
        return err(Errno::ERANGE);
    }
    Ok(())
}

impl Volume {
    pub fn getxattr(&mut self, ino: Ino, name: &[u8]) -> Result<Vec<u8>> {
        check_xattr_name(name)?;
        match self.inode(ino)?.attrs.xattrs.get(name) {
            Some(v) => Ok(v.clone()),
            None => err(Errno::ENODATA),
        }
    }

    pub fn setxattr(&mut self, ino: Ino, name: &[u8], value: &[u8], mode: XattrMode) -> Result<()> {
        check_xattr_name(name)?;
        let space = self.xattr_space();
        let i = self.inode(ino)?;
        let old = i.attrs.xattrs.get(name);
        match (mode, old) {
            (XattrMode::Create, Some(_)) => return err(Errno::EEXIST),
            (XattrMode::Replace, None) => return err(Errno::ENODATA),
            _ => {}
        }
        let old_cost = old.map_or(0, |v| xattr_cost(name, v));
        if i.attrs.xattr_bytes() - old_cost + xattr_cost(name, value) > space {
            return err(Errno::ENOSPC);
        }
        self.begin_change(2)?;
        let i = self.inode(ino)?;
        i.attrs.xattrs.insert(name.to_vec(), value.to_vec());
        i.attrs.ctime = Timespec::now();
        self.touch(ino);
        Ok(())
    }

    pub fn listxattr(&mut self, ino: Ino) -> Result<Vec<Vec<u8>>> {
        Ok(self.inode(ino)?.attrs.xattrs.keys().cloned().collect())
    }

    pub fn removexattr(&mut self, ino: Ino, name: &[u8]) -> Result<()> {
        check_xattr_name(name)?;
        if !self.inode(ino)?.attrs.xattrs.contains_key(name) {
            return err(Errno::ENODATA);
        }
        self.begin_change(2)?;
        let i = self.inode(ino)?;
        i.attrs.xattrs.remove(name);
        i.attrs.ctime = Timespec::now();
        self.touch(ino);
        Ok(())
    }
}
