//! Scenario: fast fsync. An fsync commits only the inode (and the new entry
//! naming it) in log blocks of the chain with one flush; concurrent fsyncs
//! share one commit; a crash keeps what each fsync covered; a later full
//! delta supersedes the fsync commits; replay of an fsync tail writes nothing.

mod gate;

use std::sync::Arc;
use std::time::Duration;
use tux3::device::{Device, MemDevice};
use tux3::{FormatOptions, Fs, OpenOptions, RenameFlags, ROOT_INO};

fn fresh() -> (Arc<MemDevice>, Arc<dyn Device>) {
    let mem = Arc::new(MemDevice::new(4096, 8192));
    let dev: Arc<dyn Device> = mem.clone();
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    (mem, dev)
}

fn open(dev: &Arc<dyn Device>) -> Fs {
    Fs::open(dev.clone(), OpenOptions::default()).unwrap()
}

#[test]
fn small_append_fsync_costs_one_block_and_one_flush() {
    let (_mem, dev) = fresh();
    let fs = open(&dev);
    let f = fs.create(ROOT_INO, b"log", 0o644, 0, 0).unwrap();
    fs.sync().unwrap();
    let before = fs.counters();
    let n = 200u64;
    for i in 0..n {
        fs.write(f.ino, i * 1024, &[(i % 251) as u8; 1024]).unwrap();
        fs.fsync(f.ino, false).unwrap();
    }
    let after = fs.counters();
    let blocks = after.blocks_written - before.blocks_written;
    let flushes = after.flushes - before.flushes;
    assert!(blocks <= 2 * n, "{blocks} blocks written for {n} fsyncs");
    assert_eq!(flushes, n, "one flush per fsync");
    assert_eq!(fs.stats().fsyncs, n);
    drop(fs); // crash
    let fs = open(&dev);
    let data = fs.read(f.ino, 0, (n * 1024) as usize).unwrap();
    assert_eq!(data.len() as u64, n * 1024);
    for i in 0..n as usize {
        assert!(
            data[i * 1024..(i + 1) * 1024]
                .iter()
                .all(|&b| b == (i % 251) as u8),
            "record {i}"
        );
    }
}

#[test]
fn repeated_fsync_of_an_unchanged_file_writes_nothing() {
    let (_mem, dev) = fresh();
    let fs = open(&dev);
    let f = fs.create(ROOT_INO, b"db", 0o644, 0, 0).unwrap();
    fs.write(f.ino, 0, b"first").unwrap();
    fs.fsync(f.ino, false).unwrap();
    let cost = |f: &dyn Fn()| {
        let c0 = fs.counters();
        f();
        let c1 = fs.counters();
        (c1.blocks_written - c0.blocks_written, c1.flushes - c0.flushes)
    };
    let again = || fs.fsync(f.ino, false).unwrap();
    for _ in 0..3 {
        assert_eq!(cost(&again), (0, 0), "nothing changed since the last fsync");
    }
    // Any change is logged again: data, then an attribute alone.
    fs.write(f.ino, 5, b", second").unwrap();
    assert_eq!(cost(&again).1, 1, "a write");
    assert_eq!(cost(&again), (0, 0));
    let set = tux3::SetAttr {
        mode: Some(0o600),
        ..tux3::SetAttr::default()
    };
    fs.setattr(f.ino, &set).unwrap();
    assert_eq!(cost(&again).1, 1, "a mode change");
    assert_eq!(cost(&again), (0, 0));
    drop(fs); // crash
    let fs = open(&dev);
    assert_eq!(&fs.read(f.ino, 0, 64).unwrap(), b"first, second");
    assert_eq!(fs.getattr(f.ino).unwrap().mode & 0o7777, 0o600);
}

#[test]
fn fsync_of_a_new_file_jumps_the_queue() {
    let (_mem, dev) = fresh();
    let fs = open(&dev);
    let other = fs.create(ROOT_INO, b"unrelated", 0o644, 0, 0).unwrap();
    fs.write(other.ino, 0, b"not synced").unwrap();
    let f = fs.create(ROOT_INO, b"mail", 0o600, 0, 0).unwrap();
    fs.write(f.ino, 0, b"delivered").unwrap();
    fs.fsync(f.ino, false).unwrap();
    drop(fs);
    let fs = open(&dev);
    let g = fs.lookup(ROOT_INO, b"mail").unwrap();
    assert_eq!(g.ino, f.ino);
    assert_eq!(g.mode & 0o7777, 0o600);
    assert_eq!(fs.read(f.ino, 0, 100).unwrap(), b"delivered");
    // The unrelated change was not fsynced and did not ride along.
    assert!(fs.lookup(ROOT_INO, b"unrelated").is_err());
    let report = tux3_tools::fsck::check(dev.clone(), &Default::default()).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}

