//! Volume checker: checks every invariant of a volume as the engine would
//! see it after mounting (superblock, replayed log, bitmap, every tree node,
//! namespace, link counts, block ownership, data checksums present exactly
//! on a `DATA_SUMS` volume) and, with `repair`, repairs what is safe (leaked
//! blocks, link counts, `blocks` attributes, blocks in use but marked free,
//! a damaged superblock copy — the newer one patched from the older, or
//! a field of its own found again among the values the volume offers —,
//! checksums missing from an extent, an inode-table leaf or a directory
//! that does not decode — rebuilt from what can be read of it —, inodes no
//! entry names, named in `/lost+found`, a log record that fails replay's
//! validation — replayed without —, a tree node's header or branch entry
//! and a bitmap block's index — mended in place —, the bitmap file's map
//! — rebuilt from the bitmap blocks found on the volume —, extents past a file's
//! end, an inode record one field of which can be set back — its length,
//! tag or mode bits —, or else the root's record without the attribute
//! that does not decode, a device number on a file that is no device, a
//! mode naming no type, an extent held in a record whose start went
//! astray — found again by its checksums —, a symlink's extent moved, a
//! snapshot-table entry that does not decode — passed over by the repair's
//! mount, the table rebuilt from the rest —, blocks a snapshot references
//! that nothing holds — put back on the dead list —, a dead extent no
//! snapshot holds — taken off it —, a log leaf map its leaf contradicts
//! and a commit's delta number out of step — replayed as they should
//! read —, an inode-table key out of place and a branch entry's child
//! gone astray — mended in place),
//! in rounds until what a repair uncovers is repaired too. With
//! `data` it also reads every data block of the live files and of the
//! snapshots and compares it with its checksum; a mismatch cannot be
//! mended (there is no second copy), so the repair records it as known
//! damage in the scrub state record (reads still fail; later checks name
//! it in a note), and sets back a scrub state record whose mode, link
//! count or contents are not a scrub state's.
//!
//! This file owns the public API and the order of the passes; the passes live
//! in `fsck/`: `scan` (superblocks, bitmap, inode table), `files` (each
//! inode and its data map: tree or extents held in its record), `walk`
//! (tolerant tree walker), `datasums` (data checksums: their presence and,
//! with `data`, the blocks), `logscan` (log chain and damage beyond its end),
//! `names` (namespace and link counts), `refs` (block ownership),
//! `salvage` (what a damaged leaf still holds), `superfix` (the newer
//! superblock copy patched), `superfind` (a superblock field found again),
//! `headerfix` (a node header that stops the mount, mended), `keyfix` and
//! `childfix` (an inode-table key or branch child out of place, mended)
//! and `fix` (repair through the engine).
//!
//! Calls `backend::Backend::open` (read-only replay), the structures' decoders,
//! `log::read_chain`, and for repair `frontend::Volume` (its `repair_*` hooks).
//!
//! Also in `fsck/`, what a damaged field was: `bitmapmap` (the bitmap
//! file's map, rebuilt from the bitmap blocks; `headerfix` calls it),
//! `records` (an inode record's length, tag or mode, a stray device
//! number, a lost file type, a symlink's extent) and `repoint` (a record's
//! extent gone astray, found again by its checksums).

mod bitmapmap;
mod childfix;
mod datasums;
mod files;
mod fix;
mod headerfix;
mod keyfix;
mod logscan;
mod names;
mod records;
mod refs;
mod repoint;
mod salvage;
mod scan;
mod scrub_state;
mod shared;
mod snapshots;
mod superfind;
mod superfix;
pub(crate) mod walk;
mod xattrs;

pub(crate) use logscan::follow;
pub(crate) use walk::walk;

use std::collections::HashMap;
use std::sync::Arc;
use tux3::device::Device;
use tux3::error::{Error, Result};

/// What fsck should do.
#[derive(Debug, Clone, Default)]
pub struct FsckOptions {
    /// Repair what can be repaired.
    pub repair: bool,
    /// Show a progress bar (on a terminal).
    pub progress: bool,
    /// Read every data block of the live files and of the snapshots (a
    /// block they share once) and compare it with its checksum. Off by
    /// default: it reads all the data, where the other checks read the
    /// metadata only.
    pub data: bool,
}

