//! Frontend layer: an inode not in cache, loaded under the shared delta
//! guard, so that a cold lookup or stat neither waits for the volume nor
//! makes others wait while it reads the device.
//!
//! Under the guard the inode table is read-only (only exclusive access
//! changes it), so its lock is held only to descend in memory: a descent
//! that meets a node still on disk lets the table go, reads the node, takes
//! the table again to put the node in place (`Tree::install`, which keeps a
//! copy another reader put there first) and descends again. No device I/O
//! happens under a lock other files share.
//!
//! The record found joins the cache through `InodeCache::insert_loaded`:
//! if another operation loaded the inode meanwhile, its copy wins (it may
//! already have changed); if an unlink under the guard freed it, the
//! table's record is stale until the next exclusive holder settles that
//! free, and the load fails with ENOENT, as it would after.
//!
//! Calls the cache and structures (the inode table, the inode record).

use super::{reserved_ino, Volume};
use crate::cache::{Inode, InodeGuard};
use crate::codec::MAX_DEPTH;
use crate::error::{err, Errno, Error, Result};
use crate::structures::btree::Cached;
use crate::structures::inode::InodeAttrs;
use crate::types::Ino;

impl Volume {
    /// Inode `ino` locked, loaded from the inode table if it is not in
    /// cache. ENOENT for a number no inode has (or had until an unlink
    /// under the guard freed it).
    pub(super) fn inode_shared(&self, ino: Ino) -> Result<InodeGuard> {
        if let Some(i) = self.cache.lock(ino) {
            return Ok(i);
        }
        if reserved_ino(ino) {
            return err(Errno::ENOENT);
        }
        let dev = self.be.dev.as_ref();
        // Each round loads one more level of the way; the shape cannot
        // change under the guard, so more rounds than levels mean a bug.
        let mut rounds = 0;
        let (raw, leaf) = loop {
            let step = self.be.itable.lock().get_cached(ino);
            match step {
                Cached::Done(Some(found)) => break found,
                Cached::Done(None) => return err(Errno::ENOENT),
                Cached::Missing(node) if rounds <= MAX_DEPTH => {
                    let loaded = node.read(dev)?;
                    self.be.itable.lock().install(ino, loaded);
                    rounds += 1;
                }
                Cached::Missing(_) => {
                    return Err(Error::corrupt(
                        self.be.sb.itable.addr,
                        format!("inode table: inode {ino} still not reached after loading {rounds} nodes"),
                    ))
                }
            }
        };
        let attrs = InodeAttrs::decode(&raw, ino, leaf, &crate::structures::bounds(dev))?;
        match self.cache.insert_loaded(Inode::new(ino, attrs)) {
            Some(i) => Ok(i),
            None => err(Errno::ENOENT),
        }
    }
}
