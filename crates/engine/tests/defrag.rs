//! Scenario: defrag (`Fs::defrag`) rewrites a fragmented file into a
//! handful of runs and changes nothing else. Files are written 4 KiB at a
//! time in random order, committing every few blocks, so that their
//! blocks land in write order (many extents); defrag then runs in small
//! batches (several deltas). Checked each time: the extents as the device
//! holds them (read back through the tools' data-map reader, not the
//! report), the contents block by block, fsck, and a reopen; a file
//! rewritten in several batches lies in one run per batch at most, its
//! leaves between them. Extents a
//! snapshot shares stay where they are unless `unshare` is set, and the
//! snapshot reads what it held either way. Extents clones share are
//! rewritten once and every clone pointed at the new copy. A writer racing
//! with defrag never loses a write.
//!
//! Calls the engine API, the tools' fsck and data-map reader.

use proptest::prelude::*;
use std::sync::Arc;
use sums::open_snapshot;
use tux3::device::{Device, MemDevice};
use tux3::structures::extent::Extent;
use tux3::{DefragOptions, Errno, Fs, Ino, OpenOptions, ROOT_INO};

mod sums;

const BS: u64 = 4096;

fn fresh(blocks: u64) -> Arc<MemDevice> {
    sums::volume(blocks, true)
}

fn open(mem: &Arc<MemDevice>) -> Fs {
    let dev: Arc<dyn Device> = mem.clone();
    Fs::open(dev, OpenOptions::default()).unwrap()
}

/// Block `b`'s contents in version `v` of a file: every byte differs
/// between blocks and versions.
fn block(b: u64, v: u8) -> Vec<u8> {
    (0..BS)
        .map(|i| (i as u8) ^ (b as u8).wrapping_mul(31) ^ ((b >> 8) as u8) ^ v.wrapping_mul(97))
        .collect()
}

/// A permutation of `0..n` from `seed` (a small LCG: no dependency).
fn shuffled(n: u64, seed: u64) -> Vec<u64> {
    let mut v: Vec<u64> = (0..n).collect();
    let mut s = seed | 1;
    for i in (1..v.len()).rev() {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let j = (s >> 33) as usize % (i + 1);
        v.swap(i, j);
    }
    v
}

/// Write `blocks` blocks of a new file `name` in the order of `order`,
/// committing every `every` blocks; returns its inode.
fn write_scattered(fs: &Fs, name: &[u8], order: &[u64], every: usize) -> Ino {
    let ino = fs.create(ROOT_INO, name, 0o644, 0, 0).unwrap().ino;
    for (k, &b) in order.iter().enumerate() {
        fs.write(ino, b * BS, &block(b, 0)).unwrap();
        if (k + 1) % every == 0 {
            fs.sync().unwrap();
        }
    }
    fs.sync().unwrap();
    ino
}

/// Physically contiguous runs of `map`.
fn runs(map: &[Extent]) -> usize {
    map.windows(2)
        .filter(|w| !(w[0].end() == w[1].lblock && w[0].physical(w[0].end()) == w[1].pblock))
        .count()
        + usize::from(!map.is_empty())
}

/// The file reads as `expect(b)` for each of its `blocks` blocks.
fn check_contents(fs: &Fs, ino: Ino, blocks: u64, expect: impl Fn(u64) -> Vec<u8>) {
    for b in 0..blocks {
        let got = fs.read(ino, b * BS, BS as usize).unwrap();
        assert!(got == expect(b), "block {b} of inode {ino} changed");
    }
}

fn fsck(mem: &Arc<MemDevice>) {
    let r = tux3_tools::fsck::check(mem.clone(), &Default::default()).unwrap();
    assert!(r.problems.is_empty(), "fsck: {:?}", r.problems);
}

fn small_batches() -> DefragOptions {
    DefragOptions {
        batch_bytes: 1 << 20,
        ..DefragOptions::default()
    }
}

