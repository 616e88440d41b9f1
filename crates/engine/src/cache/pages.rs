//! Cache layer: data pages of one file — block-sized buffers keyed by logical
//! block, each tagged with the delta that last changed it. A page is *dirty*
//! (belongs to the open delta) or under *writeback* (frozen into a commit
//! whose I/O is in flight; it stays readable here until the commit is
//! durable). Writing a page under writeback forks it: the commit keeps its
//! `Arc`, the frontend gets a copy (DESIGN.md "block forking").
//!
//! Once the commit is durable, the pages it wrote stay on as *clean* pages
//! (the block as the device holds it) until the volume evicts them
//! (`cache/clean.rs`), so a partial write of such a block — an append to
//! a log file — need not read it back from the device.
//!
//! A page that went out in an fsync commit and is then dropped or moved
//! (truncate, a punched hole, a collapse) marks the file: replaying that
//! fsync commit would bring the page back, so until the next commit
//! freezes the file's pages only a full commit makes it durable.
//!
//! Calls nothing else in the crate.

use std::collections::BTreeMap;
use std::sync::Arc;

/// One block of file data, shared between the frontend and a commit.
#[derive(Clone)]
pub struct Page {
    pub data: Arc<Vec<u8>>,
    /// Delta in which the page was last changed.
    pub delta: u64,
    /// Frozen into an in-flight commit and not changed since.
    pub writeback: bool,
    /// Its current content is in an fsync commit of the open delta.
    pub logged: bool,
    /// The CRC32C of its current content, when the write that finished it
    /// took it while the bytes were hot (`PageMap::set_sum`); any change
    /// through [`PageMap::page_mut`] clears it.
    pub sum: Option<u32>,
}

/// Pages frozen into a commit: (logical block, content), in order.
pub type Frozen = Vec<(u64, Arc<Vec<u8>>)>;

/// The cached pages of one file.
#[derive(Default)]
pub struct PageMap {
    pages: BTreeMap<u64, Page>,
    dirty: usize,
    /// Blocks as a full commit of this mount wrote them, not changed
    /// since: never one that `pages` also holds.
    clean: BTreeMap<u64, Arc<Vec<u8>>>,
    /// A page went out in an fsync commit since the last commit froze the
    /// file's pages.
    fsynced: bool,
    /// Pages were dropped or moved since then while `fsynced`: a replay of
    /// those fsync commits would bring their old content back where the
    /// file no longer has it, so only a full commit may make the file
    /// durable.
    dropped_fsynced: bool,
}

impl PageMap {
    /// No dirty page.
    pub fn is_empty(&self) -> bool {
        self.dirty == 0
    }
    /// Number of dirty pages.
    pub fn len(&self) -> usize {
        self.dirty
    }
    /// The page at `lblock`, dirty or under writeback.
    pub fn get(&self, lblock: u64) -> Option<&Page> {
        self.pages.get(&lblock)
    }
    /// The content of block `lblock` if cached: its dirty or writeback
    /// page, else its clean page.
    pub fn content(&self, lblock: u64) -> Option<&Arc<Vec<u8>>> {
        self.pages
            .get(&lblock)
            .map(|p| &p.data)
            .or_else(|| self.clean.get(&lblock))
    }
    /// No page dirty or under writeback: every cached block is on the
    /// device as the cache holds it.
    pub fn all_written(&self) -> bool {
        self.pages.is_empty()
    }
    /// Keep `data` as the clean page of `lblock`, the block as the device
    /// holds it, unless a page of it is cached already.
    pub fn keep_clean(&mut self, lblock: u64, data: Arc<Vec<u8>>) {
        if !self.pages.contains_key(&lblock) {
            self.clean.entry(lblock).or_insert(data);
        }
    }
    /// Number of clean pages.
    pub fn clean_len(&self) -> usize {
        self.clean.len()
    }
    /// Give up every clean page (eviction); returns them, to be freed.
    pub fn take_clean(&mut self) -> Vec<Arc<Vec<u8>>> {
        std::mem::take(&mut self.clean).into_values().collect()
    }

