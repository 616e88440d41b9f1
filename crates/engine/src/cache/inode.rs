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
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
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
    /// Where the commit puts this file's tree leaves; 0: right after the
    /// data it allocated (`goal`). Defrag sets it past the room of the
    /// batch it rewrites, so that leaves do not cut the batch in pieces.
    pub leaf_goal: u64,
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
    /// The xattrs its xattr file holds (`attrs.xattr_file`), once read;
    /// `None` until then (the frontend's `xattr.rs` keeps it).
    pub spilled: Option<std::collections::BTreeMap<Vec<u8>, Vec<u8>>>,
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
            leaf_goal: 0,
            delta: 0,
            data_delta: 0,
            gone: false,
            used: true,
            spilled: None,
        }
    }

    pub fn kind(&self) -> FileType {
        FileType::from_mode(self.attrs.mode).unwrap_or(FileType::Regular)
    }

    pub fn is_dir(&self) -> bool {
        self.kind() == FileType::Directory
    }

    /// Its number if it is a directory.
    pub fn dir_ino(&self) -> Option<Ino> {
        self.is_dir().then_some(self.ino)
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
        .map(|e| (e.lblock, extent::encode_extent(e)))
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
    /// The shard the eviction hand is at, and how many of its entries (in
    /// the map's order) it has passed.
    hand: usize,
    hand_at: usize,
    /// Inodes the hand may still pass in the current pass (at most once
    /// round the cache a pass).
    round_left: usize,
    /// The last eviction step stopped with inodes to let go of and the
    /// pass not yet once round ([`InodeCache::behind`]).
    behind: AtomicBool,
    /// Inodes whose trees may have gained leaves in memory since the last
    /// eviction step looked (a commit wrote leaves of theirs, or an
    /// operation read one from the device): the bound on a directory's
    /// leaves counts theirs (`frontend/evict.rs`). (Its own lock: cold
    /// reads under the shared guard add to it.) At most [`GROWN_MAX`].
    grown: Mutex<Vec<Ino>>,
    /// Its length, read without the lock.
    grown_len: AtomicUsize,
}

/// Most inodes [`InodeCache::note_grown`] keeps until the next step looks
/// (one is noted per operation that read tree blocks from the device).
pub const GROWN_MAX: usize = 1 << 16;