#[test]
fn a_file_written_in_random_order_comes_down_to_a_handful_of_extents() {
    let mem = fresh(16384);
    let blocks = 2048;
    let fs = open(&mem);
    let ino = write_scattered(&fs, b"f", &shuffled(blocks, 7), 8);
    let before = runs(&sums::extents(&mem, ino));
    assert!(before > 100, "written scattered: {before} runs");
    let mut calls = 0;
    let report = fs
        .defrag(ino, &DefragOptions::default(), &mut |_, _| calls += 1)
        .unwrap();
    assert_eq!(report.extents_before, before as u64);
    assert_eq!(report.bytes_rewritten, blocks * BS);
    assert_eq!(report.shared_bytes, 0);
    assert!(calls >= 8, "progress reported per chunk: {calls}");
    let map = sums::extents(&mem, ino);
    assert!(runs(&map) <= 2, "after defrag: {} runs", runs(&map));
    assert_eq!(report.extents_after, runs(&map) as u64);
    assert!(map.iter().all(|e| e.is_summed()), "checksums kept");
    check_contents(&fs, ino, blocks, |b| block(b, 0));
    // A second run finds nothing to do.
    let again = fs.defrag(ino, &small_batches(), &mut |_, _| {}).unwrap();
    assert_eq!(again.bytes_rewritten, 0);
    assert_eq!(
        fs.defrag(ROOT_INO, &small_batches(), &mut |_, _| {})
            .unwrap_err()
            .errno(),
        Errno::EISDIR
    );
    fs.close().unwrap();
    fsck(&mem);
    let fs = open(&mem);
    fs.lookup(ROOT_INO, b"f").unwrap();
    check_contents(&fs, ino, blocks, |b| block(b, 0));
}

/// Device reads of a cold read of the whole of `name` (`blocks` blocks),
/// 1 MiB at a time, on a volume opened afresh.
fn cold_reads(mem: &Arc<MemDevice>, name: &[u8], blocks: u64) -> u64 {
    let fs = open(mem);
    let ino = fs.lookup(ROOT_INO, name).unwrap().ino;
    let before = fs.counters().reads;
    let mut off = 0;
    while off < blocks * BS {
        fs.read(ino, off, 1 << 20).unwrap();
        off += 1 << 20;
    }
    fs.counters().reads - before
}

#[test]
fn a_defragmented_file_reads_cold_with_no_more_device_reads_than_a_fresh_copy() {
    let mem = fresh(65536);
    let blocks = 16384;
    let fs = open(&mem);
    let ino = write_scattered(&fs, b"f", &shuffled(blocks, 17), 256);
    let copy = fs.create(ROOT_INO, b"copy", 0o644, 0, 0).unwrap().ino;
    for b in 0..blocks {
        fs.write(copy, b * BS, &block(b, 0)).unwrap();
    }
    fs.close().unwrap();
    let scattered = cold_reads(&mem, b"f", blocks);
    let fresh_copy = cold_reads(&mem, b"copy", blocks);
    let fs = open(&mem);
    fs.lookup(ROOT_INO, b"f").unwrap();
    fs.defrag(ino, &DefragOptions::default(), &mut |_, _| {}).unwrap();
    fs.close().unwrap();
    let defragged = cold_reads(&mem, b"f", blocks);
    assert!(
        scattered > 4 * fresh_copy,
        "{scattered} reads scattered, {fresh_copy} fresh"
    );
    assert!(
        defragged <= fresh_copy,
        "{defragged} reads after defrag, {fresh_copy} for a fresh copy"
    );
}

