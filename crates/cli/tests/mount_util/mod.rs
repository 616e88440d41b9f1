//! Helpers shared by the tests/mount_*.rs tests that go through a real FUSE
//! mount: skip without root or /dev/fuse (fail instead when
//! TUX3_REQUIRE_MOUNT=1, as CI sets it), poll with deadlines (never sleep
//! as synchronisation), and a guard that unmounts (lazily as a last resort)
//! on every path. The commands' stderr goes to a file, and so do the
//! messages of a server mounted through [`Fixture::mount`] (`-o log=`).
#![allow(dead_code)]

use std::ffi::CString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

pub const TUX3: &str = env!("CARGO_BIN_EXE_tux3");
pub const DEADLINE: Duration = Duration::from_secs(60);

/// A test that cannot run here: a note, and false to skip it — or a
/// failure when TUX3_REQUIRE_MOUNT=1 says the machine must run it.
pub fn skip(why: &str) -> bool {
    assert!(
        std::env::var("TUX3_REQUIRE_MOUNT").as_deref() != Ok("1"),
        "TUX3_REQUIRE_MOUNT=1 but the mount test cannot run: {why}"
    );
    eprintln!("note: skipping the mount test: {why}");
    false
}

/// Root and /dev/fuse, or a note saying why the test does nothing.
pub fn can_mount() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root || !Path::new("/dev/fuse").exists() {
        return skip("it needs root and /dev/fuse");
    }
    true
}

/// Poll `done` every 20 ms until it holds or the deadline passes.
pub fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < DEADLINE, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether `mnt` (canonical) is listed in /proc/mounts.
pub fn is_mounted(mnt: &Path) -> bool {
    let mounts = fs::read_to_string("/proc/mounts").unwrap_or_default();
    let want = mnt.to_string_lossy();
    mounts.lines().any(|l| l.split(' ').nth(1) == Some(want.as_ref()))
}

/// Whether process `pid` is gone (or a zombie nobody reaped yet).
pub fn is_gone(pid: i32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .map(|r| r.trim_start().starts_with('Z'))
            .unwrap_or(true),
    }
}

/// The mount server of `img` on `mnt`: the process whose command line names
/// both (the paths are unique to one test).
pub fn server_pid(img: &Path, mnt: &Path) -> Option<i32> {
    let img = img.as_os_str().as_bytes();
    let mnt = mnt.as_os_str().as_bytes();
    for e in fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(cmd) = fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = cmd.split(|&b| b == 0).collect();
        let names = |p: &[u8]| args.contains(&p);
        if args.first().is_some_and(|a| a.ends_with(b"tux3")) && names(img) && names(mnt) && !is_gone(pid) {
            return Some(pid);
        }
    }
    None
}

/// A temporary directory with an image and a mount point.
pub struct Fixture {
    pub dir: tempfile::TempDir,
    pub img: PathBuf,
    pub mnt: PathBuf,
    pub log: PathBuf,
}

impl Fixture {
    /// A fresh sparse volume of `size` (`256M`, `32M`, ...).
    pub fn new(size: &str) -> Fixture {
        let dir = tempfile::tempdir().expect("tempdir");
        let base = dir.path().canonicalize().expect("canonical tempdir");
        let img = base.join("img");
        let mnt = base.join("mnt");
        fs::create_dir(&mnt).expect("mkdir mnt");
        let st = Command::new(TUX3)
            .args(["mkfs", "--size", size])
            .arg(&img)
            .stdout(Stdio::null())
            .status()
            .expect("run mkfs");
        assert!(st.success(), "mkfs failed");
        let log = base.join("server.log");
        Fixture { dir, img, mnt, log }
    }

    /// Stderr of the commands, of a foreground server, and the log of a
    /// background one (`-o log=`).
    pub fn log_file(&self) -> fs::File {
        fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("open log")
    }

