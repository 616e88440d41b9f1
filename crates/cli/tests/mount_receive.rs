//! `tux3 receive` into a live mount: the volume is unmounted for the
//! receive and mounted again with its options, and the received tree is
//! what the mount shows afterwards — a full stream, then an incremental
//! one given a path deep in the mount. A file held open on the mount
//! makes the receive refuse (exit 1) and leaves the mount as it was; a
//! stream cut short exits 4 with the volume mounted again, its token is
//! read through the mount (`--resume-token`), and `send --resume` into the
//! mount finishes it. Silent on success; fsck is clean at the end.
//!
//! Needs root and /dev/fuse; without them the test prints a note and
//! passes.

mod mount_util;

use mount_util::*;
use std::fs;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use tux3::types::OpenOptions;
use tux3::{open_path, Fs, ROOT_INO};

/// `tux3 send ARGS | tux3 receive TARGET`, the send's output cut after
/// `cut` bytes if given; the receive's output.
fn pipe(send: &[&dyn AsRef<std::ffi::OsStr>], target: &Path, cut: Option<usize>) -> Output {
    let out = Command::new(TUX3)
        .arg("send")
        .args(send.iter().map(|a| a.as_ref()))
        .stderr(Stdio::null())
        .output()
        .expect("run tux3 send");
    assert!(out.status.success(), "tux3 send failed");
    let mut stream = out.stdout;
    if let Some(n) = cut {
        stream.truncate(n);
    }
    let mut child = Command::new(TUX3)
        .arg("receive")
        .arg(target)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run tux3 receive");
    let mut stdin = child.stdin.take().expect("stdin");
    // A receive that refuses early stops reading: a broken pipe is fine.
    let _ = stdin.write_all(&stream);
    drop(stdin);
    child.wait_with_output().expect("wait for tux3 receive")
}

fn say(o: &Output) -> String {
    format!(
        "exit {:?}: {}{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The source: files written through the engine, snapshot `name` taken.
fn source_step(img: &Path, name: &str, files: &[(&str, Vec<u8>)]) {
    let fs = Fs::open(open_path(img, true).unwrap(), OpenOptions::default()).unwrap();
    for (f, data) in files {
        let ino = match fs.lookup(ROOT_INO, f.as_bytes()) {
            Ok(a) => a.ino,
            Err(_) => fs.create(ROOT_INO, f.as_bytes(), 0o644, 0, 0).unwrap().ino,
        };
        fs.write(ino, 0, data).unwrap();
    }
    fs.snapshot_create(name.as_bytes()).unwrap();
    fs.close().unwrap();
}

#[test]
fn receive_into_a_live_mount() {
    if !can_mount() {
        return;
    }
    let src = Fixture::new("64M");
    source_step(
        &src.img,
        "s1",
        &[("a", vec![1u8; 300_000]), ("b", b"bee".to_vec())],
    );
    let big: Vec<u8> = (0..2_000_000u32).map(|i| (i / 7) as u8).collect();
    source_step(&src.img, "s2", &[("b", b"changed".to_vec()), ("c", big.clone())]);

    let fx = Fixture::new("64M");
    let m = fx.mount(&[]);
    let o = pipe(&[&src.img, &"s1"], &fx.mnt, None);
    assert_eq!(o.status.code(), Some(0), "{}", say(&o));
    assert!(o.stdout.is_empty() && o.stderr.is_empty(), "{}", say(&o));
    // Its server went with the unmount; the new one is this mount's.
    std::mem::forget(m);
    let m = fx.mounted();
    assert_eq!(fs::read(fx.path("a")).unwrap(), vec![1u8; 300_000]);
    assert_eq!(fs::read(fx.path("b")).unwrap(), b"bee");

    // Refused while a file is open on the mount, which stays as it was.
    let held = fs::File::open(fx.path("a")).unwrap();
    let o = pipe(&[&"-i", &"s1", &src.img, &"s2"], &fx.mnt, None);
    assert_eq!(o.status.code(), Some(1), "{}", say(&o));
    assert!(say(&o).contains("files are open on it"), "{}", say(&o));
    assert!(is_mounted(&fx.mnt));
    drop(held);

    // A stream cut short: exit 4, mounted again, the token read through
    // the mount, and the rest sent into it.
    let full = Command::new(TUX3)
        .args(["send", "-i", "s1"])
        .arg(&src.img)
        .arg("s2")
        .output()
        .unwrap()
        .stdout
        .len();
    let o = pipe(&[&"-i", &"s1", &src.img, &"s2"], &fx.mnt, Some(full * 2 / 3));
    assert_eq!(o.status.code(), Some(4), "{}", say(&o));
    assert!(is_mounted(&fx.mnt));
    let tok = Command::new(TUX3)
        .args(["receive", "--resume-token"])
        .arg(fx.path("b"))
        .output()
        .unwrap();
    assert_eq!(tok.status.code(), Some(0), "{}", say(&tok));
    let token = String::from_utf8(tok.stdout).unwrap().trim().to_string();
    let o = pipe(&[&"--resume", &token, &src.img, &"s2"], &fx.path("b"), None);
    assert_eq!(o.status.code(), Some(0), "{}", say(&o));
    let m2 = fx.mounted();
    std::mem::forget(m);
    assert_eq!(fs::read(fx.path("b")).unwrap(), b"changed");
    assert_eq!(fs::read(fx.path("c")).unwrap(), big);
    let list = Command::new(TUX3)
        .args(["snapshot", "list"])
        .arg(&fx.mnt)
        .output()
        .unwrap();
    let list = String::from_utf8_lossy(&list.stdout).into_owned();
    assert!(list.contains("s1") && list.contains("s2"), "{list}");
    m2.unmount();
    fx.fsck();
}