    /// Whether the page at `lblock` is dirty.
    pub fn is_dirty(&self, lblock: u64) -> bool {
        self.pages.get(&lblock).is_some_and(|p| !p.writeback)
    }

    /// The page at `lblock` for writing in `delta`, created from `fill` if
    /// absent. A page still shared with a commit is forked, not waited for.
    pub fn page_mut(&mut self, lblock: u64, delta: u64, fill: impl FnOnce() -> Vec<u8>) -> &mut Vec<u8> {
        let mut created = false;
        // A clean copy would go stale; `fill` has read what it needs.
        self.clean.remove(&lblock);
        let page = self.pages.entry(lblock).or_insert_with(|| {
            created = true;
            Page {
                data: Arc::new(fill()),
                delta,
                writeback: false,
                logged: false,
                sum: None,
            }
        });
        if created || page.writeback {
            self.dirty += 1;
        }
        page.writeback = false;
        page.logged = false;
        page.sum = None;
        page.delta = delta;
        let before = Arc::as_ptr(&page.data);
        let shared = Arc::strong_count(&page.data) > 1;
        let data = Arc::make_mut(&mut page.data);
        // P2: a page a commit still holds is forked, never written through.
        debug_assert!(
            !shared || !std::ptr::eq(before, &*data),
            "P2: wrote a page under commit"
        );
        data
    }

    /// Record that the page's current content went out in an fsync commit.
    pub fn mark_logged(&mut self, lblock: u64) {
        if let Some(p) = self.pages.get_mut(&lblock) {
            p.logged = true;
            self.fsynced = true;
        }
    }

    /// Pages of this file are in fsync commits the log still replays (a
    /// mount found them there): as after [`PageMap::mark_logged`].
    pub fn note_fsynced(&mut self) {
        self.fsynced = true;
    }

    /// Pages went away or moved since an fsync commit logged pages of the
    /// file (see `dropped_fsynced`): its next fsync needs a full commit.
    pub fn dropped_fsynced(&self) -> bool {
        self.dropped_fsynced
    }

    /// Whether a dirty page (not under writeback) is not yet in an fsync
    /// commit.
    pub fn any_unlogged(&self) -> bool {
        self.pages.values().any(|p| !p.writeback && !p.logged)
    }

    /// Pages whose current content no fsync commit has logged, in logical
    /// order: the dirty ones ([`PageMap::any_unlogged`]) and those frozen into
    /// the commit in flight and not changed since.
    pub fn not_logged(&self) -> Vec<u64> {
        self.pages
            .iter()
            .filter(|(_, p)| !p.logged)
            .map(|(k, _)| *k)
            .collect()
    }

    /// First cached page at or after `lblock`.
    pub fn next_from(&self, lblock: u64) -> Option<u64> {
        self.pages.range(lblock..).next().map(|(k, _)| *k)
    }

    /// First cached page after `lblock`.
    pub fn next_after(&self, lblock: u64) -> Option<u64> {
        self.pages.range(lblock + 1..).next().map(|(k, _)| *k)
    }

    /// Drop pages at or beyond `lblock` (truncate), clean ones too.
    /// Returns how many of them were dirty.
    pub fn truncate(&mut self, lblock: u64) -> usize {
        self.clean.split_off(&lblock);
        let gone = self.pages.split_off(&lblock);
        self.dropped_fsynced |= self.fsynced && !gone.is_empty();
        let n = gone.values().filter(|p| !p.writeback).count();
        self.dirty -= n;
        n
    }

    /// Drop pages of blocks `from..to` (a punched hole), clean ones too.
    /// Returns how many of them were dirty.
    pub fn drop_range(&mut self, from: u64, to: u64) -> usize {
        if from >= to {
            return 0;
        }
        let mut after = self.pages.split_off(&from);
        let mut kept = after.split_off(&to);
        self.dropped_fsynced |= self.fsynced && !after.is_empty();
        let n = after.values().filter(|p| !p.writeback).count();
        self.pages.append(&mut kept);
        let mut clean_after = self.clean.split_off(&from);
        let mut clean_kept = clean_after.split_off(&to);
        self.clean.append(&mut clean_kept);
        self.dirty -= n;
        n
    }

