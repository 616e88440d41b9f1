//! Backend layer: delta commit and unify, as a sequence of named steps.
//! Calls the cache (to take dirty inodes and pages), structures (trees,
//! bitmap, superblock), the log writer and the device; the frontend and the
//! API above drive it. A commit runs in five stages, so that its two I/O
//! phases run without the delta guard (the volume):
//!
//! * [`Backend::prepare`] (delta guard held exclusively): freeze the delta — allocate,
//!   encode every block to write, and start the next delta;
//! * [`CommitJob::write_data`] (no lock), I/O phase 1: data and leaves, and
//!   the first flush (a single-flush or fsync commit keeps them for the
//!   log's batch);
//! * [`Backend::encode_log`] (delta guard held exclusively): encode the log blocks at
//!   the log's tail as it is now — an fsync commit of the next delta may
//!   have taken the tail meanwhile, ahead of this one;
//! * [`CommitJob::write_log`] (no lock), I/O phase 2: log blocks, commit
//!   block, flush;
//! * [`Backend::finish`] (delta guard held exclusively): the delta is durable.
//!
//! Delta commit (the common case), the steps of `prepare` and after:
//!   1. `allocate_data`   allocate dirty data pages and queue them; map extents
//!   2. `redirect_files`  new addresses for dirty file-tree leaves; leaf-map records
//!   3. `store_inodes`    encode dirty inodes into the inode table
//!   4. `redirect_itable` the same for dirty inode-table leaves
//!   5. `log_records`     allocations and frees become records; then, in
//!      `CommitJob::write_data`: data and leaves, FLUSH; `encode_log`
//!      encodes the log; `CommitJob::write_log`: log blocks and commit
//!      block, FLUSH (the commit block is "the real commit": the delta
//!      exists on media exactly when its log can be read back, every block
//!      with a valid checksum and chained to the one before). A small delta
//!      (at most [`SINGLE_FLUSH_BLOCKS`] data and leaf blocks) skips the
//!      first FLUSH: its log carries a `BlockSum` of those blocks, and
//!      replay drops a last delta whose blocks do not match (`log::chain`).
//!   6. `finish`          release pinned frees; with online discard, discard
//!      what came free for good (`discard.rs`)
//!
//! Unify replaces step 5: after the leaves it also redirects every changed
//! branch, relocates changed bitmap blocks, writes them all, FLUSH, writes
//! the superblock naming the new roots and the log head, FLUSH. A unify's
//! log is encoded when it is prepared (its superblock names the new log).
//! The old log and old branches are freed (pinned until the superblock is
//! durable). If the orphan list is not empty, the new log does not start
//! empty: its head is a fresh block holding an FSYNC-flagged commit of the
//! next delta with one `Orphan` record per orphan, written before the
//! superblock (`restart_log`), so the list survives the unify.

use super::checks::{new_log_head, JobChecks, Last};
use super::logwriter::LogLayout;
use super::writeout::{images, write_all, Pages, WriteEpoch, Writes};
use super::{Backend, BITMAP_INO};
use crate::cache::InodeCache;
use crate::device::{Device, Urgent};
use crate::error::Result;
use crate::log::{Record, Tail};
use crate::structures::btree::node::FreedNode;
use crate::structures::extent::Extent;
use crate::structures::extent_range::{self, Run};
use crate::structures::superblock::Superblock;
use crate::structures::{bitmap, extent};
use std::collections::BTreeMap;
use std::sync::Arc;

/// A delta commit writing at most this many data and leaf blocks is written
/// with one flush, its blocks proven by checksums in its log instead of by
/// a flush before the commit block. Replay reads them back (only for the
/// last delta), so the bound also bounds that work.
pub const SINGLE_FLUSH_BLOCKS: usize = 256;

