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
//! A caller that has read both ranges straight from the device already
//! (`tux3 dedupe` hashes every block it reads) hands the bytes over with
//! where it read them ([`ReadRange`], [`Fs::dedupe_ranges_read`]): when no
//! device write has begun since before those reads ([`Fs::write_epoch`])
//! and both ranges still lie on those blocks, with nothing unwritten, the
//! bytes are the files' bytes, and the compare needs no read at all. Each
//! block's checksum, where the volume keeps them, is checked against the
//! bytes too, so a damaged block is never shared over a good one (nor a
//! caller's wrong buffer): such a range, and any that changed, is done as
//! [`Fs::dedupe_ranges`] does it.
//!
//! Calls the frontend (`Volume::dedupe_check`, `Volume::same_blocks`,
//! `Volume::dedupe_seen`, `Volume::on_device`, `Volume::clone_blocks`) and
//! [`Fs::read_many`].

use super::Fs;
use crate::error::{err, Errno, Result};
use crate::frontend::{BlockRun, DedupeSeen, OnDevice, Volume};
use crate::structures::extent::block_sum;
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

/// A [`DedupeRange`] whose two sides the caller has read from the device
/// ([`Fs::dedupe_ranges_read`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadRange {
    pub range: DedupeRange,
    /// [`Fs::write_epoch`], taken before any of the reads.
    pub epoch: u64,
    /// The device block each block of the source, and of the destination,
    /// was read from.
    pub src_at: Vec<u64>,
    pub dst_at: Vec<u64>,
    /// The bytes read there: `range.len` each.
    pub src: Vec<u8>,
    pub dst: Vec<u8>,
}

/// A range compared without the guard, to share under it.
struct Compared {
    k: usize,
    run: BlockRun,
    seen: DedupeSeen,
    equal: bool,
}

impl Fs {
    /// The device writes the volume has begun so far, if none is in
    /// flight now; `None` while one is. Blocks read from the device after
    /// this returned `Some(e)` hold what they held then for as long as
    /// the volume's epoch stays `e` ([`Fs::dedupe_ranges_read`] checks it).
    pub fn write_epoch(&self) -> Option<u64> {
        self.shared.write_epoch.quiet()
    }

    /// [`Fs::dedupe_ranges`] of ranges whose bytes the caller read from the
    /// device: each answered from those bytes under one hold of the
    /// exclusive guard for all, with no read, when no device write has
    /// begun since `epoch`, both sides still lie on the blocks they were
    /// read from (written, no page dirty or under writeback) and every
    /// block's bytes match its checksum (where the volume keeps them);
    /// the others as [`Fs::dedupe_ranges`] answers them. The same answers
    /// as [`Fs::dedupe_range`] of each, in order.
    pub fn dedupe_ranges_read(&self, reads: &[ReadRange]) -> Vec<Result<Option<u64>>> {
        // The checksums of what was read, without the guard, where both
        // sides are equal (a block is what was read over the blocks read;
        // a range that says otherwise is done as unread).
        let sums: Vec<Vec<u32>> = reads
            .iter()
            .map(|r| {
                let bs = r.src.len() / r.src_at.len().max(1);
                if r.src == r.dst && bs > 0 {
                    r.src.chunks(bs).map(block_sum).collect()
                } else {
                    Vec::new()
                }
            })
            .collect();
        let settled = self.retrying_enospc(|vol| {
            let mut out = Vec::with_capacity(reads.len());
            for (r, sums) in reads.iter().zip(&sums) {
                out.push(match settle_read(vol, r, sums, &self.shared.write_epoch)? {
                    Some(Settled::Differ) => Some(None),
                    Some(Settled::Same) => Some(Some(r.range.len)),
                    Some(Settled::Share(run)) => {
                        let size = vol.getattr(r.range.dst)?.size;
                        vol.clone_blocks(run, size, false)?;
                        Some(Some(r.range.len))
                    }
                    None => None,
                });
            }
            Ok(out)
        });
        let settled = settled.unwrap_or_else(|_| vec![None; reads.len()]);
        // The rest as if not read: those shared before a failure above
        // are found the same.
        let rest: Vec<DedupeRange> = reads
            .iter()
            .zip(&settled)
            .filter(|(_, s)| s.is_none())
            .map(|(r, _)| r.range)
            .collect();
        let mut rest = self.dedupe_ranges(&rest).into_iter();
        settled
            .into_iter()
            .map(|s| match s {
                Some(answer) => Ok(answer),
                None => rest.next().unwrap_or_else(|| err(Errno::EIO)),
            })
            .collect()
    }

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

/// What [`settle_read`] found of a range read by the caller.
enum Settled {
    /// The bytes differ: nothing to do.
    Differ,
    /// Shared already.
    Same,
    /// Equal: share this run.
    Share(BlockRun),
}

/// Under the exclusive guard: whether `r`, read by the caller, can be
/// answered from its bytes (`None`: no, do it as unread). `sums`: the
/// checksums of the bytes, when both sides' are equal.
fn settle_read(
    vol: &mut Volume,
    r: &ReadRange,
    sums: &[u32],
    epoch: &crate::backend::WriteEpoch,
) -> Result<Option<Settled>> {
    let d = &r.range;
    let Ok((sb, db, count)) = vol.dedupe_check(d.src, d.src_off, d.dst, d.dst_off, d.len) else {
        return Ok(None);
    };
    let n = count as usize;
    let bytes = n * vol.bs() as usize;
    if r.src_at.len() != n || r.dst_at.len() != n || r.src.len() != bytes || r.dst.len() != bytes {
        return Ok(None);
    }
    let on = |vol: &mut Volume, ino, from, at: &[u64]| -> Result<Option<OnDevice>> {
        Ok(vol.on_device(ino, from, count)?.filter(|o| o.at == at))
    };
    let (Some(src), Some(dst)) = (on(vol, d.src, sb, &r.src_at)?, on(vol, d.dst, db, &r.dst_at)?) else {
        return Ok(None);
    };
    if src.at == dst.at {
        return Ok(Some(Settled::Same));
    }
    // Nothing written since the reads: the bytes are still the blocks'.
    if !epoch.unchanged_since(r.epoch) {
        return Ok(None);
    }
    if r.src != r.dst {
        return Ok(Some(Settled::Differ));
    }
    let matches = |o: &OnDevice, found: &[u32]| {
        o.sums.len() == found.len() && o.sums.iter().zip(found).all(|(s, f)| s.is_none_or(|s| s == *f))
    };
    if !matches(&src, sums) || !matches(&dst, sums) {
        // A damaged block (or bytes not read where said): the unread
        // path names it.
        return Ok(None);
    }
    Ok(Some(Settled::Share(BlockRun {
        src: d.src,
        src_block: sb,
        dst: d.dst,
        dst_block: db,
        count,
    })))
}
