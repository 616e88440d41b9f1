//! The `resize` workload: a volume made on 2,048 blocks shrinks to 1,024
//! at once (everything lies low on a fresh volume), takes files and
//! fsyncs, grows back to 2,048 and fills past the old end, frees most of
//! it and shrinks again (which may fail with EBUSY or ENOSPC when data or
//! tree nodes stay past the end: a result like any other), grows once
//! more, and goes on writing. Every crash state must show the old size or
//! the new one with everything intact (fsck clean, the recorded namespace).
//!
//! Calls the recorder and the workloads' helpers.

use super::{create_write, fill};
use crate::record::Recorder;
use crate::Rng;
use tux3::error::Result;
use tux3::types::ROOT_INO;

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
    for i in 0..10 {
        // One file per delta: no commit starts in the middle of a call.
        let data = fill(rng.next(), 200_000 + rng.below(100_000) as usize);
        create_write(rec, &format!("b{i}"), &data)?;
        rec.op("sync", true, |fs| fs.sync())?;
    }
    for i in 0..10 {
        rec.op(format!("unlink /b{i}"), false, |fs| {
            fs.unlink(ROOT_INO, format!("b{i}").as_bytes())
        })?;
    }
    to(rec, 1024 + rng.below(512))?;
    to(rec, 2048)?;
    for i in 0..4 {
        let data = fill(rng.next(), 100_000);
        create_write(rec, &format!("c{i}"), &data)?;
        rec.op("sync", true, |fs| fs.sync())?;
    }
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
