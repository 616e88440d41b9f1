//! Human-readable report of a volume's structures: both superblock copies,
//! geometry, the log since the last unify (block by block, and why reading
//! stopped), the inode table after replay, inode counts by kind, files'
//! data maps (extents held in the inode record or an extent tree's, listed
//! alike as `lblock..+count -> pblock` for the first files, marked
//! `summed <first checksum>` when the extent carries data checksums, and
//! the volume's totals of summed extents and the blocks they cover), free space
//! and the device's I/O counters. Reads only; damage is described in the
//! report, not raised, as far as the volume can be read at all.
//!
//! Calls `structures::superblock`, `backend::Backend::open` (read-only
//! replay), `log`, the fsck tree walker (`tools::fsck::walk`) and
//! `tools::datamap`.

use super::datamap;
use super::fsck::{follow, walk};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;
use std::sync::Arc;
use tux3::backend::{Backend, TreeReplay};
use tux3::device::Device;
use tux3::error::Result;
use tux3::log::{read_chain, Record};
use tux3::structures::inode::InodeAttrs;
use tux3::structures::superblock::{
    Superblock, FLAG_DATA_SUMS, FLAG_INLINE_MAPS, FLAG_SHARED_EXTENTS, FLAG_SNAPSHOTS, FLAG_SPARSE_BITMAP,
    FLAG_TABLE_SUMS,
};
use tux3::structures::{bitmap, extent};
use tux3::types::FileType;

/// Bitmap block addresses listed before the rest are summarized.
const MAX_BITMAP_LISTED: u64 = 16;
/// Log blocks listed before the rest are summarized.
const MAX_LOG_LISTED: usize = 200;
/// Files whose extents are listed before the rest are summarized.
const MAX_FILES_LISTED: usize = 32;
/// Extents listed per file before the rest are counted.
const MAX_EXTENTS_LISTED: usize = 8;

/// Superblock, log chain since the last unify, tree and free-space summary.
pub fn report(dev: Arc<dyn Device>) -> Result<String> {
    let mut out = String::new();
    let sb = superblocks(dev.as_ref(), &mut out)?;
    geometry(&sb, &mut out);
    log(dev.as_ref(), &sb, &mut out)?;
    match Backend::open(dev.clone(), true) {
        Ok((mut be, replays)) => {
            let maps = itable(&mut be, &replays, &mut out);
            data_maps(&be, &maps, &replays, &mut out);
            snapshots(&be, &mut out);
            shared_extents(&be, &mut out);
            checksum_table(&be, &mut out);
            scrub_state(&mut be, &mut out);
            free_space(&mut be, &mut out);
        }
        Err(e) => {
            let _ = writeln!(out, "\nreplay\n  the volume cannot be mounted: {e}");
        }
    }
    let c = dev.counters();
    let _ = writeln!(
        out,
        "\ndevice\n  {} blocks read in {} requests, {} blocks written in {} requests, {} flushes",
        c.blocks_read, c.reads, c.blocks_written, c.writes, c.flushes
    );
    Ok(out)
}

/// The known-damage list (attribute 14), a line per block.
fn known_damage(list: &[tux3::structures::scrub_state::KnownDamage]) -> String {
    let mut out = String::new();
    if !list.is_empty() {
        let _ = write!(
            out,
            "\n  known damage (recorded by a repair): {} blocks",
            list.len()
        );
    }
    for d in list {
        let _ = write!(
            out,
            "\n    block {}: expected {:#010x}, found {:#010x}",
            d.block, d.expected, d.found
        );
    }
    out
}

/// The scrub state record (inode 4, attributes 13 and 14), if the volume has one.
fn scrub_state(be: &mut Backend, out: &mut String) {
    use tux3::structures::scrub_state::SCRUB_INO;
    let dev = be.dev.clone();
    let got = be.itable.get_mut().get_at(dev.as_ref(), SCRUB_INO);
    let line = match got {
        Ok(None) => return,
        Ok(Some((raw, leaf))) => {
            match InodeAttrs::decode(&raw, SCRUB_INO, leaf, &tux3::structures::bounds(dev.as_ref())) {
                Ok(a) => {
                    (match a.scrub {
                        Some(s) => format!(
                    "  {}: position block {}, {} of {} bytes checked, damaged blocks: {} data, {} metadata; \
                     started {}, updated {}\n  data checksum errors met by reads: {}",
                    s.phase.name(),
                    s.position,
                    s.done,
                    s.total,
                    s.data_damage,
                    s.meta_damage,
                    s.started,
                    s.updated,
                    s.data_errors
                ),
                        None => "  inode 4 holds no scrub state".to_string(),
                    }) + &known_damage(&a.damage)
                }
                Err(e) => format!("  damaged: {e}"),
            }
        }
        Err(e) => format!("  unreadable: {e}"),
    };
    let _ = writeln!(out, "\nscrub state (inode {SCRUB_INO})\n{line}");
}

