//! Attributes: chmod, chown, truncate/ftruncate, utimensat, and which of
//! atime/mtime/ctime each operation updates. atime/mtime are first set to a
//! fixed old time, so a change is "moved away from OLD"; ctime cannot be set,
//! so cases wait for the clock to pass it (util::tick_past) before acting.

use crate::sys::{self, ts};
use crate::util::*;

pub const CASES: &[Case] = &[
    Case::new("attrs/chmod", chmod),
    Case::new("attrs/chown_root", chown_root),
    Case::new("attrs/chown_clears_setuid", chown_clears_setuid),
    Case::new("attrs/truncate_shrink_grow", truncate_shrink_grow),
    Case::new("attrs/ftruncate", ftruncate),
    Case::new("attrs/truncate_errors", truncate_errors),
    Case::new("attrs/utimens_explicit", utimens_explicit),
    Case::new("attrs/utimens_now", utimens_now),
    Case::new("attrs/utimens_omit", utimens_omit),
    Case::new("attrs/times_write", times_write),
    Case::new("attrs/times_chmod", times_chmod),
    Case::new("attrs/times_truncate", times_truncate),
    Case::new("attrs/times_link", times_link),
    Case::new("attrs/times_unlink", times_unlink),
    Case::new("attrs/times_creat", times_creat),
    Case::new("attrs/times_mkdir_rmdir", times_mkdir_rmdir),
    Case::new("attrs/relatime_read", relatime_read),
    Case::new("attrs/statx_btime", statx_btime),
];

fn st(p: &std::path::Path) -> Result<libc::stat, Fail> {
    ok(&format!("lstat {}", p.display()), sys::lstat(p))
}

fn chmod(c: &Ctx) -> Res {
    let f = c.p("f");
    put(&f, b"x")?;
    for mode in [0o000, 0o600, 0o755, 0o4755, 0o2755, 0o1777, 0o7777, 0o644] {
        ok("chmod", sys::chmod(&f, mode))?;
        check_eq!(st(&f)?.st_mode & 0o7777, mode, "mode after chmod");
        check_type("file", &st(&f)?, libc::S_IFREG)?;
    }
    ok("mkdir", sys::mkdir(&c.p("d"), 0o755))?;
    ok("chmod dir", sys::chmod(&c.p("d"), 0o1700))?;
    check_eq!(st(&c.p("d"))?.st_mode & 0o7777, 0o1700, "dir mode after chmod");
    // chmod follows symlinks; the link's own mode is not changed.
    ok("symlink", sys::symlink(b"f", &c.p("l")))?;
    ok("chmod via symlink", sys::chmod(&c.p("l"), 0o600))?;
    check_eq!(st(&f)?.st_mode & 0o7777, 0o600, "target mode via symlink");
    check_type("link", &st(&c.p("l"))?, libc::S_IFLNK)?;
    want_err("chmod missing", sys::chmod(&c.p("nope"), 0o644), libc::ENOENT)?;
    Ok(())
}

fn chown_root(c: &Ctx) -> Res {
    need_root()?;
    let f = c.p("f");
    put(&f, b"x")?;
    ok("chown 12345:54321", sys::chown(&f, 12345, 54321))?;
    let s = st(&f)?;
    check_eq!((s.st_uid, s.st_gid), (12345, 54321), "owner after chown");
    ok("chown -1:777", sys::chown(&f, u32::MAX, 777))?;
    let s = st(&f)?;
    check_eq!((s.st_uid, s.st_gid), (12345, 777), "owner after group-only chown");
    ok("chown 65534:-1", sys::chown(&f, 65534, u32::MAX))?;
    let s = st(&f)?;
    check_eq!((s.st_uid, s.st_gid), (65534, 777), "owner after user-only chown");
    ok("mkdir", sys::mkdir(&c.p("d"), 0o755))?;
    ok("chown dir", sys::chown(&c.p("d"), 4242, 4343))?;
    let s = st(&c.p("d"))?;
    check_eq!((s.st_uid, s.st_gid), (4242, 4343), "dir owner after chown");
    Ok(())
}

