//! Scenario: clones and dedupe share blocks. A clone reads as its source,
//! takes no data blocks, and the two diverge correctly under writes; a
//! shared block comes free only when its last reference goes; the table
//! survives replay and unify, and fsck counts every reference.

use std::sync::Arc;
mod sums;
use tux3::device::{Device, MemDevice};
use tux3::{FormatOptions, Fs, Ino, OpenOptions, ROOT_INO};

const BS: u64 = 4096;

fn fsck(mem: &Arc<MemDevice>) {
    let r = tux3_tools::fsck::check(mem.clone(), &Default::default()).unwrap();
    assert!(r.problems.is_empty(), "fsck: {:?}", r.problems);
}

fn volume(blocks: u64) -> (Arc<MemDevice>, Fs) {
    let mem = Arc::new(MemDevice::new(BS as u32, blocks));
    let dev: Arc<dyn Device> = mem.clone();
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    (mem, Fs::open(dev, OpenOptions::default()).unwrap())
}

fn reopen(mem: &Arc<MemDevice>) -> Fs {
    Fs::open(mem.clone(), OpenOptions::default()).unwrap()
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 12) as u8)
        .collect()
}

fn free(fs: &Fs) -> u64 {
    fs.statfs().unwrap().blocks_free
}

fn file(fs: &Fs, name: &str) -> Ino {
    fs.create(ROOT_INO, name.as_bytes(), 0o644, 0, 0).unwrap().ino
}

/// `data` written to a new file "a" and committed, then a clone of it as
/// "b", committed: (a, b, blocks the clone took).
fn write_and_clone(fs: &Fs, data: &[u8]) -> (Ino, Ino, u64) {
    let a = file(fs, "a");
    fs.write(a, 0, data).unwrap();
    fs.sync().unwrap();
    let before = free(fs);
    let b = file(fs, "b");
    assert_eq!(fs.clone_range(a, 0, b, 0, u64::MAX).unwrap(), data.len() as u64);
    fs.sync().unwrap();
    (a, b, before - free(fs))
}

#[test]
fn a_clone_takes_no_data_blocks_and_diverges_correctly() {
    let (mem, fs) = volume(16384);
    let len = 2 * 1024 * 1024 + 1234;
    let mut a_model = pattern(1, len);
    let (a, b, used) = write_and_clone(&fs, &a_model);
    assert!(used < 16, "a clone of {len} bytes took {used} blocks");
    let s = fs.sharing();
    assert_eq!(s.saved_blocks, (len as u64).div_ceil(BS), "{s:?}");
    let mut b_model = a_model.clone();
    assert_eq!(fs.read(b, 0, len + 10).unwrap(), b_model);
    // Writes to either side change only that side.
    for (i, on_a) in [true, false, true].into_iter().enumerate() {
        let off = 5000 + i * 300_000;
        let data = pattern(50 + i as u8, 70_000);
        let (ino, model) = if on_a {
            (a, &mut a_model)
        } else {
            (b, &mut b_model)
        };
        fs.write(ino, off as u64, &data).unwrap();
        model[off..off + data.len()].copy_from_slice(&data);
    }
    fs.sync().unwrap();
    assert_eq!(fs.read(a, 0, len).unwrap(), a_model);
    assert_eq!(fs.read(b, 0, len).unwrap(), b_model);
    fs.close().unwrap();
    fsck(&mem);
    let fs = reopen(&mem);
    assert_eq!(fs.read(a, 0, len).unwrap(), a_model);
    assert_eq!(fs.read(b, 0, len).unwrap(), b_model);
    fs.unify().unwrap();
    fs.close().unwrap();
    fsck(&mem);
    let dump = tux3_tools::dump::report(mem.clone()).unwrap();
    assert!(dump.contains("SHARED_EXTENTS"), "{dump}");
    assert!(dump.contains("blocks saved by sharing"), "{dump}");
    assert!(dump.contains(": 2 references"), "{dump}");
}