/// A frozen delta: every block it writes, encoded, and the block that makes
/// it durable. Holding a job means the delta guard is free for the frontend.
pub struct CommitJob {
    dev: Arc<dyn Device>,
    /// The volume's count of device writes ([`Backend::write_epoch`]).
    epoch: Arc<WriteEpoch>,
    bs: usize,
    /// The delta this job makes durable.
    pub delta: u64,
    /// Data pages frozen into this delta, shared with the cache.
    data: Pages,
    /// Leaves, (for unify: branches, bitmap blocks and the new log's
    /// head; for an fsync commit: its log body).
    writes: Writes,
    /// The log's records, until [`Backend::encode_log`] encodes them.
    unencoded: Option<Vec<Record>>,
    /// The log body of a delta commit, once its log is encoded.
    log_body: Writes,
    /// The commit block (delta commit) or the superblock (unify).
    last: (u64, Vec<u8>),
    /// The superblock the unify installs.
    unified: Option<Superblock>,
    /// An fsync commit: only log blocks, which validate each other through
    /// the chain, so one flush suffices.
    fsync: bool,
    /// A small delta commit whose log holds checksums of its other blocks:
    /// one flush suffices.
    single_flush: bool,
    /// A unify whose new log starts at a fresh block (it carries the orphan
    /// list): no fsync commit may be written before its superblock, so it
    /// holds the log from freeze to finish.
    fresh_log: bool,
    /// Inodes whose pages are under writeback in this job.
    pub inodes: Vec<u64>,
    /// Bytes of file data this job holds until it is dropped: its data
    /// pages, or an fsync commit's inline copies.
    data_bytes: u64,
    /// Its final flush returned: the job is durable (P4).
    flushed: bool,
    /// An fsync commit whose log blocks are written and which passed the
    /// log's tail on before its flush (`Volume::fsync_written`).
    handed_on: bool,
    /// An fsync commit's log blocks, placed on the chain and encoded by
    /// [`CommitJob::write_log_blocks`] without the volume.
    layout: Option<LogLayout>,
    /// Once they are encoded: the checksum the next block names, for the
    /// log's tail (`Backend::chain_encoded`).
    chain_crc: Option<u32>,
    /// What L1, U1 and O1 need of the job (debug builds).
    checks: JobChecks,
}

impl CommitJob {
    /// All the I/O of a job whose log is encoded already (an fsync commit or
    /// a unify; a delta commit's log is encoded between its two phases).
    pub fn write(&mut self) -> Result<()> {
        self.write_data()?;
        self.write_log()
    }

    /// Phase 2 in two steps, so that the log's tail may be handed on
    /// between them: [`CommitJob::write_log_blocks`], then
    /// [`CommitJob::flush_log`].
    pub fn write_log(&mut self) -> Result<()> {
        // An fsync commit is waited for: other batches make way for it
        // from its first write to its flush.
        let dev = self.dev.clone();
        let _urgent = self.fsync.then(|| Urgent::new(dev.as_ref()));
        self.write_log_blocks()?;
        self.flush_log()
    }

    /// An fsync commit's log blocks, as urgent I/O: the first half of
    /// [`CommitJob::write_log`] for a commit that passes the log's tail on
    /// before its flush ([`CommitJob::flush_urgent`]).
    pub fn write_log_blocks_urgent(&mut self) -> Result<()> {
        let dev = self.dev.clone();
        let _urgent = Urgent::new(dev.as_ref());
        self.write_log_blocks()
    }

    /// The flush that makes an fsync commit durable, as urgent I/O.
    pub fn flush_urgent(&mut self) -> Result<()> {
        let dev = self.dev.clone();
        let _urgent = Urgent::new(dev.as_ref());
        self.flush_log()
    }

    /// Phase 1: data pages and leaves (a unify: everything but the
    /// superblock), then FLUSH, unless checksums prove them (single-flush
    /// commit) or the job is an fsync commit (invariants L1 and U1,
    /// asserted where the last block goes out, in `write_log_blocks`).
    ///
    /// Those two kinds need no flush between their phases, so their data
    /// waits for phase 2 and goes out in the same batch as the log.
    pub fn write_data(&mut self) -> Result<()> {
        if self.data_goes_with_log() {
            return Ok(());
        }
        write_all(
            self.dev.as_ref(),
            &self.epoch,
            self.bs,
            std::mem::take(&mut self.writes),
            &self.data,
            None,
        )?;
        self.dev.flush()?;
        self.checks.data_flushed();
        Ok(())
    }

    /// Phase 2, once the log is encoded: the log body and the commit block
    /// (or the superblock), written (completed, not yet durable). The log blocks
    /// need no flush between them: each is found only through the one
    /// before it.
    pub fn write_log_blocks(&mut self) -> Result<()> {
        debug_assert!(
            self.unencoded.is_none(),
            "a commit's log written before it was encoded"
        );
        // An fsync commit's blocks, placed on the chain at its plan, are
        // encoded here, without the volume.
        if let Some(layout) = self.layout.take() {
            let images = layout.encode();
            self.writes = images.body;
            self.last = images.commit;
            self.chain_crc = Some(images.crc);
        }
        // Phase 1's writes, if they waited for this batch, then the log.
        let mut writes = std::mem::take(&mut self.writes);
        let data: &[(u64, Arc<Vec<u8>>)] = if self.data_goes_with_log() {
            &self.data
        } else {
            &[]
        };
        // L1 and U1, asserted: flushed before, or proven by their sums.
        let last = Last::of(self.is_unify(), self.fsync);
        self.checks
            .before_last(last, self.delta, self.bs, &writes, &self.data);
        writes.append(&mut self.log_body);
        write_all(
            self.dev.as_ref(),
            &self.epoch,
            self.bs,
            writes,
            data,
            Some((self.last.0, &self.last.1)),
        )?;
        Ok(())
    }

    /// The FLUSH that ends phase 2: the commit is durable.
    pub fn flush_log(&mut self) -> Result<()> {
        self.dev.flush()?;
        self.flushed = true;
        Ok(())
    }

