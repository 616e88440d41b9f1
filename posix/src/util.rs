//! Shared case machinery: the per-case context, failure/skip results,
//! assertion macros, file helpers, timestamp helpers, and running a closure
//! in a forked child under another uid/gid.

use std::io::Read;
use std::os::unix::io::FromRawFd;
use std::path::{Path, PathBuf};

use libc::{c_int, gid_t, mode_t, uid_t};

use crate::sys::{self, Errno, SysR};

/// Why a case did not pass.
#[derive(Debug)]
pub enum Fail {
    Fail(String),
    Skip(String),
}

impl From<String> for Fail {
    fn from(s: String) -> Fail {
        Fail::Fail(s)
    }
}

pub type Res = Result<(), Fail>;

/// A case: a name (`topic/what`) and its function.
pub struct Case {
    pub name: &'static str,
    pub run: fn(&Ctx) -> Res,
}

impl Case {
    pub const fn new(name: &'static str, run: fn(&Ctx) -> Res) -> Case {
        Case { name, run }
    }
}

/// What a case gets: a fresh empty directory of its own and the options.
pub struct Ctx {
    pub dir: PathBuf,
    pub skip_perm: bool,
}

impl Ctx {
    /// A path inside the case directory.
    pub fn p(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Permission cases run only as root and without --skip-perm.
    pub fn need_perm(&self) -> Res {
        if self.skip_perm {
            return Err(Fail::Skip("--skip-perm".into()));
        }
        need_root()
    }
}

pub fn need_root() -> Res {
    if !sys::is_root() {
        return Err(Fail::Skip("needs root".into()));
    }
    Ok(())
}

/// `check!(cond, "fmt", args...)`: fail the case with the message unless cond.
#[macro_export]
macro_rules! check {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err($crate::util::Fail::Fail(format!($($fmt)+)));
        }
    };
}

/// `check_eq!(got, want, "what")`: fail with both values unless equal.
#[macro_export]
macro_rules! check_eq {
    ($got:expr, $want:expr, $what:expr) => {{
        let (g, w) = (&$got, &$want);
        if g != w {
            return Err($crate::util::Fail::Fail(format!(
                "{}: got {:?}, want {:?}",
                $what, g, w
            )));
        }
    }};
}

/// The call must succeed; otherwise fail naming the call and its errno.
pub fn ok<T>(what: &str, r: SysR<T>) -> Result<T, Fail> {
    r.map_err(|e| Fail::Fail(format!("{what}: unexpected {e}")))
}

/// The call must fail with exactly `want`.
pub fn want_err<T>(what: &str, r: SysR<T>, want: c_int) -> Res {
    match r {
        Ok(_) => Err(Fail::Fail(format!("{what}: succeeded, want {}", Errno(want)))),
        Err(e) if e.0 == want => Ok(()),
        Err(e) => Err(Fail::Fail(format!("{what}: got {e}, want {}", Errno(want)))),
    }
}

/// Create (or truncate) a file with the given content and mode 0644.
pub fn put(p: &Path, data: &[u8]) -> Res {
    let fd = ok(
        &format!("create {}", p.display()),
        sys::open(p, libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC, 0o644),
    )?;
    let n = ok("write", sys::write(&fd, data))?;
    check_eq!(n, data.len(), "short write");
    Ok(())
}

/// The whole content of a file.
pub fn get(p: &Path) -> Result<Vec<u8>, Fail> {
    let fd = ok(&format!("open {}", p.display()), sys::open(p, libc::O_RDONLY, 0))?;
    let mut f = unsafe { std::fs::File::from_raw_fd(libc::dup(fd.0)) };
    let mut v = Vec::new();
    f.read_to_end(&mut v)
        .map_err(|e| Fail::Fail(format!("read {}: {e}", p.display())))?;
    Ok(v)
}

pub fn file_type(st: &libc::stat) -> mode_t {
    st.st_mode & libc::S_IFMT
}

pub fn type_name(m: mode_t) -> &'static str {
    match m & libc::S_IFMT {
        libc::S_IFREG => "regular",
        libc::S_IFDIR => "directory",
        libc::S_IFLNK => "symlink",
        libc::S_IFIFO => "fifo",
        libc::S_IFCHR => "char device",
        libc::S_IFBLK => "block device",
        libc::S_IFSOCK => "socket",
        _ => "unknown",
    }
}

/// Fail unless `st` is of type `want` (an S_IF* value).
pub fn check_type(what: &str, st: &libc::stat, want: mode_t) -> Res {
    let got = file_type(st);
    check!(
        got == want,
        "{what}: type {}, want {}",
        type_name(got),
        type_name(want)
    );
    Ok(())
}

/// A point in time as (seconds, nanoseconds), comparable.
pub type Time = (i64, i64);

// st_*time fields are i64 on 64-bit targets but not on all.
#[allow(clippy::unnecessary_cast)]
pub fn atime(st: &libc::stat) -> Time {
    (st.st_atime as i64, st.st_atime_nsec as i64)
}
#[allow(clippy::unnecessary_cast)]
pub fn mtime(st: &libc::stat) -> Time {
    (st.st_mtime as i64, st.st_mtime_nsec as i64)
}
#[allow(clippy::unnecessary_cast)]
pub fn ctime(st: &libc::stat) -> Time {
    (st.st_ctime as i64, st.st_ctime_nsec as i64)
}

