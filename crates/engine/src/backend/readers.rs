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

#[cfg(feature = "loom")]
use loom::sync::{Mutex, MutexGuard};
#[cfg(not(feature = "loom"))]
use parking_lot::{Mutex, MutexGuard};
use std::collections::VecDeque;
// std's `Arc` under loom too: a ticket's `Arc` only keeps the epochs
// alive, and `enter` takes it as its receiver, which loom's cannot be.
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
    /// The state, locked.
    #[cfg(not(feature = "loom"))]
    fn state(&self) -> MutexGuard<'_, Epochs> {
        self.state.lock()
    }

    /// The state, locked (loom's lock poisons; nothing panics holding it).
    #[cfg(feature = "loom")]
    fn state(&self) -> MutexGuard<'_, Epochs> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A read enters the current epoch (before it lets go of the lock
    /// under which it mapped its blocks).
    pub fn enter(self: &Arc<Self>) -> ReadTicket {
        let mut s = self.state();
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
        let mut s = self.state();
        let closed = s.current;
        s.current = closed.saturating_add(1);
        closed
    }

    /// Every read that entered in `epoch` or before it has left.
    pub fn drained(&self, epoch: u64) -> bool {
        self.state().active.front().is_none_or(|&(e, _)| e > epoch)
    }
}

impl Drop for ReadTicket {
    fn drop(&mut self) {
        let mut s = self.epochs.state();
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

#[cfg(all(test, feature = "loom"))]
mod loom_tests {
    use super::*;
    use loom::sync::atomic::{AtomicU64, Ordering::SeqCst};
    use loom::thread;

    use crate::loom_model as model;

    /// A file of one block and the device under it. `file` stands for the
    /// file's lock and the delta guard: the block the file maps and the
    /// generation of the data it has there. Each device block holds the
    /// generation last written to it, read and written with no lock held.
    struct Volume {
        file: loom::sync::Mutex<Option<(usize, u64)>>,
        device: [AtomicU64; 2],
        readers: Arc<ReadEpochs>,
    }

    impl Volume {
        /// Block 0 mapped, holding generation 1.
        fn new() -> loom::sync::Arc<Volume> {
            loom::sync::Arc::new(Volume {
                file: loom::sync::Mutex::new(Some((0, 1))),
                device: [AtomicU64::new(1), AtomicU64::new(0)],
                readers: Arc::default(),
            })
        }

        /// The file's lock (nothing panics holding it).
        fn lock(&self) -> loom::sync::MutexGuard<'_, Option<(usize, u64)>> {
            self.file
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        }

        /// A read as `frontend/shared.rs` does it: map under the lock, enter
        /// before letting go of it, then read the device with no lock: the
        /// block still holds what the file had there when it was mapped.
        fn read(&self) {
            let file = self.lock();
            let mapped = *file;
            let entered = mapped.map(|_| self.readers.enter());
            drop(file);
            if let Some((block, generation)) = mapped {
                assert_eq!(
                    self.device[block].load(SeqCst),
                    generation,
                    "a read's block was overwritten while it was read"
                );
            }
            drop(entered);
        }

        /// Under the lock: map `to` (None: a truncate) and return the block
        /// this frees.
        fn remap(&self, to: Option<(usize, u64)>) -> Option<usize> {
            let mut file = self.lock();
            std::mem::replace(&mut *file, to).map(|(block, _)| block)
        }
    }

    /// The allocator's side (`Allocator::unpin_committed`, called from
    /// `backend/commit.rs`): a freed block held for the reads of an epoch,
    /// then released to be handed out again.
    #[derive(Default)]
    struct Frees {
        held: Option<(u64, usize)>,
        released: Option<usize>,
    }

    impl Frees {
        /// A commit's end, under the lock (the exclusive guard): close the
        /// epoch, hold what the commit freed for the reads of it, and
        /// release what is held once its reads have left.
        fn finish(&mut self, v: &Volume, freed: Option<usize>) {
            let _locked = v.lock();
            let epoch = v.readers.close();
            if let Some(block) = freed {
                self.held = Some((epoch, block));
            }
            if let Some((epoch, block)) = self.held {
                if v.readers.drained(epoch) {
                    self.held = None;
                    self.released = Some(block);
                }
            }
        }

        /// A later delta's data written to the block released, if any.
        fn reuse(&mut self, v: &Volume, generation: u64) {
            if let Some(block) = self.released.take() {
                v.device[block].store(generation, SeqCst);
            }
        }
    }

    /// A truncate frees the block a read mapped, its commit ends and a
    /// later one too, and a new file's data goes to the block once it is
    /// released: the read never sees it overwritten, and once the read has
    /// left the next commit releases the block (nothing is held forever).
    /// With `enter` moved after the lock is let go (`drop(file)` first) this
    /// fails: the read maps block 0 and is preempted, the truncate frees it,
    /// the commit closes epoch 0 with no read in it and releases the block,
    /// it is overwritten, and the read then enters epoch 1 and reads
    /// generation 2 where it mapped 1.
    #[test]
    fn a_freed_block_is_overwritten_only_once_the_reads_that_mapped_it_leave() {
        model(|| {
            let v = Volume::new();
            let reader = {
                let v = v.clone();
                thread::spawn(move || v.read())
            };
            let mut frees = Frees::default();
            let freed = v.remap(None);
            frees.finish(&v, freed);
            frees.finish(&v, None);
            frees.reuse(&v, 2);
            reader.join().unwrap();
            frees.finish(&v, None);
            assert!(frees.held.is_none(), "a free held after its reads left");
        });
    }

    /// Two reads while a rewrite moves the file from block 0 to block 1:
    /// each sees the generation it mapped, whichever side of the close it
    /// entered on and in whatever order the two leave, and the old block is
    /// released by the first commit to end after both have left. A ticket
    /// whose drop leaves its emptied epoch at the front of the queue fails
    /// the last check (the block is held for good).
    #[test]
    fn reads_on_either_side_of_a_close_see_what_they_mapped() {
        model(|| {
            let v = Volume::new();
            let readers: Vec<_> = (0..2)
                .map(|_| {
                    let v = v.clone();
                    thread::spawn(move || v.read())
                })
                .collect();
            let mut frees = Frees::default();
            v.device[1].store(2, SeqCst);
            let freed = v.remap(Some((1, 2)));
            frees.finish(&v, freed);
            frees.reuse(&v, 3);
            for r in readers {
                r.join().unwrap();
            }
            frees.finish(&v, None);
            assert!(frees.held.is_none(), "a free held after its reads left");
        });
    }
}
