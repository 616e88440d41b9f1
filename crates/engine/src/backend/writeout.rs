//! How a commit's block images reach the device: sorted by address,
//! neighbours merged into requests of up to [`MAX_MERGE`] bytes, and all of
//! a phase's requests handed over as one batch ([`Device::write_gather`]),
//! which may put them in flight together.
//!
//! Calls only the device layer.

use super::commit::{images, Writes};
use crate::device::{Device, Gather};
use crate::error::Result;
use std::sync::Arc;

/// Largest single device write assembled from neighbouring blocks.
const MAX_MERGE: usize = 1 << 20;

/// Write metadata images and data pages in address order, merging
/// neighbours into one request of up to [`MAX_MERGE`] bytes, then `last`
/// (a commit block) as a request of its own: all as one batch, in flight
/// together (nothing orders them before the flush that follows).
pub(super) fn write_all(
    dev: &dyn Device,
    bs: usize,
    writes: Writes,
    data: &[(u64, Arc<Vec<u8>>)],
    last: Option<(u64, &[u8])>,
) -> Result<()> {
    let mut all: Vec<(u64, &[u8])> = images(&writes, data).collect();
    all.sort_by_key(|w| w.0);
    let mut reqs: Vec<Gather> = Vec::new();
    let mut i = 0;
    while i < all.len() {
        let start = all[i].0;
        let mut next = start + (all[i].1.len() / bs) as u64;
        let mut len = all[i].1.len();
        let mut j = i + 1;
        while j < all.len() && all[j].0 == next && len < MAX_MERGE {
            next += (all[j].1.len() / bs) as u64;
            len += all[j].1.len();
            j += 1;
        }
        reqs.push((start, all[i..j].iter().map(|w| w.1).collect()));
        i = j;
    }
    if let Some((addr, block)) = last {
        reqs.push((addr, vec![block]));
    }
    dev.write_gather(&reqs)?;
    Ok(())
}
