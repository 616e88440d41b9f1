//! Shared by the data checksum tests (and defrag's): a volume with data
//! checksums, a snapshot of it opened, and a file's extents as the device
//! holds them. Calls the engine API, the backend (read-only open, log
//! replayed) and the tools' data-map reader.

use std::sync::Arc;
use tux3::backend::Backend;
use tux3::device::{Device, MemDevice};
use tux3::structures::extent::Extent;
use tux3::structures::inode::InodeAttrs;
use tux3::{FormatOptions, Fs, OpenOptions};

/// A fresh volume of `blocks` 4 KiB blocks in memory, with data
/// checksums (`sums`) or without.
#[allow(dead_code)] // not every test that shares this module needs it
pub fn volume(blocks: u64, sums: bool) -> Arc<MemDevice> {
    let mem = Arc::new(MemDevice::new(4096, blocks));
    let dev: Arc<dyn Device> = mem.clone();
    let opts = FormatOptions {
        data_sums: sums,
        ..FormatOptions::default()
    };
    Fs::format(dev, &opts).unwrap();
    mem
}

/// Snapshot `name` of the volume on `mem`, opened read-only.
#[allow(dead_code)] // not every test that shares this module needs it
pub fn open_snapshot(mem: &Arc<MemDevice>, name: &[u8]) -> Fs {
    let dev: Arc<dyn Device> = mem.clone();
    let opts = OpenOptions {
        read_only: true,
        snapshot: Some(name.to_vec()),
        ..OpenOptions::default()
    };
    Fs::open(dev, opts).unwrap()
}

/// The extents of `ino` as the device holds them now (log replayed).
pub fn extents(mem: &Arc<MemDevice>, ino: u64) -> Vec<Extent> {
    let dev: Arc<dyn Device> = mem.clone();
    let (mut be, replay) = Backend::open(dev.clone(), true).unwrap();
    let raw = be.itable.get_mut().get(dev.as_ref(), ino).unwrap().unwrap();
    let attrs = InodeAttrs::decode(&raw, ino, 0, &tux3::structures::bounds(dev.as_ref())).unwrap();
    let mut tree = tux3_tools::datamap::data_tree(&be, ino, &attrs, replay.get(&ino)).unwrap();
    tux3_tools::datamap::tree_extents(dev.as_ref(), &mut tree).unwrap()
}
