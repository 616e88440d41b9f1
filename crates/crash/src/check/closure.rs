//! The relaxation of the ordering promise for fast fsyncs
//! ([`Ordering::FsyncMayLead`](super::Ordering::FsyncMayLead)): a
//! recovered state is accepted if it is an allowed state with the name
//! closures of the fast fsyncs after it applied in order (`check.rs`
//! describes the closure). Directories may differ in size.
//!
//! Pure comparison of namespace snapshots: calls the recording and the
//! snapshots (`record.rs`, `snapshot.rs`).

use super::Window;
use crate::record::Recording;
use crate::snapshot::{Node, Snapshot};
use std::collections::{BTreeSet, HashSet};
use tux3::types::{FileType, Ino};

/// Under a fast fsync: `snap` is state `j` with the name closures of the
/// first `n` fast fsyncs after `j` (up to `hi`) applied in order, where
/// `n` takes in every one that returned before the crash epoch (the log is
/// a chain: no fsync commit lands without the ones before it). Directories
/// may differ in size.
pub(super) fn leads_by_fsync(snap: &Snapshot, rec: &Recording, j: usize, w: Window) -> bool {
    let fast: Vec<usize> = (j + 1..=w.hi)
        .filter(|&k| rec.ops[k - 1].is_fast_fsync())
        .collect();
    if fast.is_empty() {
        return false;
    }
    // Durability: each fast fsync that returned before the epoch started.
    let must = fast
        .iter()
        .rposition(|&k| rec.ops[k - 1].end <= w.start)
        .map_or(0, |i| i + 1);
    let mut state = rec.snaps[j].clone();
    for (n, &k) in fast.iter().enumerate() {
        let at = &rec.snaps[k];
        let (paths, inos) = name_closure(&state, at, &rec.ops[k - 1].fsynced);
        apply_closure(&mut state, at, &paths, &inos);
        if n + 1 >= must && same_but_dir_sizes(snap, &state) {
            return true;
        }
    }
    false
}

/// The name closure of a fast fsync of `fsynced` that left snapshot `at`,
/// against the state `before` it. A path *changed* if its inode differs
/// between `before` and `at` (present in one only, or another inode).
/// Starting from the fsynced inodes (and, for a fsynced directory, the
/// changed paths directly in it), until nothing changes: a changed path
/// joins if either of its inodes is in the set, adding both; the changed
/// parent of a path in the closure joins (a new directory goes with what
/// it holds); and a directory of the closure (holding one of its paths,
/// new in it, or fsynced) whose link count changed brings its changed
/// paths that name directories. Returns
/// the paths and the inodes.
pub(super) fn name_closure(
    before: &Snapshot,
    at: &Snapshot,
    fsynced: &[Ino],
) -> (BTreeSet<Vec<u8>>, HashSet<Ino>) {
    let ino = |s: &Snapshot, p: &[u8]| s.entries.get(p).map(|n| n.ino);
    let changed = |p: &[u8]| ino(before, p) != ino(at, p);
    let mut inos: HashSet<Ino> = fsynced.iter().copied().collect();
    let mut paths: BTreeSet<Vec<u8>> = BTreeSet::new();
    let mut open: Vec<&Vec<u8>> = before
        .entries
        .keys()
        .chain(at.entries.keys().filter(|p| !before.entries.contains_key(*p)))
        .filter(|p| changed(p))
        .collect();
    // A directory whose link count changed by `at` (a new one: if it has
    // subdirectories).
    let nlink_changed = |d: &[u8]| match (before.entries.get(d), at.entries.get(d)) {
        (Some(a), Some(b)) => a.ino != b.ino || a.nlink != b.nlink,
        (None, Some(b)) => b.nlink != 2,
        _ => false,
    };
    let is_dir = |s: &Snapshot, p: &[u8]| s.entries.get(p).is_some_and(|n| n.kind == FileType::Directory);
    loop {
        let found = paths.len();
        let parents: BTreeSet<Vec<u8>> = paths.iter().map(|p| parent(p).to_vec()).collect();
        // The closure's directories: those holding its paths, its new
        // directories, the fsynced ones.
        let dirs: BTreeSet<Vec<u8>> = parents
            .iter()
            .chain(paths.iter().filter(|p| is_dir(at, p)))
            .cloned()
            .chain(
                at.entries
                    .iter()
                    .filter(|(_, n)| n.kind == FileType::Directory && fsynced.contains(&n.ino))
                    .map(|(p, _)| p.clone()),
            )
            .collect();
        open.retain(|&p| {
            let (a, b) = (ino(before, p), ino(at, p));
            let joins = a.iter().chain(&b).any(|i| inos.contains(i))
                || (p.len() > 1 && ino(at, parent(p)).is_some_and(|d| fsynced.contains(&d)))
                || parents.contains(p.as_slice())
                || (p.len() > 1
                    && dirs.contains(parent(p))
                    && nlink_changed(parent(p))
                    && (is_dir(before, p) || is_dir(at, p)));
            if !joins {
                return true;
            }
            paths.insert(p.clone());
            inos.extend(a.into_iter().chain(b));
            false
        });
        if paths.len() == found {
            return (paths, inos);
        }
    }
}

