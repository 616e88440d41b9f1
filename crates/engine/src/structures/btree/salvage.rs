//! Structures layer: what can still be read of a leaf that does not decode
//! as a node (a key out of order, a value length that runs past the end),
//! for a repair that rebuilds what the leaf held: the inode table's and a
//! directory's (`fsck --repair`), the snapshot table's (its load for a
//! repair). The caller says which (key, value) pairs are valid; the block
//! must be a sound leaf of the tree (magic, checksum, address, owner).
//!
//! Calls the codec (block verification) only.

use super::node::{LEAF_MAGIC, NODE_HEADER};
use crate::codec::verify;
use crate::device::Device;

/// The (key, value) entries of the leaf at `addr` of the tree owned by
/// `owner` that does not decode as a node, or `None` when the block is no
/// sound leaf of `owner`. Entries are read in order; where one's value is
/// not `valid` at its length but that length lands on a valid entry, the
/// entry alone is left out (its key or value is the damaged field);
/// otherwise the length that makes it valid and lands on a valid next
/// entry (or, for the last one, on zeroes to the end of the block) is
/// taken instead; where none does, the reading stops.
pub fn raw_leaf(
    dev: &dyn Device,
    addr: u64,
    owner: u64,
    valid: &dyn Fn(u64, &[u8]) -> bool,
) -> Option<Vec<(u64, Vec<u8>)>> {
    let mut buf = vec![0u8; dev.block_size() as usize];
    if addr < 2 || addr >= dev.block_count() || dev.read(addr, &mut buf).is_err() {
        return None;
    }
    verify(&buf, addr, LEAF_MAGIC, "leaf").ok()?;
    if u64::from_le_bytes(buf.get(16..24)?.try_into().ok()?) != owner {
        return None;
    }
    let count = u16::from_le_bytes([*buf.get(26)?, *buf.get(27)?]) as usize;
    let head = |at: usize| -> Option<(u64, usize)> {
        let h = buf.get(at..at.checked_add(10)?)?;
        Some((
            u64::from_le_bytes(h.get(..8)?.try_into().ok()?),
            u16::from_le_bytes([*h.get(8)?, *h.get(9)?]) as usize,
        ))
    };
    let value =
        |at: usize, len: usize| buf.get(at.saturating_add(10)..at.saturating_add(10).saturating_add(len));
    // The entry at `at` read with value length `len`: valid, and followed
    // by a valid entry (or, if it is the last, by zeroes).
    let fits = |at: usize, key: u64, len: usize, last: bool| -> bool {
        if !value(at, len).is_some_and(|v| valid(key, v)) {
            return false;
        }
        let end = at.saturating_add(10).saturating_add(len);
        if last {
            return buf.get(end..).is_some_and(|rest| rest.iter().all(|&b| b == 0));
        }
        head(end).is_some_and(|(k, l)| value(end, l).is_some_and(|v| valid(k, v)))
    };
    let mut out = Vec::new();
    let mut at = NODE_HEADER;
    for i in 0..count {
        let Some((key, len)) = head(at) else { break };
        let last = i.saturating_add(1) == count;
        let next = at.saturating_add(10).saturating_add(len);
        let len = if value(at, len).is_some_and(|v| valid(key, v)) {
            len
        } else if !last && head(next).is_some_and(|(k, l)| value(next, l).is_some_and(|v| valid(k, v))) {
            // Its length lands on a valid entry: the length is sound and
            // the key or the value is not; the entry alone is lost.
            at = next;
            continue;
        } else {
            let room = buf.len().saturating_sub(at.saturating_add(10));
            match (0..=room).find(|&l| fits(at, key, l, last)) {
                Some(l) => l,
                None => break,
            }
        };
        let Some(v) = value(at, len) else { break };
        out.push((key, v.to_vec()));
        at = at.saturating_add(10).saturating_add(len);
    }
    Some(out)
}

/// Of `raw` (a salvaged leaf's entries, in the order read), those in key
/// order at or above `sep` that are `valid`: a key out of order is the
/// damaged one, not the ones after it.
pub fn in_order(raw: &[(u64, Vec<u8>)], sep: u64, valid: &dyn Fn(u64, &[u8]) -> bool) -> Vec<(u64, Vec<u8>)> {
    let mut out: Vec<(u64, Vec<u8>)> = Vec::new();
    for (i, (key, v)) in raw.iter().enumerate() {
        let last = out.last().map(|(k, _)| *k);
        let above = last.is_none_or(|l| *key > l) && *key >= sep;
        let next_ok = raw
            .get(i.saturating_add(1))
            .is_none_or(|(n, _)| *key < *n || last.is_some_and(|l| *n <= l));
        if above && next_ok && valid(*key, v) {
            out.push((*key, v.clone()));
        }
    }
    out
}
