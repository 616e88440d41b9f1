//! Device layer: the recording device for the crash harness — passes all I/O
//! to an inner device and logs every successful write (one entry per block),
//! flush and discard, in the order the inner device saw them. `apply`
//! replays a log onto a byte image.
//!
//! Calls nothing else in the crate.

use super::{CounterSnapshot, Counters, Device};
use parking_lot::Mutex;
use std::sync::Arc;

/// One operation as the inner device received it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordedOp {
    /// One block written; multi-block writes are logged as one op per block.
    Write { block: u64, data: Vec<u8> },
    /// A flush (durability barrier).
    Flush,
    /// `count` blocks from `start` discarded (the crash harness checks
    /// that no crash state's volume refers to them).
    Discard { start: u64, count: u64 },
}

/// A device that records the writes, flushes and discards it forwards.
pub struct RecordingDevice {
    inner: Arc<dyn Device>,
    log: Mutex<Vec<RecordedOp>>,
    counters: Counters,
}

impl RecordingDevice {
    /// Wrap `inner`, with an empty log.
    pub fn new(inner: Arc<dyn Device>) -> RecordingDevice {
        RecordingDevice {
            inner,
            log: Mutex::new(Vec::new()),
            counters: Counters::default(),
        }
    }

    /// A copy of the log so far.
    pub fn ops(&self) -> Vec<RecordedOp> {
        self.log.lock().clone()
    }

    /// The log so far, leaving it empty.
    pub fn take_ops(&self) -> Vec<RecordedOp> {
        std::mem::take(&mut *self.log.lock())
    }

    /// Empty the log.
    pub fn clear(&self) {
        self.log.lock().clear();
    }

    /// The wrapped device.
    pub fn inner(&self) -> &Arc<dyn Device> {
        &self.inner
    }
}

impl Device for RecordingDevice {
    fn block_size(&self) -> u32 {
        self.inner.block_size()
    }
    fn block_count(&self) -> u64 {
        self.inner.block_count()
    }
    fn resize(&self, blocks: u64) -> std::io::Result<u64> {
        self.inner.resize(blocks)
    }
    fn capacity(&self) -> std::io::Result<u64> {
        self.inner.capacity()
    }
    fn read(&self, block: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.inner.read(block, buf)?;
        self.counters
            .on_read((buf.len() / self.block_size() as usize) as u64);
        Ok(())
    }
    fn write(&self, block: u64, buf: &[u8]) -> std::io::Result<()> {
        // Hold the log across the inner write so the log order is the order
        // the inner device saw. Failed writes are not logged.
        let mut log = self.log.lock();
        self.inner.write(block, buf)?;
        let bs = self.block_size() as usize;
        for (i, data) in buf.chunks(bs).enumerate() {
            log.push(RecordedOp::Write {
                block: block + i as u64,
                data: data.to_vec(),
            });
        }
        self.counters.on_write((buf.len() / bs) as u64);
        Ok(())
    }
    fn flush(&self) -> std::io::Result<()> {
        let mut log = self.log.lock();
        self.inner.flush()?;
        log.push(RecordedOp::Flush);
        self.counters.on_flush();
        Ok(())
    }
    /// Logged only when the inner device carried it out.
    fn discard(&self, start: u64, count: u64) -> std::io::Result<()> {
        let mut log = self.log.lock();
        self.inner.discard(start, count)?;
        log.push(RecordedOp::Discard { start, count });
        self.counters.on_discard(count);
        Ok(())
    }
    fn counters(&self) -> CounterSnapshot {
        self.counters.snapshot()
    }
    fn name(&self) -> String {
        self.inner.name()
    }
}