/// The snapshot table: each snapshot, what it alone holds, the dead list.
fn snapshots(be: &Backend, out: &mut String) {
    let snaps = &be.snaps;
    if !be.sb.has_snapshots() && snaps.records.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "
snapshots (after replay; generation {})",
        be.alloc.generation
    );
    for r in snaps.records.values() {
        let mut state = match r.received {
            Some((volume, id)) => format!(", received (origin: volume {volume:#018x}, snapshot {id})"),
            None => String::new(),
        };
        if r.deleting {
            state.push_str(", deleted, space coming back");
        }
        let _ = writeln!(
            out,
            "  {} {:?}: inode table at block {} (depth {}), {} blocks referenced when taken, {} held by it alone{state}",
            r.id,
            String::from_utf8_lossy(&r.name),
            r.itable.addr,
            r.itable.depth,
            r.referenced,
            snaps.unique_blocks(r.id),
        );
    }
    let _ = writeln!(
        out,
        "  dead list: {} extents, {} blocks (freed by the live volume, held by snapshots)",
        snaps.dead.len(),
        snaps.dead_blocks
    );
}

/// The shared-extent table: its totals and its first runs.
fn shared_extents(be: &Backend, out: &mut String) {
    let t = &be.alloc.shared;
    if !be.sb.shared_extents && t.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\nshared extents (after replay; in the snapshot table from key 2^63)\n  {} runs, {} blocks mapped more than once, {} blocks saved by sharing, about {} KiB of memory",
        t.len(),
        t.blocks(),
        t.saved(),
        t.memory().div_ceil(1024)
    );
    for (start, run) in t.iter().take(SHARED_LISTED) {
        let end = start + run.count - 1;
        let _ = writeln!(out, "  blocks {start}-{end}: {} references", run.refs);
    }
    if t.len() > SHARED_LISTED {
        let _ = writeln!(out, "  ... and {} more runs", t.len() - SHARED_LISTED);
    }
}

/// The checksum table: its totals and its first chunks.
fn checksum_table(be: &Backend, out: &mut String) {
    let t = be.alloc.sums.read();
    if !be.sb.table_sums && t.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\nchecksum table (after replay; in the snapshot table from key 2^62 + 2^61)\n  {} chunks of 64 blocks, {} blocks with a checksum, about {} KiB of memory",
        t.len(),
        t.blocks(),
        t.memory().div_ceil(1024)
    );
    for (start, c) in t.iter().take(SHARED_LISTED) {
        let first = c.sums.first().copied().unwrap_or(0);
        let _ = writeln!(
            out,
            "  chunk {start}: {} blocks (mask {:#018x}), first checksum {first:#010x}",
            c.sums.len(),
            c.mask
        );
    }
    if t.len() > SHARED_LISTED {
        let _ = writeln!(out, "  ... and {} more chunks", t.len() - SHARED_LISTED);
    }
}

/// Runs of the shared-extent table `dump` lists.
const SHARED_LISTED: usize = 20;

/// Both copies; returns the one in use (or the one-line reason none is).
fn superblocks(dev: &dyn Device, out: &mut String) -> Result<Superblock> {
    let _ = writeln!(out, "superblock");
    let sb = Superblock::load(dev)?;
    let mut buf = vec![0u8; dev.block_size() as usize];
    for copy in 0..2u64 {
        let state = match dev.read(copy, &mut buf) {
            Err(e) => format!("unreadable: {e}"),
            Ok(()) => match Superblock::decode(&buf, copy) {
                Ok(s) if s.seq == sb.seq => format!("valid, sequence {} (in use)", s.seq),
                Ok(s) => format!("valid, sequence {}", s.seq),
                Err(e) => format!("invalid: {e}"),
            },
        };
        let _ = writeln!(out, "  copy {copy} (block {copy}): {state}");
    }
    Ok(sb)
}

