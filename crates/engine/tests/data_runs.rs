//! `Fs::data_runs`: after random writes (single blocks and runs), holes,
//! preallocated ranges and a sync, the runs of any range of a file are
//! exactly its written blocks in that range — each block the runs name
//! holds on the device what the file reads there, every written block is
//! in one run, no hole or preallocated block is — in file order, joined
//! where they go on on the device. A directory gets EINVAL.

use proptest::prelude::*;
use std::sync::Arc;
use tux3::device::{Device, MemDevice};
use tux3::{Errno, FormatOptions, Fs, OpenOptions, ROOT_INO};

const BS: u64 = 4096;
const BLOCKS: u64 = 400;

fn block(tag: u8, b: u64) -> Vec<u8> {
    (0..BS as usize)
        .map(|k| tag.wrapping_add((k as u64 ^ b) as u8 / 3))
        .collect()
}

#[derive(Debug, Clone)]
enum Op {
    Write { at: u64, len: u64, tag: u8 },
    Prealloc { at: u64, len: u64 },
    Sync,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..BLOCKS, 1..40u64, any::<u8>()).prop_map(|(at, len, tag)| Op::Write { at, len, tag }),
        1 => (0..BLOCKS, 1..30u64).prop_map(|(at, len)| Op::Prealloc { at, len }),
        1 => Just(Op::Sync),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn runs_are_the_written_blocks_where_they_lie(
        ops in proptest::collection::vec(op(), 1..40),
        ranges in proptest::collection::vec((0..BLOCKS + 20, 1..BLOCKS + 20), 1..6),
    ) {
        let dev = Arc::new(MemDevice::new(BS as u32, 8192));
        Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
        let fs = Fs::open(dev.clone(), OpenOptions { commit_interval: None, ..OpenOptions::default() }).unwrap();
        let ino = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap().ino;
        // Which blocks hold written data (the model).
        let mut written = vec![false; (BLOCKS + 40) as usize];
        for op in &ops {
            match *op {
                Op::Write { at, len, tag } => {
                    let mut data = Vec::new();
                    for b in at..at + len {
                        data.extend(block(tag, b));
                        written[b as usize] = true;
                    }
                    fs.write(ino, at * BS, &data).unwrap();
                }
                Op::Prealloc { at, len } => {
                    fs.fallocate(ino, 0, at * BS, len * BS).unwrap();
                }
                Op::Sync => fs.sync().unwrap(),
            }
        }
        fs.sync().unwrap();
        for &(first, count) in &ranges {
            let runs = fs.data_runs(ino, first, count).unwrap();
            let mut named = vec![false; written.len() + (first + count) as usize];
            let mut last_end = first;
            for (k, r) in runs.iter().enumerate() {
                prop_assert!(r.count > 0 && r.lblock >= last_end, "{runs:?}");
                prop_assert!(r.lblock + r.count <= first + count, "{runs:?}");
                if k > 0 {
                    let p = &runs[k - 1];
                    prop_assert!(
                        !(p.lblock + p.count == r.lblock && p.pblock + p.count == r.pblock),
                        "runs not joined: {runs:?}"
                    );
                }
                let mut on_dev = vec![0u8; (r.count * BS) as usize];
                dev.read(r.pblock, &mut on_dev).unwrap();
                let through = fs.read(ino, r.lblock * BS, (r.count * BS) as usize).unwrap();
                prop_assert!(on_dev == through, "run {r:?} holds other bytes on the device");
                for b in r.lblock..r.lblock + r.count {
                    named[b as usize] = true;
                }
                last_end = r.lblock + r.count;
            }
            for b in first..first + count {
                let w = written.get(b as usize).copied().unwrap_or(false);
                prop_assert_eq!(named[b as usize], w, "block {} in {}+{}: {:?}", b, first, count, runs);
            }
        }
        let e = fs.data_runs(ROOT_INO, 0, 10).unwrap_err();
        prop_assert_eq!(e.errno(), Errno::EINVAL);
        fs.close().unwrap();
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]
    /// `Fs::read_many` gives each request what `Fs::read` gives it alone
    /// (holes, unwritten pages, partial blocks, past the end), and reads
    /// small files written one after another in fewer device reads.
    #[test]
    fn read_many_reads_as_read(
        sizes in proptest::collection::vec(1..20_000usize, 2..30),
        reqs in proptest::collection::vec((0..30usize, 0..24_000u64, 0..24_000usize), 1..40),
        dirty in proptest::option::of(0..30usize),
    ) {
        let dev = Arc::new(MemDevice::new(BS as u32, 8192));
        Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
        let fs = Fs::open(dev.clone(), OpenOptions { commit_interval: None, ..OpenOptions::default() }).unwrap();
        let inos: Vec<_> = sizes
            .iter()
            .enumerate()
            .map(|(k, &n)| {
                let ino = fs.create(ROOT_INO, format!("f{k}").as_bytes(), 0o644, 0, 0).unwrap().ino;
                let data: Vec<u8> = (0..n).map(|i| (i as u8).wrapping_mul(7).wrapping_add(k as u8)).collect();
                fs.write(ino, 0, &data).unwrap();
                ino
            })
            .collect();
        fs.sync().unwrap();
        if let Some(k) = dirty {
            if let Some(&ino) = inos.get(k) {
                fs.write(ino, 100, b"not on the device yet").unwrap();
            }
        }
        let reqs: Vec<_> = reqs
            .iter()
            .map(|&(k, off, len)| (inos[k % inos.len()], off, len))
            .collect();
        let many = fs.read_many(&reqs);
        for (r, got) in reqs.iter().zip(&many) {
            let alone = fs.read(r.0, r.1, r.2).unwrap();
            prop_assert_eq!(got.as_ref().unwrap(), &alone, "{:?}", r);
        }
        // Whole small files, all of them: fewer device reads than files.
        fs.sync().unwrap();
        let whole: Vec<_> = inos.iter().zip(&sizes).map(|(&i, &n)| (i, 0u64, n)).collect();
        let before = dev.counters().reads;
        let got = fs.read_many(&whole);
        let used = dev.counters().reads - before;
        prop_assert!(got.iter().all(|g| g.is_ok()));
        prop_assert!(used < whole.len() as u64 || whole.len() < 3, "{} reads for {} files", used, whole.len());
        fs.close().unwrap();
    }
}

#[test]
fn read_many_checks_every_block_and_blames_only_its_file() {
    let dev = Arc::new(MemDevice::new(BS as u32, 8192));
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    let inos: Vec<_> = (0..8u8)
        .map(|k| {
            let ino = fs.create(ROOT_INO, &[b'f', b'0' + k], 0o644, 0, 0).unwrap().ino;
            fs.write(ino, 0, &block(k, 0).repeat(2)).unwrap();
            ino
        })
        .collect();
    fs.close().unwrap();
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    // The second block of file 3 changed behind the filesystem's back.
    let run = fs.data_runs(inos[3], 0, 2).unwrap()[0];
    let mut b = vec![0u8; BS as usize];
    dev.read(run.pblock + 1, &mut b).unwrap();
    b[100] ^= 1;
    dev.write(run.pblock + 1, &b).unwrap();
    let reqs: Vec<_> = inos.iter().map(|&i| (i, 0, 2 * BS as usize)).collect();
    let got = fs.read_many(&reqs);
    for (k, g) in got.iter().enumerate() {
        if k == 3 {
            assert_eq!(g.as_ref().unwrap_err().errno(), Errno::EIO);
        } else {
            assert_eq!(g.as_ref().unwrap(), &block(k as u8, 0).repeat(2), "file {k}");
        }
    }
    fs.close().unwrap();
}
