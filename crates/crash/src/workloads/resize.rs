//! The `resize` workload: a volume made on 2,048 blocks shrinks to 1,024
//! at once (everything lies low on a fresh volume), takes files and
//! fsyncs, grows back to 2,048, fills the low blocks with filler files and
//! lays past the old end what a shrink must move: files, a directory of
//! many names (its tree nodes, the inode table's), two files written a
//! block at a time in turn (many extents), a preallocated range partly
//! written, a clone and an xattr file. The filler goes and the volume
//! shrinks below 1,536 blocks, moving all of that in batches (each a delta
//! commit: the crash states fall between them); it must succeed. Then it
//! grows once more and goes on writing. Every crash state must show the
//! old size or the new one with everything intact (fsck clean, the
//! recorded namespace).
//!
//! Calls the recorder and the workloads' helpers.

use super::{create_write, fill};
use crate::record::Recorder;
use crate::Rng;
use tux3::error::Result;
use tux3::types::{XattrMode, ROOT_INO};

const BS: u64 = 4096;

/// Record the workload.
pub(super) fn resize(rec: &mut Recorder, rng: &mut Rng) -> Result<()> {
    to(rec, 1024)?;
    for i in 0..6 {
        let data = fill(rng.next(), 2000 + rng.below(30_000) as usize);
        create_write(rec, &format!("a{i}"), &data)?;
        if i % 2 == 0 {
            let ino = rec.fs()?.lookup(ROOT_INO, format!("a{i}").as_bytes())?.ino;
            rec.fsync(ino)?;
        }
    }
    to(rec, 2048)?;
    // One file per delta: no commit starts in the middle of a call.
    for i in 0..4 {
        let data = fill(rng.next(), 900_000);
        create_write(rec, &format!("filler{i}"), &data)?;
        rec.op("sync", true, |fs| fs.sync())?;
    }
    lay_past(rec, rng)?;
    for i in 0..4 {
        rec.op(format!("unlink /filler{i}"), false, |fs| {
            fs.unlink(ROOT_INO, format!("filler{i}").as_bytes())
        })?;
    }
    let blocks = 1024 + rng.below(512);
    rec.op(format!("resize {blocks} (moving)"), true, |fs| fs.resize(blocks))?;
    to(rec, 2048)?;
    for i in 0..4 {
        let data = fill(rng.next(), 100_000);
        create_write(rec, &format!("c{i}"), &data)?;
        rec.op("sync", true, |fs| fs.sync())?;
    }
    Ok(())
}

/// What the shrink must move, written after the filler (past block 1,024).
fn lay_past(rec: &mut Recorder, rng: &mut Rng) -> Result<()> {
    for i in 0..3 {
        let data = fill(rng.next(), 60_000 + rng.below(60_000) as usize);
        create_write(rec, &format!("b{i}"), &data)?;
    }
    let dir = rec
        .op("mkdir /d", false, |fs| fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0))?
        .ino;
    for i in 0..150 {
        let name = format!("a-name-long-enough-to-fill-leaves-{i:04}");
        let data = fill(rng.next(), 100 + rng.below(3000) as usize);
        rec.op(format!("create+write /d/{name}"), false, |fs| {
            let a = fs.create(dir, name.as_bytes(), 0o644, 0, 0)?;
            fs.write(a.ino, 0, &data)
        })?;
    }
    rec.op("sync", true, |fs| fs.sync())?;
    // Two files a block at a time in turn: each in many extents.
    for b in 0..48u64 {
        for name in ["frag0", "frag1"] {
            let data = fill(rng.next(), BS as usize);
            rec.op(format!("write /{name} block {b}"), false, |fs| {
                let a = match fs.create(ROOT_INO, name.as_bytes(), 0o644, 0, 0) {
                    Ok(a) => a,
                    Err(_) => fs.lookup(ROOT_INO, name.as_bytes())?,
                };
                fs.write(a.ino, b * BS, &data)
            })?;
        }
        if b % 4 == 3 {
            rec.op("sync", true, |fs| fs.sync())?;
        }
    }
    let data = fill(rng.next(), 2 * BS as usize);
    rec.op("preallocate /p 0+40 blocks, write 2", false, |fs| {
        let a = fs.create(ROOT_INO, b"p", 0o644, 0, 0)?;
        fs.fallocate(a.ino, libc::FALLOC_FL_KEEP_SIZE, 0, 40 * BS)?;
        fs.write(a.ino, 8 * BS, &data)
    })?;
    rec.op("clone /b0 to /b0-clone", false, |fs| {
        let src = fs.lookup(ROOT_INO, b"b0")?;
        let dst = fs.create(ROOT_INO, b"b0-clone", 0o644, 0, 0)?;
        fs.clone_range(src.ino, 0, dst.ino, 0, src.size / BS * BS)
    })?;
    let value = fill(rng.next(), 6000);
    rec.op("setxattr /b1 user.big 6000", false, |fs| {
        let a = fs.lookup(ROOT_INO, b"b1")?;
        fs.setxattr(a.ino, b"user.big", &value, XattrMode::Any)
    })?;
    rec.op("sync", true, |fs| fs.sync())?;
    Ok(())
}

/// Resize to `blocks`: durable when it succeeds (it unifies).
fn to(rec: &mut Recorder, blocks: u64) -> Result<()> {
    let r = rec.op(format!("resize {blocks}"), true, |fs| fs.resize(blocks));
    match r {
        Ok(_) => Ok(()),
        Err(e) if matches!(e.errno().0, libc::EBUSY | libc::ENOSPC) => Ok(()),
        Err(e) => Err(e),
    }
}