/// Linux clears S_ISUID (and S_ISGID when group-executable) on chown of a
/// regular file, for root too.
fn chown_clears_setuid(c: &Ctx) -> Res {
    need_root()?;
    let f = c.p("f");
    put(&f, b"x")?;
    ok("chmod 06755", sys::chmod(&f, 0o6755))?;
    ok("chown", sys::chown(&f, 1000, 1000))?;
    check_eq!(st(&f)?.st_mode & 0o7777, 0o755, "mode after chown of setuid file");
    // S_ISGID without group-exec (mandatory-locking marker) is kept.
    ok("chmod 02644", sys::chmod(&f, 0o2644))?;
    ok("chown", sys::chown(&f, 1001, 1001))?;
    check_eq!(
        st(&f)?.st_mode & 0o7777,
        0o2644,
        "mode after chown of g+s,g-x file"
    );
    Ok(())
}

fn truncate_shrink_grow(c: &Ctx) -> Res {
    let f = c.p("f");
    put(&f, b"abcdefgh")?;
    ok("truncate 3", sys::truncate(&f, 3))?;
    check_eq!(st(&f)?.st_size, 3, "size after shrink");
    check_eq!(get(&f)?, b"abc".to_vec(), "content after shrink");
    ok("truncate 8", sys::truncate(&f, 8))?;
    check_eq!(
        get(&f)?,
        b"abc\0\0\0\0\0".to_vec(),
        "old bytes must not reappear after grow"
    );
    // Grow past a block/page boundary and into the next.
    ok("truncate 10000", sys::truncate(&f, 10000))?;
    let v = get(&f)?;
    check_eq!(v.len(), 10000, "size after grow");
    check!(v[3..].iter().all(|&b| b == 0), "grown region not all zeros");
    // Shrink in the middle of a block, then read the tail of that block.
    let big: Vec<u8> = (0..20000u32).map(|i| (i % 251) as u8 + 1).collect();
    put(&f, &big)?;
    ok("truncate 5000", sys::truncate(&f, 5000))?;
    ok("truncate 20000", sys::truncate(&f, 20000))?;
    let v = get(&f)?;
    check_eq!(v[..5000].to_vec(), big[..5000].to_vec(), "kept prefix");
    check!(v[5000..].iter().all(|&b| b == 0), "stale data after shrink+grow");
    ok("truncate 0", sys::truncate(&f, 0))?;
    check_eq!(st(&f)?.st_size, 0, "size after truncate 0");
    Ok(())
}

fn ftruncate(c: &Ctx) -> Res {
    let f = c.p("f");
    put(&f, b"0123456789")?;
    let fd = ok("open", sys::open(&f, libc::O_RDWR, 0))?;
    ok("ftruncate 4", sys::ftruncate(&fd, 4))?;
    check_eq!(ok("fstat", sys::fstat(&fd))?.st_size, 4, "size after ftruncate");
    ok("ftruncate 6", sys::ftruncate(&fd, 6))?;
    check_eq!(
        ok("pread", sys::pread(&fd, 100, 0))?,
        b"0123\0\0".to_vec(),
        "content after ftruncate grow"
    );
    // The file offset is not changed by ftruncate.
    ok("lseek", sys::lseek(&fd, 2, libc::SEEK_SET))?;
    ok("ftruncate 1", sys::ftruncate(&fd, 1))?;
    check_eq!(
        ok("lseek cur", sys::lseek(&fd, 0, libc::SEEK_CUR))?,
        2,
        "offset after ftruncate"
    );
    ok("write past EOF", sys::write(&fd, b"X"))?;
    check_eq!(
        ok("pread", sys::pread(&fd, 100, 0))?,
        b"0\0X".to_vec(),
        "content after write past EOF"
    );
    let ro = ok("open O_RDONLY", sys::open(&f, libc::O_RDONLY, 0))?;
    want_err("ftruncate on read-only fd", sys::ftruncate(&ro, 0), libc::EINVAL)?;
    want_err("ftruncate negative", sys::ftruncate(&fd, -1), libc::EINVAL)?;
    Ok(())
}

fn truncate_errors(c: &Ctx) -> Res {
    ok("mkdir", sys::mkdir(&c.p("d"), 0o755))?;
    want_err("truncate a directory", sys::truncate(&c.p("d"), 0), libc::EISDIR)?;
    put(&c.p("f"), b"abc")?;
    want_err("truncate negative", sys::truncate(&c.p("f"), -1), libc::EINVAL)?;
    check_eq!(get(&c.p("f"))?, b"abc".to_vec(), "content after failed truncate");
    want_err("truncate missing", sys::truncate(&c.p("nope"), 0), libc::ENOENT)?;
    want_err("truncate f/x", sys::truncate(&c.p("f/x"), 0), libc::ENOTDIR)?;
    Ok(())
}

