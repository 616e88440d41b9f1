//! API layer: a shrink's record of shared blocks past the end
//! ([`Claims`]), and the pass that points every other mapping of them at
//! the copy the first one's move made ([`Fs::repoint_claims`]), so that
//! a shrink keeps clones shared instead of copying each (which would
//! also need the room for every copy below the new end). Defrag points
//! the clones of a file it rewrote the same way ([`Waiting`],
//! [`Fs::repoint_waiting`]).
//!
//! The walk (`api/relocate.rs`) hands each shared piece it finds to
//! [`Claims::take`]: blocks no file has claimed yet are moved with the
//! file that found them (the claimer); blocks already claimed wait, as
//! `(file, lblock)` pairs under the claimer's run cut in pieces of
//! [`PIECE`] blocks. Once the moves are committed, each piece's old bytes
//! are read once (nothing is written past the limit, so they stay as they
//! are) and its waiting mappings are pointed at the claimer's copy, at
//! most [`PER_HOLD`] under one hold of the guard
//! (`Volume::repoint_moved` checks and shares them). What could not be
//! pointed (a file written since) is moved by the shrink's next pass.
//! A defrag's old blocks may be freed and used again meanwhile, so there
//! they are read under the same hold as the sharing.
//!
//! Calls the frontend (`Volume::repoint_moved`) and the commit pipeline.

use super::Fs;
use crate::error::Result;
use crate::frontend::MovedRun;
use crate::types::Ino;
use std::collections::BTreeMap;

/// Blocks of a claimer's run one step compares and shares (the old
/// bytes are held in memory, the copy read under the guard).
const PIECE: u64 = 256;
/// Mappings pointed at a piece's copy under one hold of the guard.
const PER_HOLD: usize = 64;

/// Shared runs past the end a shrink's walk has claimed, and the other
/// mappings waiting for their copy.
#[derive(Default)]
pub(super) struct Claims {
    /// Old start -> (count, claimer, the claimer's lblock at the start).
    runs: BTreeMap<u64, (u64, Ino, u64)>,
    waiting: Waiting,
}

/// Mappings of old blocks waiting to be pointed at the copy a claimer
/// maps now: pieces of the claimer's runs, at most [`PIECE`] blocks each
/// and cut at multiples of it, each with the `(file, lblock)` mappings of
/// it that wait.
#[derive(Default)]
pub(super) struct Waiting(BTreeMap<MovedRun, Vec<(Ino, u64)>>);

impl Waiting {
    /// Old blocks `a..b` (the claimer's from `cl` on) are mapped by `ino`
    /// from `l` on: it waits.
    pub(super) fn add(&mut self, a: u64, b: u64, claimer: Ino, cl: u64, ino: Ino, l: u64) {
        let mut s = a;
        while s < b {
            let e = ((s / PIECE + 1) * PIECE).min(b);
            let run = MovedRun {
                old: s,
                count: e - s,
                claimer,
                lblock: cl + (s - a),
            };
            self.0.entry(run).or_default().push((ino, l + (s - a)));
            s = e;
        }
    }
}

impl Claims {
    /// `ino` maps old blocks `old..old+count` from `lblock` on, blocks
    /// other mappings share: the logical ranges `(start, count)` it is to
    /// move (blocks no one claimed before, now claimed by it); the rest
    /// wait for the claimer's copy.
    pub(super) fn take(&mut self, ino: Ino, lblock: u64, count: u64, old: u64) -> Vec<(u64, u64)> {
        let end = old + count;
        let mut moves = Vec::new();
        let mut at = old;
        // Claimed runs meeting `old..end`, from the last one starting at
        // or before `old`.
        let from = self
            .runs
            .range(..=old)
            .next_back()
            .filter(|(&s, r)| s + r.0 > old)
            .map_or(old, |(&s, _)| s);
        let met: Vec<(u64, (u64, Ino, u64))> = self.runs.range(from..end).map(|(&s, &r)| (s, r)).collect();
        for (s, (n, claimer, cl)) in met {
            let (a, b) = (s.max(at), (s + n).min(end));
            if a >= b {
                continue;
            }
            if a > at {
                moves.push((at, a - at));
            }
            self.waiting
                .add(a, b, claimer, cl + (a - s), ino, lblock + (a - old));
            at = b;
        }
        if at < end {
            moves.push((at, end - at));
        }
        for &(s, n) in &moves {
            self.runs.insert(s, (n, ino, lblock + (s - old)));
        }
        moves.into_iter().map(|(s, n)| (lblock + (s - old), n)).collect()
    }
}

impl Fs {
    /// Point every mapping waiting in `claims` at its claimer's copy (see
    /// the module comment), after committing the moves. Returns the
    /// blocks pointed.
    pub(super) fn repoint_claims(&self, claims: Claims, limit: u64) -> Result<u64> {
        if claims.waiting.0.is_empty() {
            return Ok(0);
        }
        self.shared.commit(false)?;
        self.repoint_waiting(claims.waiting, Some(limit))
    }

    /// Point every mapping in `waiting` at what its claimer maps now where
    /// that holds the old blocks' bytes. With `past` (a shrink's limit)
    /// the copy must lie below it, and the old blocks (past it, where
    /// nothing is allocated) are read once per piece beforehand; without
    /// it they are read under each hold of the guard. Returns the blocks
    /// pointed, after a commit if any.
    pub(super) fn repoint_waiting(&self, waiting: Waiting, past: Option<u64>) -> Result<u64> {
        let dev = self.device();
        let bs = dev.block_size() as usize;
        let mut done = 0;
        for (run, others) in waiting.0 {
            let mut old = Vec::new();
            if past.is_some() {
                old = vec![0u8; run.count as usize * bs];
                dev.read(run.old, &mut old)?;
            }
            let limit = past.unwrap_or(u64::MAX);
            for part in others.chunks(PER_HOLD) {
                let known = past.is_some().then_some(old.as_slice());
                done += self.retrying_enospc(|v| v.repoint_moved(run, part, known, limit))?;
            }
        }
        if done > 0 {
            self.shared.commit(false)?;
        }
        Ok(done)
    }
}