    /// A flush issued after this job's writes completed returned (one
    /// flush serving several fsync commits written before it).
    pub fn flushed_by_another(&mut self) {
        self.flushed = true;
    }

    /// Its log blocks are written and the log's tail passed on; its flush
    /// is still to come.
    pub fn hand_on(&mut self) {
        self.handed_on = true;
    }

    pub fn is_handed_on(&self) -> bool {
        self.handed_on
    }

    /// An fsync commit whose log blocks were placed on the chain but not
    /// encoded (nothing was written): the log's tail is unusable after it.
    pub fn log_unwritten(&self) -> bool {
        self.layout.is_some()
    }

    /// Its final flush returned: what it references is durable.
    pub fn is_flushed(&self) -> bool {
        self.flushed
    }

    /// No flush separates its phases (an fsync or single-flush commit), so
    /// its data and leaves go out in the log's batch.
    fn data_goes_with_log(&self) -> bool {
        self.fsync || self.single_flush
    }

    /// Its log blocks are still to be encoded ([`Backend::encode_log`]).
    pub fn log_unencoded(&self) -> bool {
        self.unencoded.is_some()
    }

    pub fn is_fsync(&self) -> bool {
        self.fsync
    }

    pub fn is_unify(&self) -> bool {
        self.unified.is_some()
    }

    /// Whether the job keeps the log from freeze to finish (a unify that
    /// starts a fresh log): no fsync commit may go ahead of it. Any other
    /// job needs the log only for its last phase.
    pub fn holds_log(&self) -> bool {
        self.fresh_log
    }

    /// Bytes of file data the job holds (for the dirty-memory bound).
    pub fn data_bytes(&self) -> u64 {
        self.data_bytes
    }
}

impl Backend {
    /// Freeze the current delta into a job (and, with `unify`, unify); the
    /// next delta starts at once.
    pub fn prepare(&mut self, cache: &mut InodeCache, unify: bool) -> Result<CommitJob> {
        debug_assert!(!self.read_only);
        let mut writes: Writes = Vec::new();
        let mut data: Pages = Vec::new();
        let mut records = std::mem::take(&mut self.records);
        let inodes: Vec<u64> = cache.dirty.get_mut().iter().copied().collect();
        // Blocks a snapshot holds that the delta freed join the dead list
        // before reclaim looks at it (a snapshot deleted in this delta may
        // hold them alone).
        self.bury(&mut records)?;
        if self.snaps.reclaiming() {
            let dev = self.dev.clone();
            self.snaps.reclaim(dev.as_ref(), &mut self.alloc, &mut records)?;
            self.alloc.held_upto = self.snaps.held_upto();
        }
        self.allocate_data(cache, &mut data)?;
        self.redirect_files(cache, unify, &mut writes, &mut records)?;
        // A unify left no tree unwritten (the pending set missed none).
        debug_assert!(
            !unify || cache.iter_mut().all(|n| !n.tree.needs_unify()),
            "a unify left a file tree with unwritten branches"
        );
        self.store_inodes(cache)?;
        // O1, asserted: an image with link count 0 has its `Orphan`.
        let relogged = unify.then_some(&self.orphans);
        let checks = self
            .durable_orphans
            .check_delta(self.delta, cache, &records, relogged);
        self.redirect_itable(&mut writes, &mut records)?;
        let single_flush = !unify && data.len() + writes.len() <= SINGLE_FLUSH_BLOCKS;
        if single_flush {
            records.extend(block_sums(self.bs, &writes, &data));
        }
        let fresh_log = unify && !self.orphans.is_empty();
        let (last, unified, unencoded) = if unify {
            let sb = self.unify_images(&mut writes)?;
            ((sb.home(), sb.encode()), Some(sb), None)
        } else {
            ((0, Vec::new()), None, Some(self.log_records(records)?))
        };
        let job = CommitJob {
            dev: self.dev.clone(),
            epoch: self.write_epoch.clone(),
            bs: self.bs,
            delta: self.delta,
            data_bytes: (data.len() * self.bs) as u64,
            data,
            writes,
            unencoded,
            log_body: Vec::new(),
            last,
            unified,
            fsync: false,
            single_flush,
            fresh_log,
            inodes,
            flushed: false,
            handed_on: false,
            layout: None,
            chain_crc: None,
            checks,
        };
        cache.dirty.get_mut().clear();
        self.delta += 1;
        Ok(job)
    }

