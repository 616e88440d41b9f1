//! Generic btree used by the inode table, extent trees and directories.
mod flush;
pub mod node;
mod replay;
mod search;
pub mod tree;

pub use node::{Node, TreeKind};
pub use tree::Tree;
#[cfg(test)]
#[allow(clippy::arithmetic_side_effects, clippy::indexing_slicing)]
mod tests;
