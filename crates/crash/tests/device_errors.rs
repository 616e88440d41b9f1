//! What the volume answers when its device fails (DESIGN.md promise 10;
//! ARCHITECTURE.md, *When the device fails*), one case each, on the crash
//! harness's failing device (`crates/crash/src/failing.rs`) over a memory
//! device: a failed commit write or flush fails every later fsync,
//! fdatasync and sync of every file (it sticks), changes get EROFS,
//! readers go on, nothing is retried, the close reports it, and the
//! healed device mounts to the
//! last durable state; a failed read is EIO naming its block and leaves
//! the cache as it was. (The message: `device_error_message.rs`.)

use std::sync::Arc;
use tux3::api::Fs;
use tux3::device::{Device, MemDevice};
use tux3::error::Errno;
use tux3::types::{FormatOptions, Ino, OpenOptions, ROOT_INO};
use tux3_crash::{FailEffect, FailMode, FailOp, FailingDevice};
use tux3_tools::fsck::{self, FsckOptions};

/// A formatted memory device, the failing device over it, and the volume
/// open on that (no commit thread: commits happen when the test asks).
fn volume() -> (Arc<MemDevice>, Arc<FailingDevice>, Fs) {
    let mem = Arc::new(MemDevice::new(4096, 1024));
    Fs::format(mem.clone(), &FormatOptions::default()).unwrap();
    let failing = Arc::new(FailingDevice::healthy(mem.clone()));
    let fs = Fs::open(failing.clone(), opts()).unwrap();
    (mem, failing, fs)
}

fn opts() -> OpenOptions {
    OpenOptions {
        commit_interval: None,
        ..OpenOptions::default()
    }
}

/// The blocks of `mem` on a device that works: mounted, with fsck clean.
fn healed(mem: &MemDevice) -> Fs {
    let dev: Arc<dyn Device> = Arc::new(MemDevice::from_image(4096, mem.image()));
    let report = fsck::check(dev.clone(), &FsckOptions::default()).unwrap();
    assert!(
        report.problems.is_empty(),
        "fsck after healing: {:?}",
        report.problems
    );
    Fs::open(dev, opts()).unwrap()
}

fn file(fs: &Fs, name: &str, data: &[u8]) -> Ino {
    let ino = fs.create(ROOT_INO, name.as_bytes(), 0o644, 0, 0).unwrap().ino;
    fs.write(ino, 0, data).unwrap();
    ino
}

fn errno<T: std::fmt::Debug>(r: tux3::error::Result<T>) -> Errno {
    r.expect_err("succeeded").errno()
}

/// After a failed commit: every fsync and fdatasync, of the file and of
/// any other, and every sync fail, again and again; nothing more is
/// written; changes get EROFS; readers see what they saw.
fn refuses_everything(fs: &Fs, failing: &FailingDevice, files: &[(Ino, &[u8])]) {
    let written = failing.seen().1 + failing.seen().2;
    for _ in 0..3 {
        for &(ino, _) in files.iter().chain([&(ROOT_INO, &b""[..])]) {
            assert_eq!(errno(fs.fsync(ino, false)), Errno::EIO, "fsync of {ino}");
            assert_eq!(errno(fs.fsync(ino, true)), Errno::EIO, "fdatasync of {ino}");
        }
        assert_eq!(errno(fs.sync()), Errno::EIO, "sync");
    }
    let (ino, _) = files[0];
    assert_eq!(errno(fs.write(ino, 0, b"more")), Errno::EROFS);
    assert_eq!(errno(fs.create(ROOT_INO, b"new", 0o644, 0, 0)), Errno::EROFS);
    assert_eq!(errno(fs.unlink(ROOT_INO, b"a")), Errno::EROFS);
    assert_eq!(errno(fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0)), Errno::EROFS);
    for &(ino, data) in files {
        assert_eq!(fs.read(ino, 0, 1 << 20).unwrap(), data, "readers carry on");
    }
    assert_eq!(
        failing.seen().1 + failing.seen().2,
        written,
        "the volume wrote or flushed again after a failed commit (no retry is promised)"
    );
}

#[test]
fn a_failed_fsync_write_fails_every_later_fsync() {
    let (mem, failing, fs) = volume();
    let a = file(&fs, "a", b"durable");
    fs.sync().unwrap();
    fs.write(a, 0, b"lost!!!").unwrap();
    let b = file(&fs, "b", b"never durable");
    failing.arm(FailOp::Write, FailMode::Once, FailEffect::Eio);
    assert_eq!(errno(fs.fsync(a, false)), Errno::EIO);
    // The device works again; the error stays until the next mount.
    refuses_everything(&fs, &failing, &[(a, b"lost!!!"), (b, b"never durable")]);
    assert_eq!(errno(fs.close()), Errno::EIO, "close after a failed commit");
    let fs = healed(&mem);
    let a = fs.lookup(ROOT_INO, b"a").unwrap().ino;
    assert_eq!(fs.read(a, 0, 100).unwrap(), b"durable");
    assert_eq!(errno(fs.lookup(ROOT_INO, b"b")), Errno::ENOENT);
    fs.close().unwrap();
}

