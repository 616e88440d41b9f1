//! Faults the harness can put between a volume and its recording device,
//! so a test can show the harness catches a broken engine, and the gate
//! that holds a flush while a workload puts a second fsync commit in
//! flight (`hold.rs`). They live here, in the harness, and never in the
//! engine's own write path.
//!
//! Calls the engine's device layer only.

use crate::hold::HoldFlush;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tux3::device::{CounterSnapshot, Device, Gather};

/// Which fault, if any.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Fault {
    /// The device as it is.
    #[default]
    None,
    /// Every other flush (the first, third, ...) is acknowledged without
    /// reaching the device, like a disk that lies about its write cache: a
    /// commit block can land while blocks it names did not (invariant L1),
    /// and an fsync can return before its data is durable.
    DropEveryOtherFlush,
}

impl Fault {
    /// `dev` with this fault (and a flush gate) in front of it.
    pub fn wrap(self, dev: Arc<dyn Device>) -> Arc<FaultyDevice> {
        Arc::new(FaultyDevice {
            inner: dev,
            fault: self,
            flushes: AtomicU64::new(0),
            hold: HoldFlush::new(),
        })
    }
}

/// A device that passes everything to `inner` except what its fault drops,
/// each flush through its gate.
pub struct FaultyDevice {
    inner: Arc<dyn Device>,
    fault: Fault,
    /// Flushes asked for so far.
    flushes: AtomicU64,
    /// Holds a flush when a workload asks (`Recorder::fsyncs_in_flight`).
    pub hold: HoldFlush,
}

impl Device for FaultyDevice {
    fn block_size(&self) -> u32 {
        self.inner.block_size()
    }
    fn block_count(&self) -> u64 {
        self.inner.block_count()
    }
    fn read(&self, block: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.inner.read(block, buf)
    }
    fn write(&self, block: u64, buf: &[u8]) -> std::io::Result<()> {
        self.inner.write(block, buf)
    }
    fn write_gather(&self, reqs: &[Gather]) -> std::io::Result<()> {
        self.inner.write_gather(reqs)
    }
    fn flush(&self) -> std::io::Result<()> {
        self.hold.pass();
        let n = self.flushes.fetch_add(1, Ordering::Relaxed);
        match self.fault {
            Fault::DropEveryOtherFlush if n.is_multiple_of(2) => Ok(()),
            _ => self.inner.flush(),
        }
    }
    fn urgent_begin(&self) {
        self.inner.urgent_begin()
    }
    fn urgent_end(&self) {
        self.inner.urgent_end()
    }
    fn counters(&self) -> CounterSnapshot {
        self.inner.counters()
    }
}
