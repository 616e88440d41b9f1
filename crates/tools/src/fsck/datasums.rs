//! fsck of data checksums (FORMAT.md 7.2, 7.6): every written extent of a
//! file (regular file, symlink, xattr file; in a tree or in the record's
//! attributes 9 and 12) carries a CRC32C per block exactly when the volume
//! has `DATA_SUMS`, live or held by a snapshot; a live extent that lacks
//! them is repaired by computing them from the data on the device
//! (`Fix::Sums`), a snapshot's never (a snapshot does not change). With
//! `FsckOptions::data`, every summed block of the live files and of the
//! snapshots is read once (a block they share is read for the first
//! extent met, live ones first) and compared with its checksum; a
//! mismatch is a problem naming the block, every path of the file, the
//! inode, the offset and both checksums. The data cannot be mended (the
//! volume holds no other copy, and nothing says whether the data or its
//! checksum is wrong); the repair records the mismatch in the known-damage
//! list of the scrub state record (`Fix::KnownDamage`), reads of the block
//! still fail with EIO, and later checks name it as a note, not a problem,
//! while the block is mapped with that checksum.
//!
//! An extent that keeps its checksums in the checksum table (a clone's) is
//! checked the same way with the table's, each of its blocks must have
//! one there (repair computes what is missing from the data), and the
//! table holds no block that is free (repair drops those).
//!
//! Calls the device and the extent checksum helper; the names come from
//! the entries `scan` collected (reads no directory itself).

use super::names::Entry;
use super::{Findings, Fix};
use std::collections::{BTreeMap, HashMap};
use tux3::backend::alloc::sums::Sums;
use tux3::device::Device;
use tux3::structures::extent::{self, Extent};
use tux3::structures::inode::InodeAttrs;
use tux3::structures::scrub_state::{KnownDamage, MAX_KNOWN_DAMAGE};
use tux3::types::{FileType, ROOT_INO};

/// Deepest directory nesting a path is built through (a damaged namespace
/// may loop: the path then ends in `...`).
const MAX_PATH_DEPTH: usize = 4096;

/// The data blocks read so far and the mismatches among them, named at the
/// end of the pass (when every directory has been read).
#[derive(Default)]
pub(crate) struct DataScan {
    /// Blocks read and compared with their checksums.
    pub checked: u64,
    /// One bit per device block read already, against a checksum in an
    /// extent; and against the checksum table's (a block a source maps
    /// with its own checksum and its clones with the table's is compared
    /// with both).
    seen: Vec<u64>,
    seen_table: Vec<u64>,
    bad: Vec<Mismatch>,
    /// The known-damage list the volume holds (attribute 14).
    pub known: Vec<KnownDamage>,
}

impl DataScan {
    /// Mark device block `b` read; false if it was already.
    fn first_time(&mut self, b: u64, table: bool) -> bool {
        let seen = if table {
            &mut self.seen_table
        } else {
            &mut self.seen
        };
        let (word, bit) = ((b / 64) as usize, b % 64);
        if seen.len() <= word {
            seen.resize(word + 1, 0);
        }
        let fresh = seen[word] & (1 << bit) == 0;
        seen[word] |= 1 << bit;
        fresh
    }
}

struct Mismatch {
    ino: u64,
    /// The snapshot whose file it is; `None`: the live volume's.
    snapshot: Option<String>,
    lblock: u64,
    pblock: u64,
    expected: u32,
    found: u32,
}

/// Whether extent `e`, described by `at` (inode, place, extent), carries
/// checksums as the volume says: on a `DATA_SUMS` volume every written
/// extent does, elsewhere none. `live`: the extent is the live volume's
/// (one without checksums is repaired), not a snapshot's.
pub(super) fn check_form(e: &Extent, data_sums: bool, at: &str, ino: u64, live: bool, f: &mut Findings) {
    if e.unwritten {
        return;
    }
    if data_sums && e.table_sums {
        let missing = f.sum_table.as_ref().map_or(0, |t| t.missing(e.pblock, e.count));
        if missing == 0 {
            return;
        }
        let line = format!("{at}: {missing} of its blocks have no checksum in the checksum table");
        lacking_sums(line, ino, live, f);
    } else if data_sums && !e.is_summed() {
        let line = format!("{at}: no data checksums on a volume with DATA_SUMS");
        lacking_sums(line, ino, live, f);
    } else if !data_sums && e.has_sums() {
        f.problem(
            "data sums",
            format!("{at}: data checksums on a volume without DATA_SUMS"),
        );
    }
}

