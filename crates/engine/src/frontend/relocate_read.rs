//! Frontend layer: a shrink's file data read without the delta guard, for
//! `api/relocate.rs`. A batch's pieces are planned under the guard
//! ([`Volume::relocate_plan`]: the written blocks past the end that move,
//! as mapped then; [`Prefetched::plan`]: joined into runs adjacent on the
//! device), read with only the device ([`Prefetched::read`]: runs of up
//! to [`RUN_BYTES`], [`READERS`] at once, each block checked against its
//! extent's checksum), then made dirty under the guard again
//! (`Volume::relocate_chunk`, through `redirty`): a block takes the
//! contents read for it only if it has no page and is still mapped to the
//! block it was read from, with the same checksum; any other block — one
//! written, moved, cached or truncated meanwhile — is what the guarded
//! path makes of it (a dirty page left as it is, a cached one copied, the
//! device read again), or nothing if it is gone.
//!
//! Why a block still mapped where it was read from holds what was read:
//! every block past the end was allocated before the shrink's limit took
//! hold (`shrink_begin`) and none is allocated there since, freed or not;
//! a written block is never written again in place (writes go to new
//! blocks; only preallocated extents are filled in place, and those are
//! not planned, and a written extent never turns preallocated where it
//! lies: ZERO_RANGE allocates anew). So the contents of a block past the
//! end that a file maps as written do not change while the shrink runs.
//!
//! Calls the device and structures (extent trees, checksums).

use super::file::verify;
use super::Volume;
use crate::device::{AlignedBuf, Device};
use crate::error::{Errno, Error, Result};
use crate::structures::extent::Extent;
use crate::types::Ino;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// Largest read of a batch's data, in bytes. Reads are not held back for
/// urgent I/O as the batch's writes are: another process's fsync commit
/// queues behind what of them is in flight, so one read of 1 MiB at a time
/// (4 MiB two at a time put 8 MiB ahead of it: its p99 beside a shrink
/// 10.9 ms against 7.3 ms now, the move rate the same; BENCHMARKS.md).
pub const RUN_BYTES: u64 = 1 << 20;
/// Reads in flight at once.
pub const READERS: usize = 1;

/// A batch's data past the end: runs of blocks adjacent on the device,
/// each read in one request, the pieces of files' extents each holds (as
/// mapped when planned), and their contents, read since without the
/// guard.
pub struct Prefetched {
    runs: Vec<Run>,
    /// Each run's blocks, matching their checksums; `None` until read, or
    /// if the read failed or a block did not match (the guarded path
    /// reads them again and reports what it finds).
    data: Vec<Option<AlignedBuf>>,
    /// Each inode's pieces: (run, part) indexes.
    by_ino: HashMap<Ino, Vec<(usize, usize)>>,
}

/// Where a run lies and what it holds.
struct Run {
    /// The run's first block and length.
    pblock: u64,
    count: u64,
    /// `(ino, piece of a written extent)`, in device order.
    parts: Vec<(Ino, Extent)>,
}

impl Prefetched {
    /// `parts` (pieces of files' extents past the end, from
    /// [`Volume::relocate_plan`]) as runs for [`Prefetched::read`]: in device
    /// order, those adjacent on the device joined, up to [`RUN_BYTES`]
    /// each.
    pub fn plan(mut parts: Vec<(Ino, Extent)>, bs: u64) -> Prefetched {
        let max = (RUN_BYTES / bs).max(1);
        parts.sort_by_key(|(_, e)| e.pblock);
        let mut runs: Vec<Run> = Vec::new();
        let mut by_ino: HashMap<Ino, Vec<(usize, usize)>> = HashMap::new();
        for (ino, e) in parts {
            match runs.last_mut() {
                Some(r) if r.pblock + r.count == e.pblock && r.count + e.count <= max => {
                    r.count += e.count;
                    r.parts.push((ino, e));
                }
                _ => runs.push(Run {
                    pblock: e.pblock,
                    count: e.count,
                    parts: vec![(ino, e)],
                }),
            }
            let r = runs.len() - 1;
            by_ino.entry(ino).or_default().push((r, runs[r].parts.len() - 1));
        }
        Prefetched {
            data: runs.iter().map(|_| None).collect(),
            runs,
            by_ino,
        }
    }

