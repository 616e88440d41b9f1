//! Acceptance: while one thread runs a loop of 1 KiB append + fsync, stat
//! and ls of other files from another thread keep answering: they are not
//! serialized behind the fsyncs.
//!
//! To make each fsync slow enough to observe, the mount uses
//! `-o fsync=strict,commit=0` (fsync commits the whole delta) and the fsync
//! thread dirties 4 MiB of another file before each append, so every fsync
//! commits megabytes. The stat thread uses statx with AT_STATX_FORCE_SYNC
//! (the kernel asks the server, not its attribute cache) and opens and reads
//! a directory (opendir/readdir reach the server). A call that started after
//! an fsync started and returned before that fsync returned proves the two
//! were not serialized. No assertion on absolute times.

mod mount_util;

use mount_util::{can_mount, cstr, errno, Fixture};
use std::fs;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

const FSYNCS: usize = 20;

#[test]
fn stat_and_ls_answer_during_fsync_loop() {
    if !can_mount() {
        return;
    }
    let fx = Fixture::new("1G");
    let m = fx.mount(&["-o", "fsync=strict,commit=0"]);
    fs::create_dir(fx.path("other")).expect("mkdir");
    for i in 0..50 {
        fs::write(fx.path(&format!("other/f{i}")), b"x").expect("write other");
    }
    let done = AtomicBool::new(false);
    let (fsyncs, calls) = std::thread::scope(|s| {
        let fsyncer = s.spawn(|| {
            let mut a = fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(fx.path("A"))
                .expect("create A");
            let mut big = fs::File::create(fx.path("big")).expect("create big");
            let chunk = vec![0x5au8; 4 << 20];
            let mut spans = Vec::new();
            for _ in 0..FSYNCS {
                big.write_all(&chunk).expect("dirty big");
                a.write_all(&[b'a'; 1024]).expect("append A");
                let t0 = Instant::now();
                a.sync_all().expect("fsync A");
                spans.push((t0, Instant::now()));
            }
            done.store(true, Ordering::SeqCst);
            spans
        });
        let stater = s.spawn(|| {
            let mut spans = Vec::new();
            let mut i = 0;
            while !done.load(Ordering::SeqCst) {
                let t0 = Instant::now();
                let p = cstr(&fx.path(&format!("other/f{}", i % 50)));
                // SAFETY: valid path and buffer.
                let mut stx: libc::statx = unsafe { std::mem::zeroed() };
                let r = unsafe {
                    libc::statx(
                        libc::AT_FDCWD,
                        p.as_ptr(),
                        libc::AT_STATX_FORCE_SYNC,
                        libc::STATX_BASIC_STATS,
                        &mut stx,
                    )
                };
                assert_eq!(r, 0, "statx: errno {}", errno());
                if i % 4 == 0 {
                    let n = fs::read_dir(fx.path("other")).expect("ls").count();
                    assert_eq!(n, 50);
                }
                spans.push((t0, Instant::now()));
                i += 1;
            }
            spans
        });
        (
            fsyncer.join().expect("fsync thread"),
            stater.join().expect("stat thread"),
        )
    });
    // Calls entirely inside one fsync's span.
    let inside = calls
        .iter()
        .filter(|(c0, c1)| fsyncs.iter().any(|(f0, f1)| c0 > f0 && c1 < f1))
        .count();
    let first = fsyncs[0].0;
    let last = fsyncs[FSYNCS - 1].1;
    let during = calls
        .iter()
        .filter(|(c0, c1)| *c0 >= first && *c1 <= last)
        .count();
    eprintln!(
        "fsync latency: {FSYNCS} fsyncs; {during} stat/ls calls completed during the loop, \
         {inside} of them started and finished inside one fsync"
    );
    assert!(
        inside >= 1,
        "no stat/ls call completed while an fsync was in flight ({during} during the loop)"
    );
    assert!(
        during > FSYNCS,
        "only {during} stat/ls calls during {FSYNCS} fsyncs"
    );
    m.unmount();
    fx.fsck();
}