    /// An fsync commit: `records` (inode images, inline data, directory
    /// entries) in log blocks of the chain, flagged FSYNC. The open delta
    /// goes on; its full commit will hold the same changes again.
    pub fn prepare_fsync(&mut self, records: Vec<Record>) -> Result<CommitJob> {
        let data_bytes = records
            .iter()
            .map(|r| match r {
                Record::DataInline { data, .. } => data.len() as u64,
                _ => 0,
            })
            .sum();
        // O1, asserted: an image with link count 0 has its `Orphan`.
        self.durable_orphans
            .check_fsync(self.delta, &records, self.dev.as_ref());
        let layout = self
            .log
            .lay_out(&mut self.alloc, records, self.delta, true, self.bs)?;
        Ok(CommitJob {
            dev: self.dev.clone(),
            epoch: self.write_epoch.clone(),
            bs: self.bs,
            delta: self.delta,
            data_bytes,
            data: Vec::new(),
            writes: Vec::new(),
            unencoded: None,
            log_body: Vec::new(),
            last: (0, Vec::new()),
            unified: None,
            fsync: true,
            single_flush: false,
            fresh_log: false,
            inodes: Vec::new(),
            flushed: false,
            handed_on: false,
            layout: Some(layout),
            chain_crc: None,
            checks: JobChecks::default(),
        })
    }

    /// An fsync commit's log blocks are encoded (`job.chain_crc`): the log's
    /// tail names its last block's checksum again.
    pub fn chain_encoded(&mut self, job: &CommitJob) {
        debug_assert!(job.fsync, "only fsync commits encode their log on their own");
        if let Some(crc) = job.chain_crc {
            self.log.chain_encoded(crc);
        }
    }

    /// Encode a delta commit's log blocks at the log's tail (after any
    /// fsync commit written since it was prepared).
    pub fn encode_log(&mut self, job: &mut CommitJob) -> Result<()> {
        let Some(records) = job.unencoded.take() else {
            return Ok(());
        };
        job.checks.log_records(&records);
        let images = self
            .log
            .write_delta(&mut self.alloc, records, job.delta, false, self.bs)?;
        job.log_body = images.body;
        job.last = images.commit;
        Ok(())
    }

    /// The job's I/O completed: the delta is durable. Release the pins of
    /// its frees (A2: in debug builds the allocator checks that the job's
    /// final flush returned and that the pinned frees were taken by its
    /// delta or an earlier one), discard what came free for good (online
    /// discard) and install its superblock.
    pub fn finish(&mut self, job: &CommitJob) {
        if job.fsync {
            self.stats.fsyncs += 1;
            self.stats.log_blocks = self.log.since_unify.len() as u64;
            return;
        }
        // Its frees go back to the allocator once no read in the device
        // may have mapped them (`readers.rs`).
        let readers = &self.readers;
        self.alloc
            .unpin_committed(job.flushed.then_some(job.delta), readers.close(), |e| {
                readers.drained(e)
            });
        self.discard_released();
        self.durable_orphans.durable(&job.checks);
        if let Some(sb) = &job.unified {
            self.sb = sb.clone();
            self.stats.unifies += 1;
        }
        self.stats.deltas += 1;
        self.stats.log_blocks = self.log.since_unify.len() as u64;
    }

