//! Frontend layer, below the API and above the backend: every POSIX
//! operation, run in cache. A [`Volume`] holds the
//! backend (media side) and the inode cache; operations change cached
//! inodes, directory and extent trees and dirty pages, all tagged with the
//! current delta, and never write to the device themselves. Deltas end on
//! sync/fsync, on dirty-memory pressure (`dirty_limit`) and at close; the
//! log is unified once it holds `unify_log_blocks` blocks.
//!
//! This file holds [`Volume`] and its books, open (replay into cache) and
//! close, and the inode lookups and delta stamps every operation starts
//! with; the end of a delta is in `commit.rs`, the bound on dirty memory
//! in `pressure.rs`, and each kind of operation in a file of its own.
//!
//! May call every layer below: the backend (commit, fsync commit, replay,
//! allocator), the cache, structures (trees, attribute records, directory
//! entries), log (the records of fsync commits), device and the base
//! modules.

/// `Some(Err)` out of a shared operation (one that answers `None` to be
/// run again exclusively).
macro_rules! or_fail {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(e) => return Some(Err(e)),
        }
    };
}

pub mod acl;
mod atime;
mod clone;
pub use clone::{BlockRun, ClonePlan, DedupeSeen, OnDevice, Sharing};
mod commit;
pub use commit::Retired;
mod defrag;
pub use defrag::DefragPlan;
pub use relocate::PastEnd;
pub use relocate_read::Prefetched;
mod evict;
mod falloc;
mod file;
pub(crate) mod flags;
pub mod fsync;
mod handles;
mod load;
pub use load::{ColdNode, MayLoad, ReadNode, Staged, TreeNeed};
mod names;
mod namespace;
pub mod pipeline;
mod pressure;
pub use pressure::Pressure;
mod receive;
mod relocate;
mod relocate_read;
mod relocate_shared;
pub use relocate_shared::MovedRun;
mod repair;
mod repair_snap;
mod repoint;
pub use repoint::OldBlocks;
mod read_many;
mod resize;
mod scrub_state;
mod shared;
pub use shared::PlannedRead;
mod snapshot;
mod space;
pub use space::Reserve;
mod tail;
mod trim;
mod xattr;

use crate::backend::{Backend, FIRST_INO};
use crate::cache::{CleanPages, Inode, InodeCache};
use crate::device::Device;
use crate::error::{err, Errno, Error, Result};
use crate::log::Record;
use crate::structures::btree::Tree;
use crate::structures::inode::{InodeAttrs, FIXED_ATTRS_MAX};
use crate::types::*;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

pub use crate::backend::Stats;

/// Largest file size: 2^40 blocks or 2^63-1 bytes, whichever is smaller.
pub fn max_file_size(bs: u64) -> u64 {
    (bs << 40).min(i64::MAX as u64)
}

/// A mounted volume: backend plus cache.
pub struct Volume {
    be: Backend,
    cache: InodeCache,
    opts: OpenOptions,
    /// Bytes of dirty file data in the current delta.
    dirty_bytes: AtomicU64,
    /// Bytes of file data the commit in flight still holds (its frozen
    /// pages, or an fsync commit's inline copies); 0 when none is.
    in_flight_bytes: u64,
    /// Clean pages kept after their commit, within `dirty_limit` bytes.
    clean: Mutex<CleanPages>,
    /// Blocks promised to the current delta's data and metadata.
    reserved: AtomicU64,
    /// Changes that reserved space in the open delta (`space.rs`).
    changes: AtomicU64,
    /// Nodes the next unify writes, as counted at the last freeze (or at
    /// open, or when space ran short): what the reserve keeps for them
    /// (`space.rs`).
    unify_work: u64,
    /// `changes` when they were counted: those since add to the estimate.
    counted_changes: u64,
    /// Where the last inode allocated near each directory went.
    ino_cursor: HashMap<Ino, Ino>,
    /// Highest inode number in the inode table or given out since open:
    /// every number above it is free (creates under the shared guard take
    /// the next one).
    max_ino: AtomicU64,
    /// A commit failed (a device write or flush, or a step before them):
    /// the volume is read-only until it is mounted again — changes get
    /// EROFS, fsync and sync EIO — and the last durable state stays as it
    /// is on the device (`Volume::fail`; ARCHITECTURE.md, *When the device
    /// fails*).
    failed: bool,
    /// Where the delta commit and the fsync commit in flight are
    /// (`pipeline.rs`).
    pipeline: pipeline::Pipeline,
    /// Inode images logged by fsync commits of the open delta, to tell at
    /// freeze which changes are durable already.
    fsync_logged: HashMap<Ino, Vec<u8>>,
    /// Something changed since open or since the last freeze (replay alone
    /// dirties the cache but is already durable in the log).
    changed: AtomicBool,
    /// Only access times changed since the last freeze (`lazytime`): a
    /// sync, an unmount or the next real change writes them, the
    /// periodic commit does not on their account alone.
    lazy_changed: AtomicBool,
    /// Records waiting in `Books::unsettled` (read without the books'
    /// lock): the API settles them itself once there are
    /// `SETTLE_BATCH`, so that no other exclusive holder — an fsync, a
    /// freeze — pays for a long run of shared unlinks.
    unsettled_len: AtomicU64,
    /// The open delta's namespace books (`Books`): their own short lock,
    /// since creates and unlinks under the shared guard change them too.
    books: Mutex<Books>,
    /// Inodes whose data or size changed in the open delta and that no
    /// fsync commit has logged since: what an fdatasync must make durable.
    data_changed: Mutex<std::collections::HashSet<Ino>>,
    /// Open handles per inode. (Inodes with no name left that a handle
    /// keeps alive are the backend's orphan list, `be.orphans`.)
    handles: handles::Handles,
}

