//! Cache layer: the bound on clean pages — blocks a full commit wrote, kept
//! in their files' [`PageMap`](super::PageMap)s so that a partial write of
//! one (an append to a log, a record updated in place) need not read it back
//! from the device on the request's thread. They cost memory only: the volume
//! keeps at most `limit` bytes of them, evicting whole files' clean pages,
//! the files that got theirs first going first. A file that one commit wrote
//! more than a quarter of the stream bound of (a stream) keeps none of them:
//! they would only push the other files' out.
//!
//! Calls only the inode cache (and the base types).

use super::inode::InodeCache;
use crate::types::Ino;
use std::collections::VecDeque;
use std::sync::Arc;

/// Clean page accounting of one volume.
pub struct CleanPages {
    /// Bytes of clean pages held (an upper bound: pages dropped with their
    /// inode are counted until the next eviction finds the queue empty).
    bytes: u64,
    limit: u64,
    /// Most bytes one file may keep clean from one commit.
    admit: u64,
    /// Files in the order they got clean pages (a file may appear twice).
    order: VecDeque<Ino>,
}

impl CleanPages {
    /// Hold at most `limit` bytes; a file that one commit wrote more than
    /// a quarter of `stream_bound` of keeps none.
    pub fn new(limit: u64, stream_bound: u64) -> CleanPages {
        CleanPages {
            bytes: 0,
            limit,
            admit: stream_bound / 4,
            order: VecDeque::new(),
        }
    }

    /// Most pages of `bs` bytes one file may keep clean from one commit.
    pub fn admits(&self, bs: u64) -> usize {
        (self.admit / bs.max(1)) as usize
    }

    /// Bytes of clean pages held.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// `ino` went from `before` to `after` clean pages of `bs` bytes.
    pub fn changed(&mut self, ino: Ino, before: usize, after: usize, bs: u64) {
        if after > before {
            if before == 0 {
                self.order.push_back(ino);
            }
            self.bytes += (after - before) as u64 * bs;
        } else {
            self.bytes = self.bytes.saturating_sub((before - after) as u64 * bs);
        }
    }

    /// Evict files' clean pages until the held bytes are within the limit;
    /// the evicted pages go to `out`, for the caller to free outside its
    /// locks.
    pub fn evict(&mut self, cache: &mut InodeCache, bs: u64, out: &mut Vec<Arc<Vec<u8>>>) {
        while self.bytes > self.limit {
            let Some(ino) = self.order.pop_front() else {
                self.bytes = 0; // what is left was dropped with its inodes
                return;
            };
            if let Some(i) = cache.get_mut(ino) {
                let gone = i.pages.take_clean();
                self.bytes = self.bytes.saturating_sub(gone.len() as u64 * bs);
                out.extend(gone);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::Inode;
    use crate::structures::inode::InodeAttrs;

    fn file_with_clean(ino: Ino, n: u64) -> Inode {
        let mut i = Inode::new(ino, InodeAttrs::default());
        for b in 0..n {
            i.pages.page_mut(b, 1, || vec![b as u8; 8]);
        }
        i.pages.start_writeback();
        i.pages.end_writeback(usize::MAX, &mut Vec::new());
        i
    }

    #[test]
    fn eviction_keeps_the_bound_oldest_files_first() {
        let bs = 8;
        let mut c = CleanPages::new(5 * bs, 5 * bs);
        let mut map = InodeCache::default();
        for (ino, n) in [(10, 3), (11, 2), (12, 2)] {
            map.insert(file_with_clean(ino, n));
            c.changed(ino, 0, n as usize, bs);
        }
        let mut out = Vec::new();
        c.evict(&mut map, bs, &mut out);
        assert_eq!(out.len(), 3, "the first file's pages go");
        assert_eq!(c.bytes(), 4 * bs);
        assert_eq!(map.lock(10).unwrap().pages.clean_len(), 0);
        assert_eq!(map.lock(11).unwrap().pages.clean_len(), 2);
        // A file dropped from the cache with its pages: the count stays an
        // upper bound, and eviction ends once the queue is empty.
        map.remove(11);
        c.changed(12, 2, 1, bs);
        c.evict(&mut map, bs, &mut out);
        assert_eq!(c.bytes(), 3 * bs, "within the limit: nothing to do");
        let mut c2 = CleanPages::new(0, 0);
        c2.changed(99, 0, 4, bs);
        c2.evict(&mut map, bs, &mut out);
        assert_eq!(c2.bytes(), 0);
    }
}
