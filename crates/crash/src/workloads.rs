//! The crash harness's workloads. Each is deterministic from its seed and
//! runs through the `Fs` API under a [`Recorder`]; the volume options are
//! chosen per workload (`dirty_limit` small to force deltas mid-workload,
//! `unify_log_blocks` small to force unifies; online discard on in all but
//! `fallocate` and `resize`, whose preallocated blocks are referenced
//! without being written — `resize` moves a preallocated range onto
//! blocks freed and discarded before — which the discard check cannot
//! tell from a lost block). Data
//! written is a pattern of the seed and the call, so every version of a
//! file differs.

use super::record::{Recorder, Recording};
use super::{Fault, Rng};
use tux3::error::{Error, Result};
use tux3::types::{Ino, OpenOptions, RenameFlags, SetAttr, ROOT_INO};

mod churn;
mod discard;
mod drops;
mod falloc;
mod full;
mod names;
mod pipeline;
mod resize;
mod share;
mod snapshots;
mod xattrs;

/// Names accepted by [`record`].
pub const NAMES: &[&str] = &[
    "rename_over",
    "append_fsync",
    "dir_churn",
    "large_writes",
    "truncate_links",
    "random_mix",
    "unify",
    "remount",
    "fsync_ahead",
    "names_fsync",
    "snapshots",
    "fsync_pipeline",
    "many_snapshots",
    "large_xattrs",
    "fallocate",
    "resize",
    "discard",
    "full_volume",
    "clone",
    "dedupe",
    "drop_runs",
];

const BS: u32 = 4096;

/// Run workload `name` with `seed` and return its recording.
pub fn record(name: &str, seed: u64, fault: Fault) -> Result<Recording> {
    let (mut rec, mut rng) = recorder(name, seed, fault)?;
    drive(name, &mut rec, &mut rng)?;
    rec.finish()
}

/// The recorder workload `name` runs on (its volume formatted, set up and
/// open), and the random numbers it goes on with.
pub fn recorder(name: &str, seed: u64, fault: Fault) -> Result<(Recorder, Rng)> {
    if !NAMES.contains(&name) {
        return Err(Error::BadImage(format!("unknown crash workload {name:?}")));
    }
    let mut rng = Rng::new(seed ^ hash_name(name));
    let opts = |dirty_limit: u64, unify: u64| OpenOptions {
        dirty_limit,
        unify_log_blocks: unify,
        commit_interval: None,
        discard: !matches!(name, "fallocate" | "resize"),
        ..OpenOptions::default()
    };
    let rec = match name {
        "large_writes" => Recorder::new(BS, 1536, opts(64 << 10, 64), fault)?,
        "unify" => Recorder::new(BS, 512, opts(256 << 10, 2), fault)?,
        "random_mix" => Recorder::new(BS, 512, opts(128 << 10, 8), fault)?,
        "remount" => Recorder::new(BS, 512, opts(128 << 10, 6), fault)?,
        "snapshots" => Recorder::new(BS, 1024, opts(256 << 10, 4), fault)?,
        "large_xattrs" => Recorder::new(BS, 1024, opts(128 << 10, 8), fault)?,
        "fallocate" => Recorder::new(BS, 2048, opts(128 << 10, 8), fault)?,
        "resize" => Recorder::new(BS, 2048, opts(1 << 20, 8), fault)?,
        "discard" => Recorder::new(BS, 1024, opts(128 << 10, 6), fault)?,
        "full_volume" => Recorder::new(BS, 512, opts(128 << 10, 8), fault)?,
        "clone" | "dedupe" => Recorder::new(BS, 2048, opts(128 << 10, 6), fault)?,
        "many_snapshots" => Recorder::with_setup(BS, 1536, opts(256 << 10, 1024), fault, |s| {
            snapshots::many_snapshots_setup(s, &mut rng)
        })?,
        _ => Recorder::new(BS, 512, opts(1 << 20, 256), fault)?,
    };
    Ok((rec, rng))
}

