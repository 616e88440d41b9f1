//! Thin wrappers over raw system calls: every call returns `Result<_, Errno>`
//! so a case can check the exact errno instead of what `std::fs` maps it to.

use std::ffi::CString;
use std::fmt;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use libc::{c_int, c_void, mode_t};

/// An errno value, printed by its symbolic name.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Errno(pub c_int);

impl Errno {
    pub fn last() -> Errno {
        Errno(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    }

    pub fn name(self) -> String {
        let n = match self.0 {
            libc::EPERM => "EPERM",
            libc::ENOENT => "ENOENT",
            libc::EIO => "EIO",
            libc::EBADF => "EBADF",
            libc::EACCES => "EACCES",
            libc::EBUSY => "EBUSY",
            libc::EEXIST => "EEXIST",
            libc::EXDEV => "EXDEV",
            libc::ENOTDIR => "ENOTDIR",
            libc::EISDIR => "EISDIR",
            libc::EINVAL => "EINVAL",
            libc::EFBIG => "EFBIG",
            libc::ENOSPC => "ENOSPC",
            libc::EROFS => "EROFS",
            libc::EMLINK => "EMLINK",
            libc::ERANGE => "ERANGE",
            libc::ENAMETOOLONG => "ENAMETOOLONG",
            libc::ENOSYS => "ENOSYS",
            libc::ENOTEMPTY => "ENOTEMPTY",
            libc::ELOOP => "ELOOP",
            libc::ENODATA => "ENODATA",
            libc::EOPNOTSUPP => "EOPNOTSUPP",
            libc::ENXIO => "ENXIO",
            libc::ETXTBSY => "ETXTBSY",
            libc::E2BIG => "E2BIG",
            _ => return format!("errno {}", self.0),
        };
        n.to_string()
    }
}

impl fmt::Debug for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

pub type SysR<T> = Result<T, Errno>;

pub fn cstr(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).expect("path contains NUL")
}

fn cvt(ret: c_int) -> SysR<c_int> {
    if ret < 0 {
        Err(Errno::last())
    } else {
        Ok(ret)
    }
}

fn cvt_l(ret: isize) -> SysR<usize> {
    if ret < 0 {
        Err(Errno::last())
    } else {
        Ok(ret as usize)
    }
}

/// An owned file descriptor, closed on drop.
pub struct Fd(pub c_int);

impl Drop for Fd {
    fn drop(&mut self) {
        unsafe { libc::close(self.0) };
    }
}

pub fn open(p: &Path, flags: c_int, mode: mode_t) -> SysR<Fd> {
    let c = cstr(p);
    let fd = cvt(unsafe { libc::open(c.as_ptr(), flags | libc::O_CLOEXEC, mode as libc::c_uint) })?;
    Ok(Fd(fd))
}

pub fn mkdir(p: &Path, mode: mode_t) -> SysR<()> {
    let c = cstr(p);
    cvt(unsafe { libc::mkdir(c.as_ptr(), mode) }).map(drop)
}

pub fn rmdir(p: &Path) -> SysR<()> {
    let c = cstr(p);
    cvt(unsafe { libc::rmdir(c.as_ptr()) }).map(drop)
}

pub fn unlink(p: &Path) -> SysR<()> {
    let c = cstr(p);
    cvt(unsafe { libc::unlink(c.as_ptr()) }).map(drop)
}

pub fn rename(a: &Path, b: &Path) -> SysR<()> {
    let (ca, cb) = (cstr(a), cstr(b));
    cvt(unsafe { libc::rename(ca.as_ptr(), cb.as_ptr()) }).map(drop)
}

pub const RENAME_NOREPLACE: u32 = 1;
pub const RENAME_EXCHANGE: u32 = 2;
pub const RENAME_WHITEOUT: u32 = 4;

pub fn renameat2(a: &Path, b: &Path, flags: u32) -> SysR<()> {
    let (ca, cb) = (cstr(a), cstr(b));
    let r = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            ca.as_ptr(),
            libc::AT_FDCWD,
            cb.as_ptr(),
            flags,
        )
    };
    if r < 0 {
        Err(Errno::last())
    } else {
        Ok(())
    }
}

/// `linkat(fd, "", AT_FDCWD, to, AT_EMPTY_PATH)`: a name for an open file.
pub fn link_fd(fd: &Fd, to: &Path) -> SysR<()> {
    let c = cstr(to);
    cvt(unsafe {
        libc::linkat(
            fd.0,
            c"".as_ptr(),
            libc::AT_FDCWD,
            c.as_ptr(),
            libc::AT_EMPTY_PATH,
        )
    })
    .map(drop)
}

/// `linkat(AT_FDCWD, from, AT_FDCWD, to, AT_SYMLINK_FOLLOW)`.
pub fn link_follow(from: &Path, to: &Path) -> SysR<()> {
    let (a, b) = (cstr(from), cstr(to));
    let f = libc::AT_FDCWD;
    cvt(unsafe { libc::linkat(f, a.as_ptr(), f, b.as_ptr(), libc::AT_SYMLINK_FOLLOW) }).map(drop)
}

