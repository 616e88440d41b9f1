//! Faults the harness can put between a volume and its recording device,
//! so a test can show the harness catches a broken engine, or a device
//! that fails on purpose (`failing.rs`, for the device-fault loops), and the gate
//! that holds a flush while a workload puts a second fsync commit in
//! flight (`hold.rs`). They live here, in the harness, and never in the
//! engine's own write path.
//!
//! Calls the engine's device layer only.

use crate::failing::{FailPlan, FailingDevice};
use crate::hold::HoldFlush;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
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
    /// Every write of a data block (one that is not a superblock and holds
    /// no metadata header: leaf, branch, bitmap or log block) is held back
    /// and reaches the device just after the next flush instead of before
    /// it, like a disk that reorders writes across a flush: a commit block
    /// can land without the data its extents' checksums describe. The
    /// volume itself reads the held blocks as written.
    DataWritesAfterFlush,
    /// A device that fails on purpose as the plan says (`failing.rs`).
    Fail(FailPlan),
}

/// Magic numbers of blocks with a metadata header (FORMAT.md section 2).
const METADATA_MAGICS: [&[u8; 4]; 4] = [b"T3LF", b"T3BR", b"T3BM", b"T3LG"];

/// Whether block `b` holding `data` is a data block (not a superblock,
/// no metadata header).
fn is_data(b: u64, data: &[u8]) -> bool {
    b >= 2 && !METADATA_MAGICS.iter().any(|m| data.starts_with(*m))
}

impl Fault {
    /// `dev` with this fault (and a flush gate) in front of it.
    pub fn wrap(self, dev: Arc<dyn Device>) -> Arc<FaultyDevice> {
        let failing = match self {
            Fault::Fail(plan) => Some(Arc::new(FailingDevice::new(dev.clone(), plan))),
            _ => None,
        };
        Arc::new(FaultyDevice {
            inner: match &failing {
                Some(f) => f.clone(),
                None => dev,
            },
            failing,
            fault: self,
            flushes: AtomicU64::new(0),
            held: Mutex::new(BTreeMap::new()),
            hold: HoldFlush::new(),
        })
    }
}

/// A device that passes everything to `inner` except what its fault drops,
/// each flush through its gate.
pub struct FaultyDevice {
    inner: Arc<dyn Device>,
    /// The failing device under it, for [`Fault::Fail`].
    pub failing: Option<Arc<FailingDevice>>,
    fault: Fault,
    /// Flushes asked for so far.
    flushes: AtomicU64,
    /// Data blocks held back until the next flush (`DataWritesAfterFlush`).
    held: Mutex<BTreeMap<u64, Vec<u8>>>,
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
        self.inner.read(block, buf)?;
        if self.fault == Fault::DataWritesAfterFlush {
            let bs = self.block_size() as usize;
            let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
            for (k, one) in buf.chunks_mut(bs).enumerate() {
                if let Some(data) = held.get(&block.saturating_add(k as u64)) {
                    one.copy_from_slice(data);
                }
            }
        }
        Ok(())
    }
    fn write(&self, block: u64, buf: &[u8]) -> std::io::Result<()> {
        if self.fault != Fault::DataWritesAfterFlush {
            return self.inner.write(block, buf);
        }
        let bs = self.block_size() as usize;
        for (k, one) in buf.chunks(bs).enumerate() {
            let b = block.saturating_add(k as u64);
            if is_data(b, one) {
                let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
                held.insert(b, one.to_vec());
            } else {
                self.held.lock().unwrap_or_else(|e| e.into_inner()).remove(&b);
                self.inner.write(b, one)?;
            }
        }
        Ok(())
    }
    fn write_gather(&self, reqs: &[Gather]) -> std::io::Result<()> {
        if self.fault == Fault::DataWritesAfterFlush {
            return tux3::device::write_one_by_one(self, reqs);
        }
        self.inner.write_gather(reqs)
    }
    fn flush(&self) -> std::io::Result<()> {
        self.hold.pass();
        let n = self.flushes.fetch_add(1, Ordering::Relaxed);
        match self.fault {
            Fault::DropEveryOtherFlush if n.is_multiple_of(2) => Ok(()),
            Fault::DataWritesAfterFlush => {
                self.inner.flush()?;
                let held = std::mem::take(&mut *self.held.lock().unwrap_or_else(|e| e.into_inner()));
                for (b, data) in held {
                    self.inner.write(b, &data)?;
                }
                Ok(())
            }
            _ => self.inner.flush(),
        }
    }
    fn discard(&self, start: u64, count: u64) -> std::io::Result<()> {
        self.inner.discard(start, count)
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
    fn name(&self) -> String {
        self.inner.name()
    }
}
