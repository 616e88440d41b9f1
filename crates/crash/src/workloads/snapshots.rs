//! The `snapshots` and `many_snapshots` workloads: files changed while
//! snapshots are taken, deleted and rolled back to, with crashes; and the
//! same with a hundred snapshots alive at every call. Calls the recorder
//! and the parent module's helpers only.

use super::{create_write, fill, snapshot_drop, snapshot_take};
use crate::record::{Recorder, Setup};
use crate::Rng;
use tux3::error::{Error, Result};
use tux3::types::{RenameFlags, ROOT_INO};

/// Files written, overwritten and unlinked while snapshots are taken (each
/// a unify), deleted (their space reclaimed over the following commits)
/// and rolled back to, with a crash and remount now and then: after any crash each
/// snapshot is wholly there or absent, and fsck finds every block a
/// snapshot holds live or on the dead list and nothing leaked.
pub(super) fn snapshots(rec: &mut Recorder, rng: &mut Rng) -> Result<()> {
    let mut taken: Vec<String> = Vec::new();
    for step in 0..48u64 {
        let name = format!("s{}", rng.below(8));
        let data = fill(rng.next(), 1 + rng.below(24_000) as usize);
        create_write(rec, &name, &data)?;
        if rng.below(4) == 0 {
            rec.op(format!("unlink /{name}"), false, |fs| {
                fs.unlink(ROOT_INO, name.as_bytes())
            })?;
        }
        match rng.below(6) {
            0 | 1 => snapshot_take(rec, &mut taken, format!("snap{step}"))?,
            2 if !taken.is_empty() => snapshot_drop(rec, rng, &mut taken)?,
            4 if !taken.is_empty() && rng.below(3) == 0 => {
                let snap = taken[rng.below(taken.len() as u64) as usize].clone();
                rec.op(format!("snapshot rollback {snap}"), true, |fs| {
                    fs.snapshot_rollback(snap.as_bytes())
                })?;
            }
            3 => rec.op("sync", true, |fs| fs.sync())?,
            _ => {}
        }
        if step % 16 == 15 {
            rec.crash_and_remount()?;
        }
    }
    Ok(())
}

/// Snapshots the `many_snapshots` workload keeps at every call.
const MANY: usize = 100;

/// Before the recording: `2 * MANY + 4` snapshots, each after a write of
/// one of ten small files (some unlinked again), so each holds blocks of
/// its own.
pub(super) fn many_snapshots_setup(s: &mut Setup<'_>, rng: &mut Rng) -> Result<()> {
    for i in 0..2 * MANY + 4 {
        let name = format!("m{}", rng.below(10));
        let data = fill(rng.next(), 1 + rng.below(6000) as usize);
        let fs = s.fs();
        let ino = match fs.create(ROOT_INO, name.as_bytes(), 0o644, 0, 0) {
            Ok(a) => a.ino,
            Err(_) => fs.lookup(ROOT_INO, name.as_bytes())?.ino,
        };
        fs.write(ino, 0, &data)?;
        if rng.below(5) == 0 {
            fs.unlink(ROOT_INO, name.as_bytes())?;
        }
        s.snapshot_create(&format!("base{i}"))?;
    }
    Ok(())
}

/// The `snapshots` workload's calls with at least `MANY` snapshots alive
/// at every call (taken before the recording starts; one is deleted only
/// while more are alive): creates, deletes (reclaim among the dead
/// extents many snapshots hold), rollbacks, renames and crashes; then the
/// oldest deleted one by one down to `MANY`, a write between, with no
/// unify (only a snapshot or 1,024 log blocks unify): the snapshot table
/// loses whole leaves the last unify wrote (fsck took their blocks for
/// leaked before 4ecfcc4). The harness reads snapshots back in every
/// crash state.
pub(super) fn many_snapshots(rec: &mut Recorder, rng: &mut Rng) -> Result<()> {
    let mut alive: Vec<String> = (0..2 * MANY + 4).map(|i| format!("base{i}")).collect();
    for step in 0..36u64 {
        let name = format!("m{}", rng.below(10));
        let data = fill(rng.next(), 1 + rng.below(12_000) as usize);
        create_write(rec, &name, &data)?;
        match rng.below(6) {
            0 => {
                rec.op(format!("unlink /{name}"), false, |fs| {
                    fs.unlink(ROOT_INO, name.as_bytes())
                })?;
            }
            1 => {
                let to = format!("m{}", rng.below(10));
                let flags = RenameFlags::default();
                rec.op(format!("rename /{name} -> /{to}"), false, |fs| {
                    fs.rename(ROOT_INO, name.as_bytes(), ROOT_INO, to.as_bytes(), flags)
                })?;
            }
            _ => {}
        }
        match rng.below(7) {
            0 | 1 => {
                let snap = format!("snap{step}");
                rec.op(format!("snapshot create {snap}"), true, |fs| {
                    fs.snapshot_create(snap.as_bytes()).map(|_| ())
                })?;
                alive.push(snap);
            }
            2 | 3 if alive.len() > MANY => {
                let snap = alive.remove(rng.below(alive.len() as u64) as usize);
                rec.op(format!("snapshot delete {snap}"), true, |fs| {
                    fs.snapshot_delete(snap.as_bytes())
                })?;
            }
            4 if rng.below(3) == 0 => {
                let snap = alive[rng.below(alive.len() as u64) as usize].clone();
                rec.op(format!("snapshot rollback {snap}"), true, |fs| {
                    fs.snapshot_rollback(snap.as_bytes())
                })?;
            }
            5 => rec.op("sync", true, |fs| fs.sync())?,
            _ => {}
        }
        if rec.snapshots_alive() < MANY {
            return Err(Error::BadImage(format!(
                "many_snapshots: {} snapshots alive after step {step}",
                rec.snapshots_alive()
            )));
        }
        if step % 12 == 11 {
            rec.crash_and_remount()?;
        }
    }
    while alive.len() > MANY {
        let snap = alive.remove(0);
        rec.op(format!("snapshot delete {snap}"), true, |fs| {
            fs.snapshot_delete(snap.as_bytes())
        })?;
        let name = format!("m{}", rng.below(10));
        let data = fill(rng.next(), 1 + rng.below(12_000) as usize);
        create_write(rec, &name, &data)?;
    }
    if rec.snapshots_alive() < MANY {
        return Err(Error::BadImage(
            "many_snapshots: too few snapshots at the end".into(),
        ));
    }
    rec.crash_and_remount()
}
