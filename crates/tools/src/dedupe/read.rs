//! Dedupe, reading: the walk over the regular files, their cutting into
//! segments, and each segment read and hashed block by block.

use super::{Blk, Control, File, Hashed, Segment, SEGMENT};
use std::collections::HashSet;
use std::sync::atomic::Ordering::Relaxed;
use tux3::error::{Errno, Result};
use tux3::types::{FileType, Ino};
use tux3::Fs;
use xxhash_rust::xxh3::xxh3_128;

/// Entries read per readdir call.
const READDIR_BATCH: usize = 512;

/// The regular files under `paths`, each inode once.
pub(super) fn walk(fs: &Fs, base: Ino, paths: &[Vec<u8>], bs: u64) -> Result<Vec<File>> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    let whole = [Vec::new()];
    let paths = if paths.is_empty() { &whole[..] } else { paths };
    for p in paths {
        let mut ino = base;
        for c in p.split(|&b| b == b'/').filter(|c| !c.is_empty() && *c != b".") {
            ino = fs.lookup(ino, c)?.ino;
        }
        let shown = format!("/{}", String::from_utf8_lossy(p).trim_matches('/'));
        let mut stack = vec![(ino, shown)];
        while let Some((ino, path)) = stack.pop() {
            let a = fs.getattr(ino)?;
            match a.kind {
                FileType::Regular if seen.insert(ino) => out.push(File {
                    ino,
                    path,
                    blocks: a.size / bs,
                }),
                FileType::Directory => {
                    let mut entries = Vec::new();
                    let mut pos = 0;
                    loop {
                        let batch = fs.readdir(ino, pos, READDIR_BATCH)?;
                        let Some(last) = batch.last() else { break };
                        if last.next == pos {
                            break;
                        }
                        pos = last.next;
                        entries.extend(batch);
                    }
                    entries.retain(|e| {
                        e.name != b"."
                            && e.name != b".."
                            && matches!(e.kind, FileType::Regular | FileType::Directory)
                    });
                    // Popped in name order.
                    entries.sort_by(|a, b| b.name.cmp(&a.name));
                    let sep = if path.ends_with('/') { "" } else { "/" };
                    for e in entries {
                        stack.push((e.ino, format!("{path}{sep}{}", String::from_utf8_lossy(&e.name))));
                    }
                }
                _ => {}
            }
        }
    }
    Ok(out)
}

/// The files' full blocks as segments of at most [`SEGMENT`] bytes.
pub(super) fn cut(files: &[File], bs: u64) -> Vec<Segment> {
    let mut out = Vec::new();
    let per = (SEGMENT / bs).max(1);
    for (i, f) in files.iter().enumerate() {
        let mut first = 0;
        while first < f.blocks {
            let count = per.min(f.blocks - first);
            out.push(Segment {
                file: i as u32,
                first,
                count,
            });
            first += count;
        }
    }
    out
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
                    let h = xxh3_128(b);
                    let zero = h == zero_hash && b.iter().all(|&x| x == 0);
                    blocks[((at - start) / bs) as usize + k] = if zero { Blk::Zero } else { Blk::Data(h) };
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
    }
}
