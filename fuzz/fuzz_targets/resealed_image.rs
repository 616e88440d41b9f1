//! Fuzz target, structure-aware: mutate fields of the metadata blocks of a
//! valid image, reseal their checksums (and re-link the log chain), then
//! open the volume, read and write through it, fsync, close, and fsck it.
//! Values that pass every checksum but are wrong must give errors, never a
//! panic.
//!
//! The base images are `tux3_fuzz::seeds` (built once per process). Input:
//! a flags byte (bits 0-2: which base image), then up to 64 four-byte edits
//! `(block u8, field u8, how u8, value u8)`: `block` picks one of the base's
//! live metadata blocks (superblock copies, btree nodes, bitmap blocks, log
//! blocks; `tux3_fuzz::fields` lists the fields of each), `field` one of its
//! fields, `how` the change (an interesting value such as 0, 2, the block
//! count or all ones; a small delta; a byte set or xored; a byte of the
//! block anywhere, header aside). Every touched block is resealed; each log
//! block of the chain then gets its predecessor's new checksum.
//!
//! An input of at least 64 KiB is instead a whole image (as for
//! `open_image`, without resealing): the form regressions are kept in. With
//! TUX3_FUZZ_SAVE_IMAGE=PATH set, the mutated image is written there in that
//! form, so a crashing edit script can be kept as an image.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::collections::BTreeSet;
use std::sync::{Arc, OnceLock};
use tux3::device::Device;
use tux3::structures::superblock::Superblock;
use tux3::{FileType, Fs, OpenOptions, ROOT_INO};
use tux3_fuzz::fields::{fields, interesting, Field};
use tux3_fuzz::{check, device, fit, live_blocks, reseal_changed, seeds, walk, BS, MIN_BLOCKS};

struct Base {
    image: Vec<u8>,
    blocks: u64,
    /// Live metadata blocks: superblocks, tree nodes, bitmap, log.
    meta: Vec<usize>,
    /// Committed log blocks in chain order, then the reserved next block.
    log: Vec<usize>,
}

fn bases() -> &'static [Base] {
    static BASES: OnceLock<Vec<Base>> = OnceLock::new();
    BASES.get_or_init(|| {
        seeds()
            .into_iter()
            .map(|(_, image)| {
                let sb = Superblock::load(device(&image).as_ref()).expect("base superblock");
                let (meta, log) = live_blocks(&image);
                Base {
                    image,
                    blocks: sb.block_count,
                    meta,
                    log,
                }
            })
            .collect()
    })
}

/// Write `v` (little-endian, `f.width` bytes) into the block at `f`.
fn set(block: &mut [u8], f: Field, v: u64) {
    if let Some(s) = block.get_mut(f.at..f.at + f.width) {
        s.copy_from_slice(&v.to_le_bytes()[..f.width]);
    }
}

fn get(block: &[u8], f: Field) -> u64 {
    let mut a = [0u8; 8];
    if let Some(s) = block.get(f.at..f.at + f.width) {
        a[..f.width].copy_from_slice(s);
    }
    u64::from_le_bytes(a)
}

/// Apply the edit script to a copy of `base`'s image.
fn mutate(base: &Base, ops: &[u8]) -> Vec<u8> {
    let mut img = base.image.clone();
    let mut touched = BTreeSet::new();
    for op in ops.chunks_exact(4).take(64) {
        let addr = base.meta[op[0] as usize % base.meta.len()];
        let block = &mut img[addr * BS..(addr + 1) * BS];
        let list = fields(block, addr);
        let value = op[3];
        match op[2] % 8 {
            // A field: an interesting value, a small delta up or down.
            0..=3 if !list.is_empty() => {
                let f = list[op[1] as usize % list.len()];
                let old = get(block, f);
                let v = match op[2] % 8 {
                    0 | 1 => interesting(value, f.width, base.blocks),
                    2 => old.wrapping_add(value as u64 % 8 + 1),
                    _ => old.wrapping_sub(value as u64 % 8 + 1),
                };
                set(block, f, v);
            }
            // One byte of a field, set or xored.
            4 | 5 if !list.is_empty() => {
                let f = list[op[1] as usize % list.len()];
                let at = f.at + (value as usize >> 5) % f.width;
                if op[2] % 8 == 4 {
                    block[at] = value;
                } else {
                    block[at] ^= value | 1;
                }
            }
            // Any byte past the header.
            _ => {
                let at = 16 + (op[1] as usize * 4 + (value as usize & 3)) % (BS - 16);
                block[at] ^= value | 1;
            }
        }
        touched.insert(addr);
    }
    // Re-link the log: each block names its predecessor's (new) crc.
    reseal_changed(&mut img, &base.log, touched);
    img
}

/// Mount, walk (readdir, lookup, getattr, read), write into files found
/// (and punch and preallocate in them) and a new one, fsync, sync, close.
fn operate(dev: Arc<dyn Device>) {
    let Ok(fs) = Fs::open(dev, OpenOptions::default()) else {
        return;
    };
    let found = walk(&fs);
    for (dir, name, kind) in found.iter().take(4) {
        if *kind != FileType::Regular {
            continue;
        }
        if let Ok(a) = fs.lookup(*dir, name) {
            let _ = fs.write(a.ino, 100, b"overwritten");
            let _ = fs.write(a.ino, a.size.saturating_add(3000), b"past the end");
            // fallocate: PUNCH_HOLE | KEEP_SIZE, then KEEP_SIZE.
            let _ = fs.fallocate(a.ino, 0x03, 0, 2048);
            let _ = fs.fallocate(a.ino, 0x01, 0, 8192);
            let _ = fs.read(a.ino, 0, 8192);
            let _ = fs.fsync(a.ino, false);
        }
    }
    if let Ok(a) = fs.create(ROOT_INO, b"resealed-new", 0o644, 0, 0) {
        let _ = fs.write(a.ino, 0, &[5u8; 5000]);
        let _ = fs.fsync(a.ino, false);
        let _ = fs.read(a.ino, 0, 5000);
    }
    let _ = fs.sync();
    let _ = fs.close();
}

fuzz_target!(|data: &[u8]| {
    if data.len() >= MIN_BLOCKS * BS {
        let (img, _) = fit(data);
        check(device(&img));
        let dev = device(&img);
        operate(dev.clone());
        check(dev);
        return;
    }
    let Some((&flags, ops)) = data.split_first() else {
        return;
    };
    let bases = bases();
    let base = &bases[(flags as usize & 7) % bases.len()];
    let img = mutate(base, ops);
    if let Some(path) = std::env::var_os("TUX3_FUZZ_SAVE_IMAGE") {
        let mut out = img.clone();
        out.push(0);
        let _ = std::fs::write(path, out);
    }
    check(device(&img));
    let dev = device(&img);
    operate(dev.clone());
    check(dev);
});
