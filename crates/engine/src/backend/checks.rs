//! Backend layer: the debug-build checks of the invariants commits and open
//! keep (docs/ARCHITECTURE.md, "Invariants"), each panicking with its id:
//!
//! * L1 and U1 (`JobChecks::before_last`): a delta commit's commit block
//!   goes out only once its data and leaves were flushed or its log sums
//!   them; a unify's superblock only once everything it names was flushed;
//! * L2, the writer's side (`ChainOrder`): no log block is placed before
//!   the checksum of the block before it is known;
//! * U2 (`new_log_head`): a unify's new log head is the old chain's next
//!   block, or a fresh one written with the unify;
//! * O1 (`DurableOrphans`): an inode image with link count 0 rides with its
//!   `Orphan` record, or the durable orphan list holds it already;
//! * R1 (`reads_only`): replay reads through a device that refuses writes.
//!
//! In release builds the types are empty and the checks do nothing. Calls
//! the log layer (records, `Tail`), the inode cache, inode attributes, the
//! device trait and `writeout`'s image list; `commit.rs`, `logwriter.rs`,
//! `mod.rs` and the frontend's open call it.

use super::writeout::{Pages, Writes};
use crate::cache::InodeCache;
use crate::device::Device;
use crate::log::{Record, Tail};
use std::collections::BTreeSet;
#[cfg(debug_assertions)]
use {super::writeout::images, std::sync::Arc};

/// What a commit job did that lets its last block go out (L1, U1), and
/// what it changes in the durable orphan list once it is durable (O1).
#[derive(Default)]
pub(super) struct JobChecks {
    /// Phase 1 wrote the data and leaves and its flush returned.
    #[cfg(debug_assertions)]
    data_flushed: bool,
    /// Blocks the log's `BlockSum` records cover, sorted.
    #[cfg(debug_assertions)]
    summed: Vec<u64>,
    #[cfg(debug_assertions)]
    orphans: OrphanChange,
}

/// How a commit changes the orphan list: a delta's `Orphan` (true) and
/// `Drop` (false) records in order, or a unify's whole re-logged list.
#[cfg(debug_assertions)]
#[derive(Default)]
enum OrphanChange {
    #[default]
    Nothing,
    Records(Vec<(u64, bool)>),
    Whole(BTreeSet<u64>),
}

#[cfg(debug_assertions)]
impl JobChecks {
    /// Phase 1's flush returned.
    pub(super) fn data_flushed(&mut self) {
        self.data_flushed = true;
    }

    /// The records a delta commit's log holds (about to be encoded).
    pub(super) fn log_records(&mut self, records: &[Record]) {
        for r in records {
            if let Record::BlockSum { start, count, .. } = *r {
                self.summed.extend(start..start.saturating_add(u64::from(count)));
            }
        }
        self.summed.sort_unstable();
    }

    /// Before the last block of a commit is written, with `writes` its
    /// blocks still to write besides its log and `data` all its data pages.
    /// L1 for a delta commit: phase 1's flush returned, or its log holds a
    /// `BlockSum` of each of them; for an fsync commit: it writes log
    /// blocks only. U1 for a unify's superblock: phase 1 wrote everything
    /// else and its flush returned.
    pub(super) fn before_last(&self, kind: Last, delta: u64, bs: usize, writes: &Writes, data: &Pages) {
        match kind {
            Last::Superblock => assert!(
                self.data_flushed && writes.is_empty(),
                "U1: the superblock of the unify of delta {delta} written before the blocks it \
                 names were flushed"
            ),
            Last::Fsync => assert!(
                data.is_empty(),
                "L1: fsync commit of delta {delta} writes data blocks outside its log"
            ),
            Last::Commit if self.data_flushed => {}
            Last::Commit => {
                for (addr, image) in images(writes, data) {
                    let n = (image.len() / bs.max(1)) as u64;
                    for b in addr..addr.saturating_add(n) {
                        assert!(
                            self.summed.binary_search(&b).is_ok(),
                            "L1: commit block of delta {delta} written before block {b} was \
                             flushed, and its log holds no checksum of it"
                        );
                    }
                }
            }
        }
    }
}

#[cfg(not(debug_assertions))]
impl JobChecks {
    pub(super) fn data_flushed(&mut self) {}
    pub(super) fn log_records(&mut self, _: &[Record]) {}
    pub(super) fn before_last(&self, _: Last, _: u64, _: usize, _: &Writes, _: &Pages) {}
}

/// The last block a commit writes.
#[derive(Clone, Copy)]
pub(super) enum Last {
    /// A delta commit's commit block.
    Commit,
    /// An fsync commit's commit block.
    Fsync,
    /// A unify's superblock.
    Superblock,
}

