//! Dedupe, matching: blocks in device order against the index, gathered
//! into runs, each run one `Fs::dedupe_range` call. The calls go to
//! [`Options::callers`] threads ([`calls`]), so that their reads overlap
//! each other and the matching; a caller makes the calls waiting for it
//! together (`Fs::dedupe_ranges`); their outcomes are taken in the order the
//! runs were found (the hook sees the pairs in that order).
//!
//! A run whose blocks were all read from the device in one write epoch
//! carries their bytes (`dedupe/kept.rs`), up to [`CARRY`] bytes a side
//! (a longer one is cut into calls of that size), and its call hands them
//! to `Fs::dedupe_ranges_read`, which compares them without reading.
//!
//! The runs in flight at once never hurt each other: a run's source
//! blocks are first occurrences (indexed) and its destination blocks
//! later ones (matched, never indexed), so no block is the source of one
//! run and the destination of another; and each call compares before it
//! shares.

use super::kept::{Carried, Kept, SegBytes};
use super::{gone, Blk, File, Index, Loc, Options, Outcome, Pair, Report, Segment};
use crossbeam_channel::{Receiver, Sender};
use std::collections::BTreeMap;
use tux3::error::{Error, Result};
use tux3::{DedupeRange, Fs, ReadRange};

/// A call to make: its number (in the order found), then
/// `Fs::dedupe_range`'s arguments, and the bytes of both sides if it
/// carries them.
pub(super) type Call = (u64, DedupeRange, Option<Box<ReadRange>>);

/// Most bytes a side of a run carries: a run that carries bytes is cut
/// into calls of this size (the calls waiting for the callers hold at
/// most `BATCH` times the callers of them).
pub(super) const CARRY: u64 = 1 << 20;
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
        let (mut read, mut read_seq, mut unread, mut unread_seq) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (seq, range, bytes) in batch {
            match bytes {
                Some(b) => {
                    read.push(*b);
                    read_seq.push(seq);
                }
                None => {
                    unread.push(range);
                    unread_seq.push(seq);
                }
            }
        }
        let answers = fs
            .dedupe_ranges_read(&read)
            .into_iter()
            .zip(read_seq)
            .chain(fs.dedupe_ranges(&unread).into_iter().zip(unread_seq));
        for (r, seq) in answers {
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
    /// Both sides' bytes, while every block's are known.
    pub(super) carried: Option<Carried>,
}

pub(super) struct Matcher<'a> {
    pub(super) fs: &'a Fs,
    pub(super) files: &'a [File],
    pub(super) bs: u64,
    pub(super) opts: &'a Options,
    pub(super) max_call: u64,
    pub(super) index: Index,
    /// Indexed blocks' bytes, as read.
    pub(super) kept: Kept,
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
    pub(super) fn segment(&mut self, seg: &Segment, blocks: &[Blk], bytes: Option<&SegBytes>) {
        let zero_key = u128::MAX;
        let bs = self.bs;
        let carry = (CARRY / bs).max(1);
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
                    self.report.zero_bytes += bs;
                    if !self.opts.zeros {
                        self.flush();
                        continue;
                    }
                    zero_key
                }
                Blk::Data(h) => h,
            };
            let mine = || bytes.and_then(|sb| sb.block(k as u64, bs));
            let epoch = bytes.map_or(0, |sb| sb.epoch);
            let first = self.index.get(&key).copied();
            if let Some(r) = &mut self.run {
                let follows = r.dst.file == here.file && r.dst.block + r.len == here.block;
                let next_src = Loc {
                    file: r.src.file,
                    block: r.src.block + r.len,
                };
                let most = if r.carried.is_some() {
                    carry.min(self.max_call)
                } else {
                    self.max_call
                };
                if follows && first == Some(next_src) && r.len < most {
                    r.len += 1;
                    if let Some(c) = &mut r.carried {
                        if !c.push(self.kept.get(next_src), mine(), epoch) {
                            r.carried = None;
                        }
                    }
                    self.report.dup_bytes += bs;
                    continue;
                }
                if follows && first == Some(next_src) {
                    // A full call: the next one goes on from here.
                    self.flush();
                    self.run = Some(Run {
                        src: next_src,
                        dst: here,
                        len: 1,
                        carried: Carried::start(self.kept.get(next_src), mine(), epoch),
                    });
                    self.report.dup_bytes += bs;
                    continue;
                }
            }
            self.flush();
            match first {
                Some(src) => {
                    self.report.dup_bytes += bs;
                    self.run = Some(Run {
                        src,
                        dst: here,
                        len: 1,
                        carried: Carried::start(self.kept.get(src), mine(), epoch),
                    });
                }
                None if self.index.len() < self.opts.max_index => {
                    self.index.insert(key, here);
                    if let Some(sb) = bytes {
                        let at = sb.at + k * bs as usize;
                        if let Some(data) = sb.buf.buf.get(at..at + bs as usize) {
                            self.kept.keep(here, data, sb.pblock + k as u64, epoch);
                        }
                    }
                }
                None => self.report.unindexed_bytes += bs,
            }
        }
    }

    /// Hand the run gathered, if any, to the callers (a dry run: report
    /// it found).
    pub(super) fn flush(&mut self) {
        let Some(mut r) = self.run.take() else { return };
        if self.opts.dry_run {
            return self.report_pair(&r, Outcome::Found);
        }
        let bs = self.bs;
        let (src, dst) = (
            self.files[r.src.file as usize].ino,
            self.files[r.dst.file as usize].ino,
        );
        let range = DedupeRange {
            src,
            src_off: r.src.block * bs,
            dst,
            dst_off: r.dst.block * bs,
            len: r.len * bs,
        };
        let carried = r.carried.take().map(|c| {
            let (src, dst) = c.bytes(&self.kept);
            Box::new(ReadRange {
                range,
                epoch: c.epoch,
                src_at: c.src_at,
                dst_at: c.dst_at,
                src,
                dst,
            })
        });
        let call = (self.seq, range, carried);
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
    fn call_here(&mut self, (seq, d, carried): Call) {
        let r = match carried {
            Some(c) => self.fs.dedupe_ranges_read(&[*c]).pop().unwrap_or(Ok(None)),
            None => self.fs.dedupe_range(d.src, d.src_off, d.dst, d.dst_off, d.len),
        };
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
