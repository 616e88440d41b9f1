//! On-disk structures (stub).
pub mod btree;
pub mod codec;
pub mod superblock;
