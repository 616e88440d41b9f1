//! fsck of xattr files (FORMAT.md 7.5): hidden inodes of mode type
//! `S_IFXATTR` holding the xattrs an inode record cannot. Each is named by
//! exactly one owner's attribute 10, its `parent` is that owner, its link
//! count is 1 (that attribute), no directory entry names it, and its
//! contents decode (magic, checksum, sorted names, value sizes). A
//! reference to something else, a file nobody names and a file that does
//! not decode are repaired by dropping the reference and freeing the file
//! (`Fix::XattrFile`); the spilled xattrs are lost, the volume is whole.
//!
//! Calls the structures' xattr file decoder and the device (to read the
//! contents); the namespace checks (`names`) leave these inodes to it.

use super::{Findings, Fix};
use std::collections::{BTreeMap, HashMap};
use tux3::device::Device;
use tux3::structures::extent::Extent;
use tux3::structures::inode::InodeAttrs;
use tux3::structures::xattr_file::{self, FILE_MAX, S_IFXATTR};

/// Whether `a` is an xattr file's record.
pub(super) fn is_xattr_file(a: &InodeAttrs) -> bool {
    a.mode & libc::S_IFMT == S_IFXATTR
}

/// Read xattr file `ino` through its `extents` and decode it.
pub(super) fn check_contents(
    dev: &dyn Device,
    ino: u64,
    a: &InodeAttrs,
    extents: &[(u64, Extent)],
    f: &mut Findings,
) {
    let bs = u64::from(dev.block_size());
    let fix = Fix::XattrFile {
        owner: a.parent,
        xf: ino,
    };
    if a.size > FILE_MAX as u64 {
        let line = format!(
            "xattr file {ino} of inode {}: size {} is past {FILE_MAX}",
            a.parent, a.size
        );
        f.fixable("xattr", fix, line);
        return;
    }
    let mut bytes = vec![0u8; a.size as usize];
    let mut block = vec![0u8; bs as usize];
    let first = extents.first().map_or(0, |(_, e)| e.pblock);
    for (_, e) in extents {
        for k in 0..e.count {
            let at = (e.lblock + k) * bs;
            if at >= a.size {
                break;
            }
            let b = e.pblock + k;
            if let Err(err) = dev.read(b, &mut block) {
                f.problem("xattr", format!("xattr file {ino}: reading block {b}: {err}"));
                return;
            }
            let end = (at + bs).min(a.size);
            bytes[at as usize..end as usize].copy_from_slice(&block[..(end - at) as usize]);
        }
    }
    if let Err(e) = xattr_file::decode(&bytes, ino, a.parent, first) {
        f.fixable("xattr", fix, e.to_string());
    }
}

/// The references between owners and xattr files.
pub(super) fn check_refs(inodes: &BTreeMap<u64, InodeAttrs>, named: &HashMap<u64, usize>, f: &mut Findings) {
    let mut owners_of: HashMap<u64, Vec<u64>> = HashMap::new();
    for (&owner, a) in inodes {
        if a.xattr_file == 0 {
            continue;
        }
        let xf = a.xattr_file;
        let fix = Fix::XattrFile { owner, xf };
        match inodes.get(&xf) {
            None => f.fixable(
                "xattr",
                fix,
                format!("inode {owner}: its xattr file {xf} is not in the inode table"),
            ),
            Some(x) if !is_xattr_file(x) || x.parent != owner => f.fixable(
                "xattr",
                fix,
                format!(
                    "inode {owner}: its xattr file {xf} is not one of its own (mode {:#o}, parent {})",
                    x.mode, x.parent
                ),
            ),
            Some(_) => owners_of.entry(xf).or_default().push(owner),
        }
    }
    for (&ino, a) in inodes.iter().filter(|(_, a)| is_xattr_file(a)) {
        let owners = owners_of.get(&ino).map_or(0, |v| v.len());
        if owners == 0 {
            f.fixable(
                "xattr",
                Fix::XattrFile { owner: 0, xf: ino },
                format!(
                    "xattr file {ino}: no inode names it (its parent {} does not)",
                    a.parent
                ),
            );
            continue;
        }
        if a.nlink != 1 {
            f.fixable(
                "nlink",
                Fix::Nlink { ino, nlink: 1 },
                format!("xattr file {ino}: link count is {}, should be 1", a.nlink),
            );
        }
        if let Some(n) = named.get(&ino) {
            f.problem(
                "names",
                format!("xattr file {ino} is named by {n} directory entries"),
            );
        }
    }
}
