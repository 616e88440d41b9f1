//! Structures: the on-disk data structures and their algorithms — the
//! generic btree, the inode table's attribute records, extent trees,
//! directory entries, bitmap blocks and the superblock. Everything decoded
//! here is untrusted input: decoders check bounds and name the block.
//!
//! Calls only the device layer (to load btree nodes).
pub mod bitmap;
pub mod btree;
pub mod dirent;
pub mod extent;
pub mod inode;
pub mod superblock;
