//! `fsck --repair` of a damaged superblock copy that is the newer one:
//! mounting falls back to the older copy, which describes the volume as it
//! was one unify before (whose trees the writes since may have reused, so
//! that it does not mount at all). The fields every copy shares
//! (magic, version, block size, flags, block count, volume id, bitmap
//! size, creation time, the zero high half of the log's `prev_crc`) are
//! taken from the older copy, and if the damaged copy then decodes it is
//! written back in its home block. The copy must show itself the newer:
//! its sequence or its unify count is the older one's plus one (the other
//! is set to that too). The older copy is left as it is.
//!
//! Calls the superblock decoder and the device only.

use tux3::device::Device;
use tux3::structures::superblock::Superblock;

/// Byte ranges every superblock copy of a volume holds alike.
const SHARED: &[(usize, usize)] = &[
    (0, 8),     // magic
    (12, 16),   // version
    (16, 20),   // block size
    (20, 24),   // flags
    (24, 32),   // block count
    (40, 48),   // volume id
    (80, 88),   // bitmap blocks
    (112, 120), // created
];

fn u64_at(b: &[u8], at: usize) -> u64 {
    b.get(at..at + 8)
        .and_then(|s| s.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

/// The damaged newer copy patched from the older one, and its block, when
/// one copy does not decode, the other does, and the patched copy decodes
/// and is the newer.
pub(super) fn patched(dev: &dyn Device) -> Option<(u64, Vec<u8>)> {
    let bs = dev.block_size() as usize;
    let mut blocks = [vec![0u8; bs], vec![0u8; bs]];
    for (k, b) in blocks.iter_mut().enumerate() {
        dev.read(k as u64, b).ok()?;
    }
    let ok: Vec<bool> = (0..2)
        .map(|k| Superblock::decode(&blocks[k], k as u64).is_ok())
        .collect();
    let bad = match (ok[0], ok[1]) {
        (true, false) => 1,
        (false, true) => 0,
        _ => return None,
    };
    let good = Superblock::decode(&blocks[1 - bad], (1 - bad) as u64).ok()?;
    let mut b = blocks[bad].clone();
    let newer = u64_at(&b, 32) == good.seq + 1 || u64_at(&b, 120) == good.unifies + 1;
    if !newer || (good.seq + 1) % 2 != bad as u64 {
        return None;
    }
    for &(from, to) in SHARED {
        b[from..to].copy_from_slice(&blocks[1 - bad][from..to]);
    }
    b[32..40].copy_from_slice(&(good.seq + 1).to_le_bytes());
    b[120..128].copy_from_slice(&(good.unifies + 1).to_le_bytes());
    b[132..136].fill(0);
    b[8..12].fill(0);
    let crc = crc32c::crc32c(&b);
    b[8..12].copy_from_slice(&crc.to_le_bytes());
    Superblock::decode(&b, bad as u64).ok()?;
    Some((bad as u64, b))
}
