//! Scrub's reads through the device's uncached handle (`Device::uncached`,
//! `O_DIRECT` on an image file): on an image file the pass reads through
//! it and still finds damage written through the page cache a moment
//! before; through a handle that reads, every planned block is read there
//! once; through one that fails, the scrub reads the device itself and
//! finishes as if there were no handle.

use std::os::unix::fs::FileExt;
use std::os::unix::fs::OpenOptionsExt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use tux3::device::{CounterSnapshot, Device, FileDevice, MemDevice};
use tux3::{FormatOptions, Fs, OpenOptions, ROOT_INO};
use tux3_tools::scrub::plan::{self, What};
use tux3_tools::scrub::{run, Control, Hook, Options, Report};

const BS: u32 = 4096;

/// A volume with two files of `blocks` blocks each on `dev`.
fn fill(dev: Arc<dyn Device>, blocks: usize) {
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    let fs = Fs::open(dev, OpenOptions::default()).unwrap();
    for (i, name) in [b"a", b"b"].into_iter().enumerate() {
        let f = fs.create(ROOT_INO, name, 0o644, 0, 0).unwrap().ino;
        let data: Vec<u8> = (0..blocks * BS as usize).map(|x| (x * 13 + i) as u8).collect();
        fs.write(f, 0, &data).unwrap();
    }
    fs.close().unwrap();
}

fn scrub(dev: Arc<dyn Device>) -> Report {
    let fs = Fs::open(dev, OpenOptions::default()).unwrap();
    let (_, r) = run(&fs, Options::default(), &Control::default(), &mut |_, _, _| {
        Hook::Go
    })
    .unwrap();
    fs.close().unwrap();
    r
}

/// The first data block the plan of `dev` lists.
fn a_data_block(dev: Arc<dyn Device>) -> u64 {
    let p = plan::collect(dev).unwrap();
    p.items
        .iter()
        .find(|it| matches!(it.what, What::Data { .. }))
        .unwrap()
        .start
}

#[test]
fn an_image_file_is_scrubbed_past_the_page_cache_and_damage_is_seen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("img");
    tux3::device::file::create_image(&path, 4096 * u64::from(BS)).unwrap();
    let dev: Arc<dyn Device> = Arc::new(FileDevice::open(&path, BS, true).unwrap());
    fill(dev.clone(), 600);
    let fast = dev.uncached();
    if fast.is_none() {
        // Only a host filesystem that refuses O_DIRECT has no handle.
        let refused = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(&path)
            .is_err();
        assert!(refused, "no uncached handle, but the host takes O_DIRECT");
    }
    let bad = a_data_block(dev.clone());
    // Damage written through the page cache and not yet synced: a direct
    // read sees it too (the kernel writes the range back first).
    let raw = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    raw.write_all_at(&[0xa5; 8], bad * u64::from(BS) + 40).unwrap();
    let before = dev.counters();
    let r = scrub(dev.clone());
    let after = dev.counters();
    assert_eq!((r.data_blocks(), r.meta_blocks()), (1, 0), "{:?}", r.lines());
    let named: Vec<u64> = r
        .files
        .iter()
        .flat_map(|f| f.blocks.iter().map(|b| b.1))
        .collect();
    assert_eq!(named, vec![bad], "{:?}", r.lines());
    if fast.is_some() {
        // The 1,200 data blocks went through the uncached handle: the
        // device itself read the walk's metadata and the one confirmation.
        let direct = after.blocks_read - before.blocks_read;
        assert!(direct < 600, "{direct} blocks read through the page cache");
    }
}

/// A memory device with an uncached handle that reads the same blocks
/// (counting them) or fails every read.
struct WithHandle {
    mem: Arc<MemDevice>,
    fails: bool,
    /// Blocks the handle read, and reads it failed.
    fast_blocks: Arc<AtomicU64>,
    fast_failures: Arc<AtomicU64>,
}

