//! Clones and SEEK_DATA/SEEK_HOLE-driven copies racing with writes and
//! commits, in the manner of openzfs/zfs#15526: in OpenZFS 2.2.0 an
//! `lseek(SEEK_DATA/SEEK_HOLE)` asked while the file's dirty data was
//! being synced reported a hole where data had just been written, and `cp`
//! (which copies sparse files hole by hole, or by copy_file_range) copied
//! zeros in its place.
//!
//! Each round has two phases, separated by a barrier, while a syncer
//! thread commits (and the background committer runs at its own pace).
//! The syncer starts a commit as soon as a change it was told of follows
//! its last; it is told of every change in one round of three, of phase
//! B's only in the next (so the commit of phase A's dirty data runs beside
//! phase B's walks and copies, the window of the bug above), and of none
//! in the third. It waits on a condition variable when it has nothing to
//! do.
//!
//! - writers, each owning a disjoint set of 64 KiB regions of a sparse
//!   source file, write round-stamped patterns at unaligned places in
//!   some of their regions (into holes too), punch unaligned holes in
//!   others, and record the bytes in a shared model;
//! - then, with the source still (the model is then exactly its content),
//!   a cloner clones the whole source into a truncated file
//!   (`Fs::clone_range`, asking for more than the source holds) and an
//!   unaligned range of it into a file of its own, a copier copies the
//!   source the way cp copies a sparse file (SEEK_DATA, SEEK_HOLE, read
//!   the data, leave the holes, set the size), and a checker walks the
//!   source's holes and data and reads it whole; each compares what it got
//!   with the model: every range reported as a hole must be zeros in the
//!   model and read as zeros, every copy and clone must equal the model.
//!
//! Failures are collected, not panicked on, so that every thread reaches
//! the barriers; the round's end reports them. No sleeps: the phases are
//! barriers and the syncer waits on its condition. A round costs about
//! 3 ms. `TUX3_CLONE_RACE_ROUNDS` sets the rounds of the default test
//! (300); `clone_race_long` (ignored) runs 20000, or the variable's count: `TUX3_CLONE_RACE_ROUNDS=1000000 cargo test -p
//! tux3 --release --test clone_race -- --ignored`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Condvar, Mutex};
use tux3::device::MemDevice;
use tux3::{Errno, FormatOptions, Fs, Ino, OpenOptions, SetAttr, ROOT_INO};

const BS: u64 = 4096;
const REGION: u64 = 64 * 1024;
const REGIONS: u64 = 16;
/// The source's size at the start: its end lies inside the last region,
/// which writes may extend.
const START_SIZE: u64 = REGIONS * REGION - 5000;
const WRITERS: u64 = 3;

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The round-stamped bytes a writer puts at `off`: never all zeros.
fn pattern(round: u64, writer: u64, off: u64, len: u64) -> Vec<u8> {
    // ((o * 31 + round * 7 + writer * 101) % 255) + 1, byte by byte.
    let mut v = (off * 31 + round * 7 + writer * 101) % 255;
    (0..len)
        .map(|_| {
            let b = v as u8 + 1;
            v = (v + 31) % 255;
            b
        })
        .collect()
}

