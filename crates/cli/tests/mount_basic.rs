//! Through the real mount: `tux3 mount` (daemon and foreground), the
//! `mount.tux3` helper, operations through std::fs and libc, unmount by
//! `umount` and by signals, then fsck and a remount to see the data; the
//! read-ahead a mount sets.
//!
//! Needs root and /dev/fuse; without them every test prints a note and
//! passes. Every wait polls with a deadline, and a guard unmounts (lazily
//! as a last resort) so a failing test never leaves a mount behind.

use std::ffi::CString;
use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Child, Command, Stdio};

mod mount_util;

use mount_util::*;

const HELPER: &str = env!("CARGO_BIN_EXE_mount-tux3");

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
    let fx = Fixture::new("256M");
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
    let fx = Fixture::new("256M");
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
    let fx = Fixture::new("256M");
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
    let fx = Fixture::new("256M");
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
    let fx = Fixture::new("256M");
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

/// The kernel caches directory listings (`FOPEN_CACHE_DIR`): every change
/// made through the mount shows in the next listing, from a new open and
/// from a rewind of an open one.
#[test]
fn listings_show_every_change_despite_the_cache() {
    if !can_mount() {
        return;
    }
    let fx = Fixture::new("64M");
    let m = fx.mount(&[]);
    let d = fx.path("d");
    fs::create_dir(&d).expect("mkdir");
    let names = || -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(&d)
            .expect("read_dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    for i in 0..50 {
        fs::write(d.join(format!("f{i:02}")), b"x").expect("create");
    }
    let all: Vec<String> = (0..50).map(|i| format!("f{i:02}")).collect();
    assert_eq!(names(), all);
    assert_eq!(names(), all, "a second listing, from the cache");
    fs::write(d.join("new"), b"y").expect("create");
    fs::remove_file(d.join("f07")).expect("unlink");
    fs::rename(d.join("f08"), d.join("g08")).expect("rename");
    fs::create_dir(d.join("sub")).expect("mkdir");
    let mut want: Vec<String> = all
        .iter()
        .filter(|n| *n != "f07" && *n != "f08")
        .cloned()
        .collect();
    want.extend(["g08".to_string(), "new".to_string(), "sub".to_string()]);
    want.sort();
    assert_eq!(names(), want);

    // A directory stream kept open: a rewind shows a change made since.
    let path = std::ffi::CString::new(d.as_os_str().as_encoded_bytes()).expect("path");
    // SAFETY: a valid C string; the stream is closed below.
    let dir = unsafe { libc::opendir(path.as_ptr()) };
    assert!(!dir.is_null());
    let count = |dir: *mut libc::DIR| {
        let mut n = 0;
        // SAFETY: `dir` is an open stream; readdir's entries are not kept.
        while !unsafe { libc::readdir(dir) }.is_null() {
            n += 1;
        }
        n
    };
    let before = count(dir);
    fs::write(d.join("later"), b"z").expect("create");
    // SAFETY: `dir` is an open stream.
    unsafe { libc::rewinddir(dir) };
    assert_eq!(count(dir), before + 1, "the rewound stream shows the new name");
    // SAFETY: `dir` is open and not used again.
    unsafe { libc::closedir(dir) };
    m.unmount();
    fx.fsck();
}

/// A mount by root reads ahead 4 MiB (`serve.rs`, `READ_AHEAD_KB`), set on
/// its backing-device info before `tux3 mount` returns: the kernel's
/// default of 128 KiB would cap a sequential read at 128 KiB requests.
#[test]
fn a_mount_reads_ahead_at_least_a_mebibyte() {
    if !can_mount() {
        return;
    }
    let fx = Fixture::new("64M");
    let m = fx.mount(&[]);
    let dev = fs::metadata(&fx.mnt).expect("stat the mount").dev();
    let bdi = format!(
        "/sys/class/bdi/{}:{}/read_ahead_kb",
        libc::major(dev),
        libc::minor(dev)
    );
    let kb: u64 = fs::read_to_string(&bdi)
        .unwrap_or_else(|e| panic!("{bdi}: {e}"))
        .trim()
        .parse()
        .expect("a number of KiB");
    assert!(kb >= 1024, "{bdi}: {kb} KiB");
    m.unmount();
}
