//! Device layer: the io_uring behind [`Batch`] (the `uring` feature): up to
//! [`DEPTH`] pieces of a batch in flight at once, each in its own bounce
//! buffer that outlives the kernel's use of it.
//!
//! Calls nothing else in the crate; `batch.rs` owns the pieces and the gate.

use super::{AlignedBuf, Gate, Piece, BYTES_IN_FLIGHT, DEPTH};
use io_uring::{opcode, types, IoUring};
use std::io;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;

/// An io_uring and the bounce buffers of the pieces it has in flight.
pub struct Batch {
    ring: IoUring,
    bufs: Vec<AlignedBuf>,
    piece_max: usize,
    /// The ring failed in a way that leaves completions unaccounted for.
    broken: bool,
    /// Times a piece was held back for urgent I/O.
    holds: u64,
    /// Pieces sent through the ring.
    sent: u64,
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
                holds: 0,
                sent: 0,
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
        }
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
                if in_flight > 0 && bytes + p.len > BYTES_IN_FLIGHT {
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
                self.sent += 1;
                held = false;
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
        batch.write(&file, &ps, Some(&gate)).unwrap();
        assert_eq!(batch.holds, 4, "calm again");
        let mut back = vec![0u8; data.len()];
        file.read_exact_at(&mut back, 0).unwrap();
        assert!(back == data);
    }
}