/// Report checksums a block lacks: a live file's are computed by repair
/// from the data on disk; a snapshot's are not (a snapshot never changes).
fn lacking_sums(line: String, ino: u64, live: bool, f: &mut Findings) {
    if live {
        f.fixable(
            "data sums",
            Fix::Sums { ino },
            format!("{line} (repair computes them from the data on disk)"),
        );
    } else {
        f.problem(
            "data sums",
            format!("{line} (a snapshot never changes: not repaired)"),
        );
    }
}

/// Read the blocks of the summed extents of inode `ino` (of `snapshot`,
/// or live) not read before and compare each with its checksum, when
/// fsck reads data at all.
pub(super) fn verify<'a>(
    dev: &dyn Device,
    ino: u64,
    snapshot: Option<&str>,
    extents: impl IntoIterator<Item = &'a Extent>,
    f: &mut Findings,
) {
    let Some(mut scan) = f.data.take() else {
        return;
    };
    let (bs, count) = (dev.block_size() as usize, dev.block_count());
    let table = f.sum_table.clone();
    for e in extents {
        // Checksums kept in the checksum table are checked as the extent's.
        let resolved = match &table {
            Some(t) if e.table_sums && e.pblock.checked_add(e.count).is_some_and(|end| end <= count) => {
                t.resolve(e)
            }
            _ => e.clone(),
        };
        let from_table = e.table_sums;
        let e = &resolved;
        // Extents outside the volume or with the wrong number of checksums
        // are reported by the structure checks.
        let inside = e.pblock.checked_add(e.count).is_some_and(|end| end <= count);
        if e.unwritten || !e.is_summed() || !inside || e.sums.len() as u64 != e.count {
            continue;
        }
        let mut buf = vec![0u8; bs.saturating_mul(e.sums.len())];
        if let Err(err) = dev.read(e.pblock, &mut buf) {
            f.problem(
                "data",
                format!("blocks {}+{}: data of inode {ino}: {err}", e.pblock, e.count),
            );
            continue;
        }
        for ((k, block), &expected) in buf.chunks(bs).enumerate().zip(&e.sums) {
            let pblock = e.pblock.saturating_add(k as u64);
            if !scan.first_time(pblock, from_table) {
                continue;
            }
            scan.checked += 1;
            let found = extent::block_sum(block);
            if found != expected {
                scan.bad.push(Mismatch {
                    ino,
                    snapshot: snapshot.map(str::to_string),
                    lblock: e.lblock.saturating_add(k as u64),
                    pblock,
                    expected,
                    found,
                });
            }
        }
    }
    f.data = Some(scan);
}

/// The checksum table (`alloc/sums.rs`) holds checksums of blocks in use
/// only: an entry on a free block is a leftover no extent may reach, and
/// repair drops it (a block allocated again would be checked against it).
pub(super) fn check_table(t: &Sums, is_used: &dyn Fn(u64) -> bool, f: &mut Findings) {
    let mut free: Vec<(u64, u64)> = Vec::new();
    for (start, c) in t.iter() {
        for k in 0..64u64 {
            let b = start.saturating_add(k);
            if c.mask & (1 << k) == 0 || is_used(b) {
                continue;
            }
            match free.last_mut() {
                Some((s, n)) if s.saturating_add(*n) == b => *n += 1,
                _ => free.push((b, 1)),
            }
        }
    }
    for (start, count) in free {
        f.fixable(
            "data sums",
            Fix::DropSums { start, count },
            format!("checksum table: blocks {start}+{count} are free but have checksums (repair drops them)"),
        );
    }
}

