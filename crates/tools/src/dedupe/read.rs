//! Dedupe, reading: the files' cutting into segments where they lie on
//! the device, the segments' grouping into long
//! device reads, and each group (or a segment, through its file) read and
//! hashed block by block.

use super::kept::Pool;
use super::{Batch, Blk, Control, File, Hashed, Segment, GAP, SEGMENT};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use tux3::error::{Errno, Result};
use tux3::Fs;
use xxhash_rust::xxh3::xxh3_128;

/// The files' full blocks as segments of at most [`SEGMENT`] bytes, one
/// per piece of a file that lies in one run on the device (holes and
/// preallocated blocks left out), sorted by where they lie, each knowing
/// how many of its first blocks an earlier one lies on; a file whose
/// runs cannot be listed (gone meanwhile) is one segment per [`SEGMENT`]
/// at the end, read through the file ([`File::runs`] from the walk).
pub(super) fn place(files: &[File], bs: u64) -> Vec<Segment> {
    let mut out = Vec::new();
    let per = (SEGMENT / bs).max(1);
    for (i, f) in files.iter().enumerate() {
        let runs: Vec<(u64, u64, Option<u64>)> = match &f.runs {
            Some(runs) => runs.iter().map(|r| (r.lblock, r.count, Some(r.pblock))).collect(),
            None => vec![(0, f.blocks, None)],
        };
        for (lblock, count, pblock) in runs {
            let mut k = 0;
            while k < count {
                let n = per.min(count - k);
                out.push(Segment {
                    file: i as u32,
                    first: lblock + k,
                    count: n,
                    pblock: pblock.map(|p| p + k),
                    shared_head: 0,
                });
                k += n;
            }
        }
    }
    out.sort_by_key(|s| s.pblock.unwrap_or(u64::MAX));
    // Blocks an earlier segment lies on too are shared already (a clone,
    // an earlier dedupe): the segment that reaches furthest so far starts
    // no later than this one, so it covers this one's first blocks up to
    // where it ends.
    let mut reach = 0u64;
    for seg in &mut out {
        if let Some(p) = seg.pblock {
            seg.shared_head = reach.saturating_sub(p).min(seg.count);
            reach = reach.max(p + seg.count);
        }
    }
    out
}

/// The segments in groups read from the device at once: consecutive ones
/// (in device order) whose blocks lie within `most` blocks of the group's
/// first and at most [`GAP`] blocks after the one before (a short gap is
/// read and passed over: cheaper than another read). A segment read
/// through its file is a group of its own (no block).
pub(super) fn batches(segments: &[Segment], most: u64) -> Vec<Batch> {
    let mut out: Vec<Batch> = Vec::new();
    for (i, seg) in segments.iter().enumerate() {
        let Some(p) = seg.pblock else {
            out.push(Batch {
                segs: i..i + 1,
                start: None,
                blocks: 0,
            });
            continue;
        };
        let end = p + seg.count;
        if let Some(b) = out.last_mut() {
            if let Some(start) = b.start {
                let reach = start + b.blocks;
                if p >= start && p <= reach + GAP && end.max(reach) - start <= most {
                    b.segs.end = i + 1;
                    b.blocks = end.max(reach) - start;
                    continue;
                }
            }
        }
        out.push(Batch {
            segs: i..i + 1,
            start: Some(p),
            blocks: seg.count,
        });
    }
    out
}

