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

use crate::error::{Error, Result};

/// Bytes of the common header.
pub const HEADER: usize = 16;

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
    pub fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }
    pub fn bytes(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        match end {
            Some(end) => {
                let s = &self.buf[self.pos..end];
                self.pos = end;
                Ok(s)
            }
            None => Err(Error::corrupt(
                self.block,
                format!("{what} runs past the end ({n} bytes at offset {})", self.pos),
            )),
        }
    }
    pub fn u8(&mut self, what: &str) -> Result<u8> {
        Ok(self.bytes(1, what)?[0])
    }
    pub fn u16(&mut self, what: &str) -> Result<u16> {
        let b = self.bytes(2, what)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    pub fn u32(&mut self, what: &str) -> Result<u32> {
        let b = self.bytes(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    pub fn u64(&mut self, what: &str) -> Result<u64> {
        let b = self.bytes(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    pub fn i64(&mut self, what: &str) -> Result<i64> {
        Ok(self.u64(what)? as i64)
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
    pub fn len(&self) -> usize {
        self.buf.len()
    }
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
}

/// CRC32C of `block` with bytes 4..8 taken as zero.
pub fn block_crc(block: &[u8]) -> u32 {
    let crc = crc32c::crc32c(&block[..4]);
    let crc = crc32c::crc32c_append(crc, &[0u8; 4]);
    crc32c::crc32c_append(crc, &block[8..])
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

/// Pad `w` to `size` bytes and store the checksum. Panics if the content
/// overflows the block: callers size their content first (our invariant).
pub fn seal(mut w: Writer, size: usize) -> Vec<u8> {
    assert!(
        w.len() <= size,
        "block content {} exceeds block size {size}",
        w.len()
    );
    w.buf.resize(size, 0);
    let crc = block_crc(&w.buf);
    w.buf[4..8].copy_from_slice(&crc.to_le_bytes());
    w.buf
}

/// Check magic, checksum and self-address of a block read from `address`.
/// `kind` names the expected block type in the error.
pub fn verify(block: &[u8], address: u64, magic: u32, kind: &str) -> Result<()> {
    if block.len() < HEADER {
        return Err(Error::corrupt(address, format!("{kind}: block too small")));
    }
    let got_magic = u32::from_le_bytes([block[0], block[1], block[2], block[3]]);
    if got_magic != magic {
        return Err(Error::corrupt(
            address,
            format!("{kind}: bad magic {got_magic:#010x}, expected {magic:#010x}"),
        ));
    }
    let stored = u32::from_le_bytes([block[4], block[5], block[6], block[7]]);
    let actual = block_crc(block);
    if stored != actual {
        return Err(Error::corrupt(
            address,
            format!("{kind}: checksum mismatch (stored {stored:#010x}, computed {actual:#010x})"),
        ));
    }
    let mut a = [0u8; 8];
    a.copy_from_slice(&block[8..16]);
    let self_addr = u64::from_le_bytes(a);
    if self_addr != address {
        return Err(Error::corrupt(
            address,
            format!("{kind}: block claims address {self_addr}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
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
