//! Frontend layer: extended attributes. Small ones are optional attributes
//! of the inode record (attribute 7), so they cost no extra block; those
//! the record cannot hold (larger than its xattr space, or no room left)
//! go to the inode's xattr file: a hidden inode (mode type `S_IFXATTR`,
//! link count 1, parent its owner) whose data is the sorted list of them
//! (`structures/xattr_file.rs`), named by the owner's attribute 10. Its
//! pages are ordinary file pages, so commits, snapshots, fsck and the
//! allocator handle its blocks as any file's; a change rewrites only the
//! pages whose bytes differ, and the owner's record and the file change in
//! the same delta. An fsync of an inode whose xattr file changed in the
//! open delta takes a full delta commit (`fsync.rs`).
//!
//! Limits, as Linux's: names of 1 ..= 255 bytes (ERANGE), values up to
//! 64 KiB (E2BIG), names of one inode up to the 64 KiB of a listxattr
//! answer and an xattr file up to 1 MiB (ENOSPC). `security.capability`
//! and the two POSIX ACL xattrs stay in the record (ENOSPC if they do not
//! fit): a write strips the first under the shared guard, and the ACLs
//! keep the rules of `acl.rs` (an access ACL sets the mode, and is not
//! stored when the mode says it all; a new inode takes its directory's
//! default ACL).
//!
//! Calls the cache, structures (inode record costs, the xattr file's
//! format, extent lookups), the ACL rules and the file and namespace
//! operations.

use super::acl::{self, ACL_ACCESS, ACL_DEFAULT};
use super::Volume;
use crate::cache::Inode;
use crate::error::{err, Errno, Error, Result};
use crate::structures::extent;
use crate::structures::inode::{xattr_cost, InodeAttrs};
use crate::structures::xattr_file::{self, FILE_MAX, LIST_MAX, S_IFXATTR, VALUE_MAX};
use crate::types::*;
use std::collections::BTreeMap;

pub(super) fn check_xattr_name(name: &[u8]) -> Result<()> {
    if name.is_empty() || name.len() > NAME_MAX {
        return err(Errno::ERANGE);
    }
    Ok(())
}

/// ESTALE for an xattr file: no handle may reach one.
pub(super) fn not_xattr_file(a: &InodeAttrs) -> Result<()> {
    if a.mode & libc::S_IFMT == S_IFXATTR {
        return err(Errno::ESTALE);
    }
    Ok(())
}

/// Xattrs always kept in the record (see the top of this file).
fn stays_in_record(name: &[u8]) -> bool {
    name == XATTR_CAPS || name == ACL_ACCESS || name == ACL_DEFAULT
}

/// Bytes the names of `i`'s xattrs take in a listxattr answer (each with
/// its NUL), its xattr file read.
fn list_bytes(i: &Inode) -> usize {
    let spilled = i.spilled.iter().flat_map(|m| m.keys());
    i.attrs.xattrs.keys().chain(spilled).map(|n| n.len() + 1).sum()
}

/// `i`'s xattr names, sorted: the record's and its xattr file's (read).
pub(super) fn names_of(i: &Inode) -> Vec<Vec<u8>> {
    let mut all: Vec<Vec<u8>> = i.attrs.xattrs.keys().cloned().collect();
    if let Some(m) = &i.spilled {
        all.extend(m.keys().cloned());
        all.sort_unstable();
    }
    all
}

/// The value of `name` in `i` if its record holds it or its xattr file is
/// read (`Some(None)`: not there); `None` if the xattr file must be read.
pub(super) fn value_of(i: &Inode, name: &[u8]) -> Option<Option<Vec<u8>>> {
    if let Some(v) = i.attrs.xattrs.get(name) {
        return Some(Some(v.clone()));
    }
    if i.attrs.xattr_file == 0 {
        return Some(None);
    }
    i.spilled.as_ref().map(|m| m.get(name).cloned())
}

impl Volume {
    /// ESTALE if `ino` is an xattr file (see [`not_xattr_file`]).
    pub fn not_xattr_file(&mut self, ino: Ino) -> Result<()> {
        not_xattr_file(&self.inode(ino)?.attrs)
    }