/// What fsck found.
#[derive(Debug, Clone, Default)]
pub struct FsckReport {
    /// One line per problem still present, naming the block/inode.
    pub problems: Vec<String>,
    /// One line per problem repaired.
    pub repaired: Vec<String>,
    /// Observations that are not problems: what a crash can leave (a torn
    /// block at the end of the log), for the record.
    pub notes: Vec<String>,
    /// Counts for the summary line.
    pub inodes: u64,
    pub blocks_used: u64,
    /// Blocks in use that nothing references, and the ranges they form
    /// (every one is listed in `problems`; after a repair, what is left).
    pub leaked: Tally,
    /// Blocks two owners claim, and the ranges they form.
    pub claimed_twice: Tally,
    /// Leaked blocks the repair freed (the sum of the ranges it repaired).
    pub freed: u64,
    /// Blocks in use that the next unify frees: the log since the last
    /// unify and the nodes of the last unify's image the log took out of
    /// their trees. A repair ends with a unify, so these come back too.
    pub unify_frees: u64,
    /// Data blocks read and compared with their checksums (`data` only).
    pub data_checked: Option<u64>,
    /// What the volume refers to, as [`referenced_blocks`] lists it (empty
    /// when it did not open).
    pub referenced: Vec<(u64, u64)>,
}

/// A count of blocks and of the ranges they form.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    pub blocks: u64,
    pub ranges: u64,
}

impl Tally {
    pub(crate) fn add(&mut self, blocks: u64) {
        self.blocks += blocks;
        self.ranges += 1;
    }
}

/// Most lines reported per kind of problem; the rest are counted. Leaked
/// and doubly claimed ranges are all listed: a repair acts on each.
const MAX_LINES_PER_KIND: usize = 100;
/// Kinds listed whole, whatever their number.
const LISTED_WHOLE: &[&str] = &["leak", "overlap"];

/// A repair fsck knows how to make safely.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Fix {
    /// Set the link count of `ino`.
    Nlink { ino: u64, nlink: u32 },
    /// Set the `blocks` attribute of `ino`.
    Blocks { ino: u64, blocks: u64 },
    /// Free blocks in use that nothing references.
    Free { start: u64, count: u64 },
    /// Mark blocks in use that are referenced (by one owner) but marked free.
    MarkUsed { start: u64, count: u64 },
    /// Drop `owner`'s reference to xattr file `xf` (if it names it) and
    /// free `xf` (if it is an xattr file); `owner` 0: nobody names it.
    XattrFile { owner: u64, xf: u64 },
    /// Rewrite the damaged superblock copy (the next unify writes it).
    Superblock { copy: u64 },
    /// Take out inode `ino`'s record, which does not decode (its blocks
    /// are leaks the same repair frees).
    DropRecord { ino: u64 },
    /// Remove directory `dir`'s entry `name`, which names no inode.
    DropEntry { dir: u64, name: Vec<u8> },
    /// Give directory `dir`, whose tree is damaged, a new one holding
    /// `entries` (name, inode): what could be read of the old one.
    RebuildDir { dir: u64, entries: Vec<(Vec<u8>, u64)> },
    /// Name inode `ino`, which no entry names, in `/lost+found`.
    Reattach { ino: u64 },
    /// Set directory `ino`'s parent attribute to `parent`, the directory
    /// whose entry names it (its only one).
    Parent { ino: u64, parent: u64 },
    /// Replace the inode-table leaf with separator `sep`, which does not
    /// decode, by the `records` (inode, record) read from it.
    ItableLeaf { sep: u64, records: Vec<(u64, Vec<u8>)> },
    /// Give each inode-table leaf (address, separator, first key) its
    /// first key as separator.
    ItableSeps { seps: Vec<(u64, u64, u64)> },
    /// Delete the snapshot `name`, whose image is damaged.
    DeleteSnapshot { name: Vec<u8> },
    /// Put blocks `start..+count`, born in `birth`, that a snapshot's
    /// image references and nothing holds, on the dead list.
    Bury { start: u64, count: u64, birth: u32 },
    /// Take the dead extent at `start`, which no snapshot holds, off the
    /// dead list (its blocks, if nothing else references them, are leaks).
    Unbury { start: u64 },
    /// Set the shared-extent table's count of blocks `start..+count` to
    /// `refs`, the times the files map them (below 2: no run).
    SharedRefs { start: u64, count: u64, refs: u32 },
    /// Give the written extents of `ino` that lack checksums those of
    /// their blocks as the device holds them (a `DATA_SUMS` volume), in
    /// the extent or, for one that keeps them there, in the checksum table.
    Sums { ino: u64 },
    /// Drop the checksum table's entries of blocks `start..+count`, which
    /// are free.
    DropSums { start: u64, count: u64 },
    /// Give inode `ino` the record `record`: what decodes of its damaged one.
    Record { ino: u64, record: Vec<u8> },
    /// Make `list` the volume's known-damage list (the data checksum
    /// mismatches found, which nothing can mend).
    KnownDamage {
        list: Vec<tux3::structures::scrub_state::KnownDamage>,
    },
    /// Set inode 4's record back to a scrub state record's.
    ScrubRecord,
    /// Take out of `ino`'s map the extents past the end of the file.
    TrimPastEnd { ino: u64 },
    /// Replay the log passing over the records that fail validation, and
    /// read the snapshot table passing over its entries that do (the
    /// repair's open does; `Backend::open_with`).
    SkipRecords,
}

