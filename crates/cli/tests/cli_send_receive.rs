//! `tux3 send | tux3 receive` between two image files, through a pipe and
//! through a file: a full stream and an incremental one give the same
//! trees (read back through the engine) and the same snapshot names, in
//! silence when standard error is no terminal; a stream cut short exits 4
//! naming the record, keeps no snapshot, and `receive --resume-token` +
//! `send --resume` finish it; a damaged record, a missing base and a
//! taken name are refused with what was wrong.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use tux3::types::OpenOptions;
use tux3::{open_path, FileType, Fs, ROOT_INO};

fn tux3() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tux3"))
}

fn run(args: &[&dyn AsRef<std::ffi::OsStr>]) -> Output {
    tux3()
        .args(args.iter().map(|a| a.as_ref()))
        .output()
        .expect("run tux3")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `tux3 receive TARGET` with `input` on standard input.
fn receive(target: &Path, input: &[u8]) -> Output {
    let mut child = tux3()
        .arg("receive")
        .arg(target)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run tux3 receive");
    let mut stdin = child.stdin.take().expect("stdin");
    // A receive that refuses early closes its end: that is not our error.
    let _ = stdin.write_all(input);
    drop(stdin);
    child.wait_with_output().expect("wait for tux3 receive")
}

/// `tux3 send ARGS | tux3 receive TARGET`, a real pipe between the two.
fn pipe(args: &[&dyn AsRef<std::ffi::OsStr>], target: &Path) -> (Output, Output) {
    let mut send = tux3()
        .args(args.iter().map(|a| a.as_ref()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run tux3 send");
    let out = send.stdout.take().expect("stdout");
    let recv = tux3()
        .arg("receive")
        .arg(target)
        .stdin(Stdio::from(out))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .expect("run tux3 receive");
    (send.wait_with_output().expect("wait for tux3 send"), recv)
}

fn volume(dir: &Path, name: &str, from: Option<&Path>) -> PathBuf {
    let img = dir.join(name);
    let mut args: Vec<&dyn AsRef<std::ffi::OsStr>> = vec![&"mkfs", &"--size", &"64M"];
    if let Some(f) = from.as_ref() {
        args.push(&"--from");
        args.push(f);
    }
    args.push(&img);
    let o = run(&args);
    assert!(o.status.success(), "mkfs: {}", stderr(&o));
    img
}

/// Names, inode numbers, modes, sizes, times and data of snapshot `snap`.
fn tree(img: &Path, snap: &str) -> BTreeMap<String, String> {
    let dev = open_path(img, false).unwrap();
    let opts = OpenOptions {
        read_only: true,
        snapshot: Some(snap.as_bytes().to_vec()),
        ..OpenOptions::default()
    };
    let fs = Fs::open(dev, opts).unwrap();
    let mut out = BTreeMap::new();
    let mut stack = vec![(ROOT_INO, String::new())];
    while let Some((dir, path)) = stack.pop() {
        for e in fs.readdir(dir, 0, usize::MAX).unwrap() {
            let p = format!("{path}/{}", String::from_utf8_lossy(&e.name));
            let a = fs.getattr(e.ino).unwrap();
            let data = match e.kind {
                FileType::Regular => fs.read(e.ino, 0, a.size as usize).unwrap(),
                FileType::Symlink => fs.readlink(e.ino).unwrap(),
                _ => Vec::new(),
            };
            let sum = data
                .iter()
                .fold(0u64, |s, &b| s.wrapping_mul(31).wrapping_add(b as u64));
            out.insert(
                p.clone(),
                format!(
                    "{} {:o} {} {} {:?} {:?} {sum:x}",
                    a.ino, a.mode, a.size, a.nlink, a.mtime, a.ctime
                ),
            );
            if e.kind == FileType::Directory {
                stack.push((e.ino, p));
            }
        }
    }
    out
}

fn ok(o: &Output, what: &str) {
    assert_eq!(o.status.code(), Some(0), "{what}: {}", stderr(o));
    assert_eq!(stderr(o), "", "{what} is silent on success");
}

#[test]
fn image_to_pipe_to_image() {
    let dir = tempfile::tempdir().unwrap();
    let src_tree = dir.path().join("tree");
    fs::create_dir_all(src_tree.join("d/e")).unwrap();
    fs::write(src_tree.join("a"), b"the first file").unwrap();
    fs::write(src_tree.join("d/b"), vec![7u8; 300_000]).unwrap();
    std::os::unix::fs::symlink("../a", src_tree.join("d/link")).unwrap();
    let src = volume(dir.path(), "src", Some(&src_tree));
    let dst = volume(dir.path(), "dst", None);
    ok(&run(&[&"snapshot", &"create", &src, &"s1"]), "snapshot create");

    let (s, r) = pipe(&[&"send", &src, &"s1"], &dst);
    ok(&s, "send");
    ok(&r, "receive");
    assert_eq!(tree(&src, "s1"), tree(&dst, "s1"));

    // An incremental: a file moved across directories and a new one.
    let dev = open_path(&src, true).unwrap();
    let fs = Fs::open(dev, OpenOptions::default()).unwrap();
    let d = fs.lookup(ROOT_INO, b"d").unwrap().ino;
    let e = fs.lookup(d, b"e").unwrap().ino;
    fs.rename(ROOT_INO, b"a", e, b"a2", Default::default()).unwrap();
    let n = fs.create(ROOT_INO, b"new", 0o600, 0, 0).unwrap().ino;
    fs.write(n, 0, b"new data").unwrap();
    fs.close().unwrap();
    ok(&run(&[&"snapshot", &"create", &src, &"s2"]), "snapshot create");
    let (s, r) = pipe(&[&"send", &"-i", &"s1", &src, &"s2"], &dst);
    ok(&s, "send -i");
    ok(&r, "receive");
    assert_eq!(tree(&src, "s2"), tree(&dst, "s2"));
    let list = run(&[&"snapshot", &"list", &dst]);
    let text = String::from_utf8_lossy(&list.stdout);
    assert!(text.contains("s1") && text.contains("s2"), "{text}");
    let o = run(&[&"fsck", &dst]);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stdout));

    // The incremental again: the name is taken (exit 1).
    let stream = run(&[&"send", &"-i", &"s1", &src, &"s2"]).stdout;
    let o = receive(&dst, &stream);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("taken"), "{}", stderr(&o));
    // Into a volume without the base (exit 1).
    let other = volume(dir.path(), "other", None);
    let o = receive(&other, &stream);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("does not have"), "{}", stderr(&o));
}

