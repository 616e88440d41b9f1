//! `fsck --repair` of an inode-table key out of place: a key not above the
//! key before it, below its leaf's separator (the first leaf aside), at
//! or above the next leaf's, or no inode number at all, while the keys
//! around it are in step. Its inode is the one number left between its
//! neighbours (and inside its leaf's range), or the owner the root of the
//! record's tree names, or, of several, the only one a directory entry
//! names that the table lacks, of the entry's file type.
//! The key is mended in place (the leaf block rewritten and resealed, so
//! a snapshot sharing the leaf is mended too) before the repair mounts;
//! a leaf a `BlockSum` record of the log covers is left alone (rewriting
//! it would make replay drop its delta). `gather` finds them from the
//! walk; `mend` also writes the branch entries `childfix` sets or adds.
//!
//! Calls the codec (reseal), the node layout and the device.

use super::names::Entry;
use super::walk::Walked;
use std::collections::{BTreeMap, BTreeSet};
use tux3::backend::FIRST_INO;
use tux3::codec::{reseal, INO_LIMIT};
use tux3::device::Device;
use tux3::error::Result;
use tux3::structures::btree::node::NODE_HEADER;
use tux3::structures::inode::InodeAttrs;
use tux3::structures::scrub_state::SCRUB_INO;
use tux3::types::FileType;
use tux3::types::ROOT_INO;

/// An inode-table leaf as the walk read it, in key order.
pub(crate) struct LeafKeys {
    pub addr: u64,
    pub sep: u64,
    pub keys: Vec<u64>,
}

/// A key to rewrite: in the leaf at `addr`, entry `index` from `from` to
/// `to`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeyFix {
    pub addr: u64,
    pub index: usize,
    pub from: u64,
    pub to: u64,
    /// A branch entry's child (`childfix`), not a leaf's key.
    pub child: bool,
    /// A branch entry to add (`childfix::lost`): `(sep, next)`, entry
    /// `index` becomes (`sep`, `to`) and the one it moves up, whose child
    /// is `from`, gets separator `next` (`None`: the entry goes after the
    /// one whose child is `from`, unchanged).
    pub insert: Option<(u64, Option<u64>)>,
}

impl KeyFix {
    pub fn line(&self) -> String {
        if let Some((sep, _)) = self.insert {
            return format!(
                "block {}: inode table branch: no entry names block {}, an inode-table leaf in use \
                 that holds inodes the table lacks, from {sep} on (repair adds the entry)",
                self.addr, self.to
            );
        }
        if self.child {
            return format!(
                "block {}: inode table branch: entry {} names block {}, not the leaf of its \
                 range; that is block {} (repair sets the entry)",
                self.addr, self.index, self.from, self.to
            );
        }
        format!(
            "block {}: inode table leaf: key {} (entry {}) is out of place; its inode is {} \
             (repair sets the key)",
            self.addr, self.from, self.index, self.to
        )
    }
}

