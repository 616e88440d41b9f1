//! Special files (mknod FIFO/char/block, unix sockets via bind), name and
//! path length limits, statfs, and plain read/write/lseek semantics.

use std::os::unix::ffi::OsStrExt;

use crate::sys;
use crate::util::*;

pub const CASES: &[Case] = &[
    Case::new("misc/mknod_fifo", mknod_fifo),
    Case::new("misc/mknod_devices", mknod_devices),
    Case::new("misc/mknod_exists", mknod_exists),
    Case::new("misc/unix_socket", unix_socket),
    Case::new("misc/name_255", name_255),
    Case::new("misc/name_256", name_256),
    Case::new("misc/path_max", path_max),
    Case::new("misc/statfs", statfs),
    Case::new("misc/read_write_lseek", read_write_lseek),
];

fn mknod_fifo(c: &Ctx) -> Res {
    let p = c.p("fifo");
    ok("mknod S_IFIFO", sys::mknod(&p, libc::S_IFIFO | 0o640, 0))?;
    let s = ok("lstat", sys::lstat(&p))?;
    check_type("fifo", &s, libc::S_IFIFO)?;
    check_eq!(s.st_mode & 0o7777, 0o640, "fifo mode");
    check_eq!(s.st_size, 0, "fifo size");
    // Data written into the FIFO goes through the pipe, not the file.
    let r = ok(
        "open fifo O_RDONLY|O_NONBLOCK",
        sys::open(&p, libc::O_RDONLY | libc::O_NONBLOCK, 0),
    )?;
    let w = ok("open fifo O_WRONLY", sys::open(&p, libc::O_WRONLY, 0))?;
    ok("write fifo", sys::write(&w, b"through"))?;
    let mut buf = [0u8; 16];
    let n = unsafe { libc::read(r.0, buf.as_mut_ptr().cast(), buf.len()) };
    check_eq!(&buf[..n.max(0) as usize], b"through", "data read from fifo");
    check_eq!(ok("lstat", sys::lstat(&p))?.st_size, 0, "fifo size after I/O");
    Ok(())
}

fn mknod_devices(c: &Ctx) -> Res {
    need_root()?;
    let (chr, blk) = (c.p("chr"), c.p("blk"));
    let (dc, db) = (sys::makedev(1, 3), sys::makedev(7, 200));
    ok("mknod S_IFCHR 1:3", sys::mknod(&chr, libc::S_IFCHR | 0o600, dc))?;
    ok("mknod S_IFBLK 7:200", sys::mknod(&blk, libc::S_IFBLK | 0o660, db))?;
    let s = ok("lstat chr", sys::lstat(&chr))?;
    check_type("chr", &s, libc::S_IFCHR)?;
    check_eq!(s.st_rdev, dc, "rdev of char device");
    check_eq!(s.st_mode & 0o7777, 0o600, "char device mode");
    let s = ok("lstat blk", sys::lstat(&blk))?;
    check_type("blk", &s, libc::S_IFBLK)?;
    check_eq!(s.st_rdev, db, "rdev of block device");
    // Large major/minor numbers round-trip too.
    let big = sys::makedev(259, 70000);
    ok(
        "mknod big numbers",
        sys::mknod(&c.p("big"), libc::S_IFCHR | 0o600, big),
    )?;
    check_eq!(
        ok("lstat", sys::lstat(&c.p("big")))?.st_rdev,
        big,
        "rdev with large numbers"
    );
    // Regular files report rdev 0.
    put(&c.p("f"), b"")?;
    check_eq!(
        ok("lstat", sys::lstat(&c.p("f")))?.st_rdev,
        0,
        "rdev of a regular file"
    );
    // mknod with S_IFREG (or 0) makes an ordinary empty file.
    ok("mknod S_IFREG", sys::mknod(&c.p("reg"), libc::S_IFREG | 0o644, 0))?;
    check_type(
        "mknod S_IFREG",
        &ok("lstat", sys::lstat(&c.p("reg")))?,
        libc::S_IFREG,
    )?;
    Ok(())
}

fn mknod_exists(c: &Ctx) -> Res {
    put(&c.p("f"), b"x")?;
    want_err(
        "mknod over a file",
        sys::mknod(&c.p("f"), libc::S_IFIFO | 0o644, 0),
        libc::EEXIST,
    )?;
    want_err(
        "mknod in missing dir",
        sys::mknod(&c.p("nodir/p"), libc::S_IFIFO | 0o644, 0),
        libc::ENOENT,
    )?;
    want_err(
        "mknod S_IFDIR",
        sys::mknod(&c.p("d"), libc::S_IFDIR | 0o755, 0),
        libc::EPERM,
    )?;
    Ok(())
}