impl WithHandle {
    fn new(mem: &Arc<MemDevice>, fails: bool) -> WithHandle {
        WithHandle {
            mem: mem.clone(),
            fails,
            fast_blocks: Arc::default(),
            fast_failures: Arc::default(),
        }
    }
}

impl Device for WithHandle {
    fn block_size(&self) -> u32 {
        self.mem.block_size()
    }
    fn block_count(&self) -> u64 {
        self.mem.block_count()
    }
    fn read(&self, block: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.mem.read(block, buf)
    }
    fn write(&self, block: u64, buf: &[u8]) -> std::io::Result<()> {
        self.mem.write(block, buf)
    }
    fn flush(&self) -> std::io::Result<()> {
        self.mem.flush()
    }
    fn counters(&self) -> CounterSnapshot {
        self.mem.counters()
    }
    fn uncached(&self) -> Option<Box<dyn Device>> {
        Some(Box::new(Handle {
            mem: self.mem.clone(),
            fails: self.fails,
            blocks: self.fast_blocks.clone(),
            failures: self.fast_failures.clone(),
        }))
    }
}

/// The uncached handle of [`WithHandle`]: reads only.
struct Handle {
    mem: Arc<MemDevice>,
    fails: bool,
    blocks: Arc<AtomicU64>,
    failures: Arc<AtomicU64>,
}

impl Device for Handle {
    fn block_size(&self) -> u32 {
        self.mem.block_size()
    }
    fn block_count(&self) -> u64 {
        self.mem.block_count()
    }
    fn read(&self, block: u64, buf: &mut [u8]) -> std::io::Result<()> {
        if self.fails {
            self.failures.fetch_add(1, Relaxed);
            return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
        }
        self.mem.read(block, buf)?;
        self.blocks.fetch_add((buf.len() / BS as usize) as u64, Relaxed);
        Ok(())
    }
    fn write(&self, _: u64, _: &[u8]) -> std::io::Result<()> {
        Err(std::io::Error::from_raw_os_error(libc::EROFS))
    }
    fn flush(&self) -> std::io::Result<()> {
        Ok(())
    }
    fn counters(&self) -> CounterSnapshot {
        CounterSnapshot::default()
    }
}

#[test]
fn every_planned_block_is_read_once_through_the_handle() {
    let mem = Arc::new(MemDevice::new(BS, 8192));
    fill(mem.clone(), 900);
    let dev = Arc::new(WithHandle::new(&mem, false));
    let planned = plan::collect(mem.clone()).unwrap().blocks();
    let bad = a_data_block(mem.clone());
    let mut buf = vec![0u8; BS as usize];
    mem.read(bad, &mut buf).unwrap();
    buf[7] ^= 1;
    mem.write(bad, &buf).unwrap();
    let r = scrub(dev.clone());
    assert_eq!((r.data_blocks(), r.meta_blocks()), (1, 0), "{:?}", r.lines());
    assert_eq!(dev.fast_blocks.load(Relaxed), planned);
    assert_eq!(dev.fast_failures.load(Relaxed), 0);
}

#[test]
fn a_failing_handle_falls_back_to_the_device() {
    let mem = Arc::new(MemDevice::new(BS, 8192));
    fill(mem.clone(), 900);
    let planned = plan::collect(mem.clone()).unwrap().blocks();
    let dev = Arc::new(WithHandle::new(&mem, true));
    let before = mem.counters();
    let r = scrub(dev.clone());
    let after = mem.counters();
    assert!(r.is_clean(), "{:?}", r.lines());
    assert_eq!(dev.fast_blocks.load(Relaxed), 0);
    // Tried at most once by each of the (two) readers, then left alone.
    let tries = dev.fast_failures.load(Relaxed);
    assert!(
        (1..=2).contains(&tries),
        "{tries} failed reads through the handle"
    );
    let through_device = after.blocks_read - before.blocks_read;
    assert!(through_device >= planned, "{through_device} of {planned}");
}
