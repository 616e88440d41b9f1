//! The recorder's calls with a commit in flight: two fsyncs in flight at
//! once (the first one's flush held at the harness's device until the
//! second is written after it in the log), and calls made while a sync's
//! or a unify's commit is in flight ([`Interleaved`]), each recorded as
//! [`Recorder::op`] records a call.
//!
//! Calls the engine's API (`fsync_group`, `sync_with`,
//! `sync_with_log_written`, `unify_with`, `fsync_then`), the flush gate
//! (`hold.rs`) and the recorder's own parts.

use super::{log_pos, not_mounted, short, snapshot_after, OpRecord, Recorder, Snapshot};
use crate::hold::HoldFlush;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tux3::api::Fs;
use tux3::device::{Device, RecordingDevice};
use tux3::error::{Error, Result};
use tux3::types::Ino;

impl Recorder {
    /// Fsyncs of `first` and then `second` (each a group of one), both
    /// in flight at once: the first one's flush is held until the second
    /// commit is planned and written after it in the log, then let go.
    /// Each is recorded as a durability point for its file, in the order
    /// they returned (the order of their commits in the log).
    pub fn fsyncs_in_flight(&mut self, first: Ino, second: Ino) -> Result<()> {
        let (start, f0, d0) = (self.pos(), self.flushes(), self.deltas());
        let fs = self.fs.as_ref().ok_or_else(not_mounted)?;
        let (dev, hold) = (&self.dev, &self.hold.hold);
        // An fsync, and where the log and the flush count were when it
        // returned.
        let fsync = |ino: Ino| (fs.fsync_group(&[ino]), log_pos(dev), dev.counters().flushes);
        hold.arm();
        let outcome = std::thread::scope(|s| {
            // Whatever happens below, the held flush goes through in the end.
            let _release = ReleaseOnDrop(hold);
            let a = s.spawn(|| fsync(first));
            let join = |h: std::thread::ScopedJoinHandle<'_, (Result<()>, usize, u64)>| {
                h.join()
                    .map_err(|_| Error::BadImage("an fsync thread panicked".into()))
            };
            if !hold.wait_held_unless(Duration::from_secs(30), || a.is_finished()) {
                if !a.is_finished() {
                    return Err(Error::BadImage(format!("the fsync of ino {first} never flushed")));
                }
                // It ended before its flush (a device error): the second
                // goes alone.
                let (start_b, f0_b) = (log_pos(dev), dev.counters().flushes);
                let b = s.spawn(|| fsync(second));
                return Ok(((start_b, f0_b), join(a)?, join(b)?));
            }
            let (start_b, f0_b) = (log_pos(dev), dev.counters().flushes);
            let b = s.spawn(|| fsync(second));
            // The second commit is taken and has written its first block
            // (the committer writes a group's blocks at once).
            let deadline = Instant::now() + Duration::from_secs(30);
            // (Or it ended: it failed before writing.)
            while (fs.pending_fsyncs() > 0 || log_pos(dev) == start_b) && !b.is_finished() {
                if Instant::now() > deadline {
                    return Err(Error::BadImage(format!(
                        "the fsync of ino {second} was not written while the one before flushed"
                    )));
                }
                std::thread::yield_now();
            }
            hold.release();
            Ok(((start_b, f0_b), join(a)?, join(b)?))
        });
        let ((start_b, f0_b), (ra, end_a, f_a), (rb, end_b, f_b)) = outcome?;
        let full = self.deltas() != d0;
        let _quiet = self.quiet();
        let snap = snapshot_after(self.fs()?, &self.dev, self.pos(), "two fsyncs in flight")?;
        let names = self.note(&snap)?;
        // Each call's flushes are those the device saw while it ran (the
        // second one's window holds the first one's held flush too).
        let mut calls = [
            (first, start, end_a, f_a - f0, ra, "first"),
            (second, start_b, end_b, f_b - f0_b, rb, "second"),
        ];
        calls.sort_by_key(|c| c.2);
        for (ino, start, end, flushes, r, which) in calls {
            let ok = r.is_ok();
            self.ops.push(OpRecord {
                desc: format!("fsync(ino {ino}), the {which} of two in flight -> {r:?}"),
                start,
                end,
                durable: ok,
                fsynced: if ok { vec![ino] } else { Vec::new() },
                flushes,
                full,
            });
            self.snaps.push(snap.clone());
            self.snapsets.push(names.clone());
        }
        Ok(())
    }

    /// `sync`, running `during` while its commit is in flight (its data
    /// written, its log not yet; with `after_log`, its log written and its
    /// flush not yet): the calls `during` makes through the
    /// [`Interleaved`] belong to the next delta, and fsync commits among
    /// them may go ahead of the sync's log (or follow it, before its
    /// flush). The sync is recorded first, as a durability point for the
    /// state when it started (its snapshot); the calls after it, in order.
    /// With `unify`, the commit is a unify and the calls run before its
    /// superblock.
    pub fn sync_interleaved(
        &mut self,
        unify: bool,
        after_log: bool,
        during: impl FnOnce(&mut Interleaved<'_>) -> Result<()>,
    ) -> Result<()> {
        let quiet = self.quiet();
        let before = Snapshot::take(self.fs()?)?;
        let names = self.note(&before)?;
        drop(quiet);
        let (start, f0) = (self.pos(), self.flushes());
        let fs = self.fs.as_ref().ok_or_else(not_mounted)?;
        let mut inner = Interleaved {
            failing: self.hold.failing.clone(),
            fs,
            dev: &self.dev,
            ops: Vec::new(),
            snaps: Vec::new(),
        };
        let mut failed = None;
        let run = || failed = during(&mut inner).err();
        let r = if unify {
            fs.unify_with(run)
        } else if after_log {
            fs.sync_with_log_written(run)
        } else {
            fs.sync_with(run)
        };
        // (A call during the commit that failed ends the workload, but
        // what the calls before it did is recorded: it may be durable.)
        let (ops, snaps) = (inner.ops, inner.snaps);
        let end = self.pos();
        let inner_flushes: u64 = ops.iter().map(|o| o.flushes).sum();
        self.ops.push(OpRecord {
            desc: format!(
                "{} (with {} calls during its commit) -> {r:?}",
                if unify { "unify" } else { "sync" },
                ops.len()
            ),
            start,
            end,
            durable: r.is_ok(),
            fsynced: Vec::new(),
            flushes: self.flushes() - f0 - inner_flushes,
            full: true,
        });
        self.snaps.push(before);
        // No call during the commit takes or deletes a snapshot.
        for _ in 0..=snaps.len() {
            self.snapsets.push(names.clone());
        }
        self.ops.extend(ops);
        self.snaps.extend(snaps);
        if let Some(e) = failed {
            return Err(e);
        }
        r.map_err(|e| Error::BadImage(format!("sync failed: {e}")))
    }
}

