//! One case of the device-fault loops: a workload on a device that fails
//! as one [`FailPlan`] says, what the volume answers afterwards, and the
//! healed device checked as the crash harness checks a crash image.
//!
//! Calls the workloads, the recorder, the failing device and the crash
//! checks (`check.rs`), and the engine's API.

use crate::check::{self, Ordering, Promise};
use crate::failing::{FailMode, FailOp, FailPlan};
use crate::faults::Fault;
use crate::record::{OpRecord, Recorder, Recording};
use crate::snapshot::Snapshot;
use crate::workloads;
use tux3::api::Fs;
use tux3::error::Errno;
use tux3::types::{FileType, Ino, ROOT_INO};

/// What one case found.
#[derive(Debug, Default, Clone)]
pub struct Outcome {
    /// The planned request came (the fault was injected).
    pub fired: bool,
    /// Errors the device returned.
    pub device_errors: u64,
    /// Requests of each kind the device saw: (reads, writes, flushes).
    pub seen: (u64, u64, u64),
    /// Durability calls (fsync, fdatasync, sync, unify, close, remounts
    /// left out) answered success, and those of them that were fsyncs.
    pub acknowledged: usize,
    pub fsyncs_acknowledged: usize,
    /// Fsyncs and syncs answered an error after a failed commit (during the
    /// workload and the probes after it).
    pub refused: usize,
    /// Broken promises, each with the promise's name first.
    pub violations: Vec<(Kind, String)>,
}

/// Which promise a violation of the loops breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// An fsync, fdatasync, sync or close answered success after a failed
    /// commit, or a change was not refused with EROFS.
    FalseDurability,
    /// After healing: something a completed durability call covered is
    /// missing.
    Lost,
    /// After healing: mount, fsck, ordering, read-only replay or snapshots.
    Healed,
    /// A failed call changed what readers see, or readers could not carry
    /// on, or an error did not name its block.
    Readers,
    /// The workload failed with no fault injected, or the harness itself
    /// could not go on.
    Harness,
}

/// Whether a call is a durability point the application is told about
/// (the harness's own remounts are not).
fn is_ack(o: &OpRecord) -> bool {
    ["fsync", "sync", "unify", "close ->", "close"]
        .iter()
        .any(|p| o.desc.starts_with(p))
        && !o.desc.starts_with("close and remount")
}

/// The calls a sync or unify made during its commit recorded after it
/// ("sync (with 6 calls during its commit) -> ...").
fn calls_during(desc: &str) -> usize {
    let Some(rest) = desc.split_once(" (with ").map(|(_, r)| r) else {
        return 0;
    };
    rest.split(' ').next().and_then(|n| n.parse().ok()).unwrap_or(0)
}

fn is_remount(o: &OpRecord) -> bool {
    o.desc.starts_with("crash and remount") || o.desc.starts_with("close and remount")
}

