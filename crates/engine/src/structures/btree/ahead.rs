//! Structures layer: leaves read in runs by a walk in key order through a
//! tree held under its owner's lock (a directory's entries, a file's
//! extents), as `cached.rs` does for the inode table. When a walk is about
//! to load a leaf that is only on disk and its left sibling is loaded (the
//! walk came from there, now or in an earlier call that stopped at a
//! batch's end), the siblings after it that are only on disk too and lie in
//! the blocks right after its own (a commit writes a tree's dirty leaves in
//! order, side by side) come with it in one device read, up to
//! [`READ_AHEAD`] leaves. A descent at random whose left neighbour is not
//! loaded reads its leaf alone, as before.
//!
//! Through a shared operation's stand-in device (`frontend/load.rs`,
//! `ColdReads`) the run's read fails like any read of a block not yet
//! staged; the stand-in remembers the whole run, the API reads it with no
//! lock held, and the next try finds every block staged.
//!
//! Calls the device and the node decoder. `cached.rs` reads its runs
//! with [`read_run`] too.

use super::cached::READ_AHEAD;
use super::node::{decode, Branch, Node, Slot, TreeKind};
use super::tree::{child_level, Ctx};
use crate::device::Device;
use crate::error::Result;

/// Before a walk loads child `i` of `b`: if it is a leaf only on disk whose
/// left sibling is loaded, load with it the run of siblings after it (only
/// on disk, in the blocks right after its own), in one read. Anything that
/// goes wrong (a failed read, a block that does not decode) leaves those
/// slots as they were, for the single load that follows to read or report.
pub(super) fn load_run(b: &mut Branch, i: usize, cx: &Ctx) {
    if child_level(b) != 0 || i == 0 {
        return;
    }
    let (Some(left), Some(first)) = (b.children.get(i.wrapping_sub(1)), b.children.get(i)) else {
        return;
    };
    let (Slot::Mem(_), Slot::Disk(addr)) = (&left.slot, &first.slot) else {
        return;
    };
    let addr = *addr;
    let run = b
        .children
        .iter()
        .skip(i)
        .take(READ_AHEAD)
        .zip(addr..)
        .take_while(|(c, a)| matches!(c.slot, Slot::Disk(d) if d == *a))
        .count();
    if run < 2 {
        return;
    }
    let Some(nodes) = read_run(cx.dev, addr, run, cx.owner, cx.kind, 0) else {
        return;
    };
    for (node, c) in nodes.into_iter().zip(b.children.iter_mut().skip(i)) {
        if let Ok(leaf) = node {
            c.slot = Slot::Mem(Box::new(leaf));
        }
    }
}

/// The `n` nodes (of `owner`'s tree, at `level`) in the blocks from `addr`
/// on, read in one device read and decoded each on its own; `None` when the
/// run does not lie within the volume or the read fails.
pub(super) fn read_run(
    dev: &dyn Device,
    addr: u64,
    n: usize,
    owner: u64,
    kind: TreeKind,
    level: u8,
) -> Option<Vec<Result<Node>>> {
    let count = dev.block_count();
    if addr < 2 || addr.saturating_add(n as u64) > count {
        return None;
    }
    let bs = dev.block_size() as usize;
    let mut buf = vec![0u8; bs.saturating_mul(n)];
    dev.read(addr, &mut buf).ok()?;
    Some(
        buf.chunks_exact(bs)
            .zip(addr..)
            .map(|(b, a)| decode(b, a, owner, kind, level, count))
            .collect(),
    )
}
