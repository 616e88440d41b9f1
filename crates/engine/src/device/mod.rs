//! Device layer, below the log and above only the base modules: where
//! blocks live. Everything above reads and writes whole
//! blocks through the [`Device`] trait and never touches files directly.
//!
//! Implementations: [`file::FileDevice`] (image file or block device,
//! `O_DIRECT` on block devices), [`memory::MemDevice`] (tests),
//! [`recording::RecordingDevice`] (logs every write, flush and discard for
//! the crash harness). Each counts blocks read, blocks written, flushes and
//! blocks discarded in [`Counters`]. `batch.rs` puts a batch of writes in flight at once
//! (io_uring) for the file device, and owns the aligned buffers of
//! `O_DIRECT` I/O ([`AlignedBuf`]).
//!
//! This layer calls nothing else in the crate.

mod batch;
pub mod file;
pub mod memory;
pub mod recording;

use std::sync::atomic::{AtomicU64, Ordering};

pub use batch::{AlignedBuf, DIRECT_ALIGN};
pub use file::FileDevice;
pub use memory::MemDevice;
pub use recording::{RecordedOp, RecordingDevice};

/// Block storage. Addresses are block numbers; buffers are exactly one block
/// (`block_size()` bytes) or a whole number of blocks for the `_many` calls.
pub trait Device: Send + Sync {
    /// Bytes per block; a power of two.
    fn block_size(&self) -> u32;
    /// Number of blocks on the device.
    fn block_count(&self) -> u64;
    /// Read `buf.len() / block_size()` consecutive blocks starting at `block`.
    fn read(&self, block: u64, buf: &mut [u8]) -> std::io::Result<()>;
    /// Write `buf.len() / block_size()` consecutive blocks starting at `block`.
    /// The write may sit in a volatile cache until [`Device::flush`].
    fn write(&self, block: u64, buf: &[u8]) -> std::io::Result<()>;
    /// Write several requests, each `(block, parts)`: the parts hold
    /// consecutive blocks from `block` on. The requests may be in flight at
    /// once and land in any order (nothing orders writes between flushes);
    /// all are complete when this returns `Ok`. Counts as one write per
    /// request. The default writes them one by one.
    fn write_gather(&self, reqs: &[Gather]) -> std::io::Result<()> {
        write_one_by_one(self, reqs)
    }
    /// Make every completed write durable.
    fn flush(&self) -> std::io::Result<()>;
    /// Tell the device that `count` blocks from `start` hold nothing
    /// anyone will read again (they are free for good): an image file
    /// punches a hole, a block device discards them (TRIM/UNMAP). Reading
    /// them afterwards may give zeros or anything else. A device that
    /// cannot discard says so with [`std::io::ErrorKind::Unsupported`],
    /// which callers take as "nothing to do", not as a failure; that is
    /// the default.
    fn discard(&self, start: u64, count: u64) -> std::io::Result<()> {
        let _ = (start, count);
        Err(discard_unsupported())
    }
    /// The calling thread starts urgent I/O (an fsync commit's writes and
    /// flush, which an application waits for): other threads' batches hold
    /// back new writes until the matching [`Device::urgent_end`], so the
    /// urgent writes do not queue behind a stream. The default does nothing.
    fn urgent_begin(&self) {}
    /// The calling thread's urgent I/O is done.
    fn urgent_end(&self) {}
    /// A second, read-only handle on the same storage for one long pass
    /// of reads that should bypass the host's page cache (a scrub): an
    /// image file opened again with `O_DIRECT`, which reads buffers
    /// aligned to [`DIRECT_ALIGN`] without a copy. `None` (the default):
    /// there is none — the device is direct already, lives in memory, or
    /// the host filesystem refuses `O_DIRECT` — so read the device itself.
    fn uncached(&self) -> Option<Box<dyn Device>> {
        None
    }
    /// The device's I/O counters.
    fn counters(&self) -> CounterSnapshot;
    /// What messages call the device: the path of an image file or block
    /// device. A wrapper names the device it wraps.
    fn name(&self) -> String {
        "the device".into()
    }
    /// Blocks the device holds now, measured again (an image file's
    /// length, a block device's size), for a resize to "as large as the
    /// device". The default is [`Device::block_count`].
    fn capacity(&self) -> std::io::Result<u64> {
        Ok(self.block_count())
    }
    /// Make the device `blocks` long where it can (an image file grows or
    /// shrinks; a block device is measured again) and return its block
    /// count now. The default can change nothing: it answers the count,
    /// or an error if that is less than `blocks`.
    fn resize(&self, blocks: u64) -> std::io::Result<u64> {
        let have = self.block_count();
        if have < blocks {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{} has {have} blocks, not {blocks}, and cannot grow", self.name()),
            ));
        }
        Ok(have)
    }
}