/// A clone of a file of many summed extents (64 blocks each at most)
/// keeps their checksums once, in the checksum table, and maps each
/// physically contiguous run with one entry: its map fits the inode
/// record. The first clone costs one copy of the checksums (the table's
/// leaves); every further clone costs no block at all once unified (each
/// took a copy of the source's 19 leaves of summed extents before).
/// Replay after a crash gives the same map, table and reference counts.
#[test]
fn a_clone_of_many_summed_extents_keeps_their_checksums_once() {
    let (mem, fs) = volume(40_000);
    let len = 16_384 * BS as usize;
    let data = pattern(7, len);
    let (a, b, used) = write_and_clone(&fs, &data);
    // 256 chunks of checksums, 15 to a leaf, in the log.
    assert!(used <= 25, "the first clone took {used} blocks");
    assert_eq!(fs.sharing().saved_blocks, 16_384);
    assert_eq!(fs.sharing().table_sums, 16_384);
    fs.unify().unwrap();
    let before = free(&fs);
    let clones: Vec<Ino> = (0..8)
        .map(|i| {
            let c = file(&fs, &format!("c{i}"));
            fs.clone_range(a, 0, c, 0, u64::MAX).unwrap();
            c
        })
        .collect();
    fs.unify().unwrap();
    let more = before - free(&fs);
    assert!(more <= 1, "8 more clones took {more} blocks");
    assert_eq!(fs.sharing().table_sums, 16_384);
    let c = clones[3];
    fs.clone_range(a, 0, c, 0, u64::MAX).unwrap();
    // Not closed: the last clone is replayed from the log.
    drop(fs);
    let fs = reopen(&mem);
    assert_eq!(fs.read(b, 0, len).unwrap(), data);
    assert_eq!(fs.read(c, 0, len).unwrap(), data);
    assert_eq!(fs.sharing().saved_blocks, 9 * 16_384);
    assert_eq!(fs.sharing().table_sums, 16_384);
    fs.close().unwrap();
    fsck(&mem);
    for ino in [b, c] {
        let map = sums::extents(&mem, ino);
        assert_eq!(map.len(), 1, "{map:?}");
        assert!(map[0].table_sums && map[0].sums.is_empty(), "{map:?}");
    }
}

/// A damaged block that clones share fails the reads of every file that
/// maps it, the source (checksum in its extent) and the clones (checksum
/// in the table) alike; the other blocks read back. Once every file that
/// maps the blocks is gone, so are their checksums, and fsck finds the
/// table clean.
#[test]
fn a_clones_damaged_block_fails_its_reads_and_its_checksums_go_with_the_blocks() {
    let (mem, fs) = volume(16384);
    let len = 300 * BS as usize;
    let data = pattern(9, len);
    let (a, b, _) = write_and_clone(&fs, &data);
    fs.unify().unwrap();
    let map = sums::extents(&mem, b);
    let e = map.iter().find(|e| e.lblock <= 100 && 100 < e.end()).unwrap();
    assert!(e.table_sums);
    let pblock = e.physical(100);
    fs.close().unwrap();
    let mut buf = vec![0u8; BS as usize];
    mem.read(pblock, &mut buf).unwrap();
    buf[17] ^= 0xff;
    mem.write(pblock, &buf).unwrap();
    let fs = reopen(&mem);
    for ino in [a, b] {
        let err = fs.read(ino, 100 * BS, BS as usize).unwrap_err();
        assert_eq!(err.errno(), tux3::Errno::EIO, "inode {ino}: {err}");
        assert_eq!(
            fs.read(ino, 0, 100 * BS as usize).unwrap(),
            data[..100 * BS as usize]
        );
        assert_eq!(fs.read(ino, 101 * BS, len).unwrap(), data[101 * BS as usize..]);
    }
    // A write into part of the damaged block fails rather than sum it anew.
    assert!(fs.write(b, 100 * BS + 5, b"x").is_err());
    fs.unlink(ROOT_INO, b"a").unwrap();
    fs.sync().unwrap();
    assert_eq!(fs.sharing().table_sums, 300);
    fs.unlink(ROOT_INO, b"b").unwrap();
    fs.sync().unwrap();
    fs.unify().unwrap();
    assert_eq!(fs.sharing().table_sums, 0);
    fs.close().unwrap();
    fsck(&mem);
}

