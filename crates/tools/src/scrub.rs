//! Scrub (`tux3 scrub`): read every block the volume and its snapshots
//! reference, once, in address order, and check it — file data against
//! its extent's checksums, metadata by its header (magic, CRC, own
//! address) or superblock checksum — then name what is damaged: files by
//! every path, with the snapshots holding the block, and metadata by
//! structure and block.
//!
//! One code path for a mount (the server runs it in a thread) and an
//! unmounted image (the command opens it with the engine): both give an
//! [`Fs`]. Steps:
//!  1. plan (`scrub/plan.rs`): with commits held, walk the committed
//!     volume read-only and list its blocks;
//!  2. read (`scrub/read.rs`): from the saved position, in large runs,
//!     throttled to `rate`, saving the position in the volume's scrub
//!     state record (inode 4, FORMAT.md section 16) every 1/200 of the
//!     total, through a delta commit;
//!  3. confirm: with commits held, plan again; a candidate counts only if
//!     its block still has the same owner (and checksum) and reads bad
//!     again (blocks may have been freed and reused meanwhile);
//!  4. report (`scrub/report.rs`) and save the final state.
//!
//! Calls the API (`Fs`: device, commit hold, state record, paths,
//! snapshots) and the sibling modules.

pub mod plan;
pub mod read;
pub mod report;

use plan::{Plan, What};
use read::{Bad, Step};
pub use report::{Damage, Report};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{SystemTime, UNIX_EPOCH};
use tux3::error::{Error, Result};
use tux3::structures::scrub_state::{ScrubPhase, ScrubState};
use tux3::Fs;

/// The default rate, bytes/s: low enough that a foreground fsync keeps
/// its latency (docs/BENCHMARKS.md, "Scrub").
pub const DEFAULT_RATE: u64 = 64 << 20;
/// The position is saved at least every 1/SAVES of the total.
pub(crate) const SAVES: u64 = 200;

/// How to run.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// Bytes per second; 0: as fast as the device reads.
    pub rate: u64,
    /// Begin at the first block even if a scrub was interrupted.
    pub restart: bool,
}

/// What another thread sees of a running scrub, and how it stops it.
#[derive(Default)]
pub struct Control {
    pub cancel: AtomicBool,
    /// Bytes checked (including those before a resume) and in all.
    pub done: AtomicU64,
    pub total: AtomicU64,
    /// Bytes read by this run (for the rate).
    pub read: AtomicU64,
    /// Candidates met so far (confirmed at the end).
    pub suspects: AtomicU64,
}

/// What a test hook may do after each run: go on, cancel (as `cancel`
/// does), or stop dead with nothing more saved (as a kill would).
pub enum Hook {
    Go,
    Cancel,
    Abandon,
}

/// The exit code of a scrub that ended `ended` with `report` (fsck's: 0
/// clean, 4 damage found, 32 cancelled; 8 is an operational error).
pub fn exit_code(ended: Ended, report: &Report) -> u8 {
    if !report.is_clean() {
        4
    } else if ended == Ended::Finished {
        0
    } else {
        32
    }
}