#[test]
fn full_delta_supersedes_fsync_commits_and_fallbacks_stay_correct() {
    let (_mem, dev) = fresh();
    let fs = open(&dev);
    let f = fs.create(ROOT_INO, b"a", 0o644, 0, 0).unwrap();
    fs.write(f.ino, 0, &[1u8; 3000]).unwrap();
    fs.fsync(f.ino, false).unwrap();
    // Truncate down (extent-free here) and rewrite; a full commit follows.
    fs.write(f.ino, 0, &[2u8; 100]).unwrap();
    fs.setattr(
        f.ino,
        &tux3::SetAttr {
            size: Some(100),
            ..Default::default()
        },
    )
    .unwrap();
    fs.sync().unwrap();
    // Rename then fsync: the fsync commit logs the rename too.
    fs.rename(ROOT_INO, b"a", ROOT_INO, b"b", RenameFlags::default())
        .unwrap();
    fs.write(f.ino, 100, &[3u8; 10]).unwrap();
    fs.fsync(f.ino, false).unwrap();
    drop(fs);
    let fs = open(&dev);
    assert!(fs.lookup(ROOT_INO, b"a").is_err());
    let b = fs.lookup(ROOT_INO, b"b").unwrap();
    assert_eq!(b.size, 110);
    let data = fs.read(b.ino, 0, 200).unwrap();
    assert_eq!(&data[..100], &[2u8; 100][..]);
    assert_eq!(&data[100..], &[3u8; 10][..]);
    let report = tux3_tools::fsck::check(dev.clone(), &Default::default()).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}

#[test]
fn replaying_an_fsync_tail_writes_nothing_until_changed() {
    let (mem, dev) = fresh();
    let fs = open(&dev);
    let f = fs.create(ROOT_INO, b"x", 0o644, 0, 0).unwrap();
    fs.write(f.ino, 0, b"tail").unwrap();
    fs.fsync(f.ino, false).unwrap();
    drop(fs);
    let image = mem.image();
    let fs = open(&dev);
    assert_eq!(fs.read(f.ino, 0, 10).unwrap(), b"tail");
    fs.close().unwrap();
    assert!(
        mem.image() == image,
        "open/close of an fsync tail changed the image"
    );
    // A real change afterwards commits the replayed state for good.
    let fs = open(&dev);
    fs.write(f.ino, 4, b"!").unwrap();
    fs.close().unwrap();
    let fs = open(&dev);
    assert_eq!(fs.read(f.ino, 0, 10).unwrap(), b"tail!");
}

#[test]
fn concurrent_fsyncs_share_one_commit() {
    let (gate, entered_rx, release_tx) = gate::gated(8192);
    let gate = Arc::new(gate);
    let dev: Arc<dyn Device> = gate.clone();
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    let fs = Arc::new(open(&dev));
    let n = 8;
    let files: Vec<_> = (0..=n)
        .map(|i| {
            fs.create(ROOT_INO, format!("f{i}").as_bytes(), 0o644, 0, 0)
                .unwrap()
                .ino
        })
        .collect();
    fs.sync().unwrap();
    for &ino in &files {
        fs.write(ino, 0, &[7u8; 1024]).unwrap();
    }
    gate.arm();
    let first = {
        let fs = fs.clone();
        let ino = files[0];
        std::thread::spawn(move || fs.fsync(ino, false))
    };
    entered_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("first fsync never flushed");
    let before = gate.inner.counters().flushes;
    let waiters: Vec<_> = files[1..]
        .iter()
        .map(|&ino| {
            let fs = fs.clone();
            std::thread::spawn(move || fs.fsync(ino, false))
        })
        .collect();
    // Wait (bounded) until every waiter has registered for the next commit.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while fs.pending_fsyncs() < n {
        assert!(std::time::Instant::now() < deadline, "fsyncs never queued");
        std::thread::yield_now();
    }
    release_tx.send(()).unwrap();
    first.join().unwrap().unwrap();
    for w in waiters {
        w.join().unwrap().unwrap();
    }
    let flushes = gate.inner.counters().flushes - before;
    // The first commit's flush (released above) plus one for the group.
    assert_eq!(flushes, 2, "{n} queued fsyncs took {flushes} flushes");
}

