//! `snapdiff::diff` between two snapshots: created, deleted, modified and
//! renamed paths exactly, nothing for what did not change (also when the
//! trees are several levels deep and one file of thousands changed), and
//! the comparison opens only the nodes the snapshots do not share.

use std::sync::Arc;
use tux3::device::{Device, MemDevice};
use tux3::{FormatOptions, Fs, OpenOptions, RenameFlags, ROOT_INO};
use tux3_tools::snapdiff::{diff, Change};

fn volume() -> (Arc<dyn Device>, Fs) {
    let dev: Arc<dyn Device> = Arc::new(MemDevice::new(4096, 16384));
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    (dev, fs)
}

fn file(fs: &Fs, dir: u64, name: &str, data: &[u8]) -> u64 {
    let a = fs.create(dir, name.as_bytes(), 0o644, 0, 0).unwrap();
    fs.write(a.ino, 0, data).unwrap();
    a.ino
}

fn lines(changes: &[Change]) -> Vec<String> {
    changes
        .iter()
        .map(|c| {
            let p = String::from_utf8_lossy(&c.path).into_owned();
            match &c.to {
                Some(t) => format!("{} {p} -> {}", c.kind.code(), String::from_utf8_lossy(t)),
                None => format!("{} {p}", c.kind.code()),
            }
        })
        .collect()
}

#[test]
fn every_kind_of_change_is_named() {
    let (dev, fs) = volume();
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap().ino;
    let a = file(&fs, ROOT_INO, "a", b"one");
    file(&fs, d, "b", b"bee");
    file(&fs, d, "c", b"sea");
    file(&fs, ROOT_INO, "same", b"untouched");
    fs.snapshot_create(b"s1").unwrap();
    fs.write(a, 0, b"two").unwrap();
    fs.rename(d, b"b", d, b"b2", RenameFlags::default()).unwrap();
    fs.unlink(d, b"c").unwrap();
    file(&fs, d, "e", b"new");
    let x = fs.mkdir(ROOT_INO, b"x", 0o755, 0, 0).unwrap().ino;
    fs.rename(ROOT_INO, b"a", x, b"a", RenameFlags::default())
        .unwrap();
    fs.snapshot_create(b"s2").unwrap();
    let got = lines(&diff(dev.clone(), b"s1", b"s2").unwrap());
    let want = [
        "M /",
        "R /a -> /x/a",
        "M /d",
        "R /d/b -> /d/b2",
        "- /d/c",
        "+ /d/e",
        "+ /x",
    ];
    assert_eq!(got, want);
    // Backwards, every change turns around.
    let back = lines(&diff(dev.clone(), b"s2", b"s1").unwrap());
    assert!(back.contains(&"R /x/a -> /a".to_string()), "{back:?}");
    assert!(
        back.contains(&"+ /d/c".to_string()) && back.contains(&"- /d/e".to_string()),
        "{back:?}"
    );
    assert!(diff(dev.clone(), b"s1", b"s1").unwrap().is_empty());
    assert_eq!(
        diff(dev, b"s1", b"nope").unwrap_err().errno(),
        tux3::Errno::ENOENT
    );
}

#[test]
fn one_change_among_thousands_is_the_only_one() {
    let (dev, fs) = volume();
    // Many big directories: naming the changed file must not walk them.
    let mut inos = Vec::new();
    for k in 0..6 {
        let dir = fs
            .mkdir(ROOT_INO, format!("big{k}").as_bytes(), 0o755, 0, 0)
            .unwrap()
            .ino;
        for i in 0..1000 {
            let ino = file(&fs, dir, &format!("f{i:04}"), format!("data {i}").as_bytes());
            if k == 5 {
                inos.push(ino);
            }
        }
    }
    fs.snapshot_create(b"before").unwrap();
    fs.write(inos[234], 0, b"changed").unwrap();
    fs.snapshot_create(b"after").unwrap();
    let reads = dev.counters().blocks_read;
    let got = lines(&diff(dev.clone(), b"before", b"after").unwrap());
    assert_eq!(got, ["M /big5/f0234"]);
    // The inode tables are compared through the nodes they do not share
    // only, and the file is named through its parent hint: one directory
    // read, not a walk of 6,000 names.
    let read = dev.counters().blocks_read - reads;
    eprintln!("diff read {read} blocks");
    assert!(read < 45, "diff read {read} blocks");
    assert!(diff(dev, b"after", b"before").unwrap().len() == 1);
}
