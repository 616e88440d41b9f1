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
//! Nodes of a directory's or a file's own tree (its entries, its extents)
//! are read the same way: a shared operation reads the device through
//! [`ColdReads`], which serves the blocks already read for it
//! ([`Staged`]) and fails any other read, remembering its address. The
//! operation then hands that block back (a [`ColdNode`] again), having
//! changed nothing but the nodes it put in place; the API reads it with no
//! lock held, keeps it in `Staged` and asks again, until the operation
//! finds every node it needs in memory or staged. The tree decodes and
//! installs a staged block as if it came from the device: it is the
//! block's content, as nothing writes to a block the tree still leads to
//! and a free after the read epoch was entered waits for the read.
//!
//! An operation that runs exclusively (a symlink, a truncate, a directory
//! moved) has what it will read loaded first the same way, as a shared
//! operation that changes nothing ([`Volume::probe_shared`],
//! [`Volume::tree_shared`]), so that it reads nothing under the exclusive
//! guard.
//!
//! The record found joins the cache through `InodeCache::insert_loaded`:
//! if another operation loaded the inode meanwhile, its copy wins (it may
//! already have changed); if an unlink under the guard freed it, the
//! table's record is stale until the next exclusive holder settles that
//! free, and the load fails with ENOENT, as it would after.
//!
//! Calls the cache and structures (the inode table, the inode record).

use super::namespace::{has_no_entries, load_tree, probe_in};
use super::{reserved_ino, Volume};
use crate::backend::readers::ReadTicket;
use crate::cache::{Inode, InodeGuard};
use crate::codec::MAX_DEPTH;
use crate::device::{CounterSnapshot, Device};
use crate::error::{err, Errno, Error, Result};
use crate::structures::btree::{Cached, Loaded, Missing};
use crate::structures::dirent::Lookup;
use crate::structures::inode::InodeAttrs;
use crate::types::{FileType, Ino};
use std::sync::{Arc, OnceLock};

/// A node an operation needs that is only on disk, to be read with no
/// lock held, not even the delta guard ([`ColdNode::read`]): an
/// inode-table node that loading an inode needs, put in place after
/// ([`Volume::install_cold`], which keeps it only if the table still leads
/// there), or a block of a directory's or file's tree, kept for the
/// operation's next try ([`Staged`]). The read epoch it entered keeps the
/// block from reuse meanwhile (`backend/readers.rs`).
pub struct ColdNode {
    what: Cold,
    dev: Arc<dyn Device>,
    entered: ReadTicket,
}

enum Cold {
    Table {
        ino: Ino,
        missing: Missing,
    },
    /// Tree blocks `start..end`: one, or a run of leaves a walk in key
    /// order reads together (`structures/btree/ahead.rs`).
    Blocks(u64, u64),
}

/// Most blocks one [`ColdNode`] read brings in (a missed read of more is
/// read in pieces, one per try of the operation).
const RUN_MAX: u64 = 64;

/// A [`ColdNode`] read.
pub enum ReadNode {
    /// An inode-table node, for [`Volume::install_cold`] (with the inode
    /// whose load needed it).
    Table(Ino, Loaded),
    /// Staged for the operation's next try.
    Staged,
}

impl ColdNode {
    /// Read it (device I/O): an inode-table node is decoded and returned,
    /// a tree block joins `staged`.
    pub fn read(self, staged: &mut Staged) -> Result<ReadNode> {
        match self.what {
            Cold::Table { ino, missing } => Ok(ReadNode::Table(ino, missing.read(self.dev.as_ref())?)),
            Cold::Blocks(start, end) => {
                let bs = self.dev.block_size() as usize;
                let n = end.saturating_sub(start).clamp(1, RUN_MAX) as usize;
                let mut run = vec![0u8; bs.saturating_mul(n)];
                if n > 1 && self.dev.read(start, &mut run).is_ok() {
                    for (b, addr) in run.chunks_exact(bs).zip(start..) {
                        staged.blocks.push((addr, b.into()));
                    }
                } else {
                    // One block, or the run's read failed: the block asked
                    // for alone, whose error is the operation's.
                    let mut b = vec![0u8; bs].into_boxed_slice();
                    crate::device::read_named(self.dev.as_ref(), start, &mut b)?;
                    staged.blocks.push((start, b));
                }
                staged._entered.push(self.entered);
                Ok(ReadNode::Staged)
            }
        }
    }
}

/// Tree blocks read with no lock held for an operation that asks again,
/// with the read epochs that keep them from reuse until it is done.
#[derive(Default)]
pub struct Staged {
    blocks: Vec<(u64, Box<[u8]>)>,
    _entered: Vec<ReadTicket>,
}

impl Staged {
    fn get(&self, addr: u64) -> Option<&[u8]> {
        self.blocks.iter().find(|(a, _)| *a == addr).map(|(_, b)| &b[..])
    }
}

/// The device as a shared operation sees it: reads of staged blocks are
/// served from memory, any other read fails (its first block not staged
/// and the end of that read remembered). Nothing may be written through it.
pub(super) struct ColdReads<'a> {
    dev: &'a dyn Device,
    staged: &'a Staged,
    /// The first read that missed: its first block not staged and the
    /// block after its last.
    missed: OnceLock<(u64, u64)>,
}

