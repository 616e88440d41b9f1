//! Backend layer: snapshots — the snapshot table and the dead list, in one
//! btree (owner 3, kind `Snapshots`) that only a unify writes, like the
//! bitmap file: between unifies the log carries its changes (`Dead`,
//! `Reclaim`, `SnapDelete`, `SnapGone`), and the whole table is kept in
//! memory.
//!
//! Births and generations. Every block of a tree (node or data extent)
//! records the generation it was written in (`birth`). A snapshot is taken
//! by a unify: it keeps that unify's inode-table root, gets the current
//! generation as its id, and the generation goes up by one. So snapshot
//! `s` holds exactly the blocks born at or below `s` that were still live
//! when it was taken.
//!
//! The dead list. When the live volume frees a block born at or below the
//! newest snapshot (`Allocator::free_born`), the block stays in use and
//! its extent goes on the dead list with its birth `b` and its death `d`
//! (the generation it died in). Snapshot `s` holds it exactly when
//! `b <= s < d`. A dead extent is freed once no snapshot that still exists
//! lies in `[b, d)`.
//!
//! Deleting snapshot `s` (its name goes at once, `SnapDelete`): with `p`
//! the newest existing snapshot below it and `n` the oldest above it (the
//! live volume when none), the extents only `s` held are those with
//! `p < b <= s` and `s < d <= n`. The index by (death, birth) reaches them
//! directly: for each death in `(s, n]`, one range of births. Reclaim frees
//! at most [`RECLAIM_BATCH`] extents per delta commit (`Reclaim` records),
//! and drops the record once none is left (`SnapGone`). It needs no state
//! of its own, so after a crash it simply starts again.
//!
//! Calls structures (the btree, the superblock's root type), the log's
//! record type, the allocator and base modules.

use super::alloc::Allocator;
use crate::device::Device;
use crate::error::{Errno, Error, Result};
use crate::log::Record;
use crate::structures::btree::node::FreedNode;
use crate::structures::btree::{Tree, TreeKind};
use crate::structures::superblock::Root;
use std::collections::{BTreeMap, BTreeSet};

mod commit;
mod images;
mod load;
pub use images::{image_blocks, merged, subtract, Born};

/// Owner of the snapshot table's nodes (an inode number never used by files).
pub const SNAP_INO: u64 = 3;
/// Keys at or above this (and below [`SUMS_KEY`]) are snapshot records
/// (`RECORD_KEY + id`); below it, dead extents keyed by their first block.
pub const RECORD_KEY: u64 = 1 << 62;
/// Keys at or above this (and below [`SHARED_KEY`]) are the checksum
/// table's chunks (`SUMS_KEY + start`; `alloc/sums.rs`).
pub const SUMS_KEY: u64 = (1 << 62) + (1 << 61);
/// Keys at or above this are the shared-extent table's runs
/// (`SHARED_KEY + start`; `alloc/shared.rs`).
pub const SHARED_KEY: u64 = 1 << 63;
/// Dead extents a delta commit reclaims at most.
pub const RECLAIM_BATCH: usize = 1024;
/// Longest snapshot name.
pub const NAME_MAX: usize = 255;

/// One snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapRecord {
    pub id: u64,
    pub name: Vec<u8>,
    pub created: i64,
    /// The inode table as its unify wrote it.
    pub itable: Root,
    /// Blocks its image references (inode table, file trees, data),
    /// counted when it was taken (`commit.rs::live_blocks`).
    pub referenced: u64,
    /// Deleted; its space is being reclaimed.
    pub deleting: bool,
    /// Received from another volume: (origin volume id, origin snapshot
    /// id) as the stream named it. None: taken here.
    pub received: Option<(u64, u64)>,
}

/// Flag bit: the snapshot is being deleted.
const FLAG_DELETING: u8 = 1;
/// Flag bit: the snapshot was received; its origin follows `referenced`.
const FLAG_RECEIVED: u8 = 2;