fn geometry(sb: &Superblock, out: &mut String) {
    let bytes = sb.block_count.saturating_mul(sb.block_size as u64);
    let _ = writeln!(out, "\ngeometry");
    let (version, flags) = sb.version_and_flags();
    let names: Vec<&str> = [
        (FLAG_SNAPSHOTS, "SNAPSHOTS"),
        (FLAG_INLINE_MAPS, "INLINE_MAPS"),
        (FLAG_DATA_SUMS, "DATA_SUMS"),
        (FLAG_SPARSE_BITMAP, "SPARSE_BITMAP"),
        (FLAG_SHARED_EXTENTS, "SHARED_EXTENTS"),
        (FLAG_TABLE_SUMS, "TABLE_SUMS"),
    ]
    .iter()
    .filter(|(bit, _)| flags & bit != 0)
    .map(|(_, name)| *name)
    .collect();
    let names = if names.is_empty() {
        "none".to_string()
    } else {
        names.join(", ")
    };
    let _ = writeln!(out, "  format version {version}, flags {flags:#x} ({names})");
    let _ = writeln!(
        out,
        "  block size {}, {} blocks ({bytes} bytes), {} bitmap blocks",
        sb.block_size, sb.block_count, sb.bitmap_blocks
    );
    let _ = writeln!(
        out,
        "  volume id {:#018x}, created {} (seconds since the epoch)",
        sb.volume_id, sb.created
    );
    let _ = writeln!(out, "  {} unifies, next delta {}", sb.unifies, sb.next_delta);
    let _ = writeln!(
        out,
        "  inode table root: block {}, depth {}",
        sb.itable.addr, sb.itable.depth
    );
    let _ = writeln!(
        out,
        "  bitmap file root: block {}, depth {}",
        sb.bitmap.addr, sb.bitmap.depth
    );
}

fn counts(records: &[Record]) -> String {
    let mut n = [0usize; tux3::log::record::KINDS.len()];
    for r in records {
        n[r.kind()] += 1;
    }
    let parts: Vec<String> = n
        .iter()
        .zip(tux3::log::record::KINDS)
        .filter(|(c, _)| **c > 0)
        .map(|(c, k)| format!("{c} {k}"))
        .collect();
    if parts.is_empty() {
        "no records".into()
    } else {
        parts.join(", ")
    }
}

fn log(dev: &dyn Device, sb: &Superblock, out: &mut String) -> Result<()> {
    let _ = writeln!(
        out,
        "\nlog since the last unify (head block {}, sequence {}, prev crc {:#010x})",
        sb.log_head, sb.log_seq, sb.log_prev_crc
    );
    let chain = read_chain(dev, sb.log_start())?;
    let (blocks, stop, stop_seq) = follow(dev, sb.log_head, sb.log_seq, Some(sb.log_prev_crc));
    let committed = chain.blocks().count().min(blocks.len());
    for (i, lb) in blocks.iter().enumerate() {
        if i == MAX_LOG_LISTED {
            let _ = writeln!(out, "  ... {} more blocks", blocks.len() - i);
            break;
        }
        let state = match (lb.commit, i < committed) {
            (true, _) => "commit",
            (false, true) => "      ",
            (false, false) => "uncommitted",
        };
        let _ = writeln!(
            out,
            "  block {:>8}  seq {}  delta {}  {state}  {}",
            lb.addr,
            lb.seq,
            lb.delta,
            counts(&lb.records)
        );
    }
    let _ = writeln!(
        out,
        "  {} committed deltas in {committed} blocks; {} blocks after the last commit",
        chain.deltas.len(),
        blocks.len() - committed
    );
    let _ = writeln!(
        out,
        "  next log block: block {} (sequence {})",
        chain.tail.next, chain.tail.seq
    );
    let _ = writeln!(out, "  reading stopped at block {stop} (sequence {stop_seq})");
    let _ = writeln!(out, "  end: {}", chain.end);
    Ok(())
}

/// Files' data maps as the inode table has them: counts, and the first
/// files with data.
#[derive(Default)]
struct Maps {
    /// Files whose record holds their extents, those extents, their blocks.
    held: u64,
    held_extents: u64,
    held_blocks: u64,
    /// Files with an extent tree (unified, or in the log only).
    trees: u64,
    /// The first files with data (record, tree or log), in inode order.
    listed: Vec<(u64, InodeAttrs)>,
    /// Files with data past the listed ones.
    more: u64,
    /// Files with an extent tree past the listed ones (their extents count
    /// in the totals of summed extents).
    others: Vec<(u64, InodeAttrs)>,
}

