//! Frontend layer: an inode not in cache, loaded under the shared delta
//! guard, so that a cold lookup or stat neither waits for the volume nor
//! makes others wait while it reads the device.
//!
//! Under the guard the inode table is read-only (only exclusive access
//! changes it), so its lock is held only to descend in memory: a descent
//! that meets a node still on disk lets the table go, reads the node, takes
//! the table again to put the node in place (`Tree::install`, which keeps a
//! copy another reader put there first) and descends again. No device I/O
//! happens under a lock other files share. Where the API knows the inode
//! an operation needs (its argument, or the entry a lookup found), it reads
//! those nodes with no lock at all, not even the guard ([`ColdNode`]: a
//! read epoch keeps the node's block from reuse, and `install` keeps the
//! node only if the table still leads to its address), so a freeze does
//! not wait for them either.
//!
//! The record found joins the cache through `InodeCache::insert_loaded`:
//! if another operation loaded the inode meanwhile, its copy wins (it may
//! already have changed); if an unlink under the guard freed it, the
//! table's record is stale until the next exclusive holder settles that
//! free, and the load fails with ENOENT, as it would after.
//!
//! Calls the cache and structures (the inode table, the inode record).

use super::{reserved_ino, Volume};
use crate::backend::readers::ReadTicket;
use crate::cache::{Inode, InodeGuard};
use crate::codec::MAX_DEPTH;
use crate::device::Device;
use crate::error::{err, Errno, Error, Result};
use crate::structures::btree::{Cached, Loaded, Missing};
use crate::structures::inode::InodeAttrs;
use crate::types::Ino;
use std::sync::Arc;

/// An inode-table node that loading an inode needs, to be read with no
/// lock held, not even the delta guard ([`ColdNode::read`]), and put in
/// place after ([`Volume::install_cold`], which keeps it only if the table
/// still leads there). The read epoch it entered keeps the node's block
/// from reuse meanwhile (`backend/readers.rs`).
pub struct ColdNode {
    ino: Ino,
    missing: Missing,
    dev: Arc<dyn Device>,
    _entered: ReadTicket,
}

impl ColdNode {
    /// The inode whose load needs it.
    pub fn ino(&self) -> Ino {
        self.ino
    }

    /// Read and decode the node (device I/O).
    pub fn read(&self) -> Result<Loaded> {
        self.missing.read(self.dev.as_ref())
    }
}

/// Inode locked, or the node its load must read first.
pub enum Warm {
    Ready(InodeGuard),
    Cold(ColdNode),
}

impl Volume {
    /// Inode `ino` locked, loaded from the inode table if it is not in
    /// cache. ENOENT for a number no inode has (or had until an unlink
    /// under the guard freed it). A node of the table not in memory is read
    /// here, under the guard (the API reads them without it first where
    /// it can: [`Volume::cold_node`]).
    pub(super) fn inode_shared(&self, ino: Ino) -> Result<InodeGuard> {
        // Each round loads one more level of the way; the shape cannot
        // change under the guard, so more rounds than levels mean a bug.
        for _ in 0..=MAX_DEPTH {
            match self.inode_or_cold(ino)? {
                Warm::Ready(i) => return Ok(i),
                Warm::Cold(cold) => self.install_cold(ino, cold.read()?),
            }
        }
        Err(Error::corrupt(
            self.be.sb.itable.addr,
            format!("inode table: inode {ino} still not reached after loading {MAX_DEPTH} nodes"),
        ))
    }

    /// Inode `ino` locked if it is in cache or its record is in memory (then
    /// loaded into the cache); otherwise the next node of the inode table
    /// its load must read.
    pub(super) fn inode_or_cold(&self, ino: Ino) -> Result<Warm> {
        if let Some(i) = self.cache.lock(ino) {
            return Ok(Warm::Ready(i));
        }
        if reserved_ino(ino) {
            return err(Errno::ENOENT);
        }
        let step = self.be.itable.lock().get_cached(ino);
        let (raw, leaf) = match step {
            Cached::Done(Some(found)) => found,
            Cached::Done(None) => return err(Errno::ENOENT),
            Cached::Missing(missing) => {
                // Entered under the guard, while the table still leads to
                // the node: a free of its block comes after, and waits.
                return Ok(Warm::Cold(ColdNode {
                    ino,
                    missing,
                    dev: self.be.dev.clone(),
                    _entered: self.be.readers.enter(),
                }));
            }
        };
        let dev = self.be.dev.as_ref();
        let attrs = InodeAttrs::decode(&raw, ino, leaf, &crate::structures::bounds(dev))?;
        match self.cache.insert_loaded(Inode::new(ino, attrs)) {
            Some(i) => Ok(Warm::Ready(i)),
            None => err(Errno::ENOENT),
        }
    }

    /// The next node of the inode table that loading `ino` needs, when
    /// `ino` is not in cache and its way down the table leaves memory.
    pub fn cold_node(&self, ino: Ino) -> Option<ColdNode> {
        if self.cache.contains(ino) {
            return None;
        }
        match self.inode_or_cold(ino) {
            Ok(Warm::Cold(cold)) => Some(cold),
            _ => None,
        }
    }

    /// Put a node read for loading `ino` in place, unless the table no
    /// longer leads to its address (or another reader put it there first).
    pub fn install_cold(&self, ino: Ino, loaded: Loaded) {
        self.be.itable.lock().install(ino, loaded);
    }
}
