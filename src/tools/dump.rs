//! Human-readable report of a volume's structures (stub, filled in later).
use crate::device::Device;
use crate::error::Result;
use std::sync::Arc;

/// Superblock, log chain since the last unify, tree and free-space summary.
pub fn report(_dev: Arc<dyn Device>) -> Result<String> {
    Ok(String::new())
}
