//! A test device modelling slow media: every flush takes a fixed time (a
//! sleep inside the device, standing for the drive emptying its cache), and
//! the device counts flushes started and ended, so a test can tell whether a
//! flush was in progress around an operation without any timing of its own.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tux3::device::{CounterSnapshot, Device, MemDevice};

pub struct SlowFlush {
    pub inner: MemDevice,
    delay: Duration,
    started: AtomicU64,
    ended: AtomicU64,
}

/// The flush counters at one moment: `started` flushes have begun and
/// `ended` of them have returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flushes {
    pub started: u64,
    pub ended: u64,
}

impl Flushes {
    /// A flush was in progress (flushes never overlap in these tests:
    /// commits are serialized).
    pub fn in_progress(&self) -> bool {
        self.started > self.ended
    }
}

impl SlowFlush {
    /// A device of `blocks` 4 KiB blocks whose flushes take `delay`.
    pub fn new(blocks: u64, delay: Duration) -> SlowFlush {
        SlowFlush {
            inner: MemDevice::new(4096, blocks),
            delay,
            started: AtomicU64::new(0),
            ended: AtomicU64::new(0),
        }
    }

    /// The counters now. `ended` is read first, so `started >= ended`, and
    /// a flush seen in progress had begun by the time this returned.
    pub fn flushes(&self) -> Flushes {
        let ended = self.ended.load(Ordering::SeqCst);
        let started = self.started.load(Ordering::SeqCst);
        Flushes { started, ended }
    }

    /// Flushes that have returned so far.
    pub fn ended(&self) -> u64 {
        self.ended.load(Ordering::SeqCst)
    }
}

impl Device for SlowFlush {
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
    fn flush(&self) -> std::io::Result<()> {
        self.started.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(self.delay);
        let r = self.inner.flush();
        self.ended.fetch_add(1, Ordering::SeqCst);
        r
    }
    fn counters(&self) -> CounterSnapshot {
        self.inner.counters()
    }
}