/// Run workload `name`'s calls on `rec`.
pub fn drive(name: &str, rec: &mut Recorder, rng: &mut Rng) -> Result<()> {
    match name {
        "rename_over" => rename_over(rec, rng)?,
        "append_fsync" => append_fsync(rec, rng)?,
        "dir_churn" => churn::churn(rec, rng, 90, false)?,
        "large_writes" => large_writes(rec, rng)?,
        "truncate_links" => truncate_links(rec, rng)?,
        "random_mix" => churn::churn(rec, rng, 110, true)?,
        "unify" => unify(rec, rng)?,
        "remount" => remount(rec, rng)?,
        "fsync_ahead" => fsync_ahead(rec, rng)?,
        "names_fsync" => names::names_fsync(rec, rng)?,
        "snapshots" => snapshots::snapshots(rec, rng)?,
        "fsync_pipeline" => pipeline::fsync_pipeline(rec, rng)?,
        "many_snapshots" => snapshots::many_snapshots(rec, rng)?,
        "large_xattrs" => xattrs::large_xattrs(rec, rng)?,
        "fallocate" => falloc::fallocate(rec, rng)?,
        "resize" => resize::resize(rec, rng)?,
        "discard" => discard::discard(rec, rng)?,
        "full_volume" => full::full_volume(rec, rng)?,
        "clone" => share::clone_files(rec, rng)?,
        "dedupe" => share::dedupe_files(rec, rng)?,
        "drop_runs" => drops::drop_runs(rec, rng)?,
        _ => return Err(Error::BadImage(format!("unknown crash workload {name:?}"))),
    }
    Ok(())
}

fn hash_name(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// `len` bytes that depend on `tag` and the offset within the write.
/// Take snapshot `name` and note it in `snaps`.
fn snapshot_take(rec: &mut Recorder, snaps: &mut Vec<String>, name: String) -> Result<()> {
    rec.op(format!("snapshot create {name}"), true, |fs| {
        fs.snapshot_create(name.as_bytes()).map(|_| ())
    })?;
    snaps.push(name);
    Ok(())
}

/// Delete one of `snaps`, chosen at random (it must not be empty).
fn snapshot_drop(rec: &mut Recorder, rng: &mut Rng, snaps: &mut Vec<String>) -> Result<()> {
    let snap = snaps.remove(rng.below(snaps.len() as u64) as usize);
    rec.op(format!("snapshot delete {snap}"), true, |fs| {
        fs.snapshot_delete(snap.as_bytes())
    })
}

fn fill(tag: u64, len: usize) -> Vec<u8> {
    let mut r = Rng::new(tag);
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        out.extend_from_slice(&r.next().to_le_bytes());
    }
    out.truncate(len);
    out
}

/// Create `/{prefix}0` .. `/{prefix}{n - 1}` in the root; their inodes.
fn create_files(rec: &mut Recorder, prefix: &str, n: usize) -> Result<Vec<Ino>> {
    let mut files = Vec::new();
    for i in 0..n {
        let name = format!("{prefix}{i}");
        let a = rec.op(format!("create /{name}"), false, |fs| {
            fs.create(ROOT_INO, name.as_bytes(), 0o644, 0, 0)
        })?;
        files.push(a.ino);
    }
    Ok(files)
}

/// The inode at `path` (components separated by '/'), if any. Reads only.
fn resolve(rec: &Recorder, path: &str) -> Option<Ino> {
    let mut ino = ROOT_INO;
    for part in path.split('/').filter(|p| !p.is_empty()) {
        ino = rec.fs().ok()?.lookup(ino, part.as_bytes()).ok()?.ino;
    }
    Some(ino)
}

fn size_of(rec: &Recorder, ino: Ino) -> u64 {
    rec.fs().and_then(|fs| fs.getattr(ino)).map_or(0, |a| a.size)
}

/// Seed 001's cycle: create foo.new, write 16,000 bytes, fsync (mostly),
/// close, rename over foo.
fn rename_over(rec: &mut Recorder, rng: &mut Rng) -> Result<()> {
    let cycles = 14 + rng.below(6);
    for c in 0..cycles {
        let a = rec.op("create /foo.new", false, |fs| {
            fs.create(ROOT_INO, b"foo.new", 0o700, 0, 0)
        })?;
        rec.op("open foo.new", false, |fs| fs.open_handle(a.ino))?;
        let data = fill(rng.next(), 16_000);
        rec.op(format!("write /foo.new 0+16000 (cycle {c})"), false, |fs| {
            fs.write(a.ino, 0, &data)
        })?;
        if rng.below(5) != 0 {
            rec.fsync(a.ino)?;
        }
        rec.op("close foo.new", false, |fs| fs.release_handle(a.ino))?;
        let flags = RenameFlags::default();
        rec.op("rename /foo.new -> /foo", false, |fs| {
            fs.rename(ROOT_INO, b"foo.new", ROOT_INO, b"foo", flags)
        })?;
    }
    Ok(())
}

