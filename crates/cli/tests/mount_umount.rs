//! Through the real mount: `umount.fuse.tux3` (what umount(8) runs for a
//! mount of type fuse.tux3) and `tux3 umount` return only once the server
//! has committed everything and closed the volume. Right after, the
//! volume's lock is free and the image holds what was written — without an
//! fsync, on a mount that commits only when it must (`commit=0`). umount(2)
//! alone returns while the server may still be writing. A path that is no
//! tux3 mount gets a clear error.
//!
//! Needs root and /dev/fuse; without them the tests print a note and pass.

mod mount_util;

use mount_util::*;
use std::fs;
use std::os::fd::AsRawFd;
use std::process::Command;

/// The helper binary, installed as `umount.fuse.tux3`.
const HELPER: &str = env!("CARGO_BIN_EXE_umount-tux3");

/// Write 64 MiB through a `commit=0` mount, unmount it with `unmount` (a
/// command and its arguments, the mount point last) and check that the
/// server was done when it returned.
fn unmount_waits_for_the_server(unmount: &[&str]) {
    let fx = Fixture::new("512M");
    let m = fx.mount(&["-o", "commit=0"]);
    let data: Vec<u8> = (0..64u32 << 20)
        .map(|i| (i.wrapping_mul(7) % 251) as u8)
        .collect();
    fs::write(fx.path("big"), &data).unwrap();
    let st = Command::new(unmount[0])
        .args(&unmount[1..])
        .arg(&fx.mnt)
        .stderr(fx.log_file())
        .status()
        .expect("run the unmount");
    assert!(st.success(), "{unmount:?} failed: {}", fx.log_text());
    assert!(!is_mounted(&fx.mnt), "still mounted");
    // The server has closed the volume: its lock is free at once. (After
    // umount(2) alone the server is still writing the last delta here.)
    let img = fs::File::open(&fx.img).unwrap();
    // SAFETY: flock on a descriptor we own.
    let locked = unsafe { libc::flock(img.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    assert_eq!(
        locked, 0,
        "{unmount:?} returned while the server still held the volume"
    );
    drop(img);
    let out = Command::new(TUX3)
        .arg("cat")
        .arg(&fx.img)
        .arg("/big")
        .output()
        .expect("run tux3 cat");
    assert!(
        out.status.success(),
        "tux3 cat: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stdout == data, "the image does not hold what was written");
    let pid = m.pid;
    wait_until("the server to exit", || is_gone(pid));
    drop(m);
    fx.fsck();
}

#[test]
fn the_umount_helper_returns_once_the_server_is_done() {
    if !can_mount() {
        return;
    }
    unmount_waits_for_the_server(&[HELPER, "-n"]);
}

#[test]
fn tux3_umount_returns_once_the_server_is_done() {
    if !can_mount() {
        return;
    }
    unmount_waits_for_the_server(&[TUX3, "umount"]);
}

#[test]
fn a_path_that_is_no_tux3_mount_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(TUX3)
        .arg("umount")
        .arg(dir.path())
        .output()
        .expect("run tux3 umount");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not a tux3 mount"), "{err}");
    // The helper: umount(8)'s exit codes (32: failure, 1: bad invocation).
    let out = Command::new(HELPER).arg(dir.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(32));
    let out = Command::new(HELPER).arg("-x").output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown option -x"));
}