/// The fixed old time that cases set atime/mtime to before an operation.
pub const OLD: Time = (1_000_000_000, 0);

/// Set atime and mtime of `p` to OLD.
pub fn set_old(p: &Path) -> Res {
    let t = sys::ts(OLD.0, OLD.1);
    ok(&format!("utimensat {}", p.display()), sys::utimens(p, t, t))
}

/// ctime cannot be set, so a case that must see ctime move waits (spinning,
/// not sleeping a guessed duration) until the coarse realtime clock -- the
/// clock filesystems stamp times from, or a coarser one -- has reached the
/// current ctime of every path given plus one unit of the timestamp
/// granularity (guessed from the trailing decimal zeros of the nanoseconds:
/// a filesystem that keeps whole seconds always reports 0). Any later change
/// then stamps a strictly newer ctime. Bounded to 5 seconds.
pub fn tick_past(paths: &[&Path]) -> Res {
    let mut target: Time = (0, 0);
    for p in paths {
        let st = ok(&format!("lstat {}", p.display()), sys::lstat(p))?;
        let (sec, nsec) = ctime(&st);
        let mut unit = 1;
        while unit < 1_000_000_000 && nsec % (unit * 10) == 0 {
            unit *= 10;
        }
        let next = nsec + unit;
        target = target.max((sec + next / 1_000_000_000, next % 1_000_000_000));
    }
    let start = now();
    loop {
        let t = now();
        if t >= target {
            return Ok(());
        }
        check!(t.0 - start.0 < 5, "clock never reached {target:?} (now {t:?})");
        unsafe { libc::sched_yield() };
    }
}

fn now() -> Time {
    let mut t = sys::ts(0, 0);
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut t) };
    #[allow(clippy::unnecessary_cast)]
    (t.tv_sec as i64, t.tv_nsec as i64)
}

/// Run `f` in a forked child with the given credentials (supplementary
/// groups, then gid, then uid). The child reports a failure message through
/// a pipe and its exit status; the parent waits for it. No sleeps.
pub fn as_user<F>(uid: uid_t, gid: gid_t, groups: &[gid_t], f: F) -> Res
where
    F: FnOnce() -> Res,
{
    use std::io::Write;
    std::io::stdout().flush().ok();
    std::io::stderr().flush().ok();
    let mut fds = [0 as c_int; 2];
    check!(
        unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } == 0,
        "pipe2: {}",
        Errno::last()
    );
    let (rd, wr) = (fds[0], fds[1]);
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        let e = Errno::last();
        unsafe {
            libc::close(rd);
            libc::close(wr);
        }
        return Err(Fail::Fail(format!("fork: {e}")));
    }
    if pid == 0 {
        unsafe { libc::close(rd) };
        let msg = child_body(uid, gid, groups, f);
        let code = match &msg {
            None => 0,
            Some(m) => {
                let b = m.as_bytes();
                unsafe { libc::write(wr, b.as_ptr().cast(), b.len()) };
                1
            }
        };
        unsafe { libc::_exit(code) };
    }
    unsafe { libc::close(wr) };
    let mut r = unsafe { std::fs::File::from_raw_fd(rd) };
    let mut msg = String::new();
    let _ = r.read_to_string(&mut msg);
    let mut status: c_int = 0;
    loop {
        let w = unsafe { libc::waitpid(pid, &mut status, 0) };
        if w == pid {
            break;
        }
        let e = Errno::last();
        check!(e.0 == libc::EINTR, "waitpid: {e}");
    }
    let clean = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    if clean && msg.is_empty() {
        return Ok(());
    }
    if msg.is_empty() {
        msg = format!("child exited abnormally (status {status:#x})");
    }
    if let Some(skip) = msg.strip_prefix("SKIP:") {
        return Err(Fail::Skip(skip.to_string()));
    }
    Err(Fail::Fail(format!("as uid {uid}: {msg}")))
}

fn child_body<F: FnOnce() -> Res>(uid: uid_t, gid: gid_t, groups: &[gid_t], f: F) -> Option<String> {
    unsafe {
        if libc::setgroups(groups.len(), groups.as_ptr()) != 0 {
            return Some(format!("setgroups: {}", Errno::last()));
        }
        if libc::setgid(gid) != 0 {
            return Some(format!("setgid({gid}): {}", Errno::last()));
        }
        if libc::setuid(uid) != 0 {
            return Some(format!("setuid({uid}): {}", Errno::last()));
        }
        if libc::geteuid() != uid || libc::getegid() != gid {
            return Some("credentials did not change".into());
        }
    }
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(Ok(())) => None,
        Ok(Err(Fail::Fail(m))) => Some(m),
        Ok(Err(Fail::Skip(m))) => Some(format!("SKIP:{m}")),
        Err(_) => Some("panicked".into()),
    }
}