fn utimens_explicit(c: &Ctx) -> Res {
    let f = c.p("f");
    put(&f, b"x")?;
    let before = st(&f)?;
    tick_past(&[&f])?;
    let (a, m) = ((1_100_000_000, 123_456_789), (1_200_000_000, 987_654_321));
    ok("utimensat", sys::utimens(&f, ts(a.0, a.1), ts(m.0, m.1)))?;
    let s = st(&f)?;
    // Seconds exact; nanoseconds may be truncated to the fs granularity.
    for (what, got, want) in [("atime", atime(&s), a), ("mtime", mtime(&s), m)] {
        check!(
            got.0 == want.0 && got.1 <= want.1,
            "{what}: got {got:?}, want {want:?}"
        );
    }
    check!(ctime(&s) > ctime(&before), "ctime not updated by utimensat");
    // The epoch itself, and a time in 2033 (before 2038, for 32-bit time fields).
    ok("utimensat old", sys::utimens(&f, ts(0, 0), ts(2_000_000_000, 0)))?;
    let s = st(&f)?;
    check_eq!(
        (atime(&s), mtime(&s)),
        ((0, 0), (2_000_000_000, 0)),
        "epoch and 2033 times"
    );
    want_err(
        "utimensat nsec out of range",
        sys::utimens(&f, ts(0, 1_000_000_000), ts(0, 0)),
        libc::EINVAL,
    )?;
    want_err(
        "utimensat missing",
        sys::utimens(&c.p("nope"), ts(0, 0), ts(0, 0)),
        libc::ENOENT,
    )?;
    Ok(())
}

fn utimens_now(c: &Ctx) -> Res {
    let f = c.p("f");
    put(&f, b"x")?;
    set_old(&f)?;
    let before = st(&f)?;
    tick_past(&[&f])?;
    let now = ts(0, libc::UTIME_NOW);
    ok("utimensat UTIME_NOW", sys::utimens(&f, now, now))?;
    let s = st(&f)?;
    check!(
        atime(&s) > ctime(&before),
        "atime not set to now: {:?}",
        atime(&s)
    );
    check!(
        mtime(&s) > ctime(&before),
        "mtime not set to now: {:?}",
        mtime(&s)
    );
    check!(ctime(&s) > ctime(&before), "ctime not updated");
    Ok(())
}

fn utimens_omit(c: &Ctx) -> Res {
    let f = c.p("f");
    put(&f, b"x")?;
    set_old(&f)?;
    let (now, omit) = (ts(0, libc::UTIME_NOW), ts(0, libc::UTIME_OMIT));
    ok("utimensat NOW,OMIT", sys::utimens(&f, now, omit))?;
    let s = st(&f)?;
    check!(atime(&s) != OLD, "atime not updated");
    check_eq!(mtime(&s), OLD, "mtime with UTIME_OMIT");
    set_old(&f)?;
    ok(
        "utimensat explicit,OMIT",
        sys::utimens(&f, omit, ts(1_300_000_000, 0)),
    )?;
    let s = st(&f)?;
    check_eq!(
        (atime(&s), mtime(&s)),
        (OLD, (1_300_000_000, 0)),
        "times with atime OMIT"
    );
    // Both omitted: nothing changes, not even ctime.
    let before = st(&f)?;
    tick_past(&[&f])?;
    ok("utimensat OMIT,OMIT", sys::utimens(&f, omit, omit))?;
    let s = st(&f)?;
    check_eq!(
        (atime(&s), mtime(&s), ctime(&s)),
        (atime(&before), mtime(&before), ctime(&before)),
        "times after OMIT,OMIT"
    );
    Ok(())
}

fn times_write(c: &Ctx) -> Res {
    let f = c.p("f");
    put(&f, b"x")?;
    let fd = ok("open", sys::open(&f, libc::O_WRONLY, 0))?;
    set_old(&f)?;
    let before = st(&f)?;
    tick_past(&[&f])?;
    ok("write", sys::write(&fd, b"y"))?;
    drop(fd);
    let s = st(&f)?;
    check!(mtime(&s) != OLD, "mtime not updated by write");
    check!(ctime(&s) > ctime(&before), "ctime not updated by write");
    Ok(())
}

