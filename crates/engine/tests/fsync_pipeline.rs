//! Scenario: fsync commits pipeline. While one group commit waits for its
//! flush, the next group is planned and its log blocks are written after it
//! in the chain; its own flush then makes it durable. Both are durable after
//! a reopen; and when the earlier flush fails, the later commit (whose chain
//! passes through the failed one's blocks) fails too, even though its own
//! flush returned. A delta commit that fsync commits went ahead of writes
//! its log only once they are durable.

mod gate;

use crossbeam_channel::Receiver;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tux3::device::{Device, MemDevice};
use tux3::{FormatOptions, Fs, OpenOptions, Result, ROOT_INO};

/// Fsync `ino` through the fsync committer (queued, as a group of one),
/// without waiting: the outcome arrives on the returned channel.
fn queue_fsync(fs: &Arc<Fs>, ino: u64) -> Receiver<Result<()>> {
    let (tx, rx) = crossbeam_channel::bounded(1);
    let fs = fs.clone();
    std::thread::spawn(move || {
        let _ = tx.send(fs.fsync_group(&[ino]));
    });
    rx
}

/// Poll (bounded) until `cond` holds.
fn until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !cond() {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::yield_now();
    }
}

struct Setup {
    gate: Arc<gate::GatedDevice>,
    entered: Receiver<()>,
    release: crossbeam_channel::Sender<()>,
    fs: Arc<Fs>,
    a: u64,
    b: u64,
}

/// Two files written since the last commit; the fsync of `a` is queued and
/// its commit held at its flush.
fn first_commit_held_at_its_flush() -> Setup {
    let (gate, entered, release) = gate::gated(8192);
    let gate = Arc::new(gate);
    let dev: Arc<dyn Device> = gate.clone();
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    let fs = Arc::new(Fs::open(dev.clone(), OpenOptions::default()).unwrap());
    let a = fs.create(ROOT_INO, b"a", 0o644, 0, 0).unwrap().ino;
    let b = fs.create(ROOT_INO, b"b", 0o644, 0, 0).unwrap().ino;
    fs.sync().unwrap();
    fs.write(a, 0, b"first").unwrap();
    fs.write(b, 0, b"second").unwrap();
    gate.arm();
    Setup {
        gate,
        entered,
        release,
        fs,
        a,
        b,
    }
}

impl Setup {
    /// Queue the fsync of `a`, wait until its flush is held, then queue the
    /// fsync of `b` and wait until its log blocks are written. Returns both
    /// outcomes' channels and the writes `b`'s commit made.
    fn second_written_while_first_flushes(&self) -> (Receiver<Result<()>>, Receiver<Result<()>>, u64) {
        let first = queue_fsync(&self.fs, self.a);
        self.entered
            .recv_timeout(Duration::from_secs(30))
            .expect("the first fsync commit never flushed");
        let before = self.gate.inner.counters();
        let second = queue_fsync(&self.fs, self.b);
        // Without the pipeline, the second commit waits for the log's tail
        // until the first one's flush ends, and this never holds.
        until(
            "the second fsync commit did not write while the first flushed",
            || self.fs.pending_fsyncs() == 0 && self.gate.inner.counters().writes > before.writes,
        );
        assert_eq!(
            self.gate.inner.counters().flushes,
            before.flushes,
            "the second commit flushed before the first one's flush ended"
        );
        assert!(
            first.try_recv().is_err() && second.try_recv().is_err(),
            "an fsync answered before its flush"
        );
        let wrote = self.gate.inner.counters().writes - before.writes;
        (first, second, wrote)
    }
}

fn answer(rx: &Receiver<Result<()>>) -> Result<()> {
    rx.recv_timeout(Duration::from_secs(30))
        .expect("an fsync never answered")
}

#[test]
fn the_next_fsync_commit_writes_while_the_one_before_flushes() {
    let s = first_commit_held_at_its_flush();
    let (first, second, wrote) = s.second_written_while_first_flushes();
    assert!(wrote >= 1, "the second commit wrote no log block");
    s.release.send(()).unwrap();
    answer(&first).unwrap();
    answer(&second).unwrap();
    // A crash now (no full commit since): replay finds both fsync commits.
    let image = MemDevice::from_image(4096, s.gate.inner.image());
    let dev: Arc<dyn Device> = Arc::new(image);
    let fs = Fs::open(dev, OpenOptions::default()).unwrap();
    assert_eq!(fs.read(s.a, 0, 16).unwrap(), b"first");
    assert_eq!(fs.read(s.b, 0, 16).unwrap(), b"second");
}