#[test]
fn each_batch_lies_in_one_run_its_leaves_after_it() {
    let mem = fresh(16384);
    let blocks = 2048;
    let fs = open(&mem);
    let ino = write_scattered(&fs, b"f", &shuffled(blocks, 19), 8);
    // Eight batches of 1 MiB, each its own delta.
    let report = fs.defrag(ino, &small_batches(), &mut |_, _| {}).unwrap();
    let map = sums::extents(&mem, ino);
    assert!(runs(&map) <= 8, "{} runs for 8 batches", runs(&map));
    assert_eq!(report.extents_after, runs(&map) as u64);
    // Each run after the first starts a little past the one before: the
    // batch's leaves lie between them, not a volume away.
    for w in map
        .windows(2)
        .filter(|w| w[0].physical(w[0].end()) != w[1].pblock)
    {
        let gap = w[1].pblock.wrapping_sub(w[0].physical(w[0].end()));
        assert!(gap < 64, "a gap of {gap} blocks between batches");
    }
    check_contents(&fs, ino, blocks, |b| block(b, 0));
    fs.close().unwrap();
    fsck(&mem);
}

#[test]
fn shared_extents_stay_unless_unshared_and_the_snapshot_keeps_its_contents() {
    let mem = fresh(16384);
    let blocks = 1024;
    let fs = open(&mem);
    let ino = write_scattered(&fs, b"f", &shuffled(blocks, 11), 8);
    fs.snapshot_create(b"s").unwrap();
    // The live file changes after the snapshot: its first quarter, in
    // random order again.
    let unshared_blocks = blocks / 4;
    for (k, b) in shuffled(unshared_blocks, 13).into_iter().enumerate() {
        fs.write(ino, b * BS, &block(b, 1)).unwrap();
        if k % 8 == 7 {
            fs.sync().unwrap();
        }
    }
    fs.sync().unwrap();
    let live = |b: u64| block(b, u8::from(b < unshared_blocks));
    let shared_map = sums::extents(&mem, ino);
    let report = fs.defrag(ino, &small_batches(), &mut |_, _| {}).unwrap();
    assert_eq!(
        report.bytes_rewritten,
        unshared_blocks * BS,
        "only the blocks no snapshot holds"
    );
    assert_eq!(report.shared_bytes, (blocks - unshared_blocks) * BS);
    // The shared extents did not move.
    let map = sums::extents(&mem, ino);
    for e in shared_map.iter().filter(|e| e.birth == 0) {
        for b in e.lblock..e.end() {
            let now = map.iter().find(|x| x.lblock <= b && b < x.end()).unwrap();
            assert_eq!(now.physical(b), e.physical(b), "shared block {b} moved");
        }
    }
    check_contents(&fs, ino, blocks, live);
    let report = fs
        .defrag(
            ino,
            &DefragOptions {
                unshare: true,
                ..DefragOptions::default()
            },
            &mut |_, _| {},
        )
        .unwrap();
    assert_eq!(report.shared_bytes, 0);
    assert_eq!(report.bytes_rewritten, blocks * BS);
    let map = sums::extents(&mem, ino);
    assert!(runs(&map) <= 2, "unshared: {} runs", runs(&map));
    check_contents(&fs, ino, blocks, live);
    fs.close().unwrap();
    fsck(&mem);
    let snap = open_snapshot(&mem, b"s");
    let sino = snap.lookup(ROOT_INO, b"f").unwrap().ino;
    check_contents(&snap, sino, blocks, |b| block(b, 0));
    drop(snap);
    // Deleting the snapshot gives its copy back; the volume stays clean.
    let fs = open(&mem);
    fs.snapshot_delete(b"s").unwrap();
    fs.snapshot_reclaim(&mut |_| {}).unwrap();
    fs.close().unwrap();
    fsck(&mem);
}

