//! `Fs::dedupe_ranges` gives each range the answer `Fs::dedupe_range`
//! gives it alone, on two copies of one volume: equal ranges (shared),
//! differing ones (`None`), ranges shared already, a range with pages not
//! yet on the device (done alone, after a commit), a file that does not
//! exist (the error), ranges of one file with itself; afterwards every
//! file reads the same on both copies and fsck is clean on both. (Which
//! blocks end up shared may differ: a range one before it changed is
//! done alone after the batch.)
//!
//! `Fs::dedupe_ranges_read`, ranges whose bytes the caller read from the
//! device, gives the same answers whatever happened between the reads and
//! the call: nothing, a write not yet committed, a write committed (the
//! bytes read are stale), or bytes handed over that are not what the
//! device holds. A range that nothing changed is answered without reading
//! its data again.

use proptest::prelude::*;
use std::sync::Arc;
use tux3::device::{Device, MemDevice};
use tux3::{DedupeRange, FormatOptions, Fs, Ino, OpenOptions, ReadRange, ROOT_INO};

const BS: u64 = 4096;
const FILES: u64 = 6;
const BLOCKS: u64 = 12;

/// Block `b` of a file whose contents follow `seed` (equal seeds: equal
/// blocks).
fn block(seed: u8) -> Vec<u8> {
    (0..BS as usize)
        .map(|i| seed.wrapping_mul(31).wrapping_add((i % 251) as u8))
        .collect()
}

fn volume(seeds: &[Vec<u8>]) -> Vec<u8> {
    let mem = Arc::new(MemDevice::new(BS as u32, 4096));
    Fs::format(mem.clone(), &FormatOptions::default()).unwrap();
    let fs = Fs::open(mem.clone(), OpenOptions::default()).unwrap();
    for (k, s) in seeds.iter().enumerate() {
        let ino = fs
            .create(ROOT_INO, format!("f{k}").as_bytes(), 0o644, 0, 0)
            .unwrap()
            .ino;
        let data: Vec<u8> = s.iter().flat_map(|&x| block(x)).collect();
        fs.write(ino, 0, &data).unwrap();
    }
    fs.close().unwrap();
    let mut img = vec![0u8; 4096 * BS as usize];
    mem.read(0, &mut img).unwrap();
    img
}

fn open(img: &[u8]) -> (Arc<MemDevice>, Fs, Vec<Ino>) {
    let mem = Arc::new(MemDevice::new(BS as u32, 4096));
    mem.write(0, img).unwrap();
    let fs = Fs::open(mem.clone(), OpenOptions::default()).unwrap();
    let inos = (0..FILES)
        .map(|k| fs.lookup(ROOT_INO, format!("f{k}").as_bytes()).unwrap().ino)
        .collect();
    (mem, fs, inos)
}

fn contents(fs: &Fs, inos: &[Ino]) -> Vec<Vec<u8>> {
    inos.iter()
        .map(|&i| fs.read(i, 0, (BLOCKS * BS) as usize).unwrap())
        .collect()
}

/// Each file's block seeds (equal seeds: equal blocks).
fn seeds() -> impl Strategy<Value = Vec<Vec<u8>>> {
    proptest::collection::vec(proptest::collection::vec(0u8..3, BLOCKS as usize), FILES as usize)
}

