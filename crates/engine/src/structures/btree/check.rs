//! Debug check of invariant T1 (tree.rs) at one branch that just changed:
//! its separators rise strictly, and each child branch held in memory
//! starts with the separator of its entry. A leaf stores no separator (its
//! parent's entry is its separator), so T1 is checked entry by entry, each
//! against the first entry of the branch below it. Looks only at nodes
//! already in memory (never loads one) and calls nothing else; in release
//! builds it does nothing.

use super::node::{Branch, Node, Slot};
use super::tree::Splits;

/// T1 at `b`, in O(its children): the tree code calls it after each change
/// of a branch's entries or of a child's separator.
pub(super) fn branch(b: &Branch) {
    if !cfg!(debug_assertions) {
        return;
    }
    for pair in b.children.windows(2) {
        if let [l, r] = pair {
            debug_assert!(
                l.sep < r.sep,
                "T1: branch {} (level {}) has separator {} before {}",
                b.addr,
                b.level,
                l.sep,
                r.sep
            );
        }
    }
    for c in &b.children {
        if let Slot::Mem(n) = &c.slot {
            if let Node::Branch(cb) = n.as_ref() {
                let first = cb.children.first().map(|f| f.sep);
                debug_assert!(
                    first == Some(c.sep),
                    "T1: branch {} (level {}) enters a child branch at separator {} whose first \
                     separator is {first:?}",
                    b.addr,
                    b.level,
                    c.sep
                );
            }
        }
    }
}

/// T1 at `b` after a split, and at each branch split off it (their parent
/// checks the separators it enters them at).
pub(super) fn split(b: &Branch, pieces: &Splits) {
    branch(b);
    for (_, n) in pieces {
        if let Node::Branch(p) = n {
            branch(p);
        }
    }
}