    pub fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `tux3 mount [opts] IMG MNT` in daemon mode: live when it returns.
    pub fn mount(&self, opts: &[&str]) -> Mounted<'_> {
        self.mount_from(&self.img, opts)
    }

    /// `tux3 mount [opts] SOURCE MNT` in daemon mode, SOURCE being the
    /// image or a block device holding it, its messages in the log file:
    /// live when it returns.
    pub fn mount_from(&self, source: &Path, opts: &[&str]) -> Mounted<'_> {
        let log = format!("log={}", self.log.display());
        let st = Command::new(TUX3)
            .arg("mount")
            .args(["-o", &log])
            .args(opts)
            .arg(source)
            .arg(&self.mnt)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(self.log_file())
            .status()
            .expect("run tux3 mount");
        assert!(
            st.success(),
            "tux3 mount {} failed: {}",
            source.display(),
            self.log_text()
        );
        assert!(is_mounted(&self.mnt), "not mounted after mount returned");
        let pid = server_pid(source, &self.mnt).expect("the mount server is running");
        Mounted {
            fx: self,
            pid,
            child: None,
        }
    }

    /// The guard of a live mount started elsewhere (daemon mode, or mount(8)
    /// through the helper).
    pub fn mounted(&self) -> Mounted<'_> {
        assert!(is_mounted(&self.mnt), "not mounted after mount returned");
        let pid = server_pid(&self.img, &self.mnt).expect("the mount server is running");
        Mounted {
            fx: self,
            pid,
            child: None,
        }
    }

    /// `tux3 mount -f [opts] IMG MNT` as our child; returns once live.
    pub fn mount_foreground(&self, opts: &[&str]) -> Mounted<'_> {
        let mut child: Child = Command::new(TUX3)
            .args(["mount", "-f"])
            .args(opts)
            .arg(&self.img)
            .arg(&self.mnt)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(self.log_file())
            .spawn()
            .expect("spawn tux3 mount -f");
        let mut exited = None;
        wait_until("the foreground mount", || {
            if let Ok(Some(st)) = child.try_wait() {
                exited = Some(st);
                return true;
            }
            is_mounted(&self.mnt)
        });
        assert!(
            exited.is_none(),
            "tux3 mount -f exited with {exited:?}: {}",
            self.log_text()
        );
        let pid = child.id() as i32;
        Mounted {
            fx: self,
            pid,
            child: Some(child),
        }
    }

    /// The exit code of `tux3 fsck IMG` and its output.
    pub fn fsck_code(&self) -> (Option<i32>, String) {
        let out = Command::new(TUX3)
            .arg("fsck")
            .arg(&self.img)
            .output()
            .expect("run fsck");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.code(), text)
    }

    /// `tux3 fsck IMG` is clean (exit 0).
    pub fn fsck(&self) {
        let (code, text) = self.fsck_code();
        assert_eq!(code, Some(0), "fsck: {text}");
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }
}

/// A live mount; dropping it unmounts (lazily if it must) and reaps a
/// foreground server.
pub struct Mounted<'a> {
    pub fx: &'a Fixture,
    pub pid: i32,
    pub child: Option<Child>,
}

impl Mounted<'_> {
    /// `umount MNT`, then wait until the server has closed the volume and
    /// exited.
    /// `umount`, tried again while it fails with the mount still busy
    /// (up to the deadline): a descriptor another thread of the test
    /// process had open on the mount may be closed a moment later (a
    /// child forked for another test holds it until its exec). What held
    /// it is printed if it never lets go.
    pub fn unmount(mut self) {
        let start = Instant::now();
        loop {
            let out = Command::new("umount")
                .arg(&self.fx.mnt)
                .output()
                .expect("run umount");
            if out.status.success() {
                break;
            }
            let err = String::from_utf8_lossy(&out.stderr);
            if !err.contains("busy") || start.elapsed() > DEADLINE {
                let holders = Command::new("fuser").arg("-vm").arg(&self.fx.mnt).output();
                let holders = holders.map(|o| String::from_utf8_lossy(&o.stderr).into_owned());
                panic!("umount failed: {err}; held by: {holders:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.wait_gone();
    }

    /// Send `sig` to the server; it must unmount and exit.
    pub fn signal(mut self, sig: libc::c_int) {
        // SAFETY: signalling our own server process.
        assert_eq!(unsafe { libc::kill(self.pid, sig) }, 0);
        self.wait_gone();
    }

    /// SIGKILL the server (no unmount, no commit), detach the dead mount
    /// (`umount -l`: the kernel aborts the connection when the server's
    /// /dev/fuse descriptors close) and wait until it is gone.
    pub fn kill9(mut self) {
        // SAFETY: signalling our own server process.
        assert_eq!(unsafe { libc::kill(self.pid, libc::SIGKILL) }, 0);
        wait_until("the killed server to die", || {
            self.reap();
            is_gone(self.pid)
        });
        let st = Command::new("umount")
            .arg("-l")
            .arg(&self.fx.mnt)
            .status()
            .expect("run umount -l");
        assert!(st.success(), "umount -l failed");
        wait_until("the dead mount to go away", || !is_mounted(&self.fx.mnt));
    }

    fn reap(&mut self) {
        if let Some(child) = self.child.as_mut() {
            if let Ok(Some(_)) = child.try_wait() {
                self.child = None;
            }
        }
    }

    fn wait_gone(&mut self) {
        wait_until("the mount to go away", || !is_mounted(&self.fx.mnt));
        let pid = self.pid;
        wait_until("the server to exit", || {
            self.reap();
            is_gone(pid)
        });
        if let Some(mut child) = self.child.take() {
            let _ = child.wait();
        }
    }
}

impl Drop for Mounted<'_> {
    fn drop(&mut self) {
        let mnt = &self.fx.mnt;
        if is_mounted(mnt) {
            let _ = Command::new("umount").arg(mnt).stderr(Stdio::null()).status();
        }
        if is_mounted(mnt) {
            let _ = Command::new("umount").arg("-l").arg(mnt).status();
        }
        // Give the server until the deadline to close the volume (and let
        // go of the image's lock), then kill it.
        let start = Instant::now();
        while start.elapsed() < DEADLINE {
            self.reap();
            if self.child.is_none() && is_gone(self.pid) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        } else if self.pid > 0 {
            // SAFETY: signalling our own server process.
            unsafe { libc::kill(self.pid, libc::SIGKILL) };
        }
    }
}

pub fn cstr(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).expect("no NUL in path")
}

