//! The delta pipeline on slow media (every flush takes 20 ms, see
//! `slow_flush`): a writer keeps completing writes while a delta commit is
//! in flight, and dirty memory — the open delta's dirty data plus what the
//! commit in flight still holds — never passes `OpenOptions::dirty_limit`
//! during a long write stream, whether a commit thread or the writer itself
//! commits. Whether a flush was in progress around a write is read from the
//! device's flush counters, never from the clock.

mod slow_flush;

use slow_flush::SlowFlush;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;
use tux3::device::Device;
use tux3::{FormatOptions, Fs, OpenOptions, ROOT_INO};

const FLUSH_TIME: Duration = Duration::from_millis(20);

/// Fresh volume on a slow device of `blocks` 4 KiB blocks.
fn slow_volume(blocks: u64) -> (Arc<SlowFlush>, Arc<dyn Device>) {
    let slow = Arc::new(SlowFlush::new(blocks, FLUSH_TIME));
    let dev: Arc<dyn Device> = slow.clone();
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    (slow, dev)
}

/// A write ran entirely inside flush number `started` when that flush was in
/// progress as it began and no flush ended before it returned.
fn inside_flush(before: slow_flush::Flushes, ended_after: u64) -> Option<u64> {
    (before.in_progress() && ended_after == before.ended).then_some(before.started)
}

#[test]
fn writer_keeps_going_while_a_commit_is_in_flight() {
    const COMMITS: usize = 8;
    const REGION: u64 = 1 << 20;
    const LEN: usize = 256;
    // 64 MiB: each write reserves a little metadata space for its delta
    // (`begin_change`), so a small volume would run short during a commit
    // and make the writer wait for it (see `Fs::write` on ENOSPC).
    let (slow, dev) = slow_volume(16384);
    let fs = Arc::new(Fs::open(dev.clone(), OpenOptions::default()).unwrap());
    let ino = fs.create(ROOT_INO, b"stream", 0o644, 0, 0).unwrap().ino;
    let done = Arc::new(AtomicBool::new(false));
    let started = Arc::new(Barrier::new(2));

    // The committer: COMMITS syncs in a row; for each, the flushes it did.
    let syncer = {
        let (fs, slow, done, started) = (fs.clone(), slow.clone(), done.clone(), started.clone());
        std::thread::spawn(move || {
            started.wait();
            let mut ranges = Vec::new();
            for _ in 0..COMMITS {
                let before = slow.ended();
                fs.sync().unwrap();
                ranges.push(before + 1..=slow.ended());
            }
            done.store(true, Ordering::SeqCst);
            ranges
        })
    };

    // The writer: small writes over a 1 MiB region until the syncs are
    // done, noting the flush counters around each call.
    let mut model = vec![0u8; REGION as usize];
    let mut size = 0;
    let mut seen = Vec::new();
    let mut i: u64 = 0;
    while !done.load(Ordering::SeqCst) {
        let off = (i * 4099) % (REGION - LEN as u64);
        let data = [(i % 251) as u8 + 1; LEN];
        let before = slow.flushes();
        fs.write(ino, off, &data).unwrap();
        seen.push((before, slow.ended()));
        model[off as usize..off as usize + LEN].copy_from_slice(&data);
        size = size.max(off as usize + LEN);
        if i == 0 {
            started.wait();
        }
        i += 1;
    }
    let ranges = syncer.join().unwrap();

    // Writes that began and ended inside one flush, per commit.
    let per_commit: Vec<usize> = ranges
        .iter()
        .map(|r| {
            seen.iter()
                .filter_map(|&(b, e)| inside_flush(b, e))
                .filter(|f| r.contains(f))
                .count()
        })
        .collect();
    let flushes: Vec<u64> = ranges.iter().map(|r| r.end() + 1 - r.start()).collect();
    eprintln!("writes {i}; per commit: flushes {flushes:?}, writes inside a flush {per_commit:?}");
    assert!(
        flushes.iter().all(|&f| f >= 1),
        "every sync committed written data: {flushes:?}"
    );
    // Had writes waited for the commit, none would start and end inside
    // one of its flushes. (How many do depends on scheduling: a commit the
    // writer itself had to make, when the volume ran short of space during
    // another commit, has none; so this asks for most commits, not all.)
    let busy = per_commit.iter().filter(|&&n| n >= 24).count();
    assert!(
        busy * 2 >= per_commit.len(),
        "writes completed during the commits' flushes: {per_commit:?}"
    );

    // Nothing written during the commits was lost.
    fs.sync().unwrap();
    drop(fs);
    let fs = Fs::open(dev, OpenOptions::default()).unwrap();
    let got = fs.read(ino, 0, REGION as usize).unwrap();
    assert!(got == model[..size], "file differs from what was written");
}

