//! Through the real mount: fallocate(2). Preallocation counts in
//! st_blocks at once and reads as zeros (a hole to SEEK_DATA) until
//! written; mode 0 extends the size; a punched range reads as zeros even
//! when its data was written through the kernel's page cache (and, with
//! `-o writeback_cache`, still held there); zeroed ranges read as zeros;
//! modes the kernel's FUSE module does not pass on (collapse, insert) and
//! modes nobody takes are EOPNOTSUPP. The same observations through the
//! `/dev/fuse` transport, through the io_uring one (once its rings serve)
//! and with the writeback cache; after a remount the file reads the same
//! and fsck finds nothing wrong.
//!
//! Needs root and /dev/fuse (and FUSE over io_uring for the ring run);
//! without them the tests print a note and pass.

use std::fs;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;

mod mount_util;

use mount_util::*;

const KIB: i64 = 1024;

/// fallocate(2) on `f`: 0 or the errno.
fn falloc(f: &fs::File, mode: i32, off: i64, len: i64) -> i32 {
    // SAFETY: a valid descriptor; no pointers.
    if unsafe { libc::fallocate(f.as_raw_fd(), mode, off, len) } == 0 {
        0
    } else {
        errno()
    }
}

/// lseek(2) with `whence`: the offset or the negated errno.
fn seek(f: &fs::File, off: i64, whence: i32) -> i64 {
    // SAFETY: a valid descriptor; no pointers.
    let r = unsafe { libc::lseek(f.as_raw_fd(), off, whence) };
    if r < 0 {
        -i64::from(errno())
    } else {
        r
    }
}

/// A summary of `bytes`: runs of equal bytes as `value x count`.
fn runs(bytes: &[u8]) -> String {
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let v = bytes[at];
        let n = bytes[at..].iter().take_while(|&&b| b == v).count();
        out.push(format!("{v:#x}x{n}"));
        at += n;
    }
    out.join(" ")
}

/// The workload's observations, as text.
fn workload(mnt: &Path) -> Vec<String> {
    let mut seen = Vec::new();
    let p = mnt.join("pre");
    let f = fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&p)
        .unwrap();
    seen.push(format!(
        "keep {}",
        falloc(&f, libc::FALLOC_FL_KEEP_SIZE, 0, 1024 * KIB)
    ));
    let m = fs::metadata(&p).unwrap();
    seen.push(format!("size {} blocks counted {}", m.len(), m.blocks() >= 2048));
    seen.push(format!("extend {}", falloc(&f, 0, 0, 256 * KIB)));
    seen.push(format!("size {}", fs::metadata(&p).unwrap().len()));
    seen.push(format!("read {}", runs(&fs::read(&p).unwrap())));
    seen.push(format!(
        "seek data {} hole {}",
        seek(&f, 0, libc::SEEK_DATA),
        seek(&f, 0, libc::SEEK_HOLE)
    ));
    // Data written through the page cache, then punched and zeroed.
    f.write_all_at(&[0x77; 16 * 1024], 0).unwrap();
    f.write_all_at(&[0x5a; 8 * 1024], 64 * 1024).unwrap();
    seen.push(format!(
        "punch {}",
        falloc(
            &f,
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            4 * KIB,
            8 * KIB
        )
    ));
    seen.push(format!(
        "zero {}",
        falloc(
            &f,
            libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE,
            66 * KIB + 100,
            200
        )
    ));
    seen.push(format!("read {}", runs(&fs::read(&p).unwrap())));
    seen.push(format!("seek data {}", seek(&f, 20 * KIB, libc::SEEK_DATA)));
    for (what, mode) in [
        ("collapse", libc::FALLOC_FL_COLLAPSE_RANGE),
        ("insert", libc::FALLOC_FL_INSERT_RANGE),
        ("unshare", libc::FALLOC_FL_UNSHARE_RANGE),
        ("punch without keep", libc::FALLOC_FL_PUNCH_HOLE),
    ] {
        seen.push(format!("{what} {}", falloc(&f, mode, 0, 4 * KIB)));
    }
    f.sync_all().unwrap();
    seen
}

/// Run the workload through a mount with `opts`, remount, read the file
/// again and check the volume; returns the observations.
fn through(opts: &[&str]) -> Vec<String> {
    let fx = Fixture::new("64M");
    let m = fx.mount(opts);
    if opts.contains(&"uring") {
        // Until every queue's ring is registered the kernel sends requests
        // through /dev/fuse: wait (with a deadline) until writes go
        // through the rings.
        let mut w = fs::File::create(fx.path("w")).unwrap();
        wait_until("the rings to serve", || {
            let before = cpu_ns(m.pid, "tux3-ring");
            for i in 0..50u64 {
                w.write_all(&i.to_ne_bytes()).unwrap();
            }
            cpu_ns(m.pid, "tux3-ring") > before
        });
    }
    let mut seen = workload(&fx.mnt);
    m.unmount();
    let again = fx.mount(&[]);
    seen.push(format!("remounted {}", runs(&fs::read(fx.path("pre")).unwrap())));
    again.unmount();
    fx.fsck();
    seen
}

/// The observations; `cached`: with the writeback cache, where the server
/// leaves SEEK_DATA and SEEK_HOLE to the kernel, which sees all data.
fn expected(cached: bool) -> Vec<String> {
    let zeros_after = |n: usize| format!("0x0x{n}");
    vec![
        "keep 0".into(),
        "size 0 blocks counted true".into(),
        "extend 0".into(),
        "size 262144".into(),
        format!("read {}", zeros_after(262144)),
        if cached {
            "seek data 0 hole 262144".into()
        } else {
            format!("seek data {} hole 0", -libc::ENXIO)
        },
        "punch 0".into(),
        "zero 0".into(),
        format!(
            "read 0x77x4096 0x0x8192 0x77x4096 0x0x49152 0x5ax2148 0x0x200 0x5ax5844 {}",
            zeros_after(262144 - 73728)
        ),
        format!("seek data {}", if cached { 20 * 1024 } else { 64 * 1024 }),
        format!("collapse {}", libc::EOPNOTSUPP),
        format!("insert {}", libc::EOPNOTSUPP),
        format!("unshare {}", libc::EOPNOTSUPP),
        format!("punch without keep {}", libc::EOPNOTSUPP),
    ]
}

#[test]
fn fallocate_through_dev_fuse_and_the_writeback_cache() {
    if !can_mount() {
        return;
    }
    let by_dev = through(&["-o", "nouring"]);
    let last = by_dev.last().cloned().unwrap_or_default();
    assert!(last.starts_with("remounted 0x77x4096 0x0x8192"), "{last}");
    let mut want = expected(false);
    want.push(last.clone());
    assert_eq!(by_dev, want);
    let mut want = expected(true);
    want.push(last);
    assert_eq!(through(&["-o", "nouring,writeback_cache"]), want);
}

#[test]
fn fallocate_through_the_rings() {
    let Some(_switch) = uring_switch(true) else {
        return;
    };
    let by_ring = through(&["-o", "uring"]);
    let mut want = expected(false);
    want.push(by_ring.last().cloned().unwrap_or_default());
    assert_eq!(by_ring, want);
}
