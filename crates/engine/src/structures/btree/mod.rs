//! Structures layer: the generic btree used by the inode table, extent trees
//! and directories.
//!
//! Calls the device (to load nodes) and the base modules.
pub mod node;
mod redirect;
mod replay;
mod search;
pub mod tree;

pub use node::{Node, TreeKind};
pub use tree::Tree;

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects, clippy::indexing_slicing)]
mod tests;
