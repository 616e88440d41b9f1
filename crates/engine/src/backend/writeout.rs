//! Backend layer: how a commit's block images reach the device: sorted by
//! address, neighbours merged into requests of up to [`MAX_MERGE`] bytes, and
//! all of a phase's requests handed over as one batch
//! ([`Device::write_gather`]), which may put them in flight together.
//!
//! Calls only the device layer; `commit.rs` calls it (never the reverse).

use crate::device::{Device, Gather};
use crate::error::Result;
use std::sync::Arc;

/// Blocks to write in this commit: (address, image).
pub(super) type Writes = Vec<(u64, Vec<u8>)>;

/// Data pages to write: (address, page), one block each. The pages are the
/// cache's own (`Arc`-shared, not copied): a frontend write to one of them
/// meanwhile forks it (`PageMap::page_mut`).
pub(super) type Pages = Vec<(u64, Arc<Vec<u8>>)>;

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

/// Every block image a commit writes besides its commit block: metadata
/// images, then data pages, as (address, bytes).
pub(super) fn images<'a>(
    writes: &'a Writes,
    data: &'a [(u64, Arc<Vec<u8>>)],
) -> impl Iterator<Item = (u64, &'a [u8])> {
    writes
        .iter()
        .map(|(a, b)| (*a, b.as_slice()))
        .chain(data.iter().map(|(a, p)| (*a, p.as_slice())))
}