/// The directory holding path `p` (`/` for a name in the root).
fn parent(p: &[u8]) -> &[u8] {
    match p.iter().rposition(|&c| c == b'/') {
        Some(0) | None => b"/",
        Some(cut) => &p[..cut],
    }
}

/// Make `state` durable as far as a closure of snapshot `at` goes: its
/// paths take their state at `at` (present or absent), and every node of
/// one of its inodes, and the directory holding each of its paths (whose
/// record it logs), its state at `at`.
fn apply_closure(state: &mut Snapshot, at: &Snapshot, paths: &BTreeSet<Vec<u8>>, inos: &HashSet<Ino>) {
    for p in paths {
        match at.entries.get(p) {
            Some(n) => state.entries.insert(p.clone(), n.clone()),
            None => state.entries.remove(p),
        };
    }
    let parents: BTreeSet<&[u8]> = paths.iter().map(|p| parent(p)).collect();
    for (p, n) in state.entries.iter_mut() {
        if inos.contains(&n.ino) || parents.contains(p.as_slice()) {
            // Not a changed path, so the same inode is there at `at`.
            if let Some(m) = at.entries.get(p).filter(|m| m.ino == n.ino) {
                *n = m.clone();
            }
        }
    }
}

/// Equal, except that directories may differ in size.
fn same_but_dir_sizes(a: &Snapshot, b: &Snapshot) -> bool {
    a.entries.len() == b.entries.len()
        && a.entries.iter().zip(&b.entries).all(|((p, x), (q, y))| {
            p == q
                && (x == y
                    || (x.kind == FileType::Directory
                        && y.kind == x.kind
                        && Node {
                            size: y.size,
                            ..x.clone()
                        } == *y))
        })
}

#[cfg(test)]
mod tests {
    use super::super::{compare, window, Ordering, Promise};
    use super::*;
    use crate::record::OpRecord;
    use tux3::types::OpenOptions;

    const ROOT: &str = "/";

    /// A regular file whose contents are version `v`.
    fn file(ino: Ino, v: u64) -> Node {
        Node {
            ino,
            kind: FileType::Regular,
            mode: 0o100644,
            nlink: 1,
            uid: 0,
            gid: 0,
            rdev: 0,
            size: 100,
            chunks: vec![v],
            target: Vec::new(),
            xattrs: Vec::new(),
        }
    }

    /// The root and files (path, inode, version).
    fn snap(files: &[(&str, Ino, u64)]) -> Snapshot {
        let mut s = Snapshot::default();
        let root = Node {
            kind: FileType::Directory,
            mode: 0o40755,
            nlink: 2,
            size: 0,
            chunks: Vec::new(),
            ..file(1, 0)
        };
        s.entries.insert(ROOT.as_bytes().to_vec(), root);
        for &(p, ino, v) in files {
            s.entries.insert(p.as_bytes().to_vec(), file(ino, v));
        }
        s
    }