/// An fsync of a file the delta commit in flight holds nothing undurable of
/// goes ahead of that commit: it completes (one flush) while the commit is
/// between its data and its log. A crash right then keeps the fsynced data
/// and loses the unfinished commit's; once the commit lands, both are there.
#[test]
fn fsync_goes_ahead_of_a_delta_commit_writing_its_data() {
    goes_ahead_of_a_commit(false);
}

/// The same ahead of a unify writing its blocks, before its superblock: the
/// log goes on across the unify, so the fsync commit counts whether the
/// crash keeps the old superblock or the unify's. (Images naming roots the
/// unify gave are checked by the `fsync_ahead` crash workload.)
#[test]
fn fsync_goes_ahead_of_a_unify_writing_its_blocks() {
    goes_ahead_of_a_commit(true);
}

/// Fsync `ino` from inside a commit in flight; returns the flushes it took.
fn fsync_ahead(fs: &Fs, ino: u64) -> u64 {
    let (tx, rx) = crossbeam_channel::bounded(1);
    let before = fs.counters().flushes;
    fs.fsync_then(
        ino,
        false,
        Box::new(move |r| {
            let _ = tx.send(r);
        }),
    );
    // Safety net only: an fsync that waited for the commit in flight would
    // never complete here.
    rx.recv_timeout(Duration::from_secs(60))
        .expect("the fsync did not wait for the commit in flight")
        .unwrap();
    fs.counters().flushes - before
}

fn goes_ahead_of_a_commit(unify: bool) {
    let (mem, dev) = fresh();
    let fs = open(&dev);
    let probe = fs.create(ROOT_INO, b"probe", 0o644, 0, 0).unwrap().ino;
    let stream = fs.create(ROOT_INO, b"stream", 0o644, 0, 0).unwrap().ino;
    fs.write(probe, 0, &[1u8; 4096]).unwrap();
    fs.sync().unwrap();
    // The next delta: the probe's append is made durable by its fsync; the
    // stream's 1 MiB is not.
    fs.write(probe, 4096, &[2u8; 4096]).unwrap();
    fs.fsync(probe, false).unwrap();
    fs.write(stream, 0, &vec![7u8; 1 << 20]).unwrap();
    let (deltas, unifies) = (fs.stats().deltas, fs.stats().unifies);
    let mut crash_image = None;
    let during = || {
        fs.write(probe, 8192, &[3u8; 4096]).unwrap();
        assert_eq!(fsync_ahead(&fs, probe), 1, "one flush for the fsync");
        assert_eq!(fs.stats().deltas, deltas, "the delta commit has not finished");
        assert_eq!(fs.stats().unifies, unifies, "the unify has not finished");
        crash_image = Some(mem.image());
    };
    if unify {
        fs.unify_with(during).unwrap();
        assert_eq!(fs.stats().unifies, unifies + 1);
    } else {
        fs.sync_with(during).unwrap();
    }
    assert_eq!(fs.stats().deltas, deltas + 1);

    // A crash while the delta commit was between its data and its log.
    let crashed = Arc::new(MemDevice::from_image(4096, crash_image.unwrap()));
    let cdev: Arc<dyn Device> = crashed.clone();
    let report = tux3_tools::fsck::check(cdev.clone(), &Default::default()).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    let c = open(&cdev);
    let got = c.read(probe, 0, 3 * 4096).unwrap();
    assert_eq!(got.len(), 3 * 4096, "everything the fsyncs covered");
    assert!(got[..4096].iter().all(|&b| b == 1));
    assert!(got[4096..8192].iter().all(|&b| b == 2));
    assert!(got[8192..].iter().all(|&b| b == 3));
    assert_eq!(
        c.getattr(stream).unwrap().size,
        0,
        "the unfinished commit's data is not there"
    );
    drop(c);

    // A crash after the commit: both.
    drop(fs);
    let report = tux3_tools::fsck::check(dev.clone(), &Default::default()).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    let fs = open(&dev);
    assert_eq!(fs.read(probe, 8192, 4096).unwrap(), vec![3u8; 4096]);
    assert_eq!(fs.read(stream, 0, 1 << 20).unwrap(), vec![7u8; 1 << 20]);
    assert_eq!(
        fs.getattr(probe).unwrap().blocks * 512,
        3 * 4096,
        "{:?}",
        fs.getattr(probe)
    );
}

