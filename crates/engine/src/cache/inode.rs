//! Cache layer: cached inodes — attributes, data tree and dirty pages of each
//! inode that has been touched since open.
//!
//! Each cached inode sits in its own heap cell behind its own mutex (the
//! file's lock): the map may grow without moving an inode, and operations
//! on different files that run together under the shared delta guard
//! (`frontend/shared.rs`) lock only the inodes they touch. Code that holds
//! the volume exclusively reaches inodes with `get_mut`, which takes no
//! lock at all.
//!
//! Calls structures (the inode's attribute record and data tree).

use super::pages::PageMap;
use crate::structures::btree::{Tree, TreeKind};
use crate::structures::inode::InodeAttrs;
use crate::types::{Attr, FileType, Ino};
use parking_lot::{Mutex, MutexGuard};
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
    /// Delta of the last change to attrs (for fsync and forking). While
    /// it is the open delta, the inode is in the delta's dirty set, so a
    /// later change need not take the set's lock again.
    pub delta: u64,
    /// The open delta's number while the inode is in its data-changed set
    /// (the frontend's), 0 once it leaves it.
    pub data_delta: u64,
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
            data_delta: 0,
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

/// One cached inode's cell: boxed so that it never moves, locked by the
/// operations that share the volume.
pub type InodeCell = Box<Mutex<Inode>>;

/// Cached inodes by number (seeded fast hashing: the keys are integers).
pub type InodeMap = HashMap<Ino, InodeCell, foldhash::fast::RandomState>;

/// All cached inodes and which of them are dirty in the current delta.
#[derive(Default)]
pub struct InodeCache {
    pub map: InodeMap,
    /// Inodes whose attributes, tree or pages changed since the last commit.
    /// (Its own lock: operations under the shared guard add to it.)
    pub dirty: Mutex<BTreeSet<Ino>>,
    /// Inodes whose trees changed since the last unify (branches to write,
    /// a root to record): with the dirty ones, all a unify looks at, so its
    /// cost follows what changed, not the inodes in cache. (Exclusive
    /// access only.)
    pub unify_pending: BTreeSet<Ino>,
}

impl InodeCache {
    /// Inode `ino`, through exclusive access (no lock taken).
    pub fn get_mut(&mut self, ino: Ino) -> Option<&mut Inode> {
        self.map.get_mut(&ino).map(|c| c.get_mut())
    }

    /// Inode `ino`, locked (shared access; uncontended under exclusive).
    pub fn lock(&self, ino: Ino) -> Option<MutexGuard<'_, Inode>> {
        self.map.get(&ino).map(|c| c.lock())
    }

    pub fn contains(&self, ino: Ino) -> bool {
        self.map.contains_key(&ino)
    }

    pub fn insert(&mut self, inode: Inode) {
        self.map.insert(inode.ino, Box::new(Mutex::new(inode)));
    }

    /// Drop `ino` from the cache (and from the dirty set), returning it.
    pub fn remove(&mut self, ino: Ino) -> Option<Inode> {
        self.dirty.get_mut().remove(&ino);
        self.unify_pending.remove(&ino);
        self.map.remove(&ino).map(|c| c.into_inner())
    }

    /// Mark `ino` dirty in the current delta (shared access).
    pub fn mark_dirty(&self, ino: Ino) {
        self.dirty.lock().insert(ino);
    }
}