/// Read `buf.len() / block_size` blocks from `block` on, an error naming
/// the blocks and the device ("read of block N on DEV: ..."), its kind and
/// OS error kept for the errno. Every read of the engine goes through here.
pub fn read_named(dev: &dyn Device, block: u64, buf: &mut [u8]) -> std::io::Result<()> {
    dev.read(block, buf).map_err(|e| {
        let n = buf.len() / (dev.block_size().max(1) as usize);
        let what = if n > 1 {
            format!("blocks {block}..{}", block.saturating_add(n as u64))
        } else {
            format!("block {block}")
        };
        std::io::Error::new(e.kind(), format!("read of {what} on {} failed: {e}", dev.name()))
    })
}

/// The error of a device that cannot discard.
pub fn discard_unsupported() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::Unsupported, "the device cannot discard")
}

/// Check that a discard of `count` blocks from `start` lies on a device of
/// `block_count` blocks and is not empty.
pub(crate) fn check_discard(block_count: u64, start: u64, count: u64) -> std::io::Result<()> {
    match start.checked_add(count) {
        Some(end) if count > 0 && end <= block_count => Ok(()),
        _ => Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!(
                "discard of blocks {start}..{} does not lie on the device ({block_count} blocks)",
                start.saturating_add(count)
            ),
        )),
    }
}

/// Urgent I/O on a device while it lives ([`Device::urgent_begin`] to
/// [`Device::urgent_end`], on every path).
pub struct Urgent<'a>(&'a dyn Device);

impl<'a> Urgent<'a> {
    pub fn new(dev: &'a dyn Device) -> Urgent<'a> {
        dev.urgent_begin();
        Urgent(dev)
    }
}

impl Drop for Urgent<'_> {
    fn drop(&mut self) {
        self.0.urgent_end();
    }
}

/// One request of [`Device::write_gather`]: a first block and the parts
/// that fill it and the blocks after it.
pub type Gather<'a> = (u64, Vec<&'a [u8]>);

/// [`Device::write_gather`] as one [`Device::write`] per request.
pub fn write_one_by_one<D: Device + ?Sized>(dev: &D, reqs: &[Gather]) -> std::io::Result<()> {
    let mut buf = Vec::new();
    for (block, parts) in reqs {
        if let [one] = parts.as_slice() {
            dev.write(*block, one)?;
        } else {
            buf.clear();
            for p in parts {
                buf.extend_from_slice(p);
            }
            dev.write(*block, &buf)?;
        }
    }
    Ok(())
}

/// A snapshot of a device's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CounterSnapshot {
    pub blocks_read: u64,
    pub blocks_written: u64,
    pub reads: u64,
    pub writes: u64,
    pub flushes: u64,
    /// Discard requests that the device carried out, and their blocks.
    pub discards: u64,
    pub blocks_discarded: u64,
}

/// Live counters, shared by the device implementations.
#[derive(Debug, Default)]
pub struct Counters {
    blocks_read: AtomicU64,
    blocks_written: AtomicU64,
    reads: AtomicU64,
    writes: AtomicU64,
    flushes: AtomicU64,
    discards: AtomicU64,
    blocks_discarded: AtomicU64,
}

impl Counters {
    pub fn on_read(&self, blocks: u64) {
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.blocks_read.fetch_add(blocks, Ordering::Relaxed);
    }
    pub fn on_write(&self, blocks: u64) {
        self.writes.fetch_add(1, Ordering::Relaxed);
        self.blocks_written.fetch_add(blocks, Ordering::Relaxed);
    }
    pub fn on_flush(&self) {
        self.flushes.fetch_add(1, Ordering::Relaxed);
    }
    pub fn on_discard(&self, blocks: u64) {
        self.discards.fetch_add(1, Ordering::Relaxed);
        self.blocks_discarded.fetch_add(blocks, Ordering::Relaxed);
    }
    pub fn snapshot(&self) -> CounterSnapshot {
        CounterSnapshot {
            blocks_read: self.blocks_read.load(Ordering::Relaxed),
            blocks_written: self.blocks_written.load(Ordering::Relaxed),
            reads: self.reads.load(Ordering::Relaxed),
            writes: self.writes.load(Ordering::Relaxed),
            flushes: self.flushes.load(Ordering::Relaxed),
            discards: self.discards.load(Ordering::Relaxed),
            blocks_discarded: self.blocks_discarded.load(Ordering::Relaxed),
        }
    }
}

/// Check that an I/O request lies on the device and is whole blocks.
pub(crate) fn check_range(block_size: u32, block_count: u64, block: u64, len: usize) -> std::io::Result<u64> {
    let bs = block_size as usize;
    if len == 0 || !len.is_multiple_of(bs) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("I/O of {len} bytes is not a whole number of {bs}-byte blocks"),
        ));
    }
    let n = (len / bs) as u64;
    match block.checked_add(n) {
        Some(end) if end <= block_count => Ok(n),
        _ => Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            format!(
                "blocks {block}..{} lie beyond the device end ({block_count} blocks)",
                block.saturating_add(n)
            ),
        )),
    }
}
