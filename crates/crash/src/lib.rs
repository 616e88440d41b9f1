//! Crash-consistency harness, in the manner of CrashMonkey and dm-log-writes.
//!
//! A workload runs through the `Fs` API on a recording device over a freshly
//! formatted in-memory image; the harness keeps the device's op log (block
//! writes and flushes, in order), where each API call started and returned in
//! it, which calls were durability points, and the namespace snapshot after
//! every call (`record.rs`, `workloads.rs`). From the log it
//! builds crash images — per flush epoch, the durable prefix plus subsets of
//! the epoch's writes and torn sector writes, deduplicated (`states.rs`)
//! — and checks each against the promises of DESIGN.md section 3: mount and
//! fsck succeed, the recovered namespace equals the state after some prefix
//! of the completed calls that includes the last durability point, the
//! volume's snapshots are those of that state and read as they did when
//! taken, and mounting wrote nothing (`check.rs`). `docs/TESTING.md`
//! describes the method and how to run it long.
//!
//! Entry points: [`run`] (used by the tests and meant for a future
//! `tux3 crashtest`), [`run_with`], [`workloads`]. A test can put a
//! [`Fault`] between the volume and the recording device
//! ([`FaultyDevice`], `faults.rs`) to show that the harness catches a
//! broken engine; the engine's own write path has no such switch.

// Library code returns errors; it never unwraps (tests may).
#![deny(clippy::unwrap_used, clippy::expect_used)]

mod check;
mod devfail;
mod failing;
mod faults;
mod hold;
mod receive;
mod record;
mod snapshot;
mod states;
#[cfg(test)]
mod tests;
mod workloads;

pub use check::{Ordering, Promise};
pub use devfail::{combos, run_device_fault_case, run_device_faults, DevFailOptions, DevFailReport};
pub use failing::{FailEffect, FailMode, FailOp, FailPlan, FailingDevice};
pub use faults::{Fault, FaultyDevice};
pub use receive::{run_receive, ReceiveReport};

use record::Recording;
use states::{Epoch, State};
use std::collections::BTreeSet;
use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex};
use tux3::device::RecordedOp;
use tux3::error::Result;

/// How [`run_with`] runs.
#[derive(Debug, Clone)]
pub struct CrashOptions {
    /// Where crash images of violations are written
    /// (default: `$TUX3_CRASH_KEEP`, else the system's temporary directory).
    pub keep_dir: PathBuf,
    /// Most images written per run.
    pub max_kept: usize,
    /// Threads checking crash states.
    pub threads: usize,
    /// Strict prefix ordering, or (the default) the relaxation for fsyncs
    /// that did not commit the whole delta.
    pub ordering: Ordering,
    /// A fault between the volume and the recording, to show the harness
    /// catches a broken engine ([`Fault::None`] by default).
    pub fault: Fault,
}

impl Default for CrashOptions {
    fn default() -> Self {
        CrashOptions {
            keep_dir: std::env::var_os("TUX3_CRASH_KEEP")
                .map(PathBuf::from)
                .unwrap_or_else(std::env::temp_dir),
            max_kept: 3,
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            ordering: Ordering::default(),
            fault: Fault::None,
        }
    }
}

/// One broken promise in one crash state.
#[derive(Debug, Clone)]
pub struct Violation {
    pub workload: String,
    pub seed: u64,
    /// The flush epoch the crash fell in.
    pub epoch: usize,
    /// The API call that issued that epoch's writes, and its description.
    pub call: usize,
    pub call_desc: String,
    /// The calls whose resulting state would have been accepted (snapshot
    /// indices: 0 before the first call, i + 1 after call i).
    pub window: (usize, usize),
    /// Which writes landed, and which was torn.
    pub state: String,
    pub promise: Promise,
    /// What differed.
    pub detail: String,
    /// The crash image, if it was kept.
    pub image: Option<PathBuf>,
}

