//! `fsck --repair` of the bitmap file's map (its extent tree, owner 2)
//! when an extent of it stops the mount: one that does not decode, lies
//! outside the volume or past the bitmap file's size, overlaps another,
//! leaves a hole in a bitmap without holes, or leads to a block that is no
//! bitmap block. The map is determined by the volume itself: bitmap block
//! *i* is a `T3BM` block whose header names its own address and index *i*
//! (FORMAT.md section 6), so the volume is read for them and each leaf of
//! the tree is written anew, in place, with the extents they give. Earlier
//! copies of a bitmap block (each unify writes a changed one elsewhere and
//! frees the old) are told apart by what the copies say of each other and
//! of the blocks the superblock names: the one in use marks itself, the
//! tree's nodes, the inode table's root and the log head in use, and a
//! copy it marks free is an old one. Where that leaves more than one
//! candidate, the one the damaged extent named is taken, else nothing is
//! written. Only leaves whose header is intact (magic, checksum, address,
//! owner 2, kind, level 0) under branches that decode are written: a
//! header that is not (a pointer gone astray to another block) is left
//! alone. A bitmap block whose index alone is wrong is `headerfix`'s.
//!
//! Reads every block of the volume, once, and only when the map does not
//! hold. Calls the structures' decoders and encoders and the device.

use std::collections::BTreeMap;
use std::sync::Arc;
use tux3::backend::BITMAP_INO;
use tux3::codec::{verify, Bounds};
use tux3::device::Device;
use tux3::error::Result;
use tux3::structures::bitmap;
use tux3::structures::btree::node::{self, Leaf, LEAF_MAGIC, NODE_HEADER};
use tux3::structures::btree::{Node, TreeKind};
use tux3::structures::extent;
use tux3::structures::superblock::Superblock;

/// A leaf of the bitmap file's tree: its address and the logical blocks
/// its parent gives it.
struct LeafAt {
    addr: u64,
    from: u64,
    to: u64,
}

/// A bitmap block found on the volume.
struct Found {
    addr: u64,
    index: u64,
    bits: Vec<u8>,
}

/// Rebuild the bitmap file's map if it does not hold; one line saying
/// what was written, or `None` (the map holds, or it cannot be rebuilt
/// with certainty).
pub(super) fn rebuild(dev: &Arc<dyn Device>) -> Result<Option<String>> {
    let dev = dev.as_ref();
    let Ok(sb) = Superblock::load(dev) else {
        return Ok(None);
    };
    let bs = dev.block_size() as usize;
    let Some(leaves) = leaves(dev, &sb)? else {
        return Ok(None);
    };
    let mut hints: BTreeMap<u64, u64> = BTreeMap::new();
    if map_holds(dev, &sb, &leaves, &mut hints)? {
        return Ok(None);
    }
    let found = scan(dev, sb.bitmap_blocks)?;
    let mut anchors = vec![0, 1, sb.itable.addr, sb.bitmap.addr, sb.log_head];
    anchors.extend(leaves.iter().map(|l| l.addr));
    if sb.snapshots.addr != 0 {
        anchors.push(sb.snapshots.addr);
    }
    let Some(chosen) = choose(&found, &anchors, &hints, &sb, bs) else {
        return Ok(None);
    };
    let extents = runs(&chosen);
    // Each leaf gets the extents in its range, split at its edges.
    let mut images = Vec::new();
    for leaf in &leaves {
        let entries: Vec<(u64, Vec<u8>)> = extents
            .iter()
            .filter_map(|&(l, p, c)| {
                let from = l.max(leaf.from);
                let to = (l + c).min(leaf.to);
                (from < to).then(|| (from, extent::encode(p + (from - l), to - from, 0)))
            })
            .collect();
        let mut buf = vec![0u8; bs];
        dev.read(leaf.addr, &mut buf)?;
        let birth = buf
            .get(28..32)
            .and_then(|b| b.try_into().ok())
            .map_or(0, u32::from_le_bytes);
        let new = Leaf {
            addr: leaf.addr,
            birth,
            dirty: false,
            entries,
        };
        if new.entries.is_empty() && leaves.len() > 1 || new.size() > bs {
            return Ok(None);
        }
        let image = new.encode(leaf.addr, BITMAP_INO, TreeKind::Extents, bs);
        if image != buf {
            images.push((leaf.addr, image));
        }
    }
    if images.is_empty() {
        return Ok(None);
    }
    for (addr, image) in &images {
        dev.write(*addr, image)?;
    }
    dev.flush()?;
    let at: Vec<String> = chosen.iter().map(|(i, a)| format!("{i} at block {a}")).collect();
    Ok(Some(format!(
        "repair rebuilt the bitmap file's map from the bitmap blocks found on the volume: {}",
        at.join(", ")
    )))
}