fn rounds(default: u64) -> u64 {
    std::env::var("TUX3_CLONE_RACE_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Where `bytes` first holds a byte other than zero (the common answer,
/// none, found by a fold the compiler vectorises).
fn first_nonzero(bytes: &[u8]) -> Option<usize> {
    if bytes.iter().fold(0, |acc, &b| acc | b) == 0 {
        return None;
    }
    bytes.iter().position(|&b| b != 0)
}

/// Where two byte strings first differ, for messages.
fn differ(got: &[u8], want: &[u8]) -> String {
    let at = got.iter().zip(want).position(|(a, b)| a != b);
    format!(
        "{} bytes, want {}; first difference at {at:?}",
        got.len(),
        want.len()
    )
}

struct Shared {
    fs: Fs,
    src: Ino,
    /// Shared, not copied, by the phase-B threads; the writers change it
    /// in place once they have let go of it (`Arc::make_mut`).
    model: Mutex<Arc<Vec<u8>>>,
    errors: Mutex<Vec<String>>,
    stop: AtomicBool,
    /// Changes made so far, for the syncer.
    changes: AtomicU64,
    /// Whether the syncer waits (or is about to) on `wake`.
    idle: AtomicBool,
    wake_lock: Mutex<()>,
    wake: Condvar,
}

impl Shared {
    /// Count a change made in `round`'s phase `b` (or A) and wake the
    /// syncer if it waits, when the round's pattern has it commit then:
    /// one round in three commits beside every change, one only from its
    /// phase B on (a commit of phase A's dirty data then runs beside the
    /// phase-B threads, the window of openzfs/zfs#15526), and one leaves
    /// commits to the background committer.
    fn changed(&self, round: u64, b: bool) {
        if round.is_multiple_of(3) || (round % 3 == 1 && b) {
            self.kick();
        }
    }

    /// Count a change and wake the syncer if it waits.
    fn kick(&self) {
        self.changes.fetch_add(1, Ordering::SeqCst);
        if self.idle.load(Ordering::SeqCst) {
            let _held = self.wake_lock.lock().unwrap();
            self.wake.notify_one();
        }
    }

    /// The syncer: a commit whenever something changed since it started
    /// its last, until `stop`. Returns the commits it asked for.
    fn syncer(&self) -> u64 {
        let (mut seen, mut syncs) = (0, 0u64);
        while !self.stop.load(Ordering::SeqCst) {
            let now = self.changes.load(Ordering::SeqCst);
            if now == seen {
                let mut held = self.wake_lock.lock().unwrap();
                self.idle.store(true, Ordering::SeqCst);
                while self.changes.load(Ordering::SeqCst) == seen && !self.stop.load(Ordering::SeqCst) {
                    held = self.wake.wait(held).unwrap();
                }
                self.idle.store(false, Ordering::SeqCst);
                continue;
            }
            seen = now;
            if let Err(e) = self.fs.sync() {
                self.fail(0, "syncer", e.to_string());
                break;
            }
            syncs += 1;
        }
        syncs
    }

    fn fail(&self, round: u64, who: &str, what: String) {
        self.errors
            .lock()
            .unwrap()
            .push(format!("round {round}, {who}: {what}"));
    }

    /// The whole of file `ino`.
    fn read_all(&self, ino: Ino) -> tux3::Result<Vec<u8>> {
        let size = self.fs.getattr(ino)?.size;
        let mut out = self.fs.read(ino, 0, size as usize)?;
        while (out.len() as u64) < size {
            let chunk = self
                .fs
                .read(ino, out.len() as u64, (size - out.len() as u64) as usize)?;
            if chunk.is_empty() {
                break;
            }
            out.extend_from_slice(&chunk);
        }
        Ok(out)
    }

    /// The source's data and holes, as SEEK_DATA and SEEK_HOLE report
    /// them: `(start, end, is_data)` runs up to its size. Checks as it goes
    /// that every hole is zeros in `model` and reads as zeros.
    fn walk(&self, model: &[u8]) -> Result<Vec<(u64, u64, bool)>, String> {
        let size = model.len() as u64;
        let mut runs = Vec::new();
        let mut off = 0;
        while off < size {
            let data = match self.fs.seek_data(self.src, off, true) {
                Ok(d) => d.min(size),
                Err(e) if e.errno() == Errno::ENXIO => size,
                Err(e) => return Err(format!("SEEK_DATA at {off}: {e}")),
            };
            if data > off {
                let want = &model[off as usize..data as usize];
                if let Some(i) = first_nonzero(want) {
                    return Err(format!(
                        "SEEK_DATA from {off} skipped to {data}, over data the model has at {}",
                        off + i as u64
                    ));
                }
                let got = self
                    .fs
                    .read(self.src, off, (data - off) as usize)
                    .map_err(|e| e.to_string())?;
                if first_nonzero(&got).is_some() || got.len() as u64 != data - off {
                    return Err(format!("the hole {off}..{data} does not read as zeros"));
                }
                runs.push((off, data, false));
            }
            if data >= size {
                break;
            }
            let hole = self
                .fs
                .seek_data(self.src, data, false)
                .map_err(|e| format!("SEEK_HOLE at {data}: {e}"))?
                .min(size);
            if hole <= data {
                return Err(format!("SEEK_HOLE at data {data} gave {hole}"));
            }
            runs.push((data, hole, true));
            off = hole;
        }
        Ok(runs)
    }
}

/// Phase A of a writer: write, punch or leave each region it owns.
fn write_phase(s: &Shared, round: u64, w: u64, rng: &mut Rng) -> Result<(), String> {
    for region in (w..REGIONS).step_by(WRITERS as usize) {
        let base = region * REGION;
        let off = base + rng.below(REGION - 1);
        let len = rng.below(base + REGION - off) + 1;
        match rng.below(8) {
            0..=2 => {
                let data = pattern(round, w, off, len);
                s.fs.write(s.src, off, &data)
                    .map_err(|e| format!("write {off}+{len}: {e}"))?;
                s.changed(round, false);
                let mut held = s.model.lock().unwrap();
                let m = Arc::make_mut(&mut held);
                if (m.len() as u64) < off + len {
                    m.resize((off + len) as usize, 0);
                }
                m[off as usize..(off + len) as usize].copy_from_slice(&data);
            }
            3 => {
                let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
                // The model's size can only grow meanwhile, and only in
                // the last region, which is this writer's if it is here.
                let mut held = s.model.lock().unwrap();
                let m = Arc::make_mut(&mut held);
                s.fs.fallocate(s.src, mode, off, len)
                    .map_err(|e| format!("punch {off}+{len}: {e}"))?;
                s.changed(round, false);
                let end = ((off + len) as usize).min(m.len());
                if (off as usize) < end {
                    m[off as usize..end].fill(0);
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// Phase B of the cloner: the whole source into a truncated file, and an
/// unaligned range into `part` (whose model it keeps).
fn clone_phase(
    s: &Shared,
    round: u64,
    model: &[u8],
    dst: Ino,
    part: Ino,
    part_model: &mut Vec<u8>,
    rng: &mut Rng,
) -> Result<(), String> {
    let truncate = SetAttr {
        size: Some(0),
        ..SetAttr::default()
    };
    s.fs.setattr(dst, &truncate).map_err(|e| e.to_string())?;
    s.changed(round, true);
    let n =
        s.fs.clone_range(s.src, 0, dst, 0, model.len() as u64 + 12345)
            .map_err(|e| format!("clone_range: {e}"))?;
    s.changed(round, true);
    if n != model.len() as u64 {
        return Err(format!("clone_range cloned {n} of {} bytes", model.len()));
    }
    let got = s.read_all(dst).map_err(|e| e.to_string())?;
    if got != model {
        return Err(format!("the clone: {}", differ(&got, model)));
    }
    let off_in = rng.below(model.len() as u64 + 100);
    let off_out = rng.below(REGIONS * REGION);
    let len = rng.below(REGIONS * REGION / 2) + 1;
    let n =
        s.fs.clone_range(s.src, off_in, part, off_out, len)
            .map_err(|e| format!("clone_range({off_in}, {off_out}, {len}): {e}"))?;
    s.changed(round, true);
    let want = len.min((model.len() as u64).saturating_sub(off_in));
    if n != want {
        return Err(format!(
            "clone_range({off_in}, {off_out}, {len}) cloned {n}, want {want}"
        ));
    }
    if n > 0 {
        let end = (off_out + n) as usize;
        if part_model.len() < end {
            part_model.resize(end, 0);
        }
        part_model[off_out as usize..end].copy_from_slice(&model[off_in as usize..(off_in + n) as usize]);
    }
    let got = s.read_all(part).map_err(|e| e.to_string())?;
    if got != *part_model {
        return Err(format!("the partial clone: {}", differ(&got, part_model)));
    }
    Ok(())
}

/// Phase B of the copier: cp's sparse copy, data runs only, then the size.
fn copy_phase(s: &Shared, round: u64, model: &[u8], dst: Ino) -> Result<(), String> {
    let truncate = SetAttr {
        size: Some(0),
        ..SetAttr::default()
    };
    s.fs.setattr(dst, &truncate).map_err(|e| e.to_string())?;
    s.changed(round, true);
    for (start, end, data) in s.walk(model)? {
        if !data {
            continue;
        }
        let bytes =
            s.fs.read(s.src, start, (end - start) as usize)
                .map_err(|e| e.to_string())?;
        s.fs.write(dst, start, &bytes).map_err(|e| e.to_string())?;
        s.changed(round, true);
    }
    let size = SetAttr {
        size: Some(model.len() as u64),
        ..SetAttr::default()
    };
    s.fs.setattr(dst, &size).map_err(|e| e.to_string())?;
    s.changed(round, true);
    let got = s.read_all(dst).map_err(|e| e.to_string())?;
    if got != model {
        return Err(format!("the sparse copy: {}", differ(&got, model)));
    }
    Ok(())
}

/// Phase B of the checker: the holes (in `walk`), the size, the bytes.
fn check_phase(s: &Shared, model: &[u8]) -> Result<(), String> {
    let runs = s.walk(model)?;
    if runs.iter().map(|r| r.1 - r.0).sum::<u64>() != model.len() as u64 {
        return Err(format!("the runs {runs:?} do not cover the file"));
    }
    let size = s.fs.getattr(s.src).map_err(|e| e.to_string())?.size;
    if size != model.len() as u64 {
        return Err(format!("size {size}, want {}", model.len()));
    }
    let got = s.read_all(s.src).map_err(|e| e.to_string())?;
    if got != model {
        return Err(format!("the source: {}", differ(&got, model)));
    }
    Ok(())
}

fn race(rounds: u64, seed: u64) {
    let dev = Arc::new(MemDevice::new(BS as u32, 32768));
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    let fs = Fs::open(dev, OpenOptions::default()).unwrap();
    let src = fs.create(ROOT_INO, b"src", 0o644, 0, 0).unwrap().ino;
    let start = SetAttr {
        size: Some(START_SIZE),
        ..SetAttr::default()
    };
    fs.setattr(src, &start).unwrap();
    let clone = fs.create(ROOT_INO, b"clone", 0o644, 0, 0).unwrap().ino;
    let part = fs.create(ROOT_INO, b"part", 0o644, 0, 0).unwrap().ino;
    let copy = fs.create(ROOT_INO, b"copy", 0o644, 0, 0).unwrap().ino;
    let s = Shared {
        fs,
        src,
        model: Mutex::new(Arc::new(vec![0; START_SIZE as usize])),
        errors: Mutex::new(Vec::new()),
        stop: AtomicBool::new(false),
        changes: AtomicU64::new(0),
        idle: AtomicBool::new(false),
        wake_lock: Mutex::new(()),
        wake: Condvar::new(),
    };
    // Writers, then cloner, copier and checker, meet at each barrier.
    let phase = Barrier::new(WRITERS as usize + 3);
    let done = |s: &Shared| {
        let failed = !s.errors.lock().unwrap().is_empty();
        failed
    };
    std::thread::scope(|scope| {
        let syncer = scope.spawn(|| s.syncer());
        let mut workers = Vec::new();
        for w in 0..WRITERS {
            let (s, phase) = (&s, &phase);
            workers.push(scope.spawn(move || {
                let mut rng = Rng::new(seed * 1000 + w);
                for round in 0..rounds {
                    if let Err(e) = write_phase(s, round, w, &mut rng) {
                        s.fail(round, &format!("writer {w}"), e);
                    }
                    phase.wait(); // written
                    phase.wait(); // copied and checked
                    if done(s) {
                        break;
                    }
                }
            }));
        }
        for role in 0..3 {
            let (s, phase) = (&s, &phase);
            workers.push(scope.spawn(move || {
                let mut rng = Rng::new(seed * 1000 + 100 + role);
                let mut part_model = Vec::new();
                for round in 0..rounds {
                    phase.wait(); // written
                    let model = Arc::clone(&s.model.lock().unwrap());
                    let (who, r) = match role {
                        0 => (
                            "cloner",
                            clone_phase(s, round, &model, clone, part, &mut part_model, &mut rng),
                        ),
                        1 => ("copier", copy_phase(s, round, &model, copy)),
                        _ => {
                            // The commit of phase A's changes, if this
                            // round makes one now, runs beside the walks.
                            s.changed(round, true);
                            ("checker", check_phase(s, &model))
                        }
                    };
                    if let Err(e) = r {
                        s.fail(round, who, e);
                    }
                    phase.wait(); // copied and checked
                    if done(s) {
                        break;
                    }
                }
            }));
        }
        for w in workers {
            w.join().unwrap();
        }
        s.stop.store(true, Ordering::SeqCst);
        s.kick();
        let syncs = syncer.join().unwrap();
        eprintln!("{rounds} rounds, {syncs} syncs beside them");
    });
    let errors = s.errors.lock().unwrap().clone();
    assert!(
        errors.is_empty(),
        "{} failures:\n{}",
        errors.len(),
        errors.join("\n")
    );
    s.fs.close().unwrap();
}

#[test]
fn clone_race() {
    race(rounds(300), 1);
}

#[test]
#[ignore = "long: 20000 rounds, or TUX3_CLONE_RACE_ROUNDS"]
fn clone_race_long() {
    race(rounds(20000), 2);
}
