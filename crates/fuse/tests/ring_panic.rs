//! A FUSE over io_uring queue thread that panics while requests are in
//! flight (the `test-hooks` feature's `RING_PANIC_AT`): its ring entries'
//! buffers, which the kernel may still write into, are leaked (counted),
//! never freed — where a plain unmount, which ends every entry first,
//! leaks none; the mount ends on its own — the connection is aborted, the
//! mount goes away, `serve` returns an error naming the panic — and the
//! volume is closed: what was written before reads back after a reopen.
//!
//! Mounts in this process (an in-memory volume), so it needs root,
//! /dev/fuse and a kernel with FUSE over io_uring; without them it prints a
//! note and passes, unless TUX3_REQUIRE_MOUNT=1, where it fails. The
//! kernel's `enable_uring` parameter is restored on every path.

use std::fs;
use std::io::Write;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use tux3::device::MemDevice;
use tux3::types::{FormatOptions, OpenOptions, ROOT_INO};
use tux3::Fs;
use tux3_fuse::test_hooks;
use tux3_fuse::FuseOptions;

mod common;

use common::{is_mounted, prepare, wait_for_rings, wait_until, Unmount, DEADLINE};

#[test]
fn a_panicking_ring_thread_leaks_its_buffers_and_the_mount_ends() {
    let Some((_param, _dir, mnt)) = prepare() else {
        return;
    };
    let dev = Arc::new(MemDevice::new(4096, 16384));
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    let open = || {
        let opts = OpenOptions {
            commit_interval: None,
            ..OpenOptions::default()
        };
        Fs::open(dev.clone(), opts).unwrap()
    };
    let opts = FuseOptions {
        uring: Some(true),
        threads: 2,
        ..FuseOptions::default()
    };
    let _unmount = Unmount(mnt.clone());
    let serve = |fs: Fs| {
        let mounted = tux3_fuse::mount(fs, &mnt, &opts).expect("mount -o uring");
        let (done_tx, done_rx) = mpsc::channel();
        let server = thread::spawn(move || {
            let _ = done_tx.send(mounted.serve());
        });
        (done_rx, server)
    };

    // A plain unmount: the kernel ends every ring entry, all are freed.
    let (done_rx, server) = serve(open());
    fs::write(mnt.join("before"), b"written before the panic").unwrap();
    fs::File::open(mnt.join("before")).unwrap().sync_all().unwrap();
    wait_for_rings(&mnt);
    assert!(Command::new("umount").arg(&mnt).status().unwrap().success());
    let served = done_rx
        .recv_timeout(DEADLINE)
        .expect("the session ends at unmount");
    assert_eq!(served, Ok(()));
    server.join().unwrap();
    assert_eq!(
        test_hooks::leaked_ring_slots(),
        0,
        "nothing leaked at a plain unmount"
    );

    // Again, with a fault.
    let (done_rx, server) = serve(open());
    assert_eq!(fs::read(mnt.join("before")).unwrap(), b"written before the panic");

    // Two writers keep requests in flight; a few requests on, one queue
    // thread panics while the others (and its own idle entries) are held
    // by the kernel.
    test_hooks::RING_PANIC_AT.store(test_hooks::ring_requests() + 40, Ordering::SeqCst);
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let (path, stop) = (mnt.join(format!("w{w}")), stop.clone());
            thread::spawn(move || -> Option<i32> {
                let mut f = fs::File::create(&path).ok()?;
                for i in 0..100_000u32 {
                    if stop.load(Ordering::SeqCst) {
                        return None;
                    }
                    let r = f.write_all(&[i as u8; 4096]).and_then(|()| f.sync_data());
                    if let Err(e) = r {
                        return e.raw_os_error();
                    }
                }
                None
            })
        })
        .collect();

    let served = done_rx
        .recv_timeout(DEADLINE)
        .expect("the session ends after a queue thread panicked");
    stop.store(true, Ordering::SeqCst);
    let err = served.expect_err("serve reports the panic");
    assert!(err.contains("panicked"), "{err}");
    server.join().unwrap();
    let errors: Vec<Option<i32>> = writers.into_iter().map(|w| w.join().unwrap()).collect();
    eprintln!("writers ended with {errors:?}");

    // Every buffer of the dead queue thread's ring was leaked, not freed.
    let leaked = test_hooks::leaked_ring_slots();
    assert!(leaked >= 16, "a queue's 16 ring entries leaked, got {leaked}");
    wait_until("the mount to go away", || !is_mounted(&mnt));

    // The volume was closed: reopened, it holds what was written.
    let fs = open();
    let attr = fs.lookup(ROOT_INO, b"before").unwrap();
    assert_eq!(fs.read(attr.ino, 0, 100).unwrap(), b"written before the panic");
    fs.close().unwrap();
}