impl Last {
    pub(super) fn of(unify: bool, fsync: bool) -> Last {
        match (unify, fsync) {
            (true, _) => Last::Superblock,
            (_, true) => Last::Fsync,
            _ => Last::Commit,
        }
    }
}

/// L2, the log writer's side: a block placed on the chain (its address and
/// sequence number taken) names the checksum of the block before it, known
/// only once that block is encoded. Tracks whether the tail's `prev_crc`
/// awaits blocks laid out but not yet encoded.
#[derive(Default)]
pub(crate) struct ChainOrder {
    /// The tail's sequence number after blocks still awaiting encoding.
    #[cfg(debug_assertions)]
    awaiting: Option<u64>,
}

#[cfg(debug_assertions)]
impl ChainOrder {
    /// Before blocks are laid out at `tail`: its `prev_crc` must be the
    /// checksum of the block placed before it.
    pub(super) fn laying_out(&self, tail: &Tail) {
        assert!(
            self.awaiting.is_none(),
            "L2: log block {} laid out before block {} was encoded: its prev_crc would not be \
             that block's checksum",
            tail.seq,
            tail.seq.wrapping_sub(1)
        );
    }

    /// A block was placed; the tail's sequence number is `seq` now.
    pub(super) fn placed(&mut self, seq: u64) {
        self.awaiting = Some(seq);
    }

    /// The blocks placed last were encoded; the tail is at `seq`.
    pub(super) fn encoded(&mut self, seq: u64) {
        let awaited = self.awaiting.take();
        assert!(
            awaited == Some(seq),
            "L2: the checksum of log block {} recorded, but blocks up to {awaited:?} awaited it",
            seq.wrapping_sub(1)
        );
    }

    /// Whether the tail names the checksum of the block before it.
    pub(super) fn known(&self) -> bool {
        self.awaiting.is_none()
    }
}

#[cfg(not(debug_assertions))]
impl ChainOrder {
    pub(super) fn laying_out(&self, _: &Tail) {}
    pub(super) fn placed(&mut self, _: u64) {}
    pub(super) fn encoded(&mut self, _: u64) {}
    pub(super) fn known(&self) -> bool {
        true
    }
}

/// U2: the log head a unify's superblock names, `head`, against the log's
/// tail before the unify, `old` (`known`: its `prev_crc` is the checksum
/// of the block placed last). Without orphans to re-log (`fresh` false) it
/// is that tail; with them it is a fresh block with the same sequence
/// number and no predecessor, written with the unify (in `writes`).
pub(super) fn new_log_head(old: Tail, known: bool, head: Tail, fresh: bool, writes: &Writes) {
    debug_assert!(
        known,
        "U2: the unify's log head (block {}, seq {}) taken before the block before it was encoded",
        old.next, old.seq
    );
    debug_assert!(
        if fresh {
            head.seq == old.seq
                && head.prev_crc == 0
                && head.next != old.next
                && writes.iter().any(|(addr, _)| *addr == head.next)
        } else {
            head == old
        },
        "U2: the unify's log head {head:?} does not continue the old chain at {old:?} (fresh: {fresh})"
    );
}

/// O1: the orphan list as the durable commits left it (replay's at open,
/// then each finished delta commit's or unify's), against which a commit's
/// inode images with link count 0 are checked.
#[derive(Default)]
pub(crate) struct DurableOrphans {
    #[cfg(debug_assertions)]
    list: BTreeSet<u64>,
}

#[cfg(debug_assertions)]
impl DurableOrphans {
    /// The list replay found.
    pub(super) fn replayed(list: &BTreeSet<u64>) -> DurableOrphans {
        DurableOrphans { list: list.clone() }
    }

    /// A delta was just encoded (with `relogged`: a unify, which re-logs
    /// that list): each dirty inode's image with link count 0 needs its
    /// `Orphan` among the delta's `records` or the durable list to hold it
    /// (a unify: the re-logged list). Returns the job's checks, with what
    /// the commit changes in the list.
    pub(super) fn check_delta(
        &self,
        delta: u64,
        cache: &mut InodeCache,
        records: &[Record],
        relogged: Option<&BTreeSet<u64>>,
    ) -> JobChecks {
        let logged = orphan_records(records);
        let dirty: Vec<u64> = cache.dirty.get_mut().iter().copied().collect();
        for ino in dirty {
            if cache.get_mut(ino).is_none_or(|i| i.attrs.nlink != 0) {
                continue;
            }
            let listed = match relogged {
                Some(list) => list.contains(&ino),
                None => logged.contains(&ino) || self.list.contains(&ino),
            };
            assert!(
                listed,
                "O1: delta {delta} writes inode {ino} with link count 0, not on the orphan list"
            );
        }
        let orphans = match relogged {
            Some(list) => OrphanChange::Whole(list.clone()),
            None => OrphanChange::Records(
                records
                    .iter()
                    .flat_map(|r| match *r {
                        Record::Orphan { ino } => vec![(ino, true)],
                        Record::Drop { .. } | Record::DropRun { .. } => {
                            r.dropped().into_iter().flatten().map(|t| (t, false)).collect()
                        }
                        Record::Named { ino } => vec![(ino, false)],
                        _ => Vec::new(),
                    })
                    .collect(),
            ),
        };
        JobChecks {
            orphans,
            ..JobChecks::default()
        }
    }

