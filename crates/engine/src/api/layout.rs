//! API layer: where a file's data lies on the device ([`Fs::data_runs`]),
//! for tools that read many files in device order (dedupe reads the
//! blocks it hashes that way, in long reads, where one read per small
//! file would wait on the device's latency for each).
//!
//! Calls the frontend (`Volume::data_runs_shared`, or `data_runs` when a
//! node has to be read first) through the delta guard.

use super::Fs;
use crate::error::Result;
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
