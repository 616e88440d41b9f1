//! Scenario: where new files' data goes. Files created in two directories
//! by turns, a commit each round, end up with each directory's files
//! together: a new file's goal is the end of the last data written in its
//! directory, not the end of the last data written anywhere. A file
//! written over many deltas, each committed (and fsynced) in turn, lies in
//! at most two runs (its first delta's, then the rest): the deltas' leaves,
//! log blocks and other files' data go outside the room its data continues
//! into. A file appended after a mount goes on near where its data ends.

use std::sync::Arc;
use tux3::device::{Device, MemDevice};
use tux3::structures::inode::InodeAttrs;
use tux3::{FormatOptions, Fs, OpenOptions, ROOT_INO};

/// The device blocks of `ino`'s data, as the closed volume has them.
fn blocks_of(dev: &Arc<dyn Device>, ino: u64) -> Vec<u64> {
    let (mut be, replay) = tux3::backend::Backend::open(dev.clone(), true).unwrap();
    let raw = be.itable.get_mut().get(dev.as_ref(), ino).unwrap().unwrap();
    let attrs = InodeAttrs::decode(&raw, ino, 0, &tux3::structures::bounds(dev.as_ref())).unwrap();
    let mut tree = tux3_tools::datamap::data_tree(&be, ino, &attrs, replay.get(&ino)).unwrap();
    let extents = tux3_tools::datamap::tree_extents(dev.as_ref(), &mut tree).unwrap();
    extents
        .iter()
        .flat_map(|e| e.pblock..e.pblock + e.count)
        .collect()
}

#[test]
fn a_new_file_goes_near_its_directorys_files() {
    let dev: Arc<dyn Device> = Arc::new(MemDevice::new(4096, 8192));
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    let a = fs.mkdir(ROOT_INO, b"a", 0o755, 0, 0).unwrap().ino;
    let b = fs.mkdir(ROOT_INO, b"b", 0o755, 0, 0).unwrap().ino;
    let mut files = Vec::new();
    for i in 0..8u8 {
        let ino = fs.create(a, format!("f{i}").as_bytes(), 0o644, 0, 0).unwrap().ino;
        fs.write(ino, 0, &vec![i; 3 * 4096]).unwrap();
        files.push(ino);
    }
    fs.sync().unwrap();
    // Room among a's files: the blocks of a file deleted there.
    fs.unlink(a, b"f3").unwrap();
    files.remove(3);
    fs.sync().unwrap();
    // Much data elsewhere since.
    let big = fs.create(b, b"big", 0o644, 0, 0).unwrap().ino;
    fs.write(big, 0, &vec![9; 2 << 20]).unwrap();
    fs.sync().unwrap();
    fs.unify().unwrap();
    fs.unify().unwrap();
    let late = fs.create(a, b"late", 0o644, 0, 0).unwrap().ino;
    fs.write(late, 0, &vec![7; 3 * 4096]).unwrap();
    fs.close().unwrap();
    let a_blocks: Vec<u64> = files.iter().flat_map(|&i| blocks_of(&dev, i)).collect();
    let (lo, hi) = (a_blocks.iter().min().copied(), a_blocks.iter().max().copied());
    let (lo, hi) = (lo.unwrap(), hi.unwrap());
    let big_lo = blocks_of(&dev, big).into_iter().min().unwrap();
    assert!(
        hi < big_lo,
        "a's files {lo}..={hi} before the big file at {big_lo}"
    );
    let late = blocks_of(&dev, late);
    assert!(
        late.iter().all(|&x| x > hi && x < big_lo),
        "the late file at {late:?}: near a's files ({lo}..={hi}), not past the big file ({big_lo}..)"
    );
}

/// The device runs of `blocks` (a file's, in file order): (start, length).
fn runs(blocks: &[u64]) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for &b in blocks {
        match out.last_mut() {
            Some((s, n)) if *s + *n == b => *n += 1,
            _ => out.push((b, 1)),
        }
    }
    out
}

