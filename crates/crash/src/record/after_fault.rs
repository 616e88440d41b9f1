//! The recorder after a device fault (`devfail.rs`): the failing device
//! under the volume, and a close that may fail, recorded as a durability
//! point only if it succeeded.
//!
//! Calls the engine's API and the recorder's own parts.

use super::{not_mounted, OpRecord, Recorder, Recording, Snapshot};
use std::sync::Arc;
use tux3::device::Device;
use tux3::error::{Error, Result};

impl Recorder {
    /// The failing device under the volume, for [`Fault::Fail`].
    pub fn failing(&self) -> Option<&Arc<crate::failing::FailingDevice>> {
        self.hold.failing.as_ref()
    }

    /// The namespace after the last recorded call.
    pub fn last_snapshot(&self) -> Option<&Snapshot> {
        self.snaps.last()
    }

    /// After a device fault: close the volume if it is mounted, and return
    /// the recording with the close's outcome. The close is a durability
    /// point only if it succeeded and the namespace before it could be
    /// walked (its state; else the last recorded one, not promised).
    /// Without `close`, the volume is dropped instead (a crash) and no
    /// call is recorded: for a workload that ended in the recorder's own
    /// walk after a call, which is then not recorded and must not be made
    /// durable by a close.
    pub fn finish_after_fault(mut self, close: bool) -> Result<(Recording, Result<()>)> {
        if !close {
            drop(self.fs.take());
            return self.into_recording(Err(not_mounted()));
        }
        let (start, f0) = (self.pos(), self.flushes());
        let quiet = self.quiet();
        let before = self.fs.as_ref().and_then(|fs| Snapshot::take(fs).ok());
        // Without a walk the state is unknown (a remount whose walk failed
        // is not recorded): the close then promises nothing checkable.
        let known = before.is_some();
        let last = self.snaps.last().cloned().unwrap_or_default();
        let snap = before.unwrap_or(last);
        let names = self.note(&snap).ok();
        drop(quiet);
        let closed = match self.fs.take() {
            Some(fs) => fs.close(),
            None => Err(not_mounted()),
        };
        let end = self.pos();
        self.ops.push(OpRecord {
            desc: format!("close -> {closed:?}"),
            start,
            end,
            durable: closed.is_ok() && known,
            fsynced: Vec::new(),
            flushes: self.flushes() - f0,
            full: true,
        });
        self.snaps.push(snap);
        let names = names
            .or_else(|| self.snapsets.last().cloned())
            .unwrap_or_default();
        self.snapsets.push(names);
        self.into_recording(closed)
    }

    /// The recording, once the volume is closed or dropped (with how the
    /// close went). The log must reproduce the device exactly.
    pub(super) fn into_recording(self, closed: Result<()>) -> Result<(Recording, Result<()>)> {
        let log = self.dev.take_ops();
        let mut check = self.base.clone();
        tux3::device::recording::apply(&log, &mut check, self.mem.block_size());
        if check != self.mem.image() {
            return Err(Error::BadImage(
                "recorded log does not reproduce the device".into(),
            ));
        }
        let fingerprints = self.snaps.iter().map(Snapshot::fingerprint).collect();
        let rec = Recording {
            block_size: self.mem.block_size(),
            base: self.base,
            log,
            ops: self.ops,
            snaps: self.snaps,
            fingerprints,
            open: self.open,
            snapsets: self.snapsets,
            snap_contents: self.snap_contents,
        };
        Ok((rec, closed))
    }
}