fn times_chmod(c: &Ctx) -> Res {
    let f = c.p("f");
    put(&f, b"x")?;
    set_old(&f)?;
    let before = st(&f)?;
    tick_past(&[&f])?;
    ok("chmod", sys::chmod(&f, 0o600))?;
    let s = st(&f)?;
    check!(ctime(&s) > ctime(&before), "ctime not updated by chmod");
    check_eq!((atime(&s), mtime(&s)), (OLD, OLD), "atime/mtime after chmod");
    Ok(())
}

fn times_truncate(c: &Ctx) -> Res {
    let f = c.p("f");
    put(&f, b"abc")?;
    set_old(&f)?;
    let before = st(&f)?;
    tick_past(&[&f])?;
    ok("truncate", sys::truncate(&f, 1))?;
    let s = st(&f)?;
    check!(mtime(&s) != OLD, "mtime not updated by truncate");
    check!(ctime(&s) > ctime(&before), "ctime not updated by truncate");
    check_eq!(atime(&s), OLD, "atime after truncate");
    Ok(())
}

fn times_link(c: &Ctx) -> Res {
    let (f, d) = (c.p("f"), c.p("d"));
    put(&f, b"x")?;
    ok("mkdir", sys::mkdir(&d, 0o755))?;
    set_old(&f)?;
    set_old(&d)?;
    let (bf, bd) = (st(&f)?, st(&d)?);
    tick_past(&[&f, &d])?;
    ok("link f d/g", sys::link(&f, &c.p("d/g")))?;
    let (sf, sd) = (st(&f)?, st(&d)?);
    check!(ctime(&sf) > ctime(&bf), "inode ctime not updated by link");
    check_eq!(
        (atime(&sf), mtime(&sf)),
        (OLD, OLD),
        "inode atime/mtime after link"
    );
    check!(mtime(&sd) != OLD, "dir mtime not updated by link");
    check!(ctime(&sd) > ctime(&bd), "dir ctime not updated by link");
    Ok(())
}

fn times_unlink(c: &Ctx) -> Res {
    let d = c.p("d");
    ok("mkdir", sys::mkdir(&d, 0o755))?;
    put(&c.p("d/f"), b"x")?;
    ok("link", sys::link(&c.p("d/f"), &c.p("other")))?;
    set_old(&c.p("other"))?;
    set_old(&d)?;
    let (bf, bd) = (st(&c.p("other"))?, st(&d)?);
    tick_past(&[&c.p("other"), &d])?;
    ok("unlink d/f", sys::unlink(&c.p("d/f")))?;
    let (sf, sd) = (st(&c.p("other"))?, st(&d)?);
    check!(ctime(&sf) > ctime(&bf), "inode ctime not updated by unlink");
    check_eq!(
        (atime(&sf), mtime(&sf)),
        (OLD, OLD),
        "inode atime/mtime after unlink"
    );
    check!(mtime(&sd) != OLD, "dir mtime not updated by unlink");
    check!(ctime(&sd) > ctime(&bd), "dir ctime not updated by unlink");
    Ok(())
}

fn times_creat(c: &Ctx) -> Res {
    let d = c.p("d");
    ok("mkdir", sys::mkdir(&d, 0o755))?;
    set_old(&d)?;
    let bd = st(&d)?;
    tick_past(&[&d])?;
    drop(ok(
        "creat",
        sys::open(&c.p("d/new"), libc::O_WRONLY | libc::O_CREAT, 0o644),
    )?);
    let (sd, sn) = (st(&d)?, st(&c.p("d/new"))?);
    check!(mtime(&sd) != OLD, "dir mtime not updated by creat");
    check!(ctime(&sd) > ctime(&bd), "dir ctime not updated by creat");
    check!(
        mtime(&sn) > ctime(&bd) && ctime(&sn) > ctime(&bd),
        "new file times not current"
    );
    // Opening an existing file with O_CREAT (no O_TRUNC) changes nothing.
    set_old(&d)?;
    set_old(&c.p("d/new"))?;
    drop(ok(
        "open O_CREAT existing",
        sys::open(&c.p("d/new"), libc::O_WRONLY | libc::O_CREAT, 0o644),
    )?);
    check_eq!(mtime(&st(&d)?), OLD, "dir mtime after opening existing file");
    check_eq!(
        mtime(&st(&c.p("d/new"))?),
        OLD,
        "file mtime after O_CREAT open of existing"
    );
    Ok(())
}

