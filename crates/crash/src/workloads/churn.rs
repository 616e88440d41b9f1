//! The `dir_churn` and `random_mix` workloads: namespace churn over a small
//! universe of names, and with `all` every kind of call the `Fs` API has.
//! Calls the recorder and the parent module's helpers only.

use super::{fill, resolve};
use crate::record::Recorder;
use crate::Rng;
use tux3::error::Result;
use tux3::types::{Ino, RenameFlags, SetAttr, XattrMode, ROOT_INO};

/// Directory churn over a small universe of names (errors such as ENOENT
/// and ENOTEMPTY are part of the workload). With `all`, every kind of call:
/// special files, symlinks, hard links, xattrs, setattr, truncates, rename
/// flags, open handles (orphans), sync, fsync and unify.
pub(super) fn churn(rec: &mut Recorder, rng: &mut Rng, steps: usize, all: bool) -> Result<()> {
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
