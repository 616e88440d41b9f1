//! Backend layer, below the frontend and above the cache: everything that
//! changes media — delta commit, unify, the block
//! allocator, the log writer, mkfs — and mount-time replay, which reads the
//! media and rebuilds the cache without writing. It also keeps the orphan
//! list (inodes with link count 0 kept alive by open handles): replay
//! collects it from `Orphan` and `Drop` records, and a unify carries it over
//! into the restarted log (`commit.rs`, `restart_log`).
//!
//! May call every layer below: the cache (to take dirty inodes and pages at
//! commit, and to fill it at replay), structures, log, device and base
//! (types, codec, error, memory_budget).

pub mod alloc;
pub(crate) mod checks;
pub mod commit;
mod commit_files;
pub mod discard;
pub mod free_space;
mod leafcheck;
mod load;
pub mod logwriter;
pub mod mkfs;
pub mod readers;
mod replay_trees;
pub mod snapshot;
mod unify;
mod writeout;
pub use writeout::WriteEpoch;

use crate::device::Device;
use crate::error::{Error, Result};
use crate::log::{read_chain_with, Record};
use crate::structures::btree::{Tree, TreeKind};
use crate::structures::superblock::Superblock;
use crate::structures::{bitmap, extent};
use alloc::Allocator;
use logwriter::LogWriter;
use parking_lot::Mutex;
use snapshot::Snapshots;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

/// Inode number of the bitmap file. Its attributes live in the superblock
/// (root of its extent tree, size in blocks), not in the inode table.
pub const BITMAP_INO: u64 = 2;
/// Delta numbers stay below this (a larger one on disk is corruption).
pub const MAX_DELTA: u64 = 1 << 62;

fn at_block(d: &crate::log::chain::LoggedDelta) -> u64 {
    d.blocks.last().copied().unwrap_or(0)
}

/// A live fsync image with the data map of the inode as the replayed inode
/// table has it: its root, or its extents held in the record (none if the
/// table does not have the inode). A root changes only at unify, and the
/// table of the superblock in use always names the right one; the image's
/// may be newer: an fsync commit written while a unify was in flight logs
/// the roots that unify gave, and the unify may not have landed. Extents
/// held in the record change at every delta commit, and the image's are
/// those of the last one prepared, which a crash may have lost.
fn keep_root(itable: &mut Tree, dev: &dyn Device, ino: u64, image: Vec<u8>, at: u64) -> Result<Vec<u8>> {
    use crate::structures::inode::InodeAttrs;
    let bounds = crate::structures::bounds(dev);
    let mut attrs = InodeAttrs::decode(&image, ino, at, &bounds)?;
    let Some((raw, leaf)) = itable.get_at(dev, ino)? else {
        if attrs.inline.is_empty() {
            return Ok(image);
        }
        attrs.inline.clear();
        return Ok(attrs.encode());
    };
    let now = InodeAttrs::decode(&raw, ino, leaf, &bounds)?;
    if attrs.root == now.root && attrs.inline == now.inline {
        return Ok(image);
    }
    attrs.root = now.root;
    attrs.inline = now.inline;
    Ok(attrs.encode())
}

/// First inode number handed to files.
pub const FIRST_INO: u64 = 16;
/// Inode numbers stay below this.
pub const INO_LIMIT: u64 = 1 << 48;

/// Counters of backend work, and the dirty memory now held, for the API's
/// `stats`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Delta commits since open.
    pub deltas: u64,
    /// Unifies since open.
    pub unifies: u64,
    /// Log blocks since the last unify.
    pub log_blocks: u64,
    /// Deltas replayed at open (full and fsync commits).
    pub replayed_deltas: u64,
    /// Fsync commits (fast path) since open.
    pub fsyncs: u64,
    /// Orphans on the durable orphan list at open (a writable open frees
    /// them in its first delta; a read-only open leaves them).
    pub replayed_orphans: u64,
    /// Bytes of dirty file data in the open delta (filled by the frontend).
    pub dirty_bytes: u64,
    /// Bytes of file data the commit in flight still holds: its frozen
    /// pages, shared with the cache until it is durable (or an fsync
    /// commit's inline copies). 0 when no commit is in flight.
    pub in_flight_bytes: u64,
    /// Bytes of clean file data kept in cache after its commit (filled by
    /// the frontend; at most the dirty limit after each commit).
    pub clean_bytes: u64,
    /// Inodes held in cache (filled by the frontend; see
    /// `OpenOptions::inode_limit`).
    pub cached_inodes: u64,
    /// Leaves of the inode table held in memory (filled by the frontend):
    /// those of inodes let go of past `inode_limit` go with them.
    pub itable_leaves: u64,
    /// Data blocks whose checksum a commit computed itself since open (on
    /// a volume with data checksums): those whose page no write took it
    /// for while the bytes were hot, nor a shrink or defrag from the read
    /// that checked it.
    pub sums_computed: u64,
}