/// A map of the open delta's books that grows with the delta (hundreds of
/// thousands of entries in a run of creates or unlinks). A table that
/// outgrows itself moves to its larger successor a few entries per insert
/// rather than all at once, so no single operation stops while a whole
/// table rehashes (which took an unlink 15-60 ms at a few hundred
/// thousand entries).
pub(crate) type GrowingMap<K, V> = griddle::HashMap<K, V, foldhash::fast::RandomState>;
/// A set of the open delta's books that grows with it ([`GrowingMap`]).
pub(crate) type GrowingSet<K> = griddle::HashSet<K, foldhash::fast::RandomState>;

/// What namespace changes leave in the open delta. Exclusive holders
/// reach it without locking (`Volume::books`); creates and unlinks under
/// the shared guard lock it, after the inodes they hold (a leaf lock).
#[derive(Default)]
struct Books {
    /// Inodes whose names or link counts changed in the open delta
    /// (directories: when their link count or parent changed).
    ns_touched: GrowingSet<Ino>,
    /// Directory positions changed in the open delta and not yet durable.
    names: names::PendingNames,
    /// Inodes freed in the open delta: their last image with link count 0
    /// (files and symlinks without tree changes only), which an fsync
    /// commit logs when it makes the removal of their name durable.
    freed_images: FreedImages,
    /// Inode numbers freed since open: never handed out again in this
    /// session, because a FUSE kernel may still know the old inode by that
    /// number until it forgets it (nodeids must not be reused meanwhile).
    /// (Kept across deltas.)
    /// (Ordered: a hash set of a million numbers would stop the unlink
    /// that grows it for tens of milliseconds while it rehashes.)
    freed_inos: std::collections::BTreeSet<Ino>,
    /// Files made without a name (`Volume::tmpfile`) that a link may still
    /// name, once. (Kept across deltas.)
    linkable: std::collections::HashSet<Ino>,
    /// What unlinks under the shared guard left for the next exclusive
    /// holder (`Volume::settle`), in the order they happened.
    unsettled: Unsettled,
    /// Inodes whose xattr file changed (made, written or freed) in the
    /// open delta: an fsync of one takes a full commit (`xattr.rs`).
    xattr_files: std::collections::HashSet<Ino>,
}

/// The last images of the inodes freed in the open delta, packed in
/// chunks: a run of unlinks frees hundreds of thousands of inodes a delta,
/// and one allocation each would cost the freeze (which lets go of them)
/// more than the unlinks took to make them, while one growing buffer would
/// stop an unlink for as long as it takes to copy it.
#[derive(Default)]
struct FreedImages {
    chunks: Vec<Vec<u8>>,
    /// Where each image is: (chunk, start, length).
    at: GrowingMap<Ino, (usize, usize, usize)>,
}

/// Bytes of one chunk of [`FreedImages`] (an image is about 100).
const IMAGE_CHUNK: usize = 64 << 10;

impl FreedImages {
    fn insert(&mut self, ino: Ino, image: &[u8]) {
        let room = self
            .chunks
            .last()
            .is_some_and(|c| c.capacity() - c.len() >= image.len());
        if !room {
            self.chunks.push(Vec::with_capacity(IMAGE_CHUNK.max(image.len())));
        }
        let n = self.chunks.len() - 1;
        let chunk = &mut self.chunks[n];
        self.at.insert(ino, (n, chunk.len(), image.len()));
        chunk.extend_from_slice(image);
    }

