//! Backend layer, snapshots: reading the table into memory at open — and,
//! for a repair (`OpenOptions::repair`), reading it passing over what does
//! not decode, so that `fsck --repair` can mount the volume and rebuild
//! the rest from what the snapshots' images show:
//!
//! - an entry that does not decode or fails validation (a dead extent, a
//!   shared run, a snapshot record, a name used twice) is taken out of
//!   the table; two dead extents that overlap both go (which one is wrong
//!   cannot be told). What a lost dead extent kept, fsck finds in the
//!   images and puts back on the dead list; a lost record's snapshot is
//!   gone, and the dead extents only it held come free; shared runs are
//!   counted again from the files;
//! - a record whose flags byte has unknown bits keeps its known ones, one
//!   whose depth is out of bounds takes its root node's level, and one
//!   whose id is not below the generation takes the one id its image
//!   allows, if only one does (else the generation may be the damaged
//!   field, and the id is kept);
//! - a node that does not decode: the table is rebuilt in memory from
//!   what can be read (a leaf's entries before and after the damage,
//!   `btree::salvage`), and the old nodes are freed by the next unify —
//!   unless it is the root and no sound node of the table at the depth
//!   the superblock says (the superblock may be what is damaged).
//!
//! Each is listed in `Snapshots::passed_over`. Without `repair`, the first
//! fails the open.
//!
//! Calls the btree (scan, node decoding, leaf salvage) and the device.

use super::{decode_shared, DeadExtent, SnapRecord, Snapshots, RECORD_KEY, SHARED_KEY, SNAP_INO, SUMS_KEY};
use crate::backend::alloc::sums::{decode_chunk, encode_chunk};
use crate::codec::MAX_DEPTH;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::structures::btree::node::{decode, FreedNode, Node, BRANCH_MAGIC, LEAF_MAGIC};
use crate::structures::btree::{salvage, Tree, TreeKind};
use crate::structures::superblock::Root;
use crate::types::ROOT_INO;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// What the repair does with an entry it passes over.
const TAKEN_OUT: &str = "repair takes it out of the snapshot table";

/// Where the entries read so far end (overlaps are checked in key order).
#[derive(Default)]
struct Ends {
    dead: u64,
    shared: u64,
}

impl Snapshots {
    /// Load the table named by `root` (whole: it is kept in memory).
    /// `generation`: the superblock's (every snapshot's id is below it).
    pub fn load(dev: &dyn Device, root: Root, generation: u32) -> Result<Snapshots> {
        Snapshots::load_with(dev, root, generation, false)
    }

