//! The `large_xattrs` workload: xattrs the inode record cannot hold, kept
//! in their inodes' xattr files (FORMAT.md 7.5). Rounds set values up to
//! 64 KiB, replace a large value by a small one and back, remove them, add
//! a burst of names, unlink an owner (some while open, then released), and
//! end with a sync, an fsync of one owner, or nothing. The recorder keeps
//! every xattr of every file after each call, so a crash state must show
//! each value whole — as before the call that changed it or as after.
//!
//! Calls the recorder and the shared helpers of `workloads.rs`.

use super::fill;
use crate::record::Recorder;
use crate::Rng;
use tux3::error::Result;
use tux3::types::{Ino, XattrMode, ROOT_INO};

/// Rounds of the workload.
const ROUNDS: u64 = 16;

/// A value length: mostly past the record's space, sometimes small.
fn length(rng: &mut Rng) -> usize {
    match rng.below(4) {
        0 => rng.below(64) as usize,
        1 => 65536,
        _ => 2000 + rng.below(40_000) as usize,
    }
}

/// Record the workload.
pub(super) fn large_xattrs(rec: &mut Recorder, rng: &mut Rng) -> Result<()> {
    let mut files: Vec<(String, Ino)> = Vec::new();
    for k in 0..3 {
        let name = format!("x{k}");
        let ino = rec
            .op(format!("create /{name}"), false, |fs| {
                fs.create(ROOT_INO, name.as_bytes(), 0o644, 0, 0)
            })?
            .ino;
        files.push((name, ino));
    }
    rec.op("sync", true, |fs| fs.sync())?;
    let mut next = files.len();
    for round in 0..ROUNDS {
        let (path, ino) = files[rng.below(files.len() as u64) as usize].clone();
        let n = format!("user.v{}", rng.below(3));
        match rng.below(6) {
            0..=2 => {
                let v = fill(rng.next(), length(rng));
                let len = v.len();
                rec.op(format!("setxattr /{path} {n} ({len} bytes)"), false, |fs| {
                    fs.setxattr(ino, n.as_bytes(), &v, XattrMode::Any)
                })
                .ok();
            }
            3 => {
                rec.op(format!("removexattr /{path} {n}"), false, |fs| {
                    fs.removexattr(ino, n.as_bytes())
                })
                .ok();
            }
            4 => {
                // A burst of small names, each its own call: the record
                // fills (25 of them fit) and the rest spill.
                let base = rng.below(1000);
                for k in 0..30 {
                    let name = format!("user.n{:04}", base + k);
                    rec.op(format!("setxattr /{path} {name}"), false, |fs| {
                        fs.setxattr(ino, name.as_bytes(), &fill(k, 60), XattrMode::Any)
                    })?;
                }
            }
            _ => {
                // The owner goes (open while it does, now and then) and a
                // new file takes its place.
                let held = rng.below(2) == 0;
                if held {
                    rec.op(format!("open /{path}"), false, |fs| fs.open_handle(ino))?;
                }
                rec.op(format!("unlink /{path}"), false, |fs| {
                    fs.unlink(ROOT_INO, path.as_bytes())
                })?;
                if held {
                    rec.op(format!("release ino {ino}"), false, |fs| fs.release_handle(ino))?;
                }
                let name = format!("x{next}");
                next += 1;
                let new = rec
                    .op(format!("create /{name}"), false, |fs| {
                        fs.create(ROOT_INO, name.as_bytes(), 0o644, 0, 0)
                    })?
                    .ino;
                let slot = files.iter().position(|(_, i)| *i == ino).unwrap_or(0);
                files[slot] = (name, new);
            }
        }
        match round % 4 {
            1 => {
                rec.op("sync", true, |fs| fs.sync())?;
            }
            3 => {
                let (_, i) = files[rng.below(files.len() as u64) as usize];
                rec.fsync(i)?;
            }
            _ => {}
        }
    }
    rec.op("sync", true, |fs| fs.sync())?;
    Ok(())
}
