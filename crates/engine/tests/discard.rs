//! Scenario: blocks free for good go back to the device, and no other.
//! With online discard, deleting a file and committing punches its blocks
//! out of the image file (the host's allocated size drops); blocks a
//! snapshot holds stay until the snapshot is deleted and reclaimed; a trim
//! discards the free space of a volume mounted without it. A model run
//! checks after every commit and trim that no discarded block is one the
//! volume refers to (fsck's reference walk).

use proptest::prelude::*;
use std::os::unix::fs::MetadataExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::sync::Arc;
use tux3::device::{Device, FileDevice, MemDevice, RecordedOp, RecordingDevice};
use tux3::{Errno, FormatOptions, Fs, OpenOptions, ROOT_INO};

const BS: u32 = 4096;
const MIB: u64 = 1 << 20;

/// Bytes the host holds for the file at `path` (`st_blocks`).
fn allocated(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().blocks() * 512
}

/// Bytes of the file at `path` in data segments, by SEEK_DATA/SEEK_HOLE.
fn data_bytes(path: &Path) -> u64 {
    let f = std::fs::File::open(path).unwrap();
    let size = f.metadata().unwrap().len() as i64;
    let (mut at, mut total) = (0i64, 0u64);
    while at < size {
        // SAFETY: lseek takes plain integers on a descriptor we own.
        let data = unsafe { libc::lseek(f.as_raw_fd(), at, libc::SEEK_DATA) };
        if data < 0 {
            break; // ENXIO: no data after `at`
        }
        // SAFETY: as above.
        let hole = unsafe { libc::lseek(f.as_raw_fd(), data, libc::SEEK_HOLE) };
        total += (hole - data) as u64;
        at = hole;
    }
    total
}

/// A fresh image file of `size` bytes, formatted, and its device; `None`
/// where the host cannot punch holes (nothing to check there).
fn image(dir: &Path, size: u64) -> Option<(std::path::PathBuf, Arc<dyn Device>)> {
    let path = dir.join("img");
    tux3::device::file::create_image(&path, size).unwrap();
    let file = FileDevice::open(&path, BS, true).unwrap();
    file.discard(0, 1).ok()?;
    let dev: Arc<dyn Device> = Arc::new(file);
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    Some((path, dev))
}

fn opts(discard: bool) -> OpenOptions {
    OpenOptions {
        discard,
        dirty_limit: 4 * MIB,
        ..OpenOptions::default()
    }
}

/// Write `len` bytes of a pattern to a new file `name`.
fn write_file(fs: &Fs, name: &[u8], len: u64) -> u64 {
    let a = fs.create(ROOT_INO, name, 0o644, 0, 0).unwrap();
    let chunk: Vec<u8> = (0..MIB as usize).map(|i| (i % 251) as u8 + 1).collect();
    let mut at = 0;
    while at < len {
        let n = chunk.len().min((len - at) as usize);
        fs.write(a.ino, at, &chunk[..n]).unwrap();
        at += n as u64;
    }
    a.ino
}

#[test]
fn deleting_a_file_punches_its_blocks_out_of_the_image() {
    let dir = tempfile::tempdir().unwrap();
    let Some((path, dev)) = image(dir.path(), 64 * MIB) else {
        return;
    };
    let fs = Fs::open(dev.clone(), opts(true)).unwrap();
    write_file(&fs, b"big", 16 * MIB);
    fs.sync().unwrap();
    let (before, data_before) = (allocated(&path), data_bytes(&path));
    assert!(before >= 16 * MIB, "{before}");
    fs.unlink(ROOT_INO, b"big").unwrap();
    fs.sync().unwrap();
    let (after, data_after) = (allocated(&path), data_bytes(&path));
    let want = 16 * MIB * 9 / 10;
    assert!(before - after >= want, "allocated {before} -> {after}");
    assert!(
        data_before - data_after >= want,
        "data {data_before} -> {data_after}"
    );
    assert!(dev.counters().blocks_discarded >= 16 * MIB / BS as u64 * 9 / 10);
    fs.close().unwrap();
    let r = tux3_tools::fsck::check(dev, &Default::default()).unwrap();
    assert!(r.problems.is_empty(), "{:?}", r.problems);
}

