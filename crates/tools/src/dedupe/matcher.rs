//! Dedupe, matching: blocks in device order against the index, gathered
//! into runs, each run one `Fs::dedupe_range` call. The calls go to
//! [`Options::callers`] threads ([`calls`]), so that their reads overlap
//! each other and the matching; a caller makes the calls waiting for it
//! together (`Fs::dedupe_ranges`); their outcomes are taken in the order the
//! runs were found (the hook sees the pairs in that order).
//!
//! The runs in flight at once never hurt each other: a run's source
//! blocks are first occurrences (indexed) and its destination blocks
//! later ones (matched, never indexed), so no block is the source of one
//! run and the destination of another; and each call compares before it
//! shares.

use super::{gone, Blk, File, Index, Loc, Options, Outcome, Pair, Report, Segment};
use crossbeam_channel::{Receiver, Sender};
use std::collections::BTreeMap;
use tux3::error::{Error, Result};
use tux3::types::Ino;
use tux3::{DedupeRange, Fs};

/// A call to make: its number (in the order found), then
/// `Fs::dedupe_range`'s arguments.
pub(super) type Call = (u64, Ino, u64, Ino, u64, u64);
/// A call's number and what it returned.
pub(super) type Answer = (u64, Result<Option<u64>>);

/// Most calls a caller makes at once ([`Fs::dedupe_ranges`]: two holds of
/// the exclusive guard for all of them instead of three each). Its reads
/// are made one after another, so a larger batch leaves fewer callers
/// with reads in flight: 32 made two copies of /usr/include no faster than
/// one call at a time, 8 took 0.6-0.9 s against 1.0-1.2 s.
pub(super) const BATCH: usize = 8;

/// A caller thread: the calls of `rx` made, as many at once as are
/// waiting (up to [`BATCH`]), their answers to `tx`.
pub(super) fn calls(fs: &Fs, rx: Receiver<Call>, tx: Sender<Answer>) {
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        while batch.len() < BATCH {
            match rx.try_recv() {
                Ok(c) => batch.push(c),
                Err(_) => break,
            }
        }
        let ranges: Vec<DedupeRange> = batch
            .iter()
            .map(|&(_, src, src_off, dst, dst_off, len)| DedupeRange {
                src,
                src_off,
                dst,
                dst_off,
                len,
            })
            .collect();
        let answers = fs.dedupe_ranges(&ranges);
        for ((seq, ..), r) in batch.into_iter().zip(answers) {
            if tx.send((seq, r)).is_err() {
                return;
            }
        }
    }
}

/// A run of matching blocks being gathered: `len` blocks of `src` from
/// `src.block` equal (by hash) to those of `dst`.
pub(super) struct Run {
    pub(super) src: Loc,
    pub(super) dst: Loc,
    pub(super) len: u64,
}

pub(super) struct Matcher<'a> {
    pub(super) fs: &'a Fs,
    pub(super) files: &'a [File],
    pub(super) bs: u64,
    pub(super) opts: &'a Options,
    pub(super) max_call: u64,
    pub(super) index: Index,
    pub(super) run: Option<Run>,
    pub(super) report: &'a mut Report,
    pub(super) hook: &'a mut dyn FnMut(&Pair),
    /// Calls to the callers (none: made by the matcher itself) and their
    /// answers.
    pub(super) to_call: Option<Sender<Call>>,
    pub(super) answers: Receiver<Answer>,
    /// Runs handed to the callers and not yet reported, by number;
    /// answers that came before those of earlier runs.
    pub(super) sent: BTreeMap<u64, Run>,
    pub(super) early: BTreeMap<u64, Result<Option<u64>>>,
    pub(super) seq: u64,
}