#[test]
fn a_shared_block_comes_free_with_its_last_reference() {
    let (mem, fs) = volume(8192);
    let a = file(&fs, "a");
    fs.write(a, 0, &pattern(3, 64 * BS as usize)).unwrap();
    fs.sync().unwrap();
    let empty = free(&fs) + 64;
    let copies: Vec<Ino> = (0..5)
        .map(|i| {
            let c = file(&fs, &format!("c{i}"));
            fs.clone_range(a, 0, c, 0, u64::MAX).unwrap();
            c
        })
        .collect();
    fs.sync().unwrap();
    fs.unlink(ROOT_INO, b"a").unwrap();
    for (i, c) in copies.iter().enumerate().take(4) {
        fs.sync().unwrap();
        assert_eq!(
            fs.read(copies[4], 0, 64 * BS as usize).unwrap(),
            pattern(3, 64 * BS as usize)
        );
        fs.unlink(ROOT_INO, format!("c{i}").as_bytes()).unwrap();
        let _ = c;
    }
    fs.sync().unwrap();
    assert_eq!(fs.sharing().blocks, 0, "one reference left is not shared");
    assert!(
        free(&fs) + 64 <= empty + 8,
        "the last copy still holds its blocks"
    );
    fs.close().unwrap();
    fsck(&mem);
    let fs = reopen(&mem);
    assert_eq!(
        fs.read(copies[4], 0, 64 * BS as usize).unwrap(),
        pattern(3, 64 * BS as usize)
    );
    fs.unlink(ROOT_INO, b"c4").unwrap();
    fs.sync().unwrap();
    let after = free(&fs);
    assert!(
        after + 8 >= empty,
        "the blocks came back: {after} free, {empty} at first"
    );
    fs.close().unwrap();
    fsck(&mem);
}

#[test]
fn unaligned_clones_copy_their_edges() {
    let (mem, fs) = volume(8192);
    let src = pattern(7, 300_000);
    let a = file(&fs, "a");
    fs.write(a, 0, &src).unwrap();
    let b = file(&fs, "b");
    let mut model = pattern(9, 100_000);
    fs.write(b, 0, &model).unwrap();
    // Same offset within a block: edges copied, middle shared.
    for (so, d, n) in [
        (100u64, 8292u64, 50_000u64),
        (5u64, 120_001u64, 7u64),
        (10_000, 3, 40_000),
        (250_000, 400_000, 1 << 30),
    ] {
        let got = fs.clone_range(a, so, b, d, n).unwrap();
        let want = n.min(src.len() as u64 - so);
        assert_eq!(got, want);
        let end = (d + want) as usize;
        if model.len() < end {
            model.resize(end, 0);
        }
        model[d as usize..end].copy_from_slice(&src[so as usize..so as usize + want as usize]);
        assert_eq!(
            fs.read(b, 0, model.len() + 1).unwrap(),
            model,
            "after {so} {d} {n}"
        );
    }
    assert_eq!(
        fs.clone_range(a, 300_000, b, 0, 10).unwrap(),
        0,
        "at the end of the source"
    );
    assert!(
        fs.clone_range(a, 0, a, 4096, 8192).is_err(),
        "overlapping ranges of one file"
    );
    fs.close().unwrap();
    fsck(&mem);
}

#[test]
fn dedupe_shares_only_equal_blocks() {
    let (mem, fs) = volume(8192);
    let a = file(&fs, "a");
    let b = file(&fs, "b");
    let data = pattern(11, 32 * BS as usize);
    fs.write(a, 0, &data).unwrap();
    let mut other = data.clone();
    other[20 * BS as usize] ^= 1;
    fs.write(b, 0, &other).unwrap();
    fs.sync().unwrap();
    let before = free(&fs);
    assert_eq!(fs.dedupe_range(a, 0, b, 0, 16 * BS).unwrap(), Some(16 * BS));
    assert_eq!(fs.dedupe_range(a, 16 * BS, b, 16 * BS, 16 * BS).unwrap(), None);
    assert!(fs.dedupe_range(a, 1, b, 0, BS).is_err(), "unaligned");
    fs.sync().unwrap();
    assert!(free(&fs) >= before + 16 - 4, "the deduped blocks came back");
    assert_eq!(fs.read(b, 0, other.len()).unwrap(), other);
    assert_eq!(fs.read(a, 0, data.len()).unwrap(), data);
    // Again: already shared, nothing to do.
    assert_eq!(fs.dedupe_range(a, 0, b, 0, 16 * BS).unwrap(), Some(16 * BS));
    fs.close().unwrap();
    fsck(&mem);
}

