//! The crash harness must be able to fail: with the commit order broken on
//! purpose — `BREAK_SKIP_FLUSH_BEFORE_COMMIT` drops the flush between a
//! delta's blocks and its commit block (invariant L1), so the commit block
//! may land while blocks it names did not — the harness reports violations.
//!
//! The switch is process-global, so this test lives alone in its own file
//! (its own process) and no other test sees it set.

use std::sync::atomic::Ordering;
use tux3::backend::commit::BREAK_SKIP_FLUSH_BEFORE_COMMIT;
use tux3::tools::crash::{self, CrashOptions, Promise};

#[test]
fn skipping_the_flush_before_the_commit_block_is_caught() {
    let keep = tempfile::tempdir().unwrap();
    let opts = CrashOptions {
        keep_dir: keep.path().to_path_buf(),
        max_kept: 1,
        ordering: crash::Ordering::Strict,
        ..CrashOptions::default()
    };
    BREAK_SKIP_FLUSH_BEFORE_COMMIT.store(true, Ordering::SeqCst);
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
            "{workload}: a commit block written before its blocks were flushed went unnoticed"
        );
        // The kept image is the one to debug with.
        let kept = report.violations.iter().find_map(|v| v.image.clone());
        assert!(kept.is_some_and(|p| p.exists()), "no crash image was kept");
        total += report.violations.len();
    }
    BREAK_SKIP_FLUSH_BEFORE_COMMIT.store(false, Ordering::SeqCst);
    println!("violations with the flush skipped: {total}");
}

#[test]
fn violations_name_the_promise() {
    // Without the break (this test may run before or after the one above,
    // so it only checks the reporting shape on a report it builds itself).
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