/// How a scrub ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    Finished,
    Cancelled,
    /// Stopped by the hook with nothing saved (tests).
    Abandoned,
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// Run a scrub of `fs`. `hook(position, done, total)` is called after
/// each run (tests stop a scrub at a known point through it).
pub fn run(
    fs: &Fs,
    opts: Options,
    ctl: &Control,
    hook: &mut dyn FnMut(u64, u64, u64) -> Hook,
) -> Result<(Ended, Report)> {
    let writable = !fs.is_read_only();
    // `--restart` replaces a damaged record; without it, its damage is
    // the error.
    let saved = match fs.scrub_state() {
        Err(_) if opts.restart => ScrubState::default(),
        r => r?.unwrap_or_default(),
    };
    let resume = !opts.restart && matches!(saved.phase, ScrubPhase::Running | ScrubPhase::Cancelled);
    let dev = fs.device();
    let plan = fs.with_commits_held(|| plan::collect(dev.clone()))??;
    let bs = plan.block_size;
    let total = plan.blocks() * bs;
    let mut state = if resume {
        ScrubState {
            phase: ScrubPhase::Running,
            total,
            done: (plan.blocks_below(saved.position) * bs).min(total),
            ..saved
        }
    } else {
        ScrubState {
            phase: ScrubPhase::Running,
            total,
            started: now(),
            ..ScrubState::default()
        }
    };
    let from = state.position;
    let base = state.done;
    ctl.total.store(total, Relaxed);
    ctl.done.store(base, Relaxed);
    let save = |s: &mut ScrubState| -> Result<()> {
        if writable {
            s.updated = now();
            fs.save_scrub_state(s)?;
        }
        Ok(())
    };
    save(&mut state)?;
    let step = (total / SAVES).max(bs);
    let mut saved_at = base;
    let mut ended = Ended::Finished;
    let mut failure: Option<Error> = None;
    // The runs hold planned blocks only: those read so far are the
    // planned ones from `from` to `pos` (counted, not summed over the plan
    // at each run).
    let mut after = |pos: u64, read_blocks: u64, bad: &[Bad]| -> Step {
        let done = base + read_blocks * bs;
        ctl.done.store(done, Relaxed);
        ctl.read.store(done - base, Relaxed);
        ctl.suspects.store(bad.len() as u64, Relaxed);
        state.position = pos;
        state.done = done.min(total);
        let h = hook(pos, done, total);
        if matches!(h, Hook::Abandon) {
            ended = Ended::Abandoned;
            return Step::Stop;
        }
        if matches!(h, Hook::Cancel) || ctl.cancel.load(Relaxed) {
            ended = Ended::Cancelled;
            return Step::Stop;
        }
        if done.saturating_sub(saved_at) >= step {
            saved_at = done;
            if let Err(e) = save(&mut state) {
                failure = Some(e);
                return Step::Stop;
            }
        }
        Step::Go
    };
    let (bad, _) = read::pass(dev.as_ref(), &plan, from, opts.rate, &mut after).map_err(Error::Io)?;
    if let Some(e) = failure {
        return Err(e);
    }
    if ended == Ended::Abandoned {
        return Ok((ended, Report::default()));
    }
    let confirmed = confirm(fs, &plan, bad)?;
    let report = report::build(fs, &plan, &confirmed);
    state.data_damage = state.data_damage.saturating_add(report.data_blocks());
    state.meta_damage = state.meta_damage.saturating_add(report.meta_blocks());
    if ended == Ended::Finished {
        state.phase = ScrubPhase::Finished;
        state.position = dev.block_count();
        state.done = total;
        ctl.done.store(total, Relaxed);
    } else {
        state.phase = ScrubPhase::Cancelled;
    }
    save(&mut state)?;
    let mut report = report;
    report.state = state;
    Ok((ended, report))
}

/// The candidates that are still bad: with commits held, the block still
/// has the owner it had (same file, logical block and checksum; or the
/// same kind of metadata) and reads bad again.
fn confirm(fs: &Fs, first: &Plan, bad: Vec<Bad>) -> Result<Vec<(plan::Item, Bad)>> {
    if bad.is_empty() {
        return Ok(Vec::new());
    }
    let dev = fs.device();
    fs.with_commits_held(|| -> Result<Vec<(plan::Item, Bad)>> {
        let now = plan::collect(dev.clone())?;
        let mut buf = vec![0u8; dev.block_size() as usize];
        let mut out = Vec::new();
        for c in bad {
            let (Some(was), Some(is)) = (first.find(c.block), now.find(c.block)) else {
                continue;
            };
            if !same_owner(was, is, c.block) {
                continue;
            }
            dev.read(c.block, &mut buf).map_err(Error::Io)?;
            if let Some(why) = read::check(dev.block_count(), is, c.block, &buf) {
                out.push((read::with_level(is, &buf), Bad { block: c.block, why }));
            }
        }
        Ok(out)
    })?
}

fn same_owner(a: &plan::Item, b: &plan::Item, block: u64) -> bool {
    match (&a.what, &b.what) {
        (What::Data { ino: x, .. }, What::Data { ino: y, .. }) => {
            let lb = |it: &plan::Item| match &it.what {
                What::Data { lblock, .. } => lblock.saturating_add(block - it.start),
                _ => 0,
            };
            x == y && lb(a) == lb(b) && a.sum_at(block) == b.sum_at(block)
        }
        (x, y) => std::mem::discriminant(x) == std::mem::discriminant(y),
    }
}
