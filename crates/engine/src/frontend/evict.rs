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
//! Each step also holds every directory whose tree gained leaves since the
//! last (noted by the commit that wrote them or the operation that read
//! them) to [`OpenOptions::dir_leaf_limit`](crate::OpenOptions::dir_leaf_limit)
//! leaves in memory: past it, clean ones go down to three quarters of the
//! bound (`Tree::shed_down_to`), whatever the number of cached inodes, so
//! that one huge directory does not hold all its names in memory.
//!
//! Nothing is let go while a delta commit is in flight (its nodes are not
//! on the device yet). Kept whatever the bound: the root, reserved inodes,
//! inodes with changes not yet committed or tree changes not yet unified,
//! inodes whose link count is 0 (orphans, freed at their last handle), and
//! those the open delta's books name.
//!
//! Calls the cache, the inode table and directories' trees.

use super::{reserved_ino, Volume};
use crate::cache::InodeCell;
use crate::structures::btree::Node;
use crate::types::ROOT_INO;

/// Most inodes one step of an eviction pass looks at (each a cache miss
/// or so: a millisecond or two of exclusive access).
pub const TRIM_STEP: usize = 4096;

/// Operations that read tree blocks from the device (each noting its
/// inode) before one with no commit thread to rely on checks the bound on
/// directories' leaves itself ([`Volume::wants_dir_trim`]).
pub const DIR_TRIM_NOTES: usize = 64;

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
        if self.pipeline.delta_in_flight() {
            self.cache.end_pass();
            return Trimmed::default();
        }
        let dir_leaves = self.trim_dirs();
        if held <= limit {
            self.cache.end_pass();
            return Trimmed {
                _leaves: dir_leaves,
                ..Trimmed::default()
            };
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
        let mut leaves = dir_leaves;
        self.be
            .itable
            .get_mut()
            .shed_leaves(&inos, &mut |ino| cache.holds(ino), &mut leaves);
        Trimmed {
            _inodes: evicted,
            _leaves: leaves,
        }
    }

    /// The bound on a directory's leaves in memory: each directory whose
    /// tree may have gained leaves since the last step (a commit wrote
    /// some, or an operation read some: `InodeCache::grown`) and holds more
    /// than [`OpenOptions::dir_leaf_limit`](crate::OpenOptions::dir_leaf_limit)
    /// lets go of clean ones down to three quarters of it
    /// (`Tree::shed_down_to`). Returns the leaves let go of. Called with no
    /// delta commit in flight.
    fn trim_dirs(&mut self) -> Vec<Node> {
        let mut out = Vec::new();
        let grown = self.cache.take_grown();
        let limit = self.opts.dir_leaf_limit.max(1) as u64;
        let keep = limit - limit / 4;
        for ino in grown {
            let Some(i) = self.cache.get_mut(ino) else {
                continue;
            };
            if i.is_dir() && i.tree.loaded_leaves() > limit {
                i.tree.shed_down_to(keep, &mut out);
            }
        }
        out
    }

    /// Enough operations read tree blocks from the device since the last
    /// step that a directory may be past its bound on leaves: with no
    /// commit thread to take the step at its next turn, the operation
    /// that notices takes it.
    pub fn wants_dir_trim(&self) -> bool {
        self.cache.grown_len() >= DIR_TRIM_NOTES
    }

    /// Enough inodes were loaded since the last pass that the bound may be
    /// passed, or the last step of a pass left work for another: the commit
    /// thread should take its turn early.
    pub fn wants_trim(&self) -> bool {
        self.cache.behind() || self.cache.loads() > (self.opts.inode_limit / 8).max(64)
    }
}

#[cfg(test)]
mod tests {
    use crate::backend::mkfs;
    use crate::device::{Device, MemDevice};
    use crate::frontend::Volume;
    use crate::types::*;
    use std::sync::Arc;

    const LIMIT: usize = 16;

    fn name(k: u32) -> Vec<u8> {
        format!("a-file-with-a-longish-name-{k:06}").into_bytes()
    }

    /// The leaves a directory reads back under the exclusive guard (the
    /// `Volume`'s own lookups and listing, which the API runs when a
    /// shared operation cannot) are noted for the bound as a shared
    /// operation's are: the next eviction step lets them go again.
    #[test]
    fn leaves_read_under_the_exclusive_guard_are_let_go_of_too() {
        let dev: Arc<dyn Device> = Arc::new(MemDevice::new(4096, 1 << 15));
        mkfs::format(dev.as_ref(), &FormatOptions::default()).unwrap();
        let opts = OpenOptions {
            dir_leaf_limit: LIMIT,
            ..OpenOptions::default()
        };
        let mut vol = Volume::open(dev, opts).unwrap();
        let dir = vol
            .mknod(ROOT_INO, b"big", libc::S_IFDIR | 0o755, 0, 0, 0)
            .unwrap()
            .ino;
        let n = 6000;
        for k in 0..n {
            vol.mknod(dir, &name(k), libc::S_IFREG | 0o644, 0, 0, 0).unwrap();
        }
        let all = vol.cached_leaves(dir);
        vol.sync().unwrap();
        drop(vol.trim_inodes());
        let after = vol.cached_leaves(dir);
        assert!(after <= LIMIT as u64, "{after} of {all} leaves after the commit");

        for k in 0..n {
            vol.lookup(dir, &name(k)).unwrap();
        }
        let read = vol.cached_leaves(dir);
        assert!(read > 4 * LIMIT as u64, "{read} leaves read back by the lookups");
        drop(vol.trim_inodes());
        let trimmed = vol.cached_leaves(dir);
        assert!(
            trimmed <= LIMIT as u64,
            "{trimmed} of {read} leaves after the lookups' step"
        );

        let mut listed = 0;
        let mut pos = 0;
        while let Some(last) = vol.readdir(dir, pos, 100).unwrap().last().map(|e| e.next) {
            pos = last;
            listed += 1;
        }
        assert!(listed > 0 && vol.cached_leaves(dir) > 4 * LIMIT as u64);
        drop(vol.trim_inodes());
        assert!(vol.cached_leaves(dir) <= LIMIT as u64, "after the listing's step");
    }
}
