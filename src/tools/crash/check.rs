//! Checking one crash image against the promises (DESIGN.md section 3):
//!
//! 1. integrity: `Fs::open` succeeds on a `MemDevice::from_image` copy, the
//!    namespace walk succeeds, `close` succeeds, and `fsck::check` reports
//!    no problem;
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
//! A fast fsync (one that does not commit the whole delta) promises only its
//! inode, which may then be durable ahead of unrelated earlier changes:
//! [`Ordering::FsyncMayLead`] (the default) allows exactly that for fsyncs
//! observed to issue fewer than two flushes; [`Ordering::Strict`] does not.

use super::record::Recording;
use super::snapshot::{Node, Snapshot};
use crate::api::types::{FileType, OpenOptions};
use crate::api::Fs;
use crate::device::{Device, MemDevice};
use crate::tools::fsck::{self, FsckOptions};
use std::sync::Arc;

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
}

/// How strictly recovered states must follow the order of calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Ordering {
    /// The recovered state is the state after a prefix of the calls, and
    /// every fsync is a durability point for everything before it (an
    /// fsync that commits the whole delta, or `-o fsync=strict`).
    Strict,
    /// As strict, except for fsyncs that did not commit the whole delta
    /// (they issued fewer than two flushes: a fast fsync). Such an fsync
    /// promises only its inode, and that inode may be durable ahead of
    /// earlier changes: paths may match their state after a later fast fsync
    /// of their inode, and directories may lag in size. An engine whose
    /// every fsync is a full commit is checked exactly as under `Strict`.
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
    let last = |full: bool| {
        rec.ops
            .iter()
            .enumerate()
            .filter(|(_, o)| o.durable && o.end <= start && !(full && o.is_fast_fsync()))
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
) -> Vec<(Promise, String)> {
    let mut out = Vec::new();
    // Counters right after the open, when the crash left orphans.
    let mut freed_orphans = None;
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
            if let Err(e) = fs.close() {
                out.push((Promise::Integrity, format!("close after mount failed: {e}")));
            }
            match snap {
                Err(e) => out.push((Promise::Integrity, format!("namespace walk failed: {e}"))),
                Ok(snap) => {
                    if let Some(v) = compare(&snap, rec, w, mode) {
                        out.push(v);
                    }
                }
            }
        }
    }
    match fsck::check(dev.clone(), &FsckOptions::default()) {
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

/// Under a fast fsync: `snap` equals state `j` except for paths whose
/// inode a later fast fsync (up to `hi`) covered, which match their state
/// right after that fsync, and directories, which may differ in size. Every
/// fast fsync that completed before the crash (after `j`) must be there.
fn leads_by_fsync(snap: &Snapshot, rec: &Recording, j: usize, w: Window) -> bool {
    let fast: Vec<usize> = (j + 1..=w.hi)
        .filter(|&k| rec.ops[k - 1].is_fast_fsync())
        .collect();
    if fast.is_empty() {
        return false;
    }
    let base = &rec.snaps[j];
    // Snapshot `k` is a state of `p` some fast fsync of its inode left.
    let fsynced = |p: &Vec<u8>, got: &Node, from: usize| {
        fast.iter().any(|&k| {
            k >= from && rec.ops[k - 1].fsynced.contains(&got.ino) && rec.snaps[k].entries.get(p) == Some(got)
        })
    };
    let mut paths: Vec<&Vec<u8>> = snap.entries.keys().chain(base.entries.keys()).collect();
    paths.sort();
    paths.dedup();
    let each = paths
        .into_iter()
        .all(|p| match (snap.entries.get(p), base.entries.get(p)) {
            (a, b) if a == b => true,
            (Some(a), Some(b)) if a.kind == FileType::Directory && b.kind == a.kind => {
                Node {
                    size: b.size,
                    ..a.clone()
                } == *b
            }
            (Some(a), _) => fsynced(p, a, 0),
            (None, _) => false,
        });
    // Durability: each fast fsync that returned before the epoch started.
    each && fast.iter().all(|&k| {
        let op = &rec.ops[k - 1];
        op.end > w.start
            || rec.snaps[k]
                .entries
                .iter()
                .filter(|(_, n)| op.fsynced.contains(&n.ino))
                .all(|(p, _)| snap.entries.get(p).is_some_and(|got| fsynced(p, got, k)))
    })
}