/// Commit the open delta, and while it is in flight — its data written, or
/// with `log_written` its log — write `data` at `at` of `ino` and fsync it
/// (one flush, the commit unfinished). Returns the device a crash right
/// after that fsync leaves, which fsck finds clean.
fn fsync_during_commit(
    fs: &Fs,
    mem: &MemDevice,
    log_written: bool,
    (ino, at, data): (u64, u64, &[u8]),
) -> Arc<dyn Device> {
    let deltas = fs.stats().deltas;
    let mut crash_image = None;
    let during = || {
        fs.write(ino, at, data).unwrap();
        assert_eq!(fsync_ahead(fs, ino), 1, "one flush for the fsync");
        assert_eq!(fs.stats().deltas, deltas, "the delta commit has not finished");
        crash_image = Some(mem.image());
    };
    if log_written {
        fs.sync_with_log_written(during).unwrap();
    } else {
        fs.sync_with(during).unwrap();
    }
    assert_eq!(fs.stats().deltas, deltas + 1);
    let crashed: Arc<dyn Device> = Arc::new(MemDevice::from_image(4096, crash_image.unwrap()));
    let report = tux3_tools::fsck::check(crashed.clone(), &Default::default()).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    crashed
}

/// Once the delta commit in flight has written its log, an fsync no longer
/// waits for it, whatever that commit holds of the file (here its name and
/// first write, which no fsync made durable): the fsync commit follows it in
/// the log, and its flush makes both durable. A crash right then keeps the
/// unfinished commit and the fsync.
#[test]
fn fsync_follows_a_delta_commit_whose_log_is_written() {
    let (mem, dev) = fresh();
    let fs = open(&dev);
    fs.sync().unwrap();
    let probe = fs.create(ROOT_INO, b"probe", 0o644, 0, 0).unwrap().ino;
    let stream = fs.create(ROOT_INO, b"stream", 0o644, 0, 0).unwrap().ino;
    fs.write(probe, 0, &[1u8; 5000]).unwrap();
    fs.write(stream, 0, &vec![7u8; 1 << 20]).unwrap();
    let crashed = fsync_during_commit(&fs, &mem, true, (probe, 5000, &[2u8; 3000]));
    let c = open(&crashed);
    assert_eq!(c.lookup(ROOT_INO, b"probe").unwrap().ino, probe);
    let got = c.read(probe, 0, 8000).unwrap();
    assert_eq!(got.len(), 8000, "the commit's write and the fsync's");
    assert!(got[..5000].iter().all(|&b| b == 1) && got[5000..].iter().all(|&b| b == 2));
    assert_eq!(
        c.read(stream, 0, 1 << 20).unwrap(),
        vec![7u8; 1 << 20],
        "the commit's stream"
    );
}

/// An fsync of a file whose last write the commit in flight holds (frozen
/// before anything made it durable) still goes ahead of that commit: the
/// fsync commit logs the frozen pages too. A crash right then keeps them.
#[test]
fn fsync_covers_pages_frozen_in_the_commit_in_flight() {
    let (mem, dev) = fresh();
    let fs = open(&dev);
    let probe = fs.create(ROOT_INO, b"probe", 0o644, 0, 0).unwrap().ino;
    let stream = fs.create(ROOT_INO, b"stream", 0o644, 0, 0).unwrap().ino;
    fs.sync().unwrap();
    fs.write(probe, 0, &[4u8; 6000]).unwrap();
    fs.write(stream, 0, &vec![7u8; 1 << 20]).unwrap();
    // Half of the frozen data rewritten in the next delta.
    let crashed = fsync_during_commit(&fs, &mem, false, (probe, 4096, &[5u8; 100]));
    let c = open(&crashed);
    let got = c.read(probe, 0, 8192).unwrap();
    assert_eq!(got.len(), 6000);
    assert!(got[..4096].iter().all(|&b| b == 4), "the frozen page");
    assert!(got[4096..4196].iter().all(|&b| b == 5), "the rewrite");
    assert!(got[4196..].iter().all(|&b| b == 4), "the frozen page's rest");
    assert_eq!(c.getattr(stream).unwrap().size, 0, "the unfinished commit's data");
}

