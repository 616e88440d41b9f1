//! API layer (top of the engine): the library's public surface. [`Fs`] is a
//! mounted volume; every method is one POSIX-like operation and returns
//! POSIX errors as values. Owns the delta guard (the volume), the commit scheduling and
//! its threads (`commit.rs`), the one-shot answer a blocking fsync waits
//! for (`answer.rs`), and opening an image by path (`image.rs`).
//! This file holds [`Fs`] itself — open, close, the guards — and the reads
//! of cold nodes with no guard held that let an operation run shared
//! (`Fs::warm`, `Fs::warming`); the operations are grouped by what they do:
//! the namespace (`namespace.rs`), a file's data and attributes
//! (`file.rs`), making changes durable (`sync.rs`), and the rest in files
//! of their own.
//!
//! This layer holds no filesystem logic: it takes the volume — shared for
//! the operations that may run together (`frontend/shared.rs`: stat,
//! lookup, read, readdir, write, setattr without a size change, handles),
//! exclusively for the rest or when a shared try says it needs more — and
//! calls the frontend (namespace and file operations in cache, `Volume`),
//! which drives the backend. May call every layer below; besides the frontend it
//! uses the backend (mkfs, commit jobs), the device layer (counters) and
//! the base modules.

mod answer;
mod atime;
mod clone;
mod commit;
mod dedupe;
mod defrag;
mod falloc;
mod file;
mod guard;
mod image;
mod inode_flags;
mod integrity;
mod layout;
mod namespace;
mod receive;
mod relocate;
mod relocate_shared;
mod resize;
mod snapshot;
mod sync;
mod trim;

use crate::device::{CounterSnapshot, Device};
use crate::error::Result;
use crate::frontend::{ColdNode, MayLoad, ReadNode, Staged, TreeNeed, Volume};
pub use crate::memory_budget::{
    default_clean_limit, default_dir_leaf_limit, default_dirty_limit, default_inode_limit, usable_memory,
};
pub use crate::types::*;
pub use clone::Sharing;
pub use commit::FsyncDone;
use commit::{Shared, Worker};
pub use dedupe::{DedupeRange, ReadRange};
pub use defrag::{DefragOptions, DefragReport};
pub use image::open_path;
pub use integrity::BadDataReport;
pub use resize::Resized;
use std::sync::Arc;
pub use trim::TrimReport;

/// At most this many nodes are read without the guard for one operation
/// (each read is followed by a new try, which finds the nodes read before
/// in memory or staged); a walk that needs more runs exclusively.
const COLD_ROUNDS: usize = 64;

/// Records that shared unlinks leave for exclusive access (`Volume::settle`)
/// before the thread that made them tries to settle them itself (about
/// 50 µs of work), and the count past which it waits to.
const SETTLE_BATCH: u64 = 64;
const SETTLE_MAX: u64 = 1024;

/// A mounted tux3 volume.
///
/// `Fs` is `Send + Sync`; operations run in cache, most of them in
/// parallel (each under its inode's lock), and a commit's device I/O runs
/// outside every lock they take. A background thread ends a delta
/// every `commit_interval`, and early under dirty pressure. Dropping an `Fs`
/// without [`Fs::close`] loses the uncommitted delta, exactly as a crash
/// would; nothing committed is lost.
pub struct Fs {
    shared: Arc<Shared>,
    /// The delta committer (when `commit_interval` is set) and the fsync
    /// committer (when writable); stopped in this order on close or drop.
    workers: Vec<Worker>,
    /// Wakes the delta committer to commit early (half the dirty limit is dirty).
    wake_committer: Option<crossbeam_channel::Sender<()>>,
}

impl Drop for Fs {
    fn drop(&mut self) {
        for w in self.workers.drain(..) {
            w.stop();
        }
    }
}

impl Fs {
    /// Write a new, empty volume to `dev`, replacing whatever was there.
    pub fn format(dev: Arc<dyn Device>, opts: &FormatOptions) -> Result<()> {
        crate::backend::mkfs::format(dev.as_ref(), opts)
    }

    /// Open the volume on `dev`: read the superblock and replay the log into
    /// cache. Replay writes nothing to the device.
    pub fn open(dev: Arc<dyn Device>, opts: OpenOptions) -> Result<Fs> {
        let interval = opts.commit_interval.filter(|_| !opts.read_only);
        let writable = !opts.read_only;
        let fsync_strict = opts.fsync_strict;
        let shared = Arc::new(Shared::new(Volume::open(dev, opts)?, fsync_strict));
        let mut fs = Fs {
            shared,
            workers: Vec::new(),
            wake_committer: None,
        };
        fs.load_data_errors();
        if let Some(every) = interval {
            let (committer, wake) = Worker::delta_committer(&fs.shared, every)?;
            fs.workers.push(committer);
            fs.wake_committer = Some(wake);
        }
        if writable {
            fs.workers.push(Worker::fsync_committer(&fs.shared)?);
        }
        Ok(fs)
    }

