//! Device-fault loops (DESIGN.md promise 10), as SQLite tests its I/O
//! errors: every workload of the crash harness runs on a device that fails
//! its Nth read, write or flush — once, from then on for that kind of
//! request, or for every request (a dead disk); with nothing written, a
//! short or torn write, ENOSPC, or a flush that loses the writes since the
//! last good one (`failing.rs`) — for many N. Each case (`devfail/case.rs`)
//! then asks the volume what a program would: every fsync, fdatasync and
//! sync must fail after a failed commit, changes must get EROFS, readers
//! must carry on; then it heals the device (the same blocks on one that
//! works), mounts it and checks it as the crash harness checks a crash
//! image (`check.rs`: mount, fsck, everything acknowledged durable there,
//! a prefix of the calls, read-only replay, snapshots). No case may panic
//! or hang (each runs on its own thread, waited for with a timeout).
//!
//! Entry point: [`run_device_faults`]. Calls the workloads, the failing
//! device and the case runner.

mod case;

pub use case::{Kind, Outcome};

use crate::failing::{FailEffect, FailMode, FailOp, FailPlan};
use crate::Rng;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// What the loops run.
#[derive(Debug, Clone)]
pub struct DevFailOptions {
    /// Cases to run (each injects one planned fault, or finds the workload
    /// ended before its Nth request).
    pub runs: usize,
    /// Seed of the workloads and of the choice of N.
    pub seed: u64,
    /// Workloads (default: all of the crash harness's).
    pub workloads: Vec<String>,
    /// Cases run at once.
    pub threads: usize,
    /// Longest a case may take before it counts as a hang.
    pub timeout: Duration,
}

impl Default for DevFailOptions {
    fn default() -> Self {
        DevFailOptions {
            runs: 60,
            seed: 1,
            workloads: crate::workloads().iter().map(|s| s.to_string()).collect(),
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            timeout: Duration::from_secs(600),
        }
    }
}

/// The kinds of failure the loops inject, in the order they take them.
pub fn combos() -> Vec<(FailOp, FailMode, FailEffect)> {
    use {FailEffect as E, FailMode as M, FailOp as O};
    vec![
        (O::Write, M::Once, E::Eio),
        (O::Flush, M::Once, E::Eio),
        (O::Read, M::Once, E::Eio),
        (O::Write, M::Sticky, E::Enospc),
        (O::Flush, M::Once, E::LoseCache),
        (O::Write, M::Once, E::Torn),
        (O::Read, M::Sticky, E::Eio),
        (O::Write, M::Dead, E::Eio),
        (O::Flush, M::Sticky, E::Eio),
        (O::Write, M::Once, E::Short),
        (O::Read, M::Dead, E::Eio),
        (O::Write, M::Sticky, E::Eio),
        (O::Flush, M::Dead, E::LoseCache),
        (O::Write, M::Dead, E::Torn),
        (O::Write, M::Once, E::Enospc),
    ]
}

/// The sums of a loop.
#[derive(Debug, Default, Clone)]
pub struct DevFailReport {
    pub runs: usize,
    /// Cases whose planned request came: faults injected.
    pub faults: usize,
    /// Errors the failing devices returned (a sticky or dead device
    /// returns many per fault).
    pub device_errors: u64,
    /// Durability calls answered success, and fsyncs among them.
    pub acknowledged: usize,
    pub fsyncs_acknowledged: usize,
    /// Fsyncs and syncs answered an error after a failed commit.
    pub refused: usize,
    /// Violations by kind; panics and hangs.
    pub by_kind: BTreeMap<String, usize>,
    pub panics: usize,
    pub hangs: usize,
    /// Each violation: the case and what broke (at most 50 kept).
    pub violations: Vec<String>,
    /// Violations in all.
    pub violation_count: usize,
}