/// The inode table; returns its files' data maps.
fn itable(be: &mut Backend, replays: &HashMap<u64, TreeReplay>, out: &mut String) -> Maps {
    let dev = be.dev.clone();
    let mut kinds: BTreeMap<String, u64> = BTreeMap::new();
    let mut bad = 0u64;
    let mut maps = Maps::default();
    let mut flagged: Vec<(u64, u32)> = Vec::new();
    let w = walk(
        dev.as_ref(),
        be.itable.get_mut(),
        "inode table",
        &mut |leaf, entries| {
            for (ino, v) in entries {
                match InodeAttrs::decode(v, *ino, leaf, &tux3::structures::bounds(dev.as_ref())) {
                    Ok(a) => {
                        if a.flags != 0 {
                            flagged.push((*ino, a.flags));
                        }
                        let kind = FileType::from_mode(a.mode);
                        let k = match kind {
                            Some(k) => format!("{k:?}"),
                            None if is_xattr_file(&a) => "xattr files".to_string(),
                            None => "unknown type".to_string(),
                        };
                        *kinds.entry(k).or_default() += 1;
                        if kind != Some(FileType::Directory) {
                            let logged = replays
                                .get(ino)
                                .is_some_and(|r| !r.ops.is_empty() || !r.inserts.is_empty());
                            maps.add(*ino, a, logged);
                        }
                    }
                    Err(_) => bad += 1,
                }
            }
        },
        &mut |_| {},
    );
    let inodes: u64 = kinds.values().sum::<u64>() + bad;
    let _ = writeln!(out, "\ninode table (after replay)");
    let _ = writeln!(
        out,
        "  depth {}, {} leaves, {} branches, {inodes} inodes",
        be.itable.get_mut().depth(),
        w.leaves,
        w.branches
    );
    for e in &w.errors {
        let _ = writeln!(out, "  unreadable: {e}");
    }
    let list: Vec<String> = kinds.iter().map(|(k, n)| format!("{n} {k}")).collect();
    let _ = writeln!(out, "  by kind: {}", list.join(", "));
    if bad > 0 {
        let _ = writeln!(out, "  {bad} inode records do not decode");
    }
    if !flagged.is_empty() {
        let _ = writeln!(out, "  {} inodes with flags", flagged.len());
        for (ino, f) in flagged.iter().take(MAX_FILES_LISTED) {
            let _ = writeln!(out, "    inode {ino}: {}", flag_names(*f));
        }
        if flagged.len() > MAX_FILES_LISTED {
            let _ = writeln!(out, "    ... {} more", flagged.len() - MAX_FILES_LISTED);
        }
    }
    maps
}

/// Inode flags by name, as `chattr` spells them.
fn flag_names(f: u32) -> String {
    use tux3::types::flags::*;
    let names = [
        (IMMUTABLE, "immutable (i)"),
        (APPEND, "append-only (a)"),
        (NODUMP, "nodump (d)"),
        (NOATIME, "noatime (A)"),
        (SYNC, "sync (S)"),
        (DIRSYNC, "dirsync (D)"),
    ];
    let v: Vec<&str> = names
        .iter()
        .filter(|(b, _)| f & b != 0)
        .map(|(_, n)| *n)
        .collect();
    v.join(", ")
}

impl Maps {
    /// Count non-directory `ino` and list it if it has data (`logged`: the
    /// log changes its tree) and room is left.
    fn add(&mut self, ino: u64, a: InodeAttrs, logged: bool) {
        if !a.inline.is_empty() {
            self.held += 1;
            self.held_extents += a.inline.len() as u64;
            self.held_blocks += a.inline.iter().map(|e| e.count).sum::<u64>();
        } else if a.root.addr != 0 || logged {
            self.trees += 1;
        } else {
            return;
        }
        if self.listed.len() < MAX_FILES_LISTED {
            self.listed.push((ino, a));
        } else {
            self.more += 1;
            self.others.push((ino, a));
        }
    }
}