impl SnapRecord {
    /// `flags u8 | created i64 | itable root u64 | depth u8 | referenced u64
    /// | [origin volume u64 | origin id u64, with FLAG_RECEIVED] | name`.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(42 + self.name.len());
        let flags = if self.deleting { FLAG_DELETING } else { 0 }
            | if self.received.is_some() { FLAG_RECEIVED } else { 0 };
        v.push(flags);
        v.extend_from_slice(&self.created.to_le_bytes());
        v.extend_from_slice(&self.itable.addr.to_le_bytes());
        v.push(self.itable.depth);
        v.extend_from_slice(&self.referenced.to_le_bytes());
        if let Some((volume, id)) = self.received {
            v.extend_from_slice(&volume.to_le_bytes());
            v.extend_from_slice(&id.to_le_bytes());
        }
        v.extend_from_slice(&self.name);
        v
    }

    /// Its identity across volumes, on volume `volume_id`.
    pub fn origin(&self, volume_id: u64) -> (u64, u64) {
        self.received.unwrap_or((volume_id, self.id))
    }

    pub fn decode(id: u64, v: &[u8], leaf: u64, block_count: u64) -> Result<SnapRecord> {
        let bad = |what: &str| Error::corrupt(leaf, format!("snapshot table: snapshot {id}: {what}"));
        let mut r = crate::codec::Reader::new(v, leaf);
        let flags = r.u8("snapshot flags")?;
        let created = r.i64("snapshot time")?;
        let addr = r.u64("snapshot root")?;
        let depth = r.u8("snapshot depth")?;
        let referenced = r.u64("snapshot referenced blocks")?;
        if flags & !(FLAG_DELETING | FLAG_RECEIVED) != 0 {
            return Err(bad(&format!("flags {flags:#x}")));
        }
        let received = if flags & FLAG_RECEIVED != 0 {
            Some((r.u64("snapshot origin volume")?, r.u64("snapshot origin id")?))
        } else {
            None
        };
        let name = r.bytes(r.remaining(), "snapshot name")?.to_vec();
        if addr < 2 || addr >= block_count || depth > crate::codec::MAX_DEPTH {
            return Err(bad(&format!("root {addr} depth {depth} outside the volume")));
        }
        check_name(&name).map_err(|_| bad("bad name"))?;
        Ok(SnapRecord {
            id,
            name,
            created,
            itable: Root { addr, depth },
            referenced,
            deleting: flags & FLAG_DELETING != 0,
            received,
        })
    }
}

/// A snapshot name: 1..=255 bytes, no '/' and no NUL.
pub fn check_name(name: &[u8]) -> Result<()> {
    if name.is_empty() || name.len() > NAME_MAX || name.iter().any(|&c| c == b'/' || c == 0) {
        return Err(Error::Posix(Errno::EINVAL));
    }
    Ok(())
}

/// A dead extent: `count` blocks at its key, born in `birth`, died in `death`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeadExtent {
    pub count: u64,
    pub birth: u32,
    pub death: u32,
}

impl DeadExtent {
    /// Three LEB128 varints: `count`, `birth`, `death − birth` — 3 to 5
    /// bytes for the usual extent (short, generations below 2^21), so an
    /// entry with its key and length stays within 16 bytes.
    fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(6);
        for x in [
            self.count.min(u64::from(u32::MAX)),
            u64::from(self.birth),
            u64::from(self.death.saturating_sub(self.birth)),
        ] {
            put_varint(&mut v, x);
        }
        v
    }

    fn decode(start: u64, v: &[u8], leaf: u64, block_count: u64) -> Result<DeadExtent> {
        let bad = || {
            Error::corrupt(
                leaf,
                format!("snapshot table: dead extent at block {start} does not decode"),
            )
        };
        let mut at = 0;
        let mut next = || {
            get_varint(v, &mut at)
                .filter(|&x| x <= u64::from(u32::MAX))
                .ok_or_else(bad)
        };
        let (count, birth, span) = (next()?, next()?, next()?);
        let death = birth.checked_add(span).filter(|&d| d <= u64::from(u32::MAX));
        let Some(death) = death.filter(|_| at == v.len()) else {
            return Err(bad());
        };
        let (birth, death) = (birth as u32, death as u32);
        if count == 0
            || start < 2
            || start.checked_add(count).is_none_or(|e| e > block_count)
            || birth >= death
        {
            return Err(Error::corrupt(
                leaf,
                format!("snapshot table: dead extent {start}+{count} born {birth} died {death} is invalid"),
            ));
        }
        Ok(DeadExtent { count, birth, death })
    }
}

