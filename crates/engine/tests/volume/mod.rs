//! A small in-memory volume for the integration tests: format, open,
//! check with fsck.

use std::sync::Arc;
use tux3::backend::Backend;
use tux3::device::{Device, MemDevice};
use tux3::log::{LogBlock, Record};
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

/// Append one committed log block holding `records` at the end of the log.
#[allow(dead_code)] // not every test that shares this module appends
pub fn append_log(mem: &Arc<MemDevice>, records: Vec<Record>) -> u64 {
    let dev: Arc<dyn Device> = mem.clone();
    let (be, _) = Backend::open(dev.clone(), true).unwrap();
    let tail = be.log.tail;
    let mut records = records;
    records.push(Record::Balloc {
        start: tail.next + 1,
        count: 1,
    });
    let lb = LogBlock {
        addr: tail.next,
        seq: tail.seq,
        next: tail.next + 1,
        delta: be.delta,
        prev_crc: tail.prev_crc,
        commit: true,
        fsync: false,
        nonce: 1,
        records,
        crc: 0,
    };
    dev.write(tail.next, &lb.encode(4096)).unwrap();
    tail.next
}
