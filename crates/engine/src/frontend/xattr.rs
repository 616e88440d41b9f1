//! Frontend layer: extended attributes, stored as optional attributes of the
//! inode record, so they cost no extra block. Their total cost per inode is
//! bounded by `xattr_space` (ENOSPC beyond it, as ext4 does when they do not
//! fit).
//!
//! The two POSIX ACL xattrs keep the rules of `acl.rs` (an access ACL
//! sets the mode, and is not stored when the mode says it all).
//!
//! Calls the cache and structures (the inode record's xattr cost).

use super::acl::{self, ACL_ACCESS, ACL_DEFAULT};
use super::Volume;
use crate::cache::Inode;
use crate::error::{err, Errno, Result};
use crate::structures::inode::{xattr_cost, InodeAttrs};
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
        super::flags::may_change(&i.attrs)?;
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
        if name == ACL_DEFAULT {
            if i.kind() != FileType::Directory {
                return err(Errno::EACCES);
            }
            acl::check_default(value)?;
        }
        if name == ACL_ACCESS {
            // Parsed before any change: a bad ACL changes nothing.
            acl::set_access(&mut i.attrs.clone(), value)?;
        }
        self.begin_change(2)?;
        let i = self.inode(ino)?;
        let store = name != ACL_ACCESS || acl::set_access(&mut i.attrs, value)?;
        if store {
            i.attrs.xattrs.insert(name.to_vec(), value.to_vec());
        } else {
            i.attrs.xattrs.remove(name);
        }
        i.attrs.ctime = Timespec::now();
        self.touch(ino);
        Ok(())
    }

    pub fn listxattr(&mut self, ino: Ino) -> Result<Vec<Vec<u8>>> {
        Ok(self.inode(ino)?.attrs.xattrs.keys().cloned().collect())
    }

    pub fn removexattr(&mut self, ino: Ino, name: &[u8]) -> Result<()> {
        check_xattr_name(name)?;
        let a = &self.inode(ino)?.attrs;
        if !a.xattrs.contains_key(name) {
            return err(Errno::ENODATA);
        }
        super::flags::may_change(a)?;
        self.begin_change(2)?;
        let i = self.inode(ino)?;
        i.attrs.xattrs.remove(name);
        i.attrs.ctime = Timespec::now();
        self.touch(ino);
        Ok(())
    }
}

/// A new inode made in a directory with attributes `dir` takes the
/// directory's default ACL (`acl.rs`), if it has one.
pub(super) fn inherit_acl(dir: &InodeAttrs, inode: &mut Inode) {
    let Some(default) = dir.xattrs.get(acl::ACL_DEFAULT) else {
        return;
    };
    let a = &mut inode.attrs;
    let is_dir = a.mode & libc::S_IFMT == libc::S_IFDIR;
    if let Some(acl::Inherited {
        mode,
        access,
        default,
    }) = acl::inherit(default, a.mode, is_dir)
    {
        a.mode = mode;
        if let Some(v) = access {
            a.xattrs.insert(acl::ACL_ACCESS.to_vec(), v);
        }
        if let Some(v) = default {
            a.xattrs.insert(acl::ACL_DEFAULT.to_vec(), v);
        }
    }
}