/// A shared-extent run's value: varints `count` (1..2^32) and `refs` (≥ 2).
pub fn encode_shared(count: u64, refs: u32) -> Vec<u8> {
    let mut v = Vec::with_capacity(8);
    put_varint(&mut v, count);
    put_varint(&mut v, u64::from(refs));
    v
}

/// Decode the run at `start` (key `SHARED_KEY + start`) of leaf `leaf`:
/// (count, refs), checked to lie inside a volume of `block_count` blocks.
pub fn decode_shared(start: u64, v: &[u8], leaf: u64, block_count: u64) -> Result<(u64, u32)> {
    let bad = || {
        Error::corrupt(
            leaf,
            format!("snapshot table: shared run at block {start}: bad value"),
        )
    };
    let mut at = 0;
    let count = get_varint(v, &mut at).ok_or_else(bad)?;
    let refs = get_varint(v, &mut at).ok_or_else(bad)?;
    if at != v.len()
        || count == 0
        || count > u64::from(u32::MAX)
        || !(2..=u64::from(u32::MAX)).contains(&refs)
    {
        return Err(bad());
    }
    if start < 2 || start.saturating_add(count) > block_count {
        return Err(Error::corrupt(
            leaf,
            format!("snapshot table: shared run {start}+{count} outside the volume"),
        ));
    }
    Ok((count, refs as u32))
}

/// Append `x` as an LEB128 varint (7 bits a byte, low first).
fn put_varint(v: &mut Vec<u8>, mut x: u64) {
    while x >= 0x80 {
        v.push((x as u8 & 0x7f) | 0x80);
        x >>= 7;
    }
    v.push(x as u8);
}

/// The LEB128 varint at `*at` of `v` (at most 10 bytes), moving `at` past it.
fn get_varint(v: &[u8], at: &mut usize) -> Option<u64> {
    let mut x = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *v.get(*at)?;
        *at += 1;
        x |= u64::from(b & 0x7f).checked_shl(shift)?;
        if b & 0x80 == 0 {
            return Some(x);
        }
    }
    None
}

/// A snapshot asked for, taken by the next unify.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    pub name: Vec<u8>,
    /// Seconds since the epoch.
    pub created: i64,
    /// Received: the origin the stream named (see [`SnapRecord::received`]).
    pub received: Option<(u64, u64)>,
}

/// The snapshot table and the dead list, in memory and in their tree.
pub struct Snapshots {
    pub tree: Tree,
    pub records: BTreeMap<u64, SnapRecord>,
    pub dead: BTreeMap<u64, DeadExtent>,
    /// The dead list by (death, birth, start).
    by_death: BTreeSet<(u32, u32, u64)>,
    /// Blocks on the dead list.
    pub dead_blocks: u64,
    /// Snapshots to take at the next unify.
    pub pending: Vec<Pending>,
    /// Names of the snapshots not being deleted, to their ids.
    names: std::collections::HashMap<Vec<u8>, u64>,
    /// Snapshots deleted whose records remain (reclaim's work).
    deleting: usize,
    /// Shared-extent runs in the tree; those read by `load`, until the
    /// allocator takes them (`take_shared`).
    shared_runs: usize,
    loaded_shared: Vec<(u64, u64, u32)>,
    /// Checksum-table chunks in the tree; those read by `load`, until the
    /// allocator takes them (`take_sums`).
    sum_chunks: usize,
    loaded_sums: Vec<(u64, crate::backend::alloc::SumChunk)>,
    /// What a repair's load passed over or mended (`load.rs`): the block
    /// and what was wrong, with what the repair does about it.
    pub passed_over: Vec<(u64, String)>,
}

impl Snapshots {
    fn index(&mut self, start: u64, d: DeadExtent) {
        self.by_death.insert((d.death, d.birth, start));
        self.dead_blocks += d.count;
        self.dead.insert(start, d);
    }

