//! Bad input through the mount, with the errno ext4 gives: over-long names
//! and paths (ENAMETOOLONG), a write past the maximum file size (what ext4
//! on a loop mount gives, compared in the test when mkfs.ext4 is there,
//! else EFBIG), a path through a missing directory (ENOENT), and a full
//! volume (ENOSPC, as ext4; earlier fsynced data intact; deleting frees the
//! space; fsck clean).

mod mount_util;

use mount_util::{can_mount, cstr, errno, wait_until, Fixture};
use std::fs;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// errno of pwrite(10 bytes at i64::MAX - 10) on a new file in `dir`.
fn pwrite_at_max(dir: &Path) -> i32 {
    let p = cstr(&dir.join("huge"));
    // SAFETY: valid path; the descriptor is closed below.
    let fd = unsafe { libc::open(p.as_ptr(), libc::O_CREAT | libc::O_WRONLY, 0o644) };
    assert!(fd >= 0, "open: errno {}", errno());
    let buf = [7u8; 10];
    // SAFETY: valid descriptor and buffer.
    let r = unsafe { libc::pwrite(fd, buf.as_ptr().cast(), buf.len(), i64::MAX - 10) };
    let e = if r < 0 { errno() } else { 0 };
    // SAFETY: our own descriptor.
    unsafe { libc::close(fd) };
    e
}

/// An ext4 loop mount in a temp dir, unmounted on drop (mount -o loop
/// detaches its loop device at unmount).
struct Ext4 {
    _dir: tempfile::TempDir,
    mnt: PathBuf,
}

impl Ext4 {
    fn new() -> Option<Ext4> {
        let ok = |c: &mut Command| {
            c.stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        let dir = tempfile::tempdir().ok()?;
        let base = dir.path().canonicalize().ok()?;
        let img = base.join("ext4.img");
        let mnt = base.join("mnt");
        fs::create_dir(&mnt).ok()?;
        fs::File::create(&img).ok()?.set_len(64 << 20).ok()?;
        if !ok(Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&img)) {
            return None;
        }
        if !ok(Command::new("mount").args(["-o", "loop"]).arg(&img).arg(&mnt)) {
            return None;
        }
        Some(Ext4 { _dir: dir, mnt })
    }
}

impl Drop for Ext4 {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.mnt).status();
    }
}

#[test]
fn names_paths_and_sizes() {
    if !can_mount() {
        return;
    }
    let fx = Fixture::new("256M");
    let m = fx.mount(&[]);

    // A 256-byte name; 255 is fine.
    let long = "n".repeat(256);
    let err = fs::write(fx.path(&long), b"x").expect_err("256-byte name");
    assert_eq!(err.raw_os_error(), Some(libc::ENAMETOOLONG));
    fs::write(fx.path(&"n".repeat(255)), b"x").expect("255-byte name");
    let err = fs::create_dir(fx.path(&long)).expect_err("mkdir 256-byte name");
    assert_eq!(err.raw_os_error(), Some(libc::ENAMETOOLONG));

    // A path over PATH_MAX (4096) made of short components.
    let deep = "d/".repeat(2100);
    let err = fs::write(fx.path(&deep).join("f"), b"x").expect_err("over-long path");
    assert_eq!(err.raw_os_error(), Some(libc::ENAMETOOLONG));

    // creat("missing/x"): the directory does not exist.
    let err = fs::write(fx.path("missing/x"), b"x").expect_err("missing dir");
    assert_eq!(err.raw_os_error(), Some(libc::ENOENT));

    // Past the maximum file size: what ext4 says, else EFBIG.
    let ours = pwrite_at_max(&fx.mnt);
    let want = match Ext4::new() {
        Some(ext4) => {
            let e = pwrite_at_max(&ext4.mnt);
            eprintln!("bad input: pwrite at i64::MAX-10: ext4 errno {e}, tux3 errno {ours}");
            e
        }
        None => {
            eprintln!("note: no ext4 loop mount here; expecting EFBIG");
            libc::EFBIG
        }
    };
    assert_ne!(want, 0, "ext4 accepted the write");
    assert_eq!(ours, want, "pwrite at i64::MAX-10");

    m.unmount();
    fx.fsck();
}

#[test]
fn full_volume_enospc() {
    if !can_mount() {
        return;
    }
    let fx = Fixture::new("32M");
    // fsync=strict: an fsync commits everything, so the space freed by an
    // unlink is back once it returns.
    let m = fx.mount(&["-o", "fsync=strict"]);
    let keep: Vec<u8> = (0..1 << 20).map(|i: u32| (i % 251) as u8).collect();
    let mut f = fs::File::create(fx.path("keep")).expect("create keep");
    f.write_all(&keep).expect("write keep");
    f.sync_all().expect("fsync keep");
    drop(f);

    let chunk = vec![0xa5u8; 1 << 20];
    let fill = fs::File::create(fx.path("fill")).expect("create fill");
    let mut written = 0u64;
    let err = loop {
        match fill.write_all_at(&chunk, written) {
            Ok(()) => written += chunk.len() as u64,
            Err(e) => break e,
        }
        assert!(written < 64 << 20, "wrote {written} bytes to a 32 MiB volume");
    };
    // ENOSPC, as ext4 gives.
    assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{err}");
    // A full volume may also fail the fsync; either way nothing is lost.
    let _ = fill.sync_all();
    drop(fill);
    eprintln!("full volume: ENOSPC after {} MiB", written >> 20);
    assert!(fs::read(fx.path("keep")).expect("read keep") == keep);

    let free = |p: &Path| {
        // SAFETY: valid path and buffer.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { libc::statvfs(cstr(p).as_ptr(), &mut st) }, 0);
        st.f_bavail as u64 * st.f_frsize as u64
    };
    let before = free(&fx.mnt);
    fs::remove_file(fx.path("fill")).expect("unlink fill");
    fs::File::open(fx.path("keep"))
        .expect("open")
        .sync_all()
        .expect("fsync");
    wait_until("the space of the deleted file", || {
        free(&fx.mnt) >= before + (written / 2)
    });
    // And it can be used again.
    fs::write(fx.path("again"), &chunk).expect("write after delete");
    assert!(fs::read(fx.path("keep")).expect("read keep") == keep);
    m.unmount();
    fx.fsck();

    let m = fx.mount(&[]);
    assert!(fs::read(fx.path("keep")).expect("read keep") == keep);
    assert!(fs::read(fx.path("again")).expect("read again") == chunk);
    m.unmount();
    fx.fsck();
}