#[test]
fn a_failed_flush_fails_fdatasync_of_data_the_failed_commit_held() {
    let (mem, failing, fs) = volume();
    let a = file(&fs, "a", b"first");
    fs.sync().unwrap();
    fs.write(a, 0, b"again").unwrap();
    // A delta commit (a sync: the data's commit is not the fdatasync's
    // own) whose flush fails and loses what it wrote.
    failing.arm(FailOp::Flush, FailMode::Once, FailEffect::LoseCache);
    assert_eq!(errno(fs.sync()), Errno::EIO);
    // Its freeze cleared the file's "data changed" mark: an fdatasync
    // must still not call the data durable.
    assert_eq!(errno(fs.fsync(a, true)), Errno::EIO);
    refuses_everything(&fs, &failing, &[(a, b"again")]);
    drop(fs);
    let fs = healed(&mem);
    let a = fs.lookup(ROOT_INO, b"a").unwrap().ino;
    assert_eq!(fs.read(a, 0, 100).unwrap(), b"first");
    fs.close().unwrap();
}

#[test]
fn a_thin_device_out_of_space_turns_the_volume_read_only() {
    let (mem, failing, fs) = volume();
    let a = file(&fs, "a", &[7u8; 20_000]);
    failing.arm(FailOp::Write, FailMode::Sticky, FailEffect::Enospc);
    assert_eq!(errno(fs.sync()), Errno::EIO);
    refuses_everything(&fs, &failing, &[(a, &[7u8; 20_000])]);
    drop(fs);
    let fs = healed(&mem);
    assert_eq!(errno(fs.lookup(ROOT_INO, b"a")), Errno::ENOENT);
    fs.close().unwrap();
}

#[test]
fn a_torn_log_write_leaves_the_last_durable_state() {
    let (mem, failing, fs) = volume();
    let (one, two) = (vec![1u8; 3000], vec![2u8; 3000]);
    let a = file(&fs, "a", &one);
    fs.fsync(a, false).unwrap();
    fs.write(a, 0, &two).unwrap();
    // The fsync commit's log block (its data inline, past the first
    // sector) lands with only its first sector.
    failing.arm(FailOp::Write, FailMode::Once, FailEffect::Torn);
    assert_eq!(errno(fs.fsync(a, false)), Errno::EIO);
    refuses_everything(&fs, &failing, &[(a, &two)]);
    drop(fs);
    let fs = healed(&mem);
    let a = fs.lookup(ROOT_INO, b"a").unwrap().ino;
    assert_eq!(fs.read(a, 0, 10_000).unwrap(), one);
    fs.close().unwrap();
}

#[test]
fn a_failed_read_names_its_block_and_changes_nothing() {
    let (_mem, failing, fs) = volume();
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap().ino;
    let mut inos = Vec::new();
    for i in 0..300 {
        let ino = fs.create(d, format!("f{i}").as_bytes(), 0o644, 0, 0).unwrap().ino;
        fs.write(ino, 0, &[i as u8; 5000]).unwrap();
        inos.push(ino);
    }
    fs.close().unwrap();
    // Cold: every node and block is read from the device again.
    let fs = Fs::open(failing.clone(), opts()).unwrap();
    let mut failed = 0;
    for i in (0..300).step_by(7) {
        let name = format!("f{i}");
        // The first read of whatever the lookup and the read need fails once.
        failing.arm(FailOp::Read, FailMode::Once, FailEffect::Eio);
        let first = fs
            .lookup(d, name.as_bytes())
            .and_then(|a| fs.read(a.ino, 0, 10_000));
        if let Err(e) = &first {
            failed += 1;
            assert_eq!(e.errno(), Errno::EIO);
            let msg = e.to_string();
            assert!(
                msg.contains("block") && msg.contains("injected read error"),
                "{msg}"
            );
        }
        // Nothing was left half loaded: the same calls now succeed.
        let a = fs.lookup(d, name.as_bytes()).unwrap();
        assert_eq!(a.ino, inos[i]);
        assert_eq!(fs.read(a.ino, 0, 10_000).unwrap(), vec![i as u8; 5000]);
    }
    assert!(failed > 0, "no read failed");
    // A transient read error does not fail the volume.
    fs.create(ROOT_INO, b"after", 0o644, 0, 0).unwrap();
    fs.sync().unwrap();
    fs.close().unwrap();
}