impl fmt::Display for DevFailReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = |k: Kind| self.by_kind.get(&format!("{k:?}")).copied().unwrap_or(0);
        writeln!(
            f,
            "runs: {}, faults injected: {} (device errors returned: {}), durability calls acknowledged: {} \
             (fsyncs: {}), fsyncs/syncs refused after a failed commit: {}",
            self.runs,
            self.faults,
            self.device_errors,
            self.acknowledged,
            self.fsyncs_acknowledged,
            self.refused
        )?;
        writeln!(
            f,
            "violations: {} (false durability: {}, acknowledged data lost after healing: {}, \
             healed mount/fsck/ordering: {}, readers: {}, harness: {}), panics: {}, hangs: {}",
            self.violation_count,
            kind(Kind::FalseDurability),
            kind(Kind::Lost),
            kind(Kind::Healed),
            kind(Kind::Readers),
            kind(Kind::Harness),
            self.panics,
            self.hangs
        )?;
        for v in &self.violations {
            writeln!(f, "VIOLATION {v}")?;
        }
        Ok(())
    }
}

/// Panics anywhere in the process since the loops started counting.
static PANICS: AtomicUsize = AtomicUsize::new(0);

fn count_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let before = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.fetch_add(1, Ordering::SeqCst);
            before(info);
        }));
    });
}

/// One case: a workload, its seed and the fault.
#[derive(Debug, Clone)]
struct Case {
    workload: String,
    seed: u64,
    plan: FailPlan,
}

/// Requests of each kind a workload makes on a device that never fails.
fn requests(workload: &str, seed: u64) -> Result<(u64, u64, u64), String> {
    let plan = FailPlan {
        op: FailOp::Read,
        nth: u64::MAX,
        mode: FailMode::Once,
        effect: FailEffect::Eio,
    };
    let o = case::run(workload, seed, plan);
    match o.violations.first() {
        Some((k, v)) => Err(format!("{workload} without a fault: {k:?}: {v}")),
        None => Ok(o.seen),
    }
}

/// The cases of a loop: every workload with every kind of failure, N drawn
/// without repeats from the requests of that kind the workload makes, taken
/// round-robin (kinds first, workloads shifting) so that a short loop
/// still covers every kind and most workloads.
fn cases(opts: &DevFailOptions) -> Result<Vec<Case>, String> {
    let combos = combos();
    let w = opts.workloads.len().max(1);
    // Pair k: kind k % C, workload (k / C + kind) % W — every pair once.
    let order: Vec<(usize, usize)> = (0..combos.len() * w)
        .map(|k| ((k / combos.len() + k % combos.len()) % w, k % combos.len()))
        .collect();
    let mut counts = BTreeMap::new();
    let mut seqs: Vec<Option<std::vec::IntoIter<u64>>> = vec![None; order.len()];
    let mut out = Vec::new();
    loop {
        let before = out.len();
        for (i, &(wi, c)) in order.iter().enumerate() {
            if out.len() >= opts.runs {
                return Ok(out);
            }
            let name = &opts.workloads[wi];
            let (op, mode, effect) = combos[c];
            if seqs[i].is_none() {
                if !counts.contains_key(name) {
                    counts.insert(name.clone(), requests(name, opts.seed)?);
                }
                let (r, wr, fl) = counts[name];
                let n = match op {
                    FailOp::Read => r,
                    FailOp::Write => wr,
                    FailOp::Flush => fl,
                };
                let mut ns: Vec<u64> = (0..n).collect();
                Rng::new(opts.seed ^ ((i as u64) << 32)).shuffle(&mut ns);
                seqs[i] = Some(ns.into_iter());
            }
            if let Some(nth) = seqs[i].as_mut().and_then(Iterator::next) {
                out.push(Case {
                    workload: name.clone(),
                    seed: opts.seed,
                    plan: FailPlan {
                        op,
                        nth,
                        mode,
                        effect,
                    },
                });
            }
        }
        if out.len() == before {
            return Ok(out);
        }
    }
}