    /// Calls (description, inodes fsynced, state after), each one log
    /// position long; an fsync is a fast one (one flush).
    fn recording(first: Snapshot, calls: Vec<(&str, Vec<Ino>, Snapshot)>) -> Recording {
        let (mut ops, mut snaps) = (Vec::new(), vec![first]);
        for (i, (desc, fsynced, after)) in calls.into_iter().enumerate() {
            ops.push(OpRecord {
                desc: desc.into(),
                start: i,
                end: i + 1,
                durable: !fsynced.is_empty(),
                flushes: u64::from(!fsynced.is_empty()),
                full: false,
                fsynced,
            });
            snaps.push(after);
        }
        Recording {
            block_size: 4096,
            base: Vec::new(),
            log: Vec::new(),
            ops,
            fingerprints: snaps.iter().map(Snapshot::fingerprint).collect(),
            snaps,
            open: OpenOptions::default(),
            snapsets: Vec::new(),
            snap_contents: Default::default(),
        }
    }

    fn paths(v: &[&str]) -> BTreeSet<Vec<u8>> {
        v.iter().map(|p| p.as_bytes().to_vec()).collect()
    }

    fn inos(v: &[Ino]) -> HashSet<Ino> {
        v.iter().copied().collect()
    }

    /// Crash in the epoch `start..end` (log positions: call `i` spans
    /// `i..i + 1`); `None` if `got` is accepted.
    fn verdict(rec: &Recording, start: usize, end: usize, got: &Snapshot) -> Option<Promise> {
        compare(got, rec, window(rec, start, end), Ordering::FsyncMayLead).map(|v| v.0)
    }

    #[test]
    fn the_closure_of_a_rename_cycle_reaches_the_renamed_and_the_replaced_file() {
        // foo (inode 10) durable, foo.new (11) fsynced; then foo.new renamed
        // over foo, a new foo.new (12) created and fsynced. /u and a write
        // to /x are unrelated.
        let before = snap(&[("/foo", 10, 1), ("/foo.new", 11, 1), ("/x", 20, 1)]);
        let at = snap(&[("/foo", 11, 2), ("/foo.new", 12, 1), ("/u", 30, 1), ("/x", 20, 2)]);
        let (p, i) = name_closure(&before, &at, &[12]);
        assert_eq!(p, paths(&["/foo", "/foo.new"]));
        assert_eq!(i, inos(&[10, 11, 12]));
        // Fsyncing the unrelated new file reaches only its name.
        let (p, i) = name_closure(&before, &at, &[30]);
        assert_eq!((p, i), (paths(&["/u"]), inos(&[30])));
        // A data change brings no name.
        let (p, i) = name_closure(&before, &at, &[20]);
        assert_eq!((p, i), (paths(&[]), inos(&[20])));
    }

    #[test]
    fn the_closure_of_a_rename_holds_both_names_and_the_file_replaced() {
        let before = snap(&[("/a", 10, 1), ("/b", 11, 1), ("/c", 12, 1)]);
        let at = snap(&[("/b", 10, 1), ("/c", 13, 1), ("/d", 14, 1)]);
        let (p, i) = name_closure(&before, &at, &[10]);
        assert_eq!(p, paths(&["/a", "/b"]));
        assert_eq!(i, inos(&[10, 11]));
        // Unlink and create again: the name, both inodes.
        let (p, i) = name_closure(&before, &at, &[13]);
        assert_eq!((p, i), (paths(&["/c"]), inos(&[12, 13])));
    }

    #[test]
    fn the_closure_of_a_directory_holds_the_changed_paths_in_it() {
        let mut before = snap(&[("/a", 10, 1), ("/b", 11, 1)]);
        let root = before.entries[&b"/".to_vec()].clone();
        let d = Node { ino: 5, ..root };
        before.entries.insert(b"/d".to_vec(), d.clone());
        before.entries.insert(b"/d/x".to_vec(), file(12, 1));
        let mut at = snap(&[("/a", 10, 1), ("/c", 11, 1)]);
        at.entries.insert(b"/d".to_vec(), d);
        at.entries.insert(b"/d/y".to_vec(), file(12, 1));
        // The root (inode 1) brings its renamed file, not /d's.
        let (p, i) = name_closure(&before, &at, &[1]);
        assert_eq!((p, i), (paths(&["/b", "/c"]), inos(&[1, 11])));
        let (p, i) = name_closure(&before, &at, &[5]);
        assert_eq!((p, i), (paths(&["/d/x", "/d/y"]), inos(&[5, 12])));
    }

