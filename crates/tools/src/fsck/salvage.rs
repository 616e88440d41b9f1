//! What fsck can still read of a damaged directory, for its rebuild
//! (`Fix::RebuildDir`): an entry whose type code or position is wrong
//! still names its inode by a valid name; a leaf that does not decode as a
//! node (a header field, a key out of order, a value length) still holds
//! the entries before the damage, each kept only if its name hashes to
//! its key (so a misparsed value is not taken for an entry). Likewise the
//! records of an inode-table leaf that does not decode (`Fix::ItableLeaf`).
//!
//! Calls the btree's leaf salvage (`btree::salvage`), the dirent hash and
//! the inode record decoder only.

use tux3::codec::INO_LIMIT;
use tux3::device::Device;
use tux3::structures::btree::salvage;
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
    salvage::in_order(&raw_leaf(dev, addr, 0, &valid), sep, &valid)
}

/// The (key, value) entries the leaf at `addr` of `owner`'s tree still
/// holds (`btree::salvage::raw_leaf`); none when it is no sound leaf.
fn raw_leaf(
    dev: &dyn Device,
    addr: u64,
    owner: u64,
    valid: &dyn Fn(u64, &[u8]) -> bool,
) -> Vec<(u64, Vec<u8>)> {
    salvage::raw_leaf(dev, addr, owner, valid).unwrap_or_default()
}