/// `statx` of `p` (not following a last symlink) for the basic
/// statistics and the birth time.
pub fn statx(p: &Path) -> SysR<libc::statx> {
    let c = cstr(p);
    let mut sx: libc::statx = unsafe { std::mem::zeroed() };
    let mask = libc::STATX_BASIC_STATS | libc::STATX_BTIME;
    cvt(unsafe {
        libc::statx(
            libc::AT_FDCWD,
            c.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
            mask,
            &mut sx,
        )
    })?;
    Ok(sx)
}

pub fn link(a: &Path, b: &Path) -> SysR<()> {
    let (ca, cb) = (cstr(a), cstr(b));
    cvt(unsafe { libc::link(ca.as_ptr(), cb.as_ptr()) }).map(drop)
}

pub fn symlink(target: &[u8], p: &Path) -> SysR<()> {
    let ct = CString::new(target).expect("target contains NUL");
    let c = cstr(p);
    cvt(unsafe { libc::symlink(ct.as_ptr(), c.as_ptr()) }).map(drop)
}

pub fn readlink(p: &Path) -> SysR<Vec<u8>> {
    let c = cstr(p);
    let mut buf = vec![0u8; 8192];
    let n = cvt_l(unsafe { libc::readlink(c.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) })?;
    buf.truncate(n);
    Ok(buf)
}

pub fn stat(p: &Path) -> SysR<libc::stat> {
    let c = cstr(p);
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    cvt(unsafe { libc::stat(c.as_ptr(), &mut st) })?;
    Ok(st)
}

pub fn lstat(p: &Path) -> SysR<libc::stat> {
    let c = cstr(p);
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    cvt(unsafe { libc::lstat(c.as_ptr(), &mut st) })?;
    Ok(st)
}

pub fn fstat(fd: &Fd) -> SysR<libc::stat> {
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    cvt(unsafe { libc::fstat(fd.0, &mut st) })?;
    Ok(st)
}

pub fn chmod(p: &Path, mode: mode_t) -> SysR<()> {
    let c = cstr(p);
    cvt(unsafe { libc::chmod(c.as_ptr(), mode) }).map(drop)
}

pub fn chown(p: &Path, uid: u32, gid: u32) -> SysR<()> {
    let c = cstr(p);
    cvt(unsafe { libc::chown(c.as_ptr(), uid, gid) }).map(drop)
}

pub fn fchmod(fd: &Fd, mode: mode_t) -> SysR<()> {
    cvt(unsafe { libc::fchmod(fd.0, mode) }).map(drop)
}

pub fn fchown(fd: &Fd, uid: u32, gid: u32) -> SysR<()> {
    cvt(unsafe { libc::fchown(fd.0, uid, gid) }).map(drop)
}

/// futimens(fd, [atime, mtime]).
pub fn futimens(fd: &Fd, atime: libc::timespec, mtime: libc::timespec) -> SysR<()> {
    let times = [atime, mtime];
    cvt(unsafe { libc::futimens(fd.0, times.as_ptr()) }).map(drop)
}

pub fn truncate(p: &Path, len: i64) -> SysR<()> {
    let c = cstr(p);
    cvt(unsafe { libc::truncate(c.as_ptr(), len) }).map(drop)
}

pub fn ftruncate(fd: &Fd, len: i64) -> SysR<()> {
    cvt(unsafe { libc::ftruncate(fd.0, len) }).map(drop)
}

pub fn ts(sec: i64, nsec: i64) -> libc::timespec {
    libc::timespec {
        tv_sec: sec as libc::time_t,
        tv_nsec: nsec as _,
    }
}

/// utimensat(AT_FDCWD, p, [atime, mtime], 0).
pub fn utimens(p: &Path, atime: libc::timespec, mtime: libc::timespec) -> SysR<()> {
    let c = cstr(p);
    let times = [atime, mtime];
    cvt(unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), times.as_ptr(), 0) }).map(drop)
}

pub fn write(fd: &Fd, data: &[u8]) -> SysR<usize> {
    cvt_l(unsafe { libc::write(fd.0, data.as_ptr().cast(), data.len()) })
}

pub fn pwrite(fd: &Fd, data: &[u8], off: i64) -> SysR<usize> {
    cvt_l(unsafe { libc::pwrite(fd.0, data.as_ptr().cast(), data.len(), off) })
}

pub fn pread(fd: &Fd, len: usize, off: i64) -> SysR<Vec<u8>> {
    let mut buf = vec![0u8; len];
    let n = cvt_l(unsafe { libc::pread(fd.0, buf.as_mut_ptr().cast(), len, off) })?;
    buf.truncate(n);
    Ok(buf)
}

