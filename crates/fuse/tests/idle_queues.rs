//! With `-o idle_queues` the io_uring queue threads commit their replies
//! at idle CPU priority (`SCHED_IDLE`, so that a reply wakes its caller on
//! the queue's own CPU) and otherwise run and sleep at normal priority; a
//! commit kept from its CPU by a busy normal-priority task sends its thread
//! back to normal priority instead of starving the requests of that CPU.
//! With `idle_queues: false` nothing runs at idle priority.
//!
//! Mounts in this process (an in-memory volume), so it needs root,
//! /dev/fuse and a kernel with FUSE over io_uring; without them it prints a
//! note and passes, unless TUX3_REQUIRE_MOUNT=1, where it fails. The
//! busy task is a thread of this process, so it shares the server's
//! scheduling group whatever the kernel's autogroup setting.

use std::fs;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Instant;
use tux3_fuse::test_hooks;
use tux3_fuse::FuseOptions;

mod common;

use common::{prepare, wait_until, with_mount, DEADLINE};

/// The scheduling policy of each of this process's queue threads
/// (`tux3-ring<queue>.<n>`), by name: field 41 of its stat.
fn ring_policies() -> Vec<(String, i32)> {
    let mut out = Vec::new();
    for task in fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        let comm = comm.trim();
        if !comm.starts_with("tux3-ring") {
            continue;
        }
        let Ok(stat) = fs::read_to_string(task.path().join("stat")) else {
            continue;
        };
        // Fields after the command name, which ends at the last ')'.
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        let policy = rest.split(' ').nth(38).unwrap().parse().unwrap();
        out.push((comm.to_string(), policy));
    }
    out.sort();
    out
}

fn pin_to_cpu(cpu: usize) {
    // SAFETY: cpu_set_t is plain data, set through the libc macros.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        assert_eq!(libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set), 0);
    }
}

#[test]
fn replies_are_committed_at_idle_priority_and_a_starved_queue_backs_off() {
    let Some((_param, _dir, mnt)) = prepare() else {
        return;
    };
    let all_normal = || ring_policies().iter().all(|&(_, p)| p == libc::SCHED_OTHER);

    // Off: nothing at idle priority.
    assert!(FuseOptions::default().idle_queues, "on by default");
    let opts = |idle_queues| FuseOptions {
        uring: Some(true),
        threads: 2,
        idle_queues,
        ..FuseOptions::default()
    };
    with_mount(&mnt, &opts(false), || {
        let before = test_hooks::idle_commits();
        for n in 0..100 {
            fs::write(mnt.join(format!("d{n}")), b"x").unwrap();
        }
        assert_eq!(
            test_hooks::idle_commits(),
            before,
            "idle-priority commits when off"
        );
        assert!(all_normal(), "{:?}", ring_policies());
    });

    // On: commits at idle priority, the rest at normal priority.
    with_mount(&mnt, &opts(true), || {
        // (Only while some CPU is idle enough for it to pay: creates until
        // one is committed so.)
        let (idle, _) = test_hooks::idle_commits();
        let mut n = 0;
        wait_until("a reply committed at idle priority", || {
            for _ in 0..100 {
                fs::write(mnt.join(format!("i{n}")), b"x").unwrap();
                n += 1;
            }
            test_hooks::idle_commits().0 > idle
        });
        // Between requests the queue threads sleep at normal priority.
        wait_until("every queue thread at normal priority", all_normal);

        // A busy thread on CPU 0, and creates from CPU 0 (whose queue
        // takes them) until a commit of CPU 0's queue thread starves;
        // committed at idle priority however busy the other CPU is.
        test_hooks::IDLE_COMMITS_ALWAYS.store(true, Ordering::SeqCst);
        let (_, starved) = test_hooks::idle_commits();
        let stop = Arc::new(AtomicBool::new(false));
        let hog = {
            let stop = stop.clone();
            thread::spawn(move || {
                pin_to_cpu(0);
                while !stop.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        };
        let caller = {
            let (mnt, stop) = (mnt.clone(), stop.clone());
            thread::spawn(move || {
                pin_to_cpu(0);
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    fs::write(mnt.join(format!("f{}", n % 1000)), b"x").unwrap();
                    n += 1;
                }
                n
            })
        };
        let start = Instant::now();
        while start.elapsed() < DEADLINE && test_hooks::idle_commits().1 == starved {
            thread::sleep(std::time::Duration::from_millis(20));
        }
        stop.store(true, Ordering::Relaxed);
        test_hooks::IDLE_COMMITS_ALWAYS.store(false, Ordering::SeqCst);
        hog.join().unwrap();
        let created = caller.join().unwrap();
        let (commits, starved_after) = test_hooks::idle_commits();
        assert!(
            starved_after > starved,
            "no commit at idle priority starved beside a busy task on its CPU \
             ({created} files created in {:?}, {commits} idle commits)",
            start.elapsed()
        );
        wait_until("every queue thread back at normal priority", all_normal);
    });
}