/// Changes to one file tree found in the log, applied when its inode loads.
#[derive(Debug, Default, Clone)]
pub struct TreeReplay {
    /// The tree was dropped (inode freed) since the unify: start empty.
    pub reset: bool,
    /// LeafMap (Some(addr)) and LeafUnmap (None) by sep, in log order.
    pub ops: Vec<(u64, Option<u64>)>,
    /// Entries set (Some) or removed (None) by fsync commits at the end of
    /// the log, applied last, in log order.
    pub inserts: Vec<(u64, Option<Vec<u8>>)>,
}

/// The media side of a mounted volume.
pub struct Backend {
    pub dev: Arc<dyn Device>,
    pub sb: Superblock,
    pub bs: usize,
    pub alloc: Allocator,
    /// The inode table. Only exclusive access changes it (through
    /// `get_mut`, which takes no lock); under the shared delta guard its
    /// lock is held only to descend in memory and to put a node read from
    /// the device in place (`frontend/load.rs`).
    pub itable: Mutex<Tree>,
    /// Extent tree of the bitmap file.
    pub bitmap: Tree,
    pub log: LogWriter,
    /// The delta the frontend is filling now.
    pub delta: u64,
    /// Records of the current delta made by operations (tree drops).
    pub records: Vec<Record>,
    pub stats: Stats,
    pub read_only: bool,
    /// File data found in fsync commits at the end of the log, for the
    /// cache to hold as dirty pages: (inode, block, offset, bytes).
    pub replayed_pages: Vec<(u64, u64, usize, Vec<u8>)>,
    /// Where the last new file's data went: the goal for the next new file,
    /// so files written together lie together.
    pub data_cursor: u64,
    /// Where the data of the files in each directory begins (by the
    /// directory's inode; the first allocation for one of its files since
    /// the mount): the goal of a new file there, so the files of one
    /// directory lie together however they age, a new version filling the
    /// room an old one left. Bounded: it starts again past [`DIR_GOALS`]
    /// directories.
    pub dir_goals: HashMap<u64, u64>,
    /// The orphan list as of the open delta: inodes whose link count is 0
    /// but which an open handle keeps alive. Each entered it with an
    /// `Orphan` record and leaves it with its `Drop`; a unify re-logs the
    /// whole list at the head of the new log. After replay: the durable list.
    pub orphans: BTreeSet<u64>,
    /// Inodes that left the orphan list with a name (`Named` records: a
    /// linked `O_TMPFILE`) while still listed in the durable log, perhaps:
    /// an fsync commit that logs one logs its `Named` too, so the list an
    /// fsync makes durable never holds a named inode. Left at their free.
    pub named: BTreeSet<u64>,
    /// The snapshot table and the dead list.
    pub snaps: Snapshots,
    /// The orphan list as durable commits left it (O1, debug builds).
    durable_orphans: checks::DurableOrphans,
    /// Reads in the device without the delta guard, which a commit's frees
    /// wait for before they are handed out again (`readers.rs`).
    pub readers: Arc<readers::ReadEpochs>,
    /// The device writes of its commits, begun and ended (`writeout.rs`).
    pub write_epoch: Arc<WriteEpoch>,
    /// Giving blocks free for good back to the device (`discard.rs`).
    pub discard: discard::Discard,
    /// Log records replay passed over (a repair's open only): the log block
    /// and what was wrong with the record.
    pub skipped: Vec<(u64, String)>,
    /// Leaf maps replay mended (a repair's open only): the log block and
    /// what the record named wrong (`leafcheck.rs`).
    pub mended: Vec<(u64, String)>,
    /// Replay moved or removed leaves of the inode table (tree 0, whose
    /// log changes go straight into the table rather than into the replay
    /// map): a snapshot sharing the unified root then reads leaves the
    /// live table no longer has (fsck walks them).
    pub itable_replayed: bool,
}