impl Default for InodeCache {
    fn default() -> InodeCache {
        InodeCache {
            shards: (0..SHARDS).map(|_| Shard::default()).collect(),
            dirty: Mutex::default(),
            unify_pending: BTreeSet::new(),
            loads: AtomicUsize::new(0),
            hand: 0,
            hand_at: 0,
            round_left: 0,
            behind: AtomicBool::new(false),
            grown: Mutex::default(),
            grown_len: AtomicUsize::new(0),
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

    /// Note that `ino`'s tree may have gained leaves in memory, for the
    /// next eviction step to count ([`InodeCache::take_grown`]).
    pub fn note_grown(&self, ino: Ino) {
        let mut g = self.grown.lock();
        if g.len() < GROWN_MAX {
            g.push(ino);
            self.grown_len.store(g.len(), Relaxed);
        }
    }

    /// How many notes wait for the next step.
    pub fn grown_len(&self) -> usize {
        self.grown_len.load(Relaxed)
    }

    /// The inodes noted since the last step (exclusive access), each once.
    pub fn take_grown(&mut self) -> Vec<Ino> {
        self.grown_len.store(0, Relaxed);
        let mut g = std::mem::take(self.grown.get_mut());
        g.sort_unstable();
        g.dedup();
        g
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

    /// [`InodeCache::contains`] with exclusive access (no lock taken).
    pub fn holds(&mut self, ino: Ino) -> bool {
        self.shards[shard_of(ino)].get_mut().inodes.contains_key(&ino)
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

    /// Whether the last eviction step left work for the next one: it let
    /// go of fewer than it was asked to, and its pass has not yet been
    /// once round the cache.
    pub fn behind(&self) -> bool {
        self.behind.load(Relaxed)
    }

    /// End the current eviction pass: the next step starts a new one.
    pub fn end_pass(&self) {
        self.behind.store(false, Relaxed);
    }

    /// Let go of up to `count` cached inodes that the inode table holds as
    /// they are and that hold nothing else: not dirty, no tree change
    /// waiting for a unify, no page not yet written, not freed — and not
    /// `pinned` (what the volume still needs in memory). Returns their
    /// cells, to be dropped once the caller lets the volume go. A clock
    /// hand goes round the shards from where the last call stopped: an
    /// inode locked since the hand last passed it (`used`) is passed over
    /// this time. A call is one step of a pass: it looks at no more than
    /// `step` inodes (so that it holds its caller's exclusive access for a
    /// bounded time), and a pass goes at most once round the cache; a
    /// call when the last left no work ([`InodeCache::behind`]) starts a
    /// new pass. A later operation on an inode let go of loads it again.
    pub fn evict(&mut self, count: usize, step: usize, pinned: impl Fn(&Inode) -> bool) -> Vec<InodeCell> {
        if !self.behind() {
            self.round_left = self.count();
        }
        let budget = step.min(self.round_left);
        let mut out = Vec::new();
        let mut looked = 0;
        let (dirty, pending) = (self.dirty.get_mut(), &self.unify_pending);
        for _ in 0..=SHARDS {
            if out.len() >= count || looked >= budget {
                break;
            }
            let shard = self.shards[self.hand].get_mut();
            let mut victims = Vec::new();
            let mut passed = 0;
            // The entries the hand passed last time are skipped (cheaply:
            // the map's own order, no inode is touched); removals and
            // inserts since then shift that order a little, which a clock
            // may ignore.
            for (&ino, cell) in shard.inodes.iter_mut().skip(self.hand_at) {
                if out.len() + victims.len() >= count || looked >= budget {
                    break;
                }
                passed += 1;
                looked += 1;
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
            // Done with this shard, or stopped inside it: the next call
            // goes on from there (less the entries removed now, which were
            // behind the hand).
            if self.hand_at + passed >= shard.inodes.len() {
                self.hand = (self.hand + 1) % SHARDS;
                self.hand_at = 0;
            } else {
                self.hand_at += passed - victims.len();
            }
            out.extend(victims.iter().filter_map(|ino| shard.inodes.remove(ino)));
        }
        self.round_left -= looked;
        self.behind
            .store(out.len() < count && self.round_left > 0, Relaxed);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` clean regular files, each marked used as a load leaves it.
    fn cache_of(n: u64) -> InodeCache {
        let c = InodeCache::default();
        for ino in 100..100 + n {
            let attrs = InodeAttrs {
                mode: libc::S_IFREG | 0o644,
                nlink: 1,
                ..InodeAttrs::default()
            };
            c.insert_loaded(Inode::new(ino, attrs)).unwrap().used = true;
        }
        c
    }

    /// Runs the steps of one pass towards `keep` cached inodes, as the
    /// volume does; returns what each step let go of.
    fn pass(c: &mut InodeCache, keep: usize, step: usize, pinned: impl Fn(&Inode) -> bool) -> Vec<Vec<Ino>> {
        let mut steps = Vec::new();
        loop {
            let out = c.evict(c.count().saturating_sub(keep), step, &pinned);
            steps.push(out.iter().map(|cell| cell.lock().ino).collect());
            if !c.behind() {
                return steps;
            }
        }
    }

    #[test]
    fn a_pass_goes_in_bounded_steps_once_round_and_keeps_what_is_pinned() {
        let mut c = cache_of(10_000);
        let odd = |i: &Inode| i.ino % 2 == 1;
        // Everything was just used: the first pass clears the marks, a
        // step of 1,000 at a time, once round, and lets go of nothing.
        let first = pass(&mut c, 0, 1_000, odd);
        assert_eq!(first.len(), 10, "steps of the first pass");
        assert!(
            first.iter().all(Vec::is_empty),
            "the first pass let go of used inodes"
        );
        // The second lets go of every even inode, at most 1,000 a step.
        let second = pass(&mut c, 0, 1_000, odd);
        assert!(
            second.iter().all(|s| s.len() <= 1_000),
            "a step let go of more than it looks at"
        );
        let gone: Vec<Ino> = second.concat();
        assert_eq!(gone.len(), 5_000, "even inodes let go of");
        assert!(
            gone.iter().all(|ino| ino % 2 == 0),
            "a pinned inode was let go of"
        );
        assert_eq!(c.count(), 5_000);
        // Asked for fewer, a pass stops once it has them.
        let mut c = cache_of(10_000);
        pass(&mut c, 0, 1_000, |_| false);
        let third = pass(&mut c, 7_500, 1_000, |_| false);
        assert_eq!(third.concat().len(), 2_500);
        assert_eq!(third.len(), 3, "steps to let go of 2,500");
        // An inode used since the hand passed it is passed over once more.
        let marked = (100..10_100)
            .filter(|i| i % 3 == 0)
            .filter_map(|ino| c.lock(ino).map(|mut i| i.used = true))
            .count();
        assert!(marked > 2_000, "inodes marked: {marked}");
        let fourth = pass(&mut c, 0, 1_000, |_| false).concat();
        assert!(
            fourth.iter().all(|ino| ino % 3 != 0),
            "a used inode was let go of"
        );
        assert_eq!(c.count(), marked, "used inodes kept");
    }
}