/// Calls made while a sync's commit is in flight
/// ([`Recorder::sync_interleaved`]), recorded like [`Recorder::op`] and
/// [`Recorder::fsync`].
pub struct Interleaved<'a> {
    failing: Option<Arc<crate::failing::FailingDevice>>,
    fs: &'a Fs,
    dev: &'a RecordingDevice,
    ops: Vec<OpRecord>,
    snaps: Vec<Snapshot>,
}

impl Interleaved<'_> {
    fn pos(&self) -> usize {
        log_pos(self.dev)
    }

    fn record(
        &mut self,
        desc: String,
        start: usize,
        f0: u64,
        durable: bool,
        fsynced: Vec<Ino>,
    ) -> Result<()> {
        let end = self.pos();
        let flushes = self.dev.counters().flushes - f0;
        let quiet = self.failing.as_ref().map(|f| f.quiet());
        self.snaps.push(snapshot_after(self.fs, self.dev, end, &desc)?);
        drop(quiet);
        self.ops.push(OpRecord {
            desc,
            start,
            end,
            durable,
            fsynced,
            flushes,
            // Calls during a commit never commit a delta themselves.
            full: false,
        });
        Ok(())
    }

    /// One API call (not a durability point); see [`Recorder::op`].
    pub fn op<T: std::fmt::Debug>(
        &mut self,
        desc: impl Into<String>,
        f: impl FnOnce(&Fs) -> Result<T>,
    ) -> Result<T> {
        let (start, f0) = (self.pos(), self.dev.counters().flushes);
        let r = f(self.fs);
        let shown = match &r {
            Ok(v) => format!("{} -> {}", desc.into(), short(&format!("{v:?}"))),
            Err(e) => format!("{} -> error {e}", desc.into()),
        };
        if let Err(e) = &r {
            if !matches!(e, Error::Posix(_)) {
                return Err(Error::BadImage(format!("workload call failed: {shown}")));
            }
        }
        self.record(shown, start, f0, false, Vec::new())?;
        r
    }

    /// `fsync(ino)`, which must complete while the commit is in flight (an
    /// fsync commit ahead of it). One that waits for the commit instead
    /// could never return here: after a minute the workload fails.
    pub fn fsync(&mut self, ino: Ino) -> Result<()> {
        let (start, f0) = (self.pos(), self.dev.counters().flushes);
        let (tx, rx) = crossbeam_channel::bounded(1);
        self.fs.fsync_then(
            ino,
            false,
            Box::new(move |r| {
                let _ = tx.send(r);
            }),
        );
        let r = rx.recv_timeout(std::time::Duration::from_secs(60)).map_err(|_| {
            Error::BadImage(format!(
                "fsync(ino {ino}) during a commit waited for that commit instead of going ahead"
            ))
        })?;
        let ok = r.is_ok();
        self.record(
            format!("fsync(ino {ino}) -> {r:?}"),
            start,
            f0,
            ok,
            if ok { vec![ino] } else { Vec::new() },
        )?;
        r
    }
}

/// Lets a held flush go when dropped.
struct ReleaseOnDrop<'a>(&'a HoldFlush);

impl Drop for ReleaseOnDrop<'_> {
    fn drop(&mut self) {
        self.0.release();
    }
}