impl Matcher<'_> {
    pub(super) fn segment(&mut self, seg: &Segment, blocks: &[Blk]) {
        let zero_key = u128::MAX;
        for (k, b) in blocks.iter().enumerate() {
            let here = Loc {
                file: seg.file,
                block: seg.first + k as u64,
            };
            let key = match *b {
                Blk::Hole | Blk::Skip | Blk::Shared => {
                    self.flush();
                    continue;
                }
                Blk::Zero => {
                    self.report.zero_bytes += self.bs;
                    if !self.opts.zeros {
                        self.flush();
                        continue;
                    }
                    zero_key
                }
                Blk::Data(h) => h,
            };
            let first = self.index.get(&key).copied();
            if let Some(r) = &mut self.run {
                let follows = r.dst.file == here.file && r.dst.block + r.len == here.block;
                let next_src = Loc {
                    file: r.src.file,
                    block: r.src.block + r.len,
                };
                if follows && first == Some(next_src) && r.len < self.max_call {
                    r.len += 1;
                    self.report.dup_bytes += self.bs;
                    continue;
                }
                if follows && first == Some(next_src) {
                    // A full call: the next one goes on from here.
                    self.flush();
                    self.run = Some(Run {
                        src: next_src,
                        dst: here,
                        len: 1,
                    });
                    self.report.dup_bytes += self.bs;
                    continue;
                }
            }
            self.flush();
            match first {
                Some(src) => {
                    self.report.dup_bytes += self.bs;
                    self.run = Some(Run {
                        src,
                        dst: here,
                        len: 1,
                    });
                }
                None if self.index.len() < self.opts.max_index => {
                    self.index.insert(key, here);
                }
                None => self.report.unindexed_bytes += self.bs,
            }
        }
    }

    /// Hand the run gathered, if any, to the callers (a dry run: report
    /// it found).
    pub(super) fn flush(&mut self) {
        let Some(r) = self.run.take() else { return };
        if self.opts.dry_run {
            return self.report_pair(&r, Outcome::Found);
        }
        let bs = self.bs;
        let (src, dst) = (
            self.files[r.src.file as usize].ino,
            self.files[r.dst.file as usize].ino,
        );
        let call = (self.seq, src, r.src.block * bs, dst, r.dst.block * bs, r.len * bs);
        self.sent.insert(self.seq, r);
        self.seq += 1;
        self.report.calls += 1;
        match &self.to_call {
            Some(to) => {
                if let Err(e) = to.send(call) {
                    // No caller left (cannot be while we hold a sender).
                    self.to_call = None;
                    self.call_here(e.0);
                }
            }
            None => self.call_here(call),
        }
        self.answered(false);
    }

    /// Make `call` on this thread (no callers).
    fn call_here(&mut self, (seq, src, src_off, dst, dst_off, len): Call) {
        let r = self.fs.dedupe_range(src, src_off, dst, dst_off, len);
        self.early.insert(seq, r);
    }

    /// Report the runs answered, in order; `all`: wait for every answer.
    pub(super) fn answered(&mut self, all: bool) {
        loop {
            let Some((&seq, _)) = self.sent.first_key_value() else {
                return;
            };
            let answer = match self.early.remove(&seq) {
                Some(a) => a,
                None => {
                    let got = if all {
                        self.answers.recv().ok()
                    } else {
                        self.answers.try_recv().ok()
                    };
                    match got {
                        Some((s, a)) if s == seq => a,
                        Some((s, a)) => {
                            self.early.insert(s, a);
                            continue;
                        }
                        None if all => {
                            // No caller left: what remains was never called.
                            self.sent.clear();
                            return;
                        }
                        None => return,
                    }
                }
            };
            let Some(r) = self.sent.remove(&seq) else { continue };
            let bs = self.bs;
            let outcome = match answer {
                Ok(Some(n)) => {
                    self.report.shared_bytes += n;
                    Outcome::Shared
                }
                Ok(None) => {
                    self.report.differing += 1;
                    Outcome::Differed
                }
                Err(e) if gone(&e) => {
                    self.report.differing += 1;
                    Outcome::Differed
                }
                Err(e) => {
                    let (src, dst) = (&self.files[r.src.file as usize], &self.files[r.dst.file as usize]);
                    self.report.failures.push(failure(src, dst, &r, bs, &e));
                    Outcome::Failed
                }
            };
            self.report_pair(&r, outcome);
        }
    }

    fn report_pair(&mut self, r: &Run, outcome: Outcome) {
        let (src, dst) = (&self.files[r.src.file as usize], &self.files[r.dst.file as usize]);
        let bs = self.bs;
        (self.hook)(&Pair {
            src: &src.path,
            src_off: r.src.block * bs,
            dst: &dst.path,
            dst_off: r.dst.block * bs,
            len: r.len * bs,
            outcome,
        });
    }
}

fn failure(src: &File, dst: &File, r: &Run, bs: u64, e: &Error) -> String {
    format!(
        "{} at {} and {} at {}, {} bytes: {e}",
        src.path,
        r.src.block * bs,
        dst.path,
        r.dst.block * bs,
        r.len * bs
    )
}
