//! Scenario: data checksums (format version 4) catch damaged data blocks.
//! Files are written and committed on an in-memory device, the volume is
//! closed, chosen data blocks are damaged on the device (8 bytes flipped),
//! and the volume is opened again: a read touching a damaged block fails
//! with `Error::BadData` (EIO) naming the file, its logical and device block
//! and both checksums, and counted by `Fs::data_errors`; everything else
//! reads back exactly. A partial write into a damaged block fails rather
//! than checksum the damage anew; a snapshot sharing the block is named in
//! the report and its own reads fail too; a preallocated (unwritten) range
//! is never checked; a volume made without checksums returns the damage.
//!
//! Calls the engine API, the extent decoder and the tools' data-map reader
//! (to find each file's blocks as the device holds them).

use std::sync::Arc;
mod sums;

use sums::{extents, open_snapshot};
use tux3::device::{Device, MemDevice};
use tux3::error::BadData;
use tux3::structures::extent::{block_sum, Extent};
use tux3::{Errno, Error, Fs, OpenOptions, ROOT_INO};

const BS: u64 = 4096;
const KEEP_SIZE: i32 = 1;

fn fresh(sums: bool) -> Arc<MemDevice> {
    sums::volume(16384, sums)
}

/// The volume opened, each name of its root looked up (as a mount's
/// lookups come before its reads and writes).
fn open(mem: &Arc<MemDevice>) -> Fs {
    let dev: Arc<dyn Device> = mem.clone();
    let fs = Fs::open(dev, OpenOptions::default()).unwrap();
    for d in fs.readdir(ROOT_INO, 0, 1000).unwrap() {
        if d.name != b"." && d.name != b".." {
            fs.lookup(ROOT_INO, &d.name).unwrap();
        }
    }
    fs
}

/// Flip 8 bytes at `at` in device block `pblock`.
fn damage(mem: &MemDevice, pblock: u64, at: usize) {
    let mut buf = vec![0u8; BS as usize];
    mem.read(pblock, &mut buf).unwrap();
    for b in &mut buf[at..at + 8] {
        *b = !*b;
    }
    mem.write(pblock, &buf).unwrap();
}

/// The written extent of `ino` covering logical block `lblock`.
fn extent_at(mem: &Arc<MemDevice>, ino: u64, lblock: u64) -> Extent {
    extents(mem, ino)
        .into_iter()
        .find(|e| !e.unwritten && e.lblock <= lblock && lblock < e.end())
        .unwrap_or_else(|| panic!("inode {ino}: no written extent at block {lblock}"))
}

fn bad_data(r: tux3::Result<Vec<u8>>) -> BadData {
    match r {
        Err(e) => {
            assert_eq!(e.errno(), Errno::EIO, "{e}");
            match e {
                Error::BadData(b) => *b,
                other => panic!("expected a checksum mismatch, got {other:?}"),
            }
        }
        Ok(d) => panic!("read of a damaged block returned {} bytes", d.len()),
    }
}

/// Bytes of file `i`: lengths from a few bytes to well over one summed
/// extent entry (64 blocks).
fn content(i: u64) -> Vec<u8> {
    let len = match i % 4 {
        0 => 1 + (i * 37 % 200) as usize,
        1 => 3 * BS as usize + 17,
        2 => 90 * BS as usize + 123,
        _ => 20 * BS as usize,
    };
    (0..len)
        .map(|k| (k as u64 * 131 + i * 7 + (k as u64 >> 12)) as u8)
        .collect()
}

/// Files `f0..fn`, unified: the damage done below is then to blocks of
/// the volume's image, not to the last delta of its log (whose blocks the
/// log's own checksums cover: a mismatch there drops the delta at replay).
fn make_files(fs: &Fs, n: u64) -> Vec<u64> {
    let inos = (0..n)
        .map(|i| {
            let a = fs
                .create(ROOT_INO, format!("f{i}").as_bytes(), 0o644, 0, 0)
                .unwrap();
            fs.write(a.ino, 0, &content(i)).unwrap();
            a.ino
        })
        .collect();
    fs.unify().unwrap();
    inos
}