impl Device for ColdReads<'_> {
    fn block_size(&self) -> u32 {
        self.dev.block_size()
    }

    fn block_count(&self) -> u64 {
        self.dev.block_count()
    }

    fn name(&self) -> String {
        self.dev.name()
    }

    fn read(&self, block: u64, buf: &mut [u8]) -> std::io::Result<()> {
        let bs = self.dev.block_size() as usize;
        let end = block.saturating_add(buf.len().div_ceil(bs.max(1)) as u64);
        for (k, part) in buf.chunks_mut(bs).enumerate() {
            let addr = block + k as u64;
            match self.staged.get(addr) {
                Some(b) if b.len() == part.len() => part.copy_from_slice(b),
                _ => {
                    let _ = self.missed.set((addr, end));
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::WouldBlock,
                        format!("block {addr} is not in memory"),
                    ));
                }
            }
        }
        Ok(())
    }

    fn write(&self, block: u64, _: &[u8]) -> std::io::Result<()> {
        Err(std::io::Error::other(format!(
            "write of block {block} under the shared delta guard"
        )))
    }

    fn flush(&self) -> std::io::Result<()> {
        Err(std::io::Error::other("flush under the shared delta guard"))
    }

    fn counters(&self) -> CounterSnapshot {
        self.dev.counters()
    }
}

/// What a shared operation that may stop at a node on disk answers:
/// `None`, run it exclusively; `Some(Err)`, its error; `Some(Ok(Err))`,
/// the node to read with no lock held before it is asked again.
pub type MayLoad<T> = Option<Result<std::result::Result<T, ColdNode>>>;

/// What an operation that runs exclusively will read of a tree
/// ([`Volume::tree_shared`]).
#[derive(Clone, Copy)]
pub enum TreeNeed {
    /// A truncate to this size: the whole extent map, if it cuts the file.
    Cut(u64),
    /// A directory's emptiness check: its first entry.
    FirstEntry,
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
                Warm::Cold(cold) => {
                    if let ReadNode::Table(ino, loaded) = cold.read(&mut Staged::default())? {
                        self.install_cold(ino, loaded);
                    }
                }
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
                    what: Cold::Table { ino, missing },
                    dev: self.be.dev.clone(),
                    entered: self.be.readers.enter(),
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

    /// Before an operation that runs exclusively (a symlink, a rename of
    /// a directory): finding `name` in directory `dir`, so that the nodes
    /// of its tree that doing so reads are in memory when the operation
    /// looks again; they are read through `staged`, with no lock held.
    /// The entry's inode and kind, if there is one.
    pub fn probe_shared(&self, dir: Ino, name: &[u8], staged: &Staged) -> MayLoad<Option<(Ino, FileType)>> {
        let mut d = or_fail!(self.inode_shared(dir));
        let found = self.staged(d.dir_ino(), staged, |dev| probe_in(&mut d, dev, name));
        Some(found.map(|r| {
            r.map(|l| match l {
                Lookup::Found { ino, kind, .. } => Some((ino, kind)),
                Lookup::Absent { .. } => None,
            })
        }))
    }

    /// Before an operation that runs exclusively and reads `ino`'s tree,
    /// the nodes it will read (`need`) loaded so.
    pub fn tree_shared(&self, ino: Ino, need: TreeNeed, staged: &Staged) -> MayLoad<()> {
        let mut i = or_fail!(self.inode_shared(ino));
        let loaded = self.staged(i.dir_ino(), staged, |dev| match need {
            TreeNeed::Cut(size) if size < i.attrs.size => load_tree(&mut i, dev),
            TreeNeed::Cut(_) => Ok(()),
            TreeNeed::FirstEntry => has_no_entries(&mut i, dev).map(drop),
        });
        Some(loaded)
    }

    /// The device for a shared operation's tree reads, serving `staged`.
    pub(super) fn cold_reads<'a>(&'a self, staged: &'a Staged) -> ColdReads<'a> {
        ColdReads {
            dev: self.be.dev.as_ref(),
            staged,
            missed: OnceLock::new(),
        }
    }

    /// Run `f`, which reads the device only through the [`ColdReads`] it is
    /// given: its outcome, or (`Err`) the block it missed, entered in the
    /// read epoch now, while the caller still holds the tree that leads to
    /// it. `f` must change nothing before a read that can miss (loading
    /// nodes aside).
    ///
    /// An operation on directory `dir` (`Inode::dir_ino`) that succeeds
    /// having read blocks of its tree notes it for the bound on a
    /// directory's leaves (`InodeCache::note_grown`).
    pub(super) fn staged<T>(
        &self,
        dir: Option<Ino>,
        staged: &Staged,
        f: impl FnOnce(&dyn Device) -> Result<T>,
    ) -> Result<std::result::Result<T, ColdNode>> {
        let reads = self.cold_reads(staged);
        let r = f(&reads);
        match reads.missed.get() {
            None => {
                if let Some(dir) = dir.filter(|_| r.is_ok() && !staged.blocks.is_empty()) {
                    self.cache.note_grown(dir);
                }
                r.map(Ok)
            }
            Some(&(start, end)) => Ok(Err(ColdNode {
                what: Cold::Blocks(start, end),
                dev: self.be.dev.clone(),
                entered: self.be.readers.enter(),
            })),
        }
    }
}