/// Up to `most` ranges: (source file, block, destination file, block, blocks).
fn calls(most: usize) -> impl Strategy<Value = Vec<(u64, u64, u64, u64, u64)>> {
    proptest::collection::vec((0..FILES, 0..BLOCKS, 0..FILES, 0..BLOCKS, 1..5u64), 1..most)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]
    #[test]
    fn a_batch_answers_as_each_range_alone(
        seeds in seeds(),
        calls in calls(24),
        dirty in proptest::option::of((0..FILES, 0..BLOCKS)),
        missing in any::<bool>(),
    ) {
        let img = volume(&seeds);
        let (mem_a, a, inos) = open(&img);
        let (mem_b, b, _) = open(&img);
        // A page not yet on the device, written the same on both.
        if let Some((f, blk)) = dirty {
            for fs in [&a, &b] {
                fs.write(inos[f as usize], blk * BS, &block(1)).unwrap();
            }
        }
        let mut ranges = to_ranges(&inos, &calls);
        if missing {
            ranges.push(DedupeRange { src: 999_999, src_off: 0, dst: inos[0], dst_off: 0, len: BS });
        }
        let batch = b.dedupe_ranges(&ranges);
        same_answers((mem_a, a), (mem_b, b), &inos, &ranges, &batch)?;
    }
}

/// Each of `ranges` done alone on `a` answers as `answers` (made on `b`);
/// then both volumes hold the same contents, and fsck finds both clean.
fn same_answers(
    (mem_a, a): (Arc<MemDevice>, Fs),
    (mem_b, b): (Arc<MemDevice>, Fs),
    inos: &[Ino],
    ranges: &[DedupeRange],
    answers: &[tux3::Result<Option<u64>>],
) -> Result<(), TestCaseError> {
    for (k, r) in ranges.iter().enumerate() {
        let alone = a.dedupe_range(r.src, r.src_off, r.dst, r.dst_off, r.len);
        match (&alone, &answers[k]) {
            (Ok(x), Ok(y)) => prop_assert_eq!(x, y, "range {} {:?}", k, r),
            (Err(x), Err(y)) => prop_assert_eq!(x.errno(), y.errno(), "range {} {:?}", k, r),
            _ => prop_assert!(
                false,
                "range {k} {r:?}: alone {alone:?}, together {:?}",
                answers[k]
            ),
        }
    }
    prop_assert_eq!(contents(&a, inos), contents(&b, inos));
    a.close().unwrap();
    b.close().unwrap();
    for mem in [mem_a, mem_b] {
        let r = tux3_tools::fsck::check(mem, &Default::default()).unwrap();
        prop_assert!(r.problems.is_empty(), "fsck: {:?}", r.problems);
    }
    Ok(())
}

fn to_ranges(inos: &[Ino], calls: &[(u64, u64, u64, u64, u64)]) -> Vec<DedupeRange> {
    calls
        .iter()
        .map(|&(s, sb, d, db, n)| DedupeRange {
            src: inos[s as usize],
            src_off: sb * BS,
            dst: inos[d as usize],
            dst_off: db * BS,
            len: n.min(BLOCKS - sb).min(BLOCKS - db) * BS,
        })
        .collect()
}

/// What a dedupe tool reads of `r`: the epoch first, then each side's
/// blocks where the file's map says they lie, straight from the device.
fn read_range(fs: &Fs, dev: &dyn Device, r: DedupeRange) -> ReadRange {
    let epoch = fs.write_epoch().expect("no write in flight on an idle volume");
    let side = |ino: Ino, off: u64| -> (Vec<u64>, Vec<u8>) {
        let mut at = Vec::new();
        for run in fs.data_runs(ino, off / BS, r.len / BS).unwrap() {
            at.extend(run.pblock..run.pblock + run.count);
        }
        let mut bytes = vec![0u8; at.len() * BS as usize];
        for (k, p) in at.iter().enumerate() {
            dev.read(*p, &mut bytes[k * BS as usize..(k + 1) * BS as usize])
                .unwrap();
        }
        (at, bytes)
    };
    let (src_at, src) = side(r.src, r.src_off);
    let (dst_at, dst) = side(r.dst, r.dst_off);
    ReadRange {
        range: r,
        epoch,
        src_at,
        dst_at,
        src,
        dst,
    }
}