/// The keys out of place in `leaves` whose inode can be told: the records'
/// `kinds` (file type by key), the directory `entries`.
pub(super) fn find(
    leaves: &[LeafKeys],
    kinds: &BTreeMap<u64, Option<FileType>>,
    entries: &[Entry],
    owner_of: &dyn Fn(u64) -> Option<u64>,
    scrub_held: bool,
) -> Vec<KeyFix> {
    // A key in step: an inode number, or the scrub state record's when
    // the table holds one there (never a candidate for another record).
    let held = |x: u64| number(x) || (scrub_held && x == SCRUB_INO);
    let all: Vec<(usize, usize, u64)> = leaves
        .iter()
        .enumerate()
        .flat_map(|(j, l)| l.keys.iter().enumerate().map(move |(i, &k)| (j, i, k)))
        .collect();
    // Inodes entries name that the table lacks, with the type they say.
    let dangling: BTreeMap<u64, FileType> = entries
        .iter()
        .filter(|e| !kinds.contains_key(&e.ino))
        .map(|e| (e.ino, e.kind))
        .collect();
    let mut out = Vec::new();
    // The range each leaf covers: from its separator (the first leaf's:
    // from 1) to the next leaf's.
    let range = |j: usize| {
        let from = if j == 0 { 1 } else { leaves[j].sep };
        (
            from,
            leaves.get(j + 1).map_or(INO_LIMIT, |l| l.sep.min(INO_LIMIT)),
        )
    };
    let in_range = |x: Option<&(usize, usize, u64)>| {
        x.is_none_or(|&(j, _, k)| {
            let (from, to) = range(j);
            held(k) && k >= from && k < to
        })
    };
    for (n, &(j, i, k)) in all.iter().enumerate() {
        let leaf = &leaves[j];
        let (from, to) = range(j);
        let before = n.checked_sub(1).and_then(|p| all.get(p));
        let after = all.get(n + 1);
        // Only a key whose neighbours are in their leaves' ranges.
        if !in_range(before) || !in_range(after) {
            continue;
        }
        let prev = before.map(|x| x.2);
        let next = after.map(|x| x.2);
        let in_step = |x: u64| {
            held(x) && x >= from && x < to && prev.is_none_or(|p| x > p) && next.is_none_or(|q| x < q)
        };
        if in_step(k) {
            continue;
        }
        // Its neighbours must be in step with each other and the range.
        let lo = prev.map_or(from, |p| (p + 1).max(from));
        let hi = next.map_or(to, |q| q.min(to));
        if lo >= hi || prev.is_some_and(|p| p >= to) || next.is_some_and(|q| q < from) {
            continue;
        }
        let own = kinds.get(&k).copied().flatten();
        // The root of the record's tree names its owner: the inode.
        let owner = owner_of(k).filter(|o| (lo..hi).contains(o) && number(*o));
        let numbers = u64::from((lo..hi).contains(&ROOT_INO)) + hi.max(FIRST_INO) - lo.max(FIRST_INO);
        let candidate = if owner.is_some() {
            owner
        } else if numbers == 1 {
            (lo..hi).find(|&x| number(x))
        } else {
            let named: Vec<u64> = dangling
                .range(lo..hi)
                .filter(|(ino, _)| number(**ino))
                .filter(|(_, t)| own.is_none_or(|o| o == **t))
                .map(|(ino, _)| *ino)
                .collect();
            (named.len() == 1).then(|| named[0])
        };
        // A key in order with its neighbours but outside its leaf's range
        // may be right and a separator wrong: only an entry naming the
        // inode the table lacks (or its tree's root) says it is the key.
        let in_order = held(k) && prev.is_none_or(|p| k > p) && next.is_none_or(|q| k < q);
        let candidate = candidate.filter(|c| !in_order || owner.is_some() || dangling.contains_key(c));
        if let Some(c) = candidate.filter(|c| !kinds.contains_key(c)) {
            out.push(KeyFix {
                addr: leaf.addr,
                index: i,
                from: k,
                to: c,
                child: false,
                insert: None,
            });
        }
    }
    out
}

/// The keys out of place in the inode table `walked` read (its leaves'
/// keys `leaf_keys`, in order), told from the records (`inodes`, and what
/// a leaf that does not decode still holds) and the directory `entries`;
/// `scrub_held`: key 4 holds the scrub state record.
pub(super) fn gather(
    dev: &dyn Device,
    walked: &Walked,
    leaf_keys: Vec<Vec<u64>>,
    inodes: &BTreeMap<u64, InodeAttrs>,
    entries: &[Entry],
    scrub_held: bool,
) -> Vec<KeyFix> {
    let mut leaves: Vec<LeafKeys> = walked
        .leaf_seps
        .iter()
        .zip(leaf_keys)
        .map(|(&(addr, sep), keys)| LeafKeys { addr, sep, keys })
        .collect();
    // A leaf whose keys are out of order does not decode: its records
    // as the block holds them.
    let mut raw: BTreeMap<u64, InodeAttrs> = BTreeMap::new();
    let bounds = tux3::structures::bounds(dev);
    for &(addr, sep, level) in &walked.undecoded {
        let Some(es) = (level == 0).then(|| raw_entries(dev, addr)).flatten() else {
            continue;
        };
        for (k, v) in &es {
            if let Ok(a) = InodeAttrs::decode(v, *k, addr, &bounds) {
                raw.insert(*k, a);
            }
        }
        let at = leaves.partition_point(|l| l.sep < sep);
        let keys = es.iter().map(|e| e.0).collect();
        leaves.insert(at, LeafKeys { addr, sep, keys });
    }
    let attrs = |k: &u64| inodes.get(k).or_else(|| raw.get(k));
    let kinds = leaves
        .iter()
        .flat_map(|l| l.keys.iter())
        .map(|k| (*k, attrs(k).and_then(|a| FileType::from_mode(a.mode))))
        .collect();
    let owner_of = |k: u64| {
        let root = attrs(&k).map(|a| a.root.addr).filter(|&r| r != 0)?;
        root_owner(dev, root)
    };
    find(&leaves, &kinds, entries, &owner_of, scrub_held)
}