/// The leaves of the bitmap file's tree under branches that decode, each
/// with an intact header; `None` if any is not.
fn leaves(dev: &dyn Device, sb: &Superblock) -> Result<Option<Vec<LeafAt>>> {
    let bs = dev.block_size() as usize;
    let mut buf = vec![0u8; bs];
    let mut out = Vec::new();
    let mut todo = vec![(sb.bitmap.addr, sb.bitmap.depth, 0u64, u64::MAX)];
    while let Some((addr, level, from, to)) = todo.pop() {
        if addr < 2 || addr >= sb.block_count || out.len() + todo.len() > 4096 {
            return Ok(None);
        }
        dev.read(addr, &mut buf)?;
        if level == 0 {
            if !leaf_header_holds(&buf, addr) {
                return Ok(None);
            }
            out.push(LeafAt { addr, from, to });
            continue;
        }
        let Ok(Node::Branch(b)) =
            node::decode(&buf, addr, BITMAP_INO, TreeKind::Extents, level, sb.block_count)
        else {
            return Ok(None);
        };
        for (i, c) in b.children.iter().enumerate() {
            let lo = if i == 0 { from } else { c.sep.max(from) };
            let hi = b.children.get(i + 1).map_or(to, |n| n.sep.min(to));
            todo.push((c.slot.addr(), level - 1, lo, hi));
        }
    }
    out.sort_by_key(|l| l.from);
    Ok(Some(out))
}

/// Whether leaf block `b` at `addr` has the header a bitmap file's leaf has.
fn leaf_header_holds(b: &[u8], addr: u64) -> bool {
    verify(b, addr, LEAF_MAGIC, "bitmap file leaf").is_ok()
        && b.get(16..24) == Some(&BITMAP_INO.to_le_bytes()[..])
        && b.get(24) == Some(&(TreeKind::Extents as u8))
        && b.get(25) == Some(&0)
        && b.len() >= NODE_HEADER
}

/// Whether the map decodes and leads to bitmap blocks as the mount reads
/// it (an index wrong in a bitmap block is not the map's damage); `hints`
/// gets each logical block the map's extents name, decoded or not.
fn map_holds(
    dev: &dyn Device,
    sb: &Superblock,
    leaves: &[LeafAt],
    hints: &mut BTreeMap<u64, u64>,
) -> Result<bool> {
    let bs = dev.block_size() as usize;
    let bounds = Bounds::new(bs as u32, sb.block_count);
    let mut buf = vec![0u8; bs];
    let mut extents = Vec::new();
    let mut holds = true;
    for leaf in leaves {
        dev.read(leaf.addr, &mut buf)?;
        for (k, v) in raw_entries(&buf) {
            if let (Some(p), Some(c)) = (u64_at(v, 0), v.get(8..12)) {
                let c = u32::from_le_bytes(c.try_into().unwrap_or_default());
                for j in 0..u64::from(c).min(sb.bitmap_blocks) {
                    hints.insert(k.wrapping_add(j), p.wrapping_add(j));
                }
            }
        }
        match node::decode(&buf, leaf.addr, BITMAP_INO, TreeKind::Extents, 0, sb.block_count) {
            Ok(Node::Leaf(l)) => {
                for (k, v) in &l.entries {
                    match extent::decode(*k, v, leaf.addr, &bounds) {
                        Ok(e) if e.lblock >= leaf.from && e.end() <= leaf.to => extents.push(e),
                        _ => holds = false,
                    }
                }
            }
            _ => holds = false,
        }
    }
    if !holds {
        return Ok(false);
    }
    let mut next = 0;
    for e in &extents {
        if e.lblock < next || e.end() > sb.bitmap_blocks || (e.lblock > next && !sb.sparse_bitmap) {
            return Ok(false);
        }
        for index in e.lblock..e.end() {
            dev.read(e.physical(index), &mut buf)?;
            if verify(&buf, e.physical(index), bitmap::MAGIC, "bitmap block").is_err() {
                return Ok(false);
            }
        }
        next = e.end();
    }
    Ok(next == sb.bitmap_blocks || sb.sparse_bitmap)
}

/// The (key, value) entries of leaf block `b` as far as they can be read,
/// whatever they hold.
fn raw_entries(b: &[u8]) -> Vec<(u64, &[u8])> {
    let count = b.get(26..28).map_or(0, |c| u16::from_le_bytes([c[0], c[1]]));
    let mut at = NODE_HEADER;
    let mut out = Vec::new();
    for _ in 0..count {
        let (Some(k), Some(len)) = (u64_at(b, at), b.get(at + 8..at + 10)) else {
            break;
        };
        let len = usize::from(u16::from_le_bytes([len[0], len[1]]));
        let Some(v) = b.get(at + 10..at + 10 + len) else {
            break;
        };
        out.push((k, v));
        at += 10 + len;
    }
    out
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(
        b.get(at..at.checked_add(8)?)?.try_into().ok()?,
    ))
}

