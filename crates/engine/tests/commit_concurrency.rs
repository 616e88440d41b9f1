//! Scenario: a commit's device I/O runs without the volume lock. While one
//! thread's sync is stuck inside a device flush, another thread's getattr,
//! lookup, write, create and read all complete — and the data written during
//! the commit lands in the next delta, not lost, not torn.

mod gate;

use crossbeam_channel::bounded;
use std::sync::Arc;
use std::time::Duration;
use tux3::device::{Device, MemDevice};
use tux3::{FormatOptions, Fs, OpenOptions, ROOT_INO};

#[test]
fn frontend_runs_while_a_commit_is_in_flight() {
    let (gated, entered_rx, release_tx) = gate::gated(8192);
    let gated = Arc::new(gated);
    let dev: Arc<dyn Device> = gated.clone();
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    let fs = Arc::new(Fs::open(dev.clone(), OpenOptions::default()).unwrap());
    let a = fs.create(ROOT_INO, b"a", 0o644, 0, 0).unwrap();
    fs.write(a.ino, 0, &[1u8; 10000]).unwrap();

    gated.arm();
    let syncer = {
        let fs = fs.clone();
        std::thread::spawn(move || fs.sync())
    };
    entered_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the sync never reached its flush");

    // The commit is stuck in a flush. The frontend must still answer.
    let (done_tx, done_rx) = bounded(1);
    let worker = {
        let fs = fs.clone();
        std::thread::spawn(move || {
            fs.getattr(a.ino).unwrap();
            fs.lookup(ROOT_INO, b"a").unwrap();
            fs.write(a.ino, 5000, &[2u8; 100]).unwrap();
            let b = fs.create(ROOT_INO, b"b", 0o644, 0, 0).unwrap();
            fs.write(b.ino, 0, b"during").unwrap();
            let head = fs.read(a.ino, 0, 10000).unwrap();
            done_tx.send(head).unwrap();
        })
    };
    let head = done_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("frontend operations waited for the commit's I/O");
    assert_eq!(&head[..5000], &[1u8; 5000][..]);
    assert_eq!(&head[5000..5100], &[2u8; 100][..]);
    release_tx.send(()).unwrap();
    syncer.join().unwrap().unwrap();
    worker.join().unwrap();

    // The commit wrote the first version; the next sync writes the second.
    fs.sync().unwrap();
    drop(fs);
    let fs = Fs::open(dev, OpenOptions::default()).unwrap();
    let data = fs.read(a.ino, 0, 10000).unwrap();
    assert_eq!(&data[5000..5100], &[2u8; 100][..]);
    assert_eq!(&data[..5000], &[1u8; 5000][..]);
    let b = fs.lookup(ROOT_INO, b"b").unwrap();
    assert_eq!(fs.read(b.ino, 0, 100).unwrap(), b"during");
}

#[test]
fn deltas_end_by_time() {
    let mem = Arc::new(MemDevice::new(4096, 4096));
    let dev: Arc<dyn Device> = mem.clone();
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    let opts = OpenOptions {
        commit_interval: Some(Duration::from_millis(20)),
        ..OpenOptions::default()
    };
    let fs = Fs::open(dev.clone(), opts).unwrap();
    let a = fs.create(ROOT_INO, b"timed", 0o644, 0, 0).unwrap();
    fs.write(a.ino, 0, b"no sync called").unwrap();
    // Wait (bounded) for the background thread to commit on its own.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while fs.stats().deltas == 0 {
        assert!(std::time::Instant::now() < deadline, "no delta ended by time");
        std::thread::yield_now();
    }
    drop(fs); // crash: what the timer committed must be there
    let fs = Fs::open(dev, OpenOptions::default()).unwrap();
    let a = fs.lookup(ROOT_INO, b"timed").unwrap();
    assert_eq!(fs.read(a.ino, 0, 100).unwrap(), b"no sync called");
}
