//! open(2)/creat(2): creation flags, truncation, append, and the errno of
//! each way a path can be wrong for the requested open.

use libc::{O_APPEND, O_CREAT, O_DIRECTORY, O_EXCL, O_NOFOLLOW, O_RDONLY, O_RDWR, O_TRUNC, O_WRONLY};

use crate::sys;
use crate::util::*;

pub const CASES: &[Case] = &[
    Case::new("open/creat_mode", creat_mode),
    Case::new("open/excl_existing", excl_existing),
    Case::new("open/excl_dangling_symlink", excl_dangling_symlink),
    Case::new("open/trunc", trunc),
    Case::new("open/append_after_lseek", append_after_lseek),
    Case::new("open/directory_on_file", directory_on_file),
    Case::new("open/nofollow_symlink", nofollow_symlink),
    Case::new("open/missing", missing),
    Case::new("open/dir_for_write", dir_for_write),
    Case::new("open/creat_on_dir", creat_on_dir),
    Case::new("open/component_not_dir", component_not_dir),
    Case::new("open/creat_in_missing_dir", creat_in_missing_dir),
    Case::new("open/trailing_slash_on_file", trailing_slash_on_file),
];

fn creat_mode(c: &Ctx) -> Res {
    let p = c.p("f");
    let fd = ok("open O_CREAT", sys::open(&p, O_WRONLY | O_CREAT | O_EXCL, 0o640))?;
    let st = ok("fstat", sys::fstat(&fd))?;
    check_type("new file", &st, libc::S_IFREG)?;
    check_eq!(st.st_mode & 0o7777, 0o640, "mode of new file (umask 022)");
    check_eq!(st.st_size, 0, "size of new file");
    check_eq!(st.st_uid, unsafe { libc::geteuid() }, "owner of new file");
    // umask applies to the requested mode.
    let fd2 = ok(
        "open O_CREAT 0666",
        sys::open(&c.p("g"), O_WRONLY | O_CREAT, 0o666),
    )?;
    let st = ok("fstat", sys::fstat(&fd2))?;
    check_eq!(st.st_mode & 0o7777, 0o644, "mode 0666 under umask 022");
    Ok(())
}

fn excl_existing(c: &Ctx) -> Res {
    let p = c.p("f");
    put(&p, b"keep")?;
    want_err(
        "O_CREAT|O_EXCL on a file",
        sys::open(&p, O_WRONLY | O_CREAT | O_EXCL, 0o644),
        libc::EEXIST,
    )?;
    check_eq!(get(&p)?, b"keep".to_vec(), "content after failed O_EXCL");
    ok("mkdir", sys::mkdir(&c.p("d"), 0o755))?;
    want_err(
        "O_CREAT|O_EXCL on a directory",
        sys::open(&c.p("d"), O_RDONLY | O_CREAT | O_EXCL, 0o644),
        libc::EEXIST,
    )?;
    // Without O_EXCL, O_CREAT on an existing file just opens it.
    ok(
        "O_CREAT on existing file",
        sys::open(&p, O_RDONLY | O_CREAT, 0o644),
    )?;
    Ok(())
}

fn excl_dangling_symlink(c: &Ctx) -> Res {
    let l = c.p("l");
    ok("symlink", sys::symlink(b"nowhere", &l))?;
    want_err(
        "O_CREAT|O_EXCL on a dangling symlink",
        sys::open(&l, O_WRONLY | O_CREAT | O_EXCL, 0o644),
        libc::EEXIST,
    )?;
    want_err("target must not exist", sys::lstat(&c.p("nowhere")), libc::ENOENT)?;
    // Without O_EXCL, O_CREAT through a dangling symlink creates the target.
    ok(
        "O_CREAT through dangling symlink",
        sys::open(&l, O_WRONLY | O_CREAT, 0o644),
    )?;
    let st = ok("lstat target", sys::lstat(&c.p("nowhere")))?;
    check_type("created target", &st, libc::S_IFREG)?;
    Ok(())
}

fn trunc(c: &Ctx) -> Res {
    let p = c.p("f");
    put(&p, b"0123456789")?;
    let fd = ok("open O_TRUNC", sys::open(&p, O_WRONLY | O_TRUNC, 0))?;
    check_eq!(ok("fstat", sys::fstat(&fd))?.st_size, 0, "size after O_TRUNC");
    ok("write", sys::write(&fd, b"ab"))?;
    drop(fd);
    check_eq!(get(&p)?, b"ab".to_vec(), "content after O_TRUNC + write");
    // O_RDONLY without O_TRUNC leaves content alone.
    drop(ok("open O_RDONLY", sys::open(&p, O_RDONLY, 0))?);
    check_eq!(ok("stat", sys::stat(&p))?.st_size, 2, "size after plain open");
    Ok(())
}