    fn contains_key(&self, ino: &Ino) -> bool {
        self.at.contains_key(ino)
    }

    fn get(&self, ino: Ino) -> Option<&[u8]> {
        let &(chunk, start, len) = self.at.get(&ino)?;
        self.chunks.get(chunk)?.get(start..start.checked_add(len)?)
    }

    /// Empty books with room for as many images as these hold.
    fn sized_like(&self) -> FreedImages {
        FreedImages {
            chunks: Vec::with_capacity(self.chunks.len()),
            at: GrowingMap::with_capacity_and_hasher(self.at.len(), Default::default()),
        }
    }
}

/// Changes of shared unlinks that only exclusive access may make: to the
/// allocator, the inode table, the log's records and the orphan list.
#[derive(Default)]
struct Unsettled {
    /// Blocks of freed inodes: (start, count, birth).
    frees: Vec<(u64, u64, u32)>,
    /// `Orphan` records (the inode joins the orphan list) and `Drop`
    /// records (the inode leaves the inode table and the orphan list).
    records: Vec<Record>,
    /// The inodes of those `Orphan` records, for shared lookups meanwhile.
    orphans: std::collections::HashSet<Ino>,
}

/// The clean-page books `opts` ask for.
fn clean_books(opts: &OpenOptions) -> CleanPages {
    CleanPages::new(opts.clean_limit, opts.dirty_limit.min(opts.stream_limit))
}

/// A number no inode can have: below the root, or between the root and
/// the first ordinary inode.
fn reserved_ino(ino: Ino) -> bool {
    ino < ROOT_INO || (ino > ROOT_INO && ino < FIRST_INO)
}