    /// Renumber every page at or after `from` by `by` blocks, down
    /// (collapse: the blocks `from - by..from` hold no page) or up
    /// (insert). A moved page is no longer in an fsync commit of its new
    /// place.
    pub fn shift_from(&mut self, from: u64, by: u64, down: bool) {
        let to = |k: u64| if down { k - by } else { k + by };
        let moved = self.pages.split_off(&from);
        self.dropped_fsynced |= self.fsynced && !moved.is_empty();
        self.pages.extend(moved.into_iter().map(|(k, mut p)| {
            p.logged = false;
            (to(k), p)
        }));
        let moved = self.clean.split_off(&from);
        self.clean.extend(moved.into_iter().map(|(k, d)| (to(k), d)));
    }

    /// The checksum of the dirty page at `lblock` as it is now, taken by
    /// the write that just changed it (the next change clears it).
    pub fn set_sum(&mut self, lblock: u64, sum: u32) {
        if let Some(p) = self.pages.get_mut(&lblock).filter(|p| !p.writeback) {
            p.sum = Some(sum);
        }
    }

    /// Freeze every dirty page into a commit: returns them in logical order
    /// and keeps them here, under writeback, until [`PageMap::end_writeback`].
    pub fn start_writeback(&mut self) -> Frozen {
        self.start_writeback_summed().0
    }

    /// [`PageMap::start_writeback`], with each page's checksum where a
    /// write took it.
    pub fn start_writeback_summed(&mut self) -> (Frozen, Vec<Option<u32>>) {
        // The commit holds every change the fsync commits before it logged.
        (self.fsynced, self.dropped_fsynced) = (false, false);
        let mut out = Vec::with_capacity(self.dirty);
        let mut sums = Vec::with_capacity(self.dirty);
        for (k, p) in self.pages.iter_mut() {
            if !p.writeback {
                p.writeback = true;
                out.push((*k, p.data.clone()));
                sums.push(p.sum);
            }
        }
        self.dirty = 0;
        (out, sums)
    }

