//! Cache layer, below the backend and above structures: inodes and their
//! data pages, dirty per delta. The frontend fills it, the backend drains it.
//!
//! A cached [`Inode`] owns its attributes, its data tree (loaded lazily by
//! the btree) and its dirty pages. Pages are `Arc`-shared blocks: a commit
//! takes its own references to the pages of the delta it writes, and a
//! frontend write to such a page forks it (`Arc::make_mut`) instead of
//! waiting — the block forking of DESIGN.md, in Rust terms. Pages a commit
//! wrote stay as clean pages, within a bound (`clean.rs`).
//!
//! May call structures (a cached inode holds its `Tree` and `InodeAttrs`)
//! and the layers below them; calls nothing above.

pub mod clean;
pub mod inode;
pub mod pages;

pub use clean::CleanPages;
pub use inode::{data_tree, Inode, InodeCache, InodeCell, InodeGuard};
pub use pages::{Page, PageMap};
