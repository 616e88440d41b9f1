//! Base (bottom layer): byte-level encoding shared by every on-disk
//! structure — little-endian
//! readers that never read out of bounds (errors name the block and field),
//! and the common block header with its CRC32C.
//!
//! Common header of every metadata and log block (see docs/FORMAT.md):
//!
//! ```text
//! 0   u32 magic      identifies the block type
//! 4   u32 crc32c     of the whole block, computed with this field zero
//! 8   u64 address    the block's own address (catches misdirected writes)
//! ```
//!
//! Calls only `error`; the log and structures layers build on it.

#![deny(clippy::arithmetic_side_effects, clippy::indexing_slicing)]

use crate::error::{Error, Result};

/// Bytes of the common header.
pub const HEADER: usize = 16;

/// What a decoder checks values against: the volume's geometry. Block
/// addresses must lie in `2..block_count` (blocks 0 and 1 are the
/// superblocks), ranges must end inside the volume, file sizes must fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    pub block_size: u32,
    pub block_count: u64,
}

/// Most logical blocks a file may have (docs/FORMAT.md section 11).
pub const MAX_FILE_BLOCKS: u64 = 1 << 40;
/// Deepest tree: branch levels above the leaves.
pub const MAX_DEPTH: u8 = 16;
/// Inode numbers stay below this.
pub const INO_LIMIT: u64 = 1 << 48;

impl Bounds {
    pub fn new(block_size: u32, block_count: u64) -> Bounds {
        Bounds {
            block_size,
            block_count,
        }
    }

    /// True if `addr` may hold a tree node, bitmap, log or data block.
    pub fn holds(&self, addr: u64) -> bool {
        addr >= 2 && addr < self.block_count
    }

    /// True if blocks `start ..< start + count` lie inside the volume, past
    /// the superblocks, and the sum does not overflow.
    pub fn holds_range(&self, start: u64, count: u64) -> bool {
        start >= 2
            && start
                .checked_add(count)
                .is_some_and(|end| end <= self.block_count)
    }

    /// Largest file size: 2^40 blocks or 2^63-1 bytes, whichever is smaller.
    pub fn max_file_size(&self) -> u64 {
        u64::from(self.block_size)
            .checked_mul(MAX_FILE_BLOCKS)
            .map_or(i64::MAX as u64, |s| s.min(i64::MAX as u64))
    }
}

/// Checked little-endian reader over one block. Every error names `block`.
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    block: u64,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8], block: u64) -> Reader<'a> {
        Reader { buf, pos: 0, block }
    }
    pub fn at(buf: &'a [u8], pos: usize, block: u64) -> Reader<'a> {
        Reader { buf, pos, block }
    }
    pub fn pos(&self) -> usize {
        self.pos
    }
    /// The block this reader's errors name.
    pub fn block(&self) -> u64 {
        self.block
    }
    pub fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }
    pub fn bytes(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        let s = self
            .pos
            .checked_add(n)
            .and_then(|end| self.buf.get(self.pos..end));
        match s {
            Some(s) => {
                self.pos = self.pos.saturating_add(n);
                Ok(s)
            }
            None => Err(Error::corrupt(
                self.block,
                format!("{what} runs past the end ({n} bytes at offset {})", self.pos),
            )),
        }
    }
    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        let b = self.bytes(N, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(b);
        Ok(a)
    }
    pub fn u8(&mut self, what: &str) -> Result<u8> {
        Ok(u8::from_le_bytes(self.array(what)?))
    }
    pub fn u16(&mut self, what: &str) -> Result<u16> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }
    pub fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }
    pub fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }
    pub fn i64(&mut self, what: &str) -> Result<i64> {
        Ok(i64::from_le_bytes(self.array(what)?))
    }
    /// A block address that must lie in `2..block_count`.
    pub fn addr(&mut self, what: &str, bounds: &Bounds) -> Result<u64> {
        let a = self.u64(what)?;
        if !bounds.holds(a) {
            return Err(self.bad(format!(
                "{what} {a} outside the volume (2..{})",
                bounds.block_count
            )));
        }
        Ok(a)
    }
    /// An error naming this reader's block.
    pub fn bad(&self, what: impl Into<String>) -> Error {
        Error::corrupt(self.block, what)
    }
}

/// Little-endian writer appending to a byte vector.
#[derive(Default)]
pub struct Writer {
    pub buf: Vec<u8>,
}