/// What one write stream observed.
#[derive(Debug)]
struct Stream {
    /// Largest open + in-flight dirty data seen after a write.
    peak: u64,
    /// Samples where the open delta and a commit in flight both held data.
    both: usize,
    /// Writes that began and ended inside one flush.
    inside: usize,
    deltas: u64,
}

/// Who commits while the writer streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Committer {
    /// The volume's commit thread, woken by dirty pressure.
    Thread,
    /// Nobody else: the writer commits when the next write would not fit.
    Writer,
    /// Another thread calling `sync` each time the writer has written half
    /// the limit, each of its commits held in flight until the
    /// writer has written into the next delta (or waits for that commit):
    /// commits the writer did not start.
    SyncLoop,
}

const LIMIT: u64 = 1 << 20;
const TOTAL: u64 = 64 << 20;
const CHUNK: usize = 16 << 10;

fn chunk(i: u64) -> Vec<u8> {
    let mut c = vec![(i % 251) as u8 + 1; CHUNK];
    c[..8].copy_from_slice(&i.to_le_bytes());
    c
}

/// Stream TOTAL bytes into one file through `Fs::write`, sampling dirty
/// memory after every write; then check every byte after a remount.
fn stream(who: Committer) -> Stream {
    let (slow, dev) = slow_volume((TOTAL + (8 << 20)) / 4096);
    let opts = OpenOptions {
        dirty_limit: LIMIT,
        // Only dirty pressure wakes the commit thread within this test.
        commit_interval: (who == Committer::Thread).then(|| Duration::from_secs(3600)),
        ..OpenOptions::default()
    };
    let fs = Arc::new(Fs::open(dev.clone(), opts).unwrap());
    let ino = fs.create(ROOT_INO, b"big", 0o644, 0, 0).unwrap().ino;
    let done = Arc::new(AtomicBool::new(false));
    let writes = Arc::new(AtomicU64::new(0));
    // The writer asks for a foreign commit every half of the limit and
    // goes on once that commit is in flight.
    let (ask, asked) = crossbeam_channel::unbounded::<()>();
    let (in_flight, started) = crossbeam_channel::unbounded::<()>();
    let syncer = (who == Committer::SyncLoop).then(|| {
        let (fs, done, writes) = (fs.clone(), done.clone(), writes.clone());
        std::thread::spawn(move || {
            while asked.recv().is_ok() {
                // Each commit stays in flight (its data written) until the
                // writer has completed a few writes into the next delta,
                // waits for this commit, or is done: so they overlap
                // however the threads are scheduled.
                let seen = writes.load(Ordering::SeqCst);
                let mut told = false;
                fs.sync_with(|| {
                    told = in_flight.send(()).is_ok();
                    while writes.load(Ordering::SeqCst) < seen + 4
                        && fs.pending_writes() == 0
                        && !done.load(Ordering::SeqCst)
                    {
                        std::thread::yield_now();
                    }
                })
                .unwrap();
                if !told {
                    // Nothing to commit: the writer need not wait.
                    let _ = in_flight.send(());
                }
            }
        })
    });
    let mut s = Stream {
        peak: 0,
        both: 0,
        inside: 0,
        deltas: 0,
    };
    for i in 0..TOTAL / CHUNK as u64 {
        let before = slow.flushes();
        fs.write(ino, i * CHUNK as u64, &chunk(i)).unwrap();
        writes.fetch_add(1, Ordering::SeqCst);
        if syncer.is_some() && (i + 1) % (LIMIT / 2 / CHUNK as u64) == 0 {
            ask.send(()).unwrap();
            started.recv().unwrap();
        }
        let ended = slow.ended();
        let st = fs.stats();
        s.peak = s.peak.max(st.dirty_bytes + st.in_flight_bytes);
        s.both += (st.dirty_bytes > 0 && st.in_flight_bytes > 0) as usize;
        s.inside += inside_flush(before, ended).is_some() as usize;
    }
    done.store(true, Ordering::SeqCst);
    drop(ask);
    if let Some(t) = syncer {
        t.join().unwrap();
    }
    s.deltas = fs.stats().deltas;
    Arc::into_inner(fs).unwrap().close().unwrap();

    let fs = Fs::open(dev, OpenOptions::default()).unwrap();
    let per_read = 1 << 20;
    for r in 0..TOTAL / per_read {
        let got = fs.read(ino, r * per_read, per_read as usize).unwrap();
        for (k, c) in got.chunks(CHUNK).enumerate() {
            let i = r * per_read / CHUNK as u64 + k as u64;
            assert!(c == chunk(i).as_slice(), "chunk {i} differs after remount");
        }
    }
    eprintln!("{who:?}: {s:?}");
    // The bound, and that the measure is not vacuous (the limit was
    // approached). Each delta holds at most LIMIT; close commits the last.
    assert!(s.peak <= LIMIT, "dirty data peaked at {} > limit {LIMIT}", s.peak);
    assert!(s.peak >= LIMIT / 2, "peak {} never came near the limit", s.peak);
    assert!(
        s.deltas + 1 >= TOTAL / LIMIT,
        "{} deltas for {TOTAL} bytes",
        s.deltas
    );
    s
}

