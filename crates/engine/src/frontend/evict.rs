//! Frontend layer: the bound on cached inodes. An inode stays in cache
//! after the operation that loaded it (a lookup, a stat, a readdir's
//! entries), with its tree's nodes: without a bound, a walk over a large
//! volume would keep all of it in memory. Past
//! [`OpenOptions::inode_limit`](crate::OpenOptions::inode_limit) cached
//! inodes, an exclusive holder — the end of each delta commit, and the
//! commit thread's turn when there is nothing to commit — lets go of those
//! the inode table holds as they are (`InodeCache::evict`), down to seven
//! eighths of the bound; one needed again is loaded again, as after a
//! mount. The kernel's own lookups do not keep an inode here: its number
//! is all the kernel holds, and the handles counted for it live beside the
//! cache (`handles.rs`).
//!
//! A pass goes in steps of at most [`TRIM_STEP`] inodes looked at, each
//! under its own exclusive hold (`Shared::trim_inodes` in `api/commit.rs`
//! runs them; a commit's end runs one and leaves the rest to the commit
//! thread), so that no operation waits for a whole pass: evicting 30,000
//! inodes at once held everyone else for 20–26 ms. With the inodes of a
//! step go the inode-table leaves that held them, once no inode a leaf
//! holds is cached (`Tree::shed_leaves`): a cached inode's record stays in
//! memory, where a commit updates it without reading under the guard.
//!
//! Nothing is let go while a delta commit is in flight (its nodes are not
//! on the device yet). Kept whatever the bound: the root, reserved inodes,
//! inodes with changes not yet committed or tree changes not yet unified,
//! inodes whose link count is 0 (orphans, freed at their last handle), and
//! those the open delta's books name.
//!
//! Calls the cache and the inode table.

use super::{reserved_ino, Volume};
use crate::cache::InodeCell;
use crate::structures::btree::Node;
use crate::types::ROOT_INO;

/// Most inodes one step of an eviction pass looks at (each a cache miss
/// or so: a millisecond or two of exclusive access).
pub const TRIM_STEP: usize = 4096;

/// What one step let go of, to be dropped once the volume is let go (a
/// directory's tree, a few hundred leaves, may take a while to free).
#[derive(Default)]
pub(crate) struct Trimmed {
    _inodes: Vec<InodeCell>,
    _leaves: Vec<Node>,
}

impl Volume {
    /// Past the bound, one step of letting go of cached inodes nothing
    /// needs in memory (exclusive access): at most [`TRIM_STEP`] looked
    /// at, and with them the inode-table leaves that hold no cached inode
    /// any more. [`Volume::wants_trim`] says whether another step should
    /// follow.
    pub(crate) fn trim_inodes(&mut self) -> Trimmed {
        let limit = self.opts.inode_limit.max(1);
        let held = self.cache.count();
        self.cache.reset_loads();
        // A delta commit in flight writes nodes its inodes' trees (and
        // records) already lead to: loaded again now, they would be read
        // before they are on the device.
        if held <= limit || self.pipeline.delta_in_flight() {
            self.cache.end_pass();
            return Trimmed::default();
        }
        let want = held - (limit - limit / 8);
        let books = self.books.get_mut();
        let (orphans, data_changed, logged) =
            (&self.be.orphans, self.data_changed.get_mut(), &self.fsync_logged);
        let evicted = self.cache.evict(want, TRIM_STEP, |i| {
            let ino = i.ino;
            ino == ROOT_INO
                || reserved_ino(ino)
                || i.attrs.nlink == 0
                || orphans.contains(&ino)
                || data_changed.contains(&ino)
                || logged.contains_key(&ino)
                || books.ns_touched.contains(&ino)
                || books.names.pending(ino)
                || books.freed_images.contains_key(&ino)
        });
        let bs = self.bs();
        let clean = self.clean.get_mut();
        let mut inos = Vec::with_capacity(evicted.len());
        for cell in &evicted {
            let i = cell.lock();
            clean.changed(i.ino, i.pages.clean_len(), 0, bs);
            inos.push(i.ino);
        }
        // Their inode-table leaves go too, once no inode they hold is
        // cached: a cached inode's record stays in memory, where a commit
        // updates it with no device read under the guard.
        inos.sort_unstable();
        let cache = &mut self.cache;
        let mut leaves = Vec::new();
        self.be
            .itable
            .get_mut()
            .shed_leaves(&inos, &mut |ino| cache.holds(ino), &mut leaves);
        Trimmed {
            _inodes: evicted,
            _leaves: leaves,
        }
    }

    /// Enough inodes were loaded since the last pass that the bound may be
    /// passed, or the last step of a pass left work for another: the commit
    /// thread should take its turn early.
    pub fn wants_trim(&self) -> bool {
        self.cache.behind() || self.cache.loads() > (self.opts.inode_limit / 8).max(64)
    }
}