/// Each mismatch found as a problem, naming the file by every path the
/// live namespace (`entries`) gives it.
pub(super) fn report(inodes: &BTreeMap<u64, InodeAttrs>, entries: &[Entry], bs: u64, f: &mut Findings) {
    let Some(mut scan) = f.data.take() else {
        return;
    };
    let bad = std::mem::take(&mut scan.bad);
    if bad.is_empty() {
        f.data = Some(scan);
        return;
    }
    let names = Names::new(entries);
    let is_known = |m: &Mismatch| {
        scan.known
            .binary_search_by_key(&m.pblock, |d| d.block)
            .is_ok_and(|k| scan.known[k].expected == m.expected)
    };
    // The list a repair writes: every mismatch now on the volume (one entry
    // per block), known ones first, so a full list never drops them.
    let mut list: Vec<KnownDamage> = bad
        .iter()
        .map(|m| KnownDamage {
            block: m.pblock,
            expected: m.expected,
            found: m.found,
        })
        .collect();
    list.sort_by_key(|d| (!scan.known.iter().any(|k| k.block == d.block), d.block));
    list.dedup_by_key(|d| d.block);
    list.truncate(MAX_KNOWN_DAMAGE);
    let mut fresh = Vec::new();
    for m in &bad {
        let live = names.of_file(inodes, m.ino);
        let who = match &m.snapshot {
            None => format!("{live} (inode {})", m.ino),
            Some(s) => format!("inode {} of snapshot {s} (live: {live})", m.ino),
        };
        let line = format!(
            "block {}: data checksum mismatch in {who} at offset {} (logical block {}): \
             expected {:#010x}, found {:#010x}",
            m.pblock,
            m.lblock.saturating_mul(bs),
            m.lblock,
            m.expected,
            m.found
        );
        if is_known(m) {
            f.notes.push(format!(
                "{line}: known damage, recorded by a repair (reads of the block fail with EIO; \
                 rewrite, truncate or delete the file, or restore it from a snapshot or a copy)"
            ));
        } else if list.iter().any(|d| d.block == m.pblock) {
            fresh.push(format!(
                "{line} (the data cannot be mended: repair records it as known damage, and reads \
                 of the block keep failing with EIO)"
            ));
        } else {
            f.problem(
                "data",
                format!("{line} (not repairable: the known-damage list is full, {MAX_KNOWN_DAMAGE} blocks)"),
            );
        }
    }
    // One fix per block, so the repair names each; setting the list
    // twice sets it to the same.
    list.sort();
    for line in fresh {
        f.fixable("data", Fix::KnownDamage { list: list.clone() }, line);
    }
    f.data = Some(scan);
}

/// Paths from the directory entries, upwards to the root.
struct Names<'a> {
    /// Each directory's one entry: (parent directory, name).
    dirs: HashMap<u64, (u64, &'a [u8])>,
    entries: &'a [Entry],
}

impl<'a> Names<'a> {
    fn new(entries: &'a [Entry]) -> Names<'a> {
        let dirs = entries
            .iter()
            .filter(|e| e.kind == FileType::Directory)
            .map(|e| (e.ino, (e.dir, e.name.as_slice())))
            .collect();
        Names { dirs, entries }
    }

    /// `/`-separated path of directory `dir` (empty for the root).
    fn dir_path(&self, dir: u64) -> String {
        let mut parts: Vec<&[u8]> = Vec::new();
        let mut at = dir;
        while at != ROOT_INO {
            let Some(&(parent, name)) = self.dirs.get(&at) else {
                parts.push(b"?");
                break;
            };
            if parts.len() >= MAX_PATH_DEPTH {
                parts.push(b"...");
                break;
            }
            parts.push(name);
            at = parent;
        }
        parts
            .iter()
            .rev()
            .map(|p| format!("/{}", String::from_utf8_lossy(p)))
            .collect()
    }

    /// Every path of `ino`, comma-separated; an xattr file by its owner's.
    fn of_file(&self, inodes: &BTreeMap<u64, InodeAttrs>, ino: u64) -> String {
        if let Some(a) = inodes.get(&ino).filter(|a| super::xattrs::is_xattr_file(a)) {
            return format!("the xattr file of {} (inode {})", self.paths(a.parent), a.parent);
        }
        self.paths(ino)
    }

    /// Every path naming `ino`, comma-separated.
    fn paths(&self, ino: u64) -> String {
        let paths: Vec<String> = self
            .entries
            .iter()
            .filter(|e| e.ino == ino)
            .map(|e| format!("{}/{}", self.dir_path(e.dir), String::from_utf8_lossy(&e.name)))
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        if paths.is_empty() {
            "a file with no name".to_string()
        } else {
            paths.join(", ")
        }
    }
}

/// The record `raw` of inode `ino` (in leaf `leaf`) decoded without its
/// sums attribute, when only that attribute keeps it from decoding.
pub(super) fn without_sums(dev: &dyn Device, raw: &[u8], ino: u64, leaf: u64) -> Option<InodeAttrs> {
    let bare = tux3::structures::inode::without_sums(raw)?;
    (bare.len() != raw.len()).then_some(())?;
    InodeAttrs::decode(&bare, ino, leaf, &tux3::structures::bounds(dev)).ok()
}
