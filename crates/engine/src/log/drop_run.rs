//! Log layer: runs of freed inodes. A run of unlinks frees inodes with
//! consecutive numbers more often than not (files made together, removed
//! together), and each needs a `Drop` in the delta's log: a million
//! unlinks were nine megabytes of log, most of what they wrote. Those of
//! consecutive numbers in a row of the record list are one `DropRun`
//! instead (13 bytes), extended as they come.
//!
//! Calls nothing else (the record types).

use super::record::Record;
use std::ops::Range;

/// Append a `Drop` of `tree` to `records`, joined with the drops at the
/// end of the list whose trees it touches (Drops of distinct trees
/// commute, so one at either end of a run may join it).
pub fn push_drop(records: &mut Vec<Record>, tree: u64) {
    records.push(Record::Drop { tree });
    // The new last record, joined with the one before it while they
    // touch (twice at most: the new tree may close the gap between a
    // run and the record before it).
    while let [.., before, last] = records.as_slice() {
        let Some(run) = joined(before, last) else {
            break;
        };
        records.pop();
        if let Some(before) = records.last_mut() {
            *before = run;
        }
    }
}

/// `a` and `b` as one `DropRun`, if both are drops whose trees touch.
fn joined(a: &Record, b: &Record) -> Option<Record> {
    let (a, b) = (a.dropped()?, b.dropped()?);
    let (first, end) = if a.end == b.start {
        (a.start, b.end)
    } else if b.end == a.start {
        (b.start, a.end)
    } else {
        return None;
    };
    let count = u32::try_from(end.checked_sub(first)?).ok()?;
    Some(Record::DropRun { first, count })
}

impl Record {
    /// The trees a `Drop` or `DropRun` forgets, in number order; `None`
    /// for any other record.
    pub fn dropped(&self) -> Option<Range<u64>> {
        match *self {
            Record::Drop { tree } => Some(tree..tree.saturating_add(1)),
            Record::DropRun { first, count } => Some(first..first.saturating_add(u64::from(count))),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Pushed one by one, any sequence of drops (with other records
        /// between some) forgets exactly the trees pushed, and a record
        /// list never has two neighbouring drops that could have been one.
        #[test]
        fn runs_forget_exactly_the_trees_pushed(
            ops in proptest::collection::vec((16u64..80, any::<bool>()), 0..200)
        ) {
            let mut records = Vec::new();
            let mut pushed = Vec::new();
            for (tree, other) in ops {
                if other {
                    records.push(Record::Orphan { ino: tree });
                } else if !pushed.contains(&tree) {
                    push_drop(&mut records, tree);
                    pushed.push(tree);
                }
            }
            let mut forgotten: Vec<u64> = records.iter().filter_map(Record::dropped).flatten().collect();
            forgotten.sort_unstable();
            pushed.sort_unstable();
            prop_assert_eq!(forgotten, pushed);
            for pair in records.windows(2) {
                if let [a, b] = pair {
                    prop_assert!(joined(a, b).is_none(), "{:?} and {:?} not joined", a, b);
                }
            }
            for r in &records {
                if let Record::DropRun { count, .. } = r {
                    prop_assert!(*count >= 2);
                }
            }
        }
    }

    #[test]
    fn a_run_grows_at_both_ends_and_stops_at_other_records() {
        let mut records = Vec::new();
        for tree in [20, 21, 22, 19] {
            push_drop(&mut records, tree);
        }
        records.push(Record::Orphan { ino: 23 });
        push_drop(&mut records, 23);
        push_drop(&mut records, 30);
        assert_eq!(
            records,
            vec![
                Record::DropRun { first: 19, count: 4 },
                Record::Orphan { ino: 23 },
                Record::Drop { tree: 23 },
                Record::Drop { tree: 30 },
            ]
        );
    }
}
