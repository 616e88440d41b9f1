//! Backend layer: the file-tree changes replay gathers from the log
//! (`TreeReplay` per tree), and the trees dropped on the way. A `Drop` or
//! `DropRun` (a range of trees: inodes freed) forgets what the log said of
//! those trees so far, and whatever it says of them later starts from an
//! empty tree. A run is kept as a range, not as an entry per tree: the
//! work is the entries it removes, so a hostile run of four billion trees
//! costs what a run of one does.
//!
//! Pure bookkeeping: calls nothing.

use super::TreeReplay;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Range;

#[derive(Default)]
pub(super) struct ReplayTrees {
    trees: HashMap<u64, TreeReplay>,
    /// The keys of `trees`, ordered: a range of them goes at once.
    keys: BTreeSet<u64>,
    /// Dropped trees: disjoint ranges, start to end.
    dropped: BTreeMap<u64, u64>,
}

impl ReplayTrees {
    /// Tree `tree`'s changes, made empty if it was dropped since the
    /// unify (it starts from an empty tree).
    pub(super) fn entry(&mut self, tree: u64) -> &mut TreeReplay {
        let reset = self.is_dropped(tree);
        self.keys.insert(tree);
        self.trees.entry(tree).or_insert_with(|| TreeReplay {
            reset,
            ..TreeReplay::default()
        })
    }

    /// Forget what the log said of the trees in `range` so far.
    pub(super) fn drop_range(&mut self, range: Range<u64>) {
        if range.is_empty() {
            return;
        }
        let gone: Vec<u64> = self.keys.range(range.clone()).copied().collect();
        for t in gone {
            self.keys.remove(&t);
            self.trees.remove(&t);
        }
        // Joined with the ranges it touches or overlaps.
        let (mut start, mut end) = (range.start, range.end);
        let touching: Vec<(u64, u64)> = self
            .dropped
            .range(..=end)
            .rev()
            .take_while(|&(_, &e)| e >= start)
            .map(|(&s, &e)| (s, e))
            .collect();
        for (s, e) in touching {
            self.dropped.remove(&s);
            start = start.min(s);
            end = end.max(e);
        }
        self.dropped.insert(start, end);
    }

    fn is_dropped(&self, tree: u64) -> bool {
        self.dropped
            .range(..=tree)
            .next_back()
            .is_some_and(|(_, &end)| tree < end)
    }

    pub(super) fn clear(&mut self) {
        *self = ReplayTrees::default();
    }

    pub(super) fn into_map(self) -> HashMap<u64, TreeReplay> {
        self.trees
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Against a model that keeps an entry per dropped tree: every tree
        /// with changes has them since its last drop, and starts empty
        /// exactly when a drop of it came before them.
        #[test]
        fn ranges_forget_as_drops_of_each_tree_do(
            ops in proptest::collection::vec((0u64..40, 0u64..6, any::<bool>()), 0..80)
        ) {
            let mut t = ReplayTrees::default();
            // The model: tree -> (reset, ops), as replay kept it per Drop.
            let mut model: HashMap<u64, (bool, Vec<u64>)> = HashMap::new();
            for (n, (tree, len, drop)) in ops.into_iter().enumerate() {
                if drop {
                    t.drop_range(tree..tree + len);
                    for x in tree..tree + len {
                        model.insert(x, (true, Vec::new()));
                    }
                } else {
                    t.entry(tree).ops.push((n as u64, None));
                    model.entry(tree).or_insert((false, Vec::new())).1.push(n as u64);
                }
            }
            let got = t.into_map();
            for (tree, (reset, seps)) in model {
                if seps.is_empty() {
                    // Dropped and untouched since: no entry, or an empty one.
                    prop_assert!(got.get(&tree).is_none_or(|r| r.ops.is_empty()));
                    continue;
                }
                let r = got.get(&tree).expect("an entry for a tree with changes");
                prop_assert_eq!(r.reset, reset, "tree {}", tree);
                let got_seps: Vec<u64> = r.ops.iter().map(|(s, _)| *s).collect();
                prop_assert_eq!(got_seps, seps, "tree {}", tree);
            }
        }
    }

    #[test]
    fn a_huge_run_costs_nothing_per_tree() {
        let mut t = ReplayTrees::default();
        t.entry(20).ops.push((1, None));
        t.drop_range(16..16 + u64::from(u32::MAX));
        t.drop_range(10..17);
        assert!(t.is_dropped(10) && t.is_dropped(16 + u64::from(u32::MAX) - 1));
        assert!(!t.is_dropped(9) && !t.is_dropped(16 + u64::from(u32::MAX)));
        assert_eq!(t.dropped.len(), 1, "touching ranges are one");
        assert!(t.entry(20).reset && t.entry(20).ops.is_empty());
    }
}
