//! Image file or block device. Owns positional I/O on one file descriptor,
//! `O_DIRECT` plus aligned bounce buffers on block devices, the device-size
//! ioctl, opening an existing image (`open_path`) and creating a sparse one.
//!
//! Calls nothing else in the crate except `error` and the superblock's
//! block-size probe (in `open_path`).

use super::{check_range, CounterSnapshot, Counters, Device};
use crate::error::{Error, Result};
use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::fs::{File, OpenOptions};
use std::io::{self, ErrorKind};
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::Arc;

/// Alignment of bounce buffers for `O_DIRECT` I/O.
const DIRECT_ALIGN: usize = 4096;
/// Largest bounce buffer; bigger requests are done in pieces.
const BOUNCE_MAX: usize = 1 << 20;
/// How much of an image `open_path` reads to find the superblock.
const PROBE_BYTES: u64 = 128 * 1024;

/// A device backed by a regular file or a block device.
pub struct FileDevice {
    file: File,
    block_size: u32,
    block_count: u64,
    writable: bool,
    /// Opened with `O_DIRECT`: all I/O goes through aligned bounce buffers.
    direct: bool,
    counters: Counters,
}

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
        let bytes = if meta.file_type().is_block_device() {
            block_device_size(&file)?
        } else {
            meta.len()
        };
        Ok(FileDevice {
            file,
            block_size,
            block_count: bytes / block_size as u64,
            writable,
            direct,
            counters: Counters::default(),
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

fn not_file_error() -> io::Error {
    io::Error::new(ErrorKind::InvalidInput, "not a regular file or block device")
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

/// A zeroed heap buffer aligned to [`DIRECT_ALIGN`], for `O_DIRECT` I/O.
struct AlignedBuf {
    ptr: NonNull<u8>,
    layout: Layout,
}

impl AlignedBuf {
    fn new(len: usize) -> io::Result<AlignedBuf> {
        let layout = Layout::from_size_align(len.max(1), DIRECT_ALIGN)
            .map_err(|e| io::Error::new(ErrorKind::InvalidInput, e.to_string()))?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(ptr).ok_or_else(|| io::Error::new(ErrorKind::OutOfMemory, "bounce buffer"))?;
        Ok(AlignedBuf { ptr, layout })
    }
    fn as_mut_slice(&mut self, len: usize) -> &mut [u8] {
        // SAFETY: the allocation holds `layout.size()` initialised bytes and we own it.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), len.min(self.layout.size())) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this same layout.
        unsafe { dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

impl Device for FileDevice {
    fn block_size(&self) -> u32 {
        self.block_size
    }
    fn block_count(&self) -> u64 {
        self.block_count
    }
    fn read(&self, block: u64, buf: &mut [u8]) -> io::Result<()> {
        let n = check_range(self.block_size, self.block_count, block, buf.len())?;
        let base = block * self.block_size as u64;
        if self.direct {
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
            return Err(io::Error::new(
                ErrorKind::PermissionDenied,
                "device is open read-only",
            ));
        }
        let n = check_range(self.block_size, self.block_count, block, buf.len())?;
        let base = block * self.block_size as u64;
        if self.direct {
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
    fn flush(&self) -> io::Result<()> {
        self.file.sync_data()?;
        self.counters.on_flush();
        Ok(())
    }
    fn counters(&self) -> CounterSnapshot {
        self.counters.snapshot()
    }
}

/// Open an existing tux3 image or block device, learning its block size from
/// the superblock.
pub fn open_path(path: &Path, writable: bool) -> Result<Arc<dyn Device>> {
    let bad = |e: io::Error| Error::BadImage(format!("{}: {}", path.display(), e));
    let file = File::open(path).map_err(bad)?;
    let meta = file.metadata().map_err(bad)?;
    let kind = meta.file_type();
    let size = if kind.is_block_device() {
        block_device_size(&file).map_err(bad)?
    } else if kind.is_file() {
        meta.len()
    } else {
        return Err(bad(not_file_error()));
    };
    let mut head = vec![0u8; size.min(PROBE_BYTES) as usize];
    file.read_exact_at(&mut head, 0).map_err(bad)?;
    let block_size = crate::structures::superblock::probe_block_size(&head).ok_or_else(|| {
        Error::BadImage(format!(
            "{}: not a tux3 volume (no valid superblock)",
            path.display()
        ))
    })?;
    if size < 2 * block_size as u64 {
        return Err(Error::BadImage(format!(
            "{}: image is truncated ({size} bytes, less than two {block_size}-byte blocks)",
            path.display()
        )));
    }
    drop(file);
    let dev = FileDevice::open(path, block_size, writable).map_err(bad)?;
    Ok(Arc::new(dev))
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
mod tests {
    use super::*;

    const BS: u32 = 4096;

    fn temp_image(blocks: u64) -> tempfile::NamedTempFile {
        let f = tempfile::NamedTempFile::new().unwrap();
        f.as_file().set_len(blocks * BS as u64).unwrap();
        f
    }

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    #[test]
    fn round_trip_and_counters() {
        let img = temp_image(16);
        let dev = FileDevice::open(img.path(), BS, true).unwrap();
        assert_eq!(dev.block_count(), 16);
        assert_eq!(dev.block_size(), BS);
        let data = pattern(3 * BS as usize, 7);
        dev.write(5, &data).unwrap();
        dev.write(0, &pattern(BS as usize, 1)).unwrap();
        let mut back = vec![0; 3 * BS as usize];
        dev.read(5, &mut back).unwrap();
        assert_eq!(back, data);
        dev.flush().unwrap();
        let c = dev.counters();
        assert_eq!(
            c,
            CounterSnapshot {
                blocks_read: 3,
                blocks_written: 4,
                reads: 1,
                writes: 2,
                flushes: 1
            }
        );
        // A second open sees the data.
        let dev2 = FileDevice::open(img.path(), BS, false).unwrap();
        let mut one = vec![0; BS as usize];
        dev2.read(6, &mut one).unwrap();
        assert_eq!(one, data[BS as usize..2 * BS as usize]);
    }

    #[test]
    fn out_of_range_is_an_error() {
        let img = temp_image(4);
        let dev = FileDevice::open(img.path(), BS, true).unwrap();
        let mut buf = vec![0; 2 * BS as usize];
        assert!(dev.read(3, &mut buf).is_err());
        assert!(dev.write(3, &buf).is_err());
        assert!(dev.read(u64::MAX, &mut buf).is_err());
        assert!(dev.read(0, &mut buf[..100]).is_err());
        assert!(dev.write(0, &[]).is_err());
        assert_eq!(dev.counters(), CounterSnapshot::default());
    }

    #[test]
    fn read_only_refuses_writes() {
        let img = temp_image(4);
        let dev = FileDevice::open(img.path(), BS, false).unwrap();
        let err = dev.write(0, &vec![1; BS as usize]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::PermissionDenied);
        let mut buf = vec![1; BS as usize];
        dev.read(0, &mut buf).unwrap();
        assert!(buf.iter().all(|&b| b == 0));
    }

    #[test]
    fn direct_io_with_unaligned_buffers() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("img");
        create_image(&path, 320 * BS as u64).unwrap();
        // Not every filesystem supports O_DIRECT; skip where it does not.
        let Ok(dev) = FileDevice::open_with(&path, BS, true, true) else {
            return;
        };
        // 300 blocks: more than one bounce-buffer piece.
        let data = pattern(300 * BS as usize + 1, 3);
        if dev.write(1, &data[1..]).is_err() {
            return;
        }
        let mut back = vec![0; 300 * BS as usize + 1];
        dev.read(1, &mut back[1..]).unwrap();
        assert_eq!(back[1..], data[1..]);
    }

    #[test]
    fn create_image_is_sparse_and_leaves_files_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("img");
        create_image(&path, 1 << 20).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 1 << 20);
        std::fs::write(&path, b"keep").unwrap();
        create_image(&path, 1 << 20).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"keep");
        assert!(create_image(dir.path(), 1 << 20).is_err());
    }

    #[test]
    fn open_path_errors_name_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing");
        let e = open_path(&missing, false).err().unwrap().to_string();
        assert!(e.starts_with(&missing.display().to_string()), "{e}");
        let junk = dir.path().join("junk");
        std::fs::write(&junk, vec![0u8; 8192]).unwrap();
        let e = open_path(&junk, false).err().unwrap().to_string();
        assert!(e.contains("not a tux3 volume"), "{e}");
        assert!(open_path(dir.path(), false).is_err());
    }
}
