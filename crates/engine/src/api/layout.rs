//! API layer: where a file's data lies on the device ([`Fs::data_runs`]),
//! for tools that read many files in device order (dedupe reads the
//! blocks it hashes that way, in long reads, where one read per small
//! file would wait on the device's latency for each), and many reads made
//! together ([`Fs::read_many`]: a batch of dedupes compares its ranges so).
//!
//! Calls the frontend (`Volume::data_runs_shared`, or `data_runs` when a
//! node has to be read first; `Volume::plan_read_shared` and
//! `PlannedRead::read_all`) through the delta guard.

use super::Fs;
use crate::error::Result;
use crate::frontend::PlannedRead;
use crate::types::*;

impl Fs {
    /// The written extents of regular file `ino` over its blocks `first..
    /// first + count`, in file order, cut to that range and joined where
    /// they go on on the device; holes and preallocated (unwritten) blocks
    /// are left out. It is where the data lies as last written back: a
    /// block written since may still be only in memory, and a run may
    /// be freed and reused as soon as this returns. So what is read there
    /// is a hint (a dedupe compares the bytes again before it shares);
    /// [`Fs::read_into`] is the read that always gives the file's data.
    /// EINVAL for anything but a regular file.
    pub fn data_runs(&self, ino: Ino, first: u64, count: u64) -> Result<Vec<DataRun>> {
        self.warm(ino);
        if let Some(r) = self.warming(|v, s| v.data_runs_shared(ino, first, count, s)) {
            return r;
        }
        self.vol().data_runs(ino, first, count)
    }
}

impl Fs {
    /// Read each of `reqs` (inode, offset, length) as [`Fs::read`] would,
    /// the device reads of all of them made together: those that follow
    /// one another on the device (small files written one after another)
    /// are one read. One result per request, in order; a request whose
    /// read cannot be planned this way (a node of its map not in memory
    /// twice over) is read alone.
    pub fn read_many(&self, reqs: &[(Ino, u64, usize)]) -> Vec<Result<Vec<u8>>> {
        let mut plans = Vec::new();
        let mut out: Vec<Option<Result<Vec<u8>>>> = reqs.iter().map(|_| None).collect();
        let mut planned_for = Vec::new();
        for (k, &(ino, offset, size)) in reqs.iter().enumerate() {
            self.warm(ino);
            match self.warming(|v, s| v.plan_read_shared(ino, offset, size, s)) {
                Some(Ok(p)) => {
                    plans.push(p);
                    planned_for.push(k);
                }
                Some(Err(e)) => out[k] = Some(Err(e)),
                None => {}
            }
        }
        for (k, r) in planned_for.into_iter().zip(PlannedRead::read_all(plans)) {
            out[k] = Some(self.checked(r).map(|(n, mut v)| {
                v.truncate(n);
                v
            }));
        }
        out.into_iter()
            .zip(reqs)
            .map(|(o, &(ino, offset, size))| o.unwrap_or_else(|| self.read(ino, offset, size)))
            .collect()
    }
}