/// Run `workload` (seed `seed`) on a device failing as `plan` says.
pub fn run(workload: &str, seed: u64, plan: FailPlan) -> Outcome {
    let mut out = Outcome::default();
    let (mut rec, mut rng) = match workloads::recorder(workload, seed, Fault::Fail(plan)) {
        Ok(r) => r,
        Err(e) => {
            // Only a read can fail before the recorded volume is open: the
            // mount must refuse with an error naming the block.
            let msg = e.to_string();
            out.fired = msg.contains("injected");
            out.device_errors = out.fired as u64;
            if !out.fired {
                out.violations
                    .push((Kind::Harness, format!("setup failed: {msg}")));
            } else if !msg.contains("block") {
                out.violations
                    .push((Kind::Readers, format!("mount error names no block: {msg}")));
            }
            return out;
        }
    };
    let ran = workloads::drive(workload, &mut rec, &mut rng);
    let Some(failing) = rec.failing().cloned() else {
        out.violations.push((Kind::Harness, "no failing device".into()));
        return out;
    };
    let fired = failing.fired_at();
    out.fired = fired.is_some();
    if let (Err(e), None) = (&ran, fired) {
        out.violations
            .push((Kind::Harness, format!("the workload failed with no fault: {e}")));
    }
    if let Err(e) = &ran {
        let msg = e.to_string();
        if msg.contains("injected read") && !msg.contains("block") {
            out.violations
                .push((Kind::Readers, format!("a read error names no block: {msg}")));
        }
    }
    // Whether the workload ended in a call (which must then have changed
    // nothing) rather than in the recorder's walk after a call that
    // completed (which is then not recorded, and its state unknown: the
    // volume is dropped rather than closed). A snapshot rollback that
    // fails in its own commit has already put the snapshot's image in
    // cache: it is left out.
    let (in_call, in_walk) = match &ran {
        Ok(()) => (false, false),
        Err(e) => {
            let m = e.to_string();
            let call = m.starts_with("workload call failed") || m.starts_with("sync failed");
            (call && !m.contains("snapshot rollback"), !call)
        }
    };
    if fired.is_some() {
        probe(&mut rec, plan, in_call, &mut out);
    }
    let (recording, closed) = match rec.finish_after_fault(!in_walk) {
        Ok(r) => r,
        Err(e) => {
            out.violations
                .push((Kind::Harness, format!("finishing the recording: {e}")));
            return out;
        }
    };
    if std::env::var_os("TUX3_DEVFAIL_TRACE").is_some() {
        for (i, o) in recording.ops.iter().enumerate() {
            eprintln!(
                "call {i}: {} [{}..{}]{}",
                o.desc,
                o.start,
                o.end,
                if o.durable { " durable" } else { "" }
            );
        }
        eprintln!("fault fired at {fired:?}; workload: {ran:?}");
    }
    out.device_errors = failing.errors();
    out.seen = failing.seen();
    let commit_failed = commit_fails(plan);
    if let (Some(at), true) = (fired, commit_failed) {
        // From the call the fault fell in to the next mount, no durability
        // call may succeed.
        // The calls made while a commit was in flight ran before its
        // failure was known: an fsync among them that went ahead of the
        // commit may be durable (the healed device says).
        let mut during = 0;
        for o in recording.ops.iter().filter(|o| o.end > at as usize) {
            if is_remount(o) {
                break;
            }
            if during > 0 {
                during -= 1;
                continue;
            }
            during = calls_during(&o.desc);
            // The first of two fsyncs in flight was written whole before
            // the second (whose write may be the one that failed): its
            // flush may make it durable.
            if o.desc.contains("the first of two in flight") {
                continue;
            }
            if is_ack(o) && o.durable {
                out.violations.push((
                    Kind::FalseDurability,
                    format!("{} after the failed request", o.desc),
                ));
            } else if is_ack(o) {
                out.refused += 1;
            }
        }
    }
    // (A remount after the fault is a new mount, which may close well.)
    let remounted = fired.is_some_and(|at| {
        recording
            .ops
            .iter()
            .any(|o| is_remount(o) && o.end >= at as usize)
    });
    if commit_failed && fired.is_some() && !remounted && !in_walk && closed.is_ok() {
        out.violations.push((
            Kind::FalseDurability,
            "close answered success after a failed commit".into(),
        ));
    }
    for o in recording.ops.iter().filter(|o| is_ack(o) && o.durable) {
        out.acknowledged += 1;
        out.fsyncs_acknowledged += o.desc.starts_with("fsync") as usize;
    }
    for (promise, detail) in healed(recording) {
        let kind = if promise == Promise::Durability {
            Kind::Lost
        } else {
            Kind::Healed
        };
        out.violations
            .push((kind, format!("after healing: {promise:?}: {detail}")));
    }
    out
}

/// Heal: the same blocks on a device that works; mount, check and fsck
/// them as a crash image whose crash came after every call. An fsync that
/// failed after writing may still have landed whole (its commit block
/// reached the media and only its flush failed): it is unknown, not
/// promised, so the state may also have the first `m` such fsyncs made
/// durable, as fast fsyncs are.
fn healed(mut rec: Recording) -> Vec<(Promise, String)> {
    let mut image = rec.base.clone();
    tux3::device::recording::apply(&rec.log, &mut image, rec.block_size);
    let end = rec.log.len();
    let w = check::window(&rec, end, end);
    let unknown: Vec<(usize, Vec<Ino>)> = rec
        .ops
        .iter()
        .enumerate()
        .filter(|(_, o)| o.desc.starts_with("fsync") && !o.durable && o.end > o.start)
        .map(|(i, o)| (i, inos_named(&o.desc)))
        .collect();
    let mut first = None;
    for m in 0..=unknown.len() {
        if let Some(&(i, ref inos)) = m.checked_sub(1).and_then(|k| unknown.get(k)) {
            rec.ops[i].fsynced = inos.clone();
            rec.ops[i].full = false;
        }
        let copy = image.clone();
        let broken = check::check(
            image.clone(),
            |i| i == copy.as_slice(),
            &rec,
            w,
            Ordering::default(),
            &Default::default(),
        );
        if broken.is_empty() {
            return broken;
        }
        first.get_or_insert(broken);
    }
    first.unwrap_or_default()
}

