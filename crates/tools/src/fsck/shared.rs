//! Shared extents for fsck: the live files' data references counted per
//! block, against the shared-extent table (the snapshot table's runs from
//! `SHARED_KEY`, replayed). Every block the files map two or more times
//! must be a run of the table with exactly that count, and every run of
//! the table must be mapped that many times; a mismatch is repaired by
//! setting the table's count to the one the files show.
//!
//! Calls nothing in the engine but the table's iterator.

use super::refs::{Owner, Ref};
use super::{Findings, Fix};
use tux3::backend::alloc::SharedExtents;

/// Ranges (start, end, references) where the files map a block two or
/// more times, merged where the count is the same.
fn counted(refs: &[Ref]) -> Vec<(u64, u64, u32)> {
    let data = refs.iter().filter(|r| matches!(r.owner, Owner::Data { .. }));
    SharedExtents::counted(data.map(|r| (r.start, r.count)))
}

/// Ranges of the table as (start, end, references).
fn table(t: &SharedExtents) -> Vec<(u64, u64, u32)> {
    let mut out: Vec<(u64, u64, u32)> = Vec::new();
    for (s, r) in t.iter() {
        match out.last_mut() {
            Some(l) if l.1 == s && l.2 == r.refs => l.1 = s + r.count,
            _ => out.push((s, s + r.count, r.refs)),
        }
    }
    out
}

/// The count at each stretch of `a` and `b` together: (start, end, in a, in b).
fn side_by_side(a: &[(u64, u64, u32)], b: &[(u64, u64, u32)]) -> Vec<(u64, u64, u32, u32)> {
    let mut cuts: Vec<u64> = a.iter().chain(b).flat_map(|r| [r.0, r.1]).collect();
    cuts.sort_unstable();
    cuts.dedup();
    let at = |v: &[(u64, u64, u32)], x: u64| -> u32 {
        let i = v.partition_point(|r| r.1 <= x);
        v.get(i).filter(|r| r.0 <= x).map_or(0, |r| r.2)
    };
    let mut out: Vec<(u64, u64, u32, u32)> = Vec::new();
    for w in cuts.windows(2) {
        let (ca, cb) = (at(a, w[0]), at(b, w[0]));
        if ca == cb {
            continue;
        }
        match out.last_mut() {
            Some(l) if l.1 == w[0] && l.2 == ca && l.3 == cb => l.1 = w[1],
            _ => out.push((w[0], w[1], ca, cb)),
        }
    }
    out
}

/// Check the table against the files' references (`complete`: every file
/// was read, so a count below the table's is real). Returns the ranges
/// the table counts: data references may overlap there.
pub(super) fn check(refs: &[Ref], t: &SharedExtents, complete: bool, f: &mut Findings) -> Vec<(u64, u64)> {
    let files = counted(refs);
    let runs = table(t);
    for (s, e, by_files, in_table) in side_by_side(&files, &runs) {
        if by_files < in_table && !complete {
            continue;
        }
        let what = if in_table == 0 {
            "not in the shared-extent table".to_string()
        } else {
            format!("the shared-extent table counts {in_table} references")
        };
        let refs = if by_files >= 2 { by_files } else { 0 };
        f.fixable(
            "shared count",
            Fix::SharedRefs {
                start: s,
                count: e - s,
                refs,
            },
            format!("blocks {s}-{}: {}, {what}", e - 1, mapped(by_files)),
        );
    }
    let mut covered: Vec<(u64, u64)> = Vec::new();
    for r in runs {
        match covered.last_mut() {
            Some(l) if l.1 == r.0 => l.1 = r.1,
            _ => covered.push((r.0, r.1)),
        }
    }
    covered
}

/// How many times files map a run, in words.
fn mapped(by_files: u32) -> String {
    match by_files {
        0 => "mapped by no file".to_string(),
        1 => "mapped once, by one file".to_string(),
        n => format!("mapped {n} times by files"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(start: u64, count: u64) -> Ref {
        Ref {
            start,
            count,
            owner: Owner::Data { ino: 16, lblock: 0 },
        }
    }

    #[test]
    fn the_count_reads_as_words() {
        assert_eq!(mapped(0), "mapped by no file");
        assert_eq!(mapped(1), "mapped once, by one file");
        assert_eq!(mapped(3), "mapped 3 times by files");
    }

    #[test]
    fn counts_overlapping_data_per_block() {
        let refs = [data(10, 10), data(15, 10), data(15, 2), data(40, 1)];
        assert_eq!(counted(&refs), vec![(15, 17, 3), (17, 20, 2)]);
    }

    #[test]
    fn a_table_that_agrees_gives_nothing_and_one_that_does_not_is_named() {
        let refs = [data(10, 10), data(10, 10)];
        let mut t = SharedExtents::default();
        t.add_ref(10, 10);
        let mut f = Findings::default();
        assert_eq!(check(&refs, &t, true, &mut f), vec![(10, 20)]);
        assert!(f.problems.is_empty(), "{:?}", f.problems);
        t.add_ref(12, 2);
        let mut f = Findings::default();
        check(&refs, &t, true, &mut f);
        assert_eq!(f.problems.len(), 1, "{:?}", f.problems);
        assert!(
            f.problems[0].contains("blocks 12-13: mapped 2 times"),
            "{}",
            f.problems[0]
        );
        let mut f = Findings::default();
        check(&[data(10, 10)], &SharedExtents::default(), true, &mut f);
        assert!(f.problems.is_empty());
    }
}
