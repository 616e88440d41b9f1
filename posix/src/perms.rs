//! Permission checks as unprivileged users: forked children drop to uid/gid
//! 65534 (or 65533) and try operations on files set up by root. Every case
//! has a positive control so an EACCES from the wrong cause cannot pass.
//! Skipped unless running as root, and with --skip-perm.

use crate::sys;
use crate::util::*;

pub const CASES: &[Case] = &[
    Case::new("perms/read_0600_root_file", read_0600_root_file),
    Case::new("perms/create_in_0755_root_dir", create_in_0755_root_dir),
    Case::new("perms/search_permission", search_permission),
    Case::new("perms/chmod_chown_not_owner", chmod_chown_not_owner),
    Case::new("perms/sticky_dir", sticky_dir),
    Case::new("perms/setgid_dir", setgid_dir),
];

const NOBODY: u32 = 65534;
const OTHER: u32 = 65533;

fn nobody<F: FnOnce() -> Res>(f: F) -> Res {
    as_user(NOBODY, NOBODY, &[], f)
}

fn read_0600_root_file(c: &Ctx) -> Res {
    c.need_perm()?;
    let (secret, public) = (c.p("secret"), c.p("public"));
    put(&secret, b"s")?;
    ok("chmod", sys::chmod(&secret, 0o600))?;
    put(&public, b"p")?;
    ok("chmod", sys::chmod(&public, 0o644))?;
    nobody(|| {
        ok("control: read 0644 file", sys::open(&public, libc::O_RDONLY, 0))?;
        want_err(
            "write 0644 root file",
            sys::open(&public, libc::O_WRONLY, 0),
            libc::EACCES,
        )?;
        want_err(
            "read 0600 root file",
            sys::open(&secret, libc::O_RDONLY, 0),
            libc::EACCES,
        )?;
        want_err("truncate 0644 root file", sys::truncate(&public, 0), libc::EACCES)?;
        // stat needs no permission on the file itself.
        ok("stat 0600 file", sys::stat(&secret))?;
        Ok(())
    })?;
    check_eq!(get(&public)?, b"p".to_vec(), "content untouched");
    Ok(())
}

fn create_in_0755_root_dir(c: &Ctx) -> Res {
    c.need_perm()?;
    let (d, open_d) = (c.p("d"), c.p("open"));
    ok("mkdir", sys::mkdir(&d, 0o755))?;
    ok("mkdir", sys::mkdir(&open_d, 0o777))?;
    ok("chmod 0777", sys::chmod(&open_d, 0o777))?;
    put(&c.p("d/existing"), b"x")?;
    nobody(|| {
        let fd = ok(
            "control: create in 0777 dir",
            sys::open(
                &c.p("open/mine"),
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
                0o644,
            ),
        )?;
        let s = ok("fstat", sys::fstat(&fd))?;
        check_eq!((s.st_uid, s.st_gid), (NOBODY, NOBODY), "owner of created file");
        let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL;
        want_err(
            "create in 0755 root dir",
            sys::open(&c.p("d/f"), flags, 0o644),
            libc::EACCES,
        )?;
        want_err(
            "mkdir in 0755 root dir",
            sys::mkdir(&c.p("d/s"), 0o755),
            libc::EACCES,
        )?;
        want_err(
            "unlink in 0755 root dir",
            sys::unlink(&c.p("d/existing")),
            libc::EACCES,
        )?;
        want_err(
            "rename out of 0755 root dir",
            sys::rename(&c.p("d/existing"), &c.p("open/x")),
            libc::EACCES,
        )?;
        want_err(
            "symlink in 0755 root dir",
            sys::symlink(b"t", &c.p("d/l")),
            libc::EACCES,
        )?;
        Ok(())
    })?;
    want_err("nothing created", sys::lstat(&c.p("d/f")), libc::ENOENT)?;
    ok("existing untouched", sys::lstat(&c.p("d/existing")))?;
    Ok(())
}

fn search_permission(c: &Ctx) -> Res {
    c.need_perm()?;
    for (d, mode) in [("rx", 0o755), ("r", 0o744), ("x", 0o711)] {
        ok("mkdir", sys::mkdir(&c.p(d), 0o755))?;
        put(&c.p(&format!("{d}/f")), b"x")?;
        ok("chmod", sys::chmod(&c.p(d), mode))?;
    }
    nobody(|| {
        ok("control: stat rx/f", sys::stat(&c.p("rx/f")))?;
        want_err("stat through dir without x", sys::stat(&c.p("r/f")), libc::EACCES)?;
        want_err(
            "open through dir without x",
            sys::open(&c.p("r/f"), libc::O_RDONLY, 0),
            libc::EACCES,
        )?;
        ok("stat through x-only dir", sys::stat(&c.p("x/f")))?;
        want_err(
            "list x-only dir",
            sys::open(&c.p("x"), libc::O_RDONLY | libc::O_DIRECTORY, 0),
            libc::EACCES,
        )?;
        ok(
            "list r-only dir",
            sys::open(&c.p("r"), libc::O_RDONLY | libc::O_DIRECTORY, 0),
        )?;
        Ok(())
    })
}

