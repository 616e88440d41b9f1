//! Dedupe, matching: blocks in file order against the index, gathered
//! into runs, each run one `Fs::dedupe_range` call.

use super::{gone, Blk, File, Index, Loc, Options, Outcome, Pair, Report, Segment};
use tux3::error::Error;
use tux3::Fs;

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
                Blk::Hole | Blk::Skip => {
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

    /// Share the run gathered, if any.
    pub(super) fn flush(&mut self) {
        let Some(r) = self.run.take() else { return };
        let (src, dst) = (&self.files[r.src.file as usize], &self.files[r.dst.file as usize]);
        let bs = self.bs;
        let outcome = if self.opts.dry_run {
            Outcome::Found
        } else {
            self.report.calls += 1;
            match self
                .fs
                .dedupe_range(src.ino, r.src.block * bs, dst.ino, r.dst.block * bs, r.len * bs)
            {
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
                    self.report.failures.push(failure(src, dst, &r, bs, &e));
                    Outcome::Failed
                }
            }
        };
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
