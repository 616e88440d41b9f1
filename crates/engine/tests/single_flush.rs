//! Single-flush delta commits: a small delta is written with one flush, its
//! data and leaf blocks proven by `BlockSum` records in its log. A crash
//! that lands the commit block but not every other block must leave the
//! volume as it was before the delta (replay drops it), fsck must say why in
//! a note, and the next session must go on writing the log cleanly.

use std::sync::Arc;
use tux3::device::recording::apply;
use tux3::device::{Device, MemDevice, RecordedOp, RecordingDevice};
use tux3::{FormatOptions, Fs, OpenOptions, ROOT_INO};
use tux3_tools::fsck;

const BS: u32 = 4096;

fn open(dev: &Arc<dyn Device>) -> Fs {
    Fs::open(dev.clone(), OpenOptions::default()).unwrap()
}

/// A volume holding `old` (synced), then the ops of one more sync that
/// writes `new` over it and adds `extra`: (image before that sync, its ops).
fn base_and_delta() -> (Vec<u8>, Vec<RecordedOp>) {
    let mem = Arc::new(MemDevice::new(BS, 4096));
    let rec = Arc::new(RecordingDevice::new(mem.clone()));
    let dev: Arc<dyn Device> = rec.clone();
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    let fs = open(&dev);
    let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap();
    fs.write(f.ino, 0, &[1u8; 10_000]).unwrap();
    fs.sync().unwrap();
    let before = mem.image();
    rec.clear();
    fs.write(f.ino, 0, &[2u8; 10_000]).unwrap();
    let e = fs.create(ROOT_INO, b"extra", 0o644, 0, 0).unwrap();
    fs.write(e.ino, 0, b"extra data").unwrap();
    fs.sync().unwrap();
    let ops = rec.take_ops();
    drop(fs);
    (before, ops)
}

fn writes(ops: &[RecordedOp]) -> Vec<(u64, Vec<u8>)> {
    ops.iter()
        .filter_map(|op| match op {
            RecordedOp::Write { block, data } => Some((*block, data.clone())),
            RecordedOp::Flush | RecordedOp::Discard { .. } => None,
        })
        .collect()
}

#[test]
fn a_small_delta_commits_with_one_flush() {
    let (_, ops) = base_and_delta();
    let flushes = ops.iter().filter(|op| matches!(op, RecordedOp::Flush)).count();
    assert_eq!(flushes, 1, "the small delta's commit flushed {flushes} times");
    // Several blocks besides the log: data of both files and leaves.
    assert!(writes(&ops).len() >= 4, "{} blocks written", writes(&ops).len());
}

/// Every crash image that holds the commit block but misses one other block
/// of the delta reads back as the state before the delta.
#[test]
fn a_commit_block_without_its_blocks_is_dropped() {
    let (before, ops) = base_and_delta();
    let all = writes(&ops);
    // The commit block is the one written last.
    let (commit_at, _) = all.last().cloned().unwrap();
    let mut dropped = 0;
    for (skip, (block, _)) in all.iter().enumerate() {
        if *block == commit_at {
            continue;
        }
        let mut img = before.clone();
        let kept: Vec<RecordedOp> = all
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != skip)
            .map(|(_, (b, d))| RecordedOp::Write {
                block: *b,
                data: d.clone(),
            })
            .collect();
        apply(&kept, &mut img, BS);
        let dev: Arc<dyn Device> = Arc::new(MemDevice::from_image(BS, img));
        let r = fsck::check(dev.clone(), &Default::default()).unwrap();
        assert!(r.problems.is_empty(), "block {block} missing: {:?}", r.problems);
        let fs = open(&dev);
        let f = fs.lookup(ROOT_INO, b"f").unwrap();
        let data = fs.read(f.ino, 0, 10_000).unwrap();
        let extra = fs.lookup(ROOT_INO, b"extra").is_ok();
        if data == vec![1u8; 10_000] {
            // The delta is gone in full: no new file either.
            assert!(!extra, "block {block} missing: old data but the new file exists");
            dropped += 1;
            let named = r.notes.iter().any(|n| n.contains(&format!("block {block} ")));
            // A missing log block ends the chain before the commit block;
            // a missing data or leaf block is named by its checksum.
            assert!(
                named || r.notes.iter().all(|n| !n.contains("not part of the volume")),
                "block {block} missing: notes {:?}",
                r.notes
            );
        } else {
            panic!(
                "block {block} missing, yet the delta was replayed: data {:?}",
                &data[..4]
            );
        }
        // The next session writes the log from where the old delta began.
        fs.write(f.ino, 0, b"after").unwrap();
        fs.sync().unwrap();
        drop(fs);
        let fs = open(&dev);
        let f = fs.lookup(ROOT_INO, b"f").unwrap();
        assert_eq!(fs.read(f.ino, 0, 5).unwrap(), b"after");
        let r = fsck::check(dev.clone(), &Default::default()).unwrap();
        assert!(r.problems.is_empty(), "after the next session: {:?}", r.problems);
        fs.close().unwrap();
    }
    assert!(dropped >= 3, "only {dropped} crash images tested");
    // And with every block there, the delta is whole.
    let mut img = before;
    apply(&ops, &mut img, BS);
    let dev: Arc<dyn Device> = Arc::new(MemDevice::from_image(BS, img));
    let fs = open(&dev);
    let f = fs.lookup(ROOT_INO, b"f").unwrap();
    assert_eq!(fs.read(f.ino, 0, 10_000).unwrap(), vec![2u8; 10_000]);
    assert!(fs.lookup(ROOT_INO, b"extra").is_ok());
}
