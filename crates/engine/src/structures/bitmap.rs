//! Structures layer: free-space bitmap blocks, the data blocks of the
//! bitmap file. Bit `i` of bitmap block `n` covers volume block
//! `n * bits_per_block + i`; 1 = in use.
//!
//! ```text
//! header(16, magic "T3BM") | index u64 | 0 u64 | bits (LSB first)
//! ```
//!
//! A block whose index alone is wrong is mended for `fsck --repair`
//! (`mend_index`).
//!
//! Calls the base modules only (codec, error).

use crate::codec::{begin, reseal, seal, verify, Reader};
use crate::error::Result;

pub const MAGIC: u32 = u32::from_le_bytes(*b"T3BM");
pub const HEADER: usize = 32;

/// Volume blocks covered by one bitmap block.
pub fn bits_per_block(bs: usize) -> u64 {
    (bs.saturating_sub(HEADER) as u64).saturating_mul(8)
}

/// Bitmap blocks needed for a volume of `blocks` blocks.
pub fn blocks_needed(bs: usize, blocks: u64) -> u64 {
    blocks.div_ceil(bits_per_block(bs).max(1))
}

/// Encode bitmap block `index` at `addr` from its bit bytes.
pub fn encode(addr: u64, index: u64, bits: &[u8], bs: usize) -> Vec<u8> {
    let mut w = begin(MAGIC, addr, bs);
    w.u64(index);
    w.u64(0);
    w.bytes(bits);
    seal(w, bs)
}

/// Decode bitmap block `index` read from `addr`; returns its bit bytes.
pub fn decode(b: &[u8], addr: u64, index: u64) -> Result<&[u8]> {
    verify(b, addr, MAGIC, "bitmap block")?;
    let mut r = Reader::at(b, 16, addr);
    let got = r.u64("bitmap index")?;
    if got != index {
        return Err(r.bad(format!("bitmap block: index {got}, expected {index}")));
    }
    r.u64("reserved")?;
    r.bytes(r.remaining(), "bitmap bits")
}

/// Mend bitmap block `b` at `addr` whose index alone is wrong: `what` is
/// [`decode`]'s refusal naming the index the bitmap file expects there
/// (for `fsck --repair`). Returns what changed (the block is resealed), or
/// `None` when that is not the damage.
pub fn mend_index(b: &mut [u8], addr: u64, what: &str) -> Option<String> {
    let rest = what.split("bitmap block: index ").nth(1)?;
    let (got, expected) = rest.split_once(", expected ")?;
    let got: u64 = got.parse().ok()?;
    let end = expected
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(expected.len());
    let index: u64 = expected.get(..end)?.parse().ok()?;
    b.get_mut(16..24)?.copy_from_slice(&index.to_le_bytes());
    reseal(b);
    decode(b, addr, index).ok()?;
    Some(format!("bitmap block index {got} set to {index}"))
}
