//! A file's data map as the offline tools read it: the extents its inode
//! record holds (format attribute 9, `InodeAttrs::inline`, on volumes with
//! the `INLINE_MAPS` flag) or, without them, its extent tree. Every tool
//! that opens an inode's data tree or lists a file's extents goes through
//! here, so none takes a small file for an empty one.
//!
//! A data map held in the record becomes a tree of one in-memory leaf at
//! address 0 (`tux3::cache::data_tree`, as a mount builds it): address 0 is
//! never a block, and walkers that count node addresses skip it.
//!
//! Calls `cache::data_tree`, `backend::Backend::replay_tree` and the
//! extent decoder.

use std::ops::ControlFlow;
use tux3::backend::{Backend, TreeReplay};
use tux3::device::Device;
use tux3::error::Result;
use tux3::structures::btree::{Tree, TreeKind};
use tux3::structures::extent::{self, Extent};
use tux3::structures::inode::InodeAttrs;
use tux3::types::FileType;

/// The kind of tree inode `attrs` keeps its data in: directory entries for
/// a directory, extents for everything else.
pub fn tree_kind(attrs: &InodeAttrs) -> TreeKind {
    if FileType::from_mode(attrs.mode) == Some(FileType::Directory) {
        TreeKind::Dirents
    } else {
        TreeKind::Extents
    }
}

/// The data tree of inode `ino` as a mount sees it: the extents its record
/// holds (a leaf in memory at address 0), else its tree from the unified
/// root (from none if `replay` says the number was dropped since), with the
/// log's leaf changes of `replay` applied.
pub fn data_tree(be: &Backend, ino: u64, attrs: &InodeAttrs, replay: Option<&TreeReplay>) -> Result<Tree> {
    let reset = replay.is_some_and(|r| r.reset);
    let mut tree = tux3::cache::data_tree(ino, tree_kind(attrs), attrs, reset);
    if let Some(r) = replay {
        be.replay_tree(&mut tree, r)?;
    }
    Ok(tree)
}

/// Every extent of an extent tree (one opened by [`data_tree`] included),
/// in logical order; the first that does not decode is the error.
pub fn tree_extents(dev: &dyn Device, tree: &mut Tree) -> Result<Vec<Extent>> {
    let bounds = tux3::structures::bounds(dev);
    let mut out = Vec::new();
    tree.scan(dev, 0, u64::MAX, |k, v, leaf| {
        out.push(extent::decode(k, v, leaf, &bounds)?);
        Ok(ControlFlow::Continue(()))
    })?;
    Ok(out)
}

/// One extent as the tools print it: `lblock..+count -> pblock`, with
/// ` unwritten` after a preallocated one.
pub fn show(e: &Extent) -> String {
    let mark = if e.unwritten { " unwritten" } else { "" };
    format!("{}..+{} -> {}{mark}", e.lblock, e.count, e.pblock)
}
