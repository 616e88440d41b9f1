//! Property: whatever a file goes through (writes, overwrites, truncates,
//! hole punches, preallocation, zeroed and collapsed ranges, commits in
//! between), every written extent on the device carries one checksum per
//! block and each matches the block's data as the device holds it; an
//! unwritten extent carries none; and the file, opened again, reads back as
//! a byte model of it says, with no checksum mismatch.
//!
//! Calls the engine API, the extent decoder and the tools' data-map reader.

use proptest::prelude::*;
use std::sync::Arc;
mod sums;

use sums::extents;
use tux3::device::{Device, MemDevice};
use tux3::structures::extent::block_sum;
use tux3::{Fs, OpenOptions, SetAttr, ROOT_INO};

const BS: u64 = 4096;
/// Files stay under this many blocks.
const SPAN: u64 = 160;

const KEEP_SIZE: i32 = 1;
const PUNCH_HOLE: i32 = 2;
const COLLAPSE_RANGE: i32 = 8;
const ZERO_RANGE: i32 = 0x10;

#[derive(Debug, Clone)]
enum Op {
    Write { at: u64, len: u64, tag: u8 },
    Truncate(u64),
    Punch { at: u64, len: u64 },
    Prealloc { at: u64, len: u64 },
    Zero { at: u64, len: u64 },
    Collapse { block: u64, blocks: u64 },
    Sync,
}

fn op() -> impl Strategy<Value = Op> {
    let byte = 0..SPAN * BS;
    let len = 1..80 * BS;
    prop_oneof![
        4 => (byte.clone(), len.clone(), any::<u8>()).prop_map(|(at, len, tag)| Op::Write { at, len, tag }),
        1 => byte.clone().prop_map(Op::Truncate),
        1 => (byte.clone(), len.clone()).prop_map(|(at, len)| Op::Punch { at, len }),
        1 => (byte.clone(), len.clone()).prop_map(|(at, len)| Op::Prealloc { at, len }),
        1 => (byte, len).prop_map(|(at, len)| Op::Zero { at, len }),
        1 => (0..SPAN, 1..40u64).prop_map(|(block, blocks)| Op::Collapse { block, blocks }),
        1 => Just(Op::Sync),
    ]
}

fn pattern(at: u64, len: u64, tag: u8) -> Vec<u8> {
    (at..at + len).map(|k| (k as u8).wrapping_mul(31) ^ tag).collect()
}

/// Apply `op` to the file and to the model; ops the engine refuses (a
/// collapse reaching the end of the file) leave both alone.
fn apply(fs: &Fs, ino: u64, model: &mut Vec<u8>, op: &Op) {
    let clip = |at: u64, len: u64| (at, len.min(SPAN * BS - at));
    match *op {
        Op::Write { at, len, tag } => {
            let (at, len) = clip(at, len);
            let data = pattern(at, len, tag);
            fs.write(ino, at, &data).unwrap();
            let end = (at + len) as usize;
            if model.len() < end {
                model.resize(end, 0);
            }
            model[at as usize..end].copy_from_slice(&data);
        }
        Op::Truncate(size) => {
            let set = SetAttr {
                size: Some(size),
                ..SetAttr::default()
            };
            fs.setattr(ino, &set).unwrap();
            model.resize(size as usize, 0);
        }
        Op::Punch { at, len } | Op::Zero { at, len } => {
            let mode = if matches!(op, Op::Punch { .. }) {
                PUNCH_HOLE | KEEP_SIZE
            } else {
                ZERO_RANGE | KEEP_SIZE
            };
            let (at, len) = clip(at, len);
            fs.fallocate(ino, mode, at, len).unwrap();
            let end = ((at + len) as usize).min(model.len());
            if (at as usize) < end {
                model[at as usize..end].fill(0);
            }
        }
        Op::Prealloc { at, len } => {
            let (at, len) = clip(at, len);
            fs.fallocate(ino, 0, at, len).unwrap();
            let end = (at + len) as usize;
            if model.len() < end {
                model.resize(end, 0);
            }
        }
        Op::Collapse { block, blocks } => {
            let (at, len) = (block * BS, blocks * BS);
            if at + len >= model.len() as u64 {
                return;
            }
            fs.fallocate(ino, COLLAPSE_RANGE, at, len).unwrap();
            model.drain(at as usize..(at + len) as usize);
        }
        Op::Sync => fs.sync().unwrap(),
    }
}

fn check(ops: &[Op]) {
    let mem = Arc::new(MemDevice::new(BS as u32, 8192));
    let dev: Arc<dyn Device> = mem.clone();
    Fs::format(dev.clone(), &Default::default()).unwrap();
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    let ino = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap().ino;
    let mut model = Vec::new();
    for op in ops {
        apply(&fs, ino, &mut model, op);
    }
    fs.close().unwrap();

    let mut block = vec![0u8; BS as usize];
    for e in extents(&mem, ino) {
        if e.unwritten {
            assert!(!e.is_summed(), "an unwritten extent with checksums: {e:?}");
            continue;
        }
        assert_eq!(e.sums.len() as u64, e.count, "{e:?}");
        for k in 0..e.count {
            mem.read(e.pblock + k, &mut block).unwrap();
            assert_eq!(
                e.sums[k as usize],
                block_sum(&block),
                "logical block {} (device block {})",
                e.lblock + k,
                e.pblock + k
            );
        }
    }
    let fs = Fs::open(dev, OpenOptions::default()).unwrap();
    let got = fs.read(ino, 0, model.len() + 1).unwrap();
    assert!(
        got == model,
        "the file differs from its model ({} / {} bytes)",
        got.len(),
        model.len()
    );
    assert_eq!(fs.data_errors(), 0);
    fs.close().unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn every_extent_sums_its_blocks(ops in proptest::collection::vec(op(), 1..24)) {
        check(&ops);
    }
}
