//! API layer: what a data checksum mismatch leaves behind. A read that
//! finds one fails with EIO and never returns the block; this module
//! counts it for the volume (in the scrub state record, inode 4, on a
//! writable volume: the count outlives the mount) and writes one
//! structured log line naming every path of the file, the offset and
//! length, the device block, both checksums and the snapshots that share
//! the block. It also gives a scrub (`tux3_tools::scrub`) what it needs of
//! a mounted volume: the device, a quiet moment with no commit in flight,
//! and the state record.
//!
//! Calls the rest of the API (lookups, snapshots), the frontend's scrub
//! state record and the base modules.

use super::Fs;
use crate::device::Device;
use crate::error::{BadData, Error, Result};
use crate::structures::scrub_state::ScrubState;
use crate::types::{FileType, Ino, ROOT_INO};
use std::collections::VecDeque;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// Directory entries a search for a file's names reads at most: past it
/// the report names what it found.
const PATH_SEARCH_LIMIT: usize = 1 << 20;

/// What a report says about one bad block, found once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadDataReport {
    pub bad: BadData,
    /// Every path that names the file, `/`-separated from the volume's
    /// root (empty when none was found: an orphan, or a search cut short).
    pub paths: Vec<Vec<u8>>,
    /// Snapshots (by name) whose image holds the block too.
    pub snapshots: Vec<Vec<u8>>,
}

impl Fs {
    /// Count and log `e` if it is a data checksum mismatch; returns it.
    pub(crate) fn reported(&self, e: Error) -> Error {
        if let Error::BadData(bad) = &e {
            let count = self.shared.data_errors.fetch_add(1, Relaxed).saturating_add(1);
            let mut v = self.vol();
            if !v.is_read_only() {
                // Joins the open delta; a failure leaves the count in memory.
                let state = v.scrub_state().ok().flatten().unwrap_or_default();
                let _ = v.set_scrub_state(ScrubState {
                    data_errors: count,
                    ..state
                });
            }
            drop(v);
            let report = self.bad_data_report(bad);
            log_bad_data(&report, self.statfs().map_or(4096, |s| u64::from(s.block_size)));
        }
        e
    }

    /// `r`, with a data checksum mismatch counted and logged.
    pub(crate) fn checked<T>(&self, r: Result<T>) -> Result<T> {
        r.map_err(|e| self.reported(e))
    }

    /// Data checksum mismatches reads have found: since the volume was
    /// made on a writable volume (the count the scrub state record keeps),
    /// since it was opened on a read-only one.
    pub fn data_errors(&self) -> u64 {
        self.shared.data_errors.load(Relaxed)
    }

    /// Start the count of [`Fs::data_errors`] from the state record. A
    /// damaged record does not keep the volume from opening: the count
    /// starts from zero and `tux3 scrub` names the damage.
    pub(super) fn load_data_errors(&self) {
        match self.vol().scrub_state() {
            Ok(Some(s)) => self.shared.data_errors.store(s.data_errors, Relaxed),
            Ok(None) => {}
            Err(e) => tracing::warn!(target: "tux3::data", "scrub state record unreadable: {e}"),
        }
    }

    /// The scrub state record (`None`: no scrub ever ran and no read met
    /// a mismatch).
    pub fn scrub_state(&self) -> Result<Option<ScrubState>> {
        self.vol().scrub_state()
    }

    /// The data blocks a repair recorded as damaged (FORMAT.md 16.1):
    /// reads of them fail as any mismatch does; fsck names them as known.
    pub fn known_damage(&self) -> Result<Vec<crate::structures::scrub_state::KnownDamage>> {
        self.vol().known_damage()
    }

    /// Write `state` to the volume (with the current data error count)
    /// and make it durable: a crash after this returns keeps it.
    pub fn save_scrub_state(&self, state: &ScrubState) -> Result<()> {
        let state = ScrubState {
            data_errors: self.data_errors(),
            ..*state
        };
        self.vol().set_scrub_state(state)?;
        // Its record alone, through an fsync commit (one log write and one
        // flush), not a whole delta: a scrub saves its place 200 times.
        self.fsync(crate::structures::scrub_state::SCRUB_INO, false)
    }

    /// Whether the volume was opened read-only.
    pub fn is_read_only(&self) -> bool {
        self.vol().is_read_only()
    }

    /// The device the volume lives on (a scrub reads it directly).
    pub fn device(&self) -> Arc<dyn Device> {
        self.vol().device_arc()
    }

    /// Make everything durable, then run `f` while no commit can start:
    /// the device holds the committed volume and nothing on it changes
    /// (blocks freed meanwhile stay unused until a commit).
    pub fn with_commits_held<T>(&self, f: impl FnOnce() -> T) -> Result<T> {
        self.sync()?;
        Ok(self.shared.with_commit_lock(f))
    }

    /// Where `bad` is: the file's paths and the snapshots sharing its block.
    pub fn bad_data_report(&self, bad: &BadData) -> BadDataReport {
        let paths = if bad.ino == 0 {
            Vec::new()
        } else {
            self.paths_of(bad.ino)
        };
        // A block born in generation b is in every snapshot from b on
        // (it is live now, so none of them has seen it die). The first
        // snapshot is generation 0, and so is the birth of every block
        // written before it.
        let snapshots = self
            .snapshot_list()
            .unwrap_or_default()
            .into_iter()
            .filter(|s| !s.deleting && s.id >= u64::from(bad.birth))
            .map(|s| s.name)
            .collect();
        BadDataReport {
            bad: (*bad).clone(),
            paths,
            snapshots,
        }
    }

    /// Every path naming `ino`, found by a walk of the tree from the root
    /// (reading at most [`PATH_SEARCH_LIMIT`] entries).
    pub fn paths_of(&self, ino: Ino) -> Vec<Vec<u8>> {
        let mut found = Vec::new();
        if ino == ROOT_INO {
            return vec![b"/".to_vec()];
        }
        let mut queue = VecDeque::from([(ROOT_INO, Vec::new())]);
        let mut read = 0usize;
        while let Some((dir, path)) = queue.pop_front() {
            let mut pos = 0;
            while let Ok(batch) = self.readdir(dir, pos, 256) {
                let Some(last) = batch.last() else {
                    break;
                };
                pos = last.next;
                for d in &batch {
                    read += 1;
                    if d.name == b"." || d.name == b".." {
                        continue;
                    }
                    let mut p = path.clone();
                    p.push(b'/');
                    p.extend_from_slice(&d.name);
                    if d.ino == ino {
                        found.push(p.clone());
                    }
                    if d.kind == FileType::Directory {
                        queue.push_back((d.ino, p));
                    }
                }
                if read >= PATH_SEARCH_LIMIT {
                    return found;
                }
            }
        }
        found
    }
}

/// One line per bad block, fields `key=value` so that a log reader can
/// pick them out.
fn log_bad_data(r: &BadDataReport, bs: u64) {
    let list = |v: &[Vec<u8>]| {
        v.iter()
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .collect::<Vec<_>>()
            .join(",")
    };
    let b = &r.bad;
    tracing::error!(
        target: "tux3::data",
        "data checksum mismatch: paths=[{}] inode={} offset={} length={} block={} expected={:#010x} found={:#010x} snapshots=[{}]",
        list(&r.paths),
        b.ino,
        b.lblock.saturating_mul(bs),
        bs,
        b.pblock,
        b.expected,
        b.found,
        list(&r.snapshots)
    );
}
