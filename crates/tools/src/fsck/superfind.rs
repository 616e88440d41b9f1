//! `fsck --repair` of a superblock copy damaged in a field no other copy
//! holds the same (its roots and depths, its log head, sequence numbers,
//! delta and generation), or in one both share where the copy still
//! decodes: the value is looked for again among those the volume itself
//! offers, and kept only if with it the volume checks clean.
//!
//! - **Where values come from.** The other copy gives the shared fields,
//!   its sequence and unify count give this copy's (one more or one less).
//!   A scan of the device's block headers gives the roots: every tree node
//!   whose checksum and self address hold, of the tree's owner and kind,
//!   with its level as the depth. The log blocks found the same way give
//!   the log head, with its sequence and `prev_crc`, or the block after one
//!   (an empty log since the unify), and delta numbers.
//! - **Which one is taken.** Candidates change as few fields as can be
//!   (one wrong field is the common case: a single candidate that puts one
//!   back is tried before any that changes two), and each is tried on a
//!   view of the device with that copy replaced: the first with which a
//!   whole read-only check finds no problem at all is written. A stale
//!   root or log head leaves blocks in use that nothing references, or
//!   referenced that the bitmap says are free, so it never checks clean.
//! - **Bounds.** The header scan reads the whole device only up to
//!   [`SCAN_LIMIT`] blocks (larger volumes offer the other copy's values
//!   and the log chain only), at most [`MAX_TRIES`] candidates get a
//!   check and at most [`MAX_MOUNTED`] of them a whole one (a candidate
//!   whose volume does not even mount costs little; one that mounts costs
//!   a whole check), so a volume whose damage lies elsewhere is not held
//!   up for long. Root candidates no branch of their tree points to come
//!   first (a root is the one node of its tree no other names).
//!
//! Calls the superblock, node-header and log-block decoders, the device
//! (reads; writes only through the caller), and the caller's check.

use std::sync::Arc;
use tux3::codec::verify;
use tux3::device::Device;
use tux3::log::block::{LogBlock, MAGIC as LOG_MAGIC};
use tux3::structures::btree::node::{BRANCH_MAGIC, LEAF_MAGIC};
use tux3::structures::superblock::Superblock;

/// Largest device whose every block header is scanned for roots and log
/// blocks (4 GiB of 4 KiB blocks).
pub(super) const SCAN_LIMIT: u64 = 1 << 20;
/// Most candidates checked.
pub(super) const MAX_TRIES: usize = 400;
/// Most candidates whose volume mounts and so gets a whole check.
pub(super) const MAX_MOUNTED: usize = 48;

/// What a check of a candidate found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Checked {
    /// Nothing wrong.
    Clean,
    /// It mounts, and something is wrong.
    Mounted,
    /// It does not mount.
    Unmountable,
}
/// Blocks read at a time by the header scan.
const SCAN_CHUNK: u64 = 256;

