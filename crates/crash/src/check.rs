//! Checking one crash image against the promises (DESIGN.md section 3):
//!
//! 1. integrity: `Fs::open` succeeds on a `MemDevice::from_image` copy, the
//!    namespace walk succeeds, `close` succeeds, and `fsck::check` reports
//!    no problem — run with `data`, so it also reads every block of every
//!    summed extent (live trees, maps held in inode records, snapshots'
//!    trees) and compares it with its checksum: no crash state has a
//!    pointer whose checksum disagrees with the block it points to
//!    (promise 9, FORMAT.md 7.6);
//! 2. durability, 3. atomicity, 4. ordering: the recovered snapshot equals
//!    the expected snapshot after some completed call `j` with
//!    `lo <= j <= hi`, where `lo` is the last durability point whose final
//!    flush is in the durable prefix and `hi` the last call that started
//!    before the epoch's closing flush. Equality with a prefix state means
//!    each write is whole or absent, each rename happened or not, and
//!    nothing later is durable without everything earlier;
//! 5. replay is read-only: after open, walk, close (no changes) and fsck the
//!    image is byte for byte what it was, and the device counted 0 blocks
//!    written and 0 flushes. (A crash during replay therefore leaves the
//!    same image: it needs no states of its own.) One exception: if the
//!    crash left orphans (files open and unlinked), the writable mount frees
//!    them in its first delta, which the close commits; then only the open
//!    must have written nothing, and fsck checks the image the close left.
//!
//! 7. snapshots: the snapshots the recovered volume lists (those being
//!    deleted left out) are those after a call whose namespace the
//!    recovered one matched (any call of the window when it matched none
//!    exactly, under a fast fsync's relaxation); and the newest two and two
//!    more chosen by the state, each read through a read-only mount of it,
//!    hold exactly the namespace of the live volume when it was taken
//!    (`record.rs`). So a crash leaves each snapshot wholly there or
//!    wholly gone, and never changes one.
//!
//! 8. discard (promise 11): no block whose last change before the crash
//!    is a discard (`states::discarded_in`: every discard issued before
//!    the epoch's closing flush, no write to the block landing after it,
//!    nor a torn one that reads back whole) is
//!    one the recovered volume refers to (fsck's reference walk of the
//!    crash image: the walk of the fsck above, the image being unchanged,
//!    or `referenced_blocks` of a copy when the mount freed orphans and
//!    changed it). A discarded
//!    block may read back as anything, so a volume that still needs one
//!    has lost it; this holds whether or not the device zeroes it.
//!
//! A fast fsync (one during which no delta commit ended) promises its inodes and the name changes connected to
//! them, which may then be durable ahead of unrelated earlier changes.
//! [`Ordering::FsyncMayLead`] (the default) also accepts state `j`
//! (`lo_full <= j <= hi`) with the *closures* of the first `n` fast fsyncs
//! after `j` applied in order, `n` taking in every one that returned before
//! the crash epoch. The closure of fast fsync `k` against the state `e`
//! before it (`j` with the earlier closures applied): starting from its
//! fsynced inodes, each path whose inode differs between `e` and snapshot
//! `k` (or is absent from one) where either inode is in the set, adding
//! both, until nothing changes. Applying it sets each of its paths to its
//! state at `k`, present or absent (a rename or unlink is whole or not
//! there), and each node of one of its inodes to its state at `k` (logged
//! whole). Directories may differ in size. [`Ordering::Strict`] does not
//! relax. The closures and the states they accept are worked out in
//! `check/closure.rs`.

mod closure;

use super::record::{read_snapshot, snapshot_names, Recording};
use super::snapshot::Snapshot;
use closure::leads_by_fsync;
use std::collections::BTreeSet;
use std::sync::Arc;
use tux3::api::Fs;
use tux3::device::{Device, MemDevice, RecordedOp};
use tux3::types::OpenOptions;
use tux3_tools::fsck::{self, FsckOptions};