    /// The contents read for logical blocks `b..b + n` of `ino`, which
    /// `e` (a written extent as mapped now) maps, and how many blocks of
    /// them (up to `n`) were read: if they were read from where `e` maps
    /// them now, with the same checksums.
    pub(super) fn blocks_of(&self, ino: Ino, e: &Extent, b: u64, n: u64, bs: u64) -> Option<(&[u8], u64)> {
        let (run, x, data) = self.by_ino.get(&ino)?.iter().find_map(|&(r, p)| {
            let run = self.runs.get(r)?;
            let (_, x) = run.parts.get(p)?;
            let covers = x.lblock <= b && b < x.end() && x.physical(b) == e.physical(b);
            covers.then_some((run, x, self.data.get(r)?.as_ref()?))
        })?;
        let n = n.min(x.end() - b);
        if (b..b + n).any(|k| x.sum_at(k) != e.sum_at(k)) {
            return None;
        }
        let at = ((x.physical(b) - run.pblock) * bs) as usize;
        let all = data.as_slice((run.count * bs) as usize);
        Some((all.get(at..at + (n * bs) as usize)?, n))
    }
}

impl Volume {
    /// The written blocks of `[from, to)` of `ino` at or past block
    /// `limit` that a shrink moves (what a snapshot holds is left), as
    /// mapped now.
    pub(super) fn relocate_targets(
        &mut self,
        ino: Ino,
        from: u64,
        to: u64,
        limit: u64,
    ) -> Result<Vec<Extent>> {
        let (dev, held_upto) = (self.be.dev.clone(), self.be.alloc.held_upto);
        let sums = self.be.alloc.sums.handle();
        let tree = &mut self.inode(ino)?.tree;
        Ok(
            crate::structures::extent_range::clipped(tree, dev.as_ref(), from, to)?
                .iter()
                .filter(|e| !e.unwritten && held_upto.is_none_or(|s| e.birth > s))
                .filter_map(|e| super::relocate::past(e, limit))
                .map(|e| sums.resolve(&e))
                .collect(),
        )
    }

    /// [`Volume::relocate_targets`] as pieces of at most [`RUN_BYTES`],
    /// each with `ino`, for [`Prefetched::plan`]. An inode gone holds none.
    /// Changes nothing.
    pub fn relocate_plan(&mut self, ino: Ino, from: u64, to: u64, limit: u64) -> Result<Vec<(Ino, Extent)>> {
        let run = (RUN_BYTES / self.bs()).max(1);
        let targets = match self.relocate_targets(ino, from, to, limit) {
            Err(Error::Posix(Errno::ENOENT)) => return Ok(Vec::new()),
            r => r?,
        };
        let mut out = Vec::new();
        for e in targets {
            let mut at = e.lblock;
            while at < e.end() {
                let to = (at + run).min(e.end());
                out.push((ino, e.piece(at, to)));
                at = to;
            }
        }
        Ok(out)
    }
}

impl Prefetched {
    /// Read every run from `dev`, [`READERS`] at once, each in one request,
    /// and check its blocks against their extents' checksums. A run whose
    /// read fails or whose blocks do not all match is left unread. Needs
    /// only the device: run it without the delta guard.
    pub fn read(&mut self, dev: &dyn Device) {
        let bs = u64::from(dev.block_size());
        let next = AtomicUsize::new(0);
        let read_one = |r: &Run| -> Option<AlignedBuf> {
            let len = (r.count * bs) as usize;
            let mut buf = AlignedBuf::new(len).ok()?;
            crate::device::read_named(dev, r.pblock, buf.as_mut_slice(len)).ok()?;
            let all = buf.as_slice(len);
            for (ino, e) in &r.parts {
                let at = ((e.pblock - r.pblock) * bs) as usize;
                let blocks = all.get(at..at + (e.count * bs) as usize)?;
                for (k, block) in blocks.chunks(bs as usize).enumerate() {
                    verify(*ino, e, e.lblock + k as u64, block).ok()?;
                }
            }
            Some(buf)
        };
        let shared = &self.runs;
        let read: Vec<(usize, AlignedBuf)> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..READERS.min(shared.len()))
                .map(|_| {
                    s.spawn(|| {
                        let mut got = Vec::new();
                        loop {
                            let i = next.fetch_add(1, Relaxed);
                            let Some(p) = shared.get(i) else { break };
                            if let Some(buf) = read_one(p) {
                                got.push((i, buf));
                            }
                        }
                        got
                    })
                })
                .collect();
            workers
                .into_iter()
                .flat_map(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect()
        });
        for (i, buf) in read {
            if let Some(d) = self.data.get_mut(i) {
                *d = Some(buf);
            }
        }
    }
}