/// The data maps: how many files keep their extents in the record or in a
/// tree, and the first files' extents (with the log's changes), each in the
/// same form wherever it is held.
fn data_maps(be: &Backend, maps: &Maps, replays: &HashMap<u64, TreeReplay>, out: &mut String) {
    if maps.held == 0 && maps.trees == 0 {
        return;
    }
    let dev = be.dev.as_ref();
    let _ = writeln!(out, "\ndata maps (after replay)");
    let _ = writeln!(
        out,
        "  files with extents in their inode record: {} ({} extents, {} blocks); with an extent tree: {}",
        maps.held, maps.held_extents, maps.held_blocks, maps.trees
    );
    let mut totals = Summed::default();
    for (ino, a) in &maps.listed {
        let at = if !a.inline.is_empty() {
            "in its record".to_string()
        } else if a.root.addr == 0 {
            "tree in the log".to_string()
        } else {
            format!("tree at block {} (depth {})", a.root.addr, a.root.depth)
        };
        let extents = datamap::data_tree(be, *ino, a, replays.get(ino))
            .and_then(|mut t| datamap::tree_extents(dev, &mut t));
        let list = match extents {
            Ok(list) => {
                totals.add(&list);
                let mut shown: Vec<String> = list.iter().take(MAX_EXTENTS_LISTED).map(show).collect();
                if list.len() > MAX_EXTENTS_LISTED {
                    shown.push(format!("... {} more", list.len() - MAX_EXTENTS_LISTED));
                }
                if shown.is_empty() {
                    "no extents".to_string()
                } else {
                    shown.join(", ")
                }
            }
            Err(e) => format!("unreadable: {e}"),
        };
        let of = if is_xattr_file(a) {
            format!(" (xattr file of inode {})", a.parent)
        } else {
            String::new()
        };
        let _ = writeln!(out, "  inode {ino}{of}: {at}: {list}");
    }
    if maps.more > 0 {
        let _ = writeln!(out, "  ... {} more files", maps.more);
    }
    for (ino, a) in &maps.others {
        match datamap::data_tree(be, *ino, a, replays.get(ino))
            .and_then(|mut t| datamap::tree_extents(dev, &mut t))
        {
            Ok(list) => totals.add(&list),
            Err(_) => totals.unreadable += 1,
        }
    }
    let unreadable = if totals.unreadable > 0 {
        format!(" ({} maps unreadable)", totals.unreadable)
    } else {
        String::new()
    };
    let _ = writeln!(
        out,
        "  summed extents: {} of {} written, covering {} blocks{unreadable}",
        totals.extents, totals.written, totals.blocks
    );
}

/// Extents with data checksums in the data maps, and the blocks they cover.
#[derive(Default)]
struct Summed {
    extents: u64,
    blocks: u64,
    /// Written extents, summed or not.
    written: u64,
    unreadable: u64,
}

impl Summed {
    fn add(&mut self, list: &[extent::Extent]) {
        for e in list.iter().filter(|e| !e.unwritten) {
            self.written += 1;
            if e.has_sums() {
                self.extents += 1;
                self.blocks += e.count;
            }
        }
    }
}

/// An extent as `datamap::show` has it, with `summed` and its first
/// block's checksum when it carries checksums.
fn show(e: &extent::Extent) -> String {
    if e.table_sums {
        return format!("{} summed in the checksum table", datamap::show(e));
    }
    match e.sums.first() {
        Some(first) => format!("{} summed {first:#010x}", datamap::show(e)),
        None => datamap::show(e),
    }
}

/// An xattr file's record (FORMAT.md 7.5).
fn is_xattr_file(a: &InodeAttrs) -> bool {
    a.mode & libc::S_IFMT == tux3::structures::xattr_file::S_IFXATTR
}

fn free_space(be: &mut Backend, out: &mut String) {
    let dev = be.dev.clone();
    let a = &be.alloc;
    let total = a.blocks();
    let _ = writeln!(out, "\nfree space (after replay)");
    let _ = writeln!(
        out,
        "  {} blocks used, {} free, of {total}",
        total - a.free(),
        a.free()
    );
    let mut listed = Vec::new();
    for index in 0..be.sb.bitmap_blocks.min(MAX_BITMAP_LISTED) {
        let at = match extent::lookup(&mut be.bitmap, dev.as_ref(), index) {
            Ok(Some(e)) => format!("{}", e.pblock + (index - e.lblock)),
            Ok(None) => "hole".to_string(),
            Err(e) => format!("unreadable ({e})"),
        };
        listed.push(format!("{index}@{at}"));
    }
    let more = be.sb.bitmap_blocks.saturating_sub(MAX_BITMAP_LISTED);
    let tail = if more > 0 {
        format!(", ... {more} more")
    } else {
        String::new()
    };
    let _ = writeln!(
        out,
        "  bitmap blocks (index@block, {} bits each): {}{tail}",
        bitmap::bits_per_block(be.bs),
        listed.join(", ")
    );
    let a = &be.alloc;
    let (mut best, mut best_at, mut runs) = (0u64, 0u64, 0u64);
    a.for_free_runs(0, total, |s, n| {
        runs += 1;
        if n > best {
            (best, best_at) = (n, s);
        }
        true
    });
    let _ = writeln!(
        out,
        "  {runs} free runs; allocator: {} groups, {} with bits in memory, {} bytes",
        bitmap::blocks_needed(be.bs, total),
        a.groups_loaded(),
        a.memory()
    );
    let _ = writeln!(out, "  largest free run: {best} blocks at block {best_at}");
}