/// Read a group's blocks from the device into `buf` and hash each of its
/// segments; `None` if the read failed (each segment is then read through
/// its file, which names what failed). `keep`: the volume's write epoch
/// before the read, to hand the bytes on with it (read into a buffer of
/// their own from `pool`, then; else into `buf`).
pub(super) fn hash_batch(
    fs: &Fs,
    segments: &[Segment],
    b: &Batch,
    (bs, zero_hash): (u64, u128),
    (buf, keep, pool): (&mut Vec<u8>, Option<u64>, &Arc<Pool>),
    ctl: &Control,
) -> Option<Vec<Hashed>> {
    let start = b.start?;
    let len = (b.blocks * bs) as usize;
    let mut own = keep.map(|_| pool.take(len));
    let buf = match &mut own {
        Some(p) => &mut p.buf,
        None => {
            if buf.len() < len {
                buf.resize(len, 0);
            }
            buf
        }
    };
    fs.device().read(start, &mut buf[..len]).ok()?;
    let mut out = Vec::with_capacity(b.segs.len());
    for seg in &segments[b.segs.clone()] {
        let at = ((seg.pblock? - start) * bs) as usize;
        let data = &buf[at..at + (seg.count * bs) as usize];
        let blocks = data
            .chunks_exact(bs as usize)
            .enumerate()
            .map(|(k, x)| {
                if (k as u64) < seg.shared_head {
                    Blk::Shared
                } else {
                    hashed(x, zero_hash)
                }
            })
            .collect();
        ctl.read.fetch_add(seg.count * bs, Relaxed);
        out.push(Hashed {
            blocks,
            read: seg.count * bs,
            failure: None,
            data: None,
        });
    }
    if let (Some(epoch), Some(own)) = (keep, own) {
        let own = Arc::new(own);
        for (h, seg) in out.iter_mut().zip(&segments[b.segs.clone()]) {
            let at = ((seg.pblock? - start) * bs) as usize;
            h.data = Some((own.clone(), at, epoch));
        }
    }
    Some(out)
}

/// A block's hash, or that it is all zeroes.
fn hashed(b: &[u8], zero_hash: u128) -> Blk {
    let h = xxh3_128(b);
    if h == zero_hash && b.iter().all(|&x| x == 0) {
        Blk::Zero
    } else {
        Blk::Data(h)
    }
}

/// Read and hash one segment.
pub(super) fn hash_segment(
    fs: &Fs,
    f: &File,
    seg: &Segment,
    bs: u64,
    zero_hash: u128,
    buf: &mut [u8],
    ctl: &Control,
) -> Hashed {
    let mut blocks = vec![Blk::Hole; seg.count as usize];
    let mut read = 0;
    let (start, end) = (seg.first * bs, (seg.first + seg.count) * bs);
    let r = (|| -> Result<()> {
        let mut pos = start;
        while pos < end {
            let data = match fs.seek_data(f.ino, pos, true) {
                Ok(d) => d / bs * bs,
                Err(e) if e.errno() == Errno::ENXIO => break,
                Err(e) => return Err(e),
            };
            let data = data.max(pos);
            if data >= end {
                break;
            }
            let hole = match fs.seek_data(f.ino, data, false) {
                Ok(h) => h.div_ceil(bs) * bs,
                Err(e) if e.errno() == Errno::ENXIO => end,
                Err(e) => return Err(e),
            };
            let stop = hole.clamp(data + bs, end);
            let mut at = data;
            while at < stop {
                if ctl.cancel.load(Relaxed) {
                    return Ok(());
                }
                let n = ((stop - at) as usize).min(buf.len());
                let got = fs.read_into(f.ino, at, &mut buf[..n])?;
                read += got as u64;
                ctl.read.fetch_add(got as u64, Relaxed);
                let full = got as u64 / bs;
                for (k, b) in buf[..(full * bs) as usize].chunks_exact(bs as usize).enumerate() {
                    blocks[((at - start) / bs) as usize + k] = hashed(b, zero_hash);
                }
                if full == 0 {
                    // Shorter than we thought: truncated meanwhile.
                    return Ok(());
                }
                at += full * bs;
            }
            pos = stop;
        }
        Ok(())
    })();
    let failure = r.err().and_then(|e| {
        blocks.fill(Blk::Skip);
        // A file deleted since the walk (through a mount) is no failure.
        (!super::gone(&e)).then(|| format!("{}: reading: {e}", f.path))
    });
    Hashed {
        blocks,
        read,
        failure,
        data: None,
    }
}
