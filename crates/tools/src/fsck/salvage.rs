//! What fsck can still read of a damaged directory, for its rebuild
//! (`Fix::RebuildDir`): an entry whose type code or position is wrong
//! still names its inode by a valid name; a leaf that does not decode as a
//! node (a header field, a key out of order, a value length) still holds
//! the entries before the damage, each kept only if its name hashes to
//! its key (so a misparsed value is not taken for an entry).
//!
//! Calls the codec (block verification) and the dirent hash only.

use tux3::codec::{verify, INO_LIMIT};
use tux3::device::Device;
use tux3::structures::btree::node::LEAF_MAGIC;
use tux3::structures::dirent;
use tux3::types::NAME_MAX;

/// An entry's name and inode when the name is valid and the inode number
/// in range, whatever its type code and position.
pub(super) fn entry(v: &[u8]) -> Option<(Vec<u8>, u64)> {
    let ino = u64::from_le_bytes(v.get(..8)?.try_into().ok()?);
    let name = v.get(9..)?;
    let valid = !name.is_empty()
        && name.len() <= NAME_MAX
        && !name.contains(&b'/')
        && !name.contains(&0)
        && name != b"."
        && name != b"..";
    (valid && ino != 0 && ino < INO_LIMIT).then(|| (name.to_vec(), ino))
}

/// The entries of the directory leaf at `addr` of directory `dir` that
/// does not decode as a node: the block must be a sound leaf block
/// (magic, checksum, address) of `dir`; its entries are read in order up
/// to the first that runs past the block, and each is kept if it is a
/// valid entry whose name hashes to its key.
pub(super) fn leaf(dev: &dyn Device, addr: u64, dir: u64) -> Vec<(Vec<u8>, u64)> {
    let mut buf = vec![0u8; dev.block_size() as usize];
    if addr < 2 || addr >= dev.block_count() || dev.read(addr, &mut buf).is_err() {
        return Vec::new();
    }
    if verify(&buf, addr, LEAF_MAGIC, "directory leaf").is_err() {
        return Vec::new();
    }
    let owner = u64::from_le_bytes(buf[16..24].try_into().unwrap_or_default());
    if owner != dir {
        return Vec::new();
    }
    let count = u16::from_le_bytes([buf[26], buf[27]]) as usize;
    let mut out = Vec::new();
    let mut at = 32usize;
    for _ in 0..count {
        let Some(head) = buf.get(at..at + 10) else { break };
        let key = u64::from_le_bytes(head[..8].try_into().unwrap_or_default());
        let len = u16::from_le_bytes([head[8], head[9]]) as usize;
        let Some(v) = buf.get(at + 10..at + 10 + len) else { break };
        at += 10 + len;
        if let Some((name, ino)) = entry(v) {
            if dirent::key_base(&name) == key & !0xffff {
                out.push((name, ino));
            }
        }
    }
    out
}
