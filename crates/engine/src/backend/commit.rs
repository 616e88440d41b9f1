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
//!
//! This file holds the stages and steps 3-5; steps 1 and 2 are in
//! `commit_files.rs`, the unify's own steps in `unify.rs`.

use super::checks::{JobChecks, Last};
use super::logwriter::LogLayout;
use super::writeout::{images, write_all, Pages, WriteEpoch, Writes};
use super::Backend;
use crate::cache::InodeCache;
use crate::device::{Device, Urgent};
use crate::error::Result;
use crate::log::Record;
use crate::structures::superblock::Superblock;
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
    /// What the frontend let go of at freeze (the delta's books), dropped
    /// with the job: after finish, with the volume released.
    kept: Vec<Box<dyn std::any::Any + Send>>,
}

impl CommitJob {
    /// Drop `what` with the job, not now: freeing a delta's books (hundreds
    /// of thousands of entries after a run of unlinks, made by other
    /// threads) takes milliseconds that writers should not wait for.
    pub fn keep_until_dropped(&mut self, what: Box<dyn std::any::Any + Send>) {
        self.kept.push(what);
    }

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
            kept: Vec::new(),
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
            kept: Vec::new(),
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
}

/// `BlockSum` records for the blocks a single-flush commit writes besides
/// its log: one per block (CRC32C of its image), so a mismatch names the
/// block.
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