fn chmod_chown_not_owner(c: &Ctx) -> Res {
    c.need_perm()?;
    let (f, mine) = (c.p("f"), c.p("mine"));
    put(&f, b"x")?;
    put(&mine, b"x")?;
    ok("chown", sys::chown(&mine, NOBODY, NOBODY))?;
    nobody(|| {
        ok("control: chmod own file", sys::chmod(&mine, 0o600))?;
        want_err("chmod root's file", sys::chmod(&f, 0o777), libc::EPERM)?;
        want_err("chown root's file", sys::chown(&f, NOBODY, NOBODY), libc::EPERM)?;
        want_err(
            "give own file away",
            sys::chown(&mine, OTHER, u32::MAX),
            libc::EPERM,
        )?;
        want_err(
            "chgrp own file to a foreign group",
            sys::chown(&mine, u32::MAX, OTHER),
            libc::EPERM,
        )?;
        want_err(
            "utimensat explicit on root's file",
            sys::utimens(&f, sys::ts(0, 0), sys::ts(0, 0)),
            libc::EPERM,
        )?;
        Ok(())
    })?;
    let s = ok("stat", sys::stat(&f))?;
    check_eq!(
        (s.st_mode & 0o7777, s.st_uid),
        (0o644, 0),
        "root's file untouched"
    );
    Ok(())
}

/// In a mode-1777 directory only a file's owner (or the dir's owner, or
/// root) may unlink or rename it; others get EPERM.
fn sticky_dir(c: &Ctx) -> Res {
    c.need_perm()?;
    let t = c.p("tmp");
    ok("mkdir", sys::mkdir(&t, 0o755))?;
    ok("chmod 1777", sys::chmod(&t, 0o1777))?;
    check_eq!(
        ok("stat", sys::stat(&t))?.st_mode & 0o7777,
        0o1777,
        "mode of sticky dir"
    );
    let (f, g) = (c.p("tmp/f"), c.p("tmp/g"));
    nobody(|| {
        put(&f, b"mine")?;
        put(&g, b"mine too")
    })?;
    as_user(OTHER, OTHER, &[], || {
        ok(
            "control: other creates its own file",
            sys::open(&c.p("tmp/o"), libc::O_WRONLY | libc::O_CREAT, 0o644),
        )?;
        ok(
            "control: other renames its own file",
            sys::rename(&c.p("tmp/o"), &c.p("tmp/o2")),
        )?;
        want_err("other unlinks owner's file", sys::unlink(&f), libc::EPERM)?;
        want_err(
            "other renames owner's file",
            sys::rename(&f, &c.p("tmp/stolen")),
            libc::EPERM,
        )?;
        want_err(
            "other renames onto owner's file",
            sys::rename(&c.p("tmp/o2"), &g),
            libc::EPERM,
        )?;
        ok("control: other unlinks its own file", sys::unlink(&c.p("tmp/o2")))?;
        Ok(())
    })?;
    check_eq!(get(&f)?, b"mine".to_vec(), "file survives other user");
    check_eq!(get(&g)?, b"mine too".to_vec(), "target survives other user");
    want_err("no stolen name", sys::lstat(&c.p("tmp/stolen")), libc::ENOENT)?;
    nobody(|| {
        ok("owner renames its file", sys::rename(&f, &c.p("tmp/f2")))?;
        ok("owner unlinks its file", sys::unlink(&c.p("tmp/f2")))?;
        Ok(())
    })?;
    ok("root unlinks another's file", sys::unlink(&g))?;
    Ok(())
}

/// In a setgid directory new files take the directory's group (not the
/// creator's gid) and new subdirectories inherit the setgid bit.
fn setgid_dir(c: &Ctx) -> Res {
    c.need_perm()?;
    const GROUP: u32 = 4242;
    let d = c.p("sg");
    ok("mkdir", sys::mkdir(&d, 0o755))?;
    ok("chown", sys::chown(&d, 0, GROUP))?;
    ok("chmod 2775", sys::chmod(&d, 0o2775))?;
    check_eq!(
        ok("stat", sys::stat(&d))?.st_mode & 0o7777,
        0o2775,
        "mode of setgid dir"
    );
    // nobody is in GROUP only as a supplementary group; its gid is 65534.
    as_user(NOBODY, NOBODY, &[GROUP], || {
        let fd = ok(
            "create in setgid dir",
            sys::open(&c.p("sg/f"), libc::O_WRONLY | libc::O_CREAT, 0o644),
        )?;
        let s = ok("fstat", sys::fstat(&fd))?;
        check_eq!((s.st_uid, s.st_gid), (NOBODY, GROUP), "owner/group of new file");
        ok("mkdir in setgid dir", sys::mkdir(&c.p("sg/sub"), 0o755))?;
        let s = ok("stat sub", sys::stat(&c.p("sg/sub")))?;
        check_eq!(s.st_gid, GROUP, "group of new subdir");
        check!(
            s.st_mode & libc::S_ISGID != 0,
            "new subdir lacks setgid bit: mode {:o}",
            s.st_mode & 0o7777
        );
        let fd = ok(
            "create in sub",
            sys::open(&c.p("sg/sub/g"), libc::O_WRONLY | libc::O_CREAT, 0o644),
        )?;
        check_eq!(
            ok("fstat", sys::fstat(&fd))?.st_gid,
            GROUP,
            "group of file in inherited setgid subdir"
        );
        Ok(())
    })?;
    // Control: outside the setgid dir the creator's gid applies.
    ok("mkdir plain", sys::mkdir(&c.p("plain"), 0o777))?;
    ok("chmod plain", sys::chmod(&c.p("plain"), 0o777))?;
    as_user(NOBODY, NOBODY, &[GROUP], || {
        let fd = ok(
            "create in plain dir",
            sys::open(&c.p("plain/f"), libc::O_WRONLY | libc::O_CREAT, 0o644),
        )?;
        check_eq!(
            ok("fstat", sys::fstat(&fd))?.st_gid,
            NOBODY,
            "group of file in plain dir"
        );
        Ok(())
    })
}