#[test]
fn a_cut_stream_resumes_and_a_damaged_one_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let src_tree = dir.path().join("tree");
    fs::create_dir_all(&src_tree).unwrap();
    for i in 0..40 {
        fs::write(src_tree.join(format!("f{i}")), vec![i as u8; 100_000 + i * 1000]).unwrap();
    }
    let src = volume(dir.path(), "src", Some(&src_tree));
    ok(&run(&[&"snapshot", &"create", &src, &"s1"]), "snapshot create");
    let o = run(&[&"send", &src, &"s1"]);
    ok(&o, "send");
    let stream = o.stdout;

    // Damaged: exit 4, the record and its offset named, no snapshot.
    let dst = volume(dir.path(), "dst", None);
    let mut bad = stream.clone();
    let at = bad.len() * 3 / 4;
    bad[at] ^= 1;
    let o = receive(&dst, &bad);
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    assert!(stderr(&o).contains("bad checksum at record"), "{}", stderr(&o));
    let list = run(&[&"snapshot", &"list", &dst]);
    assert!(!String::from_utf8_lossy(&list.stdout).contains("s1"));

    // Cut: exit 4; the token says where; the rest finishes it.
    let dst = volume(dir.path(), "dst2", None);
    let o = receive(&dst, &stream[..stream.len() / 2]);
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    assert!(stderr(&o).contains("ends inside record"), "{}", stderr(&o));
    let o = run(&[&"receive", &"--resume-token", &dst]);
    ok(&o, "receive --resume-token");
    let token = String::from_utf8_lossy(&o.stdout).trim().to_string();
    let next = u64::from_str_radix(token.split('-').nth(5).unwrap(), 16).unwrap();
    assert!(next > 1, "progress was kept: {token}");
    let rest = run(&[&"send", &"--resume", &token, &src]);
    ok(&rest, "send --resume");
    assert!(
        rest.stdout.len() < stream.len() * 3 / 5,
        "the rest, not the whole stream"
    );
    ok(&receive(&dst, &rest.stdout), "receive of the rest");
    assert_eq!(tree(&src, "s1"), tree(&dst, "s1"));
    let o = run(&[&"receive", &"--resume-token", &dst]);
    assert_eq!(o.status.code(), Some(1), "no receive in progress any more");
}
