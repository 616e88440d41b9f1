//! Through the real mount: `tux3 mount` (daemon and foreground), the
//! `mount.tux3` helper, operations through std::fs and libc, unmount by
//! `umount` and by signals, then fsck and a remount to see the data.
//!
//! Needs root and /dev/fuse; without them every test prints a note and
//! passes. Every wait polls with a deadline, and a guard unmounts (lazily
//! as a last resort) so a failing test never leaves a mount behind.

use std::ffi::CString;
use std::fs;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const TUX3: &str = env!("CARGO_BIN_EXE_tux3");
const HELPER: &str = env!("CARGO_BIN_EXE_mount-tux3");
const DEADLINE: Duration = Duration::from_secs(30);

/// Root and /dev/fuse, or a note saying why the test does nothing.
fn can_mount() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root || !Path::new("/dev/fuse").exists() {
        eprintln!("note: skipping the mount test: it needs root and /dev/fuse");
        return false;
    }
    true
}

/// Poll `done` every 20 ms until it holds or the deadline passes.
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < DEADLINE, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether `mnt` (canonical) is listed in /proc/mounts.
fn is_mounted(mnt: &Path) -> bool {
    let mounts = fs::read_to_string("/proc/mounts").unwrap_or_default();
    let want = mnt.to_string_lossy();
    mounts.lines().any(|l| l.split(' ').nth(1) == Some(want.as_ref()))
}

/// Whether process `pid` is gone (or a zombie nobody reaped yet).
fn is_gone(pid: i32) -> bool {
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
fn server_pid(img: &Path, mnt: &Path) -> Option<i32> {
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
        let names = |p: &[u8]| args.iter().any(|a| *a == p || a.ends_with(p));
        if args
            .iter()
            .any(|a| a.ends_with(b"tux3") || a.ends_with(b"mount-tux3"))
            && names(img)
            && names(mnt)
            && !is_gone(pid)
        {
            return Some(pid);
        }
    }
    None
}

/// A temporary directory with an image and a mount point.
struct Fixture {
    _dir: tempfile::TempDir,
    img: PathBuf,
    mnt: PathBuf,
    log: PathBuf,
}

impl Fixture {
    /// A fresh 256 MiB volume.
    fn new() -> Fixture {
        let dir = tempfile::tempdir().expect("tempdir");
        let base = dir.path().canonicalize().expect("canonical tempdir");
        let img = base.join("img");
        let mnt = base.join("mnt");
        fs::create_dir(&mnt).expect("mkdir mnt");
        let st = Command::new(TUX3)
            .args(["mkfs", "--size", "256M"])
            .arg(&img)
            .stdout(Stdio::null())
            .status()
            .expect("run mkfs");
        assert!(st.success(), "mkfs failed");
        let log = base.join("server.log");
        Fixture {
            _dir: dir,
            img,
            mnt,
            log,
        }
    }

    /// Stderr of the commands and of the server (which keeps it open, so
    /// it must not be a pipe we wait on).
    fn log_file(&self) -> fs::File {
        fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("open log")
    }

    fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `tux3 mount [opts] IMG MNT` in daemon mode: live when it returns.
    fn mount(&self, opts: &[&str]) -> Mounted<'_> {
        let st = Command::new(TUX3)
            .arg("mount")
            .args(opts)
            .arg(&self.img)
            .arg(&self.mnt)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(self.log_file())
            .status()
            .expect("run tux3 mount");
        assert!(st.success(), "tux3 mount failed: {}", self.log_text());
        self.mounted()
    }

    /// The guard of a live mount.
    fn mounted(&self) -> Mounted<'_> {
        assert!(is_mounted(&self.mnt), "not mounted after mount returned");
        let pid = server_pid(&self.img, &self.mnt).expect("the mount server is running");
        Mounted { fx: self, pid }
    }

    /// `tux3 fsck IMG` is clean.
    fn fsck(&self) {
        let out = Command::new(TUX3)
            .arg("fsck")
            .arg(&self.img)
            .output()
            .expect("run fsck");
        assert!(
            out.status.success(),
            "fsck: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }
}

/// A live mount; dropping it unmounts (lazily if it must).
struct Mounted<'a> {
    fx: &'a Fixture,
    pid: i32,
}

