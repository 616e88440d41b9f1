//! Device layer: the io_uring behind [`Batch`] (the `uring` feature): up to
//! [`DEPTH`] pieces of a batch in flight at once. A piece whose parts are
//! all aligned for `O_DIRECT` (cache pages are: the allocator gives 4 KiB
//! blocks 4 KiB-aligned) goes out as one vectored write straight from them;
//! any other is copied into a bounce buffer of its own slot first. Both
//! outlive the kernel's use of them: the parts are borrowed for the whole
//! call, and the buffers stay in the batch.
//!
//! Calls nothing else in the crate; `batch.rs` owns the pieces and the gate.

use super::{AlignedBuf, Gate, Piece, BYTES_IN_FLIGHT, DEPTH, DIRECT_ALIGN};
use io_uring::{opcode, types, IoUring};
use std::io;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;

/// `struct iovec`, without its raw pointer (so a [`Batch`] may move between
/// threads): the address of a part borrowed for the call that writes it.
#[repr(C)]
#[derive(Clone, Copy)]
struct Iovec {
    base: usize,
    len: usize,
}

const _: () = assert!(std::mem::size_of::<Iovec>() == std::mem::size_of::<libc::iovec>());

/// At most this many parts go in one vectored write (`IOV_MAX`).
const IOV_MAX: usize = 1024;

/// Whether `parts` can be written as they are with `O_DIRECT`.
fn aligned(parts: &[&[u8]]) -> bool {
    parts.len() <= IOV_MAX
        && parts.iter().all(|p| {
            (p.as_ptr() as usize).is_multiple_of(DIRECT_ALIGN) && p.len().is_multiple_of(DIRECT_ALIGN)
        })
}

