//! Scenario: filling a small volume. The writer gets ENOSPC, everything
//! committed before stays readable after a remount, and deleting files gives
//! the space back — also when the file deleted on the full volume is in
//! hundreds of extents spread over the volume and a unify follows at once.

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

/// Two files written a block at a time in turn fill the volume, so each is
/// in hundreds of one-block extents across it. On the full volume, unlink
/// one and unify at once (its frees touch every bitmap block and are not
/// free space until a commit is durable): both work, the space comes
/// back, fsck is clean.
#[test]
fn a_fragmented_file_deleted_on_a_full_volume_then_a_unify() {
    const BS: usize = 1024;
    let dev: Arc<dyn Device> = Arc::new(MemDevice::new(BS as u32, 8192));
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    let opts = || OpenOptions {
        dirty_limit: 64 << 10,
        ..OpenOptions::default()
    };
    let fs = Fs::open(dev.clone(), opts()).unwrap();
    let a = fs.create(ROOT_INO, b"a", 0o644, 0, 0).unwrap().ino;
    let b = fs.create(ROOT_INO, b"b", 0o644, 0, 0).unwrap().ino;
    let mut at = 0;
    'fill: loop {
        for (k, ino) in [a, b].into_iter().enumerate() {
            // Each delta commit allocates both files' new blocks in turn.
            if let Err(e) = fs.write(ino, at, &[k as u8 + 1; BS]) {
                assert_eq!(e.errno(), Errno::ENOSPC);
                break 'fill;
            }
            if at % (BS as u64) == 0 {
                fs.sync().unwrap();
            }
        }
        at += BS as u64;
    }
    fs.sync().unwrap();
    let full = fs.statfs().unwrap();
    assert!(full.blocks_avail < 16, "not full: {full:?}");
    let size_b = fs.getattr(b).unwrap().size;
    fs.unlink(ROOT_INO, b"a").unwrap();
    fs.unify().unwrap();
    let after = fs.statfs().unwrap();
    assert!(
        after.blocks_free > full.blocks_free + 1000,
        "space not back: {after:?}, full: {full:?}"
    );
    fs.close().unwrap();
    let report = tux3_tools::fsck::check(dev.clone(), &Default::default()).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    let fs = Fs::open(dev, opts()).unwrap();
    let data = fs.read(b, 0, size_b as usize).unwrap();
    assert!(data.iter().all(|&x| x == 2), "b changed");
    fs.close().unwrap();
}