/// Rewrite each key of `fixes` in place, but in blocks a `BlockSum` of
/// the log covers; one line per key mended.
pub(super) fn mend(dev: &dyn Device, fixes: &[KeyFix]) -> Result<Vec<String>> {
    let mut done = Vec::new();
    if fixes.is_empty() {
        return Ok(done);
    }
    let Some(covered) = summed(dev) else {
        return Ok(done);
    };
    let mut buf = vec![0u8; dev.block_size() as usize];
    for f in fixes {
        if covered.contains(&f.addr) || f.addr < 2 || f.addr >= dev.block_count() {
            continue;
        }
        dev.read(f.addr, &mut buf)?;
        if let Some((sep, next)) = f.insert {
            if super::childfix::insert_entry(&mut buf, f.index, f.from, f.to, sep, next).is_some() {
                dev.write(f.addr, &buf)?;
                done.push(f.line());
            }
            continue;
        }
        let at = if f.child {
            Some(NODE_HEADER + 16 * f.index + 8)
        } else {
            key_offset(&buf, f.index)
        };
        let Some(at) = at else {
            continue;
        };
        if buf.get(at..at + 8) != Some(&f.from.to_le_bytes()[..]) {
            continue;
        }
        buf[at..at + 8].copy_from_slice(&f.to.to_le_bytes());
        reseal(&mut buf);
        dev.write(f.addr, &buf)?;
        done.push(f.line());
    }
    if !done.is_empty() {
        dev.flush()?;
    }
    Ok(done)
}

/// Offset of entry `index`'s key in leaf block `b`.
fn key_offset(b: &[u8], index: usize) -> Option<usize> {
    let mut at = NODE_HEADER;
    for _ in 0..index {
        let len = u16::from_le_bytes([*b.get(at + 8)?, *b.get(at + 9)?]) as usize;
        at = at.checked_add(10 + len)?;
    }
    (at + 8 <= b.len()).then_some(at)
}

/// The blocks the log's `BlockSum` records cover (none: the log cannot be
/// read, and nothing is mended).
fn summed(dev: &dyn Device) -> Option<BTreeSet<u64>> {
    let sb = tux3::structures::superblock::Superblock::load(dev).ok()?;
    let chain = tux3::log::read_chain(dev, sb.log_start()).ok()?;
    let mut out = BTreeSet::new();
    for d in &chain.deltas {
        for r in &d.records {
            if let tux3::log::Record::BlockSum { start, count, .. } = *r {
                out.extend(start..start.saturating_add(u64::from(count)));
            }
        }
    }
    Some(out)
}

/// The owner a tree's root node at `addr` names, if it is a sound node.
pub(super) fn root_owner(dev: &dyn Device, addr: u64) -> Option<u64> {
    use tux3::structures::btree::node::{BRANCH_MAGIC, LEAF_MAGIC};
    if addr < 2 || addr >= dev.block_count() {
        return None;
    }
    let mut b = vec![0u8; dev.block_size() as usize];
    dev.read(addr, &mut b).ok()?;
    let sound = |m| tux3::codec::verify(&b, addr, m, "node").is_ok();
    if !sound(LEAF_MAGIC) && !sound(BRANCH_MAGIC) {
        return None;
    }
    Some(u64::from_le_bytes(b.get(16..24)?.try_into().ok()?))
}

/// An inode number the table may hold: the root's, or a file's.
fn number(x: u64) -> bool {
    x == ROOT_INO || (FIRST_INO..INO_LIMIT).contains(&x)
}

/// The entries of the inode-table leaf at `addr` that does not decode
/// (its keys out of order), read as its header counts them; none if the
/// block is not a sound inode-table leaf or they do not fit in it.
pub(super) fn raw_entries(dev: &dyn Device, addr: u64) -> Option<Vec<(u64, Vec<u8>)>> {
    use tux3::structures::btree::node::LEAF_MAGIC;
    if addr < 2 || addr >= dev.block_count() {
        return None;
    }
    let mut b = vec![0u8; dev.block_size() as usize];
    dev.read(addr, &mut b).ok()?;
    tux3::codec::verify(&b, addr, LEAF_MAGIC, "leaf").ok()?;
    let owner = u64::from_le_bytes(b.get(16..24)?.try_into().ok()?);
    if owner != 0 || b.get(24..26)? != [1, 0] {
        return None;
    }
    let count = u16::from_le_bytes([*b.get(26)?, *b.get(27)?]) as usize;
    let mut at = NODE_HEADER;
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        let key = u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?);
        let len = u16::from_le_bytes([*b.get(at + 8)?, *b.get(at + 9)?]) as usize;
        out.push((key, b.get(at + 10..at + 10 + len)?.to_vec()));
        at += 10 + len;
    }
    Some(out)
}