#[test]
fn a_clone_of_unwritten_data_copies_its_pages() {
    let (mem, fs) = volume(8192);
    let a = file(&fs, "a");
    let data = pattern(13, 40 * BS as usize);
    fs.write(a, 0, &data).unwrap();
    // No sync: the source's pages are dirty.
    let b = file(&fs, "b");
    fs.clone_range(a, 0, b, 0, u64::MAX).unwrap();
    assert_eq!(fs.read(b, 0, data.len()).unwrap(), data);
    fs.close().unwrap();
    fsck(&mem);
    let fs = reopen(&mem);
    assert_eq!(fs.read(b, 0, data.len()).unwrap(), data);
    fs.close().unwrap();
}

#[test]
fn snapshots_keep_shared_blocks_and_a_rollback_restores_the_counts() {
    let (mem, fs) = volume(8192);
    let a = file(&fs, "a");
    let data = pattern(17, 48 * BS as usize);
    fs.write(a, 0, &data).unwrap();
    let b = file(&fs, "b");
    fs.clone_range(a, 0, b, 0, u64::MAX).unwrap();
    fs.snapshot_create(b"one").unwrap();
    // After the snapshot: a second clone, an overwrite, a delete.
    let c = file(&fs, "c");
    fs.clone_range(b, 0, c, 0, u64::MAX).unwrap();
    fs.write(a, 0, &pattern(18, 8 * BS as usize)).unwrap();
    fs.unlink(ROOT_INO, b"b").unwrap();
    fs.sync().unwrap();
    fs.close().unwrap();
    fsck(&mem);
    let fs = reopen(&mem);
    assert_eq!(fs.read(c, 0, data.len()).unwrap(), data);
    fs.snapshot_rollback(b"one").unwrap();
    let b = fs.lookup(ROOT_INO, b"b").unwrap().ino;
    assert_eq!(fs.read(b, 0, data.len()).unwrap(), data);
    assert!(fs.lookup(ROOT_INO, b"c").is_err());
    assert_eq!(fs.sharing().saved_blocks, 48, "a and b share again, c is gone");
    fs.close().unwrap();
    fsck(&mem);
    let fs = reopen(&mem);
    fs.snapshot_delete(b"one").unwrap();
    fs.unlink(ROOT_INO, b"a").unwrap();
    fs.unlink(ROOT_INO, b"b").unwrap();
    fs.sync().unwrap();
    fs.unify().unwrap();
    fs.close().unwrap();
    fsck(&mem);
}

#[test]
fn defrag_rewrites_a_cloned_file_once_and_keeps_it_shared() {
    let (mem, fs) = volume(8192);
    let a = file(&fs, "a");
    let other = file(&fs, "other");
    // A fragmented file: its blocks interleaved with another's.
    for i in 0..32u64 {
        fs.write(a, i * BS, &pattern(i as u8, BS as usize)).unwrap();
        fs.write(other, i * BS, &pattern(99, BS as usize)).unwrap();
        fs.sync().unwrap();
    }
    let b = file(&fs, "b");
    fs.clone_range(a, 0, b, 0, u64::MAX).unwrap();
    fs.sync().unwrap();
    let saved = fs.sharing().saved_blocks;
    assert_eq!(saved, 32);
    let before = free(&fs);
    let r = fs.defrag(a, &Default::default(), &mut |_, _| {}).unwrap();
    fs.sync().unwrap();
    assert_eq!(r.bytes_rewritten, 32 * BS, "{r:?}");
    assert_eq!(r.extents_after, 1, "{r:?}");
    assert_eq!((r.shared_bytes, r.repointed_bytes), (0, 32 * BS), "{r:?}");
    assert_eq!(fs.sharing().saved_blocks, saved, "the clone shares the new copy");
    assert!(free(&fs) + 4 >= before, "defrag took space");
    let want: Vec<u8> = (0..32u64).flat_map(|i| pattern(i as u8, BS as usize)).collect();
    assert_eq!(fs.read(b, 0, want.len()).unwrap(), want);
    fs.close().unwrap();
    fsck(&mem);
}