/// Which promise a violation breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Promise {
    /// Mount fails, the walk fails, or fsck finds problems.
    Integrity,
    /// The recovered state lacks something a completed sync/fsync covered.
    Durability,
    /// The recovered state is no prefix of the completed calls.
    AtomicityOrdering,
    /// Mounting and unmounting changed the image or wrote to the device.
    ReplayReadOnly,
    /// A snapshot is missing, or there when it should not be, or does
    /// not hold what the volume did when it was taken.
    Snapshots,
    /// The volume refers to a block that was discarded.
    Discard,
}

/// How strictly recovered states must follow the order of calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Ordering {
    /// The recovered state is the state after a prefix of the calls, and
    /// every fsync is a durability point for everything before it (an
    /// fsync that commits the whole delta, or `-o fsync=strict`).
    Strict,
    /// As strict, except for fsyncs that did not commit the whole delta
    /// (no delta commit ended during them: a fast fsync). Such an fsync
    /// promises its inodes and the name changes connected to them (its name
    /// closure, see the module doc), which may be durable ahead of earlier
    /// changes: a state may be an earlier one with the closures of the
    /// following fast fsyncs applied whole and in order, and directories may
    /// lag in size. An engine whose every fsync is a full commit is checked
    /// exactly as under `Strict`.
    #[default]
    FsyncMayLead,
}

/// The calls a state may match: snapshots `lo..=hi` (index 0 is before
/// the first call, `i + 1` after call `i`), for a crash in the epoch that
/// starts at log position `start`.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    pub lo: usize,
    pub hi: usize,
    /// Like `lo`, counting no fast fsync as a durability point.
    pub lo_full: usize,
    pub start: usize,
}

/// Window of a crash in the epoch spanning log positions `start..end`
/// (`end` is the closing flush).
pub fn window(rec: &Recording, start: usize, end: usize) -> Window {
    // A call's durability is settled at the last write or flush before it
    // returned: the discards that online discard issues after a durable
    // commit (this call's or an earlier one's) change nothing it promised.
    let settled = |o: &super::record::OpRecord| {
        let mut end = o.end;
        while end > 0 && matches!(rec.log.get(end - 1), Some(RecordedOp::Discard { .. })) {
            end -= 1;
        }
        end
    };
    let last = |full: bool| {
        rec.ops
            .iter()
            .enumerate()
            .filter(|(_, o)| o.durable && settled(o) <= start && !(full && o.is_fast_fsync()))
            .map(|(i, _)| i + 1)
            .max()
            .unwrap_or(0)
    };
    let (lo, lo_full) = (last(false), last(true));
    let hi = rec
        .ops
        .iter()
        .enumerate()
        .filter(|(_, o)| o.start <= end)
        .map(|(i, _)| i + 1)
        .max()
        .unwrap_or(0);
    Window {
        lo,
        hi: hi.max(lo),
        lo_full,
        start,
    }
}

