//! Scenario: every image the fuzzer once crashed on (fuzz/regressions/)
//! now gives errors, never a panic or an abort — open, a full walk with
//! reads and readlinks, changes, sync, close, fsck (with repair) and dump.
//! The test profile keeps overflow checks on, as the fuzzer's builds do.

use std::sync::Arc;
use tux3::device::{Device, MemDevice};
use tux3::tools::fsck::{check, FsckOptions};
use tux3::{FileType, Fs, OpenOptions, ROOT_INO};

fn images() -> Vec<(String, Vec<u8>)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/regressions");
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        if name.ends_with("_image.bin") {
            let mut b = std::fs::read(&p).unwrap();
            b.truncate(b.len() / 1024 * 1024);
            out.push((name, b));
        }
    }
    assert!(!out.is_empty());
    out
}

fn walk(fs: &Fs, ino: u64, depth: usize) {
    if depth > 64 {
        return;
    }
    let mut pos = 0;
    for _ in 0..1000 {
        let Ok(batch) = fs.readdir(ino, pos, 100) else {
            return;
        };
        let Some(last) = batch.last() else { return };
        pos = last.next;
        for e in &batch {
            let _ = fs.getattr(e.ino);
            let _ = fs.listxattr(e.ino);
            match e.kind {
                FileType::Directory => walk(fs, e.ino, depth + 1),
                FileType::Symlink => drop(fs.readlink(e.ino)),
                FileType::Regular => drop(fs.read(e.ino, 0, 1 << 20)),
                _ => {}
            }
        }
    }
}

#[test]
fn fuzzer_findings_stay_fixed() {
    for (name, image) in images() {
        let mem = Arc::new(MemDevice::from_image(1024, image.clone()));
        let dev: Arc<dyn Device> = mem.clone();
        if let Ok(fs) = Fs::open(dev.clone(), OpenOptions::default()) {
            walk(&fs, ROOT_INO, 0);
            let _ = fs.create(ROOT_INO, b"fuzz-new", 0o644, 0, 0);
            let _ = fs.sync();
            let _ = fs.unify();
            let _ = fs.close();
        }
        let _ = tux3::tools::dump::report(dev.clone());
        let mem = Arc::new(MemDevice::from_image(1024, image));
        let dev: Arc<dyn Device> = mem;
        let _ = check(
            dev.clone(),
            &FsckOptions {
                repair: true,
                progress: false,
            },
        );
        eprintln!("{name}: no panic");
    }
}