    /// The volume, exclusively.
    fn vol(&self) -> guard::Exclusive<'_, Volume> {
        self.shared.vol()
    }

    /// The volume, shared with other operations of the delta.
    fn shared_vol(&self) -> guard::Shared<'_, Volume> {
        self.shared.shared_vol()
    }

    /// Commit everything and release the device.
    pub fn close(mut self) -> Result<()> {
        for w in self.workers.drain(..) {
            w.stop();
        }
        self.shared.with_commit_lock(|| self.vol().close_in_place())
    }

    /// Run a shared operation that may stop at a node only on disk: an
    /// inode-table node the load of an inode it needs reads (the inode a
    /// lookup found, the one an unlink names), or a node of a directory's
    /// or file's tree. The node is read with no guard held
    /// (`frontend/load.rs`), and the operation asked again with the tree
    /// blocks read so far. `None`: run it exclusively (also after
    /// [`COLD_ROUNDS`] nodes: a walk that long reads under the guard).
    fn warming<T>(&self, op: impl Fn(&Volume, &Staged) -> MayLoad<T>) -> Option<Result<T>> {
        let mut staged = Staged::default();
        for _ in 0..COLD_ROUNDS {
            let (r, debt) = {
                let v = self.shared_vol();
                (op(&v, &staged), v.unsettled_len())
            };
            if debt >= SETTLE_BATCH {
                self.settle_debt(debt);
            }
            match r? {
                Ok(Ok(v)) => return Some(Ok(v)),
                Ok(Err(cold)) => self.read_cold(cold, &mut staged),
                Err(e) => return Some(Err(e)),
            }
        }
        None
    }

    /// Settle what shared unlinks left for exclusive access (`debt`
    /// records, `Volume::settle`) on this thread, at once if the guard is
    /// free, else once they reach [`SETTLE_MAX`]: the next exclusive holder
    /// — an fsync, a freeze — then finds at most that much to do, rather
    /// than a whole run of unlinks.
    fn settle_debt(&self, debt: u64) {
        if self.shared.try_vol().is_none() && debt >= SETTLE_MAX {
            drop(self.vol());
        }
    }

    /// Load inode `ino` into the cache if it is not there, reading the
    /// inode-table nodes on its way with no guard held (`frontend/load.rs`),
    /// so that a freeze never waits for them. The operation that follows
    /// finds it in cache (or, should that fail, loads it under the guard and
    /// reports what went wrong).
    fn warm(&self, ino: Ino) {
        for _ in 0..=crate::codec::MAX_DEPTH {
            let (cold, trim, dir_trim) = {
                let v = self.shared_vol();
                (v.cold_node(ino), v.wants_trim(), v.wants_dir_trim())
            };
            // Loads may take the inode cache past its bound: the commit
            // thread keeps it there, or without one, this thread. (A
            // directory's leaves wait for the commit thread's next turn:
            // waking it early would commit early.)
            match &self.wake_committer {
                Some(wake) if trim => drop(wake.try_send(())),
                None if trim || dir_trim => self.shared.trim_inodes(),
                _ => {}
            }
            match cold {
                Some(cold) => self.read_cold(cold, &mut Staged::default()),
                None => return,
            }
        }
    }

    /// Before an exclusive operation that reads `ino`'s tree: the nodes it
    /// will read (`need`) read now, with no guard held, so that the
    /// operation finds them in memory.
    fn warm_tree(&self, ino: Ino, need: TreeNeed) {
        let _ = self.warming(|v, s| v.tree_shared(ino, need, s));
    }

    /// Before a truncate of `ino` to `size`: the block it cuts into read
    /// now, with no guard held, and kept in cache for it
    /// (`frontend/tail.rs`).
    fn warm_tail(&self, ino: Ino, size: u64) {
        let Some(Ok(Some(plan))) = self.warming(|v, s| v.plan_tail_shared(ino, size, s)) else {
            return;
        };
        if let Ok(tail) = plan.read() {
            self.shared_vol().keep_tail_shared(ino, tail);
        }
    }

    /// Read `cold` with no guard held, then put it in place (an inode-table
    /// node) or keep it in `staged` (a tree block). A read that fails
    /// leaves it to the operation's next try, which reads it under the
    /// guard or reports the error.
    fn read_cold(&self, cold: ColdNode, staged: &mut Staged) {
        if let Ok(ReadNode::Table(ino, loaded)) = cold.read(staged) {
            self.shared_vol().install_cold(ino, loaded);
        }
    }

    /// Volume statistics: free blocks as the allocator counts them, and
    /// what an ordinary change may still take, less the reserve kept for
    /// deletes and commits (ARCHITECTURE.md, *Full volumes*).
    pub fn statfs(&self) -> Result<StatFs> {
        self.shared_vol().statfs()
    }

    /// The device's I/O counters.
    pub fn counters(&self) -> CounterSnapshot {
        self.shared_vol().device().counters()
    }

    /// Engine statistics: deltas committed, unifies, log length, and the
    /// dirty file data held in memory (open delta and commit in flight).
    pub fn stats(&self) -> crate::frontend::Stats {
        self.shared_vol().stats()
    }

    /// Leaves of `ino`'s tree (a directory's entries, a file's extents)
    /// held in memory, as the bound on a directory's leaves counts them
    /// ([`OpenOptions::dir_leaf_limit`]); 0 for an inode not in cache.
    pub fn cached_leaves(&self, ino: Ino) -> u64 {
        self.shared_vol().cached_leaves(ino)
    }
}

/// `attr`, with a handle taken on it if `hold`: the end of a `*_held`
/// operation on the exclusive path, in the same hold as the rest.
fn held(v: &mut Volume, attr: Attr, hold: bool) -> Result<Attr> {
    if hold {
        v.not_xattr_file(attr.ino)?;
        v.open_handle(attr.ino)?;
    }
    Ok(attr)
}
