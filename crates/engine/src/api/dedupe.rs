//! API layer: many dedupes at once ([`Fs::dedupe_ranges`]). Each range is
//! handled as [`Fs::dedupe_range`] handles one — checked, compared without
//! the guard, shared under it only if neither side changed since — but
//! the checks of all of them go under one hold of the exclusive delta
//! guard, and so do the shares: a tool deduping thousands of small files
//! takes the guard twice per batch instead of three times per range (each
//! hold waits for the shared holders to leave, and wakes threads). A range
//! that cannot be settled so (pages not yet on the device, a side that
//! changed) is then done alone by [`Fs::dedupe_range`].
//!
//! Calls the frontend (`Volume::dedupe_check`, `Volume::same_blocks`,
//! `Volume::dedupe_seen`, `Volume::clone_blocks`) and [`Fs::read_many`].

use super::Fs;
use crate::error::Result;
use crate::frontend::{BlockRun, DedupeSeen};
use crate::types::Ino;

/// One range of [`Fs::dedupe_ranges`]: [`Fs::dedupe_range`]'s arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DedupeRange {
    pub src: Ino,
    pub src_off: u64,
    pub dst: Ino,
    pub dst_off: u64,
    pub len: u64,
}

/// A range compared without the guard, to share under it.
struct Compared {
    k: usize,
    run: BlockRun,
    seen: DedupeSeen,
    equal: bool,
}

impl Fs {
    /// [`Fs::dedupe_range`] of each of `ranges`, in order, with the same
    /// answer each would give alone (the bytes shared, `None` if they
    /// differ, or the error), under two holds of the exclusive guard for
    /// all of them when nothing changes meanwhile.
    pub fn dedupe_ranges(&self, ranges: &[DedupeRange]) -> Vec<Result<Option<u64>>> {
        let mut out: Vec<Option<Result<Option<u64>>>> = ranges.iter().map(|_| None).collect();
        // Checked, and what each maps seen, under one hold.
        let mut todo: Vec<(usize, BlockRun, DedupeSeen)> = Vec::new();
        {
            let mut vol = self.vol();
            for (k, r) in ranges.iter().enumerate() {
                let step = (|| -> Result<Option<(BlockRun, DedupeSeen)>> {
                    let (sb, db, count) = vol.dedupe_check(r.src, r.src_off, r.dst, r.dst_off, r.len)?;
                    if vol.same_blocks(r.src, sb, r.dst, db, count)? {
                        out[k] = Some(Ok(Some(r.len)));
                        return Ok(None);
                    }
                    let run = BlockRun {
                        src: r.src,
                        src_block: sb,
                        dst: r.dst,
                        dst_block: db,
                        count,
                    };
                    let seen = vol.dedupe_seen(run)?;
                    // Pages not on the device: done alone (it commits).
                    Ok((!seen.unwritten).then_some((run, seen)))
                })();
                match step {
                    Ok(Some((run, seen))) => todo.push((k, run, seen)),
                    Ok(None) => {}
                    Err(e) => out[k] = Some(Err(e)),
                }
            }
        }
        // Compared without the guard, every range's reads made together
        // (the sources of a batch often lie one after another, and so do
        // the destinations).
        let mut reqs = Vec::with_capacity(2 * todo.len());
        for &(k, ..) in &todo {
            let r = &ranges[k];
            reqs.push((r.src, r.src_off, r.len as usize));
            reqs.push((r.dst, r.dst_off, r.len as usize));
        }
        let mut data = self.read_many(&reqs).into_iter();
        let mut compared = Vec::with_capacity(todo.len());
        for (k, run, seen) in todo {
            let (a, b) = (data.next(), data.next());
            // A read that fails: done alone, which reports it.
            if let (Some(Ok(a)), Some(Ok(b))) = (a, b) {
                compared.push(Compared {
                    k,
                    run,
                    seen,
                    equal: a == b,
                });
            }
        }
        // Shared under one hold, each only if neither side changed.
        let shared = self.retrying_enospc(|vol| {
            let mut done = Vec::new();
            for c in &compared {
                let r = &ranges[c.k];
                let unchanged = vol
                    .dedupe_check(r.src, r.src_off, r.dst, r.dst_off, r.len)
                    .is_ok()
                    && vol.dedupe_seen(c.run).is_ok_and(|s| s == c.seen);
                if !unchanged {
                    continue;
                }
                if c.equal {
                    let size = vol.getattr(r.dst)?.size;
                    vol.clone_blocks(c.run, size, false)?;
                }
                done.push((c.k, c.equal.then_some(r.len)));
            }
            Ok(done)
        });
        // On a failure those shared before it stay shared: alone, each
        // finds its blocks the same and answers so.
        if let Ok(done) = shared {
            for (k, answer) in done {
                out[k] = Some(Ok(answer));
            }
        }
        out.into_iter()
            .zip(ranges)
            .map(|(o, r)| o.unwrap_or_else(|| self.dedupe_range(r.src, r.src_off, r.dst, r.dst_off, r.len)))
            .collect()
    }
}