/// Every block of the volume that is a bitmap block (header intact, at
/// its own address) of an index below `blocks`.
fn scan(dev: &dyn Device, blocks: u64) -> Result<Vec<Found>> {
    let mut buf = vec![0u8; dev.block_size() as usize];
    let mut out = Vec::new();
    for addr in 2..dev.block_count() {
        dev.read(addr, &mut buf)?;
        if buf.get(..4) != Some(&bitmap::MAGIC.to_le_bytes()[..]) {
            continue;
        }
        let Some(index) = u64_at(&buf, 16).filter(|i| *i < blocks) else {
            continue;
        };
        if let Ok(bits) = bitmap::decode(&buf, addr, index) {
            out.push(Found {
                addr,
                index,
                bits: bits.to_vec(),
            });
        }
    }
    Ok(out)
}

/// Whether bitmap block `f` marks block `addr` in use (`None`: it does
/// not cover it).
fn marks(f: &Found, addr: u64, bpb: u64) -> Option<bool> {
    if addr / bpb != f.index {
        return None;
    }
    let bit = addr % bpb;
    let byte = f.bits.get(usize::try_from(bit / 8).ok()?)?;
    Some(byte & (1 << (bit % 8)) != 0)
}

/// The bitmap block in use for each logical block of the bitmap file
/// (none: a hole, on a sparse bitmap), from the blocks `found`; `None`
/// when a logical block has no candidate left on a bitmap without holes,
/// or more than one and no hint among them.
fn choose(
    found: &[Found],
    anchors: &[u64],
    hints: &BTreeMap<u64, u64>,
    sb: &Superblock,
    bs: usize,
) -> Option<BTreeMap<u64, u64>> {
    let bpb = bitmap::bits_per_block(bs).max(1);
    // A candidate marks itself and every anchor it covers in use.
    let mut alive: Vec<bool> = found
        .iter()
        .map(|f| {
            std::iter::once(f.addr)
                .chain(anchors.iter().copied())
                .all(|a| marks(f, a, bpb) != Some(false))
        })
        .collect();
    // The candidates of each index, and those lying in each index's range
    // (`found` is in address order).
    let mut of: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
    for (i, f) in found.iter().enumerate() {
        of.entry(f.index).or_default().push(i);
    }
    let within = |index: u64| {
        let from = found.partition_point(|f| f.addr / bpb < index);
        let to = found.partition_point(|f| f.addr / bpb <= index);
        from..to
    };
    let mut chosen: BTreeMap<u64, u64> = BTreeMap::new();
    loop {
        let mut changed = false;
        for (&index, group) in &of {
            if chosen.contains_key(&index) {
                continue;
            }
            let left: Vec<usize> = group.iter().copied().filter(|&i| alive[i]).collect();
            let [only] = left[..] else {
                continue;
            };
            chosen.insert(index, found[only].addr);
            changed = true;
            // A copy the one in use marks free is an old one; the one in
            // use is marked in use by every other in use.
            let against = &found[only];
            let near = within(index).chain(of.get(&(against.addr / bpb)).into_iter().flatten().copied());
            for i in near.collect::<Vec<usize>>() {
                let f = &found[i];
                if i != only
                    && (marks(against, f.addr, bpb) == Some(false)
                        || marks(f, against.addr, bpb) == Some(false))
                {
                    alive[i] = false;
                }
            }
        }
        if !changed {
            break;
        }
    }
    for index in 0..sb.bitmap_blocks {
        if chosen.contains_key(&index) {
            continue;
        }
        let left: Vec<u64> = of
            .get(&index)
            .into_iter()
            .flatten()
            .filter(|&&i| alive[i])
            .map(|&i| found[i].addr)
            .collect();
        match (left.len(), hints.get(&index)) {
            (0, _) if sb.sparse_bitmap && index > 0 => {}
            (n, Some(h)) if n > 1 && left.contains(h) => {
                chosen.insert(index, *h);
            }
            _ => return None,
        }
    }
    Some(chosen)
}

/// `chosen` (logical block, address) as extents (logical, physical, count).
fn runs(chosen: &BTreeMap<u64, u64>) -> Vec<(u64, u64, u64)> {
    let mut out: Vec<(u64, u64, u64)> = Vec::new();
    for (&l, &p) in chosen {
        match out.last_mut() {
            Some((ll, lp, c)) if *ll + *c == l && *lp + *c == p && *c < u64::from(u32::MAX) => *c += 1,
            _ => out.push((l, p, 1)),
        }
    }
    out
}
