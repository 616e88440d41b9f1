//! Cache layer: cached inodes — attributes, data tree and dirty pages of each
//! inode that has been touched since open.
//!
//! Each cached inode sits in its own heap cell behind its own mutex (the
//! file's lock), shared by reference count: the map (sharded, each shard
//! behind a short read-write lock) may grow and shrink under the shared
//! delta guard (`frontend/shared.rs`: creates and unlinks run there)
//! without moving an inode, and an operation holding a cell keeps it
//! valid even if a concurrent unlink frees the inode (which marks it
//! `gone`). Code that holds the volume exclusively reaches inodes with
//! `get_mut`, which takes no lock at all.
//!
//! Calls structures (the inode's attribute record and data tree).

use super::pages::PageMap;
use crate::structures::btree::{Tree, TreeKind};
use crate::structures::extent;
use crate::structures::inode::InodeAttrs;
use crate::types::{Attr, FileType, Ino};
use parking_lot::{ArcMutexGuard, Mutex, RawMutex, RwLock};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

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
    /// Freed by an operation under the shared guard while others may
    /// still hold its cell: no longer part of the volume.
    pub gone: bool,
    /// Locked since the eviction hand last passed it ([`InodeCache::evict`]).
    pub used: bool,
}

impl Inode {
    pub fn new(ino: Ino, attrs: InodeAttrs) -> Inode {
        let kind = if attrs.mode & libc::S_IFMT == libc::S_IFDIR {
            TreeKind::Dirents
        } else {
            TreeKind::Extents
        };
        let tree = data_tree(ino, kind, &attrs, false);
        Inode {
            ino,
            attrs,
            tree,
            pages: PageMap::default(),
            goal: 0,
            delta: 0,
            data_delta: 0,
            gone: false,
            used: true,
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

/// The data tree of inode `ino` whose record is `attrs`: its extents held
/// in the record, else its tree from the unified root — or (`reset`: a
/// Drop of the number came earlier in the replayed log) from none.
pub fn data_tree(ino: Ino, kind: TreeKind, attrs: &InodeAttrs, reset: bool) -> Tree {
    if attrs.inline.is_empty() {
        return Tree::open(ino, kind, if reset { Default::default() } else { attrs.root });
    }
    let entries = attrs
        .inline
        .iter()
        .map(|e| (e.lblock, extent::encode(e.pblock, e.count, e.birth)))
        .collect();
    Tree::held_inline(ino, kind, entries)
}

/// One cached inode's cell: on the heap, so that it never moves, shared
/// by reference count, so that an operation holding it may outlive its
/// place in the map (a concurrent unlink frees it: the holder then finds
/// it `gone`), and locked by the operations that share the volume.
pub type InodeCell = Arc<Mutex<Inode>>;

/// A locked cached inode, holding its cell.
pub type InodeGuard = ArcMutexGuard<RawMutex, Inode>;

/// Shards of the map: operations under the shared guard add and remove
/// inodes (creates, unlinks) while others look them up.
const SHARDS: usize = 64;

type Shard = RwLock<ShardMap>;

/// One shard: the cached inodes whose numbers fall in it, and those of
/// them freed under the shared guard whose records the inode table still
/// holds (until the next exclusive holder settles the free): a load from
/// the table must not bring such an inode back.
#[derive(Default)]
struct ShardMap {
    inodes: HashMap<Ino, InodeCell, foldhash::fast::RandomState>,
    freed: HashSet<Ino, foldhash::fast::RandomState>,
}

/// All cached inodes and which of them are dirty in the current delta.
pub struct InodeCache {
    /// Cached inodes by number, in shards by number (seeded fast hashing
    /// within each: the keys are integers).
    shards: Box<[Shard]>,
    /// Inodes whose attributes, tree or pages changed since the last commit.
    /// (Its own lock: operations under the shared guard add to it.)
    pub dirty: Mutex<BTreeSet<Ino>>,
    /// Inodes whose trees changed since the last unify (branches to write,
    /// a root to record): with the dirty ones, all a unify looks at, so its
    /// cost follows what changed, not the inodes in cache. (Exclusive
    /// access only.)
    pub unify_pending: BTreeSet<Ino>,
    /// Inodes loaded from the inode table since the last eviction pass
    /// (`reset_loads`).
    loads: AtomicUsize,
    /// The shard the eviction hand is at.
    hand: usize,
}

impl Default for InodeCache {
    fn default() -> InodeCache {
        InodeCache {
            shards: (0..SHARDS).map(|_| Shard::default()).collect(),
            dirty: Mutex::default(),
            unify_pending: BTreeSet::new(),
            loads: AtomicUsize::new(0),
            hand: 0,
        }
    }
}

fn shard_of(ino: Ino) -> usize {
    // Neighbouring numbers (one directory's files) go to different shards.
    (ino as usize) % SHARDS
}

/// The inode in `cell`, through exclusive access to the cache: nothing
/// else holds the cell then (operations holding cells run under the
/// shared guard, and end before an exclusive holder starts).
fn cell_mut(cell: &mut InodeCell) -> &mut Inode {
    debug_assert_eq!(
        Arc::strong_count(cell),
        1,
        "a cached inode is held outside the shared delta guard"
    );
    if Arc::get_mut(cell).is_none() {
        // Never, by the protocol above; should it happen, whoever holds
        // the cell finds a stand-in that is gone, and the inode moves to
        // a cell of its own.
        let mut stand_in = Inode::new(cell.lock().ino, InodeAttrs::default());
        stand_in.gone = true;
        let inode = std::mem::replace(&mut *cell.lock(), stand_in);
        *cell = Arc::new(Mutex::new(inode));
    }
    match Arc::get_mut(cell) {
        Some(m) => m.get_mut(),
        None => unreachable!("a fresh cell has one holder"),
    }
}

impl InodeCache {
    /// Inode `ino`, through exclusive access (no lock taken).
    pub fn get_mut(&mut self, ino: Ino) -> Option<&mut Inode> {
        let i = cell_mut(self.shards[shard_of(ino)].get_mut().inodes.get_mut(&ino)?);
        i.used = true;
        Some(i)
    }

    /// Every cached inode, through exclusive access.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut Inode> {
        self.shards
            .iter_mut()
            .flat_map(|s| s.get_mut().inodes.values_mut().map(cell_mut))
    }

    /// Inode `ino`, locked (shared access; uncontended under exclusive).
    /// `None` when it is not cached, or was freed by an operation that
    /// held it before this one.
    pub fn lock(&self, ino: Ino) -> Option<InodeGuard> {
        let cell = self.shards[shard_of(ino)].read().inodes.get(&ino)?.clone();
        let mut i = cell.lock_arc();
        i.used = true;
        (!i.gone).then_some(i)
    }

    /// Inode `ino` locked if that is possible without waiting; `None`
    /// as for [`InodeCache::lock`], or when someone holds it.
    pub fn try_lock(&self, ino: Ino) -> Option<InodeGuard> {
        let cell = self.shards[shard_of(ino)].read().inodes.get(&ino)?.clone();
        let i = cell.try_lock_arc()?;
        (!i.gone).then_some(i)
    }

    pub fn contains(&self, ino: Ino) -> bool {
        self.shards[shard_of(ino)].read().inodes.contains_key(&ino)
    }

    pub fn insert(&mut self, inode: Inode) {
        let ino = inode.ino;
        self.shards[shard_of(ino)]
            .get_mut()
            .inodes
            .insert(ino, Arc::new(Mutex::new(inode)));
    }

    /// `inode`, just loaded from the inode table under the shared guard,
    /// joins the cache and is returned locked — unless another operation
    /// loaded it first (that copy is returned, and may have changed since)
    /// or freed it since (`None`: the table's record is stale).
    pub fn insert_loaded(&self, inode: Inode) -> Option<InodeGuard> {
        let ino = inode.ino;
        let cell = {
            let mut shard = self.shards[shard_of(ino)].write();
            if shard.freed.contains(&ino) {
                return None;
            }
            shard
                .inodes
                .entry(ino)
                .or_insert_with(|| {
                    self.loads.fetch_add(1, Relaxed);
                    Arc::new(Mutex::new(inode))
                })
                .clone()
        };
        let i = cell.lock_arc();
        (!i.gone).then_some(i)
    }

    /// The frees of [`InodeCache::remove_shared`] are settled: the inode
    /// table no longer holds their records.
    pub fn forget_freed(&mut self) {
        for s in self.shards.iter_mut() {
            s.get_mut().freed.clear();
        }
    }

    /// [`InodeCache::insert`] under the shared guard: a new inode nobody
    /// else can name yet (its entry is added after).
    pub fn insert_shared(&self, inode: Inode) {
        let ino = inode.ino;
        self.shards[shard_of(ino)]
            .write()
            .inodes
            .insert(ino, Arc::new(Mutex::new(inode)));
    }

    /// Drop `ino` from the cache (and from the dirty set), returning it.
    pub fn remove(&mut self, ino: Ino) -> Option<Inode> {
        self.dirty.get_mut().remove(&ino);
        self.unify_pending.remove(&ino);
        let cell = self.shards[shard_of(ino)].get_mut().inodes.remove(&ino)?;
        Some(Arc::try_unwrap(cell).ok()?.into_inner())
    }

    /// Drop `i` (locked by the caller) from the cache under the shared
    /// guard: it is `gone` from here on, for anyone who holds its cell.
    /// It stays in `unify_pending` until the next exclusive holder settles
    /// the operation (see `Volume::settle`).
    pub fn remove_shared(&self, i: &mut Inode) {
        i.gone = true;
        self.dirty.lock().remove(&i.ino);
        let mut shard = self.shards[shard_of(i.ino)].write();
        shard.inodes.remove(&i.ino);
        shard.freed.insert(i.ino);
    }

    /// Mark `ino` dirty in the current delta (shared access).
    pub fn mark_dirty(&self, ino: Ino) {
        self.dirty.lock().insert(ino);
    }

    /// Number of cached inodes.
    pub fn count(&self) -> usize {
        self.shards.iter().map(|s| s.read().inodes.len()).sum()
    }

    /// Inodes loaded from the inode table since [`InodeCache::reset_loads`].
    pub fn loads(&self) -> usize {
        self.loads.load(Relaxed)
    }

    /// Count loads from zero again (an eviction pass looked).
    pub fn reset_loads(&self) {
        self.loads.store(0, Relaxed);
    }

    /// Let go of up to `count` cached inodes that the inode table holds as
    /// they are and that hold nothing else: not dirty, no tree change
    /// waiting for a unify, no page not yet written, not freed — and not
    /// `pinned` (what the volume still needs in memory). Returns their
    /// cells, to be dropped once the caller lets the volume go. A clock
    /// hand goes round the shards, at most once a call: an inode locked
    /// since the hand last passed it (`used`) is passed over this time.
    /// A later operation on one of them loads it again from the table.
    pub fn evict(&mut self, count: usize, pinned: impl Fn(&Inode) -> bool) -> Vec<InodeCell> {
        let mut out = Vec::new();
        let (dirty, pending) = (self.dirty.get_mut(), &self.unify_pending);
        for _ in 0..SHARDS {
            if out.len() >= count {
                break;
            }
            let shard = self.shards[self.hand].get_mut();
            self.hand = (self.hand + 1) % SHARDS;
            let mut victims = Vec::new();
            for (&ino, cell) in shard.inodes.iter_mut() {
                if out.len() + victims.len() >= count {
                    break;
                }
                let i = cell_mut(cell);
                if std::mem::take(&mut i.used) {
                    continue;
                }
                let settled = !i.gone
                    && !dirty.contains(&ino)
                    && !pending.contains(&ino)
                    && i.pages.all_written()
                    && i.tree.is_settled();
                if settled && !pinned(i) {
                    victims.push(ino);
                }
            }
            out.extend(victims.iter().filter_map(|ino| shard.inodes.remove(ino)));
        }
        out
    }
}
