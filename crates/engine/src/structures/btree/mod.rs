//! Structures layer: the generic btree used by the inode table, extent trees
//! and directories. Besides keyed lookups and edits, a tree answers a
//! probe of a key range in one descent (`Tree::probe`: the entries in
//! order, borrowed from their leaves, and the lowest free key), and an edit
//! can go to the place a probe found (`Spot`) without searching again.
//! A batch of entries in key order goes in with one descent, into leaves
//! filled in order (`bulk.rs`).
//! Nodes are searched by interpolation from where a key would sit among
//! evenly spread keys (`node.rs`).
//!
//! Calls the device (to load nodes) and the base modules.
mod ahead;
mod bulk;
mod cached;
mod check;
mod edit;
pub mod mend;
pub mod node;
mod redirect;
mod relocate;
mod replay;
pub mod salvage;
mod search;
mod shed;
pub mod tree;

pub use cached::{Cached, Loaded, Missing};
pub use node::{Node, TreeKind};
pub use replay::Routed;
pub use search::{Probe, Spot};
pub use tree::Tree;

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects, clippy::indexing_slicing)]
mod tests;