/// Problems and repairs collected by the passes.
#[derive(Default)]
pub(crate) struct Findings {
    pub problems: Vec<String>,
    /// Not problems: see [`FsckReport::notes`].
    pub notes: Vec<String>,
    /// Each repair with the problem line it repairs.
    pub fixes: Vec<(Fix, String)>,
    /// Problems no fix repairs.
    pub unfixable: usize,
    per_kind: HashMap<&'static str, usize>,
    /// Leaked blocks and ranges (`refs`).
    pub leaked: Tally,
    /// Blocks claimed twice and their ranges (`refs`).
    pub twice: Tally,
    /// The data blocks read and what they showed, when fsck reads them.
    pub data: Option<datasums::DataScan>,
    /// The volume's checksum table (checksums kept by device block).
    pub sum_table: Option<tux3::backend::alloc::SumsHandle>,
}

impl Findings {
    /// Record a problem of kind `kind`.
    pub fn problem(&mut self, kind: &'static str, line: String) {
        self.unfixable += 1;
        self.push(kind, line);
    }

    /// Record a problem that a fix recorded already repairs.
    pub fn also(&mut self, kind: &'static str, line: String) {
        self.push(kind, line);
    }

    fn push(&mut self, kind: &'static str, line: String) {
        let n = self.per_kind.entry(kind).or_default();
        *n += 1;
        if *n <= MAX_LINES_PER_KIND || LISTED_WHOLE.contains(&kind) {
            self.problems.push(line);
        }
    }

    /// Record a problem that `fix` repairs.
    pub fn fixable(&mut self, kind: &'static str, fix: Fix, line: String) {
        self.fixes.push((fix, line.clone()));
        self.push(kind, line);
    }

    /// Record problems `lines` that one `fix` repairs (each line says
    /// `how`).
    pub fn fixable_all(&mut self, kind: &'static str, fix: Fix, lines: Vec<String>, how: &str) {
        let mut lines = lines.into_iter().map(|l| format!("{l} ({how})"));
        if let Some(first) = lines.next() {
            self.fixable(kind, fix, first);
        }
        for line in lines {
            self.also(kind, line);
        }
    }

    /// Record an engine error as a problem (a corrupt block names itself).
    pub fn error(&mut self, kind: &'static str, context: &str, e: &Error) {
        self.problem(kind, describe(context, e));
    }

    /// Problems left out by the per-kind limit, as summary lines.
    fn finish(&mut self) {
        let mut over: Vec<_> = self
            .per_kind
            .iter()
            .filter(|(k, n)| **n > MAX_LINES_PER_KIND && !LISTED_WHOLE.contains(k))
            .map(|(k, n)| (*k, *n - MAX_LINES_PER_KIND))
            .collect();
        over.sort();
        for (kind, n) in over {
            self.problems
                .push(format!("... and {n} more problems of kind \"{kind}\""));
        }
    }
}

/// One line for an engine error: corrupt blocks lead with "block N".
pub(crate) fn describe(context: &str, e: &Error) -> String {
    // An error that already begins with the context ("inode 17: ...")
    // does not name it twice.
    let named = |what: &str| {
        what.strip_prefix(context)
            .and_then(|rest| rest.strip_prefix(": "))
            .map_or_else(|| format!("{context}: {what}"), |_| what.to_string())
    };
    match e {
        Error::Corrupt { block, what } => format!("block {block}: {}", named(what)),
        other => named(&other.to_string()),
    }
}

/// Result of one read-only pass over the volume.
pub(crate) struct Pass {
    pub findings: Findings,
    pub inodes: u64,
    pub blocks_used: u64,
    /// See [`FsckReport::unify_frees`].
    pub unify_frees: u64,
    /// Every referenced block range and its owner (when the volume opened).
    pub refs: Vec<refs::Ref>,
    /// Inode-table keys out of place to mend in place (`keyfix`).
    pub keyfixes: Vec<keyfix::KeyFix>,
}