#[test]
fn a_commit_written_after_a_failed_flush_fails_too() {
    let s = first_commit_held_at_its_flush();
    let (first, second, _) = s.second_written_while_first_flushes();
    s.gate.fail_gated();
    s.release.send(()).unwrap();
    let e = answer(&first).expect_err("the failed flush was answered as durable");
    assert_eq!(e.errno(), tux3::Errno::EIO);
    // Its own flush returned, but the chain passes through blocks the
    // device may have lost.
    let e = answer(&second).expect_err("a commit after a failed one was answered as durable");
    assert_eq!(e.errno(), tux3::Errno::EIO);
    // The volume refuses changes from here on.
    assert!(s.fs.write(s.a, 0, b"more").is_err());
}

/// A group of many fsyncs batches well already: the next group waits for
/// its flush (and grows meanwhile) instead of writing ahead of it.
#[test]
fn the_next_group_waits_for_the_flush_of_a_large_one() {
    let s = first_commit_held_at_its_flush();
    let many: Vec<u64> = (0..8)
        .map(|i| {
            let ino =
                s.fs.create(ROOT_INO, format!("m{i}").as_bytes(), 0o644, 0, 0)
                    .unwrap()
                    .ino;
            s.fs.write(ino, 0, b"many").unwrap();
            ino
        })
        .collect();
    let large = {
        let (tx, rx) = crossbeam_channel::bounded(1);
        let fs = s.fs.clone();
        std::thread::spawn(move || {
            let _ = tx.send(fs.fsync_group(&many));
        });
        rx
    };
    s.entered
        .recv_timeout(Duration::from_secs(30))
        .expect("the large group never flushed");
    // The committer holds back until the large group's flush ends (without
    // the rule it would go on to the next group at once, and never does).
    until("the committer did not wait for a large group's flush", || {
        s.fs.fsync_committer_holds_back()
    });
    let before = s.gate.inner.counters().writes;
    let second = queue_fsync(&s.fs, s.b);
    until("the fsync of b was never queued", || s.fs.pending_fsyncs() == 1);
    assert!(s.fs.fsync_committer_holds_back());
    assert_eq!(
        s.gate.inner.counters().writes,
        before,
        "a group was written during a large group's flush"
    );
    s.release.send(()).unwrap();
    answer(&large).unwrap();
    answer(&second).unwrap();
    assert_eq!(s.fs.read(s.b, 0, 16).unwrap(), b"second");
}

/// An fsync commit goes ahead of the delta commit writing its data, and its
/// flush is held: the delta commit waits for it before it encodes and
/// writes its log, so that what of the log is not durable yet is never an
/// fsync commit followed by a delta commit (fsck could not tell a crash
/// then from damage).
#[test]
fn a_delta_commit_writes_its_log_after_the_fsync_commits_ahead_of_it() {
    let s = first_commit_held_at_its_flush();
    s.gate.disarm();
    let (held_tx, held_rx) = crossbeam_channel::bounded(1);
    let sync = {
        let (fs, gate, entered, a) = (s.fs.clone(), s.gate.clone(), s.entered.clone(), s.a);
        std::thread::spawn(move || {
            let fs2 = fs.clone();
            fs.sync_with(move || {
                // The delta is frozen, its data written: an fsync of `a`
                // goes ahead of it, and its flush is held.
                gate.arm();
                let fsync = queue_fsync(&fs2, a);
                entered
                    .recv_timeout(Duration::from_secs(30))
                    .expect("the fsync commit never flushed");
                let _ = held_tx.send((fsync, gate.inner.counters()));
            })
        })
    };
    let (fsync, held) = held_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the fsync never went ahead of the delta commit");
    // Without the wait, the delta commit writes its log now and this never
    // holds.
    until(
        "the delta commit did not wait for the fsync commit ahead of it",
        || s.fs.delta_waits_for_fsyncs(),
    );
    let now = s.gate.inner.counters();
    assert_eq!(
        (now.writes, now.flushes),
        (held.writes, held.flushes),
        "the delta commit wrote or flushed while the fsync commit's flush was held"
    );
    s.release.send(()).unwrap();
    answer(&fsync).unwrap();
    sync.join().unwrap().unwrap();
    let image = MemDevice::from_image(4096, s.gate.inner.image());
    let dev: Arc<dyn Device> = Arc::new(image);
    let fs = Fs::open(dev, OpenOptions::default()).unwrap();
    assert_eq!(fs.read(s.a, 0, 16).unwrap(), b"first");
    assert_eq!(
        fs.read(s.b, 0, 16).unwrap(),
        b"second",
        "the delta commit's write"
    );
}