#[test]
fn a_write_racing_with_defrag_is_never_lost() {
    let mem = fresh(16384);
    let blocks = 1024;
    let fs = Arc::new(open(&mem));
    let ino = write_scattered(&fs, b"f", &shuffled(blocks, 3), 4);
    let writer = {
        let fs = fs.clone();
        std::thread::spawn(move || {
            for b in shuffled(blocks, 5) {
                fs.write(ino, b * BS, &block(b, 2)).unwrap();
            }
        })
    };
    let report = fs.defrag(ino, &small_batches(), &mut |_, _| {}).unwrap();
    writer.join().unwrap();
    assert!(report.extents_before > 1);
    check_contents(&fs, ino, blocks, |b| block(b, 2));
    fs.sync().unwrap();
    check_contents(&fs, ino, blocks, |b| block(b, 2));
    Arc::into_inner(fs).unwrap().close().unwrap();
    fsck(&mem);
    let fs = open(&mem);
    fs.lookup(ROOT_INO, b"f").unwrap();
    check_contents(&fs, ino, blocks, |b| block(b, 2));
}

#[test]
fn a_cloned_file_is_rewritten_once_and_every_clone_points_at_the_new_copy() {
    let mem = fresh(16384);
    let blocks = 1024;
    let fs = open(&mem);
    let ino = write_scattered(&fs, b"f", &shuffled(blocks, 17), 8);
    // Two whole clones, a partial one at another offset, and one changed
    // after the clone (its first 16 blocks no longer match).
    let mk = |name: &[u8]| fs.create(ROOT_INO, name, 0o644, 0, 0).unwrap().ino;
    let (c1, c2, part, changed) = (mk(b"c1"), mk(b"c2"), mk(b"part"), mk(b"changed"));
    for c in [c1, c2, changed] {
        fs.clone_range(ino, 0, c, 0, blocks * BS).unwrap();
    }
    fs.clone_range(ino, 100 * BS, part, 8 * BS, 300 * BS).unwrap();
    for b in 0..16 {
        fs.write(changed, b * BS, &block(b, 3)).unwrap();
    }
    fs.sync().unwrap();
    let free = |fs: &Fs| fs.statfs().unwrap().blocks_free;
    let (free_before, saved_before) = (free(&fs), fs.sharing().saved_blocks);
    assert!(runs(&sums::extents(&mem, ino)) > 100);
    let report = fs.defrag(ino, &small_batches(), &mut |_, _| {}).unwrap();
    assert_eq!(
        report.bytes_rewritten,
        blocks * BS,
        "shared with clones, rewritten once"
    );
    assert_eq!(report.shared_bytes, 0, "no snapshot holds them");
    // c1 and c2 whole, `part` in full, `changed` all but its 16 blocks.
    assert_eq!(report.repointed_bytes, (2 * blocks + 300 + blocks - 16) * BS);
    let map = sums::extents(&mem, ino);
    assert!(runs(&map) <= 16, "after defrag: {} runs", runs(&map));
    let at = |map: &[Extent], b: u64| {
        map.iter()
            .find(|e| e.lblock <= b && b < e.end())
            .unwrap()
            .physical(b)
    };
    for (c, from, to, shift) in [
        (c1, 0, blocks, 0),
        (c2, 0, blocks, 0),
        (part, 8, 308, 92),
        (changed, 16, blocks, 0),
    ] {
        let cmap = sums::extents(&mem, c);
        for b in from..to {
            assert_eq!(
                at(&cmap, b),
                at(&map, b + shift),
                "block {b} of inode {c} not repointed"
            );
        }
    }
    // Nothing taken twice: the rewritten copy replaced the old one for
    // every file (a few blocks go to the trees' new leaves).
    assert!(
        free(&fs) + 64 >= free_before,
        "free {} -> {}",
        free_before,
        free(&fs)
    );
    assert_eq!(fs.sharing().saved_blocks, saved_before);
    check_contents(&fs, ino, blocks, |b| block(b, 0));
    for c in [c1, c2] {
        check_contents(&fs, c, blocks, |b| block(b, 0));
    }
    check_contents(&fs, changed, blocks, |b| block(b, if b < 16 { 3 } else { 0 }));
    let got = fs.read(part, 8 * BS, (300 * BS) as usize).unwrap();
    assert!(
        got == (100..400).flat_map(|b| block(b, 0)).collect::<Vec<u8>>(),
        "part changed"
    );
    // A write to one clone still leaves the others alone.
    fs.write(c1, 0, &block(0, 9)).unwrap();
    fs.sync().unwrap();
    check_contents(&fs, ino, blocks, |b| block(b, 0));
    check_contents(&fs, c2, blocks, |b| block(b, 0));
    fs.close().unwrap();
    fsck(&mem);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// Any file made of writes of any size at any place, committed at any
    /// points, with holes and a partial last block: defrag leaves the same
    /// bytes and size, at most one run per stretch of data, and a clean
    /// volume.
    #[test]
    fn defrag_keeps_every_byte(
        writes in prop::collection::vec((0u64..600_000, 1usize..20_000, any::<u8>(), any::<bool>()), 1..60),
        batch in 1u64..5,
    ) {
        let mem = fresh(8192);
        let fs = open(&mem);
        let ino = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap().ino;
        let mut model: Vec<u8> = Vec::new();
        for (off, len, byte, commit) in writes {
            let data: Vec<u8> = (0..len).map(|i| byte ^ (i as u8)).collect();
            fs.write(ino, off, &data).unwrap();
            let end = off as usize + len;
            if model.len() < end {
                model.resize(end, 0);
            }
            model[off as usize..end].copy_from_slice(&data);
            if commit {
                fs.sync().unwrap();
            }
        }
        fs.sync().unwrap();
        let opts = DefragOptions { batch_bytes: batch << 20, ..DefragOptions::default() };
        let report = fs.defrag(ino, &opts, &mut |_, _| {}).unwrap();
        prop_assert!(report.extents_after <= report.extents_before);
        let map = sums::extents(&mem, ino);
        // Stretches of logically contiguous blocks: each one run now.
        let stretches = map.windows(2).filter(|w| w[0].end() != w[1].lblock).count() + usize::from(!map.is_empty());
        prop_assert!(runs(&map) <= stretches + (model.len() as u64 / BS / 256) as usize, "{} runs for {} stretches", runs(&map), stretches);
        prop_assert_eq!(fs.getattr(ino).unwrap().size, model.len() as u64);
        prop_assert!(fs.read(ino, 0, model.len() + 1).unwrap() == model);
        fs.close().unwrap();
        fsck(&mem);
    }
}