    /// [`Snapshots::load`]; with `repair`, passing over what does not
    /// decode (see the top of this file).
    pub fn load_with(dev: &dyn Device, root: Root, generation: u32, repair: bool) -> Result<Snapshots> {
        let mut s = Snapshots {
            tree: Tree::open(SNAP_INO, TreeKind::Snapshots, root),
            records: BTreeMap::new(),
            dead: BTreeMap::new(),
            by_death: BTreeSet::new(),
            dead_blocks: 0,
            pending: Vec::new(),
            names: HashMap::new(),
            deleting: 0,
            shared_runs: 0,
            loaded_shared: Vec::new(),
            sum_chunks: 0,
            loaded_sums: Vec::new(),
            passed_over: Vec::new(),
        };
        if root.addr == 0 {
            return Ok(s);
        }
        let mut entries = Vec::new();
        let scanned = s.tree.scan(dev, 0, u64::MAX, |key, value, leaf| {
            entries.push((key, value.to_vec(), leaf));
            Ok(std::ops::ControlFlow::Continue(()))
        });
        // A node that does not decode: what can be read, in a new tree.
        let rebuild = match scanned {
            Ok(()) => None,
            Err(e @ Error::Corrupt { .. }) if repair => {
                let mut r = Tolerant::default();
                r.node(dev, root.addr, root.depth, 0);
                // A root that is no node of the table (or not at the
                // superblock's depth): the superblock's pointer may be the
                // damaged field, and the table whole elsewhere.
                if !r.nodes.iter().any(|n| n.0 == root.addr) {
                    return Err(e);
                }
                entries = r.entries;
                entries.sort_by_key(|e| e.0);
                entries.dedup_by_key(|e| e.0);
                s.passed_over.extend(r.lost);
                Some(r.nodes)
            }
            Err(e) => return Err(e),
        };
        let mut ends = Ends::default();
        let (mut gone, mut mended, mut stray) = (Vec::new(), Vec::new(), Vec::new());
        for (key, value, leaf) in entries {
            // A record whose id is not below the generation: its key is
            // damaged, or the generation is (then the id is right).
            if (RECORD_KEY..SUMS_KEY).contains(&key) && key - RECORD_KEY >= u64::from(generation) {
                stray.push((key, value, leaf));
                continue;
            }
            match s.take(dev, key, &value, leaf, &mut ends, repair) {
                Ok(Some(note)) => {
                    s.passed_over.push((leaf, note));
                    mended.push(key);
                }
                Ok(None) => {}
                Err(Error::Corrupt { block, what }) if repair => {
                    s.passed_over.push((block, format!("{what} ({TAKEN_OUT})")));
                    gone.push(key);
                    // Overlapping dead extents: the one before goes too.
                    if key < RECORD_KEY && key < ends.dead {
                        if let Some((&start, _)) = s.dead.range(..key).next_back() {
                            s.unindex(start);
                            gone.push(start);
                        }
                    }
                }
                Err(e) => return Err(e),
            }
        }
        // Given the one id that fits, if only one does (and the table
        // says so: without `repair` it is an error); else taken as it is.
        for (key, value, leaf) in stray {
            let id = key - RECORD_KEY;
            match s.fitting_id(dev, &value, generation) {
                Some(to) if repair => {
                    let what =
                        format!("snapshot table: snapshot {id}: not below the generation {generation}");
                    gone.push(key);
                    let line = match s.take(dev, RECORD_KEY + to, &value, leaf, &mut ends, true) {
                        Ok(_) => {
                            mended.push(RECORD_KEY + to);
                            format!("{what} (repair gives it id {to}, the only one its image allows)")
                        }
                        Err(_) => format!("{what} ({TAKEN_OUT})"),
                    };
                    s.passed_over.push((leaf, line));
                }
                Some(_) => {
                    return Err(Error::corrupt(
                        leaf,
                        format!("snapshot table: snapshot {id}: not below the generation {generation}"),
                    ))
                }
                None => match s.take(dev, key, &value, leaf, &mut ends, repair) {
                    Ok(_) => {}
                    Err(Error::Corrupt { block, what }) if repair => {
                        s.passed_over.push((block, format!("{what} ({TAKEN_OUT})")));
                        gone.push(key);
                    }
                    Err(e) => return Err(e),
                },
            }
        }
        match rebuild {
            Some(old) => s.rebuild(dev, old)?,
            None => {
                for key in gone {
                    s.tree.remove(dev, key)?;
                }
                for key in mended {
                    if let Some(rec) = s.records.get(&(key - RECORD_KEY)) {
                        s.tree.insert(dev, key, rec.encode())?;
                    }
                }
            }
        }
        Ok(s)
    }

    /// Decode and take in the entry `key` of leaf `leaf`. With `repair`, a
    /// record mended returns what was wrong and what the repair did.
    fn take(
        &mut self,
        dev: &dyn Device,
        key: u64,
        value: &[u8],
        leaf: u64,
        ends: &mut Ends,
        repair: bool,
    ) -> Result<Option<String>> {
        let n = dev.block_count();
        if key >= SHARED_KEY {
            let start = key - SHARED_KEY;
            let (count, refs) = decode_shared(start, value, leaf, n)?;
            if start < ends.shared {
                return Err(Error::corrupt(
                    leaf,
                    format!("snapshot table: shared run at {start} overlaps the one before"),
                ));
            }
            ends.shared = start + count;
            self.loaded_shared.push((start, count, refs));
            self.shared_runs += 1;
            Ok(None)
        } else if key >= SUMS_KEY {
            let chunk = decode_chunk(key - SUMS_KEY, value, leaf, n)?;
            self.loaded_sums.push((key - SUMS_KEY, chunk));
            self.sum_chunks += 1;
            Ok(None)
        } else if key >= RECORD_KEY {
            let id = key - RECORD_KEY;
            let (rec, note) = match SnapRecord::decode(id, value, leaf, n) {
                Ok(rec) => (rec, None),
                Err(Error::Corrupt { what, .. }) if repair => match mend_record(dev, id, value, leaf) {
                    Some((rec, how)) => (rec, Some(format!("{what} ({how})"))),
                    None => return Err(Error::Corrupt { block: leaf, what }),
                },
                Err(e) => return Err(e),
            };
            if !rec.deleting && self.names.contains_key(&rec.name) {
                return Err(Error::corrupt(leaf, "snapshot table: a name used twice"));
            }
            if !rec.deleting {
                self.names.insert(rec.name.clone(), id);
            }
            self.deleting += usize::from(rec.deleting);
            self.records.insert(id, rec);
            Ok(note)
        } else {
            let d = DeadExtent::decode(key, value, leaf, n)?;
            if key < ends.dead {
                return Err(Error::corrupt(
                    leaf,
                    format!("snapshot table: dead extent {key} overlaps"),
                ));
            }
            ends.dead = key + d.count;
            self.index(key, d);
            Ok(None)
        }
    }

