//! What the in-process mount tests share: whether this machine can run
//! them (root, /dev/fuse, FUSE over io_uring), the kernel's `enable_uring`
//! parameter on for a test and restored after it, a mount point, the wait
//! for the rings to take requests, a guard that detaches a mount a
//! failing test left behind, and a mount of a fresh in-memory volume for
//! the length of a closure.

#![allow(dead_code)] // each test binary uses its own part

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};
use tux3::device::MemDevice;
use tux3::types::{FormatOptions, OpenOptions};
use tux3::Fs;
use tux3_fuse::FuseOptions;

const ENABLE: &str = "/sys/module/fuse/parameters/enable_uring";
pub const DEADLINE: Duration = Duration::from_secs(60);

/// A note saying why the test does nothing, or a failure when
/// TUX3_REQUIRE_MOUNT=1 says the machine must run it.
pub fn skip(why: &str) {
    assert!(
        std::env::var("TUX3_REQUIRE_MOUNT").as_deref() != Ok("1"),
        "TUX3_REQUIRE_MOUNT=1 but the mount test cannot run: {why}"
    );
    eprintln!("note: skipping the mount test: {why}");
}

/// Whether this machine can run the test.
pub fn can_run() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let why = if !root || !Path::new("/dev/fuse").exists() {
        "it needs root and /dev/fuse"
    } else if !Path::new(ENABLE).exists() {
        "the kernel has no FUSE over io_uring"
    } else {
        return true;
    };
    skip(why);
    false
}

/// `enable_uring` on for the test, the old value back when dropped.
pub struct Param(String);

impl Param {
    /// `None` (after [`skip`]) if the parameter cannot be set.
    pub fn on() -> Option<Param> {
        let old = fs::read_to_string(ENABLE).expect("read enable_uring");
        if let Err(e) = fs::write(ENABLE, "Y") {
            skip(&format!("FUSE over io_uring cannot be enabled: {e}"));
            return None;
        }
        Some(Param(old.trim().to_string()))
    }
}

impl Drop for Param {
    fn drop(&mut self) {
        let _ = fs::write(ENABLE, &self.0);
    }
}

pub fn is_mounted(mnt: &Path) -> bool {
    let mounts = fs::read_to_string("/proc/mounts").unwrap_or_default();
    let want = mnt.to_string_lossy();
    mounts.lines().any(|l| l.split(' ').nth(1) == Some(want.as_ref()))
}

/// Detaches the mount if the test fails with it still there.
pub struct Unmount(pub PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        if is_mounted(&self.0) {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
}

/// What a mount test starts from: `enable_uring` on (restored when the
/// first part drops) and an empty mount point in a fresh directory (gone
/// when the second drops). `None` (after a note) if the machine cannot run
/// it.
pub fn prepare() -> Option<(Param, tempfile::TempDir, PathBuf)> {
    if !can_run() {
        return None;
    }
    let param = Param::on()?;
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().canonicalize().unwrap().join("mnt");
    fs::create_dir(&mnt).unwrap();
    Some((param, dir, mnt))
}

/// Until the kernel has every queue's entries it sends through /dev/fuse:
/// look up fresh names at `mnt` until one comes through a ring.
pub fn wait_for_rings(mnt: &Path) {
    let before = tux3_fuse::test_hooks::ring_requests();
    let mut probe = 0;
    wait_until("a request through the rings", || {
        probe += 1;
        let _ = fs::metadata(mnt.join(format!("probe{probe}")));
        tux3_fuse::test_hooks::ring_requests() > before
    });
}

pub fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < DEADLINE, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(20));
    }
}

/// Mount a fresh in-memory volume at `mnt` with `opts`, run `body`, unmount.
pub fn with_mount(mnt: &Path, opts: &FuseOptions, body: impl FnOnce()) {
    let dev = Arc::new(MemDevice::new(4096, 16384));
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    let open = OpenOptions {
        commit_interval: None,
        ..OpenOptions::default()
    };
    let fs = Fs::open(dev, open).unwrap();
    let _unmount = Unmount(mnt.to_path_buf());
    let mounted = tux3_fuse::mount(fs, mnt, opts).expect("mount -o uring");
    let (done_tx, done_rx) = mpsc::channel();
    let server = thread::spawn(move || {
        let _ = done_tx.send(mounted.serve());
    });
    wait_for_rings(mnt);
    body();
    assert!(std::process::Command::new("umount")
        .arg(mnt)
        .status()
        .unwrap()
        .success());
    let served = done_rx
        .recv_timeout(DEADLINE)
        .expect("the session ends at unmount");
    assert_eq!(served, Ok(()));
    server.join().unwrap();
    assert!(!is_mounted(mnt));
}