/// Appends to several log files, each mostly followed by its fsync; some
/// fsyncs cover the file and another one written since, queued together so
/// that one group commit serves both.
fn append_fsync(rec: &mut Recorder, rng: &mut Rng) -> Result<()> {
    let files = create_files(rec, "log", 4)?;
    for _ in 0..45 {
        let ino = files[rng.below(files.len() as u64) as usize];
        let max = if rng.below(4) == 0 { 9000 } else { 1500 };
        let len = 1 + rng.below(max) as usize;
        let at = size_of(rec, ino);
        let data = fill(rng.next(), len);
        rec.op(format!("append ino {ino} {at}+{len}"), false, |fs| {
            fs.write(ino, at, &data)
        })?;
        match rng.below(6) {
            0 | 1 => {}
            2 => {
                let other = files[rng.below(files.len() as u64) as usize];
                rec.fsync_group(&[ino, other])?;
            }
            _ => rec.fsync(ino)?,
        }
    }
    Ok(())
}

/// Writes of 100-300 KiB across delta boundaries (`dirty_limit` 64 KiB),
/// overwrites, truncates, occasional fsync.
fn large_writes(rec: &mut Recorder, rng: &mut Rng) -> Result<()> {
    let mut files = Vec::new();
    for i in 0..3 {
        let name = format!("big{i}");
        files.push(
            rec.op(format!("create /{name}"), false, |fs| {
                fs.create(ROOT_INO, name.as_bytes(), 0o644, 0, 0)
            })?
            .ino,
        );
    }
    for _ in 0..14 {
        let ino = files[rng.below(3) as usize];
        let len = (100 << 10) + rng.below(200 << 10) as usize;
        let at = if rng.below(2) == 0 {
            rng.below(1 << 20)
        } else {
            rng.below(256) << 12
        };
        let data = fill(rng.next(), len);
        rec.op(format!("write ino {ino} {at}+{len}"), false, |fs| {
            fs.write(ino, at, &data)
        })?;
        match rng.below(6) {
            0 => rec.fsync(ino)?,
            1 => {
                let size = rng.below(size_of(rec, ino) + 1);
                truncate(rec, ino, size)?;
            }
            2 => rec.op("sync", true, |fs| fs.sync())?,
            _ => {}
        }
    }
    Ok(())
}

/// Truncates (down, up, to zero) and hard links across directories.
fn truncate_links(rec: &mut Recorder, rng: &mut Rng) -> Result<()> {
    let d = rec
        .op("mkdir /d", false, |fs| fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0))?
        .ino;
    let mut files = Vec::new();
    for i in 0..3 {
        let name = format!("t{i}");
        let a = rec.op(format!("create /{name}"), false, |fs| {
            fs.create(ROOT_INO, name.as_bytes(), 0o644, 0, 0)
        })?;
        let data = fill(rng.next(), 10_000 + rng.below(30_000) as usize);
        rec.op(format!("write /{name} 0+{}", data.len()), false, |fs| {
            fs.write(a.ino, 0, &data)
        })?;
        files.push(a.ino);
    }
    rec.op("sync", true, |fs| fs.sync())?;
    for step in 0..45 {
        let ino = files[rng.below(3) as usize];
        let link = format!("l{}", rng.below(4));
        match rng.below(8) {
            0 | 1 => {
                let size = match rng.below(3) {
                    0 => 0,
                    1 => rng.below(size_of(rec, ino) + 1),
                    _ => size_of(rec, ino) + rng.below(50_000),
                };
                truncate(rec, ino, size)?;
            }
            2 => {
                rec.op(format!("link ino {ino} -> /d/{link}"), false, |fs| {
                    fs.link(ino, d, link.as_bytes())
                })
                .ok();
            }
            3 => {
                rec.op(format!("unlink /d/{link}"), false, |fs| {
                    fs.unlink(d, link.as_bytes())
                })
                .ok();
            }
            4 | 5 => {
                let at = rng.below(60_000);
                let data = fill(rng.next(), 1 + rng.below(12_000) as usize);
                rec.op(format!("write ino {ino} {at}+{}", data.len()), false, |fs| {
                    fs.write(ino, at, &data)
                })?;
            }
            6 => rec.fsync(ino)?,
            _ if step % 2 == 0 => rec.op("sync", true, |fs| fs.sync())?,
            _ => {
                let flags = RenameFlags::default();
                let to = format!("l{}", rng.below(4));
                rec.op(format!("rename /d/{link} -> /d/{to}"), false, |fs| {
                    fs.rename(d, link.as_bytes(), d, to.as_bytes(), flags)
                })
                .ok();
            }
        }
    }
    Ok(())
}

