//! Backend layer: how a commit's block images reach the device: sorted by
//! address, neighbours merged into requests of up to [`MAX_MERGE`] bytes, and
//! all of a phase's requests handed over as one batch
//! ([`Device::write_gather`]), which may put them in flight together.
//!
//! Calls only the device layer; `commit.rs` calls it (never the reverse).

use crate::device::{Device, Gather};
use crate::error::Result;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::Arc;

/// The device writes of a volume's commits, begun and ended: a reader
/// that reads blocks without the delta guard learns from it that nothing
/// was written to the device since (`Fs::write_epoch`). Every block a
/// mounted volume writes goes through [`write_all`], which counts here.
#[derive(Debug, Default)]
pub struct WriteEpoch {
    begun: AtomicU64,
    ended: AtomicU64,
}

impl WriteEpoch {
    /// The writes begun so far, if none of them is in flight now: the
    /// device's blocks hold what they will hold until the next write
    /// begins ([`WriteEpoch::unchanged_since`]). `None` while one is in
    /// flight.
    pub fn quiet(&self) -> Option<u64> {
        // `ended` first: if `begun` is no larger a moment later, every
        // write begun by then had ended.
        let ended = self.ended.load(SeqCst);
        let begun = self.begun.load(SeqCst);
        (begun == ended).then_some(begun)
    }

    /// Whether no write has begun since [`WriteEpoch::quiet`] gave `epoch`.
    pub fn unchanged_since(&self, epoch: u64) -> bool {
        self.begun.load(SeqCst) == epoch
    }
}

/// A write counted in a [`WriteEpoch`] while it lives (ended on every path).
struct Counted<'a>(&'a WriteEpoch);

impl<'a> Counted<'a> {
    fn begin(epoch: &'a WriteEpoch) -> Counted<'a> {
        epoch.begun.fetch_add(1, SeqCst);
        Counted(epoch)
    }
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.0.ended.fetch_add(1, SeqCst);
    }
}

/// Blocks to write in this commit: (address, image).
pub(super) type Writes = Vec<(u64, Vec<u8>)>;

/// Data pages to write: (address, page), one block each. The pages are the
/// cache's own (`Arc`-shared, not copied): a frontend write to one of them
/// meanwhile forks it (`PageMap::page_mut`).
pub(super) type Pages = Vec<(u64, Arc<Vec<u8>>)>;

/// Largest single device write assembled from neighbouring blocks.
const MAX_MERGE: usize = 1 << 20;

/// Write metadata images, data pages and `last` (a commit block) in
/// address order, merging neighbours into one request of up to
/// [`MAX_MERGE`] bytes, all as one batch in flight together: nothing
/// orders them before the flush that follows. So an fsync commit's log
/// body and commit block, usually neighbours, go as one request.
pub(super) fn write_all(
    dev: &dyn Device,
    epoch: &WriteEpoch,
    bs: usize,
    writes: Writes,
    data: &[(u64, Arc<Vec<u8>>)],
    last: Option<(u64, &[u8])>,
) -> Result<()> {
    let mut all: Vec<(u64, &[u8])> = images(&writes, data).chain(last).collect();
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
    let _counted = Counted::begin(epoch);
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::device::MemDevice;

    /// Neighbouring images, pages and the commit block go out as one
    /// request each run of neighbours, the commit block included; every
    /// block lands where it belongs.
    #[test]
    fn neighbours_merge_into_one_request_with_the_commit_block() {
        let bs = 4096;
        let dev = MemDevice::new(bs as u32, 64);
        let writes: Writes = vec![(11, vec![2u8; bs]), (10, vec![1u8; bs]), (30, vec![5u8; bs])];
        let data: Pages = vec![(12, Arc::new(vec![3u8; bs]))];
        let commit = vec![4u8; bs];
        write_all(
            &dev,
            &WriteEpoch::default(),
            bs,
            writes,
            &data,
            Some((13, &commit)),
        )
        .unwrap();
        let c = dev.counters();
        assert_eq!(c.blocks_written, 5);
        assert_eq!(c.writes, 2, "blocks 10..=13 as one request, then block 30");
        let mut buf = vec![0u8; bs];
        for (block, byte) in [(10u64, 1u8), (11, 2), (12, 3), (13, 4), (30, 5)] {
            dev.read(block, &mut buf).unwrap();
            assert!(buf.iter().all(|&b| b == byte), "block {block}");
        }
    }
}
