//! What fsck can still read of a damaged directory, for its rebuild
//! (`Fix::RebuildDir`): an entry whose type code or position is wrong
//! still names its inode by a valid name; a leaf that does not decode as a
//! node (a header field, a key out of order, a value length) still holds
//! the entries before the damage, each kept only if its name hashes to
//! its key (so a misparsed value is not taken for an entry). Likewise the
//! records of an inode-table leaf that does not decode (`Fix::ItableLeaf`).
//!
//! Calls the codec (block verification), the dirent hash and the inode
//! record decoder only.

use tux3::codec::{verify, INO_LIMIT};
use tux3::device::Device;
use tux3::structures::btree::node::LEAF_MAGIC;
use tux3::structures::dirent;
use tux3::structures::inode::InodeAttrs;
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
/// does not decode as a node, each kept if it is a valid entry whose name
/// hashes to its key.
pub(super) fn leaf(dev: &dyn Device, addr: u64, dir: u64) -> Vec<(Vec<u8>, u64)> {
    let valid =
        |key: u64, v: &[u8]| entry(v).is_some_and(|(name, _)| dirent::key_base(&name) == key & !0xffff);
    raw_leaf(dev, addr, dir, &valid)
        .into_iter()
        .filter_map(|(_, v)| entry(&v))
        .collect()
}

/// The records of the inode-table leaf at `addr` (separator `sep`) that
/// does not decode as a node: each kept if it decodes, its key is at or
/// above `sep` and in order with its neighbours (a key out of order is
/// the damaged one, not the ones after it).
pub(super) fn itable_leaf(dev: &dyn Device, addr: u64, sep: u64) -> Vec<(u64, Vec<u8>)> {
    let bounds = tux3::structures::bounds(dev);
    let valid = |key: u64, v: &[u8]| InodeAttrs::decode(v, key, addr, &bounds).is_ok();
    let raw = raw_leaf(dev, addr, 0, &valid);
    let mut out: Vec<(u64, Vec<u8>)> = Vec::new();
    for (i, (key, v)) in raw.iter().enumerate() {
        let last = out.last().map(|(k, _)| *k);
        let above = last.is_none_or(|l| *key > l) && *key >= sep;
        let next_ok = raw
            .get(i + 1)
            .is_none_or(|(n, _)| *key < *n || last.is_some_and(|l| *n <= l));
        if above && next_ok && valid(*key, v) {
            out.push((*key, v.clone()));
        }
    }
    out
}

/// The (key, value) entries of the leaf at `addr` of the tree owned by
/// `owner` that does not decode as a node: the block must be a sound leaf
/// block (magic, checksum, address) of `owner`. Entries are read in
/// order; where one's value is not `valid` at its length, the length that
/// makes it valid and lands on a valid next entry (or, for the last one,
/// on zeroes to the end of the block) is taken instead; where none does,
/// the reading stops.
fn raw_leaf(
    dev: &dyn Device,
    addr: u64,
    owner: u64,
    valid: &dyn Fn(u64, &[u8]) -> bool,
) -> Vec<(u64, Vec<u8>)> {
    let mut buf = vec![0u8; dev.block_size() as usize];
    if addr < 2 || addr >= dev.block_count() || dev.read(addr, &mut buf).is_err() {
        return Vec::new();
    }
    if verify(&buf, addr, LEAF_MAGIC, "leaf").is_err() {
        return Vec::new();
    }
    if u64::from_le_bytes(buf[16..24].try_into().unwrap_or_default()) != owner {
        return Vec::new();
    }
    let count = u16::from_le_bytes([buf[26], buf[27]]) as usize;
    let head = |at: usize| -> Option<(u64, usize)> {
        let h = buf.get(at..at.checked_add(10)?)?;
        Some((
            u64::from_le_bytes(h[..8].try_into().ok()?),
            u16::from_le_bytes([h[8], h[9]]) as usize,
        ))
    };
    // The entry at `at` read with value length `len`: valid, and followed
    // by a valid entry (or, if it is the last, by zeroes).
    let fits = |at: usize, key: u64, len: usize, last: bool| -> bool {
        let Some(v) = buf.get(at + 10..at + 10 + len) else {
            return false;
        };
        if !valid(key, v) {
            return false;
        }
        let end = at + 10 + len;
        if last {
            return buf[end..].iter().all(|&b| b == 0);
        }
        head(end).is_some_and(|(k, l)| buf.get(end + 10..end + 10 + l).is_some_and(|v| valid(k, v)))
    };
    let mut out = Vec::new();
    let mut at = 32usize;
    for i in 0..count {
        let Some((key, len)) = head(at) else { break };
        let last = i + 1 == count;
        let len = if buf.get(at + 10..at + 10 + len).is_some_and(|v| valid(key, v)) {
            len
        } else {
            let room = buf.len().saturating_sub(at + 10);
            match (0..=room).find(|&l| fits(at, key, l, last)) {
                Some(l) => l,
                None => break,
            }
        };
        out.push((key, buf[at + 10..at + 10 + len].to_vec()));
        at += 10 + len;
    }
    out
}
