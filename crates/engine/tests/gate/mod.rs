//! A test device whose next flush, once armed, stops until the test lets it
//! go: the way tests hold a commit in flight without sleeping.

use crossbeam_channel::{bounded, Receiver, Sender};
use std::sync::atomic::{AtomicBool, Ordering};
use tux3::device::{CounterSnapshot, Device, MemDevice};

pub struct GatedDevice {
    pub inner: MemDevice,
    armed: AtomicBool,
    /// The gated flush, once let go, fails (the device lost the writes).
    fails: AtomicBool,
    entered: Sender<()>,
    release: Receiver<()>,
}

/// A gated device of `blocks` 4 KiB blocks; returns it with the channel
/// that says a flush is waiting and the one that lets it go.
pub fn gated(blocks: u64) -> (GatedDevice, Receiver<()>, Sender<()>) {
    let (entered, entered_rx) = bounded(1);
    let (release_tx, release) = bounded(1);
    let dev = GatedDevice {
        inner: MemDevice::new(4096, blocks),
        armed: AtomicBool::new(false),
        fails: AtomicBool::new(false),
        entered,
        release,
    };
    (dev, entered_rx, release_tx)
}

impl GatedDevice {
    /// Make the next flush wait.
    pub fn arm(&self) {
        self.armed.store(true, Ordering::SeqCst);
    }

    /// Let the next flush through after all. (Not every test that shares
    /// this module uses it.)
    #[allow(dead_code)]
    pub fn disarm(&self) {
        self.armed.store(false, Ordering::SeqCst);
    }

    /// Make the flush waiting at the gate (or the next gated one) fail
    /// when it is let go. (Not every test that shares this module uses it.)
    #[allow(dead_code)]
    pub fn fail_gated(&self) {
        self.fails.store(true, Ordering::SeqCst);
    }
}

impl Device for GatedDevice {
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
        if self.armed.swap(false, Ordering::SeqCst) {
            let _ = self.entered.send(());
            let _ = self.release.recv();
            if self.fails.swap(false, Ordering::SeqCst) {
                return Err(std::io::Error::other("gated flush failed"));
            }
        }
        self.inner.flush()
    }
    fn counters(&self) -> CounterSnapshot {
        self.inner.counters()
    }
}