/// The result of one run.
#[derive(Debug, Clone, Default)]
pub struct CrashReport {
    pub workload: String,
    pub seed: u64,
    /// API calls, flush epochs, block writes and flushes recorded.
    pub calls: usize,
    pub epochs: usize,
    pub writes: usize,
    pub flushes: usize,
    /// Blocks discarded (online discard, trims).
    pub discarded: u64,
    /// Crash states generated, distinct ones, and those checked (budget).
    pub generated: usize,
    pub distinct: usize,
    pub states: usize,
    pub violations: Vec<Violation>,
}

impl fmt::Display for CrashReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "workload {} seed {}: {} calls, {} block writes, {} flushes, {} blocks discarded, {} epochs; {} states generated, {} distinct",
            self.workload,
            self.seed,
            self.calls,
            self.writes,
            self.flushes,
            self.discarded,
            self.epochs,
            self.generated,
            self.distinct
        )?;
        writeln!(
            f,
            "crash states: {}, violations: {}",
            self.states,
            self.violations.len()
        )?;
        for v in &self.violations {
            writeln!(f, "{v}")?;
        }
        Ok(())
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "VIOLATION {:?}: workload {} seed {}, {} during call {} ({}); accepted states {}..={}: {}",
            self.promise,
            self.workload,
            self.seed,
            self.state,
            self.call,
            self.call_desc,
            self.window.0,
            self.window.1,
            self.detail
        )?;
        match &self.image {
            Some(p) => write!(f, " [image: {}]", p.display()),
            None => write!(f, " [image not kept]"),
        }
    }
}

/// Names of the workloads [`run`] accepts.
pub fn workloads() -> &'static [&'static str] {
    workloads::NAMES
}

/// Run `workload` with `seed` and check at most `budget` distinct crash
/// states, with the default options.
pub fn run(workload: &str, seed: u64, budget: usize) -> Result<CrashReport> {
    run_with(workload, seed, budget, &CrashOptions::default())
}

/// [`run`] with explicit options.
pub fn run_with(workload: &str, seed: u64, budget: usize, opts: &CrashOptions) -> Result<CrashReport> {
    let rec = workloads::record(workload, seed, opts.fault)?;
    let bs = rec.block_size as usize;
    let eps = states::epochs(&rec.log);
    let mut rng = Rng::new(seed ^ 0x00c0_ffee_d00d_f00d);
    let mut gen = states::Generator::new(&rec.base, &rec.log, bs);
    for (i, e) in eps.iter().enumerate() {
        gen.epoch(i, e, i + 1 == eps.len(), &mut rng);
    }
    let (generated, distinct) = (gen.generated, gen.states.len());
    let chosen = states::select(std::mem::take(&mut gen.states), budget, &mut rng);
    drop(gen);
    let mut report = CrashReport {
        workload: workload.to_string(),
        seed,
        calls: rec.ops.len(),
        epochs: eps.len(),
        writes: rec
            .log
            .iter()
            .filter(|o| matches!(o, RecordedOp::Write { .. }))
            .count(),
        flushes: rec.log.iter().filter(|o| matches!(o, RecordedOp::Flush)).count(),
        discarded: rec
            .log
            .iter()
            .map(|o| match o {
                RecordedOp::Discard { count, .. } => *count,
                _ => 0,
            })
            .sum(),
        generated,
        distinct,
        states: chosen.len(),
        violations: Vec::new(),
    };
    report.violations = check_all(&rec, &eps, chosen, workload, seed, opts);
    report
        .violations
        .sort_by(|a, b| (a.epoch, &a.state, &a.detail).cmp(&(b.epoch, &b.state, &b.detail)));
    Ok(report)
}