/// The inode numbers an fsync call's description names ("fsync(ino 17)",
/// "fsync group [17, 18]").
fn inos_named(desc: &str) -> Vec<Ino> {
    let call = desc.split(" -> ").next().unwrap_or("");
    call.split(|c: char| !c.is_ascii_digit())
        .filter_map(|d| d.parse().ok())
        .collect()
}

/// Whether the plan fails a commit for sure: any failed write or flush
/// (every one is a commit's), and a dead disk once anything follows.
fn commit_fails(plan: FailPlan) -> bool {
    plan.op != FailOp::Read
}

/// After the fault: what the volume answers. A failed commit leaves it
/// read-only: every fsync, fdatasync and sync fails (twice: the error
/// sticks), changes get EROFS, and (on a disk that still reads) readers see
/// what they saw before. After a transient read error the volume reads as
/// before the failed call and a sync is recorded like any other.
fn probe(rec: &mut Recorder, plan: FailPlan, in_call: bool, out: &mut Outcome) {
    let Ok(fs) = rec.fs() else { return };
    let last = rec.last_snapshot().cloned().unwrap_or_default();
    let reads_work =
        plan.mode != FailMode::Dead && !(plan.op == FailOp::Read && plan.mode == FailMode::Sticky);
    if commit_fails(plan) {
        let inos = files(&last);
        for round in 0..2 {
            for &ino in &inos {
                for datasync in [false, true] {
                    match fs.fsync(ino, datasync) {
                        Ok(()) => out.violations.push((
                            Kind::FalseDurability,
                            format!(
                                "{} of ino {ino} answered success after a failed commit (round {round})",
                                if datasync { "fdatasync" } else { "fsync" }
                            ),
                        )),
                        Err(_) => out.refused += 1,
                    }
                }
            }
            match fs.sync() {
                Ok(()) => out.violations.push((
                    Kind::FalseDurability,
                    "sync answered success after a failed commit".into(),
                )),
                Err(_) => out.refused += 1,
            }
        }
        let erofs = |what: &str, r: tux3::error::Result<()>, out: &mut Outcome| match r {
            Err(e) if e.errno() == Errno::EROFS => {}
            Err(e) if plan.mode == FailMode::Dead && e.errno() == Errno::EIO => {}
            other => out.violations.push((
                Kind::FalseDurability,
                format!("{what} after a failed commit answered {other:?}, not EROFS"),
            )),
        };
        let r = fs.create(ROOT_INO, b"after-the-fault", 0o644, 0, 0).map(drop);
        erofs("create", r, out);
        // (A rollback that failed halfway may have taken the file away.)
        if let Some(&ino) = inos.iter().find(|&&i| i != ROOT_INO && fs.getattr(i).is_ok()) {
            erofs("write", fs.write(ino, 0, b"x").map(drop), out);
        }
        if reads_work {
            same_as_before(fs, in_call.then_some(&last), "after a failed commit", out);
        }
    } else if plan.mode == FailMode::Once {
        same_as_before(fs, in_call.then_some(&last), "after a transient read error", out);
        let _ = rec.op("sync after the read error", true, Fs::sync);
    }
}

/// Readers carry on, and (given `last`) see what they saw after the last
/// call that completed (the failed one changed nothing).
fn same_as_before(fs: &Fs, last: Option<&Snapshot>, when: &str, out: &mut Outcome) {
    match (Snapshot::take(fs), last) {
        (Ok(_), None) => {}
        (Ok(now), Some(last)) if now == *last => {}
        (Ok(now), Some(last)) => out.violations.push((
            Kind::Readers,
            format!(
                "{when} the volume reads differently from before the failed call: {}",
                now.diff(last, 4).join("; ")
            ),
        )),
        (Err(e), _) => out
            .violations
            .push((Kind::Readers, format!("{when} readers cannot go on: {e}"))),
    }
}

/// The root and every regular file of `snap`.
fn files(snap: &Snapshot) -> Vec<Ino> {
    let mut v: Vec<Ino> = snap
        .entries
        .values()
        .filter(|n| n.kind == FileType::Regular)
        .map(|n| n.ino)
        .collect();
    v.push(ROOT_INO);
    v.sort_unstable();
    v.dedup();
    v
}
