//! Device layer: writes in flight together — a commit's block images go to
//! the device as one batch through an io_uring, up to [`DEPTH`] pieces (and
//! [`BYTES_IN_FLIGHT`]) at once, so its scattered blocks cost about one
//! device round trip instead of one each. A piece whose parts are aligned
//! for `O_DIRECT` (cache pages are) is written straight from them; any
//! other is copied into its own aligned bounce buffer (kept for reuse).
//! Both outlive the kernel's use of them: every submitted piece is waited
//! for before [`Batch::write`] returns, error or not (`batch/ring.rs`).
//!
//! Urgent I/O (an fsync commit's write and flush, which an application
//! waits for) goes first: while it is under way a background batch sends no
//! new piece ([`Gate`]), so the urgent write queues behind at most
//! [`BYTES_IN_FLIGHT`] instead of a whole delta's data.
//!
//! Calls nothing else in the crate; `file.rs` owns the descriptor. Without
//! the `uring` feature only the pieces are used (the gate and the bounce
//! buffers wait for a ring), hence the `dead_code` allowance.
#![cfg_attr(not(feature = "uring"), allow(dead_code))]

use parking_lot::{Condvar, Mutex};
use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::io;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Pieces in flight at once.
pub const DEPTH: usize = 8;
/// Bytes in flight at once (beyond one piece): scattered small blocks go
/// out together, while a stream keeps only a few pieces in the device
/// queue, where an urgent write (an fsync commit's) waits behind them.
pub const BYTES_IN_FLIGHT: usize = 1 << 20;
/// Largest piece of a batch: a stream goes out as several pieces in flight
/// (at the same speed as fewer large ones on a loop device), so an urgent
/// write waits for small ones.
pub const PIECE_MAX: usize = 256 << 10;
/// Longest a batch holds back for urgent I/O before it sends one more
/// piece anyway, so a steady run of fsyncs cannot starve a delta commit.
pub const MAX_HOLD: Duration = Duration::from_millis(20);
/// How long after urgent I/O a background batch keeps only one piece in
/// flight: fsyncs come in runs (a database's, a mail server's), and the next
/// one's write then queues behind one piece instead of [`BYTES_IN_FLIGHT`].
pub const URGENT_ECHO: Duration = Duration::from_millis(100);
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
    pub fn as_slice(&self, len: usize) -> &[u8] {
        // SAFETY: as in `as_mut_slice`; the borrow is shared.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), len.min(self.layout.size())) }
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

/// Urgent I/O under way (an fsync commit's writes and flush), which
/// background batches make way for: while it lasts they send no new piece
/// (up to [`MAX_HOLD`] per piece), so the urgent writes queue behind at most
/// what was already in flight; for [`URGENT_ECHO`] after it ends they keep
/// one piece in flight at a time.
#[derive(Default)]
pub struct Gate {
    urgent: AtomicUsize,
    /// When urgent I/O last ended (under the lock the waiters use).
    lock: Mutex<Option<Instant>>,
    calm: Condvar,
    /// Times a background call waited for urgent I/O to end (for tests).
    waits: AtomicUsize,
}

impl Gate {
    pub fn begin(&self) {
        self.urgent.fetch_add(1, Ordering::SeqCst);
    }

    pub fn end(&self) {
        if self.urgent.fetch_sub(1, Ordering::SeqCst) == 1 {
            let mut last = self.lock.lock();
            *last = Some(Instant::now());
            self.calm.notify_all();
        }
    }

    /// Record the last end of urgent I/O as `t` (tests pin the window
    /// with it).
    #[cfg(test)]
    pub fn ended_at(&self, t: Instant) {
        *self.lock.lock() = Some(t);
    }

    /// Times a background call waited for urgent I/O to end.
    #[cfg(test)]
    pub fn waits(&self) -> usize {
        self.waits.load(Ordering::SeqCst)
    }

    fn is_urgent(&self) -> bool {
        self.urgent.load(Ordering::SeqCst) > 0
    }

    /// Bytes a background batch of pieces of `piece` bytes may have in
    /// flight now: one piece while urgent I/O is under way or within
    /// [`URGENT_ECHO`] of its end, else [`BYTES_IN_FLIGHT`].
    pub fn in_flight_cap(&self, piece: usize) -> usize {
        self.in_flight_cap_at(piece, Instant::now())
    }

    fn in_flight_cap_at(&self, piece: usize, now: Instant) -> usize {
        let ended = *self.lock.lock();
        let echo = self.is_urgent() || ended.is_some_and(|t| now.saturating_duration_since(t) < URGENT_ECHO);
        if echo {
            piece
        } else {
            BYTES_IN_FLIGHT
        }
    }

    /// Wait until no urgent I/O is under way, or [`MAX_HOLD`].
    pub(super) fn wait_calm(&self) {
        let mut l = self.lock.lock();
        if self.is_urgent() {
            self.waits.fetch_add(1, Ordering::SeqCst);
            self.calm.wait_for(&mut l, MAX_HOLD);
        }
    }
}

/// Without the `uring` feature there is no ring: [`Batch::new`] answers
/// `None` and the file device writes a batch one request at a time.
#[cfg(not(feature = "uring"))]
pub struct Batch(std::convert::Infallible);

#[cfg(not(feature = "uring"))]
impl Batch {
    pub fn new(_piece_max: usize) -> Option<Batch> {
        None
    }
    pub fn is_usable(&self) -> bool {
        match self.0 {}
    }
    pub fn write<F>(&mut self, _: &F, _: &[Piece], _: Option<&Gate>) -> io::Result<()> {
        match self.0 {}
    }
    /// The ring's test counters, so the file device's tests build without
    /// the feature too (they stop where `Batch::new` answers `None`).
    #[cfg(test)]
    pub fn holds(&self) -> u64 {
        match self.0 {}
    }
    #[cfg(test)]
    pub fn sent(&self) -> u64 {
        match self.0 {}
    }
}

#[cfg(feature = "uring")]
mod ring;
#[cfg(feature = "uring")]
pub use ring::Batch;

#[cfg(test)]
mod tests {
    use super::*;

    /// A background batch keeps one piece in flight while urgent I/O is
    /// under way and for [`URGENT_ECHO`] after it ends (the next fsync of
    /// a run of them then waits for one piece), the whole window
    /// otherwise.
    #[test]
    fn the_window_narrows_to_one_piece_around_urgent_io() {
        let gate = Gate::default();
        assert_eq!(gate.in_flight_cap(4096), BYTES_IN_FLIGHT, "never urgent");
        gate.begin();
        assert_eq!(gate.in_flight_cap(4096), 4096, "urgent");
        gate.end();
        let ended = gate.lock.lock().expect("the end is recorded");
        assert_eq!(gate.in_flight_cap_at(4096, ended), 4096, "just after");
        let later = ended + URGENT_ECHO;
        assert_eq!(gate.in_flight_cap_at(4096, later), BYTES_IN_FLIGHT, "long after");
        gate.begin();
        assert_eq!(gate.in_flight_cap_at(4096, later), 4096, "urgent again");
        gate.end();
    }

    /// Background work waits for urgent I/O under way (at most
    /// [`MAX_HOLD`]), and not when there is none.
    #[test]
    fn waiting_for_calm_counts_only_real_waits() {
        let gate = Gate::default();
        gate.wait_calm();
        assert_eq!(gate.waits(), 0);
        gate.begin();
        gate.wait_calm(); // returns after MAX_HOLD: nobody ends it
        assert_eq!(gate.waits(), 1);
        gate.end();
    }

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