pub fn lseek(fd: &Fd, off: i64, whence: c_int) -> SysR<i64> {
    let r = unsafe { libc::lseek(fd.0, off, whence) };
    if r < 0 {
        Err(Errno::last())
    } else {
        Ok(r)
    }
}

pub fn fsync(fd: &Fd) -> SysR<()> {
    cvt(unsafe { libc::fsync(fd.0) }).map(drop)
}

pub fn fallocate(fd: &Fd, mode: c_int, off: i64, len: i64) -> SysR<()> {
    cvt(unsafe { libc::fallocate(fd.0, mode, off, len) }).map(drop)
}

pub fn mknod(p: &Path, mode: mode_t, dev: libc::dev_t) -> SysR<()> {
    let c = cstr(p);
    cvt(unsafe { libc::mknod(c.as_ptr(), mode, dev) }).map(drop)
}

pub fn setxattr(p: &Path, name: &str, val: &[u8], flags: c_int) -> SysR<()> {
    let (c, n) = (cstr(p), CString::new(name).unwrap());
    let v: *const c_void = val.as_ptr().cast();
    cvt(unsafe { libc::setxattr(c.as_ptr(), n.as_ptr(), v, val.len(), flags) }).map(drop)
}

/// getxattr with a buffer of `cap` bytes (0 asks for the size only).
pub fn getxattr(p: &Path, name: &str, cap: usize) -> SysR<(usize, Vec<u8>)> {
    let (c, n) = (cstr(p), CString::new(name).unwrap());
    let mut buf = vec![0u8; cap];
    let ptr: *mut c_void = if cap == 0 {
        std::ptr::null_mut()
    } else {
        buf.as_mut_ptr().cast()
    };
    let len = cvt_l(unsafe { libc::getxattr(c.as_ptr(), n.as_ptr(), ptr, cap) })?;
    buf.truncate(len.min(cap));
    Ok((len, buf))
}

pub fn fsetxattr(fd: &Fd, name: &str, val: &[u8], flags: c_int) -> SysR<()> {
    let n = CString::new(name).unwrap();
    let v: *const c_void = val.as_ptr().cast();
    cvt(unsafe { libc::fsetxattr(fd.0, n.as_ptr(), v, val.len(), flags) }).map(drop)
}

/// fgetxattr with a buffer of `cap` bytes.
pub fn fgetxattr(fd: &Fd, name: &str, cap: usize) -> SysR<Vec<u8>> {
    let n = CString::new(name).unwrap();
    let mut buf = vec![0u8; cap];
    let len = cvt_l(unsafe { libc::fgetxattr(fd.0, n.as_ptr(), buf.as_mut_ptr().cast(), cap) })?;
    buf.truncate(len.min(cap));
    Ok(buf)
}

pub fn listxattr(p: &Path, cap: usize) -> SysR<(usize, Vec<u8>)> {
    let c = cstr(p);
    let mut buf = vec![0u8; cap];
    let ptr = if cap == 0 {
        std::ptr::null_mut()
    } else {
        buf.as_mut_ptr().cast()
    };
    let len = cvt_l(unsafe { libc::listxattr(c.as_ptr(), ptr, cap) })?;
    buf.truncate(len.min(cap));
    Ok((len, buf))
}

pub fn removexattr(p: &Path, name: &str) -> SysR<()> {
    let (c, n) = (cstr(p), CString::new(name).unwrap());
    cvt(unsafe { libc::removexattr(c.as_ptr(), n.as_ptr()) }).map(drop)
}

pub fn statfs(p: &Path) -> SysR<libc::statfs> {
    let c = cstr(p);
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    cvt(unsafe { libc::statfs(c.as_ptr(), &mut st) })?;
    Ok(st)
}

/// One getdents64 call with a buffer of `cap` bytes: returns the names read.
pub fn getdents(fd: &Fd, cap: usize) -> SysR<Vec<Vec<u8>>> {
    let mut buf = vec![0u8; cap];
    let r = unsafe { libc::syscall(libc::SYS_getdents64, fd.0, buf.as_mut_ptr(), cap) };
    if r < 0 {
        return Err(Errno::last());
    }
    let n = r as usize;
    let mut names = Vec::new();
    let mut pos = 0;
    // struct linux_dirent64 { u64 d_ino; i64 d_off; u16 d_reclen; u8 d_type; char d_name[]; }
    while pos < n {
        let reclen = u16::from_ne_bytes([buf[pos + 16], buf[pos + 17]]) as usize;
        let name = &buf[pos + 19..pos + reclen];
        let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
        names.push(name[..end].to_vec());
        pos += reclen;
    }
    Ok(names)
}

pub fn makedev(major: u32, minor: u32) -> libc::dev_t {
    libc::makedev(major, minor)
}

pub fn is_root() -> bool {
    unsafe { libc::geteuid() == 0 }
}