pub(crate) fn nonce() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.write_u32(std::process::id());
    h.finish()
}

/// Directories whose last allocation [`Backend::dir_goals`] remembers.
pub const DIR_GOALS: usize = 1 << 16;

impl Backend {
    /// Read the superblock and bitmap, then replay the log: bitmap records
    /// and inode-table changes are applied at once; file-tree changes are
    /// returned for the cache to apply. Writes nothing (R1, asserted in
    /// debug builds: replay reads through `checks::reads_only`).
    pub fn open(dev: Arc<dyn Device>, read_only: bool) -> Result<(Backend, HashMap<u64, TreeReplay>)> {
        Backend::open_as(dev, read_only, None)
    }

    /// [`Backend::open`], or with `snapshot`, the snapshot of that name:
    /// the log is replayed (it may have deleted the snapshot), then the
    /// inode table is the snapshot's and nothing of the log applies to it.
    pub fn open_as(
        dev: Arc<dyn Device>,
        read_only: bool,
        snapshot: Option<&[u8]>,
    ) -> Result<(Backend, HashMap<u64, TreeReplay>)> {
        Backend::open_with(dev, read_only, snapshot, false)
    }

    /// [`Backend::open_as`]; with `skip_bad` (a repair), a log record that
    /// fails validation is passed over — what it carries is lost, the rest
    /// of the log applies — and listed in [`Backend::skipped`].
    pub fn open_with(
        dev: Arc<dyn Device>,
        read_only: bool,
        snapshot: Option<&[u8]>,
        skip_bad: bool,
    ) -> Result<(Backend, HashMap<u64, TreeReplay>)> {
        Backend::replay(dev, read_only, snapshot, skip_bad, skip_bad)
    }

    /// [`Backend::open`] for fsck: a `LeafMap` record its leaf block
    /// contradicts fails the open (`leafcheck.rs`), as [`Backend::open_with`]
    /// with `skip_bad` mends it.
    pub fn open_checking(
        dev: Arc<dyn Device>,
        read_only: bool,
    ) -> Result<(Backend, HashMap<u64, TreeReplay>)> {
        Backend::replay(dev, read_only, None, false, true)
    }