/// Syncs that wait together while a commit is in flight share the next
/// commit; a change made after they were called (while that commit is in
/// flight) does not cost another.
#[test]
fn concurrent_syncs_share_one_commit() {
    let (gate, entered_rx, release_tx) = gate::gated(8192);
    let gate = Arc::new(gate);
    let dev: Arc<dyn Device> = gate.clone();
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    let fs = Arc::new(open(&dev));
    let file = |name: &[u8]| fs.create(ROOT_INO, name, 0o644, 0, 0).unwrap().ino;
    let (a, b, c) = (file(b"a"), file(b"b"), file(b"c"));
    fs.sync().unwrap();
    let wait = |what: &str| {
        entered_rx
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("{what} never flushed"))
    };
    fs.write(a, 0, &[1u8; 1000]).unwrap();
    gate.arm();
    let first = {
        let fs = fs.clone();
        std::thread::spawn(move || fs.sync())
    };
    wait("the first sync");
    let before = gate.inner.counters().flushes;
    fs.write(b, 0, &[2u8; 1000]).unwrap();
    let n = 6;
    let waiters: Vec<_> = (0..n)
        .map(|_| {
            let fs = fs.clone();
            std::thread::spawn(move || fs.sync())
        })
        .collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while fs.pending_syncs() < n {
        assert!(std::time::Instant::now() < deadline, "syncs never queued");
        std::thread::yield_now();
    }
    // Hold the next commit (the one serving the waiters) in its flush, and
    // change `c` meanwhile: no waiter needs that change.
    gate.arm();
    release_tx.send(()).unwrap();
    wait("the waiters' commit");
    fs.write(c, 0, &[3u8; 1000]).unwrap();
    release_tx.send(()).unwrap();
    first.join().unwrap().unwrap();
    for w in waiters {
        w.join().unwrap().unwrap();
    }
    let flushes = gate.inner.counters().flushes - before;
    assert_eq!(flushes, 2, "{n} waiting syncs took {} commits", flushes - 1);
    assert_eq!(fs.stats().dirty_bytes, 4096, "the later change is still pending");
}

/// Next to a streaming writer that has filled its share of the dirty limit
/// and waits for the commit in flight, a light writer (an appended log)
/// still writes and fsyncs: the heavy file stops an eighth short of the
/// limit.
#[test]
fn light_writer_goes_on_while_a_heavy_writer_waits() {
    const LIMIT: u64 = 1 << 20;
    let (gate, entered_rx, release_tx) = gate::gated(8192);
    let gate = Arc::new(gate);
    let dev: Arc<dyn Device> = gate.clone();
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    let opts = OpenOptions {
        dirty_limit: LIMIT,
        commit_interval: None,
        ..OpenOptions::default()
    };
    let fs = Arc::new(Fs::open(dev.clone(), opts).unwrap());
    let stream = fs.create(ROOT_INO, b"stream", 0o644, 0, 0).unwrap().ino;
    let log = fs.create(ROOT_INO, b"log", 0o644, 0, 0).unwrap().ino;
    fs.sync().unwrap();
    fs.write(stream, 0, &vec![1u8; 512 << 10]).unwrap();
    // Hold a commit of the stream's first half in flight.
    gate.arm();
    let sync = {
        let fs = fs.clone();
        std::thread::spawn(move || fs.sync())
    };
    entered_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the commit never flushed");
    let heavy = {
        let fs = fs.clone();
        std::thread::spawn(move || {
            for i in 0..16u64 {
                fs.write(stream, (512 << 10) + i * (64 << 10), &[2u8; 64 << 10])?;
            }
            Ok::<_, tux3::Error>(())
        })
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while fs.pending_writes() == 0 {
        assert!(std::time::Instant::now() < deadline, "the stream never waited");
        std::thread::yield_now();
    }
    let held = fs.stats().dirty_bytes + fs.stats().in_flight_bytes;
    assert!(held <= LIMIT - LIMIT / 8, "the stream holds {held} bytes");
    // The light writer: a 4 KiB append and its fsync, while the stream waits.
    let (tx, rx) = crossbeam_channel::bounded(1);
    {
        let fs = fs.clone();
        std::thread::spawn(move || {
            let r = fs.write(log, 0, &[3u8; 4096]);
            let _ = tx.send(r);
        });
    }
    let r = rx.recv_timeout(Duration::from_secs(30));
    let went = r.is_ok();
    release_tx.send(()).unwrap();
    assert!(went, "the light write waited for the commit in flight");
    sync.join().unwrap().unwrap();
    heavy.join().unwrap().unwrap();
    assert_eq!(fs.read(log, 0, 4096).unwrap(), vec![3u8; 4096]);
}
