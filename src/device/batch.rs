//! Writes in flight together: a commit's block images go to the device as
//! one batch through an io_uring, up to [`DEPTH`] pieces (and
//! [`BYTES_IN_FLIGHT`]) at once, so its
//! scattered blocks cost about one device round trip instead of one each.
//! Each piece is copied into its own aligned bounce buffer (kept for reuse),
//! which `O_DIRECT` needs and which outlives the kernel's use of it: every
//! submitted piece is waited for before [`Batch::write`] returns, error or
//! not.
//!
//! Calls nothing else in the crate; `file.rs` owns the descriptor.

use io_uring::{opcode, types, IoUring};
use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::io;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::ptr::NonNull;

/// Pieces in flight at once.
pub const DEPTH: usize = 8;
/// Bytes in flight at once (beyond one piece): scattered small blocks go
/// out together, while a stream of large pieces keeps only two in the
/// device queue, where an fsync's write would wait behind them.
pub const BYTES_IN_FLIGHT: usize = 2 << 20;
/// Alignment of bounce buffers for `O_DIRECT` I/O.
pub const DIRECT_ALIGN: usize = 4096;

/// A zeroed heap buffer aligned to [`DIRECT_ALIGN`], for `O_DIRECT` I/O.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: the buffer is plain owned memory; nothing aliases it.
unsafe impl Send for AlignedBuf {}

impl AlignedBuf {
    pub fn new(len: usize) -> io::Result<AlignedBuf> {
        let layout = Layout::from_size_align(len.max(1), DIRECT_ALIGN)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        let ptr =
            NonNull::new(ptr).ok_or_else(|| io::Error::new(io::ErrorKind::OutOfMemory, "bounce buffer"))?;
        Ok(AlignedBuf { ptr, layout })
    }
    pub fn capacity(&self) -> usize {
        self.layout.size()
    }
    pub fn as_mut_slice(&mut self, len: usize) -> &mut [u8] {
        // SAFETY: the allocation holds `layout.size()` initialised bytes and we own it.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), len.min(self.layout.size())) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this same layout.
        unsafe { dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

/// One piece of a batch: bytes for one device offset, gathered from
/// consecutive parts.
pub struct Piece<'a> {
    pub offset: u64,
    pub parts: Vec<&'a [u8]>,
    pub len: usize,
}

/// Split requests of consecutive parts into pieces of at most `max` bytes
/// (`max` and every part a whole number of `unit`s).
pub fn pieces<'a>(reqs: &[(u64, Vec<&'a [u8]>)], unit: usize, max: usize) -> Vec<Piece<'a>> {
    let mut out = Vec::new();
    for (block, parts) in reqs {
        let mut cur = Piece {
            offset: block * unit as u64,
            parts: Vec::new(),
            len: 0,
        };
        for part in parts {
            let mut rest: &[u8] = part;
            while !rest.is_empty() {
                if cur.len == max {
                    let next = cur.offset + cur.len as u64;
                    out.push(std::mem::replace(
                        &mut cur,
                        Piece {
                            offset: next,
                            parts: Vec::new(),
                            len: 0,
                        },
                    ));
                }
                let take = rest.len().min(max - cur.len);
                cur.parts.push(&rest[..take]);
                cur.len += take;
                rest = &rest[take..];
            }
        }
        if cur.len > 0 {
            out.push(cur);
        }
    }
    out
}

/// An io_uring and the bounce buffers of the pieces it has in flight.
pub struct Batch {
    ring: IoUring,
    bufs: Vec<AlignedBuf>,
    piece_max: usize,
    /// The ring failed in a way that leaves completions unaccounted for.
    broken: bool,
}

impl Batch {
    /// A ring for pieces of at most `piece_max` bytes; `None` when the
    /// kernel refuses io_uring (old kernel, seccomp): writes then go one by
    /// one.
    pub fn new(piece_max: usize) -> Option<Batch> {
        match IoUring::new(DEPTH as u32) {
            Ok(ring) => Some(Batch {
                ring,
                bufs: Vec::new(),
                piece_max,
                broken: false,
            }),
            Err(e) => {
                tracing::debug!("io_uring unavailable ({e}): device writes go one at a time");
                None
            }
        }
    }

