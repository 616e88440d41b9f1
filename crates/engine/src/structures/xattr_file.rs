//! Structures layer: the contents of an xattr file — the extended
//! attributes of one inode that its inode record cannot hold (too large,
//! or no room left), kept as the data of a hidden inode that the owner's
//! record names (attribute 10, `inode.rs`). FORMAT.md section 7.5 gives
//! every byte:
//!
//! ```text
//! magic "T3XF" u32, count u32, crc32c u32 (of every byte after the header), reserved u32 = 0
//! count entries, sorted by name, names distinct:
//!     n u8 (1..=255), name[n], v u32 (0..=65536), value[v]
//! ```
//!
//! Everything decoded here is untrusted: errors name the xattr file and
//! its owner. Calls only the codec and error modules.

use crate::codec::{Reader, Writer};
use crate::error::{Error, Result};
use std::collections::BTreeMap;

/// `"T3XF"`, little-endian.
pub const MAGIC: u32 = u32::from_le_bytes(*b"T3XF");
/// Bytes of the header before the entries.
pub const HEADER: usize = 16;
/// Largest xattr value (Linux `XATTR_SIZE_MAX`).
pub const VALUE_MAX: usize = 65536;
/// Largest listxattr answer: the names of one inode, each with its NUL
/// (Linux `XATTR_LIST_MAX`).
pub const LIST_MAX: usize = 65536;
/// Largest xattr file, header included: sixteen values of the largest
/// size, or names up to the listxattr bound with small values.
pub const FILE_MAX: usize = 1 << 20;

/// The mode type bits (`S_IFMT`) of an xattr file. No Linux file type
/// has them; an xattr file is never reachable by name.
pub const S_IFXATTR: u32 = 0o170000;

/// Bytes one entry takes in an xattr file.
pub fn entry_cost(name: &[u8], value: &[u8]) -> usize {
    name.len().saturating_add(value.len()).saturating_add(5)
}

/// The bytes of an xattr file holding `entries` (empty map: header only).
pub fn encode(entries: &BTreeMap<Vec<u8>, Vec<u8>>) -> Vec<u8> {
    let body: usize = entries.iter().map(|(n, v)| entry_cost(n, v)).sum();
    let mut w = Writer::with_capacity(HEADER.saturating_add(body));
    w.u32(MAGIC);
    w.u32(u32::try_from(entries.len()).unwrap_or(u32::MAX));
    w.u32(0);
    w.u32(0);
    for (name, value) in entries {
        w.u8(u8::try_from(name.len()).unwrap_or(u8::MAX));
        w.bytes(name);
        w.u32(u32::try_from(value.len()).unwrap_or(u32::MAX));
        w.bytes(value);
    }
    let mut buf = w.buf;
    let crc = crc32c::crc32c(buf.get(HEADER..).unwrap_or_default());
    if let Some(field) = buf.get_mut(8..12) {
        field.copy_from_slice(&crc.to_le_bytes());
    }
    buf
}

/// Decode the contents `b` of xattr file `ino` of inode `owner`, whose
/// first data block is `block` (0 if it has none): magic, checksum,
/// count, names 1..=255 bytes sorted and distinct, values up to
/// [`VALUE_MAX`], nothing left over.
pub fn decode(b: &[u8], ino: u64, owner: u64, block: u64) -> Result<BTreeMap<Vec<u8>, Vec<u8>>> {
    decode_entries(b, block).map_err(|e| match e {
        Error::Corrupt { block, what } => {
            Error::corrupt(block, format!("xattr file {ino} of inode {owner}: {what}"))
        }
        e => e,
    })
}

