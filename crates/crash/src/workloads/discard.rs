//! The `discard` workload: online discard on, files written, overwritten
//! and deleted in bulk (so whole extents come free for good and are
//! discarded after each commit), snapshots that hold deleted files' blocks
//! until they are deleted and reclaimed, trims of the whole volume (and of
//! runs of a minimum length), and blocks discarded then allocated again.
//! The crash check (`check.rs`, promise 8) makes sure that no crash state
//! refers to a block discarded before it and not written since.
//!
//! Calls the recorder and the workloads' helpers.

use super::{create_write, fill, snapshot_drop, snapshot_take};
use crate::record::Recorder;
use crate::Rng;
use tux3::error::{Error, Result};
use tux3::types::ROOT_INO;

/// Record the workload.
pub(super) fn discard(rec: &mut Recorder, rng: &mut Rng) -> Result<()> {
    let mut snaps: Vec<String> = Vec::new();
    for step in 0..40u64 {
        let name = format!("d{}", rng.below(6));
        let data = fill(rng.next(), 1 + rng.below(60_000) as usize);
        create_write(rec, &name, &data)?;
        match rng.below(10) {
            0..=2 => {
                let gone = format!("d{}", rng.below(6));
                // It may not be there (ENOENT, recorded as such).
                match rec.op(format!("unlink /{gone}"), false, |fs| {
                    fs.unlink(ROOT_INO, gone.as_bytes())
                }) {
                    Ok(()) | Err(Error::Posix(_)) => {}
                    Err(e) => return Err(e),
                }
                rec.op("sync", true, |fs| fs.sync())?;
            }
            3 => snapshot_take(rec, &mut snaps, format!("snap{step}"))?,
            4 if !snaps.is_empty() => {
                snapshot_drop(rec, rng, &mut snaps)?;
                rec.op("snapshot reclaim", true, |fs| fs.snapshot_reclaim(&mut |_| ()))?;
            }
            5 => {
                let min = [0, 4096, 65536][rng.below(3) as usize];
                rec.op(format!("trim min {min}"), true, |fs| {
                    fs.trim(0, u64::MAX, min, &mut |_, _| ()).map(|r| r.bytes)
                })?;
            }
            6 => rec.op("sync", true, |fs| fs.sync())?,
            _ => {}
        }
        if step % 13 == 12 {
            rec.crash_and_remount()?;
        }
    }
    Ok(())
}