/// Most repair rounds of one `check`: a repair may uncover what the damage
/// hid (a rebuilt directory's old blocks are leaks, the files its lost
/// entries named are unnamed), which the next round repairs.
const MAX_ROUNDS: usize = 6;

/// Check every invariant of the volume on `dev`.
pub fn check(dev: Arc<dyn Device>, opts: &FsckOptions) -> Result<FsckReport> {
    let mut repaired: Vec<String> = Vec::new();
    let first = scan::pass(dev.clone(), opts);
    // A superblock copy whose own fields are wrong: the values the volume
    // offers are tried until the volume checks clean with one.
    if opts.repair && (superblock_suspect(&first) || superfind::roots_disagree(dev.as_ref())) {
        let check = |view: Arc<dyn Device>| match scan::pass(view, &FsckOptions::default()) {
            Ok(p) if p.refs.is_empty() => superfind::Checked::Unmountable,
            Ok(p) if p.findings.problems.is_empty() => superfind::Checked::Clean,
            Ok(_) => superfind::Checked::Mounted,
            Err(_) => superfind::Checked::Unmountable,
        };
        if let Some(found) = superfind::recover(&dev, check) {
            dev.write(found.copy, &found.block)?;
            dev.flush()?;
            repaired.push(found.line);
        }
    }
    let mut pass = match first {
        Ok(p) if repaired.is_empty() => p,
        _ => scan::pass(dev.clone(), opts)?,
    };
    // The newer superblock copy damaged in a field both copies share: the
    // older one would mount an older state (or none, its trees reused),
    // so the newer is patched from it first.
    if opts.repair {
        if let Some((copy, block)) = superfix::patched(dev.as_ref()) {
            dev.write(copy, &block)?;
            dev.flush()?;
            repaired.push(format!(
                "block {copy}: superblock copy {copy}, the newer, rewritten with the fields \
                 both copies share taken from the other"
            ));
            pass = scan::pass(dev.clone(), opts)?;
        }
        // A node whose header alone stops the mount, mended in place.
        let mended = headerfix::mend(&dev, &pass.findings.problems)?;
        if !mended.is_empty() {
            repaired.extend(mended);
            pass = scan::pass(dev.clone(), opts)?;
        }
        // An inode-table key out of place, or a branch entry's child gone
        // astray, mended in place.
        let keys = keyfix::mend(dev.as_ref(), &pass.keyfixes)?;
        if !keys.is_empty() {
            repaired.extend(keys);
            pass = scan::pass(dev.clone(), opts)?;
        }
    }
    let mut freed = 0;
    let mut last: Vec<Fix> = Vec::new();
    for _ in 0..MAX_ROUNDS {
        if !opts.repair || pass.findings.fixes.is_empty() {
            break;
        }
        // Rewriting a superblock copy commits to the copy in use: only when
        // nothing else is wrong with what it describes.
        let unfixable = pass.findings.unfixable > 0;
        let fixes: Vec<(Fix, String)> = pass
            .findings
            .fixes
            .iter()
            .filter(|(fix, _)| !(unfixable && matches!(fix, Fix::Superblock { .. })))
            .cloned()
            .collect();
        // Nothing to do, or the same repairs again: they do not hold.
        let now: Vec<Fix> = fixes.iter().map(|(f, _)| f.clone()).collect();
        if fixes.is_empty() || now == last {
            break;
        }
        match fix::apply(dev.clone(), &fixes) {
            Ok(done) => repaired.extend(done),
            Err(e) => {
                let mut r = report(pass, repaired);
                r.freed = freed;
                let what = if r.repaired.is_empty() {
                    "repair failed, nothing was changed"
                } else {
                    "repair failed, the repairs listed were made"
                };
                r.problems.push(describe(what, &e));
                return Ok(r);
            }
        }
        freed += fixes
            .iter()
            .map(|(fix, _)| match *fix {
                Fix::Free { count, .. } => count,
                _ => 0,
            })
            .sum::<u64>();
        last = now;
        pass = scan::pass(dev.clone(), opts)?;
    }
    let mut r = report(pass, repaired);
    r.freed = freed;
    Ok(r)
}