fn unix_socket(c: &Ctx) -> Res {
    // bind() takes a path of at most 107 bytes: bind relative to the case
    // directory (chdir there and back; the suite is single-threaded).
    let old = std::env::current_dir().map_err(|e| Fail::Fail(format!("getcwd: {e}")))?;
    std::env::set_current_dir(&c.dir).map_err(|e| Fail::Fail(format!("chdir: {e}")))?;
    let r = bind_sock(b"sock");
    std::env::set_current_dir(&old).map_err(|e| Fail::Fail(format!("chdir back: {e}")))?;
    r?;
    let s = ok("lstat socket", sys::lstat(&c.p("sock")))?;
    check_type("socket", &s, libc::S_IFSOCK)?;
    check_eq!(s.st_nlink, 1, "socket nlink");
    ok("unlink socket", sys::unlink(&c.p("sock")))?;
    Ok(())
}

fn bind_sock(name: &[u8]) -> Res {
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    check!(fd >= 0, "socket: {}", sys::Errno::last());
    let fd = sys::Fd(fd);
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, s) in addr.sun_path.iter_mut().zip(name) {
        *d = *s as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + name.len() + 1;
    let bind = |fd: &sys::Fd| unsafe {
        libc::bind(
            fd.0,
            (&addr as *const libc::sockaddr_un).cast(),
            len as libc::socklen_t,
        )
    };
    check!(bind(&fd) == 0, "bind: {}", sys::Errno::last());
    // A second bind to an existing path fails with EADDRINUSE.
    let fd2 = sys::Fd(unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) });
    check!(bind(&fd2) != 0, "second bind to the same path succeeded");
    check_eq!(sys::Errno::last().0, libc::EADDRINUSE, "errno of second bind");
    Ok(())
}

fn name_255(c: &Ctx) -> Res {
    let name = "n".repeat(250) + "12345";
    check_eq!(name.len(), 255, "name length");
    let p = c.p(&name);
    put(&p, b"long")?;
    check_eq!(get(&p)?, b"long".to_vec(), "content via 255-byte name");
    let found = std::fs::read_dir(&c.dir)
        .map_err(|e| Fail::Fail(format!("read_dir: {e}")))?
        .flatten()
        .any(|e| e.file_name().as_bytes() == name.as_bytes());
    check!(found, "255-byte name not listed by readdir");
    let d = c.p(&("d".repeat(255)));
    ok("mkdir 255-byte name", sys::mkdir(&d, 0o755))?;
    ok("rename to 255-byte name", sys::rename(&p, &d.join(&name)))?;
    ok(
        "symlink 255-byte name",
        sys::symlink(name.as_bytes(), &c.p(&"l".repeat(255))),
    )?;
    ok("unlink", sys::unlink(&d.join(&name)))?;
    ok("rmdir", sys::rmdir(&d))?;
    Ok(())
}

fn name_256(c: &Ctx) -> Res {
    let name = "n".repeat(256);
    let p = c.p(&name);
    let e = libc::ENAMETOOLONG;
    want_err(
        "create 256-byte name",
        sys::open(&p, libc::O_WRONLY | libc::O_CREAT, 0o644),
        e,
    )?;
    want_err("stat 256-byte name", sys::lstat(&p), e)?;
    want_err("mkdir 256-byte name", sys::mkdir(&p, 0o755), e)?;
    want_err("symlink 256-byte name", sys::symlink(b"t", &p), e)?;
    put(&c.p("f"), b"x")?;
    want_err("rename to 256-byte name", sys::rename(&c.p("f"), &p), e)?;
    want_err("link to 256-byte name", sys::link(&c.p("f"), &p), e)?;
    ok("f still there", sys::lstat(&c.p("f")))?;
    Ok(())
}

fn path_max(c: &Ctx) -> Res {
    // More than PATH_MAX (4096) bytes including the NUL, made of short
    // components that would otherwise be valid.
    let mut p = c.dir.clone();
    while p.as_os_str().len() < libc::PATH_MAX as usize + 10 {
        p.push("abcdefgh");
    }
    let e = libc::ENAMETOOLONG;
    want_err("stat path > PATH_MAX", sys::stat(&p), e)?;
    want_err(
        "open O_CREAT path > PATH_MAX",
        sys::open(&p, libc::O_WRONLY | libc::O_CREAT, 0o644),
        e,
    )?;
    want_err("mkdir path > PATH_MAX", sys::mkdir(&p, 0o755), e)?;
    // A symlink target longer than PATH_MAX is refused too.
    let target = vec![b'a'; libc::PATH_MAX as usize + 1];
    want_err("symlink target > PATH_MAX", sys::symlink(&target, &c.p("l")), e)?;
    Ok(())
}