    /// The live snapshot (not being deleted) named `name`.
    pub fn find(&self, name: &[u8]) -> Option<&SnapRecord> {
        self.names.get(name).and_then(|id| self.records.get(id))
    }

    /// The newest snapshot not being deleted: the allocator keeps what it holds.
    pub fn held_upto(&self) -> Option<u32> {
        self.records
            .values()
            .rev()
            .find(|r| !r.deleting)
            .map(|r| r.id as u32)
    }

    /// Whether reclaim has work (a deleted snapshot whose record remains).
    pub fn reclaiming(&self) -> bool {
        self.deleting > 0
    }

    /// Put dead extents on the list (death `death`) and in the tree; with
    /// `records`, log them too.
    pub fn add_dead(
        &mut self,
        dev: &dyn Device,
        dying: Vec<(u64, u64, u32)>,
        death: u32,
        records: Option<&mut Vec<Record>>,
    ) -> Result<()> {
        let mut log = Vec::new();
        for (start, count, birth) in dying {
            // A range longer than an entry holds is split.
            let (mut at, mut left) = (start, count);
            while left > 0 {
                let c = left.min(u64::from(u32::MAX));
                let d = DeadExtent {
                    count: c,
                    birth,
                    death,
                };
                if self.dead.contains_key(&at) {
                    return Err(Error::corrupt(at, "block freed twice: already on the dead list"));
                }
                self.tree.insert(dev, at, d.encode())?;
                self.index(at, d);
                log.push(Record::Dead {
                    start: at,
                    count: c as u32,
                    birth,
                });
                at += c;
                left -= c;
            }
        }
        if let Some(r) = records {
            r.extend(log);
        }
        Ok(())
    }

    /// The start of a dead extent that shares a block with
    /// `start..start+count`, if one does.
    pub fn dead_overlap(&self, start: u64, count: u64) -> Option<u64> {
        let end = start.saturating_add(count);
        let before = self.dead.range(..=start).next_back();
        let before = before.filter(|(s, d)| s.saturating_add(d.count) > start);
        let after = self.dead.range(start..end).next();
        before.or(after).map(|(s, _)| *s)
    }

    /// Take the dead extent at `start` off the list (replay of `Reclaim`,
    /// or reclaim itself); returns its length.
    pub fn remove_dead(&mut self, dev: &dyn Device, start: u64) -> Result<Option<u64>> {
        let Some(d) = self.dead.remove(&start) else {
            return Ok(None);
        };
        self.by_death.remove(&(d.death, d.birth, start));
        self.dead_blocks -= d.count;
        self.tree.remove(dev, start)?;
        Ok(Some(d.count))
    }

    /// Record a snapshot (taken by the unify being prepared).
    pub fn insert_record(&mut self, dev: &dyn Device, rec: SnapRecord) -> Result<()> {
        self.tree.insert(dev, RECORD_KEY + rec.id, rec.encode())?;
        if rec.deleting {
            self.deleting += 1;
        } else {
            self.names.insert(rec.name.clone(), rec.id);
        }
        if let Some(old) = self.records.insert(rec.id, rec) {
            self.deleting -= usize::from(old.deleting);
        }
        Ok(())
    }

    /// Mark snapshot `id` deleted (its name goes).
    pub fn mark_deleting(&mut self, dev: &dyn Device, id: u64) -> Result<bool> {
        let Some(rec) = self.records.get_mut(&id) else {
            return Ok(false);
        };
        self.deleting += usize::from(!rec.deleting);
        rec.deleting = true;
        if self.names.get(&rec.name) == Some(&id) {
            self.names.remove(&rec.name);
        }
        let v = rec.encode();
        self.tree.insert(dev, RECORD_KEY + id, v)?;
        Ok(true)
    }

    /// Drop snapshot `id`'s record: its space is all back.
    pub fn remove_record(&mut self, dev: &dyn Device, id: u64) -> Result<bool> {
        let gone = self.records.remove(&id);
        if let Some(r) = &gone {
            self.deleting -= usize::from(r.deleting);
            if self.names.get(&r.name) == Some(&id) {
                self.names.remove(&r.name);
            }
        }
        let had = gone.is_some();
        if had {
            self.tree.remove(dev, RECORD_KEY + id)?;
        }
        Ok(had)
    }

