//! Structures layer: the generic btree used by the inode table, extent trees
//! and directories.
//!
//! Calls the device (to load nodes) and the base modules.
pub mod node;
pub mod tree;

pub use node::{Node, TreeKind};
pub use tree::Tree;
#[cfg(test)]
mod tests;