    /// Whether [`Batch::write`] may be used (no earlier ring failure).
    pub fn is_usable(&self) -> bool {
        !self.broken
    }

    /// Write every piece (each at most `piece_max` bytes) to `file`, up to
    /// [`DEPTH`] at once. Returns the first error, after every submitted
    /// piece has completed.
    pub fn write<F: AsRawFd + FileExt>(&mut self, file: &F, pieces: &[Piece]) -> io::Result<()> {
        while self.bufs.len() < DEPTH.min(pieces.len()) {
            self.bufs.push(AlignedBuf::new(self.piece_max)?);
        }
        // Slot `s` holds the index of the piece in flight in `bufs[s]`.
        let mut slots: Vec<Option<usize>> = vec![None; self.bufs.len()];
        let mut next = 0;
        let mut in_flight = 0;
        let mut bytes = 0;
        let mut busy_tries = 10_000;
        let mut first_err: Option<io::Error> = None;
        loop {
            // Fill free slots while nothing has failed.
            while first_err.is_none() && next < pieces.len() {
                let Some(s) = slots.iter().position(Option::is_none) else {
                    break;
                };
                let p = &pieces[next];
                if in_flight > 0 && bytes + p.len > BYTES_IN_FLIGHT {
                    break;
                }
                debug_assert!(p.len <= self.bufs[s].capacity());
                let buf = self.bufs[s].as_mut_slice(p.len);
                let mut at = 0;
                for part in &p.parts {
                    buf[at..at + part.len()].copy_from_slice(part);
                    at += part.len();
                }
                let sqe = opcode::Write::new(types::Fd(file.as_raw_fd()), buf.as_ptr(), p.len as u32)
                    .offset(p.offset)
                    .build()
                    .user_data(s as u64);
                // SAFETY: the buffer stays alive and untouched until its
                // completion is reaped below (we never return before).
                if unsafe { self.ring.submission().push(&sqe) }.is_err() {
                    break; // queue full: reap first
                }
                slots[s] = Some(next);
                next += 1;
                in_flight += 1;
                bytes += p.len;
            }
            if in_flight == 0 {
                break;
            }
            match self.ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // Short of resources for now (EAGAIN, or EBUSY while
                // completions are pending): the queued entries stay queued,
                // so waiting and trying again is safe.
                Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::EBUSY)) && busy_tries > 0 => {
                    busy_tries -= 1;
                    std::thread::yield_now();
                }
                Err(e) => {
                    // Nothing more can be reaped safely: the buffers are
                    // leaked rather than freed under the kernel, and the
                    // ring is not used again.
                    std::mem::forget(std::mem::take(&mut self.bufs));
                    self.broken = true;
                    return Err(e);
                }
            }
            let done: Vec<(usize, i32)> = self
                .ring
                .completion()
                .map(|c| (c.user_data() as usize, c.result()))
                .collect();
            for (s, res) in done {
                let Some(i) = slots[s].take() else { continue };
                in_flight -= 1;
                let p = &pieces[i];
                bytes -= p.len;
                let outcome = if res < 0 {
                    Err(io::Error::from_raw_os_error(-res))
                } else if (res as usize) < p.len {
                    // A short write: finish it in place.
                    let done = res as usize;
                    let buf = self.bufs[s].as_mut_slice(p.len);
                    file.write_all_at(&buf[done..], p.offset + done as u64)
                } else {
                    Ok(())
                };
                if let (Err(e), None) = (outcome, &first_err) {
                    first_err = Some(e);
                }
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_split_at_the_limit_and_keep_offsets() {
        let (a, b) = (vec![1u8; 8], vec![2u8; 12]);
        let reqs: Vec<(u64, Vec<&[u8]>)> = vec![(1, vec![&a, &b]), (9, vec![&b])];
        let p = pieces(&reqs, 4, 8);
        let shape: Vec<(u64, usize, usize)> = p.iter().map(|p| (p.offset, p.len, p.parts.len())).collect();
        assert_eq!(
            shape,
            vec![(4, 8, 1), (12, 8, 1), (20, 4, 1), (36, 8, 1), (44, 4, 1)]
        );
        let bytes: Vec<u8> = p[..3].iter().flat_map(|p| p.parts.concat()).collect();
        assert_eq!(bytes, [a.clone(), b.clone()].concat());
    }
}