/// Run the loops; progress to stderr every `progress` cases (0: never).
pub fn run_device_faults(opts: &DevFailOptions, progress: usize) -> Result<DevFailReport, String> {
    count_panics();
    let panics0 = PANICS.load(Ordering::SeqCst);
    let cases = cases(opts)?;
    let report = Mutex::new(DevFailReport::default());
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..opts.threads.max(1) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(case) = cases.get(i) else { return };
                let got = run_one(case, opts.timeout);
                let mut r = report.lock().unwrap_or_else(|p| p.into_inner());
                add(&mut r, case, got);
                if progress > 0 && r.runs.is_multiple_of(progress) {
                    eprintln!(
                        "device faults: {} of {} cases, {} faults injected, {} violations",
                        r.runs,
                        cases.len(),
                        r.faults,
                        r.violation_count
                    );
                }
            });
        }
    });
    let mut r = report.into_inner().unwrap_or_else(|p| p.into_inner());
    r.panics = PANICS.load(Ordering::SeqCst) - panics0;
    r.violation_count += r.panics;
    Ok(r)
}

/// Run the one case `spec` names: "workload seed op nth mode effect", as
/// a violation names it ("remount 1 Read 637 Dead Eio"). With
/// `TUX3_DEVFAIL_TRACE` set, the case prints its calls.
pub fn run_device_fault_case(spec: &str) -> Result<DevFailReport, String> {
    let parts: Vec<&str> = spec
        .split_whitespace()
        .map(|p| p.trim_start_matches('#'))
        .collect();
    let [workload, seed, op, nth, mode, effect] = parts[..] else {
        return Err(format!("{spec:?} is not \"workload seed op nth mode effect\""));
    };
    let num = |s: &str| s.parse::<u64>().map_err(|e| format!("{s:?}: {e}"));
    let find = |s: &str, all: &[&str]| all.iter().position(|a| *a == s).ok_or(format!("unknown {s:?}"));
    let op = [FailOp::Read, FailOp::Write, FailOp::Flush][find(op, &["Read", "Write", "Flush"])?];
    let mode = [FailMode::Once, FailMode::Sticky, FailMode::Dead][find(mode, &["Once", "Sticky", "Dead"])?];
    let effect = [
        FailEffect::Eio,
        FailEffect::Short,
        FailEffect::Torn,
        FailEffect::Enospc,
        FailEffect::LoseCache,
    ][find(effect, &["Eio", "Short", "Torn", "Enospc", "LoseCache"])?];
    let case = Case {
        workload: workload.to_string(),
        seed: num(seed)?,
        plan: FailPlan {
            op,
            nth: num(nth)?,
            mode,
            effect,
        },
    };
    count_panics();
    let mut r = DevFailReport::default();
    add(&mut r, &case, run_one(&case, DevFailOptions::default().timeout));
    Ok(r)
}

/// A case's outcome, `None` if it hung, `Some(Err)` if it panicked.
type Got = Option<Result<Outcome, String>>;

fn run_one(case: &Case, timeout: Duration) -> Got {
    let (tx, rx) = crossbeam_channel::bounded(1);
    let c = case.clone();
    let spawned = std::thread::Builder::new()
        .name("tux3-devfail".into())
        .spawn(move || {
            let r = std::panic::catch_unwind(|| case::run(&c.workload, c.seed, c.plan));
            let _ = tx.send(r.map_err(|p| {
                p.downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default()
            }));
        });
    if let Err(e) = spawned {
        return Some(Err(format!("no thread for the case: {e}")));
    }
    rx.recv_timeout(timeout).ok()
}

fn add(r: &mut DevFailReport, case: &Case, got: Got) {
    r.runs += 1;
    let name = format!("{} seed {} {}", case.workload, case.seed, case.plan);
    let note = |r: &mut DevFailReport, kind: &str, what: String| {
        *r.by_kind.entry(kind.to_string()).or_default() += 1;
        r.violation_count += 1;
        if r.violations.len() < 50 {
            r.violations.push(format!("{name}: {kind}: {what}"));
        }
    };
    match got {
        None => {
            r.hangs += 1;
            note(r, "Hang", "no answer within the timeout".into());
        }
        Some(Err(p)) => note(r, "Panic", p),
        Some(Ok(o)) => {
            r.faults += o.fired as usize;
            r.device_errors += o.device_errors;
            r.acknowledged += o.acknowledged;
            r.fsyncs_acknowledged += o.fsyncs_acknowledged;
            r.refused += o.refused;
            for (k, v) in o.violations {
                note(r, &format!("{k:?}"), v);
            }
        }
    }
}
