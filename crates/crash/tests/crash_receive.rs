//! Crashes during `tux3 receive`: every crash state of an incremental
//! receive (renames, a directory replaced by a file, rewrites, holes,
//! xattrs, links, special files) mounts, passes fsck, shows the received
//! snapshot whole or not at all, and resumes from its token to a snapshot
//! identical to the source's (`crates/crash/src/receive.rs`), whether
//! each checkpoint syncs or only wakes a commit thread.

#[test]
fn a_receive_cut_anywhere_resumes_to_the_same_snapshot() {
    let budget = if cfg!(debug_assertions) { 60 } else { 400 };
    // A sync at each checkpoint, and a commit thread each one only wakes.
    for (seed, background) in [(1u64, false), (2, true)] {
        let r = tux3_crash::run_receive(seed, budget, background).unwrap();
        eprintln!(
            "seed {seed} (commit thread: {background}): {} writes, {} flushes, {} states: \
             {} with a token, {} complete",
            r.writes, r.flushes, r.states, r.with_token, r.complete
        );
        assert!(r.violations.is_empty(), "{:#?}", r.violations);
        // The recording must have crash points inside the receive, with
        // progress committed, and after it.
        assert!(r.flushes >= 4, "only {} flushes", r.flushes);
        assert!(r.with_token > 0, "no state held a resume token");
        assert!(r.complete > 0, "no state held the finished snapshot");
    }
}