#[test]
fn damaged_blocks_fail_with_eio_naming_the_block() {
    let mem = fresh(true);
    let fs = open(&mem);
    let inos = make_files(&fs, 16);
    fs.close().unwrap();

    // One block of each even-numbered file: its last block (partly
    // beyond the size for most), or block 70 (the second summed entry) of
    // the long ones.
    let mut hit = Vec::new();
    for (i, &ino) in inos.iter().enumerate().filter(|(i, _)| i % 2 == 0) {
        let len = content(i as u64).len() as u64;
        let lblock = if len > 70 * BS { 70 } else { (len - 1) / BS };
        let e = extent_at(&mem, ino, lblock);
        assert!(e.is_summed(), "inode {ino}: extent without checksums {e:?}");
        let pblock = e.physical(lblock);
        damage(&mem, pblock, 8 * (i % 8));
        let mut data = vec![0u8; BS as usize];
        mem.read(pblock, &mut data).unwrap();
        hit.push((
            i as u64,
            ino,
            lblock,
            pblock,
            e.sum_at(lblock).unwrap(),
            block_sum(&data),
        ));
    }

    let fs = open(&mem);
    let mut errors = 0;
    for &(i, ino, lblock, pblock, expected, found) in &hit {
        let want = content(i);
        // The whole file, through both read paths.
        let bad = bad_data(fs.read(ino, 0, want.len() + 10));
        errors += 1;
        assert_eq!(
            bad,
            BadData {
                ino,
                lblock,
                pblock,
                birth: bad.birth,
                expected,
                found
            }
        );
        let mut out = vec![0u8; want.len()];
        let e = fs.read_into(ino, 0, &mut out).unwrap_err();
        errors += 1;
        assert!(matches!(&e, Error::BadData(b) if b.pblock == pblock), "{e:?}");
        // One byte of the damaged block, even one the damage missed.
        let _ = bad_data(fs.read(ino, lblock * BS, 1));
        errors += 1;
        // The rest of the file reads back.
        let before = (lblock * BS) as usize;
        assert_eq!(fs.read(ino, 0, before).unwrap(), want[..before]);
        let after = (((lblock + 1) * BS) as usize).min(want.len());
        assert_eq!(fs.read(ino, after as u64, want.len()).unwrap(), want[after..]);
        // The report names the file by its path.
        let report = fs.bad_data_report(&bad);
        assert_eq!(report.paths, vec![format!("/f{i}").into_bytes()]);
        assert!(report.snapshots.is_empty());
    }
    for (i, &ino) in inos.iter().enumerate().filter(|(i, _)| i % 2 == 1) {
        let want = content(i as u64);
        assert_eq!(fs.read(ino, 0, want.len() + 10).unwrap(), want, "file {i}");
    }
    assert_eq!(fs.data_errors(), errors);
    fs.close().unwrap();
}

#[test]
fn partial_write_into_a_damaged_block_fails() {
    let mem = fresh(true);
    let fs = open(&mem);
    let ino = make_files(&fs, 2)[1];
    fs.close().unwrap();
    let e = extent_at(&mem, ino, 1);
    damage(&mem, e.physical(1), 100);

    let fs = open(&mem);
    let err = fs.write(ino, BS + 10, b"new bytes").unwrap_err();
    assert_eq!(err.errno(), Errno::EIO, "{err}");
    assert!(
        matches!(&err, Error::BadData(b) if b.ino == ino && b.lblock == 1),
        "{err:?}"
    );
    // Committed and opened again, the block is still found bad: the
    // damage was not given a checksum of its own.
    fs.sync().unwrap();
    fs.close().unwrap();
    let fs = open(&mem);
    let _ = bad_data(fs.read(ino, BS, 1));
    // A write of the whole block replaces it, and it reads back.
    let fresh_block = vec![0x5a; BS as usize];
    fs.write(ino, BS, &fresh_block).unwrap();
    fs.close().unwrap();
    let fs = open(&mem);
    assert_eq!(fs.read(ino, BS, BS as usize).unwrap(), fresh_block);
    // The volume keeps its count: the write's mismatch and the read's.
    assert_eq!(fs.data_errors(), 2);
    fs.close().unwrap();
}

