//! Dirty data pages of one file: block-sized buffers keyed by logical block,
//! each tagged with the delta that last changed it.

use std::collections::BTreeMap;
use std::sync::Arc;

/// One block of file data, shared between the frontend and a commit.
#[derive(Clone)]
pub struct Page {
    pub data: Arc<Vec<u8>>,
    /// Delta in which the page was last changed.
    pub delta: u64,
}

/// The dirty pages of one file.
#[derive(Default)]
pub struct PageMap {
    pages: BTreeMap<u64, Page>,
}

impl PageMap {
    pub fn is_empty(&self) -> bool {
        self.pages.is_empty()
    }
    pub fn len(&self) -> usize {
        self.pages.len()
    }
    pub fn get(&self, lblock: u64) -> Option<&Page> {
        self.pages.get(&lblock)
    }

    /// The page at `lblock` for writing in `delta`, created from `fill` if
    /// absent. A page still shared with a commit is forked, not waited for.
    pub fn page_mut(&mut self, lblock: u64, delta: u64, fill: impl FnOnce() -> Vec<u8>) -> &mut Vec<u8> {
        let page = self.pages.entry(lblock).or_insert_with(|| Page {
            data: Arc::new(fill()),
            delta,
        });
        page.delta = delta;
        Arc::make_mut(&mut page.data)
    }

    /// First dirty page after `lblock`.
    pub fn next_after(&self, lblock: u64) -> Option<u64> {
        self.pages.range(lblock + 1..).next().map(|(k, _)| *k)
    }

    /// Drop pages at or beyond `lblock` (truncate). Returns how many.
    pub fn truncate(&mut self, lblock: u64) -> usize {
        let gone = self.pages.split_off(&lblock);
        gone.len()
    }

    /// Take every dirty page for a commit, in logical order.
    pub fn take(&mut self) -> Vec<(u64, Page)> {
        std::mem::take(&mut self.pages).into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writing_a_page_held_by_a_commit_forks_it() {
        let mut m = PageMap::default();
        m.page_mut(3, 1, || vec![0; 8])[0] = 7;
        let held = m.get(3).unwrap().data.clone(); // a commit's reference
        m.page_mut(3, 2, Vec::new)[0] = 9;
        assert_eq!(held[0], 7, "the commit's version is unchanged");
        assert_eq!(m.get(3).unwrap().data[0], 9);
        assert_eq!(m.get(3).unwrap().delta, 2);
    }
}
