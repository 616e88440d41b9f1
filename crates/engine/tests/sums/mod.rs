//! Shared by the data checksum tests: a file's extents as the device holds
//! them. Calls the backend (read-only open, log replayed) and the tools'
//! data-map reader.

use std::sync::Arc;
use tux3::backend::Backend;
use tux3::device::{Device, MemDevice};
use tux3::structures::extent::Extent;
use tux3::structures::inode::InodeAttrs;

/// The extents of `ino` as the device holds them now (log replayed).
pub fn extents(mem: &Arc<MemDevice>, ino: u64) -> Vec<Extent> {
    let dev: Arc<dyn Device> = mem.clone();
    let (mut be, replay) = Backend::open(dev.clone(), true).unwrap();
    let raw = be.itable.get_mut().get(dev.as_ref(), ino).unwrap().unwrap();
    let attrs = InodeAttrs::decode(&raw, ino, 0, &tux3::structures::bounds(dev.as_ref())).unwrap();
    let mut tree = tux3_tools::datamap::data_tree(&be, ino, &attrs, replay.get(&ino)).unwrap();
    tux3_tools::datamap::tree_extents(dev.as_ref(), &mut tree).unwrap()
}
