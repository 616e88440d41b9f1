//! Generic btree used by the inode table, extent trees and directories.
pub mod node;
pub mod tree;

pub use node::{Node, TreeKind};
pub use tree::Tree;
#[cfg(test)]
mod tests;
