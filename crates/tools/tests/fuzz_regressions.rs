//! Scenario: every image the fuzzer once crashed on (fuzz/regressions/)
//! now gives errors, never a panic or an abort — open, a full walk with
//! reads and readlinks, changes, sync, close, fsck (with repair) and dump.
//! Files of every `*_image` target are images (`resealed_image` keeps its
//! findings as the mutated image); for `resealed_image` ones the test also
//! runs fsck first and that target's writes and fsyncs.
//! The test profile keeps overflow checks on, as the fuzzer's builds do.

use std::sync::Arc;
use tux3::device::{Device, MemDevice};
use tux3::{FileType, Fs, OpenOptions, ROOT_INO};
use tux3_tools::fsck::{check, FsckOptions};

fn images() -> Vec<(String, Vec<u8>)> {
    // The workspace root holds fuzz/: two levels above this crate.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/regressions");
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

/// What the `resealed_image` target does after its walk: write into the
/// root's regular files (inside and past the end), punch and preallocate in
/// them, read, fsync, and the same on a new file.
fn write_and_fsync(fs: &Fs) {
    let Ok(batch) = fs.readdir(ROOT_INO, 0, 16) else {
        return;
    };
    for e in batch.iter().filter(|e| e.kind == FileType::Regular).take(4) {
        let Ok(a) = fs.getattr(e.ino) else { continue };
        let _ = fs.write(e.ino, 100, b"overwritten");
        let _ = fs.write(e.ino, a.size.saturating_add(3000), b"past the end");
        // fallocate: PUNCH_HOLE | KEEP_SIZE, then KEEP_SIZE.
        let _ = fs.fallocate(e.ino, 0x03, 0, 2048);
        let _ = fs.fallocate(e.ino, 0x01, 0, 8192);
        let _ = fs.read(e.ino, 0, 8192);
        let _ = fs.fsync(e.ino, false);
    }
    if let Ok(a) = fs.create(ROOT_INO, b"resealed-new", 0o644, 0, 0) {
        let _ = fs.write(a.ino, 0, &[5u8; 5000]);
        let _ = fs.fsync(a.ino, false);
        let _ = fs.read(a.ino, 0, 5000);
    }
}

#[test]
fn fuzzer_findings_stay_fixed() {
    for (name, image) in images() {
        let resealed = name.ends_with(".resealed_image.bin");
        if resealed {
            let dev: Arc<dyn Device> = Arc::new(MemDevice::from_image(1024, image.clone()));
            let _ = check(
                dev,
                &FsckOptions {
                    repair: false,
                    progress: false,
                    data: false,
                },
            );
        }
        let mem = Arc::new(MemDevice::from_image(1024, image.clone()));
        let dev: Arc<dyn Device> = mem.clone();
        if let Ok(fs) = Fs::open(dev.clone(), OpenOptions::default()) {
            walk(&fs, ROOT_INO, 0);
            if resealed {
                write_and_fsync(&fs);
            }
            let _ = fs.create(ROOT_INO, b"fuzz-new", 0o644, 0, 0);
            let _ = fs.sync();
            let _ = fs.unify();
            let _ = fs.close();
        }
        let _ = tux3_tools::dump::report(dev.clone());
        let mem = Arc::new(MemDevice::from_image(1024, image));
        let dev: Arc<dyn Device> = mem;
        let _ = check(
            dev.clone(),
            &FsckOptions {
                repair: true,
                progress: false,
                data: false,
            },
        );
        eprintln!("{name}: no panic");
    }
}

/// Superblock counters a commit or unify increments (`unifies`, `seq`,
/// `next_delta`, `log_seq`) set near u64::MAX with valid checksums: open
/// refuses the image with a clear error instead of overflowing at the next
/// unify (found by `make fuzz`: unify_count_overflow.open_image.bin, which
/// needs the fuzzer's reseal option to reach the decoder).
#[test]
fn superblock_counters_near_overflow_are_refused() {
    use tux3::structures::superblock::Superblock;
    use tux3::FormatOptions;
    type Patch = fn(&mut Superblock);
    let patches: [(&str, Patch); 4] = [
        ("unify count", |sb| sb.unifies = u64::MAX),
        ("sequence", |sb| sb.seq = u64::MAX - 1),
        ("next delta", |sb| sb.next_delta = u64::MAX),
        ("log sequence", |sb| sb.log_seq = 1 << 62),
    ];
    for (what, patch) in patches {
        let mem = Arc::new(MemDevice::new(1024, 256));
        let dev: Arc<dyn Device> = mem.clone();
        Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
        let mut sb = Superblock::load(dev.as_ref()).unwrap();
        patch(&mut sb);
        let image = sb.encode();
        let mut block = vec![0u8; 1024];
        block[..image.len()].copy_from_slice(&image);
        for copy in 0..2 {
            dev.write(copy, &block).unwrap();
        }
        let e = match Fs::open(dev.clone(), OpenOptions::default()) {
            Ok(_) => panic!("{what} near overflow: the volume opened"),
            Err(e) => e.to_string(),
        };
        assert!(e.contains("implausible"), "{what}: {e}");
    }
}