/// Check one crash image; returns the broken promises with a description.
/// `same` tells whether an image equals the one given (the caller keeps no
/// copy: comparing against the image's recipe saves copying it).
pub fn check(
    image: Vec<u8>,
    same: impl Fn(&[u8]) -> bool,
    rec: &Recording,
    w: Window,
    mode: Ordering,
    discarded: &BTreeSet<u64>,
) -> Vec<(Promise, String)> {
    let mut out = Vec::new();
    // Counters right after the open, when the crash left orphans.
    let mut freed_orphans = None;
    // The crash image as it was, for the discard check when the mount
    // changes it (it frees orphans); otherwise fsck's walk below serves.
    let pristine = (!discarded.is_empty()).then(|| image.clone());
    let mem = Arc::new(MemDevice::from_image(rec.block_size, image));
    let dev: Arc<dyn Device> = mem.clone();
    let opts = OpenOptions {
        commit_interval: None,
        ..rec.open.clone()
    };
    match Fs::open(dev.clone(), opts) {
        Err(e) => out.push((Promise::Integrity, format!("mount failed: {e}"))),
        Ok(fs) => {
            if fs.stats().replayed_orphans > 0 {
                freed_orphans = Some(mem.counters());
            }
            let snap = Snapshot::take(&fs);
            let names = snapshot_names(&fs);
            if let Err(e) = fs.close() {
                out.push((Promise::Integrity, format!("close after mount failed: {e}")));
            }
            match (snap, names) {
                (Err(e), _) => out.push((Promise::Integrity, format!("namespace walk failed: {e}"))),
                (_, Err(e)) => out.push((Promise::Integrity, format!("snapshot list failed: {e}"))),
                (Ok(snap), Ok(names)) => {
                    if let Some(v) = compare(&snap, rec, w, mode) {
                        out.push(v);
                    }
                    out.extend(check_snapshots(&dev, &snap, &names, rec, w));
                }
            }
        }
    }
    let every_block = FsckOptions {
        data: true,
        ..FsckOptions::default()
    };
    let report = fsck::check(dev.clone(), &every_block);
    if let Some(pristine) = pristine {
        let refs = match (&report, freed_orphans) {
            (Ok(r), None) if !r.referenced.is_empty() => Some(r.referenced.clone()),
            _ => {
                let dev: Arc<dyn Device> = Arc::new(MemDevice::from_image(rec.block_size, pristine));
                fsck::referenced_blocks(dev).ok()
            }
        };
        out.extend(refs.and_then(|r| check_discarded(&r, discarded)));
    }
    match report {
        Err(e) => out.push((Promise::Integrity, format!("fsck failed: {e}"))),
        Ok(r) if !r.problems.is_empty() => {
            let mut lines = r.problems.clone();
            if lines.len() > 6 {
                let more = lines.len() - 6;
                lines.truncate(6);
                lines.push(format!("... and {more} more"));
            }
            out.push((Promise::Integrity, format!("fsck: {}", lines.join(" | "))));
        }
        Ok(_) => {}
    }
    let (c, what) = match freed_orphans {
        Some(c) => (c, "mount (before freeing orphans)"),
        None => (mem.counters(), "mount/close/fsck"),
    };
    if c.blocks_written != 0 || c.flushes != 0 {
        out.push((
            Promise::ReplayReadOnly,
            format!(
                "{what} wrote {} blocks and issued {} flushes",
                c.blocks_written, c.flushes
            ),
        ));
    }
    if freed_orphans.is_none() && !same(&mem.image()) {
        out.push((
            Promise::ReplayReadOnly,
            "mount/close/fsck changed the image".into(),
        ));
    }
    out
}

/// Promise 8: the crash image's volume, which refers to `refs` (as a
/// mount would replay it), refers to none of the `discarded` blocks. A
/// volume that does not open is left to the integrity check.
fn check_discarded(refs: &[(u64, u64)], discarded: &BTreeSet<u64>) -> Option<(Promise, String)> {
    let hits: Vec<String> = refs
        .iter()
        .filter_map(|&(s, c)| discarded.range(s..s.saturating_add(c)).next().map(|b| (b, s, c)))
        .take(4)
        .map(|(b, s, c)| format!("block {b} (in referenced range {s}+{c})"))
        .collect();
    (!hits.is_empty()).then(|| {
        (
            Promise::Discard,
            format!("the volume refers to discarded blocks: {}", hits.join(", ")),
        )
    })
}

/// Snapshots read back per crash state besides the newest two.
const SNAPSHOTS_SAMPLED: usize = 2;