/// An io_uring, and per slot of a piece in flight its bounce buffer and
/// the iovecs of a vectored write.
pub struct Batch {
    ring: IoUring,
    bufs: Vec<AlignedBuf>,
    iovs: Vec<Vec<Iovec>>,
    /// Pieces written straight from their parts, not copied.
    vectored: u64,
    piece_max: usize,
    /// The ring failed in a way that leaves completions unaccounted for.
    broken: bool,
    /// Times a piece was held back for urgent I/O.
    holds: u64,
    /// Pieces sent through the ring.
    sent: u64,
    /// Most bytes in flight at once during the last write.
    peak: usize,
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
                iovs: Vec::new(),
                vectored: 0,
                piece_max,
                broken: false,
                holds: 0,
                sent: 0,
                peak: 0,
            }),
            Err(e) => {
                tracing::debug!("io_uring unavailable ({e}): device writes go one at a time");
                None
            }
        }
    }

    /// Times a piece was held back for urgent I/O so far.
    #[cfg(test)]
    pub fn holds(&self) -> u64 {
        self.holds
    }

    /// Pieces sent through the ring so far.
    #[cfg(test)]
    pub fn sent(&self) -> u64 {
        self.sent
    }

    /// Pieces written straight from their parts so far.
    #[cfg(test)]
    pub fn vectored(&self) -> u64 {
        self.vectored
    }

    /// Whether [`Batch::write`] may be used (no earlier ring failure).
    pub fn is_usable(&self) -> bool {
        !self.broken
    }

    /// Write every piece (each at most `piece_max` bytes) to `file`, up to
    /// [`DEPTH`] at once, making way for urgent I/O on `gate` (unless this
    /// batch is the urgent one: no `gate`). Returns the first error, after
    /// every submitted piece has completed.
    pub fn write<F: AsRawFd + FileExt>(
        &mut self,
        file: &F,
        pieces: &[Piece],
        gate: Option<&Gate>,
    ) -> io::Result<()> {
        while self.bufs.len() < DEPTH.min(pieces.len()) {
            self.bufs.push(AlignedBuf::new(self.piece_max)?);
            self.iovs.push(Vec::new());
        }
        self.peak = 0;
        // Slot `s` holds the index of the piece in flight in `bufs[s]`.
        let mut slots: Vec<Option<usize>> = vec![None; self.bufs.len()];
        let mut next = 0;
        let mut in_flight = 0;
        let mut bytes = 0;
        let mut busy_tries = 10_000;
        let mut first_err: Option<io::Error> = None;
        // Held back once for urgent I/O: the next piece goes regardless.
        let mut held = false;
        loop {
            // Fill free slots while nothing has failed.
            while first_err.is_none() && next < pieces.len() {
                let Some(s) = slots.iter().position(Option::is_none) else {
                    break;
                };
                let p = &pieces[next];
                // (The cap, which takes the gate's lock, only once something
                // is in flight.)
                if in_flight > 0
                    && bytes + p.len > gate.map_or(BYTES_IN_FLIGHT, |g| g.in_flight_cap(self.piece_max))
                {
                    break;
                }
                if let Some(gate) = gate.filter(|g| !held && g.is_urgent()) {
                    if in_flight > 0 {
                        break; // reap what is in flight first
                    }
                    gate.wait_calm();
                    held = true;
                    self.holds += 1;
                    continue;
                }
                let fd = types::Fd(file.as_raw_fd());
                let sqe = if aligned(&p.parts) {
                    let iov = &mut self.iovs[s];
                    iov.clear();
                    iov.extend(p.parts.iter().map(|part| Iovec {
                        base: part.as_ptr() as usize,
                        len: part.len(),
                    }));
                    self.vectored += 1;
                    opcode::Writev::new(fd, iov.as_ptr().cast::<libc::iovec>(), iov.len() as u32)
                } else {
                    debug_assert!(p.len <= self.bufs[s].capacity());
                    let buf = self.bufs[s].as_mut_slice(p.len);
                    let mut at = 0;
                    for part in &p.parts {
                        buf[at..at + part.len()].copy_from_slice(part);
                        at += part.len();
                    }
                    // One iovec (the whole buffer) as a plain write.
                    let iov = &mut self.iovs[s];
                    iov.clear();
                    iov.push(Iovec {
                        base: buf.as_ptr() as usize,
                        len: p.len,
                    });
                    opcode::Writev::new(fd, iov.as_ptr().cast::<libc::iovec>(), 1)
                }
                .offset(p.offset)
                .build()
                .user_data(s as u64);
                // SAFETY: the parts are borrowed for this whole call, and the
                // slot's buffer and iovecs stay alive and untouched until its
                // completion is reaped below (we never return before, but on
                // a ring failure, where the buffers are leaked; the parts may
                // then still be read by the kernel after we return, for a
                // write of a commit that fails, after which the volume takes
                // no more changes).
                if unsafe { self.ring.submission().push(&sqe) }.is_err() {
                    break; // queue full: reap first
                }
                slots[s] = Some(next);
                self.sent += 1;
                held = false;
                next += 1;
                in_flight += 1;
                bytes += p.len;
                self.peak = self.peak.max(bytes);
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
                    std::mem::forget(std::mem::take(&mut self.iovs));
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
                    // A short write: finish it in place, from the parts.
                    finish_short(file, p, res as usize)
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

/// Write what a short write of `p` left: its bytes from `done` on.
fn finish_short<F: FileExt>(file: &F, p: &Piece, done: usize) -> io::Result<()> {
    let mut skip = done;
    let mut at = p.offset + done as u64;
    for part in &p.parts {
        if skip >= part.len() {
            skip -= part.len();
            continue;
        }
        file.write_all_at(&part[skip..], at)?;
        at += (part.len() - skip) as u64;
        skip = 0;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::pieces;
    use super::*;

    /// While urgent I/O is under way, a background batch holds back before
    /// each piece it sends (and reaps what it has in flight first); the
    /// urgent batch itself and a batch on a calm gate never hold back.
    #[test]
    fn background_batches_make_way_for_urgent_io() {
        let Some(mut batch) = Batch::new(4096) else {
            return; // no io_uring here: writes go one by one
        };
        let file = tempfile::tempfile().unwrap();
        let data: Vec<u8> = (0..4 * 4096).map(|i| (i % 251) as u8).collect();
        let reqs: Vec<(u64, Vec<&[u8]>)> = vec![(0, vec![&data])];
        let ps = pieces(&reqs, 4096, 4096);
        assert_eq!(ps.len(), 4);
        let gate = Gate::default();
        batch.write(&file, &ps, Some(&gate)).unwrap();
        assert_eq!(batch.holds, 0, "a calm gate holds nothing back");
        gate.begin();
        batch.write(&file, &ps, None).unwrap();
        assert_eq!(batch.holds, 0, "the urgent batch goes at once");
        batch.write(&file, &ps, Some(&gate)).unwrap();
        assert_eq!(batch.holds, 4, "one hold per piece while urgent");
        gate.end();
        // However long this thread waits before its next piece, the end is
        // recent.
        gate.ended_at(std::time::Instant::now() + std::time::Duration::from_secs(3600));
        batch.write(&file, &ps, Some(&gate)).unwrap();
        assert_eq!(batch.holds, 4, "calm again");
        assert_eq!(batch.peak, 4096, "one piece at a time just after urgent I/O");
        let calm = Gate::default();
        batch.write(&file, &ps, Some(&calm)).unwrap();
        assert_eq!(batch.peak, 4 * 4096, "all four in flight on a gate never urgent");
        let mut back = vec![0u8; data.len()];
        file.read_exact_at(&mut back, 0).unwrap();
        assert!(back == data);
    }

    /// Pieces whose parts are all aligned go out as vectored writes straight
    /// from them, any other through its bounce buffer; either way the file
    /// gets every byte where it belongs. A short write is finished from the
    /// parts.
    #[test]
    fn aligned_parts_are_written_from_where_they_are() {
        let Some(mut batch) = Batch::new(4 * 4096) else {
            return; // no io_uring here: writes go one by one
        };
        let file = tempfile::tempfile().unwrap();
        let mut blocks: Vec<AlignedBuf> = (0..6).map(|_| AlignedBuf::new(4096).unwrap()).collect();
        for (k, b) in blocks.iter_mut().enumerate() {
            for (i, x) in b.as_mut_slice(4096).iter_mut().enumerate() {
                *x = (k * 31 + i % 253) as u8;
            }
        }
        let unaligned: Vec<u8> = (0..4096 + 1).map(|i| (i % 7) as u8).collect();
        let parts: Vec<&[u8]> = blocks.iter_mut().map(|b| &*b.as_mut_slice(4096)).collect();
        // Blocks 0..4 aligned (one piece), then one part off alignment
        // (its own piece, copied), then two aligned blocks.
        let reqs: Vec<(u64, Vec<&[u8]>)> = vec![
            (0, parts[..4].to_vec()),
            (10, vec![&unaligned[1..]]),
            (20, parts[4..].to_vec()),
        ];
        let ps = pieces(&reqs, 4096, 4 * 4096);
        assert_eq!(ps.len(), 3);
        batch.write(&file, &ps, None).unwrap();
        assert_eq!(batch.vectored(), 2, "the aligned pieces went straight out");
        assert_eq!(batch.sent(), 3);
        let mut back = vec![0u8; 4096];
        for (block, want) in [
            (0u64, parts[0]),
            (3, parts[3]),
            (10, &unaligned[1..]),
            (20, parts[4]),
            (21, parts[5]),
        ] {
            file.read_exact_at(&mut back, block * 4096).unwrap();
            assert!(back == want, "block {block}");
        }
        // A short write of 5000 bytes of the first piece, finished from its parts.
        let other = tempfile::tempfile().unwrap();
        finish_short(&other, &ps[0], 5000).unwrap();
        let mut all = vec![0u8; 4 * 4096];
        other.read_exact_at(&mut all[5000..], 5000).unwrap();
        assert!(
            all[5000..] == parts[..4].concat()[5000..],
            "the rest of the piece, in place"
        );
    }
}
