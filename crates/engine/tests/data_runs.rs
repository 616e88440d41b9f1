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
