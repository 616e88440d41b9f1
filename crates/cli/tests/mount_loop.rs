//! A mount on a block device: a loop device with direct I/O, where the
//! engine opens the volume with `O_DIRECT` and sends each commit's writes as
//! one batch through an io_uring (`device/batch.rs`). Many small files and a
//! large one, some fsynced, then unmount, fsck, and every byte read back
//! from a remount.
//!
//! Needs root, /dev/fuse and losetup; without them it prints a note and
//! passes. Guards unmount and detach the loop device on every path.

use std::fs;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

mod mount_util;

use mount_util::*;

/// A loop device we attached; detached on drop.
struct Loop(String);

impl Loop {
    fn attach(img: &Path) -> Option<Loop> {
        let out = Command::new("losetup")
            .args(["--direct-io=on", "-f", "--show"])
            .arg(img)
            .stderr(Stdio::null())
            .output()
            .ok()?;
        let dev = String::from_utf8_lossy(&out.stdout).trim().to_string();
        (out.status.success() && dev.starts_with("/dev/")).then_some(Loop(dev))
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.0]).status();
    }
}

/// Deterministic contents of file `i`.
fn contents(i: u64) -> Vec<u8> {
    let mut rng = Rng::new(i + 1);
    let len = 1 + rng.below(24 * 1024) as usize;
    (0..len).map(|_| rng.next() as u8).collect()
}

#[test]
fn batched_direct_writes_read_back_whole() {
    if !can_mount() {
        return;
    }
    let fx = Fixture::new("256M");
    let Some(lo) = Loop::attach(&fx.img) else {
        skip("no loop device");
        return;
    };
    let name = lo.0.trim_start_matches("/dev/");
    let dio = fs::read_to_string(format!("/sys/block/{name}/loop/dio")).unwrap_or_default();
    if dio.trim() != "1" {
        eprintln!(
            "note: {} runs without direct I/O; the batch is not exercised",
            lo.0
        );
    }
    let m = fx.mount_from(Path::new(&lo.0), &[]);

    // Small files scattered over two directories (commits of many separate
    // blocks), every seventh fsynced; a large file written in 1 MiB pieces.
    for d in ["a", "b"] {
        fs::create_dir(fx.path(d)).expect("mkdir");
    }
    for i in 0..300u64 {
        let p = fx.path(&format!("{}/f{i}", if i % 2 == 0 { "a" } else { "b" }));
        let mut f = fs::File::create(&p).expect("create");
        f.write_all(&contents(i)).expect("write");
        if i % 7 == 0 {
            f.sync_all().expect("fsync");
        }
    }
    let big: Vec<u8> = (0..12u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let mut f = fs::File::create(fx.path("big")).expect("create big");
    for chunk in big.chunks(1 << 20) {
        f.write_all(chunk).expect("write big");
    }
    f.sync_all().expect("fsync big");
    drop(f);
    m.unmount();
    drop(lo);
    fx.fsck();

    let m = fx.mount(&["-o", "ro"]);
    for i in 0..300u64 {
        let p = fx.path(&format!("{}/f{i}", if i % 2 == 0 { "a" } else { "b" }));
        assert!(fs::read(&p).expect("read") == contents(i), "file {i} differs");
    }
    assert!(
        fs::read(fx.path("big")).expect("read big") == big,
        "the large file differs"
    );
    m.unmount();
}