    /// Replay; with `check_leaves`, each leaf map judged by its leaf
    /// (mended with `skip_bad`, else an error).
    fn replay(
        dev: Arc<dyn Device>,
        read_only: bool,
        snapshot: Option<&[u8]>,
        skip_bad: bool,
        check_leaves: bool,
    ) -> Result<(Backend, HashMap<u64, TreeReplay>)> {
        // R1: a write or flush through this device panics; the caller's
        // device goes back in at the end.
        #[cfg(debug_assertions)]
        let (callers, dev) = (dev.clone(), checks::reads_only(dev));
        let mut sb = Superblock::load(dev.as_ref())?;
        let bs = dev.block_size() as usize;
        if sb.block_size as usize != bs {
            return Err(Error::BadImage(format!(
                "volume block size is {}, the device was opened with {bs}",
                sb.block_size
            )));
        }
        let need = bitmap::blocks_needed(bs, sb.block_count);
        if sb.bitmap_blocks != need {
            return Err(Error::corrupt(
                sb.home(),
                format!(
                    "superblock: bitmap has {} blocks, the volume needs {need}",
                    sb.bitmap_blocks
                ),
            ));
        }
        let mut alloc = Allocator::new(sb.block_count, bs);
        let mut bitmap_tree = Tree::open(BITMAP_INO, TreeKind::Extents, sb.bitmap);
        load::load_bitmap(dev.as_ref(), &sb, &mut bitmap_tree, &mut alloc)?;
        alloc.dirty.clear();

        let mut itable = Tree::open(0, TreeKind::Itable, sb.itable);
        let generation = u32::try_from(sb.generation).unwrap_or(u32::MAX);
        let mut snaps = Snapshots::load_with(dev.as_ref(), sb.snapshots, generation, skip_bad)?;
        for (start, count, refs) in snaps.take_shared() {
            alloc.shared.apply(start, count, refs);
        }
        alloc.shared.clear_dirty();
        for (start, c) in snaps.take_sums() {
            alloc.sums.apply(start, Some(c));
        }
        let _ = alloc.sums.take_dirty();
        let death = u32::try_from(sb.generation).unwrap_or(u32::MAX);
        let mut chain = read_chain_with(dev.as_ref(), sb.log_start(), skip_bad)?;
        let mut skipped = std::mem::take(&mut chain.skipped);
        let leafcheck = check_leaves.then(|| leafcheck::LeafCheck::new(&chain.deltas, chain.tail.next));
        let mut mended = leafcheck::mend_deltas(&mut chain.deltas, sb.next_delta, skip_bad);
        if let Some(why) = &chain.unproven {
            // A crash leaves this; so does damage to a block of the last
            // commit, which nothing can tell apart from it: say which.
            tracing::warn!("replay: {why} (or the device damaged that block since)");
        }
        let mut trees = replay_trees::ReplayTrees::default();
        let mut pages: Vec<(u64, u64, usize, Vec<u8>)> = Vec::new();
        let mut orphans = BTreeSet::new();
        let mut itable_replayed = false;
        let mut delta = sb.next_delta;
        // An fsync commit counts unless a later full commit holds its delta:
        // that commit holds everything the fsync described. (An fsync
        // commit written while the previous delta's commit was in flight
        // carries the next delta's number and stays live after it.)
        let mut later_full = vec![None::<u64>; chain.deltas.len() + 1];
        for (n, d) in chain.deltas.iter().enumerate().rev() {
            later_full[n] = later_full[n + 1].max((!d.fsync).then_some(d.delta));
        }
        // Live fsync images apply after every full commit's leaf maps, in
        // log order: a full commit that follows one rewrites the inode
        // table's leaves from its own (older) images.
        let mut images: Vec<(u64, Vec<u8>, u64)> = Vec::new();
        for (n, d) in chain.deltas.iter().enumerate() {
            let at = d.blocks.first().copied().unwrap_or(0);
            let live_fsync = d.fsync && later_full[n + 1].is_none_or(|f| f < d.delta);
            let bad = |what: String| Error::corrupt(at, format!("log of delta {}: {what}", d.delta));
            let in_volume = |a: u64| a >= 2 && a < sb.block_count;
            let mut apply = |r: &Record| -> Result<()> {
                match *r {
                    Record::InodeImage { ino, ref attrs } => {
                        if live_fsync {
                            let bounds = crate::structures::bounds(dev.as_ref());
                            crate::structures::inode::InodeAttrs::decode(attrs, ino, at, &bounds)?;
                            images.push((ino, attrs.clone(), at));
                        }
                    }
                    Record::DirentSet { dir, key, ref entry } => {
                        if live_fsync {
                            crate::structures::dirent::Dirent::decode(entry, key, at)?;
                            trees.entry(dir).inserts.push((key, Some(entry.clone())));
                        }
                    }
                    Record::DirentRemove { dir, key } => {
                        if live_fsync {
                            trees.entry(dir).inserts.push((key, None));
                        }
                    }
                    Record::DataInline {
                        ino,
                        lblock,
                        offset,
                        ref data,
                    } => {
                        if live_fsync {
                            if offset as usize + data.len() > bs {
                                return Err(bad(format!("inline data of {} bytes at {offset}", data.len())));
                            }
                            pages.push((ino, lblock, offset as usize, data.to_vec()));
                        }
                    }
                    Record::Balloc { start, count } => {
                        if !alloc.apply_alloc(start, count as u64) {
                            return Err(bad(format!("balloc {start}+{count} outside the volume")));
                        }
                    }
                    Record::Bfree { start, count } => {
                        if !alloc.apply_free(start, count as u64) {
                            return Err(bad(format!("bfree {start}+{count} outside the volume")));
                        }
                    }
                    Record::Dead { start, count, birth } => {
                        if birth >= death {
                            return Err(bad(format!(
                                "dead {start}+{count} born {birth}, after generation {death}"
                            )));
                        }
                        if count == 0 || !in_volume(start) || !in_volume(start + u64::from(count) - 1) {
                            return Err(bad(format!("dead {start}+{count} outside the volume")));
                        }
                        if let Some(o) = snaps.dead_overlap(start, u64::from(count)) {
                            return Err(bad(format!(
                                "dead {start}+{count} overlaps the dead extent at {o}"
                            )));
                        }
                        snaps.add_dead(dev.as_ref(), vec![(start, count as u64, birth)], death, None)?;
                    }
                    // Its blocks come free through the delta's Bfree.
                    Record::Reclaim { start, count } => {
                        if snaps.remove_dead(dev.as_ref(), start)? != Some(count as u64) {
                            return Err(bad(format!("reclaim {start}+{count}: no such dead extent")));
                        }
                    }
                    Record::SnapDelete { id } => {
                        if !snaps.mark_deleting(dev.as_ref(), id)? {
                            return Err(bad(format!(
                                "deletes snapshot {id}, which the table does not hold"
                            )));
                        }
                    }
                    Record::Share { start, count, refs } => {
                        alloc.shared.apply(start, u64::from(count), refs);
                    }
                    Record::Sums {
                        start,
                        mask,
                        ref sums,
                    } => {
                        let chunk = alloc::SumChunk {
                            mask,
                            sums: sums.clone(),
                        };
                        alloc.sums.apply(start, Some(chunk));
                    }
                    Record::SnapGone { id } => {
                        if !snaps.remove_record(dev.as_ref(), id)? {
                            return Err(bad(format!("drops snapshot {id}, which the table does not hold")));
                        }
                    }
                    Record::LeafMap { tree, sep, addr } => {
                        let to = skip_bad.then_some((&mut mended, at, d.delta));
                        let (tree, sep, addr) = leafcheck::judge(
                            leafcheck.as_ref(),
                            dev.as_ref(),
                            n,
                            &mut itable,
                            (tree, sep, addr),
                            to,
                        )?
                        .map_err(bad)?;
                        if !in_volume(addr) {
                            return Err(bad(format!("leaf of tree {tree} at {addr} outside the volume")));
                        }
                        if tree == 0 {
                            itable_replayed = true;
                            itable.map_leaf(dev.as_ref(), sep, addr)?;
                        } else {
                            trees.entry(tree).ops.push((sep, Some(addr)));
                        }
                    }
                    Record::LeafUnmap { tree, sep } => {
                        if tree == 0 {
                            itable_replayed = true;
                            itable.unmap_leaf(dev.as_ref(), sep)?;
                        } else {
                            trees.entry(tree).ops.push((sep, None));
                        }
                    }
                    // Orphans count in every committed delta, fsync or full:
                    // a later full commit never un-lists one, only a Drop.
                    Record::Orphan { ino } => {
                        if !(FIRST_INO..INO_LIMIT).contains(&ino) {
                            return Err(bad(format!(
                                "orphan record names inode {ino}, not a file inode number"
                            )));
                        }
                        orphans.insert(ino);
                    }
                    // A listed orphan that got a name (a linked O_TMPFILE).
                    Record::Named { ino } => {
                        orphans.remove(&ino);
                    }
                    // Checked by the chain reader (the last delta only).
                    Record::BlockSum { .. } => {}
                    Record::Drop { .. } | Record::DropRun { .. } => {
                        let range = r.dropped().unwrap_or_default();
                        let mut after = orphans.split_off(&range.start);
                        orphans.append(&mut after.split_off(&range.end));
                        trees.drop_range(range);
                    }
                }
                Ok(())
            };
            for r in &d.records {
                match apply(r) {
                    // Only the record's own fault: one another block's
                    // damage caused is that block's to repair.
                    Err(Error::Corrupt { block, what }) if skip_bad && d.blocks.contains(&block) => {
                        skipped.push((block, what))
                    }
                    r => r?,
                }
            }
            // The table as this commit left it has no runs that overlap
            // (a run may overlap a neighbour between two of its records).
            for r in &d.records {
                if let Record::Share { start, count, .. } = *r {
                    if let Some(o) = alloc.shared.overlapping(start) {
                        return Err(Error::corrupt(
                            at,
                            format!(
                                "log of delta {}: Share record: run {start}+{count} overlaps the run at {o}",
                                d.delta
                            ),
                        ));
                    }
                }
            }
            if d.delta >= MAX_DELTA {
                return Err(Error::corrupt(
                    at_block(d),
                    format!("log: delta number {} is implausible", d.delta),
                ));
            }
            delta = delta.max(if d.fsync { d.delta } else { d.delta + 1 });
        }
        if let Some(name) = snapshot {
            let rec = snaps.find(name).ok_or_else(|| {
                Error::NotFound(format!("no snapshot named {:?}", String::from_utf8_lossy(name)))
            })?;
            sb.itable = rec.itable;
            itable = Tree::open(0, TreeKind::Itable, rec.itable);
            trees.clear();
            images.clear();
            pages.clear();
            orphans.clear();
        }
        // The replayed runs go into the table's tree (written at the next unify).
        let replayed = alloc.shared.take_dirty();
        snaps.sync_shared(dev.as_ref(), replayed, None)?;
        let replayed = alloc.sums.take_dirty();
        snaps.sync_sums(dev.as_ref(), replayed, None)?;
        alloc.generation = death;
        alloc.held_upto = snaps.held_upto();
        let mut replayed_images: Vec<u64> = images.iter().map(|(ino, _, _)| *ino).collect();
        for (ino, attrs, at) in images {
            let attrs = keep_root(&mut itable, dev.as_ref(), ino, attrs, at)?;
            itable.insert(dev.as_ref(), ino, attrs)?;
        }
        replayed_images.sort_unstable();
        replayed_images.dedup();
        let log = LogWriter {
            tail: chain.tail,
            nonce: nonce(),
            since_unify: chain.blocks().collect(),
            order: checks::ChainOrder::default(),
        };
        let stats = Stats {
            log_blocks: log.since_unify.len() as u64,
            replayed_deltas: chain.deltas.len() as u64,
            replayed_orphans: orphans.len() as u64,
            ..Stats::default()
        };
        let mut be = Backend {
            dev,
            sb,
            bs,
            alloc,
            itable: Mutex::new(itable),
            bitmap: bitmap_tree,
            log,
            delta,
            records: Vec::new(),
            stats,
            read_only,
            replayed_pages: pages,
            data_cursor: 2,
            dir_goals: HashMap::new(),
            durable_orphans: checks::DurableOrphans::replayed(&orphans),
            orphans,
            named: BTreeSet::new(),
            snaps,
            readers: Arc::default(),
            write_epoch: Arc::default(),
            discard: discard::Discard::default(),
            skipped,
            mended,
            itable_replayed,
        };
        let trees = trees.into_map();
        be.recount_replayed(&replayed_images, &trees);
        #[cfg(debug_assertions)]
        {
            be.dev = callers;
        }
        Ok((be, trees))
    }

