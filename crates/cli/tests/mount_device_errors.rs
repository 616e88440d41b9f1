//! Through the real mount, a device that fails (DESIGN.md promise 10): the
//! image lies on a small tmpfs, a thin-provisioned device in miniature,
//! whose writes fail with ENOSPC once it is full. A commit that meets that
//! fails its fsync with EIO; every later fsync of any file, from any
//! descriptor, fails too; changes get EROFS; reads go on; nothing hangs;
//! the server names the device and the error; and the healed image (copied
//! off the full tmpfs) passes fsck and holds everything fsynced before.
//!
//! Needs root and /dev/fuse (and tmpfs); without them the test prints a
//! note and passes (fails with TUX3_REQUIRE_MOUNT=1).

mod mount_util;

use mount_util::*;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// A tmpfs of `size` at `dir`, unmounted when dropped.
struct Thin(PathBuf);

impl Thin {
    fn mount(dir: &Path, size: &str) -> Option<Thin> {
        fs::create_dir_all(dir).unwrap();
        let st = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .ok()?;
        st.success().then(|| Thin(dir.to_path_buf()))
    }
}

impl Drop for Thin {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .stderr(Stdio::null())
            .status();
    }
}

/// `f` on a thread of its own; its result, or a failure if it does not
/// come back within the deadline (a hung server).
fn answered<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(120))
        .unwrap_or_else(|_| panic!("{what}: no answer from the mount (hung)"))
}

fn os_errno(r: std::io::Result<()>) -> Option<i32> {
    r.err().and_then(|e| e.raw_os_error())
}

#[test]
fn a_full_thin_device_fails_fsync_and_turns_the_mount_read_only() {
    if !can_mount() {
        return;
    }
    let fx = Fixture::new("8M");
    let Some(thin) = Thin::mount(&fx.dir.path().join("thin"), "3M") else {
        skip("no tmpfs mount here");
        return;
    };
    // The image, sparse, on the small tmpfs: 64 MiB that can hold 3.
    let img = thin.0.join("img");
    let st = Command::new(TUX3)
        .args(["mkfs", "--size", "64M"])
        .arg(&img)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success(), "mkfs on the tmpfs failed");
    let m = fx.mount_from(&img, &["-o", "commit=0"]);

    fs::write(fx.path("kept"), b"fsynced before the device filled").unwrap();
    File::open(fx.path("kept")).unwrap().sync_all().unwrap();

    // Fill the device: 8 MiB of data cannot land on 3 MiB.
    let big = fx.path("big");
    let first_error = answered("writing and fsyncing past the device's space", move || {
        let mut f = File::create(&big).unwrap();
        let chunk = vec![0x5au8; 1 << 20];
        for _ in 0..8 {
            if let Err(e) = f.write_all(&chunk) {
                return e.raw_os_error();
            }
        }
        os_errno(f.sync_all())
    });
    assert_eq!(first_error, Some(libc::EIO), "the failed commit's error");

    // Every later fsync fails, of either file, from any descriptor, twice.
    for round in 0..2 {
        for name in ["big", "kept"] {
            let p = fx.path(name);
            let (a, b) = answered("fsync after the failure", move || {
                let one = File::open(&p).unwrap();
                let two = OpenOptions::new().read(true).open(&p).unwrap();
                (os_errno(one.sync_all()), os_errno(two.sync_data()))
            });
            assert_eq!(a, Some(libc::EIO), "fsync of {name}, round {round}");
            assert_eq!(b, Some(libc::EIO), "fdatasync of {name}, round {round}");
        }
    }
    // Changes are refused; reads go on.
    let kept = fx.path("kept");
    let write = answered("a write after the failure", move || {
        OpenOptions::new()
            .write(true)
            .open(&kept)
            .and_then(|f| f.write_all_at(b"x", 0))
    });
    assert_eq!(os_errno(write), Some(libc::EROFS));
    let new = fx.path("new");
    assert_eq!(
        os_errno(answered("a create", move || File::create(&new).map(drop))),
        Some(libc::EROFS)
    );
    assert_eq!(
        fs::read(fx.path("kept")).unwrap(),
        b"fsynced before the device filled"
    );
    let log = fx.log_text();
    assert!(
        log.contains(&img.display().to_string()) && log.contains("read-only until it is mounted again"),
        "the server's message names neither the device nor the failure: {log}"
    );
    // The unmount ends the server (its close reports the lost changes).
    m.unmount();

    // Heal: the same bytes where there is room.
    let healed = fx.img.clone();
    fs::copy(&img, &healed).unwrap();
    drop(thin);
    fx.fsck();
    let m = fx.mount(&[]);
    assert_eq!(
        fs::read(fx.path("kept")).unwrap(),
        b"fsynced before the device filled"
    );
    let _ = File::create(fx.path("after the heal")).unwrap();
    m.unmount();
    fx.fsck();
}
