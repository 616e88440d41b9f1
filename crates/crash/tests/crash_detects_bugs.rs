//! The crash harness must be able to fail: with flushes dropped on purpose
//! — `Fault::DropEveryOtherFlush` sits between the volume and the recording
//! and acknowledges every other flush without passing it on, so a commit
//! block may land while blocks it names did not (invariant L1) and an fsync
//! may return before its data is durable — the harness reports violations.
//! With data block writes reordered past the flush that should cover them
//! (`Fault::DataWritesAfterFlush`: a commit block may land without its data)
//! the data checksum check (fsck reading every summed block of every crash
//! state) reports mismatches: the volumes the workloads make carry data
//! checksums, the preallocating, overwriting and snapshotting ones included.

use tux3_crash as crash;
use tux3_crash::{CrashOptions, Fault, Promise};

#[test]
fn dropped_flushes_are_caught() {
    let keep = tempfile::tempdir().unwrap();
    let opts = CrashOptions {
        keep_dir: keep.path().to_path_buf(),
        max_kept: 1,
        ordering: crash::Ordering::Strict,
        fault: Fault::DropEveryOtherFlush,
        ..CrashOptions::default()
    };
    let mut total = 0;
    for workload in ["rename_over", "dir_churn"] {
        let report = crash::run_with(workload, 1, 800, &opts).unwrap();
        let text = report.to_string();
        let head: Vec<&str> = text.lines().take(4).collect();
        println!("{}", head.join("\n"));
        // Violations the intact engine never shows (fsck's known reports
        // about the log's end do not count): a failed mount, or a state no
        // prefix of the calls left.
        let caught: Vec<_> = report
            .violations
            .iter()
            .filter(|v| v.detail.starts_with("mount failed") || v.promise != Promise::Integrity)
            .collect();
        println!("  {} of them a failed mount or a wrong state", caught.len());
        assert!(
            !caught.is_empty(),
            "{workload}: flushes dropped under a commit went unnoticed"
        );
        // The kept image is the one to debug with.
        let kept = report.violations.iter().find_map(|v| v.image.clone());
        assert!(kept.is_some_and(|p| p.exists()), "no crash image was kept");
        total += report.violations.len();
    }
    println!("violations with the flush skipped: {total}");
}

#[test]
fn data_written_after_its_commit_is_caught_by_the_checksum_check() {
    let keep = tempfile::tempdir().unwrap();
    let opts = CrashOptions {
        keep_dir: keep.path().to_path_buf(),
        max_kept: 1,
        fault: Fault::DataWritesAfterFlush,
        ..CrashOptions::default()
    };
    for workload in ["fallocate", "large_writes", "snapshots"] {
        let report = crash::run_with(workload, 1, 200, &opts).unwrap();
        // fsck's own lines (not a read failing in the namespace walk).
        let caught: Vec<_> = report
            .violations
            .iter()
            .filter(|v| v.detail.starts_with("fsck:") && v.detail.contains("data checksum mismatch"))
            .collect();
        println!(
            "{workload}: {} states, {} violations, {} of them fsck's data checksum check",
            report.states,
            report.violations.len(),
            caught.len()
        );
        assert!(
            !caught.is_empty(),
            "{workload}: data behind its commit block went unnoticed by the checksum check"
        );
        let first = &caught[0].detail;
        assert!(
            first.contains("expected 0x") && first.contains("found 0x"),
            "{first}"
        );
    }
}

#[test]
fn violations_name_the_promise() {
    // The reporting shape, on a violation built here.
    let v = crash::Violation {
        workload: "w".into(),
        seed: 7,
        epoch: 3,
        call: 5,
        call_desc: "sync".into(),
        window: (4, 6),
        state: "epoch 3: 1 of 2 writes landed".into(),
        promise: Promise::Durability,
        detail: "/a: missing".into(),
        image: None,
    };
    let line = v.to_string();
    for part in [
        "Durability",
        "workload w seed 7",
        "epoch 3",
        "call 5",
        "/a: missing",
    ] {
        assert!(line.contains(part), "{line}");
    }
}
