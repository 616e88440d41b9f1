//! Structures layer, below the cache and above the log: the on-disk data
//! structures and their algorithms — the
//! generic btree, the inode table's attribute records, extent trees,
//! directory entries, bitmap blocks and the superblock. Everything decoded
//! here is untrusted input: decoders check bounds and name the block.
//!
//! May call the log (the superblock names the log's head as a `log::Tail`),
//! the device (to load btree nodes) and the base modules (codec, error,
//! types).
#![deny(clippy::arithmetic_side_effects, clippy::indexing_slicing)]

pub mod bitmap;
pub mod btree;
pub mod dirent;
pub mod extent;
pub mod extent_range;
pub mod inode;
pub mod scrub_state;
pub mod superblock;
pub mod xattr_file;

use crate::codec::Bounds;
use crate::device::Device;

/// The bounds decoders check values read from `dev` against.
pub fn bounds(dev: &dyn Device) -> Bounds {
    Bounds::new(dev.block_size(), dev.block_count())
}
