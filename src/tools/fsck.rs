//! Volume checker (stub, filled in later).
use crate::device::Device;
use crate::error::Result;
use std::sync::Arc;

/// What fsck should do.
#[derive(Debug, Clone, Default)]
pub struct FsckOptions {
    /// Repair what can be repaired.
    pub repair: bool,
    /// Show a progress bar (on a terminal).
    pub progress: bool,
}

/// What fsck found.
#[derive(Debug, Clone, Default)]
pub struct FsckReport {
    /// One line per problem still present, naming the block/inode.
    pub problems: Vec<String>,
    /// One line per problem repaired.
    pub repaired: Vec<String>,
    /// Counts for the summary line.
    pub inodes: u64,
    pub blocks_used: u64,
}

/// Check every invariant of the volume on `dev`.
pub fn check(_dev: Arc<dyn Device>, _opts: &FsckOptions) -> Result<FsckReport> {
    Ok(FsckReport::default())
}