    /// Read `ino`'s xattr file into its cached inode, if not done yet.
    fn load_spilled(&mut self, ino: Ino) -> Result<()> {
        let i = self.inode(ino)?;
        if i.spilled.is_some() {
            return Ok(());
        }
        let xf = i.attrs.xattr_file;
        if xf == 0 {
            self.inode(ino)?.spilled = Some(BTreeMap::new());
            return Ok(());
        }
        let map = self.read_xattr_file(ino, xf)?;
        self.inode(ino)?.spilled = Some(map);
        Ok(())
    }

    /// The xattrs in xattr file `xf` of `owner`, checked: its type, its
    /// owner, its size and its contents.
    fn read_xattr_file(&mut self, owner: Ino, xf: Ino) -> Result<BTreeMap<Vec<u8>, Vec<u8>>> {
        let dev = self.be.dev.clone();
        let leaf = self.be.sb.itable.addr;
        let x = self.inode(xf).map_err(|e| match e {
            Error::Posix(Errno::ENOENT) => {
                Error::corrupt(leaf, format!("inode {owner}: its xattr file {xf} does not exist"))
            }
            e => e,
        })?;
        let first = extent::lookup(&mut x.tree, dev.as_ref(), 0)?.map_or(0, |e| e.pblock);
        let (mode, parent, size) = (x.attrs.mode, x.attrs.parent, x.attrs.size);
        if mode & libc::S_IFMT != S_IFXATTR || parent != owner {
            return Err(Error::corrupt(
                first,
                format!("inode {owner}: inode {xf} (mode {mode:#o}, parent {parent}) is not its xattr file"),
            ));
        }
        if size > FILE_MAX as u64 {
            return Err(Error::corrupt(
                first,
                format!("xattr file {xf} of inode {owner}: size {size}"),
            ));
        }
        // A block that fails its checksum is the xattr file's damage.
        let bytes = self.read_data(xf, 0, size as usize).map_err(|e| match e {
            Error::BadData(bad) => {
                Error::corrupt(bad.pblock, format!("xattr file {xf} of inode {owner}: {bad}"))
            }
            e => e,
        })?;
        xattr_file::decode(&bytes, xf, owner, first)
    }

    pub fn getxattr(&mut self, ino: Ino, name: &[u8]) -> Result<Vec<u8>> {
        check_xattr_name(name)?;
        if self.inode(ino)?.attrs.xattr_file != 0 {
            self.load_spilled(ino)?;
        }
        match value_of(self.inode(ino)?, name) {
            Some(Some(v)) => Ok(v),
            _ => err(Errno::ENODATA),
        }
    }

    pub fn listxattr(&mut self, ino: Ino) -> Result<Vec<Vec<u8>>> {
        self.load_spilled(ino)?;
        Ok(names_of(self.inode(ino)?))
    }

