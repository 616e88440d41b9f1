//! Structures layer: a node whose header alone is damaged, mended for
//! `fsck --repair` — the owner, tree kind or level its parent expects
//! (which `node::decode` names when they differ), or an entry count above
//! the entries the node holds (those before the zeroed rest of the
//! block). The mended node must decode whole as what its parent
//! expects; otherwise nothing is mended.
//!
//! Calls `node` (the decoder and its layout) and the codec.

use super::node::{decode, TreeKind, BRANCH_ENTRY, NODE_HEADER};
use crate::codec::reseal;

/// The number after `label` in `what`, up to the next non-digit.
fn number_after(what: &str, label: &str) -> Option<u64> {
    let at = what.find(label)?.checked_add(label.len())?;
    let rest = what.get(at..)?;
    let end = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
    rest.get(..end)?.parse().ok()
}

fn u16_at(b: &[u8], at: usize) -> Option<usize> {
    let s = b.get(at..at.checked_add(2)?)?;
    Some(u16::from_le_bytes([*s.first()?, *s.get(1)?]) as usize)
}

/// The entries a node holds before the rest of the block is all zeroes,
/// when its header counts more (one that counts fewer decodes), or none
/// in a branch (which holds at least one).
fn counted_entries(b: &[u8], level: u8) -> Option<usize> {
    let mut at = NODE_HEADER;
    let mut n = 0usize;
    while b.get(at..)?.iter().any(|&x| x != 0) {
        let step = if level == 0 {
            u16_at(b, at.checked_add(8)?)?.checked_add(10)?
        } else {
            BRANCH_ENTRY
        };
        at = at.checked_add(step)?;
        if at > b.len() {
            return None;
        }
        n = n.checked_add(1)?;
    }
    let counted = u16_at(b, 26)?;
    (n < counted || (level > 0 && counted == 0)).then_some(n)
}

/// What [`mend_header`] changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mended {
    /// "owner", "tree kind", "level" or "entry count".
    pub field: &'static str,
    /// The tree kind the node now has.
    pub kind: TreeKind,
    /// What changed, for reports.
    pub how: String,
}

/// Mend the header of node block `b` at `addr`, which `node::decode`
/// refused with `what`; `block_count` bounds its children. Returns what
/// was changed (the block is resealed), or `None` when the damage is not
/// the header's alone.
pub fn mend_header(b: &mut [u8], addr: u64, what: &str, block_count: u64) -> Option<Mended> {
    if b.len() < NODE_HEADER {
        return None;
    }
    let (field, at, width, value) = if let Some(owner) =
        number_after(what, ", expected ").filter(|_| what.contains(": belongs to tree "))
    {
        ("owner", 16usize, 8usize, owner)
    } else if let Some(kind) = number_after(what, ", expected ").filter(|_| what.contains(": tree kind ")) {
        ("tree kind", 24, 1, kind)
    } else if let Some(level) = number_after(what, ", expected ").filter(|_| what.contains(": level ")) {
        ("level", 25, 1, level)
    } else {
        let level = *b.get(25)?;
        ("entry count", 26, 2, counted_entries(b, level)? as u64)
    };
    let end = at.checked_add(width)?;
    let old = b.get(at..end)?.to_vec();
    b.get_mut(at..end)?
        .copy_from_slice(value.to_le_bytes().get(..width)?);
    reseal(b);
    let owner = u64::from_le_bytes(b.get(16..24)?.try_into().ok()?);
    let kind = TreeKind::from_code(*b.get(24)?)?;
    let level = *b.get(25)?;
    if decode(b, addr, owner, kind, level, block_count).is_err() {
        return None;
    }
    let mut was = [0u8; 8];
    was.get_mut(..width)?.copy_from_slice(&old);
    let how = format!(
        "{} {field} {} set to {value}",
        kind.name(),
        u64::from_le_bytes(was)
    );
    Some(Mended { field, kind, how })
}