/// [`decode`], its errors naming only the block.
fn decode_entries(b: &[u8], block: u64) -> Result<BTreeMap<Vec<u8>, Vec<u8>>> {
    let bad = |what: String| Error::corrupt(block, what);
    if b.len() > FILE_MAX {
        return Err(bad(format!("size {} is past the largest ({FILE_MAX})", b.len())));
    }
    let mut r = Reader::new(b, block);
    let magic = r.u32("xattr file magic")?;
    if magic != MAGIC {
        return Err(bad(format!("magic {magic:#010x}, expected {MAGIC:#010x}")));
    }
    let count = r.u32("xattr file count")?;
    let crc = r.u32("xattr file checksum")?;
    let reserved = r.u32("xattr file reserved")?;
    if reserved != 0 {
        return Err(bad(format!("reserved field {reserved}, expected 0")));
    }
    let actual = crc32c::crc32c(b.get(HEADER..).unwrap_or_default());
    if crc != actual {
        return Err(bad(format!("checksum {crc:#010x}, contents give {actual:#010x}")));
    }
    let mut out: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    while r.remaining() > 0 {
        let n = usize::from(r.u8("xattr name length")?);
        if n == 0 {
            return Err(bad(format!("empty name at offset {}", r.pos())));
        }
        let name = r.bytes(n, "xattr name")?;
        let v = r.u32("xattr value length")? as usize;
        if v > VALUE_MAX {
            return Err(bad(format!(
                "value of {v} bytes is past the largest ({VALUE_MAX})"
            )));
        }
        let value = r.bytes(v, "xattr value")?;
        if out
            .last_key_value()
            .is_some_and(|(last, _)| last.as_slice() >= name)
        {
            return Err(bad(format!(
                "names out of order or repeated at {:?}",
                String::from_utf8_lossy(name)
            )));
        }
        out.insert(name.to_vec(), value.to_vec());
    }
    if out.len() != count as usize {
        return Err(bad(format!("count {count}, but {} entries", out.len())));
    }
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects, clippy::indexing_slicing)]
mod tests {
    use super::*;

    fn sample() -> BTreeMap<Vec<u8>, Vec<u8>> {
        let mut m = BTreeMap::new();
        m.insert(b"user.big".to_vec(), vec![7u8; VALUE_MAX]);
        m.insert(b"user.empty".to_vec(), Vec::new());
        m.insert(vec![b'n'; 255], b"long name".to_vec());
        m
    }

    #[test]
    fn round_trip() {
        let m = sample();
        let b = encode(&m);
        assert_eq!(
            b.len(),
            HEADER + m.iter().map(|(n, v)| entry_cost(n, v)).sum::<usize>()
        );
        assert_eq!(decode(&b, 20, 16, 99).unwrap(), m);
        assert_eq!(
            decode(&encode(&BTreeMap::new()), 20, 16, 99).unwrap(),
            BTreeMap::new()
        );
    }

    /// Every cut and every flipped byte is an error naming the file, its
    /// owner and the block, never a panic.
    #[test]
    fn damage_is_an_error_naming_the_file() {
        let b = encode(&sample());
        for cut in 0..b.len() {
            if let Err(e) = decode(&b[..cut], 20, 16, 99) {
                let e = e.to_string();
                assert!(
                    e.contains("block 99") && e.contains("xattr file 20 of inode 16"),
                    "{e}"
                );
            } else {
                panic!("a cut at {cut} decoded");
            }
        }
        for at in (0..b.len()).step_by(97) {
            let mut d = b.clone();
            d[at] ^= 0x40;
            assert!(decode(&d, 20, 16, 99).is_err(), "flip at {at}");
        }
    }

    /// A resealed file (checksum right) with names out of order, a count
    /// that lies or an oversized value is still refused.
    #[test]
    fn resealed_damage_is_refused() {
        let reseal = |mut b: Vec<u8>| {
            let crc = crc32c::crc32c(&b[HEADER..]);
            b[8..12].copy_from_slice(&crc.to_le_bytes());
            b
        };
        let mut m = BTreeMap::new();
        m.insert(b"a".to_vec(), b"1".to_vec());
        m.insert(b"b".to_vec(), b"2".to_vec());
        let good = encode(&m);
        let mut swapped = good.clone();
        swapped[HEADER + 1] = b'c';
        let e = decode(&reseal(swapped), 1, 2, 3).unwrap_err().to_string();
        assert!(e.contains("out of order"), "{e}");
        let mut count = good.clone();
        count[4] = 3;
        let e = decode(&count, 1, 2, 3).unwrap_err().to_string();
        assert!(e.contains("count 3"), "{e}");
        let mut huge = good.clone();
        huge[HEADER + 2..HEADER + 6].copy_from_slice(&(VALUE_MAX as u32 + 1).to_le_bytes());
        let e = decode(&reseal(huge), 1, 2, 3).unwrap_err().to_string();
        assert!(e.contains("past the largest"), "{e}");
    }
}