    pub fn setxattr(&mut self, ino: Ino, name: &[u8], value: &[u8], mode: XattrMode) -> Result<()> {
        check_xattr_name(name)?;
        if value.len() > VALUE_MAX {
            return err(Errno::E2BIG);
        }
        let space = self.xattr_space();
        self.load_spilled(ino)?;
        let i = self.inode(ino)?;
        super::flags::may_change(&i.attrs)?;
        let in_record = i.attrs.xattrs.get(name).map(|v| xattr_cost(name, v));
        let spilled = i.spilled.as_ref().is_some_and(|m| m.contains_key(name));
        match (mode, in_record.is_some() || spilled) {
            (XattrMode::Create, true) => return err(Errno::EEXIST),
            (XattrMode::Replace, false) => return err(Errno::ENODATA),
            (_, false) if list_bytes(i) + name.len() + 1 > LIST_MAX => return err(Errno::ENOSPC),
            _ => {}
        }
        // The record takes it if it fits there with the others.
        let fits = i.attrs.xattr_bytes() - in_record.unwrap_or(0) + xattr_cost(name, value) <= space;
        if !fits && stays_in_record(name) {
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
        let mut new_spill = (!fits || spilled).then(|| {
            let mut m = i.spilled.clone().unwrap_or_default();
            m.remove(name);
            if !fits {
                m.insert(name.to_vec(), value.to_vec());
            }
            m
        });
        // A record written under an older, larger bound (before attributes
        // 10 and 11 took their bytes) may hold more than `space`: it must
        // come within it to take attribute 10, so its largest xattrs move
        // to the file too.
        let mut moved = Vec::new();
        if let Some(m) = new_spill.as_mut() {
            let new_cost = if fits { xattr_cost(name, value) } else { 0 };
            let mut left = i.attrs.xattr_bytes() - in_record.unwrap_or(0) + new_cost;
            let mut by_size: Vec<_> = (i.attrs.xattrs.iter())
                .filter(|(n, _)| n.as_slice() != name && !stays_in_record(n))
                .collect();
            by_size.sort_by_key(|(n, v)| std::cmp::Reverse(xattr_cost(n, v)));
            for (n, v) in by_size {
                if left <= space {
                    break;
                }
                left -= xattr_cost(n, v);
                m.insert(n.clone(), v.clone());
                moved.push(n.clone());
            }
        }
        let blocks = self.spill_blocks(new_spill.as_ref())?;
        self.begin_change(2 + blocks)?;
        let i = self.inode(ino)?;
        i.attrs.xattrs.remove(name);
        for n in &moved {
            i.attrs.xattrs.remove(n);
        }
        if fits {
            let store = name != ACL_ACCESS || acl::set_access(&mut i.attrs, value)?;
            if store {
                i.attrs.xattrs.insert(name.to_vec(), value.to_vec());
            }
        }
        if let Some(m) = new_spill {
            self.store_spilled(ino, m)?;
        }
        let i = self.inode(ino)?;
        i.attrs.ctime = Timespec::now();
        self.touch(ino);
        Ok(())
    }

    pub fn removexattr(&mut self, ino: Ino, name: &[u8]) -> Result<()> {
        check_xattr_name(name)?;
        self.load_spilled(ino)?;
        let i = self.inode(ino)?;
        let in_record = i.attrs.xattrs.contains_key(name);
        let mut m = i.spilled.clone().unwrap_or_default();
        if !in_record && m.remove(name).is_none() {
            return err(Errno::ENODATA);
        }
        super::flags::may_change(&i.attrs)?;
        let blocks = if in_record {
            0
        } else {
            self.spill_blocks(Some(&m))?
        };
        self.begin_change(2 + blocks)?;
        if in_record {
            self.inode(ino)?.attrs.xattrs.remove(name);
        } else {
            self.store_spilled(ino, m)?;
        }
        self.inode(ino)?.attrs.ctime = Timespec::now();
        self.touch(ino);
        Ok(())
    }

    /// Blocks to reserve for writing an xattr file of `m` (ENOSPC past
    /// its largest size): its pages and a few tree nodes.
    fn spill_blocks(&self, m: Option<&BTreeMap<Vec<u8>, Vec<u8>>>) -> Result<u64> {
        let Some(m) = m else { return Ok(0) };
        let size = xattr_file::HEADER + m.iter().map(|(n, v)| xattr_file::entry_cost(n, v)).sum::<usize>();
        if size > FILE_MAX {
            return err(Errno::ENOSPC);
        }
        Ok((size as u64).div_ceil(self.bs()) + 4)
    }

    /// Make `m` the xattrs of `owner`'s xattr file (space reserved): make
    /// the file if it has none, free it if `m` is empty, and otherwise
    /// write the pages whose bytes change and cut it to its new size.
    fn store_spilled(&mut self, owner: Ino, m: BTreeMap<Vec<u8>, Vec<u8>>) -> Result<()> {
        let mut xf = self.inode(owner)?.attrs.xattr_file;
        self.books.get_mut().xattr_files.insert(owner);
        if m.is_empty() {
            if xf != 0 {
                self.free_xattr_file(xf)?;
            }
            let i = self.inode(owner)?;
            i.attrs.xattr_file = 0;
            i.spilled = Some(m);
            return Ok(());
        }
        if xf == 0 {
            xf = self.alloc_ino(owner)?;
            self.cache.insert(xattr_file_inode(xf, owner, self.be.delta));
            self.touch(xf);
            self.inode(owner)?.attrs.xattr_file = xf;
        }
        self.write_xattr_file(xf, &xattr_file::encode(&m))?;
        self.inode(owner)?.spilled = Some(m);
        Ok(())
    }

    /// Write `bytes` as the contents of xattr file `xf`: only the blocks
    /// whose bytes change (the cached ones that do not are kept), then the
    /// new size.
    fn write_xattr_file(&mut self, xf: Ino, bytes: &[u8]) -> Result<()> {
        let bs = self.bs();
        let len = bytes.len() as u64;
        self.inode(xf)?; // in cache (it may have been let go of)
        let mut x = self.cache.lock(xf).ok_or(Error::Posix(Errno::ENOENT))?;
        let old = x.attrs.size;
        for (k, chunk) in bytes.chunks(bs as usize).enumerate() {
            let start = k as u64 * bs;
            let same = start + chunk.len() as u64 <= old
                && x.pages.content(k as u64).is_some_and(|p| {
                    p.get(..chunk.len()) == Some(chunk)
                        && (start + bs <= len || p[chunk.len()..].iter().all(|&b| b == 0))
                });
            if !same {
                self.copy_into(&mut x, start, start + chunk.len() as u64, chunk)?;
            }
        }
        drop(x);
        if old > len {
            self.truncate(xf, len)?;
        }
        let x = self.inode(xf)?;
        x.attrs.mtime = Timespec::now();
        x.attrs.ctime = x.attrs.mtime;
        self.touch(xf);
        Ok(())
    }

    /// Free xattr file `xf` (its owner is freed or holds nothing there any
    /// more). Its number was never known to the kernel, so it may be given
    /// out again at once.
    pub(super) fn free_xattr_file(&mut self, xf: Ino) -> Result<()> {
        self.free_inode(xf)?;
        self.books.get_mut().freed_inos.remove(&xf);
        Ok(())
    }

    /// Free xattr file `xf` of freed inode `owner` — if it is one, and
    /// `owner`'s: a damaged reference must not free another inode (fsck
    /// reports what is left).
    pub(super) fn free_owned_xattr_file(&mut self, owner: Ino, xf: Ino) -> Result<()> {
        // The owner is gone already: an xattr file that cannot be read is
        // left for fsck rather than failing the free half done.
        let x = match self.inode(xf) {
            Ok(x) => x,
            Err(e) => {
                tracing::error!("inode {owner} freed, but not its xattr file {xf}: {e}");
                return Ok(());
            }
        };
        if x.attrs.mode & libc::S_IFMT != S_IFXATTR || x.attrs.parent != owner {
            tracing::error!("inode {owner} named inode {xf} as its xattr file, which it is not: left alone");
            return Ok(());
        }
        self.free_xattr_file(xf)
    }

    /// Inode number `ino`, wanted by a receive, is an xattr file's: give
    /// that file a new number (its owner's attribute follows). Whether it
    /// was one.
    pub(super) fn move_xattr_file(&mut self, ino: Ino) -> Result<bool> {
        let x = match self.inode(ino) {
            Ok(x) => x,
            Err(Error::Posix(Errno::ENOENT)) => return Ok(false),
            Err(e) => return Err(e),
        };
        if x.attrs.mode & libc::S_IFMT != S_IFXATTR {
            return Ok(false);
        }
        let owner = x.attrs.parent;
        self.load_spilled(owner)?;
        let m = self.inode(owner)?.spilled.clone().unwrap_or_default();
        let blocks = self.spill_blocks(Some(&m))?;
        self.begin_change(2 + blocks)?;
        // The new file first, so the old number is not given out again.
        self.inode(owner)?.attrs.xattr_file = 0;
        self.store_spilled(owner, m)?;
        self.free_xattr_file(ino)?;
        self.touch(owner);
        Ok(true)
    }
}

/// A new, empty xattr file `xf` of `owner`, changed in `delta`.
fn xattr_file_inode(xf: Ino, owner: Ino, delta: u64) -> Inode {
    let now = Timespec::now();
    let attrs = InodeAttrs {
        mode: S_IFXATTR,
        nlink: 1,
        parent: owner,
        atime: now,
        mtime: now,
        ctime: now,
        btime: now,
        ..InodeAttrs::default()
    };
    let mut inode = Inode::new(xf, attrs);
    inode.delta = delta;
    inode.spilled = Some(BTreeMap::new());
    inode
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
