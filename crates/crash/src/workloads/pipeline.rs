//! The `fsync_pipeline` workload: two fsync commits in flight at once, as
//! whenever fsyncs come faster than the device flushes. Each round writes
//! to two files (appends or overwrites, now and then a file new in `/d`),
//! sometimes a third that no fsync covers, then fsyncs the two so that the
//! second commit is planned and written while the first one's flush is
//! held ([`Recorder::fsyncs_in_flight`]). A crash anywhere must keep each
//! fsync that returned, and the second may never be durable without the
//! first: its log blocks follow the first one's in the chain. Some rounds
//! start with a sync, some end with a lone fsync.

use super::{fill, size_of};
use crate::record::Recorder;
use crate::Rng;
use tux3::error::Result;
use tux3::types::{Ino, ROOT_INO};

/// Rounds of the workload.
const ROUNDS: u64 = 14;

/// Record the workload.
pub(super) fn fsync_pipeline(rec: &mut Recorder, rng: &mut Rng) -> Result<()> {
    let d = rec
        .op("mkdir /d", false, |fs| fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0))?
        .ino;
    let mut files: Vec<Ino> = Vec::new();
    for (dir, name) in [(ROOT_INO, "a"), (ROOT_INO, "b"), (d, "c"), (d, "e")] {
        let ino = rec
            .op(format!("create {name}"), false, |fs| {
                fs.create(dir, name.as_bytes(), 0o644, 0, 0)
            })?
            .ino;
        files.push(ino);
    }
    rec.op("sync", true, |fs| fs.sync())?;
    for round in 0..ROUNDS {
        if round % 5 == 4 {
            rec.op("sync", true, |fs| fs.sync())?;
        }
        let x = files[rng.below(files.len() as u64) as usize];
        let mut y = files[rng.below(files.len() as u64) as usize];
        if y == x {
            y = files[(files.iter().position(|&f| f == x).unwrap_or(0) + 1) % files.len()];
        }
        // Now and then the second fsync is of a file new in /d: its name
        // goes with it.
        if round % 3 == 2 {
            let name = format!("n{round}");
            y = rec
                .op(format!("create /d/{name}"), false, |fs| {
                    fs.create(d, name.as_bytes(), 0o644, 0, 0)
                })?
                .ino;
            files.push(y);
        }
        write_some(rec, rng, x)?;
        if rng.below(3) == 0 {
            let z = files[rng.below(files.len() as u64) as usize];
            if z != x && z != y {
                write_some(rec, rng, z)?;
            }
        }
        write_some(rec, rng, y)?;
        rec.fsyncs_in_flight(x, y)?;
        if rng.below(3) == 0 {
            let z = files[rng.below(files.len() as u64) as usize];
            write_some(rec, rng, z)?;
            rec.fsync(z)?;
        }
    }
    Ok(())
}

/// Append to `ino` or overwrite part of it, as one recorded call.
fn write_some(rec: &mut Recorder, rng: &mut Rng, ino: Ino) -> Result<()> {
    let size = size_of(rec, ino);
    let max = if rng.below(4) == 0 { 12_000 } else { 3_000 };
    let len = 1 + rng.below(max) as usize;
    let at = if size == 0 || rng.below(2) == 0 {
        size
    } else {
        rng.below(size)
    };
    let data = fill(rng.next(), len);
    rec.op(format!("write ino {ino} {at}+{len}"), false, |fs| {
        fs.write(ino, at, &data)
    })?;
    Ok(())
}