    /// The neighbours of snapshot `id` among those not being deleted:
    /// the newest below (as a lower bound on births: blocks born at or
    /// below it are still held) and the oldest above (deaths up to it).
    fn neighbours(&self, id: u64) -> (Option<u32>, u32) {
        let live = |r: &&SnapRecord| !r.deleting;
        let below = self
            .records
            .range(..id)
            .map(|(_, r)| r)
            .rev()
            .find(live)
            .map(|r| r.id as u32);
        let above = self
            .records
            .range(id + 1..)
            .map(|(_, r)| r)
            .find(live)
            .map_or(u32::MAX, |r| r.id as u32);
        (below, above)
    }

    /// Dead extents only snapshot `id` holds: (start, count), at most `max`
    /// of them (all with `usize::MAX`).
    pub fn only_held_by(&self, id: u64, max: usize) -> Vec<(u64, u64)> {
        let s = id as u32;
        let (below, above) = self.neighbours(id);
        let first_birth = below.map_or(0, |p| p.saturating_add(1));
        let mut out = Vec::new();
        if below.is_some_and(|p| p >= s) {
            return out;
        }
        let mut death = s.saturating_add(1);
        while death <= above && out.len() < max {
            let mut any = None;
            for &(d, b, start) in self.by_death.range((death, first_birth, 0)..) {
                if d != death || b > s {
                    any = Some(d);
                    break;
                }
                out.push((start, self.dead.get(&start).map_or(0, |e| e.count)));
                if out.len() >= max {
                    return out;
                }
            }
            // The next death value present, if any.
            let next = match any {
                Some(d) if d > death => d,
                _ => match self.by_death.range((death.saturating_add(1), 0, 0)..).next() {
                    Some(&(d, _, _)) => d,
                    None => break,
                },
            };
            if next <= death {
                break;
            }
            death = next;
        }
        out
    }

    /// Bytes only snapshot `id` holds (what deleting it gives back).
    pub fn unique_blocks(&self, id: u64) -> u64 {
        self.only_held_by(id, usize::MAX).iter().map(|e| e.1).sum()
    }

    /// One batch of reclaim for the oldest deleted snapshot: free what no
    /// snapshot holds any more (logged as `Reclaim`), and when nothing is
    /// left, drop its record (`SnapGone`). Returns whether work remains.
    pub fn reclaim(
        &mut self,
        dev: &dyn Device,
        alloc: &mut Allocator,
        records: &mut Vec<Record>,
    ) -> Result<bool> {
        let Some(id) = self.records.values().find(|r| r.deleting).map(|r| r.id) else {
            return Ok(false);
        };
        let batch = self.only_held_by(id, RECLAIM_BATCH);
        let done = batch.len() < RECLAIM_BATCH;
        for (start, _) in batch {
            if let Some(count) = self.remove_dead(dev, start)? {
                alloc.free_range(start, count);
                records.push(Record::Reclaim {
                    start,
                    count: count as u32,
                });
            }
        }
        if done {
            self.remove_record(dev, id)?;
            records.push(Record::SnapGone { id });
        }
        Ok(self.reclaiming())
    }

    /// Extents reclaim still has to examine for deleted snapshot `id`.
    pub fn reclaim_left(&self, id: u64) -> u64 {
        self.only_held_by(id, usize::MAX).len() as u64
    }

    /// The shared-extent runs `load` read: (start, count, refs).
    pub fn take_shared(&mut self) -> Vec<(u64, u64, u32)> {
        std::mem::take(&mut self.loaded_shared)
    }

    /// Write the shared-extent table's changes (keys and their runs now,
    /// `SharedExtents::take_dirty`) into the tree; with `records`, log them
    /// as `Share` records too.
    pub fn sync_shared(
        &mut self,
        dev: &dyn Device,
        changes: Vec<(u64, Option<crate::backend::alloc::SharedRun>)>,
        mut records: Option<&mut Vec<Record>>,
    ) -> Result<()> {
        for (start, run) in changes {
            let key = SHARED_KEY + start;
            let had = self.tree.get(dev, key)?.is_some();
            let (count, refs) = match run {
                Some(r) => {
                    self.tree.insert(dev, key, encode_shared(r.count, r.refs))?;
                    self.shared_runs += usize::from(!had);
                    (r.count as u32, r.refs)
                }
                None => {
                    if had {
                        self.tree.remove(dev, key)?;
                        self.shared_runs -= 1;
                    }
                    (0, 0)
                }
            };
            if let Some(r) = records.as_deref_mut() {
                r.push(Record::Share { start, count, refs });
            }
        }
        Ok(())
    }

