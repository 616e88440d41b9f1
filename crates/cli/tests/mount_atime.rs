//! Access times through a mount: `relatime` (the default) moves a file's
//! access time on a read when it is not after the last change or is a day
//! old, and not otherwise; `strictatime` moves it at every read,
//! `noatime` never; a listing moves a directory's unless `nodiratime`; a
//! read-only mount moves none; moved access times survive a remount.
//!
//! Reads must reach the server: the page cache of the file is dropped
//! first (`POSIX_FADV_DONTNEED`). Needs root and /dev/fuse; without them
//! every test prints a note and passes. The guard unmounts on every path.

use std::fs::{self, File};
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

mod mount_util;

use mount_util::*;

/// Read all of `p`, its cached pages dropped first so the read reaches the
/// server.
fn read_uncached(p: &Path) {
    let mut f = File::open(p).expect("open");
    // SAFETY: a valid descriptor; advice only.
    unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    let mut buf = Vec::new();
    f.read_to_end(&mut buf).expect("read");
    assert!(!buf.is_empty());
}

/// Set `p`'s access and modification times (seconds).
fn set_times(p: &Path, atime: i64, mtime: i64) {
    let ts = |s| libc::timespec {
        tv_sec: s,
        tv_nsec: 0,
    };
    let times = [ts(atime), ts(mtime)];
    let c = cstr(p);
    // SAFETY: valid path and two timespecs.
    let r = unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), times.as_ptr(), 0) };
    assert_eq!(r, 0, "utimensat: {}", std::io::Error::last_os_error());
}

fn atime(p: &Path) -> (i64, i64) {
    let m = fs::metadata(p).expect("stat");
    (m.atime(), m.atime_nsec())
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs() as i64
}

const DAY: i64 = 24 * 3600;

#[test]
fn relatime_moves_access_times_when_stale_and_keeps_them() {
    if !can_mount() {
        return;
    }
    let fx = Fixture::new("64M");
    let m = fx.mount(&[]);
    let f = fx.path("f");
    fs::write(&f, "data").expect("write");
    // Access time before the modification: the read moves it.
    let t = now();
    set_times(&f, t - 3 * DAY, t - 2 * DAY);
    read_uncached(&f);
    let moved = atime(&f);
    assert!(moved.0 >= t, "atime {moved:?} not moved to now ({t})");
    // Now after modification and change: a second read leaves it.
    read_uncached(&f);
    assert_eq!(atime(&f), moved, "relatime moved a fresh access time");
    // A day old, though after the modification: it moves.
    set_times(&f, t - 2 * DAY, t - 3 * DAY);
    read_uncached(&f);
    assert!(atime(&f).0 >= t, "a day-old access time did not move");
    // A listing moves the directory's (made with entries in it since).
    let d = fx.path("d");
    fs::create_dir(&d).expect("mkdir");
    fs::write(d.join("x"), "x").expect("write");
    set_times(&d, t - 3 * DAY, t - 2 * DAY);
    assert_eq!(fs::read_dir(&d).expect("list").count(), 1);
    assert!(atime(&d).0 >= t, "listing did not move the directory's atime");
    let kept = atime(&f);
    m.unmount();
    let m = fx.mount(&[]);
    assert_eq!(atime(&f), kept, "access time lost at unmount");
    m.unmount();
    fx.fsck();
}

#[test]
fn strictatime_noatime_nodiratime_and_ro_are_honoured() {
    if !can_mount() {
        return;
    }
    let fx = Fixture::new("64M");
    let m = fx.mount(&[]);
    fs::write(fx.path("f"), "data").expect("write");
    fs::create_dir(fx.path("d")).expect("mkdir");
    fs::write(fx.path("d/x"), "x").expect("write");
    m.unmount();
    let (f, d) = (fx.path("f"), fx.path("d"));
    let t = now();

    let m = fx.mount(&["-o", "strictatime"]);
    set_times(&f, t - 10, t - 20);
    read_uncached(&f);
    let first = atime(&f);
    assert!(first.0 >= t, "strictatime: first read");
    read_uncached(&f);
    assert_ne!(atime(&f), first, "strictatime: the second read moves it again");
    m.unmount();

    for opts in ["noatime", "ro", "nodiratime"] {
        let m = fx.mount(&["-o", opts]);
        let old = (t - 3 * DAY, 0);
        if opts != "ro" {
            set_times(&f, old.0, t - 2 * DAY);
            set_times(&d, old.0, t - 2 * DAY);
        }
        let (fa, da) = (atime(&f), atime(&d));
        if opts != "nodiratime" {
            read_uncached(&f);
            assert_eq!(atime(&f), fa, "{opts}: a read moved the access time");
        }
        assert_eq!(fs::read_dir(&d).expect("list").count(), 1);
        assert_eq!(atime(&d), da, "{opts}: a listing moved the directory's");
        m.unmount();
    }
    fx.fsck();
}