/// Problems that may come of a superblock field: a copy named, a mount
/// that fails (or replays only without a record), a log that does not
/// start where the superblock says, a dead list no snapshot holds, a flag
/// missing, a root of the wrong level. (A commit whose delta number is
/// below the superblock's next delta is the log's to mend: its replay
/// takes the lowest number allowed, whichever of the two was wrong.)
const SUPERBLOCK_SIGNS: &[&str] = &[
    ": superblock copy ",
    "cannot be mounted",
    "reserved next log block",
    "no snapshot holds them",
    "the superblock (",
    "inode table node: ",
];

/// Whether a pass points at a superblock copy: no usable copy or one
/// beyond the device, a copy the check names, a volume that does not mount
/// or a log that does not start where the superblock says.
fn superblock_suspect(first: &Result<Pass>) -> bool {
    match first {
        Err(Error::BadImage(_)) => true,
        Err(_) => false,
        Ok(p) => {
            p.refs.is_empty()
                || p.findings
                    .problems
                    .iter()
                    .any(|l| SUPERBLOCK_SIGNS.iter().any(|s| l.contains(s)))
        }
    }
}

fn report(mut pass: Pass, repaired: Vec<String>) -> FsckReport {
    pass.findings.finish();
    let referenced = readable(&pass.refs);
    FsckReport {
        referenced,
        problems: pass.findings.problems,
        notes: pass.findings.notes,
        repaired,
        inodes: pass.inodes,
        blocks_used: pass.blocks_used,
        leaked: pass.findings.leaked,
        claimed_twice: pass.findings.twice,
        freed: 0,
        unify_frees: pass.unify_frees,
        data_checked: pass.findings.data.as_ref().map(|d| d.checked),
    }
}

/// Every block the volume refers to, as the engine would see it after
/// mounting: metadata as [`metadata_blocks`] lists it, file data of the
/// live volume and of every snapshot, the dead list and nodes the next
/// unify frees — everything whose contents someone may read. The reserved
/// next log block is left out: it holds nothing yet (replay reads it only
/// to find that no valid block follows the chain). Ranges `(start,
/// count)`, sorted and merged. The crash harness checks that no block whose
/// last change was a discard is among them.
pub fn referenced_blocks(dev: Arc<dyn Device>) -> Result<Vec<(u64, u64)>> {
    let pass = scan::pass(dev, &FsckOptions::default())?;
    if pass.refs.is_empty() {
        let why = pass.findings.problems.join("; ");
        return Err(Error::BadImage(format!("cannot list references: {why}")));
    }
    Ok(readable(&pass.refs))
}

/// The ranges of `refs` whose contents someone may read (all but the
/// reserved next log block), sorted and merged.
fn readable(refs: &[refs::Ref]) -> Vec<(u64, u64)> {
    let mut v: Vec<(u64, u64)> = refs
        .iter()
        .filter(|r| !matches!(r.owner, refs::Owner::LogReserved))
        .map(|r| (r.start, r.count))
        .collect();
    v.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(v.len());
    for (s, c) in v {
        match out.last_mut() {
            Some((ls, lc)) if s <= *ls + *lc => *lc = (*lc).max(s + c - *ls),
            _ => out.push((s, c)),
        }
    }
    out
}

/// Every block holding metadata, as the engine would see the volume after
/// mounting: both superblock copies, bitmap blocks, every node of the bitmap
/// file, the inode table and every file tree, and the committed log blocks
/// since the last unify. File data and the reserved next log block (which
/// holds nothing yet) are left out. Sorted, without duplicates.
pub fn metadata_blocks(dev: Arc<dyn Device>) -> Result<Vec<u64>> {
    let pass = scan::pass(dev, &FsckOptions::default())?;
    if pass.refs.is_empty() {
        // The volume did not open: the first problem says why.
        let why = pass.findings.problems.join("; ");
        return Err(Error::BadImage(format!("cannot list metadata: {why}")));
    }
    let mut out: Vec<u64> = pass
        .refs
        .iter()
        .filter(|r| r.owner.is_metadata())
        .flat_map(|r| r.start..r.start.saturating_add(r.count))
        .collect();
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::describe;
    use tux3::Error;

    #[test]
    fn a_problem_names_its_context_once() {
        let named = Error::corrupt(5, "inode 17: mode 0 names no file type".to_string());
        assert_eq!(
            describe("inode 17", &named),
            "block 5: inode 17: mode 0 names no file type"
        );
        let bare = Error::corrupt(5, "bad length".to_string());
        assert_eq!(describe("inode 17", &bare), "block 5: inode 17: bad length");
        // Another inode's name is not this one's.
        let other = Error::corrupt(5, "inode 170: bad".to_string());
        assert_eq!(describe("inode 17", &other), "block 5: inode 17: inode 170: bad");
    }
}