fn append_after_lseek(c: &Ctx) -> Res {
    let p = c.p("f");
    put(&p, b"hello")?;
    let fd = ok("open O_APPEND", sys::open(&p, O_RDWR | O_APPEND, 0))?;
    ok("lseek 0", sys::lseek(&fd, 0, libc::SEEK_SET))?;
    ok("write", sys::write(&fd, b" world"))?;
    check_eq!(
        ok("lseek cur", sys::lseek(&fd, 0, libc::SEEK_CUR))?,
        11,
        "offset after append"
    );
    ok("lseek 2", sys::lseek(&fd, 2, libc::SEEK_SET))?;
    ok("write", sys::write(&fd, b"!"))?;
    drop(fd);
    check_eq!(get(&p)?, b"hello world!".to_vec(), "content after appends");
    Ok(())
}

fn directory_on_file(c: &Ctx) -> Res {
    let p = c.p("f");
    put(&p, b"x")?;
    want_err(
        "O_DIRECTORY on a file",
        sys::open(&p, O_RDONLY | O_DIRECTORY, 0),
        libc::ENOTDIR,
    )?;
    ok("mkdir", sys::mkdir(&c.p("d"), 0o755))?;
    ok(
        "O_DIRECTORY on a directory",
        sys::open(&c.p("d"), O_RDONLY | O_DIRECTORY, 0),
    )?;
    Ok(())
}

fn nofollow_symlink(c: &Ctx) -> Res {
    put(&c.p("f"), b"x")?;
    let l = c.p("l");
    ok("symlink", sys::symlink(b"f", &l))?;
    want_err(
        "O_NOFOLLOW on a symlink",
        sys::open(&l, O_RDONLY | O_NOFOLLOW, 0),
        libc::ELOOP,
    )?;
    ok(
        "O_NOFOLLOW on a file",
        sys::open(&c.p("f"), O_RDONLY | O_NOFOLLOW, 0),
    )?;
    // A symlink only in a leading component is followed.
    ok("mkdir", sys::mkdir(&c.p("d"), 0o755))?;
    put(&c.p("d/g"), b"y")?;
    ok("symlink dir", sys::symlink(b"d", &c.p("ld")))?;
    ok(
        "O_NOFOLLOW with symlink in the middle",
        sys::open(&c.p("ld/g"), O_RDONLY | O_NOFOLLOW, 0),
    )?;
    Ok(())
}

fn missing(c: &Ctx) -> Res {
    want_err("open missing", sys::open(&c.p("nope"), O_RDONLY, 0), libc::ENOENT)?;
    want_err(
        "open missing for write",
        sys::open(&c.p("nope"), O_WRONLY | O_TRUNC, 0),
        libc::ENOENT,
    )?;
    want_err("stat after failed open", sys::lstat(&c.p("nope")), libc::ENOENT)?;
    Ok(())
}

fn dir_for_write(c: &Ctx) -> Res {
    let d = c.p("d");
    ok("mkdir", sys::mkdir(&d, 0o755))?;
    want_err("open dir O_WRONLY", sys::open(&d, O_WRONLY, 0), libc::EISDIR)?;
    want_err("open dir O_RDWR", sys::open(&d, O_RDWR, 0), libc::EISDIR)?;
    ok("open dir O_RDONLY", sys::open(&d, O_RDONLY, 0))?;
    Ok(())
}

fn creat_on_dir(c: &Ctx) -> Res {
    let d = c.p("d");
    ok("mkdir", sys::mkdir(&d, 0o755))?;
    want_err(
        "O_CREAT|O_WRONLY on a directory",
        sys::open(&d, O_WRONLY | O_CREAT, 0o644),
        libc::EISDIR,
    )?;
    want_err(
        "O_CREAT|O_RDONLY on a directory",
        sys::open(&d, O_RDONLY | O_CREAT, 0o644),
        libc::EISDIR,
    )?;
    Ok(())
}

fn component_not_dir(c: &Ctx) -> Res {
    put(&c.p("f"), b"x")?;
    want_err("open f/x", sys::open(&c.p("f/x"), O_RDONLY, 0), libc::ENOTDIR)?;
    want_err(
        "open f/x O_CREAT",
        sys::open(&c.p("f/x"), O_WRONLY | O_CREAT, 0o644),
        libc::ENOTDIR,
    )?;
    want_err("stat f/x/y", sys::stat(&c.p("f/x/y")), libc::ENOTDIR)?;
    Ok(())
}

fn creat_in_missing_dir(c: &Ctx) -> Res {
    want_err(
        "O_CREAT in missing dir",
        sys::open(&c.p("nodir/f"), O_WRONLY | O_CREAT, 0o644),
        libc::ENOENT,
    )?;
    want_err(
        "missing dir stays missing",
        sys::lstat(&c.p("nodir")),
        libc::ENOENT,
    )?;
    Ok(())
}

fn trailing_slash_on_file(c: &Ctx) -> Res {
    put(&c.p("f"), b"x")?;
    want_err("open \"f/\"", sys::open(&c.p("f/"), O_RDONLY, 0), libc::ENOTDIR)?;
    want_err("stat \"f/\"", sys::stat(&c.p("f/")), libc::ENOTDIR)?;
    want_err(
        "O_CREAT \"g/\"",
        sys::open(&c.p("g/"), O_WRONLY | O_CREAT, 0o644),
        libc::EISDIR,
    )?;
    Ok(())
}
