//! Device layer: an image file or block device. Owns positional I/O on one
//! file descriptor, `O_DIRECT` on block devices (through aligned bounce
//! buffers when the caller's buffer is not aligned),
//! the device-size ioctl, discards (a hole punched in an image file,
//! BLKDISCARD on a block device), reading an image's head (where
//! `tux3::open_path` looks for the superblock) and creating a sparse image.
//!
//! Calls nothing else in the crate.

use super::batch::{pieces, AlignedBuf, Batch, Gate, DIRECT_ALIGN, PIECE_MAX};
use super::{check_discard, check_range, discard_unsupported, CounterSnapshot, Counters, Device, Gather};
use parking_lot::Mutex;
use std::fs::{File, OpenOptions};
use std::io::{self, ErrorKind};
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Largest bounce buffer; bigger requests are done in pieces.
const BOUNCE_MAX: usize = 1 << 20;

/// A device backed by a regular file or a block device.
pub struct FileDevice {
    file: File,
    block_size: u32,
    /// Blocks on the device (an image file may be resized).
    block_count: AtomicU64,
    writable: bool,
    /// A block device (discards are BLKDISCARD), not an image file (holes).
    block_dev: bool,
    /// Opened with `O_DIRECT`: all I/O goes through aligned bounce buffers.
    direct: bool,
    /// Batched writes (`O_DIRECT` only; `None` without io_uring).
    batch: Option<Mutex<Batch>>,
    /// The ring of urgent batches (an fsync commit's), so that their writes
    /// go out together even while a background batch holds `batch`.
    urgent_batch: Option<Mutex<Batch>>,
    /// Urgent I/O under way, which other threads' batches make way for.
    gate: Gate,
    counters: Counters,
    /// The path it was opened by, for messages.
    name: String,
}

/// Whether this build can batch device writes through an io_uring (the
/// `uring` feature, which the `tux3` command enables): without it, every
/// block of a commit is its own `pwrite`, one after another.
pub const BATCHED_WRITES: bool = cfg!(feature = "uring");

impl FileDevice {
    /// Open `path` with `block_size`-byte blocks. Block devices are opened
    /// with `O_DIRECT` when `block_size` is a multiple of their sector size.
    pub fn open(path: &Path, block_size: u32, writable: bool) -> io::Result<FileDevice> {
        if !block_size.is_power_of_two() {
            return Err(io::Error::new(
                ErrorKind::InvalidInput,
                format!("block size {block_size} is not a power of two"),
            ));
        }
        let kind = std::fs::metadata(path)?.file_type();
        let block_dev = kind.is_block_device();
        if !block_dev && !kind.is_file() {
            return Err(not_file_error());
        }
        let direct = block_dev && {
            let probe = File::open(path)?;
            // O_DIRECT needs offsets and lengths in whole sectors; buffer
            // alignment is handled by the bounce buffer.
            let sector = sector_size(&probe)?;
            sector > 0 && block_size.is_multiple_of(sector)
        };
        Self::open_with(path, block_size, writable, direct)
    }

    fn open_with(path: &Path, block_size: u32, writable: bool, direct: bool) -> io::Result<FileDevice> {
        let mut opts = OpenOptions::new();
        opts.read(true).write(writable);
        if direct {
            opts.custom_flags(libc::O_DIRECT);
        }
        let file = opts.open(path)?;
        let meta = file.metadata()?;
        let block_dev = meta.file_type().is_block_device();
        let bytes = if block_dev {
            block_device_size(&file)?
        } else {
            meta.len()
        };
        // Rings only for direct I/O that writes.
        let ring = || {
            (direct && writable)
                .then(|| Batch::new(PIECE_MAX).map(Mutex::new))
                .flatten()
        };
        Ok(FileDevice {
            file,
            block_size,
            block_count: AtomicU64::new(bytes / block_size as u64),
            writable,
            block_dev,
            direct,
            batch: ring(),
            urgent_batch: ring(),
            gate: Gate::default(),
            counters: Counters::default(),
            name: path.display().to_string(),
        })
    }

    /// Whether the device was opened with `O_DIRECT`.
    pub fn is_direct(&self) -> bool {
        self.direct
    }

    /// Bytes per bounce-buffer piece: a whole number of blocks.
    fn chunk_len(&self, len: usize) -> usize {
        let bs = self.block_size as usize;
        len.min((BOUNCE_MAX / bs).max(1) * bs)
    }
}

fn read_only_error() -> io::Error {
    io::Error::new(ErrorKind::PermissionDenied, "device is open read-only")
}

fn not_file_error() -> io::Error {
    io::Error::new(ErrorKind::InvalidInput, "not a regular file or block device")
}

