//! Inode flags through a mount, as `chattr` and `lsattr` use them on ext4:
//! an immutable file takes no write, attribute, xattr or name change; an
//! append-only file takes writes at its end only; an immutable directory
//! takes no new or removed name; nodump and noatime are kept (noatime
//! stops reads from moving the access time); only root may set immutable
//! or append-only, while the owner may set the others; the flags survive
//! a remount, show in `tux3 dump`, and fsck is clean.
//!
//! Another user is uid/gid 65534. Needs root, /dev/fuse and chattr/lsattr
//! (e2fsprogs); without root and /dev/fuse every test prints a note and
//! passes. The guard unmounts on every path.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;

mod mount_util;

use mount_util::*;

#[test]
fn immutable_and_append_only_refuse_changes_and_flags_are_kept() {
    if !can_mount() {
        return;
    }
    let fx = Fixture::new("64M");
    fs::set_permissions(fx.dir.path(), fs::Permissions::from_mode(0o755)).expect("chmod tempdir");
    let m = fx.mount(&[]);
    let (f, a, d) = (fx.path("frozen"), fx.path("log"), fx.path("dir"));
    fs::write(&f, "fixed").expect("write");
    fs::write(&a, "line1\n").expect("write");
    fs::create_dir(&d).expect("mkdir");
    fs::write(d.join("in"), "x").expect("write");
    let at = |p: &std::path::Path| p.display().to_string();
    let (ok, out) = sh(
        &format!("chattr +i {} {} && chattr +a {}", at(&f), at(&d), at(&a)),
        false,
    );
    assert!(ok, "chattr: {out}");
    let (_, out) = sh(&format!("lsattr -d {} {} {}", at(&f), at(&a), at(&d)), false);
    assert!(out.contains("----i") && out.contains("-----a"), "lsattr: {out}");

    // Immutable file: nothing changes.
    want_errno(
        "write",
        OpenOptions::new()
            .append(true)
            .open(&f)
            .and_then(|mut h| h.write_all(b"more")),
        libc::EPERM,
    );
    want_errno(
        "chmod",
        fs::set_permissions(&f, fs::Permissions::from_mode(0o600)),
        libc::EPERM,
    );
    want_errno("unlink", fs::remove_file(&f), libc::EPERM);
    want_errno("rename", fs::rename(&f, fx.path("moved")), libc::EPERM);
    want_errno("link", fs::hard_link(&f, fx.path("second")), libc::EPERM);
    let (ok, _) = sh(
        &format!("setfattr -n user.x -v 1 {} 2>/dev/null || exit 1", at(&f)),
        false,
    );
    assert!(!ok, "setxattr on an immutable file");
    assert_eq!(fs::read_to_string(&f).expect("read"), "fixed");
    // Immutable directory: no name comes or goes.
    want_errno("create in", fs::write(d.join("new"), "x"), libc::EPERM);
    want_errno("unlink in", fs::remove_file(d.join("in")), libc::EPERM);
    // Append-only file: appends only.
    OpenOptions::new()
        .append(true)
        .open(&a)
        .and_then(|mut h| h.write_all(b"line2\n"))
        .expect("append to an append-only file");
    want_errno(
        "truncate",
        OpenOptions::new().write(true).truncate(true).open(&a),
        libc::EPERM,
    );
    want_errno("unlink", fs::remove_file(&a), libc::EPERM);
    assert_eq!(fs::read_to_string(&a).expect("read"), "line1\nline2\n");

    // Who may set which: the owner sets nodump, not immutable.
    let mine = fx.path("mine");
    fs::write(&mine, "m").expect("write");
    std::os::unix::fs::chown(&mine, Some(NOBODY), Some(NOBODY)).expect("chown");
    let (ok, out) = sh(&format!("chattr +d {}", at(&mine)), true);
    assert!(ok, "the owner sets nodump: {out}");
    let (ok, _) = sh(&format!("chattr +i {}", at(&mine)), true);
    assert!(!ok, "the owner may not set immutable");
    let (ok, _) = sh(&format!("chattr +d {}", at(&a)), true);
    assert!(!ok, "another user may not set flags");

    m.unmount();
    let dump = Command::new(env!("CARGO_BIN_EXE_tux3"))
        .arg("dump")
        .arg(&fx.img)
        .output()
        .expect("dump");
    let dump = String::from_utf8_lossy(&dump.stdout);
    assert!(
        dump.contains("immutable (i)") && dump.contains("nodump (d)"),
        "{dump}"
    );
    fx.fsck();
    let m = fx.mount(&[]);
    let (_, out) = sh(&format!("lsattr -d {} {} {}", at(&f), at(&a), at(&mine)), false);
    assert!(
        out.contains("----i") && out.contains("-----a") && out.contains("d----"),
        "after a remount: {out}"
    );
    // Clearing is allowed, and then changes are too.
    let (ok, out) = sh(
        &format!(
            "chattr -i {0} {1} && chattr -a {2} && rm {0} {2} && rm -r {1}",
            at(&f),
            at(&d),
            at(&a)
        ),
        false,
    );
    assert!(ok, "cleared: {out}");
    m.unmount();
    fx.fsck();
}

/// `chattr +S` on a file and `+D` on a directory through the mount: a
/// write to the file and a new name in the directory are durable when the
/// system call returns — they survive kill -9 of the server right after,
/// with commits off (`commit=0`); the same changes to unflagged ones do
/// not.
#[test]
fn sync_and_dirsync_flags_make_changes_durable_at_once() {
    if !can_mount() {
        return;
    }
    let fx = Fixture::new("64M");
    let m = fx.mount_foreground(&["-o", "commit=0"]);
    for d in ["flagged", "plain"] {
        fs::create_dir(fx.path(d)).expect("mkdir");
        fs::write(fx.path(&format!("{d}.txt")), "").expect("create");
    }
    let at = |p: &str| fx.path(p).display().to_string();
    let (ok, out) = sh(
        &format!(
            "chattr +S {} && chattr +D {} && sync",
            at("flagged.txt"),
            at("flagged")
        ),
        false,
    );
    assert!(ok, "chattr: {out}");
    for d in ["flagged", "plain"] {
        let mut f = OpenOptions::new()
            .append(true)
            .open(fx.path(&format!("{d}.txt")))
            .expect("open");
        f.write_all(b"written").expect("write");
        fs::write(fx.path(&format!("{d}/new")), "").expect("create in dir");
    }
    m.kill9();
    fx.fsck();
    let _m = fx.mount(&[]);
    assert_eq!(fs::read(fx.path("flagged.txt")).unwrap(), b"written");
    assert!(fx.path("flagged/new").exists());
    assert_eq!(fs::read(fx.path("plain.txt")).unwrap(), b"");
    assert!(!fx.path("plain/new").exists());
}