fn statfs(c: &Ctx) -> Res {
    let s = ok("statfs", sys::statfs(&c.dir))?;
    check!(s.f_bsize > 0, "f_bsize {}", s.f_bsize);
    check!(
        s.f_blocks >= s.f_bfree,
        "f_blocks {} < f_bfree {}",
        s.f_blocks,
        s.f_bfree
    );
    check!(
        s.f_bfree >= s.f_bavail,
        "f_bfree {} < f_bavail {}",
        s.f_bfree,
        s.f_bavail
    );
    check!(
        s.f_files >= s.f_ffree,
        "f_files {} < f_ffree {}",
        s.f_files,
        s.f_ffree
    );
    check_eq!(s.f_namelen as i64, 255, "f_namelen");
    put(&c.p("f"), b"x")?;
    let s2 = ok("statfs on a file", sys::statfs(&c.p("f")))?;
    check_eq!(s2.f_type, s.f_type, "f_type via a file");
    want_err("statfs missing", sys::statfs(&c.p("nope")), libc::ENOENT)?;
    Ok(())
}

fn read_write_lseek(c: &Ctx) -> Res {
    let fd = ok(
        "create",
        sys::open(&c.p("f"), libc::O_RDWR | libc::O_CREAT, 0o644),
    )?;
    check_eq!(ok("write", sys::write(&fd, b"hello world"))?, 11, "write count");
    check_eq!(
        ok("SEEK_CUR", sys::lseek(&fd, 0, libc::SEEK_CUR))?,
        11,
        "offset after write"
    );
    check_eq!(
        ok("SEEK_END", sys::lseek(&fd, -5, libc::SEEK_END))?,
        6,
        "SEEK_END -5"
    );
    let mut buf = [0u8; 32];
    let n = unsafe { libc::read(fd.0, buf.as_mut_ptr().cast(), buf.len()) };
    check_eq!(&buf[..n.max(0) as usize], b"world", "read after SEEK_END");
    check_eq!(
        unsafe { libc::read(fd.0, buf.as_mut_ptr().cast(), buf.len()) },
        0,
        "read at EOF"
    );
    want_err(
        "lseek negative",
        sys::lseek(&fd, -1, libc::SEEK_SET),
        libc::EINVAL,
    )?;
    want_err("lseek bad whence", sys::lseek(&fd, 0, 77), libc::EINVAL)?;
    // Seeking past EOF is allowed; the size changes only on write.
    check_eq!(
        ok("lseek past EOF", sys::lseek(&fd, 100, libc::SEEK_SET))?,
        100,
        "offset past EOF"
    );
    check_eq!(
        ok("fstat", sys::fstat(&fd))?.st_size,
        11,
        "size after seek past EOF"
    );
    ok("write past EOF", sys::write(&fd, b"!"))?;
    check_eq!(
        ok("fstat", sys::fstat(&fd))?.st_size,
        101,
        "size after write past EOF"
    );
    // pread/pwrite do not move the offset.
    ok("pwrite", sys::pwrite(&fd, b"H", 0))?;
    check_eq!(
        ok("SEEK_CUR", sys::lseek(&fd, 0, libc::SEEK_CUR))?,
        101,
        "offset after pwrite"
    );
    check_eq!(ok("pread", sys::pread(&fd, 5, 0))?, b"Hello".to_vec(), "pread");
    // Reads on a write-only fd and writes on a read-only fd: EBADF.
    let ro = ok("open O_RDONLY", sys::open(&c.p("f"), libc::O_RDONLY, 0))?;
    want_err("write on O_RDONLY fd", sys::write(&ro, b"x"), libc::EBADF)?;
    let wo = ok("open O_WRONLY", sys::open(&c.p("f"), libc::O_WRONLY, 0))?;
    want_err("read on O_WRONLY fd", sys::pread(&wo, 1, 0), libc::EBADF)?;
    // read(2) on a directory fd: EISDIR.
    ok("mkdir", sys::mkdir(&c.p("d"), 0o755))?;
    let d = ok("open dir", sys::open(&c.p("d"), libc::O_RDONLY, 0))?;
    want_err("read on a directory", sys::pread(&d, 1, 0), libc::EISDIR)?;
    Ok(())
}
