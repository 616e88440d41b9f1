//! On-disk structures (stub).
pub mod superblock;