fn times_mkdir_rmdir(c: &Ctx) -> Res {
    let d = c.p("d");
    ok("mkdir", sys::mkdir(&d, 0o755))?;
    set_old(&d)?;
    let bd = st(&d)?;
    tick_past(&[&d])?;
    ok("mkdir d/s", sys::mkdir(&c.p("d/s"), 0o755))?;
    let sd = st(&d)?;
    check!(
        mtime(&sd) != OLD && ctime(&sd) > ctime(&bd),
        "parent times not updated by mkdir"
    );
    set_old(&d)?;
    let bd = st(&d)?;
    tick_past(&[&d])?;
    ok("rmdir d/s", sys::rmdir(&c.p("d/s")))?;
    let sd = st(&d)?;
    check!(
        mtime(&sd) != OLD && ctime(&sd) > ctime(&bd),
        "parent times not updated by rmdir"
    );
    Ok(())
}

/// The default `relatime`: a read moves an access time that is not after
/// the last modification, and a second read leaves the new one. (The
/// file's cached pages are dropped so the read reaches a FUSE server.)
fn relatime_read(c: &Ctx) -> Res {
    let f = c.p("f");
    put(&f, b"data")?;
    let old = sys::ts(OLD.0, OLD.1);
    let later = sys::ts(OLD.0 + 1000, 0);
    ok("utimensat", sys::utimens(&f, old, later))?;
    // The read's access time must come out after the ctime utimensat set
    // (else it is "not after the last change" and moves again).
    tick_past(&[&f])?;
    let read = || -> Res {
        let fd = ok("open", sys::open(&f, libc::O_RDONLY, 0))?;
        // SAFETY: a valid descriptor; advice only.
        unsafe { libc::posix_fadvise(fd.0, 0, 0, libc::POSIX_FADV_DONTNEED) };
        check_eq!(ok("pread", sys::pread(&fd, 16, 0))?, b"data".to_vec(), "content");
        Ok(())
    };
    read()?;
    let first = atime(&ok("stat", sys::stat(&f))?);
    check!(
        first > (OLD.0 + 1000, 0),
        "atime {first:?} did not move on a read"
    );
    read()?;
    let second = atime(&ok("stat", sys::stat(&f))?);
    check_eq!(second, first, "a second read moved a fresh atime");
    Ok(())
}

/// statx(2) reports a birth time (STATX_BTIME) for new files and
/// directories: no later than their other times at birth, and unchanged by
/// what changes those (utimensat, chmod, a write, a rename).
fn statx_btime(c: &Ctx) -> Res {
    let (f, d) = (c.p("f"), c.p("d"));
    put(&f, b"x")?;
    ok("mkdir", sys::mkdir(&d, 0o755))?;
    for p in [&f, &d] {
        let sx = ok("statx", sys::statx(p))?;
        check!(
            sx.stx_mask & libc::STATX_BTIME != 0,
            "{}: no STATX_BTIME in the mask {:#x}",
            p.display(),
            sx.stx_mask
        );
        let born = (sx.stx_btime.tv_sec, sx.stx_btime.tv_nsec);
        for (what, t) in [("mtime", sx.stx_mtime), ("ctime", sx.stx_ctime)] {
            check!(
                born <= (t.tv_sec, t.tv_nsec),
                "{}: born {born:?} after its {what} {:?}",
                p.display(),
                (t.tv_sec, t.tv_nsec)
            );
        }
    }
    let born = ok("statx", sys::statx(&f))?.stx_btime;
    let born = (born.tv_sec, born.tv_nsec);
    ok("utimens", sys::utimens(&f, ts(1000, 0), ts(2000, 0)))?;
    ok("chmod", sys::chmod(&f, 0o600))?;
    let fd = ok("open", sys::open(&f, libc::O_WRONLY | libc::O_APPEND, 0))?;
    ok("write", sys::write(&fd, b"more"))?;
    drop(fd);
    ok("rename", sys::rename(&f, &c.p("g")))?;
    let sx = ok("statx", sys::statx(&c.p("g")))?;
    check_eq!(sx.stx_mtime.tv_sec > 2000, true, "the write moved mtime");
    check_eq!(
        (sx.stx_btime.tv_sec, sx.stx_btime.tv_nsec),
        born,
        "birth time after the changes"
    );
    Ok(())
}
