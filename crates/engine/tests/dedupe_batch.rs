//! `Fs::dedupe_ranges` gives each range the answer `Fs::dedupe_range`
//! gives it alone, on two copies of one volume: equal ranges (shared),
//! differing ones (`None`), ranges shared already, a range with pages not
//! yet on the device (done alone, after a commit), a file that does not
//! exist (the error), ranges of one file with itself; afterwards every
//! file reads the same on both copies and fsck is clean on both. (Which
//! blocks end up shared may differ: a range one before it changed is
//! done alone after the batch.)

use proptest::prelude::*;
use std::sync::Arc;
use tux3::device::{Device, MemDevice};
use tux3::{DedupeRange, FormatOptions, Fs, Ino, OpenOptions, ROOT_INO};

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

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]
    #[test]
    fn a_batch_answers_as_each_range_alone(
        seeds in proptest::collection::vec(proptest::collection::vec(0u8..3, BLOCKS as usize), FILES as usize),
        calls in proptest::collection::vec((0..FILES, 0..BLOCKS, 0..FILES, 0..BLOCKS, 1..5u64), 1..24),
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
        let mut ranges: Vec<DedupeRange> = calls
            .iter()
            .map(|&(s, sb, d, db, n)| DedupeRange {
                src: inos[s as usize],
                src_off: sb * BS,
                dst: inos[d as usize],
                dst_off: db * BS,
                len: n.min(BLOCKS - sb).min(BLOCKS - db) * BS,
            })
            .collect();
        if missing {
            ranges.push(DedupeRange { src: 999_999, src_off: 0, dst: inos[0], dst_off: 0, len: BS });
        }
        let batch = b.dedupe_ranges(&ranges);
        for (k, r) in ranges.iter().enumerate() {
            let alone = a.dedupe_range(r.src, r.src_off, r.dst, r.dst_off, r.len);
            match (&alone, &batch[k]) {
                (Ok(x), Ok(y)) => prop_assert_eq!(x, y, "range {} {:?}", k, r),
                (Err(x), Err(y)) => prop_assert_eq!(x.errno(), y.errno(), "range {} {:?}", k, r),
                _ => prop_assert!(false, "range {k} {r:?}: alone {alone:?}, in a batch {:?}", batch[k]),
            }
        }
        prop_assert_eq!(contents(&a, &inos), contents(&b, &inos));
        a.close().unwrap();
        b.close().unwrap();
        for mem in [mem_a, mem_b] {
            let r = tux3_tools::fsck::check(mem, &Default::default()).unwrap();
            prop_assert!(r.problems.is_empty(), "fsck: {:?}", r.problems);
        }
    }
}
