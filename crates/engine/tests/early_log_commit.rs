//! A run of unlinks on a volume with a commit thread: once the open
//! delta's log holds `EARLY_LOG_RECORDS` records (one per freed inode),
//! the thread commits it early, long before its interval, so that no
//! delta's log write — which an fsync meanwhile waits for — grows with the
//! run.

use std::sync::Arc;
use std::time::{Duration, Instant};
use tux3::device::{Device, MemDevice};
use tux3::{FormatOptions, Fs, Ino, OpenOptions, ROOT_INO};

/// More than `EARLY_LOG_RECORDS` (65,536).
const FILES: u64 = 70_000;

fn volume_with_files(interval: Option<Duration>) -> (Arc<MemDevice>, Fs, Ino) {
    let mem = Arc::new(MemDevice::new(4096, 1 << 20));
    Fs::format(mem.clone(), &FormatOptions::default()).unwrap();
    let opts = OpenOptions {
        commit_interval: interval,
        ..OpenOptions::default()
    };
    let fs = Fs::open(mem.clone(), opts).unwrap();
    let dir = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap().ino;
    for i in 0..FILES {
        fs.create(dir, format!("f{i}").as_bytes(), 0o644, 0, 0).unwrap();
    }
    fs.sync().unwrap();
    (mem, fs, dir)
}

fn unlink_all(fs: &Fs, dir: Ino) {
    for i in 0..FILES {
        fs.unlink(dir, format!("f{i}").as_bytes()).unwrap();
    }
}

#[test]
fn a_long_log_is_committed_early_by_the_commit_thread() {
    let (mem, fs, dir) = volume_with_files(Some(Duration::from_secs(3600)));
    let deltas = fs.stats().deltas;
    let flushes = mem.counters().flushes;
    unlink_all(&fs, dir);
    // Polled with a deadline: the commit thread writes and flushes.
    let start = Instant::now();
    while fs.stats().deltas == deltas {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no early commit 30 s after {FILES} unlinks ({} log records open)",
            fs.log_records()
        );
        std::thread::yield_now();
    }
    assert!(mem.counters().flushes > flushes);
    assert!(fs.log_records() < FILES as usize);
    fs.close().unwrap();
}
