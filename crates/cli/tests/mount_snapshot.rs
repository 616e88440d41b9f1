//! Through real mounts, on both transports: `tux3 snapshot create` on a
//! path of a live mount (the server takes it, with what was written just
//! before), the snapshot mounted with `-o snapshot=NAME` on a second
//! directory while the live volume stays mounted: it shows the old
//! content and refuses writes (EROFS), `rw` is refused, and so is deleting
//! the snapshot while it is mounted. Then both are unmounted; through a
//! remount of the live volume the snapshot is rolled back to (refused while
//! a file is open; the volume is unmounted, rolled back and mounted again)
//! and deleted; fsck is clean after each step.
//!
//! Needs root and /dev/fuse (and FUSE over io_uring for the ring
//! transport); without them the tests print a note and pass.

mod mount_util;

use mount_util::*;
use std::fs;
use std::io::ErrorKind;
use std::process::{Command, Output, Stdio};

fn tux3(args: &[&dyn AsRef<std::ffi::OsStr>]) -> Output {
    Command::new(TUX3)
        .args(args.iter().map(|a| a.as_ref()))
        .stdin(Stdio::null())
        .output()
        .expect("run tux3")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `tux3 snapshot ARGS`, which must succeed; its standard output.
fn snapshot_ok(args: &[&dyn AsRef<std::ffi::OsStr>]) -> String {
    let o = tux3(&[&[&"snapshot" as &dyn AsRef<std::ffi::OsStr>], args].concat());
    assert_eq!(o.status.code(), Some(0), "tux3 snapshot: {}", text(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// `tux3 snapshot ARGS`, which must fail with exit 1; its standard error.
fn snapshot_fails(args: &[&dyn AsRef<std::ffi::OsStr>]) -> String {
    let o = tux3(&[&[&"snapshot" as &dyn AsRef<std::ffi::OsStr>], args].concat());
    assert_eq!(o.status.code(), Some(1), "tux3 snapshot: {}", text(&o));
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The snapshot `name`'s row of a listing, if any.
fn row<'a>(listing: &'a str, name: &str) -> Option<&'a str> {
    listing
        .lines()
        .skip(1)
        .find(|l| l.split_whitespace().next() == Some(name))
}

/// A second mount point over the same image, for the snapshot.
fn beside(fx: &Fixture) -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let base = dir.path().canonicalize().expect("canonical tempdir");
    let mnt = base.join("snap");
    fs::create_dir(&mnt).expect("mkdir snap");
    Fixture {
        img: fx.img.clone(),
        log: base.join("server.log"),
        mnt,
        dir,
    }
}

fn assert_erofs(r: std::io::Result<()>, what: &str) {
    let e = r.expect_err(what);
    assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{what}: {e}");
}

fn snapshot_beside_the_live_mount(transport: &str) {
    let fx = Fixture::new("64M");
    let m = fx.mount(&["-o", transport]);
    fs::create_dir(fx.path("d")).unwrap();
    fs::write(fx.path("f"), b"old content").unwrap();
    fs::write(fx.path("d/g"), vec![3u8; 100_000]).unwrap();

    // Taken through the mount, on a file of it, right after the writes.
    assert_eq!(snapshot_ok(&[&"create", &fx.path("f"), &"s1"]), "");
    let listing = snapshot_ok(&[&"list", &fx.mnt]);
    let r = row(&listing, "s1").unwrap_or_else(|| panic!("no s1 in {listing}"));
    assert!(r.ends_with(" ok"), "{listing}");
    // A listing of several, one answer each, and one being deleted.
    for n in ["x1", "x2", "x3"] {
        snapshot_ok(&[&"create", &fx.mnt, &n]);
    }
    snapshot_ok(&[&"delete", &fx.mnt, &"x2"]);
    let listing = snapshot_ok(&[&"list", &fx.mnt]);
    for n in ["s1", "x1", "x3"] {
        assert!(
            row(&listing, n).is_some_and(|r| r.ends_with(" ok")),
            "{n} in {listing}"
        );
    }
    snapshot_ok(&[&"delete", &fx.mnt, &"x1"]);
    snapshot_ok(&[&"delete", &fx.mnt, &"x3"]);
    let e = snapshot_fails(&[&"create", &fx.path("d"), &"s1"]);
    assert_eq!(
        e,
        format!(
            "tux3 snapshot create: {}: snapshot \"s1\" already exists\n",
            fx.path("d").display()
        )
    );
    // The live volume moves on.
    fs::write(fx.path("f"), b"new content, longer than the old").unwrap();
    fs::remove_file(fx.path("d/g")).unwrap();
    fs::write(fx.path("h"), b"made after the snapshot").unwrap();

    // The snapshot, mounted beside the live mount.
    let fx2 = beside(&fx);
    let o = tux3(&[&"mount", &"-o", &"snapshot=s1,rw", &fx.img, &fx2.mnt]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("read-only"), "{}", text(&o));
    let o = tux3(&[&"mount", &"-o", &"snapshot=none", &fx.img, &fx2.mnt]);
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("no snapshot \"none\""), "{}", text(&o));
    assert!(!is_mounted(&fx2.mnt));

    let opts = format!("snapshot=s1,{transport}");
    let s = fx2.mount(&["-o", &opts]);
    assert_eq!(fs::read(fx2.path("f")).unwrap(), b"old content");
    assert_eq!(fs::read(fx2.path("d/g")).unwrap(), vec![3u8; 100_000]);
    assert_eq!(
        fs::metadata(fx2.path("h")).unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert_erofs(fs::write(fx2.path("f"), b"x"), "write into the snapshot");
    assert_erofs(fs::write(fx2.path("new"), b"x"), "create in the snapshot");
    assert_erofs(fs::remove_file(fx2.path("f")), "unlink in the snapshot");
    assert_erofs(fs::create_dir(fx2.path("dir")), "mkdir in the snapshot");
    // Nor does the snapshot take snapshots.
    let e = snapshot_fails(&[&"create", &fx2.mnt, &"s2"]);
    assert!(e.contains("read-only"), "{e}");
    // The live mount still shows the new state.
    assert_eq!(
        fs::read(fx.path("f")).unwrap(),
        b"new content, longer than the old"
    );
    assert!(!fx.path("d/g").exists());

    // Nor may it be deleted while mounted, through the live mount or the
    // snapshot's.
    for path in [&fx.mnt, &fx2.mnt] {
        let e = snapshot_fails(&[&"delete", path, &"s1"]);
        assert_eq!(
            e,
            format!(
                "tux3 snapshot delete: {}: snapshot \"s1\" is mounted: unmount it first\n",
                path.display()
            )
        );
    }
    s.unmount();
    m.unmount();
    fx.fsck();

    // Rolled back through the mount: refused while a file is open on it;
    // then unmounted, rolled back and mounted again with its options.
    let m = fx.mount(&["-o", transport]);
    let held = fs::File::open(fx.path("f")).unwrap();
    let e = snapshot_fails(&[&"rollback", &fx.mnt, &"s1"]);
    assert!(e.contains("busy: files are open on it"), "{e}");
    drop(held);
    assert!(snapshot_fails(&[&"rollback", &fx.mnt, &"nope"]).contains("no snapshot \"nope\""));
    assert_eq!(snapshot_ok(&[&"rollback", &fx.mnt, &"s1"]), "");
    // (Its server went with the unmount; the new one is this mount's.)
    std::mem::forget(m);
    let m = fx.mounted();
    assert_eq!(fs::read(fx.path("f")).unwrap(), b"old content");
    assert_eq!(fs::read(fx.path("d/g")).unwrap(), vec![3u8; 100_000]);
    assert!(!fx.path("h").exists());
    assert!(row(&snapshot_ok(&[&"list", &fx.mnt]), "s1").is_some());
    fs::write(fx.path("f"), b"new content, longer than the old").unwrap();

    // Deleted through the mount: the name goes at once (its space comes
    // back in the background: it may still be listed, as deleting).
    assert_eq!(snapshot_ok(&[&"delete", &fx.mnt, &"s1"]), "");
    let listing = snapshot_ok(&[&"list", &fx.mnt]);
    if let Some(r) = row(&listing, "s1") {
        assert!(r.contains("deleting"), "{listing}");
    }
    let e = snapshot_fails(&[&"delete", &fx.mnt, &"s1"]);
    assert_eq!(
        e,
        format!("tux3 snapshot delete: {}: no snapshot \"s1\"\n", fx.mnt.display())
    );
    assert_eq!(
        fs::read(fx.path("f")).unwrap(),
        b"new content, longer than the old"
    );
    m.unmount();
    fx.fsck();
    let o = tux3(&[&"mount", &"-o", &"snapshot=s1", &fx.img, &fx2.mnt]);
    assert_ne!(
        o.status.code(),
        Some(0),
        "a deleted snapshot mounted: {}",
        text(&o)
    );
    assert!(!is_mounted(&fx2.mnt));
}

#[test]
fn snapshot_through_dev_fuse() {
    if !can_mount() {
        return;
    }
    let _one = PARAM.lock().unwrap_or_else(|e| e.into_inner());
    snapshot_beside_the_live_mount("nouring");
}

#[test]
fn snapshot_through_io_uring() {
    let Some(_switch) = uring_switch(true) else {
        return;
    };
    snapshot_beside_the_live_mount("uring");
}

/// `tux3 umount` of a snapshot mounted beside the live volume returns once
/// it is unmounted: the live mount keeps the volume's lock, which the
/// command used to wait for without end.
#[test]
fn umount_of_a_snapshot_beside_the_live_mount_returns() {
    if !can_mount() {
        return;
    }
    let fx = Fixture::new("64M");
    let m = fx.mount(&[]);
    fs::write(fx.path("f"), b"content").unwrap();
    assert_eq!(snapshot_ok(&[&"create", &fx.mnt, &"s1"]), "");
    let fx2 = beside(&fx);
    let s = fx2.mount(&["-o", "snapshot=s1"]);
    let mut child = Command::new(TUX3)
        .arg("umount")
        .arg(&fx2.mnt)
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run tux3 umount");
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait for tux3 umount") {
            break Some(st);
        }
        if start.elapsed() > DEADLINE {
            // Not left behind polling for ever.
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(0),
        "tux3 umount did not return"
    );
    assert!(!is_mounted(&fx2.mnt));
    assert!(is_mounted(&fx.mnt));
    std::mem::forget(s);
    assert_eq!(fs::read(fx.path("f")).unwrap(), b"content");
    m.unmount();
    fx.fsck();
}