#[test]
fn a_file_written_over_many_deltas_lies_in_one_run() {
    for sums in [true, false] {
        let dev: Arc<dyn Device> = Arc::new(MemDevice::new(4096, 16384));
        let opts = FormatOptions {
            data_sums: sums,
            ..FormatOptions::default()
        };
        Fs::format(dev.clone(), &opts).unwrap();
        let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
        let dir = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap().ino;
        // A stream: 256 KiB a delta, each delta committed, with another
        // file of the directory appended and fsynced between.
        let big = fs.create(dir, b"stream", 0o644, 0, 0).unwrap().ino;
        let other = fs.create(dir, b"other", 0o644, 0, 0).unwrap().ino;
        let mut other_end = 0;
        for i in 0..12u64 {
            fs.write(big, i * (256 << 10), &vec![i as u8; 256 << 10]).unwrap();
            fs.sync().unwrap();
            for _ in 0..4 {
                fs.write(other, other_end, &vec![2; 16 << 10]).unwrap();
                fs.fsync(other, false).unwrap();
                other_end += 16 << 10;
            }
            fs.sync().unwrap();
            if i % 4 == 3 {
                fs.unify().unwrap();
            }
        }
        // A log: 16 KiB appended and fsynced at a time, 48 times.
        let log = fs.create(dir, b"log", 0o644, 0, 0).unwrap().ino;
        let mut log_end = 0;
        for i in 0..48 {
            fs.write(log, log_end, &vec![3; 16 << 10]).unwrap();
            fs.fsync(log, false).unwrap();
            log_end += 16 << 10;
            if i % 4 == 3 {
                fs.sync().unwrap();
            }
            if i % 16 == 15 {
                fs.unify().unwrap();
            }
        }
        fs.close().unwrap();
        let stream = blocks_of(&dev, big);
        assert_eq!(stream.len(), 12 * 64);
        // Its first delta's data is not a stream yet (a file written in
        // one delta keeps no room): that delta's metadata may follow it,
        // and the eleven deltas after it lie in one run.
        let pieces = runs(&stream);
        assert!(
            pieces.len() <= 2 && pieces[0].1 >= 64,
            "sums {sums}: the stream in pieces: {pieces:?}"
        );
        let log = blocks_of(&dev, log);
        assert_eq!(log.len() as u64, log_end / 4096);
        assert!(
            runs(&log).len() <= 2,
            "sums {sums}: the log in pieces: {:?}",
            runs(&log)
        );
        let other = blocks_of(&dev, other);
        assert_eq!(other.len() as u64, other_end / 4096);
        assert!(
            runs(&other).len() <= 2,
            "sums {sums}: the other file in pieces: {:?}",
            runs(&other)
        );
    }
}

#[test]
fn a_file_appended_after_a_mount_goes_on_where_it_ends() {
    let dev: Arc<dyn Device> = Arc::new(MemDevice::new(4096, 16384));
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    // A hole near the volume's start: a file written first, then deleted.
    let early = fs.create(ROOT_INO, b"early", 0o644, 0, 0).unwrap().ino;
    fs.write(early, 0, &vec![1; 64 << 10]).unwrap();
    fs.sync().unwrap();
    let log = fs.create(ROOT_INO, b"log", 0o644, 0, 0).unwrap().ino;
    fs.write(log, 0, &vec![2; 64 << 10]).unwrap();
    fs.sync().unwrap();
    fs.unlink(ROOT_INO, b"early").unwrap();
    fs.sync().unwrap();
    fs.unify().unwrap();
    fs.unify().unwrap();
    fs.close().unwrap();
    let before = blocks_of(&dev, log);
    for round in 0..3u64 {
        let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
        let end = (64 << 10) * (round + 1);
        fs.write(log, end, &vec![3; 64 << 10]).unwrap();
        fs.close().unwrap();
    }
    let after = blocks_of(&dev, log);
    assert_eq!(after[..before.len()], before[..]);
    // The three appends are one run, just past the file's first delta and
    // that delta's metadata (not in the hole at the volume's start).
    let appended = runs(&after[before.len()..]);
    let last = before[before.len() - 1];
    assert!(
        appended.len() == 1 && appended[0].0 > last && appended[0].0 <= last + 8,
        "the log after three mounts: {:?}",
        runs(&after)
    );
}

/// Large files written one after another, as `cp` or `dd` write them,
/// each over several deltas, the last delta of one taking the first
/// chunk of the next: each file lies right after the one before (no room
/// kept for a file that is done is left as a gap between them: 1,794 to
/// 2,051 blocks when a new file kept out of every recent stream's room),
/// in at most three runs.
#[test]
fn files_written_one_after_another_lie_one_after_another() {
    let dev: Arc<dyn Device> = Arc::new(MemDevice::new(4096, 32_768));
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    const CHUNK: usize = 256 << 10;
    let mut files = Vec::new();
    let mut written = 0;
    for f in 0..6u8 {
        let ino = fs
            .create(ROOT_INO, format!("f{f}").as_bytes(), 0o644, 0, 0)
            .unwrap()
            .ino;
        for c in 0..16 {
            fs.write(ino, (c * CHUNK) as u64, &vec![f; CHUNK]).unwrap();
            written += 1;
            // A delta every 6 chunks: it ends inside a file, or takes
            // one file's last chunks and the next one's first.
            if written % 6 == 0 {
                fs.sync().unwrap();
            }
        }
        files.push(ino);
    }
    fs.close().unwrap();
    let per_file = 16 * CHUNK as u64 / 4096;
    let mut end_before = None;
    let mut report = Vec::new();
    for &ino in &files {
        let b = blocks_of(&dev, ino);
        assert_eq!(b.len() as u64, per_file);
        let r = runs(&b);
        report.push(r.clone());
        if let Some(end) = end_before {
            let gap = r[0].0.saturating_sub(end);
            assert!(gap <= 64, "a gap of {gap} blocks before the file: {report:?}");
        }
        // Its first delta, the rest, and at most one crossing of a block
        // the log placed ahead of the streams.
        assert!(r.len() <= 3, "{} runs: {report:?}", r.len());
        end_before = Some(r.iter().map(|&(s, n)| s + n).max().unwrap());
    }
}