/// Pointing a rewritten file's clones at its new copy compares each piece
/// of it once for many clones, not once per clone: 200 clones of a 512-
/// block file cost the device a few reads of the file, where comparing
/// each clone's bytes with the file's read 200 times it.
#[test]
fn many_clones_are_pointed_at_the_new_copy_for_a_few_reads_of_the_file() {
    let mem = fresh(16384);
    let blocks = 512;
    let fs = open(&mem);
    let ino = write_scattered(&fs, b"f", &shuffled(blocks, 5), 64);
    let clones: Vec<Ino> = (0..200)
        .map(|i| {
            let c = fs
                .create(ROOT_INO, format!("c{i}").as_bytes(), 0o644, 0, 0)
                .unwrap()
                .ino;
            fs.clone_range(ino, 0, c, 0, blocks * BS).unwrap();
            c
        })
        .collect();
    fs.sync().unwrap();
    let saved = fs.sharing().saved_blocks;
    assert_eq!(saved, 200 * blocks);
    let read_before = mem.counters().blocks_read;
    let report = fs.defrag(ino, &DefragOptions::default(), &mut |_, _| {}).unwrap();
    let read = mem.counters().blocks_read - read_before;
    assert_eq!(report.repointed_bytes, 200 * blocks * BS, "{report:?}");
    assert_eq!(
        fs.sharing().saved_blocks,
        saved,
        "every clone shares the new copy"
    );
    assert!(
        read <= 12 * blocks,
        "{read} blocks read for {} of the file and its 200 clones",
        blocks
    );
    for &c in clones.iter().step_by(37) {
        check_contents(&fs, c, blocks, |b| block(b, 0));
    }
    fs.close().unwrap();
    fsck(&mem);
}
