//! Frontend layer: backpressure on dirty file data (P5). What a write
//! must wait for so that the open delta's dirty data plus what the commit
//! in flight holds stays within `dirty_limit` ([`Pressure`]); the lower
//! bound a stream (a heavy writer) works within, so that light writers
//! beside it keep going; and when a commit thread should take the open
//! delta early. docs/ARCHITECTURE.md, *Backpressure*, gives the rules.
//!
//! Calls the cache (a file's pages) and the pipeline (whether a commit is
//! in flight) through `Volume`.

use super::Volume;
use crate::cache::PageMap;
use crate::types::Ino;
use std::sync::atomic::Ordering::Relaxed;

/// Answer of [`Volume::write_pressure`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pressure {
    /// The write fits within `dirty_limit`.
    Clear,
    /// It fits once the commit in flight is durable and lets go of its data.
    WaitCommit,
    /// Nothing is in flight: the open delta must be committed first.
    Commit,
}

impl Volume {
    /// What a write of `len` bytes at `offset` of `ino` must wait for so
    /// that dirty file data — the open delta's plus what the commit in
    /// flight holds — stays within `dirty_limit`.
    pub fn write_pressure(&mut self, ino: Ino, offset: u64, len: usize) -> Pressure {
        // A volume a failed commit left read-only refuses the write itself.
        if self.failed {
            return Pressure::Clear;
        }
        let over = {
            let i = self.cache.lock(ino);
            self.over_dirty_limit(i.as_deref().map(|i| &i.pages), offset, len)
        };
        if !over {
            Pressure::Clear
        } else if self.commit_in_flight() {
            Pressure::WaitCommit
        } else if self.delta_dirty() {
            // Pages replayed from fsync commits are dirty without a change
            // since open; the write about to happen is one, so the freeze
            // must not skip them.
            *self.changed.get_mut() = true;
            Pressure::Commit
        } else {
            Pressure::Clear // nothing a commit could release
        }
    }

    /// Whether such a write would wait now ([`Volume::write_pressure`] is
    /// not `Clear`), without changing anything: a request server hands
    /// such a write to a thread that may block.
    pub fn write_would_wait(&self, ino: Ino, offset: u64, len: usize) -> bool {
        let i = self.cache.lock(ino);
        self.over_dirty_limit(i.as_deref().map(|i| &i.pages), offset, len)
            && (self.commit_in_flight() || self.delta_dirty())
    }

    /// The bound a stream works within: the limit, or
    /// [`OpenOptions::stream_limit`] when that is smaller.
    fn stream_bound(&self) -> u64 {
        self.opts.dirty_limit.min(self.opts.stream_limit)
    }

    /// A file holding `pages` is a stream (a heavy writer): it holds an
    /// eighth of the stream bound or more in memory.
    pub(super) fn is_stream(&self, pages: Option<&PageMap>) -> bool {
        let held = pages.map_or(0, |p| p.len() as u64);
        held.saturating_mul(self.bs()) >= self.stream_bound() / 8
    }

    /// The write's cost — the pages it would newly dirty in a file holding
    /// `pages` — would take the held dirty data past the limit. A write on
    /// a volume holding no dirty data always goes (even one larger than the
    /// limit). A stream stops at seven eighths of the stream bound instead.
    pub(super) fn over_dirty_limit(&self, pages: Option<&PageMap>, offset: u64, len: usize) -> bool {
        let held = self.dirty_bytes.load(Relaxed) + self.in_flight_bytes;
        if held == 0 || len == 0 {
            return false;
        }
        !self.within_limit(held, pages, offset, len)
    }

    /// Whether `held` bytes and the cost of the write stay within the limit
    /// (a stream's: seven eighths of the stream bound).
    fn within_limit(&self, held: u64, pages: Option<&PageMap>, offset: u64, len: usize) -> bool {
        let bs = self.bs();
        let Some(end) = offset.checked_add(len as u64) else {
            return true; // the write fails (EFBIG)
        };
        if len == 0 {
            return held <= self.opts.dirty_limit;
        }
        // A stream stops an eighth short of its bound, so that light
        // writers (a log appended and fsynced next to it) keep going while
        // it waits for its commit. Their bound stays the limit.
        let stream = self.stream_bound();
        // An inode not in cache holds no pages: every block is new.
        let new_blocks = (offset / bs..=(end - 1) / bs)
            .filter(|b| !pages.is_some_and(|p| p.is_dirty(*b)))
            .count() as u64;
        let cost = new_blocks.saturating_mul(bs);
        let limit = if self.is_stream(pages) {
            stream - stream / 8
        } else {
            self.opts.dirty_limit
        };
        held.saturating_add(cost) <= limit
    }

    /// Whether a write of `len` bytes at `offset` of `ino` fits within the
    /// dirty limit with what is held now (P5; for its assertion). Unlike
    /// [`Volume::write_pressure`], a write on a volume holding nothing that
    /// is larger than the limit does not fit: it goes through alone.
    pub fn write_fits(&self, ino: Ino, offset: u64, len: usize) -> bool {
        let held = self.held_bytes();
        let i = self.cache.lock(ino);
        self.within_limit(held, i.as_deref().map(|i| &i.pages), offset, len)
    }

    /// The bound P5 keeps `held_bytes` within (`OpenOptions::dirty_limit`).
    pub fn dirty_limit(&self) -> u64 {
        self.opts.dirty_limit
    }

    /// Dirty file data held now: the open delta's and the commit in
    /// flight's (what P5 bounds).
    pub fn held_bytes(&self) -> u64 {
        self.dirty_bytes.load(Relaxed) + self.in_flight_bytes
    }

    /// A commit job (full or fsync) is frozen or writing.
    pub fn commit_in_flight(&self) -> bool {
        self.pipeline.delta_in_flight() || self.pipeline.fsync_in_flight()
    }

    /// After a write to `ino`: no commit is in flight and half the limit
    /// is dirty — half the stream bound, if `ino` is a stream — so a
    /// commit thread should take the open delta now, and the next one
    /// fills meanwhile.
    pub fn wants_commit(&self, ino: Ino) -> bool {
        let stream = self.is_stream(self.cache.lock(ino).as_deref().map(|i| &i.pages));
        self.wants_commit_of(stream)
    }

    /// [`Volume::wants_commit`] after a write to a file that is (or is
    /// not) a stream.
    pub(super) fn wants_commit_of(&self, stream: bool) -> bool {
        let bound = if stream {
            self.stream_bound()
        } else {
            self.opts.dirty_limit
        };
        self.may_commit_early() && self.dirty_bytes.load(Relaxed) >= bound / 2
    }

    /// Whether the open delta holds a change the periodic commit writes:
    /// anything but access times alone.
    pub fn changed_eagerly(&self) -> bool {
        self.changed.load(Relaxed)
    }

    /// Whether a commit thread woken by [`Volume::wants_commit`] still has
    /// a delta to take: none in flight, and at least half the stream bound
    /// dirty (less means a commit took the delta since the wake-up).
    pub fn may_commit_early(&self) -> bool {
        let dirty = self.dirty_bytes.load(Relaxed);
        !self.pipeline.delta_in_flight() && dirty > 0 && dirty >= self.stream_bound() / 2
    }
}