/// Replay the writes in `ops` onto `image` (a whole device image with
/// `block_size`-byte blocks). Flushes are ignored; discards zero their
/// blocks, as [`crate::device::MemDevice`] does.
///
/// # Panics
/// If a write lies beyond the end of `image`: the log and image do not match.
pub fn apply(ops: &[RecordedOp], image: &mut [u8], block_size: u32) {
    for op in ops {
        if let RecordedOp::Write { block, data } = op {
            let start = block
                .checked_mul(block_size as u64)
                .and_then(|b| usize::try_from(b).ok())
                .unwrap_or(usize::MAX);
            let end = start.saturating_add(data.len());
            assert!(
                end <= image.len(),
                "recorded write to block {block} lies beyond the {}-byte image",
                image.len()
            );
            image[start..end].copy_from_slice(data);
        }
        if let RecordedOp::Discard { start, count } = *op {
            let bs = block_size as u64;
            let (from, to) = (
                start.saturating_mul(bs),
                start.saturating_add(count).saturating_mul(bs),
            );
            let to = usize::try_from(to).unwrap_or(usize::MAX);
            assert!(
                to <= image.len(),
                "recorded discard of blocks {start}+{count} lies beyond the {}-byte image",
                image.len()
            );
            image[from as usize..to].fill(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::MemDevice;

    const BS: u32 = 1024;

    fn block(fill: u8) -> Vec<u8> {
        vec![fill; BS as usize]
    }

    #[test]
    fn records_issued_sequence_and_splits_writes() {
        let mem = Arc::new(MemDevice::new(BS, 16));
        let dev = RecordingDevice::new(mem.clone());
        dev.write(3, &block(1)).unwrap();
        dev.flush().unwrap();
        let mut two = block(2);
        two.extend(block(3));
        dev.write(7, &two).unwrap();
        let mut buf = block(0);
        dev.read(7, &mut buf).unwrap();
        assert!(dev.write(16, &block(9)).is_err());
        dev.flush().unwrap();
        let expected = vec![
            RecordedOp::Write {
                block: 3,
                data: block(1),
            },
            RecordedOp::Flush,
            RecordedOp::Write {
                block: 7,
                data: block(2),
            },
            RecordedOp::Write {
                block: 8,
                data: block(3),
            },
            RecordedOp::Flush,
        ];
        assert_eq!(dev.ops(), expected);
        let c = dev.counters();
        assert_eq!(
            (c.writes, c.blocks_written, c.flushes, c.blocks_read),
            (2, 3, 2, 1)
        );
        assert_eq!(dev.inner().counters().blocks_written, 3);
        assert_eq!(dev.take_ops().len(), 5);
        assert!(dev.ops().is_empty());
        dev.write(0, &block(4)).unwrap();
        dev.clear();
        assert!(dev.ops().is_empty());
    }

    #[test]
    fn apply_reproduces_inner_contents() {
        let mem = Arc::new(MemDevice::new(BS, 8));
        let dev = RecordingDevice::new(mem.clone());
        for i in 0..20u64 {
            let n = 1 + (i % 3) as usize;
            let data: Vec<u8> = (0..n * BS as usize).map(|j| (i as usize * 7 + j) as u8).collect();
            dev.write((i * 5) % (8 - n as u64 + 1), &data).unwrap();
            if i % 4 == 0 {
                dev.flush().unwrap();
            }
        }
        let mut image = vec![0u8; 8 * BS as usize];
        apply(&dev.ops(), &mut image, BS);
        assert_eq!(image, mem.image());
    }

    /// Discards reach the inner device (which zeroes them), are logged in
    /// order with the writes, and `apply` zeroes them too.
    #[test]
    fn records_discards_in_order() {
        let mem = Arc::new(MemDevice::new(BS, 8));
        let dev = RecordingDevice::new(mem.clone());
        dev.write(2, &[block(5), block(6)].concat()).unwrap();
        dev.discard(2, 1).unwrap();
        assert!(dev.discard(7, 2).is_err(), "past the end");
        dev.flush().unwrap();
        assert_eq!(dev.ops()[2], RecordedOp::Discard { start: 2, count: 1 });
        assert_eq!(dev.ops().len(), 4);
        let c = dev.counters();
        assert_eq!((c.discards, c.blocks_discarded), (1, 1));
        let mut back = block(9);
        dev.read(2, &mut back).unwrap();
        assert_eq!(back, block(0));
        let mut image = vec![0xaa; 8 * BS as usize];
        apply(&dev.ops(), &mut image, BS);
        assert_eq!(image[..2 * BS as usize], vec![0xaa; 2 * BS as usize][..]);
        assert_eq!(image[2 * BS as usize..3 * BS as usize], block(0)[..]);
        assert_eq!(image[3 * BS as usize..4 * BS as usize], block(6)[..]);
        assert_eq!(image, {
            let mut m = mem.image();
            m[..2 * BS as usize].fill(0xaa);
            m[4 * BS as usize..].fill(0xaa);
            m
        });
    }

    #[test]
    #[should_panic(expected = "beyond")]
    fn apply_rejects_writes_past_the_image() {
        let ops = [RecordedOp::Write {
            block: 2,
            data: block(1),
        }];
        apply(&ops, &mut vec![0u8; 2 * BS as usize], BS);
    }
}
