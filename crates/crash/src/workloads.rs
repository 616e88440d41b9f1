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

use super::record::{Recorder, Recording, Setup};
use super::{Fault, Rng};
use tux3::error::{Error, Result};
use tux3::types::{Ino, OpenOptions, RenameFlags, SetAttr, XattrMode, ROOT_INO};

mod discard;
mod falloc;
mod full;
mod names;
mod pipeline;
mod resize;
mod share;
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
            many_snapshots_setup(s, &mut rng)
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
        "dir_churn" => churn(rec, rng, 90, false)?,
        "large_writes" => large_writes(rec, rng)?,
        "truncate_links" => truncate_links(rec, rng)?,
        "random_mix" => churn(rec, rng, 110, true)?,
        "unify" => unify(rec, rng)?,
        "remount" => remount(rec, rng)?,
        "fsync_ahead" => fsync_ahead(rec, rng)?,
        "names_fsync" => names::names_fsync(rec, rng)?,
        "snapshots" => snapshots(rec, rng)?,
        "fsync_pipeline" => pipeline::fsync_pipeline(rec, rng)?,
        "many_snapshots" => many_snapshots(rec, rng)?,
        "large_xattrs" => xattrs::large_xattrs(rec, rng)?,
        "fallocate" => falloc::fallocate(rec, rng)?,
        "resize" => resize::resize(rec, rng)?,
        "discard" => discard::discard(rec, rng)?,
        "full_volume" => full::full_volume(rec, rng)?,
        "clone" => share::clone_files(rec, rng)?,
        "dedupe" => share::dedupe_files(rec, rng)?,
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

