//! Structures layer: directory entries. A directory's data tree is keyed by
//! hash position: `key = hash47(name) << 16 | collision index`, so a lookup
//! reads one path of the tree (O(log n) blocks) and a position never moves
//! while the entry exists (readdir positions stay valid). Value: `ino u64,
//! type u8, name`.
//!
//! Calls the btree and the base modules (codec, error, types).

use crate::codec::{Reader, Writer, INO_LIMIT};
use crate::error::Result;
use crate::types::FileType;

/// Collision indexes per hash value.
pub const COLLISIONS: u64 = 1 << 16;

/// 47-bit FNV-1a hash of a name, never zero (position 0 is "start").
pub fn hash(name: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in name {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    let h = (h ^ (h >> 47)) & ((1 << 47) - 1);
    h.max(1)
}

/// First key of the positions of `name`'s hash.
pub fn key_base(name: &[u8]) -> u64 {
    hash(name) << 16
}

/// A decoded directory entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dirent {
    pub ino: u64,
    pub kind: FileType,
    pub name: Vec<u8>,
}

impl Dirent {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(self.name.len().saturating_add(9));
        w.u64(self.ino);
        w.u8(self.kind.dirent_code());
        w.bytes(&self.name);
        w.buf
    }

    /// Decode the entry at `key` of a directory leaf `block`.
    pub fn decode(b: &[u8], key: u64, block: u64) -> Result<Dirent> {
        let mut r = Reader::new(b, block);
        let ino = r.u64("dirent inode")?;
        let code = r.u8("dirent type")?;
        let name = r.bytes(r.remaining(), "dirent name")?.to_vec();
        if ino == 0 || ino >= INO_LIMIT {
            return Err(r.bad(format!("dirent at position {key:#x}: inode {ino} out of range")));
        }
        let kind = FileType::from_dirent_code(code)
            .ok_or_else(|| r.bad(format!("dirent at position {key:#x}: unknown type {code}")))?;
        if name.is_empty() || name.len() > crate::types::NAME_MAX || name.contains(&b'/') || name.contains(&0)
        {
            return Err(r.bad(format!("dirent at position {key:#x}: invalid name")));
        }
        if key >> 16 != hash(&name) {
            return Err(r.bad(format!(
                "dirent at position {key:#x}: name does not hash to its position"
            )));
        }
        Ok(Dirent { ino, kind, name })
    }
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects, clippy::indexing_slicing)]
mod tests {
    use super::*;

    #[test]
    fn hash_is_stable_and_nonzero() {
        assert_ne!(hash(b""), 0);
        assert_eq!(hash(b"hello"), hash(b"hello"));
        assert_ne!(hash(b"hello"), hash(b"hellp"));
        assert!(hash(b"x") < 1 << 47);
    }

    #[test]
    fn round_trip() {
        let d = Dirent {
            ino: 42,
            kind: FileType::Symlink,
            name: b"name".to_vec(),
        };
        let key = key_base(b"name") | 3;
        assert_eq!(Dirent::decode(&d.encode(), key, 9).unwrap(), d);
        assert!(Dirent::decode(&d.encode(), key_base(b"other"), 9).is_err());
    }
}
