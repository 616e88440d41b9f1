//! Through the real mount: mounting a volume whose previous server is still
//! closing it waits for that server (a plain umount(2) returns before the
//! server has committed and let go of the volume), and gets everything it
//! committed; mounting a volume a live server holds is refused, naming
//! where it is mounted.
//!
//! Needs root and /dev/fuse; without them the tests print a note and pass.

mod mount_util;

use mount_util::*;
use std::fs;
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};

/// Keeps a process stopped (SIGSTOP) until dropped (SIGCONT), so that it
/// goes on, on every path of the test.
struct Stopped(i32);

impl Stopped {
    fn new(pid: i32) -> Stopped {
        // SAFETY: signalling our own server process.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0, "stop {pid}");
        Stopped(pid)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        // SAFETY: as above.
        unsafe { libc::kill(self.0, libc::SIGCONT) };
    }
}

/// Whether someone holds the image's lock (a server that has not closed
/// the volume).
fn image_locked(fx: &Fixture) -> bool {
    let img = fs::File::open(&fx.img).unwrap();
    // SAFETY: flock on a descriptor we own (closing it lets go).
    unsafe { libc::flock(img.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) != 0 }
}

#[test]
fn a_mount_right_after_umount2_waits_for_the_previous_server() {
    if !can_mount() {
        return;
    }
    let fx = Fixture::new("256M");
    let data: Vec<u8> = (0..16u32 << 20).map(|i| (i % 251) as u8).collect();
    // The server may close the volume between umount(2)'s return and its
    // stop (a loaded machine): then the case is set up again, a few times.
    let mut held = None;
    for _ in 0..5 {
        let old = fx.mount(&["-o", "commit=0"]);
        // Written, not committed: the old server commits it when it closes.
        fs::write(fx.path("big"), &data).unwrap();
        // A plain umount(2), not tux3 umount: it returns before the server
        // has closed the volume, and the server is held there for the test.
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::umount2(cstr(&fx.mnt).as_ptr(), 0) }, 0, "umount2");
        let stopped = Stopped::new(old.pid);
        assert!(!is_mounted(&fx.mnt));
        if image_locked(&fx) {
            held = Some((old, stopped));
            break;
        }
        drop(stopped);
        let pid = old.pid;
        wait_until("the old server to exit", || is_gone(pid));
        drop(old);
    }
    let (old, stopped) = held.expect(
        "the old server closed the volume before it could be stopped, five times: the case is not set up",
    );

    // The new mount (in the foreground: our child, reaped by its guard).
    let log = fx.dir.path().join("again.log");
    let child = Command::new(TUX3)
        .args(["mount", "-f", "-o"])
        .arg(format!("log={}", log.display()))
        .arg(&fx.img)
        .arg(&fx.mnt)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(fx.log_file())
        .spawn()
        .expect("spawn tux3 mount -f");
    let mut new = Mounted {
        fx: &fx,
        pid: child.id() as i32,
        child: Some(child),
    };
    let waiting = "waiting for the previous server to close the volume";
    let mut exited = None;
    wait_until("the new mount to wait for the old server", || {
        if let Some(Ok(Some(st))) = new.child.as_mut().map(|c| c.try_wait()) {
            exited = Some(st);
            return true;
        }
        fs::read_to_string(&log).unwrap_or_default().contains(waiting)
    });
    assert!(
        exited.is_none(),
        "the new mount gave up while the old server was closing the volume ({exited:?}): {}{}",
        fx.log_text(),
        fs::read_to_string(&log).unwrap_or_default()
    );
    assert!(
        !is_mounted(&fx.mnt),
        "mounted while the old server holds the volume"
    );

    // The old server goes on, closes the volume; the new mount follows.
    drop(stopped);
    wait_until("the new mount", || {
        if let Some(Ok(Some(st))) = new.child.as_mut().map(|c| c.try_wait()) {
            exited = Some(st);
            return true;
        }
        is_mounted(&fx.mnt)
    });
    assert!(
        exited.is_none(),
        "the new mount failed ({exited:?}): {}{}",
        fx.log_text(),
        fs::read_to_string(&log).unwrap_or_default()
    );
    let old_pid = old.pid;
    wait_until("the old server to exit", || is_gone(old_pid));
    assert!(
        fs::read(fx.path("big")).unwrap() == data,
        "the new mount does not see what the old server committed"
    );
    new.unmount();
    drop(old);
    fx.fsck();
}

#[test]
fn a_live_mount_is_refused_naming_its_mount_point() {
    if !can_mount() {
        return;
    }
    let fx = Fixture::new("64M");
    let m = fx.mount(&[]);
    let other = fx.dir.path().join("other");
    fs::create_dir(&other).unwrap();
    let out = Command::new(TUX3)
        .arg("mount")
        .arg(&fx.img)
        .arg(&other)
        .stdin(Stdio::null())
        .output()
        .expect("run tux3 mount");
    if out.status.success() {
        let _ = Command::new("umount").arg(&other).status();
        panic!("a second mount of a mounted volume succeeded");
    }
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("already mounted on {}", fx.mnt.display())),
        "{err}"
    );
    assert!(!is_mounted(&other));
    m.unmount();
    fx.fsck();
}