    /// The commit is durable: the pages it wrote that were not changed
    /// again meanwhile become clean (the device now holds them) — unless
    /// there are more than `keep_max` of them (a stream, whose pages would
    /// only push other files' clean pages out): those go to `dropped`, for
    /// the caller to free outside its locks.
    pub fn end_writeback(&mut self, keep_max: usize, dropped: &mut Vec<Arc<Vec<u8>>>) {
        // The map is taken apart and the pages still dirty built into a new
        // one in bulk: a commit of thousands of pages (a stream, a shrink's
        // batch) would otherwise pay a rebalancing per page removed, under
        // the delta guard that every other operation waits for.
        let mut written = Vec::with_capacity(self.pages.len().saturating_sub(self.dirty));
        let mut kept = Vec::with_capacity(self.dirty);
        for (k, p) in std::mem::take(&mut self.pages) {
            if p.writeback {
                written.push((k, p));
            } else {
                kept.push((k, p));
            }
        }
        self.pages = kept.into_iter().collect();
        if written.len() > keep_max {
            dropped.extend(written.into_iter().map(|(_, p)| p.data));
            return;
        }
        for (k, p) in written {
            self.clean.insert(k, p.data);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writing_a_page_under_writeback_forks_it() {
        let mut m = PageMap::default();
        m.page_mut(3, 1, || vec![0; 8])[0] = 7;
        let frozen = m.start_writeback();
        assert_eq!(m.len(), 0);
        assert_eq!(m.get(3).unwrap().data[0], 7, "still readable during writeback");
        m.page_mut(3, 2, Vec::new)[0] = 9;
        assert_eq!(frozen[0].1[0], 7, "the commit's version is unchanged");
        assert_eq!(m.len(), 1);
        m.end_writeback(usize::MAX, &mut Vec::new());
        assert_eq!(m.get(3).unwrap().data[0], 9, "the re-dirtied page stays");
        assert!(m.is_dirty(3));
    }

    #[test]
    fn a_commit_of_more_than_keep_max_pages_keeps_none() {
        let mut m = PageMap::default();
        for b in 0..5 {
            m.page_mut(b, 1, || vec![b as u8; 8]);
        }
        m.start_writeback();
        m.page_mut(4, 2, Vec::new)[0] = 9;
        let mut dropped = Vec::new();
        m.end_writeback(3, &mut dropped);
        assert_eq!(dropped.len(), 4, "the four written pages not changed since");
        assert_eq!(m.clean_len(), 0);
        assert!(m.content(0).is_none(), "not cached: read from the device");
        assert_eq!(m.content(4).unwrap()[0], 9, "the re-dirtied page stays");
        m.start_writeback();
        m.end_writeback(3, &mut dropped);
        assert_eq!(
            (m.clean_len(), dropped.len()),
            (1, 4),
            "a small commit keeps its pages"
        );
    }

    #[test]
    fn dropped_and_shifted_ranges_keep_the_dirty_count() {
        let mut m = PageMap::default();
        for b in 0..6 {
            m.page_mut(b, 1, || vec![b as u8; 8]);
        }
        m.start_writeback();
        m.page_mut(2, 2, || vec![2; 8]);
        m.page_mut(4, 2, || vec![4; 8]);
        m.end_writeback(usize::MAX, &mut Vec::new());
        m.page_mut(5, 3, || vec![5; 8]);
        assert_eq!((m.len(), m.clean_len()), (3, 3));
        assert_eq!(m.drop_range(1, 3), 1, "page 2 was dirty, page 1 clean");
        assert!(m.content(1).is_none() && m.content(2).is_none());
        m.shift_from(4, 2, true);
        assert_eq!(m.content(2).unwrap()[0], 4);
        assert_eq!(m.content(3).unwrap()[0], 5);
        assert!(m.content(4).is_none() && m.content(5).is_none());
        m.shift_from(3, 10, false);
        assert_eq!(m.content(13).unwrap()[0], 5);
        assert_eq!(m.content(0).unwrap()[0], 0, "below the shift: unmoved");
        assert_eq!((m.len(), m.clean_len()), (2, 2));
        assert!(m.is_dirty(13) && m.is_dirty(2));
        assert!(!m.dropped_fsynced(), "nothing went out in an fsync commit");
        m.mark_logged(13);
        m.shift_from(13, 1, true);
        assert!(m.dropped_fsynced(), "a logged page moved");
        m.start_writeback();
        assert!(!m.dropped_fsynced(), "the commit holds the move");
    }

    #[test]
    fn written_pages_become_clean_until_changed_or_truncated() {
        let mut m = PageMap::default();
        m.page_mut(1, 1, || vec![1; 8]);
        m.page_mut(2, 1, || vec![2; 8]);
        m.page_mut(3, 1, || vec![3; 8]);
        m.start_writeback();
        m.page_mut(2, 2, Vec::new)[0] = 5;
        m.end_writeback(usize::MAX, &mut Vec::new());
        assert!(m.get(1).is_none(), "no longer dirty nor under writeback");
        assert_eq!(m.content(1).unwrap()[0], 1, "but kept clean");
        assert_eq!(m.clean_len(), 2);
        assert_eq!(m.len(), 1);
        assert_eq!(m.content(2).unwrap()[0], 5, "the re-dirtied page stays");
        m.page_mut(1, 2, || vec![9; 8])[1] = 6;
        assert_eq!(m.clean_len(), 1, "dirtied again: no clean copy left");
        assert_eq!(*m.content(1).unwrap().as_ref(), [9, 6, 9, 9, 9, 9, 9, 9]);
        m.truncate(3);
        assert!(m.content(3).is_none(), "truncate drops clean pages");
        m.truncate(0);
        assert_eq!(m.take_clean().len(), 0);
        assert_eq!((m.len(), m.clean_len()), (0, 0));
    }
}