    /// The one id record `v`, whose id is not below `generation`, can
    /// have if its key is the damaged field: not below its root node's
    /// birth (its unify wrote the root, or an earlier one did), below
    /// `generation`, held by no other record — if only one fits.
    fn fitting_id(&self, dev: &dyn Device, v: &[u8], generation: u32) -> Option<u64> {
        let addr = u64::from_le_bytes(v.get(9..17)?.try_into().ok()?);
        let birth = node_birth(dev, addr)?;
        let mut free = (u64::from(birth)..u64::from(generation)).filter(|id| !self.records.contains_key(id));
        let id = free.next()?;
        free.next().is_none().then_some(id)
    }

    /// Take the dead extent at `start` off the list in memory only.
    fn unindex(&mut self, start: u64) {
        if let Some(d) = self.dead.remove(&start) {
            self.by_death.remove(&(d.death, d.birth, start));
            self.dead_blocks -= d.count;
        }
    }

    /// A new tree holding what was taken in; the `old` nodes are the next
    /// unify's to free (as it frees the table's nodes it replaced).
    fn rebuild(&mut self, dev: &dyn Device, old: Vec<FreedNode>) -> Result<()> {
        let mut t = Tree::new_empty(SNAP_INO, TreeKind::Snapshots);
        for (&start, d) in &self.dead {
            t.insert(dev, start, d.encode())?;
        }
        for rec in self.records.values() {
            t.insert(dev, RECORD_KEY + rec.id, rec.encode())?;
        }
        for &(start, count, refs) in &self.loaded_shared {
            t.insert(dev, SHARED_KEY + start, super::encode_shared(count, refs))?;
        }
        for (start, c) in &self.loaded_sums {
            t.insert(dev, SUMS_KEY + start, encode_chunk(c))?;
        }
        t.freed = old;
        self.tree = t;
        Ok(())
    }
}

/// Whether entry (`key`, `v`) of the table decodes and is valid.
fn valid(key: u64, v: &[u8], leaf: u64, n: u64) -> bool {
    if key >= SHARED_KEY {
        decode_shared(key - SHARED_KEY, v, leaf, n).is_ok()
    } else if key >= SUMS_KEY {
        decode_chunk(key - SUMS_KEY, v, leaf, n).is_ok()
    } else if key >= RECORD_KEY {
        SnapRecord::decode(key - RECORD_KEY, v, leaf, n).is_ok()
    } else {
        DeadExtent::decode(key, v, leaf, n).is_ok()
    }
}

/// The level of the inode-table node at `addr`, if the block is one and
/// the leftmost of its level (a tree's root is): a branch whose first
/// separator is 0, a leaf whose first key is at most the root's inode.
fn itable_level(dev: &dyn Device, addr: u64) -> Option<u8> {
    let mut buf = vec![0u8; dev.block_size() as usize];
    if addr < 2 || addr >= dev.block_count() || dev.read(addr, &mut buf).is_err() {
        return None;
    }
    let level = *buf.get(25)?;
    let magic = if level == 0 { LEAF_MAGIC } else { BRANCH_MAGIC };
    crate::codec::verify(&buf, addr, magic, "inode table node").ok()?;
    let owner = u64::from_le_bytes(buf.get(16..24)?.try_into().ok()?);
    let first = u64::from_le_bytes(buf.get(32..40)?.try_into().ok()?);
    let leftmost = if level == 0 { first <= ROOT_INO } else { first == 0 };
    let itable = owner == 0 && *buf.get(24)? == TreeKind::Itable as u8;
    (itable && leftmost && level <= MAX_DEPTH).then_some(level)
}

