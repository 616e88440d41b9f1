//! The `full_volume` workload: a small volume filled to ENOSPC by creates,
//! writes, xattrs and a snapshot, with syncs and fsyncs between; then, on
//! the full volume, sync, fsync, unify, a truncate, unlinks, an rmdir and
//! the snapshot's delete, which must all succeed; then filled again. So
//! crash states are checked while the volume is full, while the calls that
//! empty it commit, and once space came back: every ENOSPC must have left
//! its call wholly undone (the recorder's namespace after it is what a
//! crash state there reads), and everything synced before stays.
//!
//! Calls the recorder and the workloads' helpers.

use super::{fill, size_of, truncate};
use crate::record::Recorder;
use crate::Rng;
use tux3::error::{Errno, Error, Result};
use tux3::types::{Ino, XattrMode, ROOT_INO};

/// Consecutive ENOSPC answers after which the volume counts as full.
const FULL_STREAK: u32 = 6;

/// Whether `r` is ENOSPC (a result like any other here); other errors
/// end the workload.
fn enospc<T>(r: Result<T>) -> Result<bool> {
    match r {
        Ok(_) => Ok(false),
        Err(Error::Posix(e)) if e == Errno::ENOSPC => Ok(true),
        Err(e) => Err(e),
    }
}

/// Record the workload.
pub(super) fn full_volume(rec: &mut Recorder, rng: &mut Rng) -> Result<()> {
    let d = rec
        .op("mkdir /d", false, |fs| fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0))?
        .ino;
    let mut files: Vec<(Ino, Ino, String)> = Vec::new();
    let mut serial = 0;
    let snapshot = fill_up(rec, rng, d, &mut files, &mut serial, true)?;

    // Full. What empties a volume, and what makes it durable, must work.
    rec.op("sync (full)", true, |fs| fs.sync())?;
    if let Some(&(ino, _, _)) = files.first() {
        rec.fsync(ino)?;
    }
    rec.op("unify (full)", true, |fs| fs.unify())?;
    if let Some(&(ino, _, _)) = files.iter().max_by_key(|f| size_of(rec, f.0)) {
        let size = size_of(rec, ino);
        truncate(rec, ino, size / 2)?;
    }
    if snapshot {
        rec.op("snapshot delete s", true, |fs| fs.snapshot_delete(b"s"))?;
    }
    // Every file in /d and one in three of the root's go, then /d.
    let mut kept = Vec::new();
    for (k, (ino, dir, name)) in std::mem::take(&mut files).into_iter().enumerate() {
        if dir == d || k % 3 == 0 {
            rec.op(format!("unlink {name}"), false, |fs| {
                fs.unlink(dir, name.rsplit('/').next().unwrap_or_default().as_bytes())
            })?;
        } else {
            kept.push((ino, dir, name));
        }
    }
    rec.op("rmdir /d", false, |fs| fs.rmdir(ROOT_INO, b"d"))?;
    rec.op("sync (emptied)", true, |fs| fs.sync())?;
    // Space came back: fill it again, in the root only.
    files = kept;
    fill_up(rec, rng, ROOT_INO, &mut files, &mut serial, false)?;
    rec.op("sync", true, |fs| fs.sync())?;
    Ok(())
}

/// Creates (in the root and `d`), writes and xattrs until
/// [`FULL_STREAK`] calls in a row get ENOSPC; with `snapshot`, a snapshot
/// `s` early on (returns whether it was taken).
fn fill_up(
    rec: &mut Recorder,
    rng: &mut Rng,
    d: Ino,
    files: &mut Vec<(Ino, Ino, String)>,
    serial: &mut u32,
    snapshot: bool,
) -> Result<bool> {
    let mut taken = false;
    let mut streak = 0;
    let mut step = 0u32;
    while streak < FULL_STREAK {
        step += 1;
        if step > 400 {
            return Err(Error::BadImage("full_volume: the volume never filled".into()));
        }
        *serial += 1;
        let n = *serial;
        let full = match rng.below(10) {
            0 | 1 => {
                let dir = if rng.below(2) == 0 { ROOT_INO } else { d };
                let path = if dir == ROOT_INO {
                    format!("/f{n}")
                } else {
                    format!("/d/f{n}")
                };
                let name = format!("f{n}");
                let r = rec.op(format!("create {path}"), false, |fs| {
                    fs.create(dir, name.as_bytes(), 0o644, 0, 0)
                });
                if let Ok(a) = &r {
                    files.push((a.ino, dir, path));
                }
                enospc(r)?
            }
            2..=7 if !files.is_empty() => {
                let (ino, _, path) = files[rng.below(files.len() as u64) as usize].clone();
                let at = rng.below(16) * 4096 + rng.below(2) * rng.below(4096);
                let data = fill(rng.next(), 1 + rng.below(48 << 10) as usize);
                enospc(rec.op(format!("write {path} {at}+{}", data.len()), false, |fs| {
                    fs.write(ino, at, &data)
                }))?
            }
            8 if !files.is_empty() => {
                let (ino, _, path) = files[rng.below(files.len() as u64) as usize].clone();
                let value = fill(rng.next(), 1 + rng.below(3000) as usize);
                let name = format!("user.x{}", rng.below(3));
                enospc(rec.op(
                    format!("setxattr {path} {name} ({} bytes)", value.len()),
                    false,
                    |fs| fs.setxattr(ino, name.as_bytes(), &value, XattrMode::Any),
                ))?
            }
            _ if !files.is_empty() && rng.below(2) == 0 => {
                let ino = files[rng.below(files.len() as u64) as usize].0;
                rec.fsync(ino)?;
                false
            }
            _ => enospc(rec.op("sync", true, |fs| fs.sync()))?,
        };
        streak = if full { streak + 1 } else { 0 };
        if snapshot && step == 30 {
            let r = rec.op("snapshot create s", true, |fs| {
                fs.snapshot_create(b"s").map(|_| ())
            });
            taken = !enospc(r)?;
        }
    }
    Ok(taken)
}