#[test]
fn dirty_memory_stays_within_the_limit_with_a_commit_thread() {
    // The pipeline: the next delta filled while the previous one was
    // written (3,100-3,600 samples and 2,500-3,600 writes inside a flush
    // seen on a quiet machine). Scheduling decides how many, so a stream
    // that fell short is repeated; each one checks the bound.
    let mut seen = Vec::new();
    for _ in 0..5 {
        let s = stream(Committer::Thread);
        seen.push((s.both, s.inside));
        if s.both >= 100 && s.inside >= 100 {
            return;
        }
    }
    panic!("(overlapping samples, writes inside a flush) per stream: {seen:?}");
}

#[test]
fn dirty_memory_stays_within_the_limit_when_the_writer_commits() {
    let s = stream(Committer::Writer);
    // Control for the counting above: with no other committer, the writer's
    // own commits run inside its write calls, so no write fits in a flush.
    assert_eq!(
        s.inside, 0,
        "a write completed inside a flush with no other committer"
    );
    assert_eq!(s.both, 0, "a commit was in flight after a write returned");
}

#[test]
fn dirty_memory_stays_within_the_limit_under_foreign_commits() {
    // A commit someone else started holds its delta's data while the
    // writer fills the next one: the two together must stay in the limit.
    // Non-vacuous: writes returned while a foreign commit held data (the
    // syncer holds each commit until the writer has written into the next
    // delta, so this does not depend on scheduling); each stream checks the
    // bound.
    let mut seen = Vec::new();
    for _ in 0..5 {
        let s = stream(Committer::SyncLoop);
        seen.push(s.both);
        if s.both >= 10 {
            return;
        }
    }
    panic!("open and in-flight data together in only {seen:?} samples per stream");
}
