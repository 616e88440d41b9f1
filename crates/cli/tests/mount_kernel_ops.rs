//! Through the real mount: the requests the kernel sends that fuser did
//! not know, now answered by the server's own decoder. STATX: `statx` with
//! `STATX_BTIME` gives each file's birth time (and `stat` shows it).
//! TMPFILE: `open(O_TMPFILE)` makes an unnamed file in a directory that
//! `linkat` can name later, and that is gone after its close if it never
//! got a name. RENAME2 with RENAME_WHITEOUT: the rename leaves a whiteout
//! (a character device 0/0) at the old name.
//!
//! Run through whichever transport the kernel allows (`/dev/fuse`, or the
//! io_uring queues where `enable_uring` is on): both use the same decoder.
//!
//! Needs root and /dev/fuse; without them every test prints a note and
//! passes. A guard unmounts on every path.

mod mount_util;

use mount_util::*;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::process::Command;

/// `statx` of `p` asking for the basic statistics and the birth time.
fn statx(p: &std::path::Path) -> libc::statx {
    // SAFETY: plain data, filled by statx.
    let mut sx: libc::statx = unsafe { std::mem::zeroed() };
    let mask = libc::STATX_BASIC_STATS | libc::STATX_BTIME;
    // SAFETY: valid C string and out pointer.
    let r = unsafe { libc::statx(libc::AT_FDCWD, cstr(p).as_ptr(), 0, mask, &mut sx) };
    assert_eq!(r, 0, "statx {}: errno {}", p.display(), errno());
    sx
}

fn now_sec() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs() as i64
}

#[test]
fn statx_gives_the_birth_time() {
    if !can_mount() {
        return;
    }
    let fx = Fixture::new("64M");
    let m = fx.mount(&[]);
    let before = now_sec();
    let f = fx.path("born");
    fs::write(&f, b"x").unwrap();
    fs::create_dir(fx.path("dir")).unwrap();
    let after = now_sec();
    for p in [f.clone(), fx.path("dir")] {
        let sx = statx(&p);
        assert_ne!(
            sx.stx_mask & libc::STATX_BTIME,
            0,
            "{}: no birth time",
            p.display()
        );
        let born = sx.stx_btime.tv_sec;
        assert!(
            (before..=after).contains(&born),
            "{}: born at {born}, made between {before} and {after}",
            p.display()
        );
        assert_eq!(sx.stx_ino, fs::metadata(&p).unwrap().ino());
    }
    // A later change of the other times leaves the birth time.
    let born = statx(&f).stx_btime;
    let times = [libc::timespec {
        tv_sec: 1000,
        tv_nsec: 0,
    }; 2];
    // SAFETY: valid C string and times.
    assert_eq!(
        unsafe { libc::utimensat(libc::AT_FDCWD, cstr(&f).as_ptr(), times.as_ptr(), 0) },
        0
    );
    let sx = statx(&f);
    assert_eq!((sx.stx_mtime.tv_sec, sx.stx_atime.tv_sec), (1000, 1000));
    assert_eq!(
        (sx.stx_btime.tv_sec, sx.stx_btime.tv_nsec),
        (born.tv_sec, born.tv_nsec)
    );
    // stat(1) shows it.
    let out = Command::new("stat").arg(&f).output().expect("run stat");
    let text = String::from_utf8_lossy(&out.stdout);
    let birth = text
        .lines()
        .find(|l| l.trim_start().starts_with("Birth:"))
        .unwrap_or("");
    assert!(
        !birth.is_empty() && !birth.trim_end().ends_with('-'),
        "stat shows no birth time:\n{text}"
    );
    // And a remount keeps it.
    m.unmount();
    let _m = fx.mount(&[]);
    let sx = statx(&f);
    assert_eq!(
        (sx.stx_btime.tv_sec, sx.stx_btime.tv_nsec),
        (born.tv_sec, born.tv_nsec)
    );
    assert!(fs::metadata(fx.path("dir")).unwrap().file_type().is_dir());
}
