//! A small in-memory volume for the integration tests: format, open,
//! check with fsck.

use std::sync::Arc;
use tux3::device::MemDevice;
use tux3::{FormatOptions, Fs, OpenOptions};
use tux3_tools::fsck::{self, FsckReport};

/// A fresh 4 MiB volume in memory.
pub fn volume() -> Arc<MemDevice> {
    let mem = Arc::new(MemDevice::new(4096, 1024));
    Fs::format(mem.clone(), &FormatOptions::default()).unwrap();
    mem
}

/// Open `mem` writable (a mount: replays and frees listed orphans).
pub fn open(mem: &Arc<MemDevice>) -> Fs {
    Fs::open(mem.clone(), OpenOptions::default()).unwrap()
}

pub fn fsck(mem: &Arc<MemDevice>) -> FsckReport {
    fsck::check(mem.clone(), &Default::default()).unwrap()
}
