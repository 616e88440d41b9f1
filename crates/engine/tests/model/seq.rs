//! A vector strategy for operation sequences that is generated long (so every
//! run executes a guaranteed minimum number of operations) but shrinks down to
//! a single element. `proptest::collection::vec` cannot do both: it never
//! shrinks below the lower bound of its size range.
//!
//! Shrinking first deletes runs of elements (halves, quarters, ... single
//! ones), then simplifies the remaining elements one by one.

use proptest::strategy::{NewTree, Strategy, ValueTree};
use proptest::test_runner::TestRunner;

#[derive(Debug, Clone)]
pub struct Seq<S> {
    elem: S,
    min_len: usize,
    max_len: usize,
}

/// Sequences of `min_len..=max_len` elements of `elem`, shrinking to one.
pub fn seq<S: Strategy>(elem: S, min_len: usize, max_len: usize) -> Seq<S> {
    assert!(1 <= min_len && min_len <= max_len);
    Seq {
        elem,
        min_len,
        max_len,
    }
}

impl<S: Strategy> Strategy for Seq<S> {
    type Tree = SeqTree<S::Tree>;
    type Value = Vec<S::Value>;

    fn new_tree(&self, runner: &mut TestRunner) -> NewTree<Self> {
        let len = (self.min_len..=self.max_len).new_tree(runner)?.current();
        let elems = (0..len)
            .map(|_| self.elem.new_tree(runner))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(SeqTree {
            included: vec![true; len],
            phase: Phase::Delete {
                start: 0,
                size: (len / 2).max(1),
            },
            undo: None,
            elems,
        })
    }
}

#[derive(Debug, Clone, Copy)]
enum Phase {
    /// Try deleting included elements in `[start, start + size)`.
    Delete { start: usize, size: usize },
    /// Simplify element `i`.
    Shrink(usize),
}

#[derive(Debug, Clone)]
enum Undo {
    Deleted(Vec<usize>),
    Shrunk(usize),
}

#[derive(Debug, Clone)]
pub struct SeqTree<T> {
    elems: Vec<T>,
    included: Vec<bool>,
    phase: Phase,
    undo: Option<Undo>,
}

impl<T: ValueTree> ValueTree for SeqTree<T> {
    type Value = Vec<T::Value>;

    fn current(&self) -> Self::Value {
        self.elems
            .iter()
            .zip(&self.included)
            .filter(|(_, &inc)| inc)
            .map(|(e, _)| e.current())
            .collect()
    }

    fn simplify(&mut self) -> bool {
        let len = self.elems.len();
        loop {
            match self.phase {
                Phase::Delete { size: 0, .. } => self.phase = Phase::Shrink(0),
                Phase::Delete { start, size } if start >= len => {
                    self.phase = Phase::Delete {
                        start: 0,
                        size: size / 2,
                    };
                }
                Phase::Delete { start, size } => {
                    let end = (start + size).min(len);
                    self.phase = Phase::Delete { start: end, size };
                    let gone: Vec<usize> = (start..end).filter(|&i| self.included[i]).collect();
                    let left = self.included.iter().filter(|&&inc| inc).count() - gone.len();
                    if gone.is_empty() || left == 0 {
                        continue;
                    }
                    for &i in &gone {
                        self.included[i] = false;
                    }
                    self.undo = Some(Undo::Deleted(gone));
                    return true;
                }
                Phase::Shrink(i) if i >= len => return false,
                Phase::Shrink(i) => {
                    if self.included[i] && self.elems[i].simplify() {
                        self.undo = Some(Undo::Shrunk(i));
                        return true;
                    }
                    self.phase = Phase::Shrink(i + 1);
                }
            }
        }
    }

    fn complicate(&mut self) -> bool {
        match self.undo.take() {
            None => false,
            Some(Undo::Deleted(gone)) => {
                for i in gone {
                    self.included[i] = true;
                }
                true
            }
            Some(Undo::Shrunk(i)) if self.elems[i].complicate() => {
                self.undo = Some(Undo::Shrunk(i));
                true
            }
            Some(Undo::Shrunk(_)) => false,
        }
    }
}