#[test]
fn blocks_a_snapshot_holds_wait_for_its_reclaim() {
    let dir = tempfile::tempdir().unwrap();
    let Some((path, file)) = image(dir.path(), 64 * MIB) else {
        return;
    };
    let rec = Arc::new(RecordingDevice::new(file));
    let dev: Arc<dyn Device> = rec.clone();
    let mut discarded = Discarded::default();
    let fs = Fs::open(dev.clone(), opts(true)).unwrap();
    write_file(&fs, b"kept", 8 * MIB);
    fs.sync().unwrap();
    fs.snapshot_create(b"s").unwrap();
    let before = allocated(&path);
    fs.unlink(ROOT_INO, b"kept").unwrap();
    fs.sync().unwrap();
    fs.unify().unwrap();
    let held = allocated(&path);
    assert!(
        before - held.min(before) < MIB,
        "the snapshot's blocks went: {before} -> {held}"
    );
    discarded.check(&rec, &dev);
    // The snapshot still reads whole.
    fs.close().unwrap();
    {
        let snap = Fs::open(
            dev.clone(),
            OpenOptions {
                read_only: true,
                snapshot: Some(b"s".to_vec()),
                ..OpenOptions::default()
            },
        )
        .unwrap();
        let a = snap.lookup(ROOT_INO, b"kept").unwrap();
        let got = snap.read(a.ino, 0, 8 * MIB as usize).unwrap();
        assert!(got
            .iter()
            .enumerate()
            .all(|(i, &b)| b == (i % MIB as usize % 251) as u8 + 1));
    }
    let fs = Fs::open(dev.clone(), opts(true)).unwrap();
    fs.snapshot_delete(b"s").unwrap();
    fs.snapshot_reclaim(&mut |_| ()).unwrap();
    fs.sync().unwrap();
    let after = allocated(&path);
    assert!(held - after >= 8 * MIB * 9 / 10, "reclaimed: {held} -> {after}");
    discarded.check(&rec, &dev);
    fs.close().unwrap();
}

/// Blocks whose last change on the device was a discard (not written
/// since), from the recording device's log.
#[derive(Default)]
struct Discarded(std::collections::BTreeSet<u64>);

impl Discarded {
    /// Take in the operations logged since the last call, and check that
    /// the volume refers to none of the discarded blocks now.
    fn check(&mut self, rec: &RecordingDevice, dev: &Arc<dyn Device>) {
        for op in rec.take_ops() {
            match op {
                RecordedOp::Write { block, .. } => {
                    self.0.remove(&block);
                }
                RecordedOp::Discard { start, count } => self.0.extend(start..start + count),
                RecordedOp::Flush => {}
            }
        }
        let refs = tux3_tools::fsck::referenced_blocks(dev.clone()).unwrap();
        for (s, c) in refs {
            if let Some(b) = self.0.range(s..s + c).next() {
                panic!("block {b} was discarded, and the volume refers to {s}+{c}");
            }
        }
    }
}

#[test]
fn trim_discards_the_free_space_of_a_volume_without_online_discard() {
    let dir = tempfile::tempdir().unwrap();
    let Some((path, dev)) = image(dir.path(), 64 * MIB) else {
        return;
    };
    let probed = dev.counters().discards;
    let fs = Fs::open(dev.clone(), opts(false)).unwrap();
    write_file(&fs, b"a", 16 * MIB);
    write_file(&fs, b"b", 4 * MIB);
    fs.sync().unwrap();
    fs.unlink(ROOT_INO, b"a").unwrap();
    fs.sync().unwrap();
    let before = allocated(&path);
    assert_eq!(dev.counters().discards, probed, "no online discard");
    assert!(before >= 20 * MIB);
    let mut steps = 0;
    let r = fs.trim(0, u64::MAX, 0, &mut |_, _| steps += 1).unwrap();
    assert!(steps >= 1);
    assert_eq!(r.scanned, 64 * MIB);
    assert!(r.bytes >= 16 * MIB * 9 / 10, "{r:?}");
    assert!(r.bytes <= 64 * MIB - 4 * MIB, "{r:?}");
    let after = allocated(&path);
    assert!(before - after >= 16 * MIB * 9 / 10, "{before} -> {after}");
    // "b" is whole.
    let b = fs.lookup(ROOT_INO, b"b").unwrap();
    let got = fs.read(b.ino, 0, 4 * MIB as usize).unwrap();
    assert!(got
        .iter()
        .enumerate()
        .all(|(i, &x)| x == (i % MIB as usize % 251) as u8 + 1));
    // Bad ranges.
    let err = |r: tux3::Result<tux3::api::TrimReport>| r.unwrap_err().errno();
    assert_eq!(err(fs.trim(64 * MIB, 1, 0, &mut |_, _| ())), Errno::EINVAL);
    assert_eq!(err(fs.trim(0, u64::MAX, 65 * MIB, &mut |_, _| ())), Errno::EINVAL);
    fs.close().unwrap();
    let ro = Fs::open(
        dev.clone(),
        OpenOptions {
            read_only: true,
            ..OpenOptions::default()
        },
    )
    .unwrap();
    assert_eq!(err(ro.trim(0, u64::MAX, 0, &mut |_, _| ())), Errno::EROFS);
    drop(ro);
    let r = tux3_tools::fsck::check(dev, &Default::default()).unwrap();
    assert!(r.problems.is_empty(), "{:?}", r.problems);
}