/// Unifies inside the workload (`unify_log_blocks` 2) and explicit ones.
fn unify(rec: &mut Recorder, rng: &mut Rng) -> Result<()> {
    for step in 0..40u64 {
        let name = format!("u{}", rng.below(10));
        let a = match rec.op(format!("create /{name}"), false, |fs| {
            fs.create(ROOT_INO, name.as_bytes(), 0o644, 0, 0)
        }) {
            Ok(a) => a,
            Err(_) => rec.fs()?.lookup(ROOT_INO, name.as_bytes())?,
        };
        let data = fill(rng.next(), 1 + rng.below(20_000) as usize);
        rec.op(format!("write /{name} 0+{}", data.len()), false, |fs| {
            fs.write(a.ino, 0, &data)
        })?;
        match rng.below(5) {
            0 => {
                let to = format!("u{}", rng.below(10));
                let flags = RenameFlags::default();
                rec.op(format!("rename /{name} -> /{to}"), false, |fs| {
                    fs.rename(ROOT_INO, name.as_bytes(), ROOT_INO, to.as_bytes(), flags)
                })?;
            }
            1 => {
                rec.op(format!("unlink /{name}"), false, |fs| {
                    fs.unlink(ROOT_INO, name.as_bytes())
                })?;
            }
            _ => {}
        }
        if step % 7 == 6 {
            rec.op("unify", true, |fs| fs.unify())?;
        } else if rng.below(2) == 0 {
            rec.op("sync", true, |fs| fs.sync())?;
        }
    }
    Ok(())
}

/// `/name` created if absent, and `data` written at its start: one call.
fn create_write(rec: &mut Recorder, name: &str, data: &[u8]) -> Result<()> {
    rec.op(format!("create+write /{name} 0+{}", data.len()), false, |fs| {
        let a = match fs.create(ROOT_INO, name.as_bytes(), 0o644, 0, 0) {
            Ok(a) => a,
            Err(_) => fs.lookup(ROOT_INO, name.as_bytes())?,
        };
        fs.write(a.ino, 0, data)
    })?;
    Ok(())
}

/// Crashes and clean closes inside the recording: the volume is mounted
/// again (replay must write nothing) and the workload goes on. Most rounds
/// leave an orphan behind (a file open and unlinked when the volume goes
/// down, its unlink committed by a sync or a unify or not at all, sometimes
/// written and fsynced after the unlink): the next mount or the close must
/// free it.
fn remount(rec: &mut Recorder, rng: &mut Rng) -> Result<()> {
    for round in 0..8 {
        for _ in 0..4 + rng.below(4) {
            let name = format!("r{}", rng.below(6));
            let data = fill(rng.next(), 1 + rng.below(9000) as usize);
            create_write(rec, &name, &data)?;
            if rng.below(3) == 0 {
                let to = format!("r{}", rng.below(6));
                let flags = RenameFlags::default();
                rec.op(format!("rename /{name} -> /{to}"), false, |fs| {
                    fs.rename(ROOT_INO, name.as_bytes(), ROOT_INO, to.as_bytes(), flags)
                })?;
            }
            if rng.below(3) == 0 {
                rec.op("sync", true, |fs| fs.sync())?;
            }
        }
        if rng.below(4) != 0 {
            orphan(rec, rng, round)?;
        }
        if round % 3 == 2 {
            rec.close_and_remount()?;
        } else {
            rec.crash_and_remount()?;
        }
    }
    Ok(())
}

/// Create `/o<round>`, open it and unlink it: an orphan until the handle is
/// released, which the remount workload never does.
fn orphan(rec: &mut Recorder, rng: &mut Rng, round: u64) -> Result<()> {
    let name = format!("o{round}");
    let data = fill(rng.next(), 1 + rng.below(9000) as usize);
    let ino = rec.op(format!("create+write /{name} 0+{}", data.len()), false, |fs| {
        let a = fs.create(ROOT_INO, name.as_bytes(), 0o644, 0, 0)?;
        fs.write(a.ino, 0, &data)?;
        Ok(a.ino)
    })?;
    rec.op(format!("open /{name}"), false, |fs| fs.open_handle(ino))?;
    rec.op(format!("unlink /{name} (open)"), false, |fs| {
        fs.unlink(ROOT_INO, name.as_bytes())
    })?;
    match rng.below(3) {
        0 => rec.op("sync", true, |fs| fs.sync())?,
        1 => rec.op("unify", true, |fs| fs.unify())?,
        _ => {}
    }
    if rng.below(2) == 0 {
        let more = fill(rng.next(), 1 + rng.below(6000) as usize);
        rec.op(format!("write orphan ino {ino} 0+{}", more.len()), false, |fs| {
            fs.write(ino, 0, &more)
        })?;
        rec.fsync(ino)?;
    }
    Ok(())
}