/// Directory churn over a small universe of names (errors such as ENOENT
/// and ENOTEMPTY are part of the workload). With `all`, every kind of call:
/// special files, symlinks, hard links, xattrs, setattr, truncates, rename
/// flags, open handles (orphans), sync, fsync and unify.
fn churn(rec: &mut Recorder, rng: &mut Rng, steps: usize, all: bool) -> Result<()> {
    let dirs = ["", "d0", "d1", "d2", "d0/s0", "d1/s1"];
    let mut open: Vec<Ino> = Vec::new();
    let pick = |rng: &mut Rng, v: &[&'static str]| v[rng.below(v.len() as u64) as usize];
    for step in 0..steps {
        let dir = pick(rng, &dirs);
        let name = format!("f{}", rng.below(8));
        let path = format!("{dir}/{name}");
        let Some(parent) = resolve(rec, dir) else {
            let (up, leaf) = dir.rsplit_once('/').unwrap_or(("", dir));
            if let Some(p) = resolve(rec, up) {
                rec.op(format!("mkdir /{dir}"), false, |fs| {
                    fs.mkdir(p, leaf.as_bytes(), 0o755, 0, 0)
                })
                .ok();
            }
            continue;
        };
        let target = resolve(rec, &path);
        let kinds = if all { 22 } else { 10 };
        match rng.below(kinds) {
            0..=2 => {
                let len = rng.below(6000) as usize;
                let data = fill(rng.next(), len);
                rec.op(format!("create+write /{path} {len}"), false, |fs| {
                    let a = match fs.create(parent, name.as_bytes(), 0o644, 0, 0) {
                        Ok(a) => a,
                        Err(_) => fs.lookup(parent, name.as_bytes())?,
                    };
                    if a.kind == tux3::types::FileType::Regular {
                        fs.write(a.ino, 0, &data)?;
                    }
                    Ok(a.ino)
                })
                .ok();
            }
            3 => {
                rec.op(format!("unlink /{path}"), false, |fs| {
                    fs.unlink(parent, name.as_bytes())
                })
                .ok();
            }
            4 => {
                let (to_dir, to) = (pick(rng, &dirs), format!("f{}", rng.below(8)));
                if let Some(np) = resolve(rec, to_dir) {
                    let flags = RenameFlags::default();
                    rec.op(format!("rename /{path} -> /{to_dir}/{to}"), false, |fs| {
                        fs.rename(parent, name.as_bytes(), np, to.as_bytes(), flags)
                    })
                    .ok();
                }
            }
            5 => {
                let (up, leaf) = dir.rsplit_once('/').unwrap_or(("", dir));
                if let (Some(p), false) = (resolve(rec, up), dir.is_empty()) {
                    rec.op(format!("rmdir /{dir}"), false, |fs| fs.rmdir(p, leaf.as_bytes()))
                        .ok();
                }
            }
            6 => {
                let d = format!("x{}", rng.below(3));
                let to = format!("y{}", rng.below(3));
                let np = resolve(rec, pick(rng, &dirs[..4])).unwrap_or(ROOT_INO);
                rec.op(format!("mkdir /{dir}/{d}"), false, |fs| {
                    fs.mkdir(parent, d.as_bytes(), 0o700, 0, 0)
                })
                .ok();
                if rng.below(2) == 0 {
                    let flags = RenameFlags::default();
                    rec.op(format!("rename dir /{dir}/{d} -> {np}/{to}"), false, |fs| {
                        fs.rename(parent, d.as_bytes(), np, to.as_bytes(), flags)
                    })
                    .ok();
                }
            }
            7 => {
                rec.op("sync", true, |fs| fs.sync())?;
            }
            8 | 9 => {
                if let Some(ino) = target {
                    rec.fsync(ino)?;
                }
            }
            10 => {
                let mode = if rng.below(2) == 0 {
                    libc::S_IFIFO
                } else {
                    libc::S_IFCHR
                };
                rec.op(format!("mknod /{path}"), false, |fs| {
                    fs.mknod(parent, name.as_bytes(), mode | 0o600, 0x0103, 1, 2)
                })
                .ok();
            }
            11 => {
                let t = format!("../{}", "t".repeat(rng.below(300) as usize));
                rec.op(format!("symlink /{path}"), false, |fs| {
                    fs.symlink(parent, name.as_bytes(), t.as_bytes(), 0, 0)
                })
                .ok();
            }
            12 => {
                let (to_dir, to) = (pick(rng, &dirs), format!("h{}", rng.below(4)));
                if let (Some(ino), Some(np)) = (target, resolve(rec, to_dir)) {
                    rec.op(format!("link /{path} -> /{to_dir}/{to}"), false, |fs| {
                        fs.link(ino, np, to.as_bytes())
                    })
                    .ok();
                }
            }
            13 | 14 => {
                if let Some(ino) = target {
                    let n = format!("user.a{}", rng.below(3));
                    let v = fill(rng.next(), rng.below(200) as usize);
                    if rng.below(3) == 0 {
                        rec.op(format!("removexattr /{path} {n}"), false, |fs| {
                            fs.removexattr(ino, n.as_bytes())
                        })
                        .ok();
                    } else {
                        rec.op(format!("setxattr /{path} {n}"), false, |fs| {
                            fs.setxattr(ino, n.as_bytes(), &v, XattrMode::Any)
                        })
                        .ok();
                    }
                }
            }
            15 | 16 => {
                if let Some(ino) = target {
                    let set = SetAttr {
                        size: (rng.below(2) == 0).then(|| rng.below(20_000)),
                        mode: Some(0o600 | rng.below(0o100) as u32),
                        ..SetAttr::default()
                    };
                    rec.op(format!("setattr /{path} {set:?}"), false, |fs| {
                        fs.setattr(ino, &set)
                    })
                    .ok();
                }
            }
            17 => {
                if let (Some(to_dir), Some(_)) = (Some(pick(rng, &dirs)), target) {
                    let to = format!("f{}", rng.below(8));
                    let flags = RenameFlags {
                        exchange: rng.below(2) == 0,
                        noreplace: false,
                        whiteout: None,
                    };
                    if let Some(np) = resolve(rec, to_dir) {
                        rec.op(
                            format!("rename {flags:?} /{path} -> /{to_dir}/{to}"),
                            false,
                            |fs| fs.rename(parent, name.as_bytes(), np, to.as_bytes(), flags),
                        )
                        .ok();
                    }
                }
            }
            18 => {
                if let Some(ino) = target {
                    rec.op(format!("open /{path}"), false, |fs| fs.open_handle(ino))?;
                    open.push(ino);
                }
            }
            19 => {
                if let Some(ino) = open.pop() {
                    rec.op(format!("release ino {ino}"), false, |fs| fs.release_handle(ino))?;
                }
            }
            20 => {
                if let Some(ino) = target {
                    let at = rng.below(40_000);
                    let data = fill(rng.next(), 1 + rng.below(9000) as usize);
                    rec.op(format!("write /{path} {at}+{}", data.len()), false, |fs| {
                        fs.write(ino, at, &data)
                    })
                    .ok();
                }
            }
            _ => {
                if step % 3 == 0 {
                    rec.op("unify", true, |fs| fs.unify())?;
                } else {
                    rec.op("sync", true, |fs| fs.sync())?;
                }
            }
        }
    }
    for ino in open {
        rec.op(format!("release ino {ino}"), false, |fs| fs.release_handle(ino))?;
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

/// Files written, overwritten and unlinked while snapshots are taken (each
/// a unify), deleted (their space reclaimed over the following commits)
/// and rolled back to, with a crash and remount now and then: after any crash each
/// snapshot is wholly there or absent, and fsck finds every block a
/// snapshot holds live or on the dead list and nothing leaked.
fn snapshots(rec: &mut Recorder, rng: &mut Rng) -> Result<()> {
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
fn many_snapshots_setup(s: &mut Setup<'_>, rng: &mut Rng) -> Result<()> {
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
fn many_snapshots(rec: &mut Recorder, rng: &mut Rng) -> Result<()> {
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