    /// Shared-extent runs in the tree.
    pub fn shared_runs(&self) -> usize {
        self.shared_runs
    }

    /// The checksum-table chunks `load` read.
    pub fn take_sums(&mut self) -> Vec<(u64, crate::backend::alloc::SumChunk)> {
        std::mem::take(&mut self.loaded_sums)
    }

    /// Checksum-table chunks in the tree.
    pub fn sum_chunks(&self) -> usize {
        self.sum_chunks
    }

    /// Write the checksum table's changed chunks (`SumTable::take_dirty`)
    /// into the tree; with `records`, log them as `Sums` records too.
    pub fn sync_sums(
        &mut self,
        dev: &dyn Device,
        changes: Vec<(u64, Option<crate::backend::alloc::SumChunk>)>,
        mut records: Option<&mut Vec<Record>>,
    ) -> Result<()> {
        use crate::backend::alloc::sums::encode_chunk;
        for (start, chunk) in changes {
            let key = SUMS_KEY + start;
            let had = self.tree.get(dev, key)?.is_some();
            let (mask, sums) = match chunk {
                Some(c) => {
                    self.tree.insert(dev, key, encode_chunk(&c))?;
                    self.sum_chunks += usize::from(!had);
                    (c.mask, c.sums)
                }
                None => {
                    if had {
                        self.tree.remove(dev, key)?;
                        self.sum_chunks -= 1;
                    }
                    (0, Vec::new())
                }
            };
            if let Some(r) = records.as_deref_mut() {
                r.push(Record::Sums { start, mask, sums });
            }
        }
        Ok(())
    }

    /// Unify: write the table's changed nodes (its own old nodes are freed
    /// at once: no snapshot holds them) and return its new root.
    /// An empty table (no record, no dead extent) has no node at all: its
    /// nodes are freed and the root is 0, as on a volume that never had a
    /// snapshot.
    pub fn write(
        &mut self,
        dev: &dyn Device,
        alloc: &mut Allocator,
        bs: usize,
        writes: &mut Vec<(u64, Vec<u8>)>,
    ) -> Result<Root> {
        if self.records.is_empty() && self.dead.is_empty() && self.shared_runs == 0 && self.sum_chunks == 0 {
            let mut nodes = Vec::new();
            self.tree.visit(dev, &mut |addr, _, _, _| {
                nodes.push(addr);
                Ok(())
            })?;
            let held = self.tree.freed.drain(..).chain(self.tree.retired.drain(..));
            nodes.extend(held.map(|(addr, _)| addr));
            for addr in nodes.into_iter().filter(|&a| a != 0) {
                alloc.free_range(addr, 1);
            }
            self.tree = Tree::open(SNAP_INO, TreeKind::Snapshots, Root::default());
            return Ok(Root::default());
        }
        let mut maps = Vec::new();
        let a = &mut *alloc;
        self.tree
            .redirect_leaves(bs, 0, &mut || a.alloc_one(2), writes, &mut maps)?;
        let mut freed: Vec<FreedNode> = self.tree.freed.drain(..).collect();
        self.tree.unmaps.clear();
        let a = &mut *alloc;
        let root = self
            .tree
            .redirect_branches(bs, 0, &mut || a.alloc_one(2), writes, &mut freed)?;
        for (b, _) in freed {
            alloc.free_range(b, 1);
        }
        Ok(root)
    }

    /// Every block the table holds: its nodes and the dead extents (for fsck).
    pub fn dead_extents(&self) -> impl Iterator<Item = (u64, &DeadExtent)> {
        self.dead.iter().map(|(s, d)| (*s, d))
    }
}