    /// An fsync commit's `records`: each inode image with link count 0
    /// needs its `Orphan` record in the same commit, or the durable list
    /// to hold it.
    pub(super) fn check_fsync(&self, delta: u64, records: &[Record], dev: &dyn Device) {
        let bounds = crate::structures::bounds(dev);
        let logged = orphan_records(records);
        for r in records {
            let Record::InodeImage { ino, ref attrs } = *r else {
                continue;
            };
            let Ok(a) = crate::structures::inode::InodeAttrs::decode(attrs, ino, 0, &bounds) else {
                continue;
            };
            assert!(
                a.nlink != 0 || logged.contains(&ino) || self.list.contains(&ino),
                "O1: fsync commit of delta {delta} logs inode {ino} with link count 0 without its \
                 Orphan record"
            );
        }
    }

    /// A delta commit or unify is durable: so is its change to the list.
    pub(super) fn durable(&mut self, job: &JobChecks) {
        match &job.orphans {
            OrphanChange::Nothing => {}
            OrphanChange::Records(changes) => {
                for &(ino, listed) in changes {
                    if listed {
                        self.list.insert(ino);
                    } else {
                        self.list.remove(&ino);
                    }
                }
            }
            OrphanChange::Whole(list) => self.list.clone_from(list),
        }
    }
}

/// The inodes `records` put on the orphan list.
#[cfg(debug_assertions)]
fn orphan_records(records: &[Record]) -> BTreeSet<u64> {
    records
        .iter()
        .filter_map(|r| match *r {
            Record::Orphan { ino } => Some(ino),
            _ => None,
        })
        .collect()
}

#[cfg(not(debug_assertions))]
impl DurableOrphans {
    pub(super) fn replayed(_: &BTreeSet<u64>) -> DurableOrphans {
        DurableOrphans {}
    }
    pub(super) fn check_delta(
        &self,
        _: u64,
        _: &mut InodeCache,
        _: &[Record],
        _: Option<&BTreeSet<u64>>,
    ) -> JobChecks {
        JobChecks::default()
    }
    pub(super) fn check_fsync(&self, _: u64, _: &[Record], _: &dyn Device) {}
    pub(super) fn durable(&mut self, _: &JobChecks) {}
}

/// R1: `dev` behind a device that panics on any write or flush, for
/// replay to read through (debug builds only).
#[cfg(debug_assertions)]
pub(crate) fn reads_only(dev: Arc<dyn Device>) -> Arc<dyn Device> {
    Arc::new(ReadsOnly(dev))
}

#[cfg(debug_assertions)]
struct ReadsOnly(Arc<dyn Device>);

#[cfg(debug_assertions)]
impl Device for ReadsOnly {
    fn block_size(&self) -> u32 {
        self.0.block_size()
    }
    fn block_count(&self) -> u64 {
        self.0.block_count()
    }
    fn read(&self, block: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.0.read(block, buf)
    }
    fn write(&self, block: u64, _: &[u8]) -> std::io::Result<()> {
        panic!("R1: open wrote block {block}");
    }
    fn write_gather(&self, reqs: &[crate::device::Gather]) -> std::io::Result<()> {
        panic!("R1: open wrote {} requests", reqs.len());
    }
    fn flush(&self) -> std::io::Result<()> {
        panic!("R1: open flushed the device");
    }
    fn discard(&self, start: u64, count: u64) -> std::io::Result<()> {
        panic!("R1: open discarded blocks {start}+{count}");
    }
    fn counters(&self) -> crate::device::CounterSnapshot {
        self.0.counters()
    }
    fn name(&self) -> String {
        self.0.name()
    }
}