/// Record `v` of snapshot `id` that does not decode, mended where the
/// damage is in a field the rest of it tells: the flags' unknown bits
/// cleared, the depth taken from the root node. The record and what the
/// repair did.
fn mend_record(dev: &dyn Device, id: u64, v: &[u8], leaf: u64) -> Option<(SnapRecord, String)> {
    let mut v = v.to_vec();
    let mut how = Vec::new();
    let flags = *v.first()?;
    let known = flags & (super::FLAG_DELETING | super::FLAG_RECEIVED);
    if known != flags {
        *v.first_mut()? = known;
        how.push("clears the unknown flag bits");
    }
    let addr = u64::from_le_bytes(v.get(9..17)?.try_into().ok()?);
    if let Some(level) = itable_level(dev, addr) {
        if *v.get(17)? != level {
            *v.get_mut(17)? = level;
            how.push("takes the depth from the root node");
        }
    }
    let rec = SnapRecord::decode(id, &v, leaf, dev.block_count()).ok()?;
    (!how.is_empty()).then(|| (rec, format!("repair {}", how.join(" and "))))
}

/// The birth in the header of the inode-table node at `addr`.
fn node_birth(dev: &dyn Device, addr: u64) -> Option<u32> {
    itable_level(dev, addr)?;
    let mut buf = vec![0u8; dev.block_size() as usize];
    dev.read(addr, &mut buf).ok()?;
    buf.get(28..32)?.try_into().ok().map(u32::from_le_bytes)
}

/// The table read node by node, passing over what does not decode.
#[derive(Default)]
struct Tolerant {
    /// (key, value, leaf) of every entry that could be read, in key order.
    entries: Vec<(u64, Vec<u8>, u64)>,
    /// The table's nodes read (a block that is no node of the table is
    /// not one of them: a damaged address must not free another's block).
    nodes: Vec<FreedNode>,
    /// Each node that did not decode, and what the repair does.
    lost: Vec<(u64, String)>,
    seen: BTreeSet<u64>,
}

impl Tolerant {
    fn node(&mut self, dev: &dyn Device, addr: u64, level: u8, sep: u64) {
        let n = dev.block_count();
        if addr < 2 || addr >= n || level > MAX_DEPTH || !self.seen.insert(addr) {
            return;
        }
        let mut buf = vec![0u8; dev.block_size() as usize];
        if dev.read(addr, &mut buf).is_err() {
            return;
        }
        let birth = buf
            .get(28..32)
            .and_then(|b| b.try_into().ok())
            .map_or(0, u32::from_le_bytes);
        let decoded = decode(&buf, addr, SNAP_INO, TreeKind::Snapshots, level, n);
        match decoded {
            Ok(Node::Leaf(l)) => {
                self.nodes.push((addr, birth));
                let entries = l.entries.into_iter().map(|(k, v)| (k, v, addr));
                self.entries.extend(entries);
            }
            Ok(Node::Branch(b)) => {
                self.nodes.push((addr, birth));
                for c in &b.children {
                    if let crate::structures::btree::node::Slot::Disk(child) = c.slot {
                        self.node(dev, child, level.saturating_sub(1), c.sep);
                    }
                }
            }
            Err(e) => {
                let what = match e {
                    Error::Corrupt { what, .. } => what,
                    other => other.to_string(),
                };
                let ok = |k: u64, v: &[u8]| valid(k, v, addr, n);
                let salvaged = (level == 0)
                    .then(|| salvage::raw_leaf(dev, addr, SNAP_INO, &ok))
                    .flatten();
                let line = match salvaged {
                    Some(raw) => {
                        self.nodes.push((addr, birth));
                        let kept = salvage::in_order(&raw, sep, &ok);
                        let line = format!(
                            "{what} (repair rebuilds the snapshot table with the {} entries it \
                             can read of that leaf)",
                            kept.len()
                        );
                        self.entries.extend(kept.into_iter().map(|(k, v)| (k, v, addr)));
                        line
                    }
                    None => format!("{what} (repair rebuilds the snapshot table without that node)"),
                };
                self.lost.push((addr, line));
            }
        }
    }
}