    /// Step 1: allocate each run of dirty pages contiguously near the file's
    /// goal, queue its pages (shared, not copied), and map it in the file's
    /// extent tree.
    fn allocate_data(&mut self, cache: &mut InodeCache, data: &mut Pages) -> Result<()> {
        let dev = self.dev.clone();
        self.alloc.age_rooms();
        let dirty: Vec<crate::types::Ino> = cache.dirty.get_mut().iter().copied().collect();
        let mut writing = Vec::new();
        for ino in &dirty {
            if let Some(i) = cache.get_mut(*ino) {
                if i.goal != 0 && !i.pages.all_written() {
                    writing.push(i.goal);
                }
            }
        }
        self.alloc.streams_writing(writing);
        for ino in &dirty {
            let Some(inode) = cache.get_mut(*ino) else {
                continue;
            };
            let (pages, taken) = inode.pages.start_writeback_summed();
            // A file (not a directory, whose blocks are rewritten entry by
            // entry) written in an earlier delta of this mount: a stream
            // if written at its end again.
            let file = !inode.is_dir();
            let streams = file && inode.goal != 0;
            // On a volume with data checksums each block's CRC32C goes in
            // the extent that maps it, in the same delta as the data: the
            // one the write took while the bytes were hot, else computed.
            let summed = self.sb.data_sums;
            if summed {
                self.stats.sums_computed += taken.iter().filter(|t| t.is_none()).count() as u64;
            }
            let sums_of = |from: usize, n: u64| -> Vec<u32> {
                if !summed {
                    return Vec::new();
                }
                let range = from..from + n as usize;
                pages[range.clone()]
                    .iter()
                    .zip(&taken[range])
                    .map(|((_, p), t)| {
                        debug_assert!(
                            t.is_none_or(|t| t == extent::block_sum(p)),
                            "a page's taken sum is stale"
                        );
                        t.unwrap_or_else(|| extent::block_sum(p))
                    })
                    .collect()
            };
            let mut i = 0;
            while i < pages.len() {
                // A run of consecutive logical blocks.
                let mut j = i + 1;
                while j < pages.len() && pages[j].0 == pages[j - 1].0 + 1 {
                    j += 1;
                }
                while i < j {
                    let lblock = pages[i].0;
                    // Preallocated blocks no snapshot holds are filled in
                    // place: they never held data that a durable image
                    // reads (FORMAT.md 7.2).
                    let held = self.alloc.held_upto;
                    let want = match extent_range::run_at(
                        &mut inode.tree,
                        dev.as_ref(),
                        lblock,
                        (j - i) as u64,
                        held,
                    )? {
                        Run::Unwritten { pblock, count } => {
                            for (k, (_, p)) in pages[i..i + count as usize].iter().enumerate() {
                                data.push((pblock + k as u64, p.clone()));
                            }
                            let sums = sums_of(i, count);
                            extent_range::mark_written(&mut inode.tree, dev.as_ref(), lblock, count, sums)?;
                            inode.goal = pblock + count;
                            i += count as usize;
                            continue;
                        }
                        Run::Other { count } => count,
                    };
                    // A file's data follows its last extent (this mount's,
                    // else the block after its logical predecessor's); a
                    // new file's goes to the first room from where its
                    // directory's data begins (holes its deleted files
                    // left first).
                    let parent = inode.attrs.parent;
                    let after = match inode.goal {
                        0 if file => extent_range::after_predecessor(&mut inode.tree, dev.as_ref(), lblock)?,
                        _ => None,
                    };
                    let goal = if inode.goal != 0 {
                        inode.goal
                    } else if let Some(after) = after {
                        after
                    } else {
                        self.dir_goals.get(&parent).copied().unwrap_or(self.data_cursor)
                    };
                    // Data keeps out of the streams' rooms but its own.
                    let own = (inode.goal != 0).then_some(inode.goal);
                    let (start, n) = self.alloc.alloc_outside_rooms(goal, want, true, own)?;
                    // Written on after data an earlier mount wrote.
                    let goes_on = after.is_some();
                    for (k, (_, p)) in pages[i..i + n as usize].iter().enumerate() {
                        data.push((start + k as u64, p.clone()));
                    }
                    let birth = self.alloc.generation;
                    let mut e = Extent::written(lblock, start, n, birth);
                    e.sums = sums_of(i, n);
                    let freed = extent::map_extent(&mut inode.tree, dev.as_ref(), &e)?;
                    let freed_blocks: u64 = freed.iter().map(|f| f.1).sum();
                    for (s, c, b) in freed {
                        self.alloc.free_born(s, c, b);
                    }
                    inode.attrs.blocks = inode.attrs.blocks + n - freed_blocks;
                    inode.goal = start + n;
                    self.data_cursor = start + n;
                    // A stream (a file written at its end in this delta
                    // and in an earlier one, or going on from its data
                    // of an earlier mount) keeps the room after it for its
                    // next delta's data.
                    if (streams || goes_on) && (lblock + n) * self.bs as u64 >= inode.attrs.size {
                        self.alloc.keep_room(start + n);
                    }
                    if self.dir_goals.len() >= super::DIR_GOALS {
                        self.dir_goals.clear();
                    }
                    self.dir_goals.entry(parent).or_insert(start);
                    i += n as usize;
                }
            }
        }
        Ok(())
    }