#[test]
fn a_snapshot_sharing_the_block_is_named_and_fails_too() {
    let mem = fresh(true);
    let fs = open(&mem);
    let ino = make_files(&fs, 2)[1];
    fs.link(ino, ROOT_INO, b"second name").unwrap();
    fs.sync().unwrap();
    fs.snapshot_create(b"before").unwrap();
    fs.close().unwrap();
    let pblock = extent_at(&mem, ino, 2).physical(2);
    damage(&mem, pblock, 0);

    let fs = open(&mem);
    let bad = bad_data(fs.read(ino, 0, 4 * BS as usize));
    assert_eq!(bad.pblock, pblock);
    let report = fs.bad_data_report(&bad);
    let mut paths = report.paths.clone();
    paths.sort();
    assert_eq!(paths, vec![b"/f1".to_vec(), b"/second name".to_vec()]);
    assert_eq!(report.snapshots, vec![b"before".to_vec()]);
    fs.close().unwrap();

    let snap = open_snapshot(&mem, b"before");
    let a = snap.lookup(ROOT_INO, b"f1").unwrap();
    let bad = bad_data(snap.read(a.ino, 2 * BS, 10));
    assert_eq!(bad.pblock, pblock);
    assert_eq!(snap.data_errors(), 1);
}

#[test]
fn an_unwritten_range_is_never_checked() {
    let mem = fresh(true);
    let fs = open(&mem);
    let a = fs.create(ROOT_INO, b"pre", 0o644, 0, 0).unwrap();
    fs.write(a.ino, 0, &[7u8; BS as usize]).unwrap();
    fs.fallocate(a.ino, KEEP_SIZE, BS, 4 * BS).unwrap();
    fs.setattr(
        a.ino,
        &tux3::SetAttr {
            size: Some(5 * BS),
            ..Default::default()
        },
    )
    .unwrap();
    fs.close().unwrap();
    let pre = extents(&mem, a.ino)
        .into_iter()
        .find(|e| e.unwritten)
        .expect("a preallocated extent");
    assert!(!pre.is_summed());
    for b in 0..pre.count {
        damage(&mem, pre.pblock + b, 0);
    }

    let fs = open(&mem);
    let mut want = vec![7u8; BS as usize];
    want.resize(5 * BS as usize, 0);
    assert_eq!(fs.read(a.ino, 0, want.len()).unwrap(), want);
    // A partial write into it keeps zeros around the new bytes.
    fs.write(a.ino, 2 * BS + 5, b"abc").unwrap();
    want[2 * BS as usize + 5..2 * BS as usize + 8].copy_from_slice(b"abc");
    fs.close().unwrap();
    let fs = open(&mem);
    assert_eq!(fs.read(a.ino, 0, want.len()).unwrap(), want);
    assert_eq!(fs.data_errors(), 0);
    fs.close().unwrap();
}

#[test]
fn a_volume_without_checksums_returns_the_damage() {
    let mem = fresh(false);
    let fs = open(&mem);
    let inos = make_files(&fs, 4);
    fs.close().unwrap();
    let mut want = content(2);
    for e in extents(&mem, inos[2]) {
        assert!(!e.is_summed(), "{e:?}");
    }
    let pblock = extent_at(&mem, inos[2], 3).physical(3);
    damage(&mem, pblock, 16);
    for b in &mut want[3 * BS as usize + 16..3 * BS as usize + 24] {
        *b = !*b;
    }

    let fs = open(&mem);
    assert_eq!(fs.read(inos[2], 0, want.len()).unwrap(), want);
    assert_eq!(fs.data_errors(), 0);
    fs.close().unwrap();
}

#[test]
fn a_read_across_summed_entries_is_one_device_read() {
    // 256 blocks written in one delta: contiguous on the device, stored as
    // four entries of 64 summed blocks.
    let mem = fresh(true);
    let fs = open(&mem);
    let a = fs.create(ROOT_INO, b"long", 0o644, 0, 0).unwrap();
    let want: Vec<u8> = (0..256 * BS).map(|k| (k % 251) as u8).collect();
    fs.write(a.ino, 0, &want).unwrap();
    fs.close().unwrap();
    let map = extents(&mem, a.ino);
    assert_eq!(map.len(), 4, "{map:?}");
    assert!(map.windows(2).all(|w| w[0].pblock + w[0].count == w[1].pblock));

    let fs = open(&mem);
    // The first read loads the inode and its map.
    assert_eq!(fs.read(a.ino, 0, 1).unwrap(), want[..1]);
    let before = fs.counters();
    let got = fs.read(a.ino, BS, 255 * BS as usize).unwrap();
    let after = fs.counters();
    assert!(got == want[BS as usize..], "the read differs");
    assert_eq!(after.blocks_read - before.blocks_read, 255);
    assert_eq!(
        after.reads - before.reads,
        1,
        "device reads for 255 contiguous blocks"
    );
    fs.close().unwrap();
}