    /// A directory node with inode `ino` and link count `nlink`.
    fn dir(ino: Ino, nlink: u32) -> Node {
        Node {
            ino,
            kind: FileType::Directory,
            mode: 0o40755,
            nlink,
            size: 0,
            chunks: Vec::new(),
            ..file(ino, 0)
        }
    }

    #[test]
    fn the_closure_of_a_file_in_new_directories_holds_them() {
        // /d/e/a is new, in new directories; /s is a new empty sibling,
        // /d/x a new file not fsynced, /old an unrelated durable directory.
        let mut before = snap(&[]);
        before.entries.insert(b"/old".to_vec(), dir(9, 2));
        let mut at = snap(&[("/d/e/a", 20, 1), ("/d/x", 21, 1)]);
        at.entries.insert(b"/".to_vec(), dir(1, 5));
        at.entries.insert(b"/old".to_vec(), dir(9, 2));
        at.entries.insert(b"/d".to_vec(), dir(5, 3));
        at.entries.insert(b"/d/e".to_vec(), dir(6, 2));
        at.entries.insert(b"/d/e/f".to_vec(), dir(7, 2));
        at.entries.insert(b"/s".to_vec(), dir(8, 2));
        before.entries.insert(b"/".to_vec(), dir(1, 3));
        let (p, i) = name_closure(&before, &at, &[20]);
        // /d/e/f goes with /d/e only if /d/e's link count counts it: here
        // it has none (link count 2), so it stays out.
        assert_eq!(p, paths(&["/d", "/d/e", "/d/e/a", "/s"]));
        assert_eq!(i, inos(&[5, 6, 8, 20]));
        // With /d/e counting a subdirectory, that one goes too.
        at.entries.insert(b"/d/e".to_vec(), dir(6, 3));
        let (p, _) = name_closure(&before, &at, &[20]);
        assert_eq!(p, paths(&["/d", "/d/e", "/d/e/a", "/d/e/f", "/s"]));
        // A new directory that goes only for its parent's link count brings
        // its own new subdirectories: /s counts /s/t.
        at.entries.insert(b"/s".to_vec(), dir(8, 3));
        at.entries.insert(b"/s/t".to_vec(), dir(10, 2));
        let (p, _) = name_closure(&before, &at, &[20]);
        assert_eq!(p, paths(&["/d", "/d/e", "/d/e/a", "/d/e/f", "/s", "/s/t"]));
    }

    #[test]
    fn a_rename_an_fsync_made_durable_is_whole_or_absent() {
        let first = snap(&[("/a", 10, 1), ("/x", 20, 1)]);
        let rec = recording(
            first.clone(),
            vec![
                ("write /x", vec![], snap(&[("/a", 10, 1), ("/x", 20, 2)])),
                ("rename /a -> /b", vec![], snap(&[("/b", 10, 1), ("/x", 20, 2)])),
                ("fsync /b", vec![10], snap(&[("/b", 10, 1), ("/x", 20, 2)])),
            ],
        );
        let led = snap(&[("/b", 10, 1), ("/x", 20, 1)]);
        let both = snap(&[("/a", 10, 1), ("/b", 10, 1), ("/x", 20, 1)]);
        let neither = snap(&[("/x", 20, 1)]);
        // After the fsync returned: the rename is there, the write need not be.
        assert_eq!(verdict(&rec, 3, 3, &led), None);
        assert_eq!(verdict(&rec, 3, 3, &first), Some(Promise::Durability));
        for half in [&both, &neither] {
            assert_eq!(verdict(&rec, 3, 3, half), Some(Promise::AtomicityOrdering));
        }
        // While it runs: with or without the rename, never half of it.
        assert_eq!(verdict(&rec, 2, 3, &first), None);
        assert_eq!(verdict(&rec, 2, 3, &led), None);
        for half in [&both, &neither] {
            assert_eq!(verdict(&rec, 2, 3, half), Some(Promise::AtomicityOrdering));
        }
        // Strict ordering never lets the rename go ahead of the write.
        let w = window(&rec, 2, 3);
        assert!(compare(&led, &rec, w, Ordering::Strict).is_some());
    }