    /// A live fsync image counts the blocks its file held when it was
    /// logged, which include those of a delta commit that was in flight
    /// then — and that a crash may have lost. Count what the replayed extent
    /// tree maps instead (in the replayed inode table; nothing is written).
    /// A tree that cannot be read is left for fsck to report.
    fn recount_replayed(&mut self, inos: &[u64], trees: &HashMap<u64, TreeReplay>) {
        let dev = self.dev.clone();
        for &ino in inos {
            let Ok(Some(raw)) = self.itable.get_mut().get(dev.as_ref(), ino) else {
                continue;
            };
            let bounds = crate::structures::bounds(dev.as_ref());
            let Ok(mut attrs) = crate::structures::inode::InodeAttrs::decode(&raw, ino, 0, &bounds) else {
                continue;
            };
            let mut inode = crate::cache::Inode::new(ino, attrs.clone());
            if inode.kind() != crate::types::FileType::Regular {
                continue;
            }
            if let Some(r) = trees.get(&ino) {
                if r.reset {
                    inode.tree = crate::cache::data_tree(ino, inode.tree.kind, &inode.attrs, true);
                }
                if self.replay_tree(&mut inode.tree, r).is_err() {
                    continue;
                }
            }
            let Ok(extents) = extent::all(&mut inode.tree, dev.as_ref()) else {
                continue;
            };
            let mapped: u64 = extents.iter().map(|e| e.count).sum();
            if mapped != attrs.blocks {
                attrs.blocks = mapped;
                let _ = self.itable.get_mut().insert(dev.as_ref(), ino, attrs.encode());
            }
        }
    }

    /// Apply replayed changes to a freshly opened file tree.
    pub fn replay_tree(&self, tree: &mut Tree, replay: &TreeReplay) -> Result<()> {
        for (sep, addr) in &replay.ops {
            match addr {
                Some(a) => tree.map_leaf(self.dev.as_ref(), *sep, *a)?,
                None => tree.unmap_leaf(self.dev.as_ref(), *sep)?,
            }
        }
        for (key, value) in &replay.inserts {
            match value {
                Some(v) => tree.insert(self.dev.as_ref(), *key, v.clone())?,
                None => {
                    tree.remove(self.dev.as_ref(), *key)?;
                }
            }
        }
        Ok(())
    }

    pub fn device(&self) -> &dyn Device {
        self.dev.as_ref()
    }
}