/// What happens between the reads and the call.
#[derive(Debug, Clone)]
enum Between {
    Nothing,
    /// A block of a file written, on both copies (not committed).
    Write(u64, u64, u8),
    /// The same, then committed: what was read of it is stale.
    WriteCommitted(u64, u64, u8),
    /// Range `k`'s destination bytes said to be its source's, and both
    /// changed alike, in the caller's hands (not what the device holds).
    Garbled(usize),
}

fn between() -> impl Strategy<Value = Between> {
    prop_oneof![
        Just(Between::Nothing),
        (0..FILES, 0..BLOCKS, 0u8..3).prop_map(|(f, b, s)| Between::Write(f, b, s)),
        (0..FILES, 0..BLOCKS, 0u8..3).prop_map(|(f, b, s)| Between::WriteCommitted(f, b, s)),
        (0usize..16).prop_map(Between::Garbled),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn ranges_read_answer_as_each_range_alone(
        seeds in seeds(),
        calls in calls(16),
        what in between(),
    ) {
        let img = volume(&seeds);
        let (mem_a, a, inos) = open(&img);
        let (mem_b, b, _) = open(&img);
        let ranges = to_ranges(&inos, &calls);
        let mut reads: Vec<ReadRange> = ranges.iter().map(|&r| read_range(&b, mem_b.as_ref(), r)).collect();
        match what {
            Between::Nothing => {}
            Between::Write(f, blk, s) | Between::WriteCommitted(f, blk, s) => {
                for fs in [&a, &b] {
                    fs.write(inos[f as usize], blk * BS, &block(s.wrapping_add(7))).unwrap();
                }
                if matches!(what, Between::WriteCommitted(..)) {
                    a.sync().unwrap();
                    b.sync().unwrap();
                }
            }
            Between::Garbled(k) => {
                if let Some(r) = reads.get_mut(k % ranges.len()) {
                    if let Some(x) = r.src.first_mut() {
                        *x ^= 0x5a;
                    }
                    r.dst = r.src.clone();
                }
            }
        }
        let answers = b.dedupe_ranges_read(&reads);
        same_answers((mem_a, a), (mem_b, b), &inos, &ranges, &answers)?;
    }
}

/// Two equal files, read by the caller: the call shares them without
/// reading their blocks again; the epoch it was read in is gone once a
/// commit writes, and then the same call reads them (and still shares).
#[test]
fn a_range_read_unchanged_is_shared_without_reading_it_again() {
    let seeds = vec![vec![1u8; BLOCKS as usize]; FILES as usize];
    let img = volume(&seeds);
    let (mem, fs, inos) = open(&img);
    let range = |d: usize| DedupeRange {
        src: inos[0],
        src_off: 0,
        dst: inos[d],
        dst_off: 0,
        len: BLOCKS * BS,
    };
    let r = read_range(&fs, mem.as_ref(), range(1));
    let before = mem.counters().blocks_read;
    assert_eq!(
        fs.dedupe_ranges_read(&[r]).pop().unwrap().unwrap(),
        Some(BLOCKS * BS)
    );
    let read = mem.counters().blocks_read - before;
    assert!(
        read < BLOCKS,
        "{read} blocks read for a range of {BLOCKS} read already"
    );
    // A commit that writes ends the epoch: the bytes read before it are
    // not trusted, and the call reads both sides.
    let stale = read_range(&fs, mem.as_ref(), range(2));
    let e = stale.epoch;
    fs.write(inos[4], 0, b"x").unwrap();
    fs.sync().unwrap();
    assert!(fs.write_epoch().unwrap() > e, "a commit's writes move the epoch");
    let before = mem.counters().blocks_read;
    assert_eq!(
        fs.dedupe_ranges_read(&[stale]).pop().unwrap().unwrap(),
        Some(BLOCKS * BS)
    );
    assert!(
        mem.counters().blocks_read - before >= 2 * BLOCKS,
        "a stale read is read again"
    );
    assert_eq!(fs.read(inos[2], 0, BS as usize).unwrap(), block(1));
    fs.close().unwrap();
}