/// Discard `len` bytes from `offset` of the block device open on `file`
/// (BLKDISCARD).
fn block_discard(file: &File, offset: u64, len: u64) -> io::Result<()> {
    let range: [u64; 2] = [offset, len];
    // SAFETY: BLKDISCARD reads two u64s through the pointer, which is valid.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), libc::_IO(0x12, 119), range.as_ptr()) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Punch a hole of `len` bytes from `offset` in the image file `file`,
/// keeping its size.
fn punch_hole(file: &File, offset: u64, len: u64) -> io::Result<()> {
    let (Ok(off), Ok(n)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len)) else {
        return Err(io::Error::new(
            ErrorKind::InvalidInput,
            "hole beyond the largest file offset",
        ));
    };
    let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
    // SAFETY: fallocate takes plain integers.
    let rc = unsafe { libc::fallocate(file.as_raw_fd(), mode, off, n) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether `e` says the device or the host filesystem cannot discard.
fn cannot_discard(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EOPNOTSUPP | libc::ENOTTY | libc::ENOSYS)
    ) || e.kind() == ErrorKind::Unsupported
}

/// Size in bytes of the block device open on `file` (BLKGETSIZE64).
fn block_device_size(file: &File) -> io::Result<u64> {
    let mut bytes: u64 = 0;
    // SAFETY: BLKGETSIZE64 writes one u64 through the pointer, which is valid.
    let rc = unsafe {
        libc::ioctl(
            file.as_raw_fd(),
            libc::_IOR::<u64>(0x12, 114),
            &mut bytes as *mut u64,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(bytes)
}

/// Logical sector size of the block device open on `file` (BLKSSZGET).
fn sector_size(file: &File) -> io::Result<u32> {
    let mut sector: libc::c_int = 0;
    // SAFETY: BLKSSZGET writes one int through the pointer, which is valid.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), libc::BLKSSZGET, &mut sector as *mut libc::c_int) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(sector.max(0) as u32)
}

/// Whether `buf` can go to an `O_DIRECT` read or write as it is: its
/// address aligned for direct I/O (its length, whole blocks, always is).
fn is_aligned(buf: &[u8]) -> bool {
    (buf.as_ptr() as usize).is_multiple_of(DIRECT_ALIGN)
}

impl Device for FileDevice {
    fn block_size(&self) -> u32 {
        self.block_size
    }
    fn block_count(&self) -> u64 {
        self.block_count.load(Relaxed)
    }
    fn capacity(&self) -> io::Result<u64> {
        let meta = self.file.metadata()?;
        let bytes = if meta.file_type().is_block_device() {
            block_device_size(&self.file)?
        } else {
            meta.len()
        };
        Ok(bytes / u64::from(self.block_size))
    }
    fn resize(&self, blocks: u64) -> io::Result<u64> {
        let meta = self.file.metadata()?;
        let bytes = if meta.file_type().is_block_device() {
            block_device_size(&self.file)?
        } else {
            if !self.writable {
                return Err(read_only_error());
            }
            let bytes = blocks.checked_mul(u64::from(self.block_size)).ok_or_else(|| {
                io::Error::new(ErrorKind::InvalidInput, format!("{blocks} blocks is too large"))
            })?;
            self.file.set_len(bytes)?;
            bytes
        };
        let have = bytes / u64::from(self.block_size);
        self.block_count.store(have, Relaxed);
        if have < blocks {
            return Err(io::Error::new(
                ErrorKind::InvalidInput,
                format!("{} has {have} blocks, not {blocks}", self.name),
            ));
        }
        Ok(have)
    }
    fn read(&self, block: u64, buf: &mut [u8]) -> io::Result<()> {
        let n = check_range(self.block_size, self.block_count(), block, buf.len())?;
        let base = block * self.block_size as u64;
        if self.direct && !is_aligned(buf) {
            let chunk = self.chunk_len(buf.len());
            let mut bounce = AlignedBuf::new(chunk)?;
            for (i, piece) in buf.chunks_mut(chunk).enumerate() {
                let tmp = bounce.as_mut_slice(piece.len());
                self.file.read_exact_at(tmp, base + (i * chunk) as u64)?;
                piece.copy_from_slice(tmp);
            }
        } else {
            self.file.read_exact_at(buf, base)?;
        }
        self.counters.on_read(n);
        Ok(())
    }
    fn write(&self, block: u64, buf: &[u8]) -> io::Result<()> {
        if !self.writable {
            return Err(read_only_error());
        }
        let n = check_range(self.block_size, self.block_count(), block, buf.len())?;
        let base = block * self.block_size as u64;
        if self.direct && !is_aligned(buf) {
            let chunk = self.chunk_len(buf.len());
            let mut bounce = AlignedBuf::new(chunk)?;
            for (i, piece) in buf.chunks(chunk).enumerate() {
                let tmp = bounce.as_mut_slice(piece.len());
                tmp.copy_from_slice(piece);
                self.file.write_all_at(tmp, base + (i * chunk) as u64)?;
            }
        } else {
            self.file.write_all_at(buf, base)?;
        }
        self.counters.on_write(n);
        Ok(())
    }
    /// Batches of two or more pieces go through an io_uring, all in flight
    /// at once. Urgent batches have a ring of their own (they are
    /// serialized by the log, so they wait only for each other), which
    /// takes them even as a single piece: its bounce buffers are kept, so
    /// an fsync commit allocates none. A background batch that finds its
    /// ring busy (another commit's batch), or either kind without a ring,
    /// goes one write at a time.
    fn write_gather(&self, reqs: &[Gather]) -> io::Result<()> {
        if !self.writable {
            return Err(read_only_error());
        }
        let mut blocks = Vec::with_capacity(reqs.len());
        for (block, parts) in reqs {
            let len = parts.iter().map(|p| p.len()).sum();
            blocks.push(check_range(self.block_size, self.block_count(), *block, len)?);
        }
        let urgent = URGENT_HERE.get() > 0;
        let ring = if urgent {
            self.urgent_batch.as_ref().map(|b| b.lock())
        } else {
            self.batch.as_ref().and_then(|b| b.try_lock())
        }
        .filter(|b| b.is_usable());
        let pieces = match ring {
            Some(_) => pieces(reqs, self.block_size as usize, self.chunk_len(PIECE_MAX)),
            None => Vec::new(),
        };
        match ring {
            Some(mut ring) if urgent || pieces.len() > 1 => {
                let gate = (!urgent).then_some(&self.gate);
                ring.write(&self.file, &pieces, gate)?
            }
            _ => {
                drop(ring);
                return super::write_one_by_one(self, reqs);
            }
        }
        for n in blocks {
            self.counters.on_write(n);
        }
        Ok(())
    }
    /// A background flush (a delta commit's) waits for urgent I/O under
    /// way to end first (up to `MAX_HOLD`): an fsync commit's flush would
    /// otherwise queue behind it.
    fn flush(&self) -> io::Result<()> {
        if URGENT_HERE.get() == 0 {
            self.gate.wait_calm();
        }
        self.file.sync_data()?;
        self.counters.on_flush();
        Ok(())
    }
    fn discard(&self, start: u64, count: u64) -> io::Result<()> {
        if !self.writable {
            return Err(read_only_error());
        }
        check_discard(self.block_count(), start, count)?;
        let bs = self.block_size as u64;
        let (offset, len) = (start * bs, count * bs);
        let done = if self.block_dev {
            block_discard(&self.file, offset, len)
        } else {
            punch_hole(&self.file, offset, len)
        };
        match done {
            Ok(()) => {
                self.counters.on_discard(count);
                Ok(())
            }
            Err(e) if cannot_discard(&e) => Err(discard_unsupported()),
            Err(e) => Err(e),
        }
    }
    fn urgent_begin(&self) {
        URGENT_HERE.set(URGENT_HERE.get() + 1);
        self.gate.begin();
    }
    fn urgent_end(&self) {
        URGENT_HERE.set(URGENT_HERE.get() - 1);
        self.gate.end();
    }
    /// The same file opened again (through `/proc/self/fd`, so a rename
    /// since cannot swap it) read-only with `O_DIRECT`, if the host
    /// filesystem takes it: the open and a first aligned read must work.
    fn uncached(&self) -> Option<Box<dyn Device>> {
        if self.direct {
            return None;
        }
        let again = format!("/proc/self/fd/{}", self.file.as_raw_fd());
        let mut dev = Self::open_with(Path::new(&again), self.block_size, false, true).ok()?;
        let mut probe = AlignedBuf::new(self.block_size as usize).ok()?;
        if dev.block_count() > 0 {
            dev.read(0, probe.as_mut_slice(self.block_size as usize)).ok()?;
        }
        dev.name.clone_from(&self.name);
        Some(Box::new(dev))
    }
    fn counters(&self) -> CounterSnapshot {
        self.counters.snapshot()
    }
    fn name(&self) -> String {
        self.name.clone()
    }
}

thread_local! {
    /// Urgent I/O sections open on this thread: its own batches are the
    /// urgent ones and never hold back.
    static URGENT_HERE: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// The size in bytes of an image file or block device, and its first
/// `min(size, max)` bytes (where the superblock copies are).
pub fn read_head(path: &Path, max: u64) -> io::Result<(u64, Vec<u8>)> {
    let file = File::open(path)?;
    let meta = file.metadata()?;
    let kind = meta.file_type();
    let size = if kind.is_block_device() {
        block_device_size(&file)?
    } else if kind.is_file() {
        meta.len()
    } else {
        return Err(not_file_error());
    };
    let mut head = vec![0u8; size.min(max) as usize];
    file.read_exact_at(&mut head, 0)?;
    Ok((size, head))
}

/// Create a sparse image file of `size` bytes at `path` if nothing is there.
/// An existing regular file or block device is left alone; anything else
/// (a directory, a socket, ...) is an error.
pub fn create_image(path: &Path, size: u64) -> io::Result<()> {
    match OpenOptions::new().write(true).create_new(true).open(path) {
        Ok(file) => file.set_len(size),
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {
            let kind = std::fs::metadata(path)?.file_type();
            if kind.is_file() || kind.is_block_device() {
                Ok(())
            } else {
                Err(io::Error::new(
                    ErrorKind::InvalidInput,
                    format!(
                        "{}: exists and is not a regular file or block device",
                        path.display()
                    ),
                ))
            }
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests;
