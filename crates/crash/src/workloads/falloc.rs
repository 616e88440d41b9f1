//! The `fallocate` workload: three files that preallocate (extending their
//! size or not, past their end too), write into preallocated ranges (the
//! blocks are filled in place), punch holes, zero ranges (with and
//! without KEEP_SIZE), collapse and insert block-aligned ranges, truncate,
//! fsync and sync; one step in twelve takes a snapshot, so punched and
//! rewritten blocks a snapshot holds go to the dead list. The recorder's
//! namespace snapshots after each call are what every crash state must
//! read (sizes and contents: preallocated ranges read as zeros).
//!
//! Calls the recorder and the workloads' helpers.

use super::{create_files, fill, size_of, truncate};
use crate::record::Recorder;
use crate::Rng;
use tux3::error::Result;

const BS: u64 = 4096;
const KEEP: i32 = libc::FALLOC_FL_KEEP_SIZE;

/// Record the workload.
pub(super) fn fallocate(rec: &mut Recorder, rng: &mut Rng) -> Result<()> {
    let files = create_files(rec, "p", 3)?;
    rec.op("sync", true, |fs| fs.sync())?;
    let mut snaps = 0;
    for step in 0..70 {
        let ino = files[rng.below(3) as usize];
        // Files stay within 64 blocks or so: no ENOSPC.
        let size = size_of(rec, ino).min(64 * BS);
        // Offsets mostly block-aligned, within a little past the end.
        let at = |rng: &mut Rng, span: u64| {
            let b = rng.below(span / BS + 1) * BS;
            if rng.below(4) == 0 {
                b + rng.below(BS)
            } else {
                b
            }
        };
        let len =
            |rng: &mut Rng| (1 + rng.below(12)) * BS - if rng.below(4) == 0 { rng.below(BS) } else { 0 };
        match rng.below(12) {
            0..=2 => {
                let mode = if rng.below(2) == 0 { 0 } else { KEEP };
                let (off, n) = (at(rng, size + 8 * BS), len(rng));
                falloc(rec, ino, mode, off, n)?;
            }
            3..=5 => {
                let off = at(rng, size.max(BS));
                let data = fill(rng.next(), len(rng) as usize);
                rec.op(format!("write ino {ino} {off}+{}", data.len()), false, |fs| {
                    fs.write(ino, off, &data)
                })?;
            }
            6 => {
                let mode = libc::FALLOC_FL_PUNCH_HOLE | KEEP;
                falloc(rec, ino, mode, at(rng, size), len(rng))?;
            }
            7 => {
                let mode = libc::FALLOC_FL_ZERO_RANGE | if rng.below(2) == 0 { KEEP } else { 0 };
                falloc(rec, ino, mode, at(rng, size), len(rng))?;
            }
            8 => {
                let mode = if rng.below(2) == 0 {
                    libc::FALLOC_FL_COLLAPSE_RANGE
                } else {
                    libc::FALLOC_FL_INSERT_RANGE
                };
                let (off, n) = (rng.below(size / BS + 1) * BS, (1 + rng.below(4)) * BS);
                falloc(rec, ino, mode, off, n)?;
            }
            9 => truncate(rec, ino, rng.below(size + 4 * BS))?,
            10 => rec.fsync(ino)?,
            _ if step % 12 == 11 && snaps < 3 => {
                snaps += 1;
                let snap = format!("s{snaps}");
                rec.op(format!("snapshot create {snap}"), true, |fs| {
                    fs.snapshot_create(snap.as_bytes()).map(|_| ())
                })?;
            }
            _ => rec.op("sync", true, |fs| fs.sync())?,
        }
    }
    rec.op("sync", true, |fs| fs.sync())?;
    Ok(())
}

/// One fallocate call; EINVAL (a collapse or insert the file's size does
/// not allow) is a result like any other.
fn falloc(rec: &mut Recorder, ino: u64, mode: i32, off: u64, len: u64) -> Result<()> {
    let r = rec.op(
        format!("fallocate ino {ino} mode {mode:#x} {off}+{len}"),
        false,
        |fs| fs.fallocate(ino, mode, off, len),
    );
    match r {
        Err(tux3::error::Error::Posix(e)) if e == tux3::error::Errno::EINVAL => Ok(()),
        r => r,
    }
}