/// Fsync commits ahead of a delta commit in flight. Each round makes the
/// volume durable (a sync, sometimes a unify), changes `/a` and fsyncs it
/// (so the next delta holds nothing of `a` that is not durable already) and
/// writes `/hot` (which stays undurable), then syncs — every third round
/// unifies instead, so the fsyncs go ahead of a unify's superblock and
/// name trees it gives new roots. While that commit is in flight, between
/// its data and its log (or superblock), the round appends to
/// or overwrites `a` and fsyncs it, creates a file in `/d` (which the delta
/// in flight leaves alone) and fsyncs it, writes and fsyncs `/b` (untouched
/// since the round began), and writes `hot` again (and in even rounds
/// fsyncs it: the commit in flight holds its earlier write, which that
/// fsync commit logs too). Those fsyncs go ahead of the sync's log — or,
/// in every third round, follow it before its flush, the sync's log
/// written — and a crash anywhere must keep each one that returned.
fn fsync_ahead(rec: &mut Recorder, rng: &mut Rng) -> Result<()> {
    let d = rec
        .op("mkdir /d", false, |fs| fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0))?
        .ino;
    let make = |rec: &mut Recorder, name: &str| {
        rec.op(format!("create /{name}"), false, |fs| {
            fs.create(ROOT_INO, name.as_bytes(), 0o644, 0, 0)
        })
        .map(|a| a.ino)
    };
    let (a, b, hot) = (make(rec, "a")?, make(rec, "b")?, make(rec, "hot")?);
    for round in 0..10u64 {
        if round % 4 == 3 {
            rec.op("unify", true, |fs| fs.unify())?;
        } else {
            rec.op("sync", true, |fs| fs.sync())?;
        }
        let (at, data) = (size_of(rec, a), fill(rng.next(), 1 + rng.below(6000) as usize));
        rec.op(format!("append ino {a} {at}+{}", data.len()), false, |fs| {
            fs.write(a, at, &data)
        })?;
        rec.fsync(a)?;
        let data = fill(rng.next(), 1 + rng.below(9000) as usize);
        rec.op(format!("write /hot 0+{}", data.len()), false, |fs| {
            fs.write(hot, 0, &data)
        })?;
        let size = size_of(rec, a);
        let (w1, w2, w3) = (rng.next(), rng.next(), rng.next());
        let (at, len) = if w1 % 2 == 0 {
            (size, 1 + (w2 % 5000) as usize)
        } else {
            (w2 % size.max(1), 1 + (w3 % 3000) as usize)
        };
        let new_file = rng.below(3) != 0;
        // Every third round the commit in flight is a unify; of the
        // others, every second one has written its log (the fsync commits
        // follow it, before its flush).
        rec.sync_interleaved(round % 3 == 1, round % 3 == 2, |ilv| {
            let data = fill(w3, len);
            ilv.op(format!("write ino {a} {at}+{len}"), |fs| fs.write(a, at, &data))?;
            ilv.fsync(a)?;
            if new_file {
                let name = format!("c{round}");
                let data = fill(w1, 1 + (w2 % 7000) as usize);
                let c = ilv.op(format!("create /d/{name}"), |fs| {
                    fs.create(d, name.as_bytes(), 0o644, 0, 0)
                })?;
                ilv.op(format!("write /d/{name} 0+{}", data.len()), |fs| {
                    fs.write(c.ino, 0, &data)
                })?;
                ilv.fsync(c.ino)?;
            }
            let data = fill(w2, 1 + (w1 % 4000) as usize);
            ilv.op(format!("write /b 0+{}", data.len()), |fs| fs.write(b, 0, &data))?;
            ilv.fsync(b)?;
            let data = fill(w1 ^ w2, 1 + (w3 % 9000) as usize);
            ilv.op(format!("write /hot 0+{}", data.len()), |fs| {
                fs.write(hot, 0, &data)
            })?;
            if round % 2 == 0 {
                // The commit in flight holds /hot's earlier write: the
                // fsync commit logs those frozen pages too.
                ilv.fsync(hot)?;
            }
            Ok(())
        })?;
        if rng.below(2) == 0 {
            rec.fsync(hot)?;
        }
    }
    Ok(())
}

/// Truncate (or extend) `ino` to `size` bytes, as one recorded call.
fn truncate(rec: &mut Recorder, ino: u64, size: u64) -> Result<()> {
    let set = SetAttr {
        size: Some(size),
        ..SetAttr::default()
    };
    rec.op(format!("truncate ino {ino} to {size}"), false, |fs| {
        fs.setattr(ino, &set)
    })?;
    Ok(())
}
