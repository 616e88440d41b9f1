//! Frontend layer: many planned file reads made together
//! ([`read_blocks_many`], for `Fs::read_many`): their whole-block device
//! reads sorted by address and joined where one goes on where another
//! stops, each block still checked against its extent's checksum.
//!
//! Calls the device and `file` (the planned reads, their checks).

use super::file::{read_blocks, verify, DeviceRead};
use crate::device::Device;
use crate::error::Result;

/// Most bytes one device read of [`read_blocks_many`] takes.
const MANY_MAX: usize = 4 << 20;

/// [`read_blocks`] for several planned reads at once (`jobs`: each one's
/// buffer and device reads): the reads of whole blocks of all of them are
/// sorted by address, and those that follow one another on the device
/// (several small files written together) are made as one device read of
/// up to 4 MiB, each block still checked against its extent's checksum.
/// One result per job: a checksum that fails is that job's error; a
/// device read that fails is made again per read, so the error names
/// its own.
pub(super) fn read_blocks_many(
    dev: &dyn Device,
    bs: u64,
    jobs: &mut [(&mut [u8], &[DeviceRead])],
) -> Vec<Result<()>> {
    let bsz = bs as usize;
    let mut out: Vec<Result<()>> = jobs.iter().map(|_| Ok(())).collect();
    // (pblock, job, read) of the whole-block reads; the rest per job.
    let mut whole: Vec<(u64, usize, usize)> = Vec::new();
    for (j, (buf, reads)) in jobs.iter_mut().enumerate() {
        let mut partial = Vec::new();
        for (k, r) in reads.iter().enumerate() {
            if r.skip == 0 && r.len % bsz == 0 && r.len > 0 {
                whole.push((r.pblock, j, k));
            } else {
                partial.push(r.clone());
            }
        }
        if let Err(e) = read_blocks(dev, bs, buf, &partial) {
            out[j] = Err(e);
        }
    }
    whole.sort_unstable();
    let mut scratch = Vec::new();
    let mut i = 0;
    while i < whole.len() {
        // A run of reads each starting where the one before ends.
        let start = whole[i].0;
        let mut end = i;
        let mut blocks = (jobs[whole[i].1].1[whole[i].2].len / bsz) as u64;
        while end + 1 < whole.len() {
            let (p, j, k) = whole[end + 1];
            let n = (jobs[j].1[k].len / bsz) as u64;
            if p != start + blocks || ((blocks + n) as usize) * bsz > MANY_MAX {
                break;
            }
            blocks += n;
            end += 1;
        }
        scratch.resize(blocks as usize * bsz, 0);
        let read = crate::device::read_named(dev, start, &mut scratch);
        for &(p, j, k) in &whole[i..=end] {
            if out[j].is_err() {
                continue;
            }
            let (buf, reads) = &mut jobs[j];
            let r = &reads[k];
            let done = match &read {
                Ok(()) => {
                    let at = ((p - start) * bs) as usize;
                    let data = &scratch[at..at + r.len];
                    let e = &r.extent;
                    let checked = if e.is_summed() {
                        data.chunks(bsz)
                            .enumerate()
                            .try_for_each(|(n, block)| verify(r.ino, e, e.lblock + n as u64, block))
                    } else {
                        Ok(())
                    };
                    checked.map(|()| buf[r.pos..r.pos + r.len].copy_from_slice(data))
                }
                Err(_) => read_blocks(dev, bs, buf, std::slice::from_ref(r)),
            };
            if let Err(e) = done {
                out[j] = Err(e);
            }
        }
        i = end + 1;
    }
    out
}
