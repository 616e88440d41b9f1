//! Structures layer: a node whose header alone is damaged, mended for
//! `fsck --repair` — the owner, tree kind or level its parent expects
//! (which `node::decode` names when they differ), or an entry count above
//! the entries the node holds (those before the zeroed rest of the
//! block); or a branch entry: a child address outside the volume (the
//! entry goes, its keys join the previous child's: what the lost child
//! held is lost, and the check that follows finds what named it) or a
//! separator out of order (each separator of a branch of leaves that does
//! not lie between the previous leaf's last key and its own leaf's first
//! key becomes that first key; the first one, above its leaf's first key
//! or not below the next separator, becomes 0, the leftmost's). The mended node must decode whole as what
//! its parent expects; otherwise nothing is mended.
//!
//! Calls `node` (the decoder and its layout), the codec and the device
//! (a branch's leaves, read).

use super::node::{decode, Node, TreeKind, BRANCH_ENTRY, NODE_HEADER};
use crate::codec::reseal;
use crate::device::Device;

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
    // An inode-table node that says so is no damaged header of another
    // tree's node but a pointer gone astray to it: left alone.
    if field == "owner" && *b.get(24)? == TreeKind::Itable as u8 && u64_at(b, 16)? == 0 {
        return None;
    }
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

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(
        b.get(at..at.checked_add(8)?)?.try_into().ok()?,
    ))
}

/// The first and last key of leaf `addr` of tree `owner`, `kind`.
fn leaf_keys(dev: &dyn Device, addr: u64, owner: u64, kind: TreeKind) -> Option<(u64, u64)> {
    let mut buf = vec![0u8; dev.block_size() as usize];
    dev.read(addr, &mut buf).ok()?;
    match decode(&buf, addr, owner, kind, 0, dev.block_count()).ok()? {
        Node::Leaf(l) => Some((l.entries.first()?.0, l.entries.last()?.0)),
        Node::Branch(_) => None,
    }
}

/// Mend an entry of branch block `b` at `addr` on `dev`, which
/// `node::decode` refused with `what` (a child outside the volume, a
/// separator out of order). Returns what was changed (the block is
/// resealed), or `None`.
pub fn mend_branch(dev: &dyn Device, b: &mut [u8], addr: u64, what: &str) -> Option<Mended> {
    let owner = u64_at(b, 16)?;
    let kind = TreeKind::from_code(*b.get(24)?)?;
    let level = *b.get(25)?;
    let count = u16_at(b, 26)?;
    if level == 0 {
        return None;
    }
    let at = |i: usize| i.checked_mul(BRANCH_ENTRY)?.checked_add(NODE_HEADER);
    let mut entries: Vec<(u64, u64)> = (0..count)
        .map(|i| Some((u64_at(b, at(i)?)?, u64_at(b, at(i)?.checked_add(8)?)?)))
        .collect::<Option<_>>()?;
    let how = if what.contains(" outside the volume") && what.contains(" branch: child ") {
        let i = number_after(what, " branch: child ")? as usize;
        if i >= entries.len() || entries.len() < 2 {
            return None;
        }
        let (sep, child) = entries.remove(i);
        if i == 0 {
            entries.first_mut()?.0 = sep;
        }
        format!("{} branch: child {i} at {child} taken out", kind.name())
    } else if what.contains(" branch: separator ") && what.contains(" not above ") {
        if level != 1 {
            return None;
        }
        let keys: Vec<(u64, u64)> = entries
            .iter()
            .map(|&(_, child)| leaf_keys(dev, child, owner, kind))
            .collect::<Option<_>>()?;
        let mut set = Vec::new();
        // The first separator: at most its leaf's first key, below the
        // next; when not, 0, what the leftmost holds at every level (a
        // root's split starts it so, and the log's leaf maps name it so).
        let (first0, _) = *keys.first()?;
        let next = entries.get(1).map_or(u64::MAX, |e| e.0);
        let e0 = entries.first_mut()?;
        if e0.0 > first0 || e0.0 >= next {
            set.push(format!("separator 0 {} set to 0", e0.0));
            e0.0 = 0;
        }
        for i in 1..entries.len() {
            let (first, _) = *keys.get(i)?;
            let (_, prev_last) = *keys.get(i.checked_sub(1)?)?;
            let e = entries.get_mut(i)?;
            if e.0 <= prev_last || e.0 > first {
                set.push(format!("separator {i} {} set to {first}", e.0));
                e.0 = first;
            }
        }
        if set.is_empty() {
            return None;
        }
        format!("{} branch: {}", kind.name(), set.join(", "))
    } else {
        return None;
    };
    b.get_mut(NODE_HEADER..)?.fill(0);
    for (i, &(sep, child)) in entries.iter().enumerate() {
        let from = at(i)?;
        b.get_mut(from..from.checked_add(8)?)?
            .copy_from_slice(&sep.to_le_bytes());
        b.get_mut(from.checked_add(8)?..at(i.checked_add(1)?)?)?
            .copy_from_slice(&child.to_le_bytes());
    }
    b.get_mut(26..28)?
        .copy_from_slice(&u16::try_from(entries.len()).ok()?.to_le_bytes());
    reseal(b);
    decode(b, addr, owner, kind, level, dev.block_count()).ok()?;
    Some(Mended {
        field: "branch entry",
        kind,
        how,
    })
}