/// Promise 7 on a recovered volume that lists the snapshots `names`
/// (oldest first) and holds the namespace `snap` (see the module doc).
fn check_snapshots(
    dev: &Arc<dyn Device>,
    snap: &Snapshot,
    names: &[Vec<u8>],
    rec: &Recording,
    w: Window,
) -> Option<(Promise, String)> {
    let got: BTreeSet<Vec<u8>> = names.iter().cloned().collect();
    let fp = snap.fingerprint();
    let exact: Vec<usize> = (w.lo..=w.hi).filter(|&j| rec.fingerprints[j] == fp).collect();
    let allowed = if exact.is_empty() {
        (w.lo..=w.hi).collect()
    } else {
        exact
    };
    let shown = |s: &BTreeSet<Vec<u8>>| {
        let v: Vec<String> = s
            .iter()
            .map(|n| String::from_utf8_lossy(n).into_owned())
            .collect();
        v.join(",")
    };
    if !allowed.iter().any(|&j| *rec.snapset(j) == got) {
        let best = allowed
            .iter()
            .copied()
            .min_by_key(|&j| rec.snapset(j).symmetric_difference(&got).count())
            .unwrap_or(w.lo);
        let want = rec.snapset(best);
        return Some((
            Promise::Snapshots,
            format!(
                "snapshots [{}] missing, [{}] present, against state {best} of those allowed ({allowed:?})",
                shown(&want.difference(&got).cloned().collect()),
                shown(&got.difference(want).cloned().collect()),
            ),
        ));
    }
    // The newest two, and more chosen by the state.
    let mut pick: Vec<usize> = (names.len().saturating_sub(2)..names.len()).collect();
    let mut r = super::Rng::new(fp as u64 ^ w.start as u64);
    for _ in 0..SNAPSHOTS_SAMPLED.min(names.len()) {
        pick.push(r.below(names.len() as u64) as usize);
    }
    pick.sort_unstable();
    pick.dedup();
    for i in pick {
        let name = &names[i];
        let shown = String::from_utf8_lossy(name);
        let Some(want) = rec.snap_contents.get(name) else {
            return Some((Promise::Snapshots, format!("snapshot {shown} was never taken")));
        };
        match read_snapshot(dev, name) {
            Err(e) => return Some((Promise::Snapshots, format!("snapshot {shown}: {e}"))),
            Ok(held) if held != *want => {
                return Some((
                    Promise::Snapshots,
                    format!(
                        "snapshot {shown} holds other than when it was taken: {}",
                        held.diff(want, 6).join("; ")
                    ),
                ))
            }
            Ok(_) => {}
        }
    }
    None
}

/// Compare a recovered snapshot with the expected ones; `None` if accepted.
pub(super) fn compare(
    snap: &Snapshot,
    rec: &Recording,
    w: Window,
    mode: Ordering,
) -> Option<(Promise, String)> {
    let fp = snap.fingerprint();
    if rec.fingerprints[w.lo..=w.hi].contains(&fp) {
        return None;
    }
    if mode == Ordering::FsyncMayLead && (w.lo_full..=w.hi).any(|j| leads_by_fsync(snap, rec, j, w)) {
        return None;
    }
    let older = rec.fingerprints[..w.lo].iter().rposition(|f| *f == fp);
    // Explain against the closest allowed state.
    let best = (w.lo..=w.hi)
        .min_by_key(|&j| snap.distance(&rec.snaps[j]))
        .unwrap_or(w.lo);
    let diff = snap.diff(&rec.snaps[best], 8).join("; ");
    let call = |j: usize| match j {
        0 => "before the first call".to_string(),
        j => format!("after call {} ({})", j - 1, rec.ops[j - 1].desc),
    };
    match older {
        Some(j) => Some((
            Promise::Durability,
            format!(
                "recovered the state {}, but {} was durable; vs the closest allowed state ({}): {diff}",
                call(j),
                call(w.lo),
                call(best)
            ),
        )),
        None => Some((
            Promise::AtomicityOrdering,
            format!(
                "recovered state matches no state from {} to {}; vs the closest ({}): {diff}",
                call(w.lo),
                call(w.hi),
                call(best)
            ),
        )),
    }
}
