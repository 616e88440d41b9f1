//! Scenario: a long run of unlinks under the shared delta guard. What each
//! leaves for exclusive access (its inode out of the inode table, its
//! blocks to the allocator, its log record) is settled by the unlinking
//! thread itself in small batches, so the next exclusive holder — an
//! fsync, a freeze — never finds a whole run of unlinks to carry out
//! (which stopped another process's fsync for milliseconds). Every file is
//! gone afterwards and the space is back.

use std::sync::Arc;
use tux3::device::MemDevice;
use tux3::{Errno, FormatOptions, Fs, OpenOptions, ROOT_INO};

const FILES: u64 = 5000;
/// What may wait at most here: the API settles after 64 (`SETTLE_BATCH` in
/// api/mod.rs) when no other operation holds the guard, which in this
/// single-threaded run only the commit thread's shared steps might.
/// (Without the batches, over a thousand waited.)
const BOUND: u64 = 256;

#[test]
fn shared_unlinks_settle_in_bounded_batches() {
    let mem = Arc::new(MemDevice::new(4096, 1 << 14));
    Fs::format(mem.clone(), &FormatOptions::default()).unwrap();
    let fs = Fs::open(mem.clone(), OpenOptions::default()).unwrap();
    let dir = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap().ino;
    for i in 0..FILES {
        let ino = fs
            .create(dir, format!("f{i}").as_bytes(), 0o644, 0, 0)
            .unwrap()
            .ino;
        fs.write(ino, 0, b"x").unwrap();
    }
    fs.sync().unwrap();
    let used = fs.statfs().unwrap().blocks_free;
    let mut most = 0;
    for i in 0..FILES {
        fs.unlink(dir, format!("f{i}").as_bytes()).unwrap();
        most = most.max(fs.unsettled_records());
    }
    assert!(
        most <= BOUND,
        "{most} unlinks waited for an exclusive holder to settle them (bound {BOUND})"
    );
    fs.sync().unwrap();
    assert_eq!(fs.unsettled_records(), 0);
    for i in (0..FILES).step_by(97) {
        let e = fs.lookup(dir, format!("f{i}").as_bytes()).unwrap_err();
        assert_eq!(e.errno(), Errno::ENOENT);
    }
    assert!(
        fs.statfs().unwrap().blocks_free > used,
        "the files' blocks are free again"
    );
    fs.rmdir(ROOT_INO, b"d").unwrap();
    fs.close().unwrap();
    let fs = Fs::open(mem, OpenOptions::default()).unwrap();
    assert_eq!(fs.lookup(ROOT_INO, b"d").unwrap_err().errno(), Errno::ENOENT);
}