    #[test]
    fn a_rename_cycle_leads_an_earlier_unsynced_write() {
        // The write to /x is never fsynced; the second fsync of foo.new
        // takes the rename of the first foo.new over foo with it.
        let rec = recording(
            snap(&[("/foo", 10, 1), ("/x", 20, 1)]),
            vec![
                ("write /x", vec![], snap(&[("/foo", 10, 1), ("/x", 20, 2)])),
                (
                    "create+write /foo.new",
                    vec![],
                    snap(&[("/foo", 10, 1), ("/foo.new", 11, 1), ("/x", 20, 2)]),
                ),
                (
                    "fsync /foo.new",
                    vec![11],
                    snap(&[("/foo", 10, 1), ("/foo.new", 11, 1), ("/x", 20, 2)]),
                ),
                (
                    "rename /foo.new -> /foo",
                    vec![],
                    snap(&[("/foo", 11, 1), ("/x", 20, 2)]),
                ),
                (
                    "create+write /foo.new",
                    vec![],
                    snap(&[("/foo", 11, 1), ("/foo.new", 12, 1), ("/x", 20, 2)]),
                ),
                (
                    "fsync /foo.new",
                    vec![12],
                    snap(&[("/foo", 11, 1), ("/foo.new", 12, 1), ("/x", 20, 2)]),
                ),
            ],
        );
        let first_only = snap(&[("/foo", 10, 1), ("/foo.new", 11, 1), ("/x", 20, 1)]);
        let both = snap(&[("/foo", 11, 1), ("/foo.new", 12, 1), ("/x", 20, 1)]);
        // The new foo.new without the rename it reuses the name of, and the
        // rename without the new foo.new: each half of the second fsync.
        let no_rename = snap(&[("/foo", 10, 1), ("/foo.new", 12, 1), ("/x", 20, 1)]);
        let no_new = snap(&[("/foo", 11, 1), ("/x", 20, 1)]);
        assert_eq!(verdict(&rec, 6, 6, &both), None);
        // Lost: the second fsync's changes; before either (a recorded state).
        assert!(verdict(&rec, 6, 6, &first_only).is_some());
        assert_eq!(verdict(&rec, 6, 6, &rec.snaps[0]), Some(Promise::Durability));
        // The second fsync running: the first alone is fine too.
        assert_eq!(verdict(&rec, 5, 6, &first_only), None);
        assert_eq!(verdict(&rec, 5, 6, &both), None);
        for half in [&no_rename, &no_new] {
            assert_eq!(verdict(&rec, 6, 6, half), Some(Promise::AtomicityOrdering));
            assert_eq!(verdict(&rec, 5, 6, half), Some(Promise::AtomicityOrdering));
        }
    }

    #[test]
    fn a_later_fast_fsync_never_lands_without_an_earlier_one() {
        let rec = recording(
            snap(&[]),
            vec![
                ("create+write /c1", vec![], snap(&[("/c1", 10, 1)])),
                ("fsync /c1", vec![10], snap(&[("/c1", 10, 1)])),
                (
                    "create+write /c2",
                    vec![],
                    snap(&[("/c1", 10, 1), ("/c2", 11, 1)]),
                ),
                ("fsync /c2", vec![11], snap(&[("/c1", 10, 1), ("/c2", 11, 1)])),
            ],
        );
        // A crash while the first fsync runs.
        assert_eq!(verdict(&rec, 1, 2, &snap(&[])), None);
        assert_eq!(verdict(&rec, 1, 2, &snap(&[("/c1", 10, 1)])), None);
        let late = snap(&[("/c2", 11, 1)]);
        assert_eq!(verdict(&rec, 1, 4, &late), Some(Promise::AtomicityOrdering));
    }
}
