//! While the io_uring queues carry the requests, the kernel's FORGETs
//! (which still come through /dev/fuse) arrive in batches, not one request
//! per forgotten inode: a thread that takes one keeps away from /dev/fuse
//! for a while (`forgets.rs`), and the kernel gathers the next ones into a
//! BATCH_FORGET. Every forgotten inode still reaches the engine.
//!
//! Mounts in this process (an in-memory volume), so it needs root,
//! /dev/fuse and a kernel with FUSE over io_uring; without them it prints a
//! note and passes, unless TUX3_REQUIRE_MOUNT=1, where it fails.

use std::fs;
use std::sync::atomic::Ordering;
use tux3_fuse::test_hooks;
use tux3_fuse::FuseOptions;

mod common;

use common::{prepare, wait_until, with_mount};

/// Files made and unlinked: each unlink makes the kernel forget one inode.
const FILES: u64 = 2000;

#[test]
fn forgets_come_in_batches_and_all_arrive() {
    let Some((_param, _dir, mnt)) = prepare() else {
        return;
    };
    // A longer wait than the mount's own, so that even a slow machine
    // unlinks several files while a thread lingers.
    test_hooks::FORGET_LINGER_US.store(20_000, Ordering::SeqCst);
    let opts = FuseOptions {
        uring: Some(true),
        threads: 2,
        ..FuseOptions::default()
    };
    with_mount(&mnt, &opts, || {
        for n in 0..FILES {
            fs::write(mnt.join(format!("f{n}")), b"x").unwrap();
        }
        let (inodes, requests) = test_hooks::forgets();
        for n in 0..FILES {
            fs::remove_file(mnt.join(format!("f{n}"))).unwrap();
        }
        wait_until("every unlinked inode forgotten", || {
            test_hooks::forgets().0 >= inodes + FILES
        });
        let (inodes_after, requests_after) = test_hooks::forgets();
        let (inodes, requests) = (inodes_after - inodes, requests_after - requests);
        assert!(
            (requests as u64) * 4 <= inodes,
            "{inodes} inodes forgotten in {requests} requests: not in batches"
        );
    });
    test_hooks::FORGET_LINGER_US.store(0, Ordering::SeqCst);
}
