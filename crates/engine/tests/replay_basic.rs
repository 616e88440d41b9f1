//! Scenario: the basic life cycle — format, change, sync, reopen (replay),
//! unify, reopen again, and a crash (drop without close) losing only the
//! uncommitted delta.

use std::sync::Arc;
use tux3::device::{Device, MemDevice};
use tux3::{Errno, FormatOptions, Fs, OpenOptions, RenameFlags, ROOT_INO};

fn fresh(blocks: u64) -> (Arc<MemDevice>, Arc<dyn Device>) {
    let mem = Arc::new(MemDevice::new(4096, blocks));
    let dev: Arc<dyn Device> = mem.clone();
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    (mem, dev)
}

fn open(dev: &Arc<dyn Device>) -> Fs {
    Fs::open(dev.clone(), OpenOptions::default()).unwrap()
}

#[test]
fn write_sync_reopen_unify_crash() {
    let (_mem, dev) = fresh(8192);
    let fs = open(&dev);
    let d = fs.mkdir(ROOT_INO, b"dir", 0o755, 1, 2).unwrap();
    let f = fs.create(d.ino, b"file", 0o644, 1, 2).unwrap();
    let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    fs.write(f.ino, 0, &data).unwrap();
    fs.write(f.ino, 5 << 30, b"far away").unwrap();
    fs.symlink(ROOT_INO, b"link", b"dir/file", 0, 0).unwrap();
    fs.sync().unwrap();
    drop(fs); // crash after sync: everything is there
    let fs = open(&dev);
    let f2 = fs
        .lookup(fs.lookup(ROOT_INO, b"dir").unwrap().ino, b"file")
        .unwrap();
    assert_eq!(f2.ino, f.ino);
    assert_eq!(f2.size, (5 << 30) + 8);
    assert_eq!(fs.read(f.ino, 0, 100_000).unwrap(), data);
    assert_eq!(fs.read(f.ino, 5 << 30, 100).unwrap(), b"far away");
    assert_eq!(fs.read(f.ino, 1 << 30, 4).unwrap(), vec![0; 4]);
    let l = fs.lookup(ROOT_INO, b"link").unwrap();
    assert_eq!(fs.readlink(l.ino).unwrap(), b"dir/file");
    // Unify, then change more and crash without sync: the change is lost.
    fs.unify().unwrap();
    fs.rename(d.ino, b"file", ROOT_INO, b"moved", RenameFlags::default())
        .unwrap();
    drop(fs);
    let fs = open(&dev);
    assert_eq!(fs.lookup(ROOT_INO, b"moved").unwrap_err().errno(), Errno::ENOENT);
    assert_eq!(fs.read(f.ino, 0, 100_000).unwrap(), data);
    fs.rename(d.ino, b"file", ROOT_INO, b"moved", RenameFlags::default())
        .unwrap();
    fs.close().unwrap();
    let fs = open(&dev);
    assert_eq!(fs.lookup(ROOT_INO, b"moved").unwrap().ino, f.ino);
    assert_eq!(fs.lookup(d.ino, b"file").unwrap_err().errno(), Errno::ENOENT);
    fs.unlink(ROOT_INO, b"moved").unwrap();
    fs.close().unwrap();
    let fs = open(&dev);
    assert_eq!(fs.getattr(f.ino).unwrap_err().errno(), Errno::ENOENT);
    fs.close().unwrap();
}

#[test]
fn many_files_across_unifies() {
    let (_mem, dev) = fresh(16384);
    let opts = OpenOptions {
        unify_log_blocks: 4,
        ..OpenOptions::default()
    };
    let fs = Fs::open(dev.clone(), opts.clone()).unwrap();
    for round in 0..20u32 {
        for i in 0..200u32 {
            let name = format!("f{round}-{i}");
            let a = fs.create(ROOT_INO, name.as_bytes(), 0o644, 0, 0).unwrap();
            fs.write(a.ino, 0, name.as_bytes()).unwrap();
        }
        for i in (0..200u32).step_by(3) {
            fs.unlink(ROOT_INO, format!("f{round}-{i}").as_bytes()).unwrap();
        }
        fs.sync().unwrap();
    }
    assert!(fs.stats().unifies > 0);
    drop(fs);
    let fs = Fs::open(dev.clone(), opts).unwrap();
    let mut names = Vec::new();
    let mut pos = 0;
    loop {
        let batch = fs.readdir(ROOT_INO, pos, 500).unwrap();
        let Some(last) = batch.last() else { break };
        pos = last.next;
        names.extend(batch.into_iter().map(|e| (e.name, e.ino)));
    }
    assert_eq!(names.len(), 20 * 133);
    for (name, ino) in names {
        assert_eq!(fs.read(ino, 0, 100).unwrap(), name);
    }
}
