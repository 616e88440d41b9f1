//! Crash workload `drop_runs`: files made together and removed in runs —
//! up, down, around files held open (orphans until released) — so that
//! the log carries `DropRun` records (consecutive freed inodes) across
//! syncs, fsyncs of the directory and a unify.

use super::{create_files, fill, Recorder, Rng};
use tux3::error::Result;
use tux3::types::ROOT_INO;

pub(super) fn drop_runs(rec: &mut Recorder, rng: &mut Rng) -> Result<()> {
    const FILES: usize = 24;
    for round in 0..3u64 {
        let prefix = format!("r{round}-");
        let inos = create_files(rec, &prefix, FILES)?;
        for (i, &ino) in inos.iter().enumerate() {
            if rng.below(3) == 0 {
                let data = fill(rng.next(), 1 + rng.below(6000) as usize);
                rec.op(format!("write /{prefix}{i} 0+{}", data.len()), false, |fs| {
                    fs.write(ino, 0, &data)
                })?;
            }
        }
        rec.op("sync", true, |fs| fs.sync())?;
        // A run up, a run down below it, then the rest in a random order.
        let mut order: Vec<usize> = (8..16).chain((2..8).rev()).collect();
        let mut rest: Vec<usize> = (0..2).chain(16..FILES).collect();
        while !rest.is_empty() {
            order.push(rest.swap_remove(rng.below(rest.len() as u64) as usize));
        }
        let mut held = Vec::new();
        for i in order {
            let ino = inos[i];
            if rng.below(6) == 0 {
                rec.op(format!("open /{prefix}{i}"), false, |fs| fs.open_handle(ino))?;
                held.push(ino);
            }
            rec.op(format!("unlink /{prefix}{i}"), false, |fs| {
                fs.unlink(ROOT_INO, format!("{prefix}{i}").as_bytes())
            })?;
            match rng.below(10) {
                0 => rec.fsync(ROOT_INO)?,
                1 => rec.op("sync", true, |fs| fs.sync())?,
                _ => {}
            }
        }
        for ino in held {
            rec.op(format!("release ino {ino}"), false, |fs| fs.release_handle(ino))?;
        }
        if round == 1 {
            rec.op("unify", true, |fs| fs.unify())?;
        } else {
            rec.op("sync", true, |fs| fs.sync())?;
        }
    }
    Ok(())
}