/// A field of the superblock: offset, width, name.
type Field = (usize, usize, &'static str);

const VERSION: Field = (12, 4, "version");
const BLOCK_SIZE: Field = (16, 4, "block size");
const FLAGS: Field = (20, 4, "flags");
const BLOCK_COUNT: Field = (24, 8, "block count");
const SEQ: Field = (32, 8, "sequence");
const VOLUME_ID: Field = (40, 8, "volume id");
const ITABLE_ROOT: Field = (48, 8, "itable root");
const ITABLE_DEPTH: Field = (56, 8, "itable depth");
const BITMAP_ROOT: Field = (64, 8, "bitmap root");
const BITMAP_DEPTH: Field = (72, 8, "bitmap depth");
const BITMAP_BLOCKS: Field = (80, 8, "bitmap blocks");
const LOG_HEAD: Field = (88, 8, "log head");
const LOG_SEQ: Field = (96, 8, "log sequence");
const NEXT_DELTA: Field = (104, 8, "next delta");
const CREATED: Field = (112, 8, "created");
const UNIFIES: Field = (120, 8, "unifies");
const LOG_PREV_CRC: Field = (128, 8, "log prev crc");
const SNAP_ROOT: Field = (136, 8, "snapshot root");
const SNAP_DEPTH: Field = (144, 8, "snapshot depth");
const GENERATION: Field = (152, 8, "generation");

/// Fields every copy holds alike, taken from the other copy.
const SHARED: &[Field] = &[
    VERSION,
    BLOCK_SIZE,
    FLAGS,
    BLOCK_COUNT,
    VOLUME_ID,
    BITMAP_BLOCKS,
    CREATED,
];

/// The roots, each with its depth and the owner and kind of its nodes.
const ROOTS: &[(Field, Field, u64, u8)] = &[
    (ITABLE_ROOT, ITABLE_DEPTH, 0, 1),
    (BITMAP_ROOT, BITMAP_DEPTH, 2, 2),
    (SNAP_ROOT, SNAP_DEPTH, 3, 4),
];

/// A superblock copy rewritten: its block, the copy, and what changed.
pub(super) struct Found {
    pub copy: u64,
    pub block: Vec<u8>,
    pub line: String,
}

/// One candidate: fields set to values.
struct Candidate {
    edits: Vec<(Field, u64)>,
}

fn get(b: &[u8], (at, width, _): Field) -> u64 {
    let mut v = [0u8; 8];
    if let (Some(d), Some(s)) = (v.get_mut(..width), b.get(at..at + width)) {
        d.copy_from_slice(s);
    }
    u64::from_le_bytes(v)
}

fn set(b: &mut [u8], (at, width, _): Field, value: u64) {
    if let Some(d) = b.get_mut(at..at + width) {
        d.copy_from_slice(&value.to_le_bytes()[..width]);
    }
}

/// The superblock's crc over the whole block, bytes 8..12 zero.
fn reseal(b: &mut [u8]) {
    if let Some(c) = b.get_mut(8..12) {
        c.fill(0);
    }
    let crc = crc32c::crc32c(b);
    if let Some(c) = b.get_mut(8..12) {
        c.copy_from_slice(&crc.to_le_bytes());
    }
}

/// What the device's block headers offer: tree nodes (address, owner,
/// kind, level) and log blocks.
#[derive(Default)]
struct Headers {
    nodes: Vec<(u64, u64, u8, u8)>,
    logs: Vec<LogBlock>,
    /// (owner, kind, child) of every branch entry seen.
    children: std::collections::HashSet<(u64, u8, u64)>,
}

fn scan_headers(dev: &dyn Device, other: Option<&Superblock>) -> Headers {
    let bs = dev.block_size() as usize;
    let count = dev.block_count();
    let mut h = Headers::default();
    if count <= SCAN_LIMIT {
        let mut buf = vec![0u8; bs * SCAN_CHUNK as usize];
        let mut at = 2;
        while at < count {
            let n = SCAN_CHUNK.min(count - at);
            let chunk = &mut buf[..bs * n as usize];
            if dev.read(at, chunk).is_err() {
                at += n;
                continue;
            }
            for (i, b) in chunk.chunks(bs).enumerate() {
                header(b, at + i as u64, count, &mut h);
            }
            at += n;
        }
    } else if let Some(sb) = other {
        // The other copy's log chain, as far as it holds.
        let mut b = vec![0u8; bs];
        let mut at = sb.log_head;
        for _ in 0..4096 {
            if at < 2 || at >= count || dev.read(at, &mut b).is_err() {
                break;
            }
            match LogBlock::decode(&b, at, count) {
                Ok(lb) => {
                    at = lb.next;
                    h.logs.push(lb);
                }
                Err(_) => break,
            }
        }
    }
    h
}

/// Note block `b` at `addr` if it is a valid node or log block.
fn header(b: &[u8], addr: u64, count: u64, h: &mut Headers) {
    let magic = get(b, (0, 4, "magic")) as u32;
    if magic == LOG_MAGIC {
        if let Ok(lb) = LogBlock::decode(b, addr, count) {
            h.logs.push(lb);
        }
    } else if (magic == LEAF_MAGIC || magic == BRANCH_MAGIC) && verify(b, addr, magic, "node").is_ok() {
        let owner = get(b, (16, 8, "owner"));
        let kind = b.get(24).copied().unwrap_or(0);
        let level = b.get(25).copied().unwrap_or(0);
        if (magic == LEAF_MAGIC) == (level == 0) {
            h.nodes.push((addr, owner, kind, level));
        }
        if magic == BRANCH_MAGIC {
            let count = get(b, (26, 2, "count")) as usize;
            for k in 0..count {
                let child = get(b, (32 + 16 * k + 8, 8, "child"));
                h.children.insert((owner, kind, child));
            }
        }
    }
}

/// Every candidate for copy `raw` given the other copy and the headers.
fn candidates(
    raw: &[u8],
    copy: u64,
    other: Option<(&[u8], &Superblock)>,
    dev_blocks: u64,
    h: &Headers,
) -> Vec<Candidate> {
    let mut out: Vec<Candidate> = Vec::new();
    let one = |f: Field, v: u64| Candidate { edits: vec![(f, v)] };
    if let Some((oraw, osb)) = other {
        for &f in SHARED {
            out.push(one(f, get(oraw, f)));
        }
        for v in [osb.seq.wrapping_add(1), osb.seq.wrapping_sub(1)] {
            if v % 2 == copy {
                out.push(one(SEQ, v));
            }
        }
        for v in [osb.unifies.wrapping_add(1), osb.unifies.wrapping_sub(1)] {
            out.push(one(UNIFIES, v));
        }
        for v in [osb.generation, osb.generation.wrapping_add(1)] {
            out.push(one(GENERATION, v));
        }
        out.push(one(NEXT_DELTA, osb.next_delta));
    }
    out.push(one(BLOCK_COUNT, dev_blocks));
    // The flags and version must agree: every set of known flags, and
    // every version (the decoder keeps the pairs that do).
    for flags in 0..32 {
        out.push(one(FLAGS, flags));
    }
    for version in 1..=6 {
        out.push(one(VERSION, version));
    }
    for &(root, depth, owner, kind) in ROOTS {
        let mut nodes: Vec<&(u64, u64, u8, u8)> =
            h.nodes.iter().filter(|n| n.1 == owner && n.2 == kind).collect();
        nodes.sort_by_key(|n| h.children.contains(&(owner, kind, n.0)));
        for &&(addr, _, _, level) in &nodes {
            out.push(Candidate {
                edits: vec![(root, addr), (depth, u64::from(level))],
            });
        }
        if owner == 3 {
            out.push(Candidate {
                edits: vec![(root, 0), (depth, 0)],
            });
        }
    }
    for lb in &h.logs {
        out.push(Candidate {
            edits: vec![
                (LOG_HEAD, lb.addr),
                (LOG_SEQ, lb.seq),
                (LOG_PREV_CRC, u64::from(lb.prev_crc)),
            ],
        });
        out.push(Candidate {
            edits: vec![
                (LOG_HEAD, lb.next),
                (LOG_SEQ, lb.seq.wrapping_add(1)),
                (LOG_PREV_CRC, u64::from(lb.crc)),
            ],
        });
        out.push(one(NEXT_DELTA, lb.delta));
        out.push(one(NEXT_DELTA, lb.delta.wrapping_add(1)));
    }
    // Edits that change nothing go; a candidate changing nothing goes.
    for c in &mut out {
        c.edits.retain(|&(f, v)| get(raw, f) != v);
    }
    out.retain(|c| !c.edits.is_empty());
    // Fewest fields changed first; the same edits once.
    out.sort_by_key(|c| c.edits.len());
    let mut seen = std::collections::HashSet::new();
    out.retain(|c| seen.insert(c.edits.iter().map(|&(f, v)| (f.0, v)).collect::<Vec<_>>()));
    out
}

/// A line when the block at the log head of copy `sb` is a log block
/// written after its unify (its delta not before `next_delta`) that does
/// not carry the sequence or `prev_crc` the copy gives: the copy's log
/// fields are wrong, and the log since the unify would be passed over.
/// (A block left there from before the unify carries an older delta.)
pub(super) fn head_out_of_step(dev: &dyn Device, sb: &Superblock) -> Option<String> {
    let mut b = vec![0u8; dev.block_size() as usize];
    dev.read(sb.log_head, &mut b).ok()?;
    let lb = LogBlock::decode(&b, sb.log_head, dev.block_count()).ok()?;
    let in_step = lb.seq == sb.log_seq && lb.prev_crc == sb.log_prev_crc;
    (lb.delta >= sb.next_delta && !in_step).then(|| {
        format!(
            "block {}: superblock copy {} starts the log at block {} with sequence {} and \
             prev crc {:#x}, but the log block there, of delta {} (not before the next delta \
             {}), carries sequence {} and prev crc {:#x}",
            sb.home(),
            sb.home(),
            sb.log_head,
            sb.log_seq,
            sb.log_prev_crc,
            lb.delta,
            sb.next_delta,
            lb.seq,
            lb.prev_crc
        )
    })
}

/// Whether a root the copy in use names is not a node of its tree at its
/// depth (a root or depth field gone wrong that the mount may not notice:
/// it reads a tree through the log's leaf list).
pub(super) fn roots_disagree(dev: &dyn Device) -> bool {
    let Ok(sb) = Superblock::load(dev) else {
        return false;
    };
    let mut b = vec![0u8; dev.block_size() as usize];
    let roots = [(sb.itable, 0u64, 1u8), (sb.bitmap, 2, 2), (sb.snapshots, 3, 4)];
    roots.iter().any(|&(root, owner, kind)| {
        if root.addr == 0 && owner == 3 {
            return false;
        }
        let mut h = Headers::default();
        if dev.read(root.addr, &mut b).is_ok() {
            header(&b, root.addr, dev.block_count(), &mut h);
        }
        h.nodes.first() != Some(&(root.addr, owner, kind, root.depth))
    })
}

/// The copies in the order to try: one that does not decode, or sits in
/// the wrong block, first; then the one in use.
fn suspects(raws: &[Vec<u8>; 2]) -> Vec<u64> {
    let dec: Vec<Option<Superblock>> = (0..2)
        .map(|k| Superblock::decode(&raws[k], k as u64).ok())
        .collect();
    let bad = |k: usize| dec[k].as_ref().is_none_or(|s| s.home() != k as u64);
    let mut order: Vec<u64> = (0..2u64).filter(|&k| bad(k as usize)).collect();
    let newest = match (&dec[0], &dec[1]) {
        (Some(a), Some(b)) => Some(u64::from(b.seq > a.seq)),
        (Some(_), None) => Some(0),
        (None, Some(_)) => Some(1),
        (None, None) => None,
    };
    for k in newest.into_iter().chain(0..2) {
        if !order.contains(&k) {
            order.push(k);
        }
    }
    order
}

/// A copy of the superblock with which `clean` finds the volume clean,
/// changed in as few fields as can be, or `None`.
pub(super) fn recover(dev: &Arc<dyn Device>, check: impl Fn(Arc<dyn Device>) -> Checked) -> Option<Found> {
    let bs = dev.block_size() as usize;
    let mut raws = [vec![0u8; bs], vec![0u8; bs]];
    for (k, b) in raws.iter_mut().enumerate() {
        dev.read(k as u64, b).ok()?;
    }
    // The newer copy by both its sequence and its unify count, when they
    // agree: a candidate must leave that copy in use, or it would put the
    // volume back one unify (an older state may well check clean). When
    // they disagree, one of them is the damage: candidates that keep the
    // copy of the higher sequence in use are tried first.
    let (s0, s1) = (get(&raws[0], SEQ), get(&raws[1], SEQ));
    let (u0, u1) = (get(&raws[0], UNIFIES), get(&raws[1], UNIFIES));
    let by_seq = u64::from(s1 > s0);
    let newer = ((s1 > s0) == (u1 > u0) && s0 != s1 && u0 != u1).then_some(by_seq);
    let mut headers: Option<Headers> = None;
    let mut tries: Vec<(bool, usize, u64, Candidate, Vec<u8>)> = Vec::new();
    for copy in suspects(&raws) {
        let k = copy as usize;
        let o = 1 - k;
        let osb = Superblock::decode(&raws[o], o as u64).ok();
        let h = headers.get_or_insert_with(|| scan_headers(dev.as_ref(), osb.as_ref()));
        let other = osb.as_ref().map(|s| (raws[o].as_slice(), s));
        for c in candidates(&raws[k], copy, other, dev.block_count(), h) {
            let mut b = raws[k].clone();
            for &(f, v) in &c.edits {
                set(&mut b, f, v);
            }
            reseal(&mut b);
            let Ok(sb) = Superblock::decode(&b, copy) else {
                continue;
            };
            let in_use = match &osb {
                Some(other) if other.seq > sb.seq => o as u64,
                _ => copy,
            };
            if newer.is_some_and(|n| n != in_use) {
                continue;
            }
            tries.push((in_use != by_seq, c.edits.len(), copy, c, b));
        }
    }
    tries.sort_by_key(|t| (t.0, t.1));
    let mut mounted = 0;
    for (_, _, copy, c, b) in tries.into_iter().take(MAX_TRIES) {
        if mounted >= MAX_MOUNTED {
            return None;
        }
        let view: Arc<dyn Device> = Arc::new(Replaced {
            inner: dev.clone(),
            copy,
            block: b.clone(),
        });
        let checked = check(view);
        mounted += usize::from(checked == Checked::Mounted);
        if checked == Checked::Clean {
            let k = copy as usize;
            let what: Vec<String> = c
                .edits
                .iter()
                .map(|&(f, v)| format!("{} {} (was {})", f.2, v, get(&raws[k], f)))
                .collect();
            return Some(Found {
                copy,
                block: b,
                line: format!(
                    "block {copy}: superblock copy {copy} rewritten with {}: the values the \
                     volume offers with which it checks clean",
                    what.join(", ")
                ),
            });
        }
    }
    None
}

/// The device with superblock copy `copy` read as `block`; read-only.
struct Replaced {
    inner: Arc<dyn Device>,
    copy: u64,
    block: Vec<u8>,
}

impl Device for Replaced {
    fn block_size(&self) -> u32 {
        self.inner.block_size()
    }
    fn block_count(&self) -> u64 {
        self.inner.block_count()
    }
    fn read(&self, block: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.inner.read(block, buf)?;
        let bs = self.block.len() as u64;
        let n = buf.len() as u64 / bs.max(1);
        if (block..block + n).contains(&self.copy) {
            let at = ((self.copy - block) * bs) as usize;
            if let Some(d) = buf.get_mut(at..at + self.block.len()) {
                d.copy_from_slice(&self.block);
            }
        }
        Ok(())
    }
    fn write(&self, block: u64, _: &[u8]) -> std::io::Result<()> {
        Err(std::io::Error::other(format!(
            "superblock search: write to block {block}"
        )))
    }
    fn flush(&self) -> std::io::Result<()> {
        Err(std::io::Error::other("superblock search: flush"))
    }
    fn counters(&self) -> tux3::device::CounterSnapshot {
        self.inner.counters()
    }
    fn name(&self) -> String {
        self.inner.name()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use tux3::device::MemDevice;
    use tux3::{FormatOptions, Fs, OpenOptions, ROOT_INO};

    /// A volume of 3,000 files, its copy in use given a wrong itable root.
    fn damaged() -> Arc<dyn Device> {
        let dev: Arc<dyn Device> = Arc::new(MemDevice::new(4096, 8192));
        Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
        let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
        // Enough inodes for an inode table of many nodes: more candidates
        // than the bounds let through.
        for k in 0..3000u32 {
            let ino = fs
                .create(ROOT_INO, format!("f{k}").as_bytes(), 0o644, 0, 0)
                .unwrap()
                .ino;
            if k % 100 == 0 {
                fs.write(ino, 0, &[k as u8; 6000]).unwrap();
            }
        }
        fs.unify().unwrap();
        fs.close().unwrap();
        let sb = Superblock::load(dev.as_ref()).unwrap();
        let mut b = vec![0u8; 4096];
        dev.read(sb.home(), &mut b).unwrap();
        set(&mut b, ITABLE_ROOT, sb.itable.addr + 1);
        reseal(&mut b);
        dev.write(sb.home(), &b).unwrap();
        dev
    }

    #[test]
    fn a_search_that_finds_nothing_clean_stops_at_its_bounds() {
        let dev = damaged();
        let calls = Cell::new(0usize);
        let found = recover(&dev, |_| {
            calls.set(calls.get() + 1);
            Checked::Mounted
        });
        assert!(found.is_none());
        assert_eq!(calls.get(), MAX_MOUNTED, "whole checks");
        calls.set(0);
        let found = recover(&dev, |_| {
            calls.set(calls.get() + 1);
            Checked::Unmountable
        });
        assert!(found.is_none());
        assert!(
            calls.get() <= MAX_TRIES && calls.get() > MAX_MOUNTED,
            "{} cheap checks",
            calls.get()
        );
    }

    #[test]
    fn the_root_is_tried_before_the_nodes_below_it() {
        let dev = damaged();
        let sb_root = {
            // The true root: the one itable node no branch names.
            let h = scan_headers(dev.as_ref(), None);
            let roots: Vec<u64> = h
                .nodes
                .iter()
                .filter(|n| n.1 == 0 && n.2 == 1 && !h.children.contains(&(0, 1, n.0)))
                .map(|n| n.0)
                .collect();
            assert!(!roots.is_empty());
            roots
        };
        let first_root_try = Cell::new(None);
        let _ = recover(&dev, |view| {
            let sb = Superblock::load(view.as_ref()).unwrap();
            if first_root_try.get().is_none()
                && sb.itable.addr != Superblock::load(dev.as_ref()).unwrap().itable.addr
            {
                first_root_try.set(Some(sb.itable.addr));
            }
            Checked::Unmountable
        });
        let tried = first_root_try.get().expect("an itable root was tried");
        assert!(
            sb_root.contains(&tried),
            "first root tried {tried}, unreferenced nodes {sb_root:?}"
        );
    }
}
