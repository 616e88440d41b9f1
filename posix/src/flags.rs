//! Inode flags (`FS_IOC_GETFLAGS`/`SETFLAGS`, as chattr): an immutable file
//! refuses writes, chmod, unlink and rename (EPERM) until the flag is
//! cleared; an append-only file takes appends only; nodump is kept. Needs
//! root (CAP_LINUX_IMMUTABLE); skipped where the filesystem has no flags.

use crate::sys;
use crate::util::*;

pub const CASES: &[Case] = &[
    Case::new("flags/immutable", immutable),
    Case::new("flags/append_only", append_only),
];

const GETFLAGS: libc::c_ulong = 0x8008_6601;
const SETFLAGS: libc::c_ulong = 0x4008_6602;
pub(crate) const IMMUTABLE: u32 = 0x10;
pub(crate) const APPEND: u32 = 0x20;
const NODUMP: u32 = 0x40;

pub(crate) fn get_flags(p: &std::path::Path) -> Result<u32, Fail> {
    let fd = ok("open", sys::open(p, libc::O_RDONLY, 0))?;
    let mut f: libc::c_long = 0;
    // SAFETY: a valid descriptor and a long to fill.
    if unsafe { libc::ioctl(fd.0, GETFLAGS, &mut f) } != 0 {
        let e = sys::Errno::last();
        if e.0 == libc::ENOTTY || e.0 == libc::EOPNOTSUPP {
            return Err(Fail::Skip("no inode flags".into()));
        }
        return Err(Fail::Fail(format!("FS_IOC_GETFLAGS: {e}")));
    }
    Ok(f as u32)
}

pub(crate) fn set_flags(p: &std::path::Path, flags: u32) -> Res {
    let fd = ok("open", sys::open(p, libc::O_RDONLY, 0))?;
    let f = flags as libc::c_long;
    // SAFETY: a valid descriptor and a long to read.
    if unsafe { libc::ioctl(fd.0, SETFLAGS, &f) } != 0 {
        return Err(Fail::Fail(format!("FS_IOC_SETFLAGS {flags:#x}: {}", sys::Errno::last())));
    }
    Ok(())
}

/// A write through a new descriptor: EPERM at the open (ext4) or at the
/// write (a FUSE filesystem, which sees no open) both count.
fn write_refused(p: &std::path::Path, flags: libc::c_int, off: i64) -> Res {
    match sys::open(p, libc::O_WRONLY | flags, 0) {
        Err(e) if e.0 == libc::EPERM => Ok(()),
        Err(e) => Err(Fail::Fail(format!("open for write: {e}, want EPERM"))),
        Ok(fd) => want_err("write", sys::pwrite(&fd, b"x", off), libc::EPERM),
    }
}

fn immutable(c: &Ctx) -> Res {
    need_root()?;
    let f = c.p("f");
    put(&f, b"fixed")?;
    let base = get_flags(&f)?;
    set_flags(&f, base | IMMUTABLE | NODUMP)?;
    let r = (|| -> Res {
        check_eq!(get_flags(&f)? & (IMMUTABLE | NODUMP), IMMUTABLE | NODUMP, "flags read back");
        write_refused(&f, 0, 0)?;
        want_err("chmod", sys::chmod(&f, 0o600), libc::EPERM)?;
        want_err("unlink", sys::unlink(&f), libc::EPERM)?;
        want_err("rename", sys::rename(&f, &c.p("g")), libc::EPERM)?;
        want_err("link", sys::link(&f, &c.p("h")), libc::EPERM)?;
        Ok(())
    })();
    set_flags(&f, base)?;
    r?;
    check_eq!(get(&f)?, b"fixed".to_vec(), "content");
    ok("unlink once cleared", sys::unlink(&f))
}

fn append_only(c: &Ctx) -> Res {
    need_root()?;
    let f = c.p("f");
    put(&f, b"one")?;
    let base = get_flags(&f)?;
    set_flags(&f, base | APPEND)?;
    let r = (|| -> Res {
        let fd = ok("open O_APPEND", sys::open(&f, libc::O_WRONLY | libc::O_APPEND, 0))?;
        ok("append", sys::write(&fd, b"two"))?;
        write_refused(&f, libc::O_TRUNC, 0)?;
        want_err("unlink", sys::unlink(&f), libc::EPERM)?;
        Ok(())
    })();
    set_flags(&f, base)?;
    r?;
    check_eq!(get(&f)?, b"onetwo".to_vec(), "content");
    Ok(())
}
