//! `Fs::commit_soon`: on a volume with a commit thread, a commit starts
//! without the caller waiting, however little is dirty (a receive's
//! checkpoint is a few MiB, far below the dirty limit, and the thread's
//! own interval here is an hour); on a volume without one it says so and
//! does nothing.

use std::sync::Arc;
use std::time::{Duration, Instant};
use tux3::device::{Device, MemDevice};
use tux3::{FormatOptions, Fs, OpenOptions, ROOT_INO};

fn volume() -> Arc<dyn Device> {
    let dev: Arc<dyn Device> = Arc::new(MemDevice::new(4096, 4096));
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    dev
}

#[test]
fn a_commit_asked_for_is_made_by_the_commit_thread() {
    let dev = volume();
    let fs = Fs::open(
        dev.clone(),
        OpenOptions {
            commit_interval: Some(Duration::from_secs(3600)),
            ..OpenOptions::default()
        },
    )
    .unwrap();
    let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap();
    fs.write(f.ino, 0, &[7u8; 10_000]).unwrap();
    let before = dev.counters();
    assert!(fs.commit_soon());
    // Polled with a deadline: the commit thread writes and flushes.
    let start = Instant::now();
    while dev.counters().flushes == before.flushes {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no commit 30 s after commit_soon"
        );
        std::thread::yield_now();
    }
    assert!(dev.counters().blocks_written > before.blocks_written);
    fs.close().unwrap();
}

#[test]
fn without_a_commit_thread_it_does_nothing() {
    let dev = volume();
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap();
    fs.write(f.ino, 0, &[7u8; 10_000]).unwrap();
    let before = dev.counters();
    assert!(!fs.commit_soon());
    assert_eq!(dev.counters(), before);
    fs.close().unwrap();
}
