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
use std::ffi::CString;
use std::fs;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;
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

/// `open(dir, O_TMPFILE | O_RDWR | extra, 0600)`.
fn tmpfile(dir: &Path, extra: libc::c_int) -> fs::File {
    // SAFETY: valid C string.
    let fd = unsafe { libc::open(cstr(dir).as_ptr(), libc::O_TMPFILE | libc::O_RDWR | extra, 0o600) };
    assert!(fd >= 0, "O_TMPFILE in {}: errno {}", dir.display(), errno());
    // SAFETY: a fresh descriptor nobody else owns.
    unsafe { fs::File::from_raw_fd(fd) }
}

/// `linkat(fd, "", AT_FDCWD, to, AT_EMPTY_PATH)`: 0 or the errno.
fn link_fd(f: &fs::File, to: &Path) -> i32 {
    // SAFETY: valid descriptor and C strings.
    let r = unsafe {
        libc::linkat(
            f.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_FDCWD,
            cstr(to).as_ptr(),
            libc::AT_EMPTY_PATH,
        )
    };
    if r == 0 {
        0
    } else {
        errno()
    }
}

#[test]
fn o_tmpfile_makes_an_unnamed_file_that_linkat_names() {
    if !can_mount() {
        return;
    }
    let fx = Fixture::new("128M");
    let m = fx.mount(&[]);
    let dir = fx.path("d");
    fs::create_dir(&dir).unwrap();
    let empty = free_blocks(&fx.mnt);

    // Named through its descriptor.
    let mut a = tmpfile(&dir, 0);
    a.write_all(b"first").unwrap();
    assert_eq!(a.metadata().unwrap().nlink(), 0, "no name yet");
    assert!(
        fs::read_dir(&dir).unwrap().next().is_none(),
        "nothing in the directory"
    );
    assert_eq!(link_fd(&a, &fx.path("a")), 0);
    assert_eq!(a.metadata().unwrap().nlink(), 1);

    // Named through /proc/self/fd/N.
    let mut b = tmpfile(&dir, 0);
    b.write_all(b"second").unwrap();
    let proc_path = CString::new(format!("/proc/self/fd/{}", b.as_raw_fd())).unwrap();
    let to = cstr(&dir.join("b"));
    // SAFETY: valid C strings.
    let r = unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            proc_path.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    };
    assert_eq!(r, 0, "linkat /proc/self/fd: errno {}", errno());

    // O_EXCL: the kernel lets nobody name it.
    let c = tmpfile(&dir, libc::O_EXCL);
    assert_eq!(link_fd(&c, &fx.path("c")), libc::ENOENT);

    // Never named: its blocks come back after its close.
    let mut big = tmpfile(&dir, 0);
    big.write_all(&vec![5u8; 8 << 20]).unwrap();
    let held = free_blocks(&fx.mnt);
    assert!(
        held + 2048 <= empty,
        "the unnamed file takes its blocks ({held} of {empty} free)"
    );
    drop((a, b, c, big));
    wait_until("the unnamed files' blocks to come back", || {
        free_blocks(&fx.mnt) + 64 > empty
    });

    assert_eq!(fs::read(fx.path("a")).unwrap(), b"first");
    assert_eq!(fs::read(dir.join("b")).unwrap(), b"second");
    m.unmount();
    fx.fsck();
    let _m = fx.mount(&[]);
    assert_eq!(fs::read(fx.path("a")).unwrap(), b"first");
    assert_eq!(names(&dir), ["b"]);
}

#[test]
fn o_tmpfile_at_a_crash_is_gone_unless_linked_and_committed() {
    if !can_mount() {
        return;
    }
    let fx = Fixture::new("128M");
    let m = fx.mount(&[]);
    let mut kept = tmpfile(&fx.mnt, 0);
    kept.write_all(b"kept").unwrap();
    assert_eq!(link_fd(&kept, &fx.path("kept")), 0);
    let mut lost = tmpfile(&fx.mnt, 0);
    lost.write_all(&vec![9u8; 1 << 20]).unwrap();
    let _ = free_blocks(&fx.mnt); // commits both, the unnamed one as an orphan
    m.kill9();
    drop((kept, lost));
    fx.fsck();
    let _m = fx.mount(&[]);
    assert_eq!(fs::read(fx.path("kept")).unwrap(), b"kept");
    assert_eq!(names(&fx.mnt), ["kept"]);
}

#[test]
fn rename_whiteout_leaves_a_whiteout_at_the_old_name() {
    if !can_mount() {
        return;
    }
    let fx = Fixture::new("64M");
    let m = fx.mount(&[]);
    fs::write(fx.path("old"), b"data").unwrap();
    fs::create_dir(fx.path("olddir")).unwrap();
    for (from, to) in [("old", "new"), ("olddir", "newdir")] {
        let (f, t) = (cstr(&fx.path(from)), cstr(&fx.path(to)));
        // SAFETY: valid C strings.
        let r = unsafe {
            libc::renameat2(
                libc::AT_FDCWD,
                f.as_ptr(),
                libc::AT_FDCWD,
                t.as_ptr(),
                libc::RENAME_WHITEOUT,
            )
        };
        assert_eq!(r, 0, "renameat2 {from} {to} RENAME_WHITEOUT: errno {}", errno());
    }
    let check = |fx: &Fixture| {
        for from in ["old", "olddir"] {
            let md = fs::symlink_metadata(fx.path(from)).unwrap();
            assert!(md.file_type().is_char_device(), "{from}: {:?}", md.file_type());
            assert_eq!((md.rdev(), md.mode() & 0o7777), (0, 0), "{from}");
        }
        assert_eq!(fs::read(fx.path("new")).unwrap(), b"data");
        assert!(fs::metadata(fx.path("newdir")).unwrap().is_dir());
    };
    check(&fx);
    m.unmount();
    fx.fsck();
    let _m = fx.mount(&[]);
    check(&fx);
}
