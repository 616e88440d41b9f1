//! Cache: inodes and their dirty data pages, tagged by delta.
//!
//! A cached [`Inode`] owns its attributes, its data tree (loaded lazily by
//! the btree) and its dirty pages. Pages are `Arc`-shared blocks: a commit
//! takes its own references to the pages of the delta it writes, and a
//! frontend write to such a page forks it (`Arc::make_mut`) instead of
//! waiting — the block forking of DESIGN.md, in Rust terms. Pages a commit
//! wrote stay as clean pages, within a bound (`clean.rs`).
//!
//! Calls structures only.

pub mod clean;
pub mod inode;
pub mod pages;

pub use clean::CleanPages;
pub use inode::{Inode, InodeCache};
pub use pages::{Page, PageMap};
