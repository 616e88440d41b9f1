//! Structures layer: free-space bitmap blocks, the data blocks of the
//! bitmap file. Bit `i` of bitmap block `n` covers volume block
//! `n * bits_per_block + i`; 1 = in use.
//!
//! ```text
//! header(16, magic "T3BM") | index u64 | 0 u64 | bits (LSB first)
//! ```
//!
//! Calls the base modules only (codec, error).

use crate::codec::{begin, seal, verify, Reader};
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