/// Check the chosen states on `opts.threads` threads, epoch by epoch.
fn check_all(
    rec: &Recording,
    eps: &[Epoch],
    chosen: Vec<State>,
    workload: &str,
    seed: u64,
    opts: &CrashOptions,
) -> Vec<Violation> {
    let bs = rec.block_size as usize;
    let found = Mutex::new(Vec::new());
    let kept = AtomicUsize::new(0);
    type Job = (Arc<Vec<u8>>, Arc<BTreeSet<u64>>, State);
    let (tx, rx) = crossbeam_channel::bounded::<Job>(opts.threads.max(1) * 4);
    std::thread::scope(|s| {
        for _ in 0..opts.threads.max(1) {
            let rx = rx.clone();
            let (found, kept) = (&found, &kept);
            s.spawn(move || {
                for (durable, before, st) in rx.iter() {
                    let e = &eps[st.epoch];
                    let image = states::build(&durable, &rec.log, e, &st, bs);
                    let w = check::window(rec, e.start, e.end);
                    let same = |img: &[u8]| states::matches(img, &durable, &rec.log, e, &st, bs);
                    let discarded = states::discarded_in(&before, &rec.log, e, &st, &image, bs);
                    let broken = check::check(image, same, rec, w, opts.ordering, &discarded);
                    if broken.is_empty() {
                        continue;
                    }
                    let call = rec
                        .ops
                        .iter()
                        .position(|o| o.end > e.end)
                        .unwrap_or(rec.ops.len().saturating_sub(1));
                    let path = (kept.fetch_add(1, AtomicOrdering::Relaxed) < opts.max_kept)
                        .then(|| {
                            let image = states::build(&durable, &rec.log, e, &st, bs);
                            keep(&opts.keep_dir, workload, seed, st.epoch, &image)
                        })
                        .flatten();
                    let mut out = found.lock().unwrap_or_else(|p| p.into_inner());
                    for (promise, detail) in broken {
                        out.push(Violation {
                            workload: workload.to_string(),
                            seed,
                            epoch: st.epoch,
                            call,
                            call_desc: rec.ops.get(call).map_or(String::new(), |o| o.desc.clone()),
                            window: (w.lo, w.hi),
                            state: st.describe(e),
                            promise,
                            detail,
                            image: path.clone(),
                        });
                    }
                }
            });
        }
        drop(rx);
        let mut durable = rec.base.clone();
        // Blocks whose last change in the durable prefix is a discard.
        let mut discarded = BTreeSet::new();
        let mut chosen = chosen.into_iter().peekable();
        for (i, e) in eps.iter().enumerate() {
            if chosen.peek().is_some_and(|s| s.epoch == i) {
                let shared = Arc::new(durable.clone());
                let before = Arc::new(discarded.clone());
                while let Some(st) = chosen.next_if(|s| s.epoch == i) {
                    if tx.send((shared.clone(), before.clone(), st)).is_err() {
                        return;
                    }
                }
            }
            let writes: Vec<RecordedOp> = e.writes.iter().map(|&w| rec.log[w].clone()).collect();
            tux3::device::recording::apply(&writes, &mut durable, rec.block_size);
            states::note_discards(&mut discarded, &rec.log, e);
        }
        drop(tx);
    });
    found.into_inner().unwrap_or_else(|p| p.into_inner())
}

/// Write a crash image for debugging; `None` if that fails.
fn keep(dir: &std::path::Path, workload: &str, seed: u64, epoch: usize, image: &[u8]) -> Option<PathBuf> {
    static N: AtomicUsize = AtomicUsize::new(0);
    let n = N.fetch_add(1, AtomicOrdering::Relaxed);
    let path = dir.join(format!(
        "tux3-crash-{workload}-seed{seed}-epoch{epoch}-{}-{n}.img",
        std::process::id()
    ));
    std::fs::create_dir_all(dir).ok()?;
    std::fs::write(&path, image).ok()?;
    Some(path)
}

/// Deterministic pseudo-random numbers (SplitMix64).
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        ((self.next() as u128 * n as u128) >> 64) as u64
    }

    pub(crate) fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            v.swap(i, j);
        }
    }
}