/// Each check fires when its invariant is broken on the commit path it
/// guards, and not when the path keeps it.
#[cfg(all(test, debug_assertions))]
#[allow(clippy::arithmetic_side_effects, clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::backend::{mkfs, Backend};
    use crate::cache::Inode;
    use crate::device::MemDevice;
    use crate::structures::inode::InodeAttrs;
    use crate::types::FormatOptions;

    fn backend() -> Backend {
        let dev: Arc<dyn Device> = Arc::new(MemDevice::new(1024, 1 << 14));
        mkfs::format(dev.as_ref(), &FormatOptions::default()).unwrap();
        Backend::open(dev, false).unwrap().0
    }

    fn attrs(nlink: u32) -> InodeAttrs {
        InodeAttrs {
            mode: libc::S_IFREG | 0o644,
            nlink,
            ..InodeAttrs::default()
        }
    }

    /// A regular file `ino` with link count `nlink` and `pages` dirty data
    /// pages, dirty in `cache`.
    fn file(be: &Backend, cache: &mut InodeCache, ino: u64, nlink: u32, pages: u64) {
        let mut inode = Inode::new(ino, attrs(nlink));
        inode.attrs.size = pages * be.bs as u64;
        for b in 0..pages {
            inode.pages.page_mut(b, be.delta, || vec![b as u8; be.bs]);
        }
        cache.insert(inode);
        cache.dirty.get_mut().insert(ino);
    }

    #[test]
    fn commits_that_keep_the_invariants_pass() {
        let mut be = backend();
        let mut cache = InodeCache::default();
        // A two-flush delta, a single-flush one, then a unify.
        for (ino, pages, unify) in [(20, 300, false), (21, 10, false), (22, 10, true)] {
            file(&be, &mut cache, ino, 1, pages);
            let mut job = be.prepare(&mut cache, unify).unwrap();
            job.write_data().unwrap();
            be.encode_log(&mut job).unwrap();
            job.write_log().unwrap();
            be.finish(&job);
        }
        // Two fsync commits, the second laid out once the first is encoded.
        for _ in 0..2 {
            let mut job = be.prepare_fsync(vec![Record::Orphan { ino: 20 }]).unwrap();
            job.write().unwrap();
            be.chain_encoded(&job);
        }
    }

    #[test]
    #[should_panic(expected = "L1: commit block")]
    fn commit_block_before_the_data_flush() {
        let mut be = backend();
        let mut cache = InodeCache::default();
        file(&be, &mut cache, 20, 1, 300);
        let mut job = be.prepare(&mut cache, false).unwrap();
        // Phase 1 (`write_data`) skipped: 300 blocks neither flushed nor summed.
        be.encode_log(&mut job).unwrap();
        let _ = job.write_log_blocks();
    }

    #[test]
    #[should_panic(expected = "U1: the superblock")]
    fn superblock_before_the_flush() {
        let mut be = backend();
        let mut cache = InodeCache::default();
        file(&be, &mut cache, 20, 1, 3);
        let mut job = be.prepare(&mut cache, true).unwrap();
        let _ = job.write_log_blocks();
    }

    #[test]
    #[should_panic(expected = "L2: log block")]
    fn log_laid_out_before_its_predecessor_is_encoded() {
        let mut be = backend();
        let _first = be.prepare_fsync(vec![Record::Orphan { ino: 20 }]).unwrap();
        let _ = be.prepare_fsync(vec![Record::Orphan { ino: 21 }]);
    }

    #[test]
    #[should_panic(expected = "U2: the unify's log head")]
    fn unify_head_taken_before_its_predecessor_is_encoded() {
        let mut be = backend();
        let mut cache = InodeCache::default();
        let _fsync = be.prepare_fsync(vec![Record::Orphan { ino: 20 }]).unwrap();
        file(&be, &mut cache, 21, 1, 1);
        let _ = be.prepare(&mut cache, true);
    }

    #[test]
    fn orphans_listed_in_their_delta_or_before_pass() {
        let mut be = backend();
        let mut cache = InodeCache::default();
        file(&be, &mut cache, 20, 0, 1);
        be.orphans.insert(20);
        be.records.push(Record::Orphan { ino: 20 });
        // Finished as if their flush had returned (A2 checks that it did).
        let mut job = be.prepare(&mut cache, false).unwrap();
        job.flushed_by_another();
        be.finish(&job);
        // Listed by the durable delta: a later image needs no record.
        cache.dirty.get_mut().insert(20);
        let mut job = be.prepare(&mut cache, false).unwrap();
        job.flushed_by_another();
        be.finish(&job);
        cache.dirty.get_mut().insert(20);
        let _ = be.prepare(&mut cache, true).unwrap();
    }

    #[test]
    #[should_panic(expected = "O1: delta")]
    fn link_count_zero_without_orphan() {
        let mut be = backend();
        let mut cache = InodeCache::default();
        file(&be, &mut cache, 20, 0, 1);
        let _ = be.prepare(&mut cache, false);
    }

    #[test]
    #[should_panic(expected = "O1: fsync commit")]
    fn fsync_link_count_zero_without_orphan() {
        let mut be = backend();
        let image = Record::InodeImage {
            ino: 20,
            attrs: attrs(0).encode(),
        };
        let _ = be.prepare_fsync(vec![image]);
    }

    #[test]
    #[should_panic(expected = "R1: open wrote")]
    fn replay_device_refuses_writes() {
        let dev: Arc<dyn Device> = Arc::new(MemDevice::new(1024, 64));
        let _ = reads_only(dev).write(2, &[0; 1024]);
    }
}