impl Volume {
    /// Open the volume on `dev` and replay its log into cache.
    pub fn open(dev: Arc<dyn Device>, opts: OpenOptions) -> Result<Volume> {
        let mut opts = opts;
        let repair = opts.repair;
        // A snapshot never changes.
        opts.read_only |= opts.snapshot.is_some();
        // R1, asserted: until the volume is open, a write or flush through
        // its device panics (debug builds).
        #[cfg(debug_assertions)]
        let (callers, dev) = (dev.clone(), crate::backend::checks::reads_only(dev));
        let (mut be, replays) = Backend::open_with(dev, opts.read_only, opts.snapshot.as_deref(), repair)?;
        be.discard.online = opts.discard && !opts.read_only;
        let mut v = Volume {
            be,
            cache: InodeCache::default(),
            clean: Mutex::new(clean_books(&opts)),
            opts,
            dirty_bytes: AtomicU64::new(0),
            in_flight_bytes: 0,
            reserved: AtomicU64::new(0),
            changes: AtomicU64::new(0),
            unify_work: 0,
            counted_changes: 0,
            ino_cursor: HashMap::new(),
            max_ino: AtomicU64::new(0),
            failed: false,
            pipeline: pipeline::Pipeline::new(),
            fsync_logged: HashMap::new(),
            changed: AtomicBool::new(false),
            lazy_changed: AtomicBool::new(false),
            unsettled_len: AtomicU64::new(0),
            books: Default::default(),
            data_changed: Default::default(),
            handles: Default::default(),
        };
        // File trees changed since the unify: rebuild their branches in cache.
        let mut ids: Vec<_> = replays.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            let dev = v.be.dev.clone();
            let found = v.be.itable.get_mut().get_at(dev.as_ref(), id);
            let found = found.and_then(|f| match f {
                Some((raw, leaf)) => {
                    InodeAttrs::decode(&raw, id, leaf, &crate::structures::bounds(dev.as_ref())).map(Some)
                }
                None => Ok(None),
            });
            let attrs = match found {
                Ok(Some(a)) => a,
                Ok(None) => continue,
                // A repair replaces the leaf that does not decode.
                Err(Error::Corrupt { .. }) if repair => continue,
                Err(e) => return Err(e),
            };
            let replay = &replays[&id];
            let mut inode = Inode::new(id, attrs);
            if replay.reset {
                inode.tree = crate::cache::data_tree(id, inode.tree.kind, &inode.attrs, true);
            }
            v.be.replay_tree(&mut inode.tree, replay)?;
            v.cache.insert(inode);
            // Its branches were rebuilt in cache: the next unify writes them.
            v.cache.unify_pending.insert(id);
        }
        for (id, r) in &replays {
            if !r.inserts.is_empty() && v.cache.contains(*id) {
                v.cache.dirty.get_mut().insert(*id);
            }
        }
        // File data from fsync commits at the end of the log: dirty pages.
        let bs = v.be.bs;
        let mut seen = std::collections::HashSet::new();
        for (ino, lblock, offset, data) in std::mem::take(&mut v.be.replayed_pages) {
            let delta = v.be.delta;
            let Ok(inode) = v.inode(ino) else { continue };
            // Its fsync commits stay live until the next full commit.
            inode.pages.note_fsynced();
            let page = inode.pages.page_mut(lblock, delta, || vec![0u8; bs]);
            // A block's first record in the tail starts from zero (F1).
            let first = seen.insert((ino, lblock));
            if first {
                page.fill(0);
            }
            page[offset..offset + data.len()].copy_from_slice(&data);
            v.cache.dirty.get_mut().insert(ino);
            if first {
                v.dirty_bytes.fetch_add(bs as u64, Relaxed);
            }
        }
        // The inode images are final: no page may hold data past the size
        // (F1, asserted after the fix).
        for (ino, _) in seen {
            let Ok(inode) = v.inode(ino) else { continue };
            let size = inode.attrs.size;
            inode.pages.truncate(size.div_ceil(bs as u64));
            let tail = (size % bs as u64) as usize;
            if tail != 0 {
                let last = size / bs as u64;
                if inode.pages.get(last).is_some() {
                    let delta = v.be.delta;
                    v.inode(ino)?.pages.page_mut(last, delta, Vec::new)[tail..].fill(0);
                }
            }
            file::check_tail(v.inode(ino)?, bs as u64);
        }
        match v.note_itable_end() {
            Err(Error::Corrupt { .. }) if repair => {}
            r => r?,
        }
        v.count_unify_work();
        // The root must be a directory, or nothing else can be trusted.
        // (A repair may have its record to put back, or its mode.)
        let root = match v.inode(ROOT_INO) {
            Err(Error::Corrupt { .. }) if repair => None,
            r => Some(r?.is_dir()),
        };
        if root == Some(false) && !repair {
            return Err(Error::corrupt(
                v.be.sb.itable.addr,
                "root inode is not a directory",
            ));
        }
        // Orphans of the last session: the handles that kept them alive are
        // gone. Their frees join the first delta; replay itself wrote nothing.
        if !v.be.read_only {
            v.free_replayed_orphans()?;
            // A deleted snapshot's space still to come back: reclaim resumes.
            if v.be.snaps.reclaiming() {
                *v.changed.get_mut() = true;
            }
        }
        #[cfg(debug_assertions)]
        {
            v.be.dev = callers;
        }
        Ok(v)
    }

    /// Commit everything and release the device.
    pub fn close(mut self) -> Result<()> {
        self.close_in_place()
    }

    /// Commit everything; the volume stays usable (the caller drops it).
    /// Open handles end here, so orphans are freed first.
    /// On a volume a failed commit left read-only, EIO: what the session
    /// changed since its last durable commit is lost.
    pub fn close_in_place(&mut self) -> Result<()> {
        if self.failed {
            return err(Errno::EIO);
        }
        if !self.be.read_only {
            self.release_all()?;
            self.sync()?;
        }
        Ok(())
    }

    /// A commit failed with `e` while it was `doing` something: the volume
    /// turns read-only until it is mounted again, and says so once, naming
    /// the device and the error. Nothing is retried elsewhere: the last
    /// durable state is what a later mount replays to.
    pub(crate) fn fail(&mut self, doing: &str, e: &Error) {
        if !self.failed {
            tracing::error!(
                "tux3: {}: {doing} failed: {e}; the volume is read-only until it is mounted again \
                 (changes since the last durable commit are lost)",
                self.be.dev.name()
            );
        }
        self.failed = true;
    }

    /// Whether a failed commit turned the volume read-only ([`Volume::fail`]).
    pub fn has_failed(&self) -> bool {
        self.failed
    }

    pub fn device(&self) -> &dyn Device {
        self.be.dev.as_ref()
    }

    /// Backend counters, with the dirty file data now in memory.
    pub fn stats(&self) -> Stats {
        Stats {
            dirty_bytes: self.dirty_bytes.load(Relaxed),
            in_flight_bytes: self.in_flight_bytes,
            clean_bytes: self.clean.lock().bytes(),
            cached_inodes: self.cache.count() as u64,
            itable_leaves: self.be.itable.lock().loaded_leaves(),
            ..self.be.stats
        }
    }

    /// [`crate::Fs::cached_leaves`].
    pub fn cached_leaves(&self, ino: Ino) -> u64 {
        self.cache.lock(ino).map_or(0, |i| i.tree.loaded_leaves())
    }

    pub fn bs(&self) -> u64 {
        self.be.bs as u64
    }

    /// The cached inode `ino`, loading it from the inode table.
    fn inode(&mut self, ino: Ino) -> Result<&mut Inode> {
        if !self.cache.contains(ino) {
            if reserved_ino(ino) {
                return err(Errno::ENOENT);
            }
            let dev = self.be.dev.clone();
            let (raw, leaf) = self
                .be
                .itable
                .get_mut()
                .get_at(dev.as_ref(), ino)?
                .ok_or(Error::Posix(Errno::ENOENT))?;
            let attrs = InodeAttrs::decode(&raw, ino, leaf, &crate::structures::bounds(dev.as_ref()))?;
            self.cache.insert(Inode::new(ino, attrs));
        }
        self.cache.get_mut(ino).ok_or(Error::Posix(Errno::ENOENT))
    }

    /// The cached directory `ino`, or ENOTDIR.
    fn dir(&mut self, ino: Ino) -> Result<&mut Inode> {
        let d = self.inode(ino)?;
        if !d.is_dir() {
            return err(Errno::ENOTDIR);
        }
        Ok(d)
    }

    /// Mark `ino` changed in the current delta.
    fn touch(&mut self, ino: Ino) {
        let delta = self.be.delta;
        if let Some(i) = self.cache.get_mut(ino) {
            i.delta = delta;
        }
        self.touched(ino);
    }

    /// `ino` (already stamped with the delta, under its lock) changed:
    /// the delta holds a change and the inode is dirty in it.
    fn touched(&self, ino: Ino) {
        self.changed.store(true, Relaxed);
        self.cache.mark_dirty(ino);
    }

    /// Whether the current delta holds any change.
    fn delta_dirty(&self) -> bool {
        !self.cache.dirty.lock().is_empty()
            || !self.be.records.is_empty()
            || self.be.itable.lock().has_dirty_leaves()
            || !self.be.alloc.delta_frees.is_empty()
            || !self.be.alloc.dying.is_empty()
            || self.be.snaps.reclaiming()
    }

    pub fn is_read_only(&self) -> bool {
        self.be.read_only
    }

    pub fn getattr(&mut self, ino: Ino) -> Result<Attr> {
        let bs = self.be.bs as u32;
        Ok(self.inode(ino)?.attr(bs))
    }

    /// Largest total xattr cost per inode (see `inode::xattr_cost`).
    pub fn xattr_space(&self) -> usize {
        Tree::max_value(self.be.bs) - FIXED_ATTRS_MAX
    }

    /// Raise `max_ino` to the inode table's last number (at open, and when
    /// the table is replaced).
    pub(super) fn note_itable_end(&mut self) -> Result<()> {
        let dev = self.be.dev.clone();
        let last = self
            .be
            .itable
            .get_mut()
            .prev(dev.as_ref(), u64::MAX)?
            .map_or(0, |(k, _)| k);
        let max = self.max_ino.get_mut();
        *max = (*max).max(last).max(FIRST_INO - 1);
        Ok(())
    }

    /// A free inode number near `parent`: the next few numbers after the
    /// last one given out near it; if those are taken (a dense region), the
    /// first number past the end of the inode table.
    fn alloc_ino(&mut self, parent: Ino) -> Result<Ino> {
        let dev = self.be.dev.clone();
        let start = self
            .ino_cursor
            .get(&parent)
            .copied()
            .unwrap_or(parent)
            .max(FIRST_INO - 1)
            + 1;
        let mut found = None;
        for c in start..start + 8 {
            if !self.cache.contains(c)
                && !self.books.get_mut().freed_inos.contains(&c)
                && self.be.itable.get_mut().get(dev.as_ref(), c)?.is_none()
            {
                found = Some(c);
                break;
            }
        }
        let c = match found {
            Some(c) => c,
            None => {
                let mut c = (*self.max_ino.get_mut()).max(FIRST_INO - 1) + 1;
                while self.cache.contains(c) || self.books.get_mut().freed_inos.contains(&c) {
                    c += 1;
                }
                c
            }
        };
        if c >= 1 << 48 {
            return err(Errno::ENOSPC);
        }
        let max = self.max_ino.get_mut();
        *max = (*max).max(c);
        self.ino_cursor.insert(parent, c);
        Ok(c)
    }
}