    /// Step 2: give every dirty leaf of a file tree a new address and encode
    /// it into `writes`, with a `LeafMap` record (and, when unifying, do the
    /// same for their changed branches, updating each inode's unified root).
    fn redirect_files(
        &mut self,
        cache: &mut InodeCache,
        unify: bool,
        writes: &mut Writes,
        records: &mut Vec<Record>,
    ) -> Result<()> {
        let bs = self.bs;
        // A unify writes the trees changed since the last one: those of
        // this delta's dirty inodes and those earlier deltas left pending.
        let inos: Vec<u64> = if unify {
            let mut v: Vec<u64> = cache.dirty.get_mut().iter().copied().collect();
            v.extend(std::mem::take(&mut cache.unify_pending));
            v.sort_unstable();
            v.dedup();
            v
        } else {
            cache.dirty.get_mut().iter().copied().collect()
        };
        let mut restored = Vec::new();
        let mut grown = Vec::new();
        for ino in inos {
            let Some(inode) = cache.get_mut(ino) else {
                continue;
            };
            // A small file's extents go in its inode record (which the
            // delta writes anyway) instead of a leaf block of their own.
            let inline = if self.sb.inline_maps {
                inline_map(inode, bs)?
            } else {
                None
            };
            let held = inline.is_some();
            let extents = inline.unwrap_or_default();
            let changed = inode.attrs.inline != extents;
            inode.attrs.inline = extents;
            // Held: its leaf stays clean in memory; not held (any more):
            // a leaf never written is written below.
            inode.tree.hold_inline(held);
            if changed {
                // Its record is written anew (it is dirty already, as only
                // a change to its tree changes the map; this makes sure).
                restored.push(ino);
            }
            if held {
                continue;
            }
            let is_dir = inode.is_dir();
            let tree = &mut inode.tree;
            for sep in tree.unmaps.drain(..) {
                records.push(Record::LeafUnmap { tree: ino, sep });
            }
            let mut maps = Vec::new();
            let birth = self.alloc.generation;
            let alloc = &mut self.alloc;
            // Leaves follow the data, unless defrag keeps them out of the
            // run it fills (`Inode::leaf_goal`).
            let goal = if inode.leaf_goal != 0 {
                inode.leaf_goal
            } else {
                inode.goal
            };
            let mut next_goal = goal;
            tree.redirect_leaves(
                bs,
                birth,
                &mut || {
                    let b = alloc.alloc_one(next_goal)?;
                    next_goal = b + 1;
                    Ok(b)
                },
                writes,
                &mut maps,
            )?;
            if !maps.is_empty() && is_dir {
                // Clean leaves in memory once durable: a directory's bound
                // on them counts this one at the next eviction step.
                grown.push(ino);
            }
            for (sep, addr) in maps {
                records.push(Record::LeafMap { tree: ino, sep, addr });
            }
            for (b, born) in tree.freed.drain(..) {
                self.alloc.free_born(b, 1, born);
            }
            if unify {
                let mut freed = Vec::new();
                let alloc = &mut self.alloc;
                let root =
                    tree.redirect_branches(bs, birth, &mut || alloc.alloc_one(goal), writes, &mut freed)?;
                for (b, born) in freed {
                    self.alloc.free_born(b, 1, born);
                }
                if inode.attrs.root != root {
                    inode.attrs.root = root;
                    cache.dirty.get_mut().insert(ino);
                }
            } else if tree.needs_unify() {
                cache.unify_pending.insert(ino);
            }
        }
        cache.dirty.get_mut().extend(restored);
        for ino in grown {
            cache.note_grown(ino);
        }
        Ok(())
    }

    /// Step 3: encode every dirty inode into the inode table.
    fn store_inodes(&mut self, cache: &mut InodeCache) -> Result<()> {
        let dev = self.dev.clone();
        let dirty: Vec<crate::types::Ino> = cache.dirty.get_mut().iter().copied().collect();
        for ino in &dirty {
            if let Some(inode) = cache.get_mut(*ino) {
                self.itable
                    .get_mut()
                    .insert(dev.as_ref(), *ino, inode.attrs.encode())?;
            }
        }
        Ok(())
    }

    /// Step 4: give dirty inode-table leaves new addresses and encode them,
    /// with their `LeafMap` records.
    fn redirect_itable(&mut self, writes: &mut Writes, records: &mut Vec<Record>) -> Result<()> {
        for sep in self.itable.get_mut().unmaps.drain(..) {
            records.push(Record::LeafUnmap { tree: 0, sep });
        }
        let mut maps = Vec::new();
        let birth = self.alloc.generation;
        let alloc = &mut self.alloc;
        let mut goal = 2;
        self.itable.get_mut().redirect_leaves(
            self.bs,
            birth,
            &mut || {
                let b = alloc.alloc_one(goal)?;
                goal = b + 1;
                Ok(b)
            },
            writes,
            &mut maps,
        )?;
        for (sep, addr) in maps {
            records.push(Record::LeafMap { tree: 0, sep, addr });
        }
        for (b, born) in self.itable.get_mut().freed.drain(..) {
            self.alloc.free_born(b, 1, born);
        }
        Ok(())
    }

    /// Step 5: allocations and frees become records, the last of the
    /// delta's log ([`Backend::encode_log`] encodes them).
    fn log_records(&mut self, mut records: Vec<Record>) -> Result<Vec<Record>> {
        self.bury(&mut records)?;
        let (allocs, frees) = self.alloc.take_delta(self.delta);
        records.extend(allocs.iter().map(|&(s, c)| Record::Balloc {
            start: s,
            count: c as u32,
        }));
        records.extend(frees.iter().map(|&(s, c)| Record::Bfree {
            start: s,
            count: c as u32,
        }));
        Ok(records)
    }

