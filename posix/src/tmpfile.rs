//! open(2) with O_TMPFILE: an unnamed regular file in a directory (link
//! count 0, not listed), which linkat(2) can name — through its descriptor
//! (AT_EMPTY_PATH, which needs CAP_DAC_READ_SEARCH) or through
//! /proc/self/fd/N — unless it was opened O_EXCL; and the errno of each way
//! the open can be wrong.

use libc::{O_EXCL, O_RDONLY, O_RDWR, O_TMPFILE, O_WRONLY};

use crate::sys;
use crate::util::*;

pub const CASES: &[Case] = &[
    Case::new("tmpfile/unnamed", unnamed),
    Case::new("tmpfile/link_by_fd", link_by_fd),
    Case::new("tmpfile/link_by_proc", link_by_proc),
    Case::new("tmpfile/excl_cannot_be_linked", excl_cannot_be_linked),
    Case::new("tmpfile/errors", errors),
];

fn listing(c: &Ctx) -> Result<Vec<String>, Fail> {
    let rd = std::fs::read_dir(&c.dir).map_err(|e| Fail::Fail(format!("readdir: {e}")))?;
    let mut v: Vec<String> = rd
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    Ok(v)
}

fn tmpfile(c: &Ctx, flags: libc::c_int) -> Result<sys::Fd, Fail> {
    ok("open O_TMPFILE", sys::open(&c.dir, O_TMPFILE | flags, 0o666))
}

fn unnamed(c: &Ctx) -> Res {
    let fd = tmpfile(c, O_RDWR)?;
    let st = ok("fstat", sys::fstat(&fd))?;
    check_type("the tmpfile", &st, libc::S_IFREG)?;
    check_eq!(st.st_nlink, 0, "link count");
    check_eq!(st.st_mode & 0o7777, 0o644, "mode 0666 under umask 022");
    check_eq!(st.st_size, 0, "size");
    ok("write", sys::pwrite(&fd, b"scratch", 0))?;
    check_eq!(
        ok("pread", sys::pread(&fd, 100, 0))?,
        b"scratch".to_vec(),
        "content"
    );
    check_eq!(listing(c)?, Vec::<String>::new(), "the directory lists nothing");
    Ok(())
}

fn link_by_fd(c: &Ctx) -> Res {
    need_root()?;
    let fd = tmpfile(c, O_WRONLY)?;
    ok("write", sys::write(&fd, b"kept"))?;
    let ino = ok("fstat", sys::fstat(&fd))?.st_ino;
    ok("linkat AT_EMPTY_PATH", sys::link_fd(&fd, &c.p("named")))?;
    let st = ok("stat named", sys::stat(&c.p("named")))?;
    check_eq!(
        (st.st_ino, st.st_nlink),
        (ino, 1),
        "inode and link count of the name"
    );
    check_eq!(
        ok("fstat", sys::fstat(&fd))?.st_nlink,
        1,
        "link count through the descriptor"
    );
    drop(fd);
    check_eq!(get(&c.p("named"))?, b"kept".to_vec(), "content after the close");
    check_eq!(listing(c)?, vec!["named".to_string()], "the directory");
    Ok(())
}

fn link_by_proc(c: &Ctx) -> Res {
    let fd = tmpfile(c, O_RDWR)?;
    ok("write", sys::write(&fd, b"via proc"))?;
    let proc = std::path::PathBuf::from(format!("/proc/self/fd/{}", fd.0));
    ok("linkat /proc/self/fd/N", sys::link_follow(&proc, &c.p("named")))?;
    drop(fd);
    check_eq!(get(&c.p("named"))?, b"via proc".to_vec(), "content");
    check_eq!(ok("stat", sys::stat(&c.p("named")))?.st_nlink, 1, "link count");
    Ok(())
}

fn excl_cannot_be_linked(c: &Ctx) -> Res {
    let fd = tmpfile(c, O_RDWR | O_EXCL)?;
    let proc = std::path::PathBuf::from(format!("/proc/self/fd/{}", fd.0));
    want_err(
        "linkat of an O_EXCL tmpfile",
        sys::link_follow(&proc, &c.p("x")),
        libc::ENOENT,
    )?;
    if sys::is_root() {
        want_err(
            "linkat AT_EMPTY_PATH of it",
            sys::link_fd(&fd, &c.p("x")),
            libc::ENOENT,
        )?;
    }
    check_eq!(listing(c)?, Vec::<String>::new(), "the directory lists nothing");
    Ok(())
}

fn errors(c: &Ctx) -> Res {
    want_err(
        "O_TMPFILE read-only",
        sys::open(&c.dir, O_TMPFILE | O_RDONLY, 0o600),
        libc::EINVAL,
    )?;
    put(&c.p("file"), b"")?;
    want_err(
        "O_TMPFILE on a file",
        sys::open(&c.p("file"), O_TMPFILE | O_RDWR, 0o600),
        libc::ENOTDIR,
    )?;
    want_err(
        "O_TMPFILE in a missing directory",
        sys::open(&c.p("nope"), O_TMPFILE | O_RDWR, 0o600),
        libc::ENOENT,
    )?;
    Ok(())
}
