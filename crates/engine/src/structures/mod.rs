//! Structures layer, below the cache and above the log: the on-disk data
//! structures and their algorithms — the
//! generic btree, the inode table's attribute records, extent trees,
//! directory entries, bitmap blocks and the superblock. Everything decoded
//! here is untrusted input: decoders check bounds and name the block.
//!
//! May call the log (the superblock names the log's head as a `log::Tail`),
//! the device (to load btree nodes) and the base modules (codec, error,
//! types).
pub mod bitmap;
pub mod btree;
pub mod dirent;
pub mod extent;
pub mod inode;
pub mod superblock;