/// A device that cannot discard: online discard is silent about it past
/// the first time and the volume works; a trim says ENOTSUP.
#[test]
fn a_device_that_cannot_discard_is_no_error() {
    struct NoDiscard(MemDevice);
    impl Device for NoDiscard {
        fn block_size(&self) -> u32 {
            self.0.block_size()
        }
        fn block_count(&self) -> u64 {
            self.0.block_count()
        }
        fn read(&self, b: u64, buf: &mut [u8]) -> std::io::Result<()> {
            self.0.read(b, buf)
        }
        fn write(&self, b: u64, buf: &[u8]) -> std::io::Result<()> {
            self.0.write(b, buf)
        }
        fn flush(&self) -> std::io::Result<()> {
            self.0.flush()
        }
        fn counters(&self) -> tux3::device::CounterSnapshot {
            self.0.counters()
        }
    }
    let dev: Arc<dyn Device> = Arc::new(NoDiscard(MemDevice::new(BS, 4096)));
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    let fs = Fs::open(dev.clone(), opts(true)).unwrap();
    for _ in 0..3 {
        write_file(&fs, b"f", MIB);
        fs.sync().unwrap();
        fs.unlink(ROOT_INO, b"f").unwrap();
        fs.sync().unwrap();
    }
    let e = fs.trim(0, u64::MAX, 0, &mut |_, _| ()).unwrap_err();
    assert_eq!(e.errno(), Errno::ENOTSUP);
    fs.close().unwrap();
}

/// One step of the model run.
#[derive(Debug, Clone)]
enum Step {
    Write(u8, u16),
    Delete(u8),
    Sync,
    Snapshot,
    DropSnapshot,
    Trim(u8),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0u8..6, 1u16..200).prop_map(|(f, k)| Step::Write(f, k)),
        3 => (0u8..6).prop_map(Step::Delete),
        3 => Just(Step::Sync),
        1 => Just(Step::Snapshot),
        1 => Just(Step::DropSnapshot),
        1 => (0u8..4).prop_map(Step::Trim),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Whatever the files, snapshots and trims, no block discarded by a
    /// commit or a trim is referenced by the volume just after it; a
    /// trim discards only runs of its minimum length; the volume stays
    /// clean for fsck.
    #[test]
    fn no_referenced_block_is_ever_discarded(steps in proptest::collection::vec(step(), 1..24)) {
        let mem = Arc::new(MemDevice::new(BS, 4096));
        let rec = Arc::new(RecordingDevice::new(mem));
        let dev: Arc<dyn Device> = rec.clone();
        Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
        let fs = Fs::open(dev.clone(), OpenOptions { discard: true, dirty_limit: MIB, unify_log_blocks: 8, ..OpenOptions::default() }).unwrap();
        let mut snaps = Vec::new();
        let mut next_snap = 0;
        let mut discarded = Discarded::default();
        for s in steps {
            match s {
                Step::Write(f, k) => {
                    let name = format!("f{f}");
                    let ino = match fs.lookup(ROOT_INO, name.as_bytes()) {
                        Ok(a) => a.ino,
                        Err(_) => fs.create(ROOT_INO, name.as_bytes(), 0o644, 0, 0).unwrap().ino,
                    };
                    let data = vec![f.wrapping_add(k as u8); k as usize * 1024];
                    match fs.write(ino, (k as u64 % 7) * 8192, &data) {
                        Ok(_) => {}
                        Err(e) => prop_assert_eq!(e.errno(), Errno::ENOSPC),
                    }
                }
                Step::Delete(f) => {
                    let _ = fs.unlink(ROOT_INO, format!("f{f}").as_bytes());
                }
                Step::Sync => {
                    fs.sync().unwrap();
                    discarded.check(&rec, &dev);
                }
                Step::Snapshot => {
                    let name = format!("s{next_snap}");
                    next_snap += 1;
                    if fs.snapshot_create(name.as_bytes()).is_ok() {
                        snaps.push(name);
                    }
                    discarded.check(&rec, &dev);
                }
                Step::DropSnapshot => {
                    if let Some(name) = snaps.pop() {
                        fs.snapshot_delete(name.as_bytes()).unwrap();
                        fs.snapshot_reclaim(&mut |_| ()).unwrap();
                        discarded.check(&rec, &dev);
                    }
                }
                Step::Trim(m) => {
                    let min = [0u64, 1, 3, 17][m as usize];
                    // Commit first, so the trim's sync has nothing to do
                    // and every discard logged next is the trim's.
                    fs.sync().unwrap();
                    discarded.check(&rec, &dev);
                    let r = fs.trim(0, u64::MAX, min * BS as u64, &mut |_, _| ()).unwrap();
                    let trimmed: Vec<u64> = rec.ops().iter().filter_map(|o| match o {
                        RecordedOp::Discard { count, .. } => Some(*count),
                        _ => None,
                    }).collect();
                    prop_assert_eq!(trimmed.iter().sum::<u64>() * BS as u64, r.bytes);
                    prop_assert!(trimmed.iter().all(|&c| c >= min.max(1)), "{:?} min {}", trimmed, min);
                    discarded.check(&rec, &dev);
                }
            }
        }
        fs.close().unwrap();
        discarded.check(&rec, &dev);
        let r = tux3_tools::fsck::check(dev, &Default::default()).unwrap();
        prop_assert!(r.problems.is_empty(), "{:?}", r.problems);
    }
}