impl Mounted<'_> {
    /// `umount MNT`, then wait until the server has closed the volume and
    /// exited.
    fn unmount(self) {
        let st = Command::new("umount")
            .arg(&self.fx.mnt)
            .status()
            .expect("run umount");
        assert!(st.success(), "umount failed");
        self.wait_gone();
    }

    /// Send `sig` to the server; it must unmount and exit.
    fn signal(self, sig: libc::c_int) {
        // SAFETY: signalling our own server process.
        assert_eq!(unsafe { libc::kill(self.pid, sig) }, 0);
        self.wait_gone();
    }

    fn wait_gone(&self) {
        wait_until("the mount to go away", || !is_mounted(&self.fx.mnt));
        wait_until("the server to exit", || is_gone(self.pid));
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
    }
}

fn cstr(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).expect("no NUL in path")
}

fn set_xattr(p: &Path, name: &str, value: &[u8]) -> i32 {
    let (p, n) = (cstr(p), CString::new(name).expect("name"));
    // SAFETY: valid C strings and buffer.
    unsafe { libc::setxattr(p.as_ptr(), n.as_ptr(), value.as_ptr().cast(), value.len(), 0) }
}

fn get_xattr(p: &Path, name: &str) -> Option<Vec<u8>> {
    let (p, n) = (cstr(p), CString::new(name).expect("name"));
    let mut buf = vec![0u8; 256];
    // SAFETY: valid C strings and buffer of the given length.
    let r = unsafe { libc::getxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    (r >= 0).then(|| buf[..r as usize].to_vec())
}

fn list_xattr(p: &Path) -> Vec<u8> {
    let p = cstr(p);
    let mut buf = vec![0u8; 1024];
    // SAFETY: valid C string and buffer of the given length.
    let r = unsafe { libc::listxattr(p.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    assert!(r >= 0, "listxattr failed");
    buf.truncate(r as usize);
    buf
}

/// Bytes that differ from block to block and from run to run of a pattern.
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i / 7) as u8 ^ (i >> 12) as u8 ^ seed).collect()
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .expect("readdir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// What `populate` leaves, checked after a remount.
fn check_populated(fx: &Fixture) {
    assert_eq!(names(&fx.mnt), ["big", "dir", "link", "many", "renamed"]);
    assert_eq!(
        fs::read(fx.path("renamed")).expect("read renamed"),
        b"hello, tux3\n"
    );
    assert_eq!(fs::read(fx.path("big")).expect("read big"), pattern(3 << 20, 5));
    assert_eq!(
        fs::read_link(fx.path("link")).expect("readlink"),
        Path::new("renamed")
    );
    assert_eq!(
        fs::read(fx.path("link")).expect("read via link"),
        b"hello, tux3\n"
    );
    assert_eq!(
        get_xattr(&fx.path("renamed"), "user.colour").as_deref(),
        Some(&b"blue"[..])
    );
    assert_eq!(list_xattr(&fx.path("renamed")), b"user.colour\0");
    let meta = fs::metadata(fx.path("dir/sub")).expect("stat dir/sub");
    assert!(meta.is_dir());
    assert_eq!(meta.permissions().mode() & 0o7777, 0o750);
    assert_eq!(fs::metadata(fx.path("dir/hard")).expect("stat hard").nlink(), 2);
    assert_eq!(names(&fx.path("many")).len(), 300);
    assert_eq!(fs::read(fx.path("many/f0123")).expect("read f0123"), b"123");
}

/// Create, write, rename, link, symlink, xattrs, mkdir, readdir.
fn populate(fx: &Fixture) {
    fs::write(fx.path("hello"), b"hello, tux3\n").expect("write hello");
    assert_eq!(fs::read(fx.path("hello")).expect("read hello"), b"hello, tux3\n");
    fs::rename(fx.path("hello"), fx.path("renamed")).expect("rename");
    assert!(!fx.path("hello").exists());
    std::os::unix::fs::symlink("renamed", fx.path("link")).expect("symlink");
    assert_eq!(set_xattr(&fx.path("renamed"), "user.colour", b"blue"), 0);
    assert_eq!(get_xattr(&fx.path("renamed"), "user.missing"), None);

    let mut f = fs::File::create(fx.path("big")).expect("create big");
    f.write_all(&pattern(3 << 20, 5)).expect("write big");
    f.sync_all().expect("fsync big");
    drop(f);

    fs::create_dir_all(fx.path("dir/sub")).expect("mkdir");
    fs::set_permissions(fx.path("dir/sub"), fs::Permissions::from_mode(0o750)).expect("chmod");
    fs::write(fx.path("dir/file"), b"x").expect("write dir/file");
    fs::hard_link(fx.path("dir/file"), fx.path("dir/hard")).expect("link");
    fs::create_dir(fx.path("gone")).expect("mkdir gone");
    fs::remove_dir(fx.path("gone")).expect("rmdir");

    fs::create_dir(fx.path("many")).expect("mkdir many");
    for i in 0..300 {
        fs::write(fx.path(&format!("many/f{i:04}")), i.to_string()).expect("write many");
    }
    let mut buf = String::new();
    fs::File::open(fx.path("many/f0299"))
        .expect("open f0299")
        .read_to_string(&mut buf)
        .expect("read f0299");
    assert_eq!(buf, "299");
    check_populated(fx);
}

#[test]
fn mount_operate_umount_remount() {
    if !can_mount() {
        return;
    }
    let fx = Fixture::new();
    let m = fx.mount(&[]);
    populate(&fx);
    m.unmount();
    fx.fsck();

    let m = fx.mount(&["-o", "ro"]);
    check_populated(&fx);
    let err = fs::write(fx.path("new"), b"no").expect_err("write on a read-only mount");
    assert_eq!(err.raw_os_error(), Some(libc::EROFS));
    m.unmount();
    fx.fsck();
}

#[test]
fn sigterm_unmounts_and_commits() {
    if !can_mount() {
        return;
    }
    let fx = Fixture::new();
    // No periodic commit: only the close at SIGTERM can make the file durable.
    let m = fx.mount(&["-o", "commit=0"]);
    fs::write(fx.path("before-term"), pattern(100_000, 9)).expect("write");
    m.signal(libc::SIGTERM);
    fx.fsck();
    let m = fx.mount(&[]);
    assert_eq!(
        fs::read(fx.path("before-term")).expect("read back"),
        pattern(100_000, 9)
    );
    m.unmount();
}

#[test]
fn foreground_ends_on_sigint() {
    if !can_mount() {
        return;
    }
    let fx = Fixture::new();
    let mut child: Child = Command::new(TUX3)
        .args(["mount", "-f", "-o", "commit=0"])
        .arg(&fx.img)
        .arg(&fx.mnt)
        .stdin(Stdio::null())
        .stderr(fx.log_file())
        .spawn()
        .expect("spawn tux3 mount -f");
    wait_until("the foreground mount", || {
        is_mounted(&fx.mnt) || child.try_wait().ok().flatten().is_some()
    });
    let m = fx.mounted();
    assert_eq!(m.pid, child.id() as i32);
    fs::write(fx.path("fg"), b"foreground").expect("write");
    // SAFETY: signalling our own child.
    assert_eq!(unsafe { libc::kill(m.pid, libc::SIGINT) }, 0);
    wait_until("the foreground server to exit", || {
        child.try_wait().ok().flatten().is_some()
    });
    let status = child.wait().expect("wait");
    assert!(status.success(), "exit status {status}: {}", fx.log_text());
    assert!(!is_mounted(&fx.mnt));
    drop(m);
    fx.fsck();
    let m = fx.mount(&[]);
    assert_eq!(fs::read(fx.path("fg")).expect("read back"), b"foreground");
    m.unmount();
}

#[test]
fn helper_mounts_like_mount8() {
    if !can_mount() {
        return;
    }
    let fx = Fixture::new();
    // As mount(8) runs it: SPEC DIR, then flags and options.
    let st = Command::new(HELPER)
        .arg(&fx.img)
        .arg(&fx.mnt)
        .args(["-n", "-o", "rw,relatime,noexec,x-systemd.automount"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(fx.log_file())
        .status()
        .expect("run mount.tux3");
    assert!(st.success(), "mount.tux3 failed: {}", fx.log_text());
    let m = fx.mounted();
    fs::write(fx.path("via-helper"), b"ok").expect("write");
    m.unmount();
    fx.fsck();
}

#[test]
fn missing_image_is_a_one_line_error() {
    if !can_mount() {
        return;
    }
    let fx = Fixture::new();
    let missing = fx.img.with_file_name("no-such-image");
    let st = Command::new(TUX3)
        .arg("mount")
        .arg(&missing)
        .arg(&fx.mnt)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(fx.log_file())
        .status()
        .expect("run tux3 mount");
    assert_eq!(st.code(), Some(1));
    let log = fx.log_text();
    assert_eq!(log.lines().count(), 1, "{log}");
    assert!(log.contains("no-such-image"), "{log}");
    assert!(!is_mounted(&fx.mnt));

    // An unknown option is refused before anything is mounted.
    let st = Command::new(TUX3)
        .args(["mount", "-o", "bogus"])
        .arg(&fx.img)
        .arg(&fx.mnt)
        .stderr(Stdio::null())
        .status()
        .expect("run tux3 mount");
    assert_eq!(st.code(), Some(1));
    assert!(!is_mounted(&fx.mnt));
}