    /// Unify after steps 1-4: branches and bitmap blocks join the writes;
    /// returns the superblock that names them and the new log head (U2,
    /// asserted here; U1 where the superblock goes out).
    fn unify_images(&mut self, writes: &mut Writes) -> Result<Superblock> {
        let bs = self.bs;
        // The inode table's changed branches.
        let mut freed = Vec::new();
        let birth = self.alloc.generation;
        let alloc = &mut self.alloc;
        self.sb.itable = self.itable.get_mut().redirect_branches(
            bs,
            birth,
            &mut || alloc.alloc_one(2),
            writes,
            &mut freed,
        )?;
        for (b, born) in freed {
            self.alloc.free_born(b, 1, born);
        }
        // The old log is no longer needed once the superblock is durable; its
        // reserved next block becomes the new head (or, with orphans, a
        // fresh block does).
        for b in std::mem::take(&mut self.log.since_unify) {
            self.alloc.free_range(b, 1);
        }
        // The dead list takes this unify's deaths (the table is written in
        // full below: no records), then the snapshots asked for.
        self.bury(&mut Vec::new())?;
        self.take_snapshots()?;
        let (old, known) = (self.log.tail, self.log.order.known());
        let fresh = self.fresh_log_head();
        let head = self.restart_log(writes)?;
        // U2, asserted: the old chain's next block, or a fresh one written here.
        new_log_head(old, known, head, fresh, writes);
        // A table with shared runs (replayed ones too) marks the volume.
        self.sb.shared_extents |= self.snaps.shared_runs() > 0;
        self.sb.table_sums |= self.snaps.sum_chunks() > 0;
        if self.snaps.tree.needs_unify() || self.sb.has_snapshots() || self.alloc.generation != 0 {
            let dev = self.dev.clone();
            self.sb.snapshots = self.snaps.write(dev.as_ref(), &mut self.alloc, bs, writes)?;
            self.sb.generation = u64::from(self.alloc.generation);
        }
        let relocated = self.relocate_bitmap(writes)?;
        #[cfg(debug_assertions)]
        {
            let dev = self.dev.clone();
            let past = extent::all(&mut self.bitmap, dev.as_ref())?
                .into_iter()
                .find(|e| e.end() > self.sb.bitmap_blocks);
            debug_assert!(
                past.is_none(),
                "a unify leaves the bitmap file mapping {past:?}, past its {} blocks",
                self.sb.bitmap_blocks
            );
        }
        for (index, addr) in relocated.iter().filter_map(|(i, a)| Some((i, (*a)?))) {
            writes.push((
                addr,
                bitmap::encode(addr, *index, &self.alloc.bits(*index, bs), bs),
            ));
        }
        self.alloc.dirty.clear();
        let _ = self.alloc.take_delta(self.delta);
        let mut sb = self.sb.clone();
        sb.seq += 1;
        (sb.log_head, sb.log_seq, sb.log_prev_crc) = (head.next, head.seq, head.prev_crc);
        sb.next_delta = self.delta + 1;
        sb.unifies += 1;
        Ok(sb)
    }

    /// Start the log the unify's superblock names; returns its head, the
    /// sequence number and the `prev_crc` the head carries. Without orphans
    /// the log simply goes on: the head is the old chain's reserved next
    /// block, still empty, and carries the checksum of the block before it,
    /// so an fsync commit written there while the unify writes its data
    /// (before its superblock) extends the old chain and starts the new one
    /// alike. With orphans it is a fresh
    /// block (free in the old image, so a crash before the superblock lands
    /// cannot make it extend the old chain; the old reserved block is freed)
    /// and holds a commit of the next delta, flagged FSYNC because that
    /// delta stays open, with one `Orphan` record per orphan in ascending
    /// order. It goes out with the unify's other writes, before the flush
    /// that precedes the superblock.
    /// A fresh block also when the old chain's next block lies past the
    /// allocator's limit (a shrink moving the log out of the tail).
    fn restart_log(&mut self, writes: &mut Writes) -> Result<Tail> {
        let old = self.log.tail;
        if !self.fresh_log_head() {
            return Ok(old);
        }
        let head = self.alloc.alloc_one(old.next)?;
        self.alloc.free_range(old.next, 1);
        self.log.tail = Tail {
            next: head,
            seq: old.seq,
            prev_crc: 0,
        };
        let records: Vec<Record> = self.orphans.iter().map(|&ino| Record::Orphan { ino }).collect();
        let images = self
            .log
            .write_delta(&mut self.alloc, records, self.delta + 1, true, self.bs)?;
        writes.extend(images.body);
        writes.push(images.commit);
        Ok(Tail {
            next: head,
            seq: old.seq,
            prev_crc: 0,
        })
    }

    /// Whether the unify starts the log in a fresh block ([`Backend::restart_log`]).
    fn fresh_log_head(&self) -> bool {
        !self.orphans.is_empty() || self.log.tail.next >= self.alloc.limit()
    }

