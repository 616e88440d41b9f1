//! Cache layer: cached inodes — attributes, data tree and dirty pages of each
//! inode that has been touched since open.
//!
//! Calls structures (the inode's attribute record and data tree).

use super::pages::PageMap;
use crate::structures::btree::{Tree, TreeKind};
use crate::structures::inode::InodeAttrs;
use crate::types::{Attr, FileType, Ino};
use std::collections::{BTreeSet, HashMap};

/// One inode in cache.
pub struct Inode {
    pub ino: Ino,
    pub attrs: InodeAttrs,
    /// Extents (files, symlinks) or directory entries (directories).
    pub tree: Tree,
    /// Dirty data pages.
    pub pages: PageMap,
    /// Allocation goal: where this file's next data block should go.
    pub goal: u64,
    /// Delta of the last change to attrs (for fsync and forking).
    pub delta: u64,
}

impl Inode {
    pub fn new(ino: Ino, attrs: InodeAttrs) -> Inode {
        let kind = if attrs.mode & libc::S_IFMT == libc::S_IFDIR {
            TreeKind::Dirents
        } else {
            TreeKind::Extents
        };
        let tree = Tree::open(ino, kind, attrs.root);
        Inode {
            ino,
            attrs,
            tree,
            pages: PageMap::default(),
            goal: 0,
            delta: 0,
        }
    }

    pub fn kind(&self) -> FileType {
        FileType::from_mode(self.attrs.mode).unwrap_or(FileType::Regular)
    }

    pub fn is_dir(&self) -> bool {
        self.kind() == FileType::Directory
    }

    /// `stat` view of the inode.
    pub fn attr(&self, blksize: u32) -> Attr {
        let a = &self.attrs;
        Attr {
            ino: self.ino,
            kind: self.kind(),
            mode: a.mode,
            nlink: a.nlink,
            uid: a.uid,
            gid: a.gid,
            rdev: a.rdev,
            size: a.size,
            blocks: a
                .blocks
                .saturating_add(self.pages.len() as u64)
                .saturating_mul(blksize as u64 / 512),
            atime: a.atime,
            mtime: a.mtime,
            ctime: a.ctime,
            btime: a.btime,
            blksize,
        }
    }
}

/// All cached inodes and which of them are dirty in the current delta.
#[derive(Default)]
pub struct InodeCache {
    pub map: HashMap<Ino, Inode>,
    /// Inodes whose attributes, tree or pages changed since the last commit.
    pub dirty: BTreeSet<Ino>,
}
