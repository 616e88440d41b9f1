//! Scenario: filling a small volume. The writer gets ENOSPC, everything
//! committed before stays readable after a remount, and deleting files gives
//! the space back.

use std::sync::Arc;
use tux3::device::{Device, MemDevice};
use tux3::{Errno, FormatOptions, Fs, OpenOptions, ROOT_INO};

#[test]
fn enospc_then_delete_gives_space_back() {
    let mem = Arc::new(MemDevice::new(4096, 2048)); // 8 MiB
    let dev: Arc<dyn Device> = mem.clone();
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    let fs = Fs::open(
        dev.clone(),
        OpenOptions {
            dirty_limit: 1 << 20,
            ..OpenOptions::default()
        },
    )
    .unwrap();
    let keep = fs.create(ROOT_INO, b"keep", 0o644, 0, 0).unwrap();
    let precious: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 256) as u8).collect();
    fs.write(keep.ino, 0, &precious).unwrap();
    fs.sync().unwrap();
    let free_before = fs.statfs().unwrap().blocks_free;

    let chunk = vec![0xabu8; 64 * 1024];
    let mut files = Vec::new();
    let mut hit = None;
    'fill: for f in 0..1000u32 {
        let a = match fs.create(ROOT_INO, format!("fill{f}").as_bytes(), 0o644, 0, 0) {
            Ok(a) => a,
            Err(e) => {
                hit = Some(e.errno());
                break;
            }
        };
        files.push(a.ino);
        for k in 0..16u64 {
            if let Err(e) = fs.write(a.ino, k * chunk.len() as u64, &chunk) {
                hit = Some(e.errno());
                break 'fill;
            }
        }
    }
    assert_eq!(hit, Some(Errno::ENOSPC), "the volume never filled");
    // What was accepted can be committed.
    fs.sync().unwrap();
    assert_eq!(fs.read(keep.ino, 0, precious.len()).unwrap(), precious);
    fs.close().unwrap();

    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    assert_eq!(fs.read(keep.ino, 0, precious.len()).unwrap(), precious);
    for f in 0..files.len() {
        fs.unlink(ROOT_INO, format!("fill{f}").as_bytes()).unwrap();
    }
    // Unify so that the log written by the deletes is freed too.
    fs.unify().unwrap();
    let free_after = fs.statfs().unwrap().blocks_free;
    assert!(
        free_after + 16 >= free_before,
        "space not given back: {free_after} free now, {free_before} before filling"
    );
    // And it can be used again.
    let again = fs.create(ROOT_INO, b"again", 0o644, 0, 0).unwrap();
    fs.write(again.ino, 0, &vec![1u8; 1 << 20]).unwrap();
    fs.close().unwrap();
    let report = tux3_tools::fsck::check(dev, &Default::default()).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}