    /// Give every changed bitmap block a new address, updating the bitmap
    /// file's extent tree, until allocation stops changing further bitmap
    /// blocks. On a sparse bitmap a changed block whose bits are all clear
    /// becomes a hole instead (`None`), and is written after all if the
    /// relocation itself allocates in its group; so each block changes at
    /// most twice, and this ends.
    fn relocate_bitmap(&mut self, writes: &mut Writes) -> Result<BTreeMap<u64, Option<u64>>> {
        let dev = self.dev.clone();
        let bs = self.bs;
        let sparse = self.sb.sparse_bitmap;
        let mut relocated: BTreeMap<u64, Option<u64>> = BTreeMap::new();
        loop {
            let todo: Vec<u64> = self
                .alloc
                .dirty
                .iter()
                .filter(|i| match relocated.get(i) {
                    None => true,
                    Some(None) => !self.alloc.is_clear(**i),
                    Some(Some(_)) => false,
                })
                .copied()
                .collect();
            if todo.is_empty() && !self.bitmap.needs_unify() {
                break;
            }
            for index in todo {
                let old = extent::lookup(&mut self.bitmap, dev.as_ref(), index)?;
                if sparse && self.alloc.is_clear(index) {
                    if old.is_some() {
                        for (s, c, _) in extent::punch(&mut self.bitmap, dev.as_ref(), index, index + 1)? {
                            self.alloc.free_range(s, c);
                        }
                    }
                    relocated.insert(index, None);
                    continue;
                }
                let goal = old.map_or(2, |e| e.pblock);
                let addr = self.alloc.alloc_one(goal)?;
                for (s, c, _) in extent::map(&mut self.bitmap, dev.as_ref(), index, addr, 1, 0)? {
                    self.alloc.free_range(s, c);
                }
                relocated.insert(index, Some(addr));
            }
            let mut maps = Vec::new();
            let alloc = &mut self.alloc;
            self.bitmap
                .redirect_leaves(bs, 0, &mut || alloc.alloc_one(2), writes, &mut maps)?;
            let mut freed: Vec<FreedNode> = self.bitmap.freed.drain(..).collect();
            self.bitmap.unmaps.clear();
            let alloc = &mut self.alloc;
            self.sb.bitmap =
                self.bitmap
                    .redirect_branches(bs, 0, &mut || alloc.alloc_one(2), writes, &mut freed)?;
            // The bitmap file is in no snapshot: its blocks are freed at once.
            for (b, _) in freed {
                self.alloc.free_range(b, 1);
            }
        }
        debug_assert_eq!(self.bitmap.id, BITMAP_INO);
        Ok(relocated)
    }
}

/// `BlockSum` records for the blocks a single-flush commit writes besides
/// its log: one per block (CRC32C of its image), so a mismatch names the
/// block.
/// The extents of `inode`'s data tree if its inode record can hold them:
/// a file's tree of one leaf never written, of at most
/// [`INLINE_EXTENTS`] extents (none: the record needs no attribute), whose
/// record then still fits a leaf.
fn inline_map(inode: &crate::cache::Inode, bs: usize) -> Result<Option<Vec<extent::Extent>>> {
    use crate::structures::btree::{Tree, TreeKind};
    use crate::structures::inode::{
        inline_cost, inline_sums_cost, FIXED_ATTRS_MAX, INLINE_EXTENTS, INLINE_SUMMED_BLOCKS,
        INLINE_TABLE_SUMS_COST,
    };
    if inode.tree.kind != TreeKind::Extents {
        return Ok(None);
    }
    let Some(entries) = inode.tree.inline_entries(INLINE_EXTENTS) else {
        return Ok(None);
    };
    let mut record = FIXED_ATTRS_MAX + inode.attrs.xattr_bytes() + inline_cost(entries.len());
    if record > Tree::max_value(bs) {
        return Ok(None);
    }
    let bounds = crate::codec::Bounds {
        block_size: bs as u32,
        block_count: u64::MAX,
    };
    let mut out = Vec::with_capacity(entries.len());
    for (k, v) in entries {
        let e = extent::decode(*k, v, 0, &bounds)?;
        // The record's form has no room for the unwritten mark.
        if e.unwritten {
            return Ok(None);
        }
        out.push(e);
    }
    // Checksums (attribute 12) for a few blocks only: a bigger file's
    // map is better in a leaf than in the inode table.
    // Extents whose checksums are in the checksum table (a clone's) cost
    // the record one byte, whatever their length.
    let summed: u64 = out.iter().filter(|e| e.is_summed()).map(|e| e.count).sum();
    let table: u64 = out.iter().filter(|e| e.table_sums).map(|e| e.count).sum();
    let all: u64 = out.iter().map(|e| e.count).sum();
    if (summed != 0 || table != 0) && (summed + table != all || summed > INLINE_SUMMED_BLOCKS) {
        return Ok(None);
    }
    record += inline_sums_cost(summed);
    if table != 0 {
        record += INLINE_TABLE_SUMS_COST;
    }
    if record > Tree::max_value(bs) {
        return Ok(None);
    }
    Ok(Some(out))
}

fn block_sums(bs: usize, writes: &Writes, data: &Pages) -> Vec<Record> {
    let mut out = Vec::new();
    for (addr, image) in images(writes, data) {
        for (i, block) in image.chunks(bs).enumerate() {
            out.push(Record::BlockSum {
                start: addr + i as u64,
                count: 1,
                crc: crc32c::crc32c(block),
            });
        }
    }
    out
}