/// The errno of the last failed libc call.
pub fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// A small deterministic generator (xorshift64*), seeded per worker.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next() as u8).collect()
    }
}

// FUSE over io_uring: the kernel parameter that allows it, switched for
// one test at a time.

pub const ENABLE: &str = "/sys/module/fuse/parameters/enable_uring";

/// Tests that change the kernel parameter take turns (cargo runs test
/// binaries one after another).
pub static PARAM: Mutex<()> = Mutex::new(());

/// Sets `enable_uring` and puts the old value back when dropped.
pub struct Param(String);

impl Param {
    pub fn set(on: bool) -> Param {
        let old = fs::read_to_string(ENABLE).expect("read enable_uring");
        fs::write(ENABLE, if on { "Y" } else { "N" }).expect("write enable_uring");
        Param(old.trim().to_string())
    }
}

impl Drop for Param {
    fn drop(&mut self) {
        let _ = fs::write(ENABLE, &self.0);
    }
}

/// The parameter set to `on` for one test (tests take turns), or `None`
/// where the tests cannot run. Dropped, it puts the old value back before
/// the next test's turn (tuple fields drop in order).
pub fn uring_switch(on: bool) -> Option<(Param, MutexGuard<'static, ()>)> {
    if !can_use_uring() {
        return None;
    }
    let one = PARAM.lock().unwrap_or_else(|e| e.into_inner());
    let old = fs::read_to_string(ENABLE).expect("read enable_uring");
    if let Err(e) = fs::write(ENABLE, if on { "Y" } else { "N" }) {
        skip(&format!("enable_uring cannot be set: {e}"));
        return None;
    }
    Some((Param(old.trim().to_string()), one))
}

pub fn can_use_uring() -> bool {
    if !can_mount() {
        return false;
    }
    if !Path::new(ENABLE).exists() {
        return skip("the kernel has no FUSE over io_uring");
    }
    true
}

/// The other user of the permission tests.
pub const NOBODY: u32 = 65534;

/// `sh -c script`, as root or (`nobody`) as uid/gid [`NOBODY`]: whether it
/// succeeded, and its output and errors.
pub fn sh(script: &str, nobody: bool) -> (bool, String) {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new("sh");
    cmd.args(["-c", script]).current_dir("/").stdin(Stdio::null());
    if nobody {
        cmd.uid(NOBODY).gid(NOBODY);
    }
    let out = cmd.output().expect("run sh");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Free 4 KiB blocks of the volume mounted at `mnt`, once everything
/// written so far is committed (`tux3 sync`): blocks freed in a delta are
/// counted free only after it commits.
pub fn free_blocks(mnt: &Path) -> u64 {
    let st = Command::new(TUX3)
        .arg("sync")
        .arg(mnt)
        .status()
        .expect("run tux3 sync");
    assert!(st.success(), "tux3 sync {}", mnt.display());
    // SAFETY: plain data, filled by statvfs.
    let mut sv: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: valid C string and out pointer.
    assert_eq!(unsafe { libc::statvfs(cstr(mnt).as_ptr(), &mut sv) }, 0);
    sv.f_bfree * sv.f_frsize / 4096
}

/// On-CPU time (ns) of the server's threads whose name starts with
/// `prefix` (`/proc/PID/task/*/schedstat`).
pub fn cpu_ns(pid: i32, prefix: &str) -> u64 {
    let mut total = 0;
    for t in fs::read_dir(format!("/proc/{pid}/task")).unwrap().flatten() {
        let comm = fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if comm.starts_with(prefix) {
            let stat = fs::read_to_string(t.path().join("schedstat")).unwrap_or_default();
            total += stat
                .split(' ')
                .next()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    total
}

/// The names in directory `dir`, sorted.
pub fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .expect("readdir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// `r` must be the error `errno`.
pub fn want_errno<T: std::fmt::Debug>(what: &str, r: std::io::Result<T>, errno: i32) {
    match r {
        Err(e) if e.raw_os_error() == Some(errno) => {}
        other => panic!("{what}: expected errno {errno}, got {other:?}"),
    }
}
