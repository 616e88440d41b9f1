//! Fuzz target, structure-aware: damage the log of a valid image and replay it.
//! The base images ("crash-log", "unified-log" from `tux3_fuzz::seeds`) are
//! built once per process. Input: a flags byte (bit 0: reseal the checksum of
//! every touched metadata block; bit 1: also re-link the log chain, i.e. set
//! each log block's prev_crc to its predecessor's new crc; bit 2: which base
//! image), then up to 256 five-byte edits `(sel u16, off u16, byte)`: `sel`
//! below 0xC000 picks one of the log blocks (the committed chain and the
//! reserved next block), above it any metadata block; `off % 1024` is the byte
//! offset; bit 15 of `off` XORs the byte instead of setting it. Then fsck and
//! dump the image, mount, walk, change and close it, and fsck it again.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::collections::BTreeSet;
use std::sync::OnceLock;
use tux3::log::read_chain;
use tux3::structures::superblock::Superblock;
use tux3_fuzz::{check, device, exercise, reseal_block, seeds, BS};

struct Base {
    image: Vec<u8>,
    /// Committed log blocks in chain order, then the reserved next block.
    log: Vec<usize>,
    /// Every metadata block (superblocks, bitmap, trees, log).
    meta: Vec<usize>,
}

fn bases() -> &'static [Base] {
    static BASES: OnceLock<Vec<Base>> = OnceLock::new();
    BASES.get_or_init(|| {
        seeds()
            .into_iter()
            .filter(|(name, _)| matches!(*name, "crash-log" | "unified-log"))
            .map(|(_, image)| {
                let dev = device(&image);
                let sb = Superblock::load(dev.as_ref()).expect("base superblock");
                let chain = read_chain(dev.as_ref(), sb.log_start()).expect("base log");
                let mut log: Vec<usize> = chain.blocks().map(|b| b as usize).collect();
                assert!(!log.is_empty(), "base image without a log");
                log.push(chain.tail.next as usize);
                let meta = tux3_tools::fsck::metadata_blocks(dev)
                    .expect("base metadata")
                    .into_iter()
                    .map(|b| b as usize)
                    .collect();
                Base { image, log, meta }
            })
            .collect()
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, ops)) = data.split_first() else {
        return;
    };
    let bases = bases();
    let base = &bases[(flags as usize >> 2) % bases.len()];
    let mut img = base.image.clone();
    let mut touched = BTreeSet::new();
    for op in ops.chunks_exact(5).take(256) {
        let sel = u16::from_le_bytes([op[0], op[1]]) as usize;
        let off = u16::from_le_bytes([op[2], op[3]]);
        let block = if sel < 0xC000 {
            base.log[sel % base.log.len()]
        } else {
            base.meta[sel % base.meta.len()]
        };
        let at = block * BS + (off as usize % BS);
        if off & 0x8000 != 0 {
            img[at] ^= op[4];
        } else {
            img[at] = op[4];
        }
        touched.insert(block);
    }
    if flags & 2 != 0 {
        // Re-link the chain: each log block names its predecessor's crc.
        let mut prev: Option<u32> = None;
        for &b in &base.log {
            if let Some(crc) = prev {
                if &img[b * BS..b * BS + 4] == b"T3LG" {
                    img[b * BS + 40..b * BS + 44].copy_from_slice(&crc.to_le_bytes());
                }
            }
            prev = reseal_block(&mut img, b);
            touched.remove(&b);
        }
    }
    if flags & 3 != 0 {
        for b in touched {
            reseal_block(&mut img, b);
        }
    }
    check(device(&img));
    let dev = device(&img);
    exercise(dev.clone());
    check(dev);
});
