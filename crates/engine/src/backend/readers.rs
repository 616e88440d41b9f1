//! Backend layer: reads in the device without the delta guard, and when the
//! blocks a commit freed may be handed out again.
//!
//! A read maps its blocks under its file's lock and the shared delta
//! guard, then lets go of both and reads the device. A block it mapped may
//! meanwhile be freed (a truncate, an unlink, a rewrite), and the commit
//! that freed it may become durable, which is when the allocator would
//! release it (A2) for a later commit to overwrite. So a read enters the
//! current epoch before it lets go of its file ([`ReadEpochs::enter`]),
//! and a commit's frees, once durable, wait for every read that entered
//! before then to leave ([`ReadEpochs::close`], [`ReadEpochs::drained`]):
//! a read that entered later mapped its blocks after the frees, so it
//! cannot have mapped a freed one. No read waits for anything, and a
//! commit never waits for a read: frees held back are released at a later
//! commit's end.
//!
//! Calls nothing else in the crate.

use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::Arc;

/// Reads in flight, by the epoch they entered in.
#[derive(Default)]
pub struct ReadEpochs {
    state: Mutex<Epochs>,
}

#[derive(Default)]
struct Epochs {
    /// The epoch reads enter now.
    current: u64,
    /// Reads in flight per epoch, oldest first (an epoch whose reads all
    /// left stays until those before it have too). Its room is kept, so a
    /// read allocates nothing.
    active: VecDeque<(u64, usize)>,
}

/// A read in flight: it leaves its epoch when dropped.
pub struct ReadTicket {
    epochs: Arc<ReadEpochs>,
    epoch: u64,
}

impl ReadEpochs {
    /// A read enters the current epoch (before it lets go of the lock
    /// under which it mapped its blocks).
    pub fn enter(self: &Arc<Self>) -> ReadTicket {
        let mut s = self.state.lock();
        let epoch = s.current;
        match s.active.back_mut() {
            Some((e, n)) if *e == epoch => *n += 1,
            _ => s.active.push_back((epoch, 1)),
        }
        ReadTicket {
            epochs: self.clone(),
            epoch,
        }
    }

    /// End the current epoch: what was freed before this call may still be
    /// read by the reads of the epoch returned and those before it, and
    /// by none that enter after.
    pub fn close(&self) -> u64 {
        let mut s = self.state.lock();
        let closed = s.current;
        s.current = closed.saturating_add(1);
        closed
    }

    /// Every read that entered in `epoch` or before it has left.
    pub fn drained(&self, epoch: u64) -> bool {
        self.state.lock().active.front().is_none_or(|&(e, _)| e > epoch)
    }
}

impl Drop for ReadTicket {
    fn drop(&mut self) {
        let mut s = self.epochs.state.lock();
        if let Ok(k) = s.active.binary_search_by_key(&self.epoch, |&(e, _)| e) {
            if let Some((_, n)) = s.active.get_mut(k) {
                *n -= 1;
            }
        }
        while s.active.front().is_some_and(|&(_, n)| n == 0) {
            s.active.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_epoch_drains_when_the_reads_that_entered_by_then_leave() {
        let e = Arc::new(ReadEpochs::default());
        let first = e.enter();
        let closed = e.close();
        assert!(!e.drained(closed), "a read of the closed epoch is in flight");
        let later = e.enter();
        assert!(!e.drained(closed));
        drop(first);
        assert!(
            e.drained(closed),
            "a read that entered after the close does not count"
        );
        assert!(!e.drained(e.close()), "but it holds its own epoch");
        drop(later);
        assert!(e.drained(e.close()));
    }

    #[test]
    fn an_epoch_with_no_reads_is_drained_at_once() {
        let e = Arc::new(ReadEpochs::default());
        assert!(e.drained(e.close()));
        let t = e.enter();
        let u = e.enter();
        let closed = e.close();
        drop(t);
        assert!(!e.drained(closed), "one of two reads still in flight");
        drop(u);
        assert!(e.drained(closed));
    }
}
