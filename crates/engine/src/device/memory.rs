//! Device layer: the in-memory device, for tests — a vector of bytes behind a
//! lock. Writes are durable at once; `flush` only counts; a discard zeroes
//! the blocks (what a thinly provisioned device reads back).
//!
//! Calls nothing else in the crate.

use super::{check_discard, check_range, CounterSnapshot, Counters, Device};
use parking_lot::RwLock;

/// A RAM-backed device.
pub struct MemDevice {
    block_size: u32,
    data: RwLock<Vec<u8>>,
    counters: Counters,
}

impl MemDevice {
    /// A zero-filled device of `block_count` blocks.
    pub fn new(block_size: u32, block_count: u64) -> MemDevice {
        MemDevice {
            block_size,
            data: RwLock::new(vec![0; (block_size as u64 * block_count) as usize]),
            counters: Counters::default(),
        }
    }

    /// A device holding a copy of `image` (its length must be whole blocks).
    pub fn from_image(block_size: u32, image: Vec<u8>) -> MemDevice {
        MemDevice {
            block_size,
            data: RwLock::new(image),
            counters: Counters::default(),
        }
    }

    /// A copy of the whole device contents.
    pub fn image(&self) -> Vec<u8> {
        self.data.read().clone()
    }
}

impl Device for MemDevice {
    fn block_size(&self) -> u32 {
        self.block_size
    }
    fn block_count(&self) -> u64 {
        self.data.read().len() as u64 / self.block_size as u64
    }
    fn resize(&self, blocks: u64) -> std::io::Result<u64> {
        self.data
            .write()
            .resize((self.block_size as u64 * blocks) as usize, 0);
        Ok(blocks)
    }
    fn read(&self, block: u64, buf: &mut [u8]) -> std::io::Result<()> {
        let data = self.data.read();
        let n = check_range(
            self.block_size,
            data.len() as u64 / self.block_size as u64,
            block,
            buf.len(),
        )?;
        let start = (block * self.block_size as u64) as usize;
        buf.copy_from_slice(&data[start..start + buf.len()]);
        self.counters.on_read(n);
        Ok(())
    }
    fn write(&self, block: u64, buf: &[u8]) -> std::io::Result<()> {
        let mut data = self.data.write();
        let n = check_range(
            self.block_size,
            data.len() as u64 / self.block_size as u64,
            block,
            buf.len(),
        )?;
        let start = (block * self.block_size as u64) as usize;
        data[start..start + buf.len()].copy_from_slice(buf);
        self.counters.on_write(n);
        Ok(())
    }
    fn flush(&self) -> std::io::Result<()> {
        self.counters.on_flush();
        Ok(())
    }
    fn discard(&self, start: u64, count: u64) -> std::io::Result<()> {
        let mut data = self.data.write();
        let bs = self.block_size as u64;
        check_discard(data.len() as u64 / bs, start, count)?;
        let (from, to) = ((start * bs) as usize, ((start + count) * bs) as usize);
        data[from..to].fill(0);
        self.counters.on_discard(count);
        Ok(())
    }
    fn counters(&self) -> CounterSnapshot {
        self.counters.snapshot()
    }
}
