//! `tux3 mount -o remount,...` and `mount -o remount,...` (mount(8) runs
//! mount.tux3): going read-only commits everything (a server killed right
//! after loses nothing), refuses writers with EROFS while readers and open
//! files carry on, and is refused while a file is open for writing; going
//! read-write again lets writers in; options a live mount cannot take are
//! refused by name; a volume mounted read-only cannot be remounted
//! read-write.
//!
//! Needs root and /dev/fuse; without them every test prints a note and
//! passes. The guard unmounts on every path.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Output};

mod mount_util;

use mount_util::*;

fn remount(mnt: &Path, opts: &str) -> Output {
    Command::new(TUX3)
        .args(["mount", "-o", &format!("remount,{opts}")])
        .arg(mnt)
        .output()
        .expect("run tux3 mount -o remount")
}

#[test]
fn remount_read_only_commits_and_keeps_readers_and_read_write_comes_back() {
    if !can_mount() {
        return;
    }
    let fx = Fixture::new("64M");
    // No commits by time: only the remount can have made the data durable.
    let m = fx.mount(&["-o", "commit=0"]);
    fs::write(fx.path("a"), "kept").expect("write");
    let mut reader = File::open(fx.path("a")).expect("open for reading");

    // A file open for writing keeps the mount writable.
    let w = OpenOptions::new()
        .append(true)
        .open(fx.path("a"))
        .expect("open for writing");
    let out = remount(&fx.mnt, "ro");
    assert!(!out.status.success(), "remount ro with a writer");
    assert!(String::from_utf8_lossy(&out.stderr).contains("busy"), "{out:?}");
    drop(w);

    let out = remount(&fx.mnt, "ro");
    assert!(out.status.success(), "{out:?}");
    assert!(
        out.stdout.is_empty() && out.stderr.is_empty(),
        "not silent: {out:?}"
    );
    want_errno("create", fs::write(fx.path("b"), "x"), libc::EROFS);
    want_errno(
        "write",
        OpenOptions::new().append(true).open(fx.path("a")),
        libc::EROFS,
    );
    let mut s = String::new();
    reader.read_to_string(&mut s).expect("read through an open file");
    assert_eq!(s, "kept");
    assert_eq!(fs::read_to_string(fx.path("a")).expect("read"), "kept");

    // Options a live mount cannot take, by name.
    for bad in ["cache=64M", "fsync=strict", "threads=2"] {
        let out = remount(&fx.mnt, bad);
        let err = String::from_utf8_lossy(&out.stderr);
        let name = bad.split('=').next().unwrap_or(bad);
        assert!(
            !out.status.success() && err.contains(&format!("'{name}'")),
            "{bad}: {err}"
        );
    }

    // Through mount(8) when mount.tux3 is installed, else the command.
    let through_mount8 = Path::new("/sbin/mount.fuse.tux3").exists();
    let ok = if through_mount8 {
        Command::new("mount")
            .args(["-o", "remount,rw"])
            .arg(&fx.mnt)
            .status()
            .expect("run mount")
            .success()
    } else {
        remount(&fx.mnt, "rw").status.success()
    };
    assert!(ok, "remount rw (mount(8): {through_mount8})");
    File::create(fx.path("b"))
        .and_then(|mut f| f.write_all(b"after"))
        .expect("write after remount rw");
    let out = remount(&fx.mnt, "ro");
    assert!(out.status.success(), "{out:?}");
    drop(reader);
    // Killed without an unmount: what the remount committed is there.
    m.kill9();
    let m = fx.mount(&["-o", "ro"]);
    assert_eq!(fs::read_to_string(fx.path("a")).expect("read a"), "kept");
    assert_eq!(fs::read_to_string(fx.path("b")).expect("read b"), "after");
    // Mounted read-only, the volume cannot be remounted read-write.
    let out = remount(&fx.mnt, "rw");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("mounted read-only"),
        "{err}"
    );
    m.unmount();
    fx.fsck();
}