impl Writer {
    pub fn with_capacity(n: usize) -> Writer {
        Writer {
            buf: Vec::with_capacity(n),
        }
    }
    pub fn u8(&mut self, v: u8) {
        self.buf.push(v)
    }
    pub fn u16(&mut self, v: u16) {
        self.buf.extend_from_slice(&v.to_le_bytes())
    }
    pub fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_le_bytes())
    }
    pub fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_le_bytes())
    }
    pub fn i64(&mut self, v: i64) {
        self.u64(v as u64)
    }
    pub fn bytes(&mut self, b: &[u8]) {
        self.buf.extend_from_slice(b)
    }
    /// Overwrite the u16 at byte `at` (a length known only after what follows).
    pub fn set_u16(&mut self, at: usize, v: u16) {
        let end = at.saturating_add(2);
        if let Some(field) = self.buf.get_mut(at..end) {
            field.copy_from_slice(&v.to_le_bytes());
        }
    }
    pub fn len(&self) -> usize {
        self.buf.len()
    }
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
}

/// CRC32C of `block` with bytes 4..8 taken as zero (a block shorter than
/// the header is checksummed as it is).
pub fn block_crc(block: &[u8]) -> u32 {
    match (block.get(..4), block.get(8..)) {
        (Some(head), Some(rest)) => {
            let crc = crc32c::crc32c(head);
            let crc = crc32c::crc32c_append(crc, &[0u8; 4]);
            crc32c::crc32c_append(crc, rest)
        }
        _ => crc32c::crc32c(block),
    }
}

/// Start a block image: header with `magic` and `address`, zero-padded to
/// `size` later by [`seal`].
pub fn begin(magic: u32, address: u64, size: usize) -> Writer {
    let mut w = Writer::with_capacity(size);
    w.u32(magic);
    w.u32(0);
    w.u64(address);
    w
}

/// Store the checksum of a whole block image in its header (bytes 4..8).
/// Does nothing to a buffer shorter than the header.
pub fn reseal(block: &mut [u8]) {
    let crc = block_crc(block);
    if let Some(field) = block.get_mut(4..8) {
        field.copy_from_slice(&crc.to_le_bytes());
    }
}

/// Pad `w` to `size` bytes and store the checksum. Panics if the content
/// overflows the block: callers size their content first (our invariant).
pub fn seal(mut w: Writer, size: usize) -> Vec<u8> {
    assert!(
        w.len() <= size,
        "block content {} exceeds block size {size}",
        w.len()
    );
    w.buf.resize(size, 0);
    reseal(&mut w.buf);
    w.buf
}

/// Check magic, checksum and self-address of a block read from `address`.
/// `kind` names the expected block type in the error.
pub fn verify(block: &[u8], address: u64, magic: u32, kind: &str) -> Result<()> {
    if block.len() < HEADER {
        return Err(Error::corrupt(address, format!("{kind}: block too small")));
    }
    let mut r = Reader::new(block, address);
    let got_magic = r.u32("magic")?;
    if got_magic != magic {
        return Err(Error::corrupt(
            address,
            format!("{kind}: bad magic {got_magic:#010x}, expected {magic:#010x}"),
        ));
    }
    let stored = r.u32("checksum")?;
    let actual = block_crc(block);
    if stored != actual {
        return Err(Error::corrupt(
            address,
            format!("{kind}: checksum mismatch (stored {stored:#010x}, computed {actual:#010x})"),
        ));
    }
    let self_addr = r.u64("address")?;
    if self_addr != address {
        return Err(Error::corrupt(
            address,
            format!("{kind}: block claims address {self_addr}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects, clippy::indexing_slicing)]
mod tests {
    use super::*;

    #[test]
    fn seal_then_verify() {
        let mut w = begin(0x1234_5678, 42, 1024);
        w.u64(7);
        let b = seal(w, 1024);
        verify(&b, 42, 0x1234_5678, "test").unwrap();
        assert!(verify(&b, 43, 0x1234_5678, "test").is_err());
        assert!(verify(&b, 42, 0x1234_5679, "test").is_err());
        for i in [0usize, 5, 9, 100, 1023] {
            let mut c = b.clone();
            c[i] ^= 1;
            assert!(verify(&c, 42, 0x1234_5678, "test").is_err(), "flip at {i}");
        }
    }

    #[test]
    fn reader_never_reads_out_of_bounds() {
        let buf = [1u8, 2, 3];
        let mut r = Reader::new(&buf, 9);
        assert_eq!(r.u16("a").unwrap(), 0x0201);
        let e = r.u16("b").unwrap_err().to_string();
        assert!(e.contains("block 9"), "{e}");
        assert!(r.bytes(usize::MAX, "huge").is_err());
    }
}
