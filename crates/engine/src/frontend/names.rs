//! Frontend layer: pending name changes of the open delta — the directory
//! positions whose entry differs from what a crash would recover (filled
//! since their durable state, or emptied of a durable entry), and the inodes
//! each involves. An fsync commit logs the closure of its inode's pending
//! changes and marks them durable here (`fsync.rs`); a delta commit makes
//! them all durable (cleared at freeze).
//!
//! Every create, link, unlink and rename changes it, so its maps are hash
//! maps with a cheap hash (a folded multiply, seeded per map so that names
//! chosen to collide cannot make them slow): a change costs a few probes,
//! not a walk down ordered trees. They grow a few entries per insert
//! (`GrowingMap`), so no create or unlink waits for a whole map to
//! rehash. What must be ordered is: the removed durable entries of a
//! directory (found by name hash), and the answers handed to fsync
//! (sorted).
//!
//! Pure bookkeeping: calls nothing.

use super::GrowingMap;
use crate::types::Ino;
use std::collections::{BTreeMap, BTreeSet};

/// A directory position: (directory, key).
pub type Pos = (Ino, u64);

/// Positions changed in the open delta and not yet durable.
#[derive(Default)]
pub struct PendingNames {
    /// Per directory, its changed positions.
    dirs: GrowingMap<Ino, DirNames>,
    /// Per inode, its positions in `added` or `removed` of a directory.
    by_ino: GrowingMap<Ino, Positions>,
}

/// The changed positions of one directory, by key.
#[derive(Default)]
struct DirNames {
    /// Filled, entry not durable: the inode it names.
    added: GrowingMap<u64, Ino>,
    /// Emptied of a durable entry (maybe filled again since): the inode
    /// that entry named, grouped by name hash.
    removed: Removed,
}

/// Removed durable entries of one directory by key, grouped by name hash
/// (a key's upper 48 bits) to find those of one hash; nearly every group
/// holds one. (An ordered map of them took the commit thread 5-8 ms to
/// free after a delta of 400,000 unlinks; this is one table.)
#[derive(Default)]
struct Removed {
    groups: GrowingMap<u64, Group>,
}

/// The removed entries of one name hash: key and inode.
enum Group {
    One(u64, Ino),
    Many(BTreeMap<u64, Ino>),
}

impl Removed {
    fn get(&self, key: u64) -> Option<Ino> {
        match self.groups.get(&(key >> 16))? {
            Group::One(k, ino) => (*k == key).then_some(*ino),
            Group::Many(m) => m.get(&key).copied(),
        }
    }

    fn insert(&mut self, key: u64, ino: Ino) {
        let hash = key >> 16;
        match self.groups.get_mut(&hash) {
            None => {
                self.groups.insert(hash, Group::One(key, ino));
            }
            Some(Group::One(k, i)) if *k == key => *i = ino,
            Some(g @ Group::One(..)) => {
                if let Group::One(k, i) = *g {
                    *g = Group::Many(BTreeMap::from([(k, i), (key, ino)]));
                }
            }
            Some(Group::Many(m)) => {
                m.insert(key, ino);
            }
        }
    }

    fn remove(&mut self, key: u64) -> Option<Ino> {
        let hash = key >> 16;
        let (gone, empty) = match self.groups.get_mut(&hash)? {
            Group::One(k, i) => ((*k == key).then_some(*i), *k == key),
            Group::Many(m) => {
                let gone = m.remove(&key);
                (gone, m.is_empty())
            }
        };
        if empty {
            self.groups.remove(&hash);
        }
        gone
    }

    fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// Every key, in order.
    fn keys(&self) -> Vec<u64> {
        let mut keys: Vec<u64> = Vec::with_capacity(self.groups.len());
        for g in self.groups.values() {
            match g {
                Group::One(k, _) => keys.push(*k),
                Group::Many(m) => keys.extend(m.keys()),
            }
        }
        keys.sort_unstable();
        keys
    }

    /// The inodes of the entries under `key`'s name hash, in key order.
    fn same_hash(&self, key: u64) -> Vec<Ino> {
        match self.groups.get(&(key >> 16)) {
            None => Vec::new(),
            Some(Group::One(_, ino)) => vec![*ino],
            Some(Group::Many(m)) => m.values().copied().collect(),
        }
    }
}

impl DirNames {
    /// Whether `key` still involves `ino`.
    fn involves(&self, key: u64, ino: Ino) -> bool {
        self.added.get(&key) == Some(&ino) || self.removed.get(key) == Some(ino)
    }
}

/// The positions of one inode: nearly always one.
enum Positions {
    One(Pos),
    Many(BTreeSet<Pos>),
}

impl Positions {
    fn insert(&mut self, pos: Pos) {
        match self {
            Positions::One(p) if *p == pos => {}
            Positions::One(p) => *self = Positions::Many(BTreeSet::from([*p, pos])),
            Positions::Many(s) => {
                s.insert(pos);
            }
        }
    }

    /// Remove `pos`; true if none is left.
    fn remove(&mut self, pos: Pos) -> bool {
        match self {
            Positions::One(p) => *p == pos,
            Positions::Many(s) => {
                s.remove(&pos);
                s.is_empty()
            }
        }
    }

    fn sorted(&self) -> Vec<Pos> {
        match self {
            Positions::One(p) => vec![*p],
            Positions::Many(s) => s.iter().copied().collect(),
        }
    }
}

impl PendingNames {
    /// Empty books with room for as many inodes as these hold: the next
    /// delta is likely as large, and grows without rehashing.
    pub fn sized_like(&self) -> PendingNames {
        PendingNames {
            dirs: GrowingMap::with_capacity_and_hasher(self.dirs.len(), Default::default()),
            by_ino: GrowingMap::with_capacity_and_hasher(self.by_ino.len(), Default::default()),
        }
    }

    /// An entry naming `ino` filled `pos`.
    pub fn add(&mut self, pos: Pos, ino: Ino) {
        self.dirs.entry(pos.0).or_default().added.insert(pos.1, ino);
        self.involve(ino, pos);
    }

    /// The entry naming `ino` left `pos`.
    pub fn remove(&mut self, pos: Pos, ino: Ino) {
        let d = self.dirs.entry(pos.0).or_default();
        if d.added.remove(&pos.1).is_some() {
            // Never durable: as if it had not been.
            if !d.involves(pos.1, ino) {
                self.forget(ino, pos);
            }
        } else {
            d.removed.insert(pos.1, ino);
            self.involve(ino, pos);
        }
    }

    /// `pos` is durable as it is now (an fsync commit logged it).
    pub fn logged(&mut self, pos: Pos) {
        let Some(d) = self.dirs.get_mut(&pos.0) else {
            return;
        };
        let added = d.added.remove(&pos.1);
        let removed = d.removed.remove(pos.1);
        for ino in added.into_iter().chain(removed) {
            self.forget(ino, pos);
        }
    }

    fn involve(&mut self, ino: Ino, pos: Pos) {
        self.by_ino
            .entry(ino)
            .and_modify(|p| p.insert(pos))
            .or_insert(Positions::One(pos));
    }

    /// Drop `pos` from `ino`'s positions (it no longer involves `ino`).
    fn forget(&mut self, ino: Ino, pos: Pos) {
        if let Some(p) = self.by_ino.get_mut(&ino) {
            if p.remove(pos) {
                self.by_ino.remove(&ino);
            }
        }
    }

    /// Whether any name of `ino` is pending.
    pub fn pending(&self, ino: Ino) -> bool {
        self.by_ino.contains_key(&ino)
    }

    /// The pending positions involving `ino`, in order.
    pub fn positions(&self, ino: Ino) -> Vec<Pos> {
        self.by_ino.get(&ino).map_or_else(Vec::new, Positions::sorted)
    }

    /// The inodes `pos` involves: the one its new entry names, the one its
    /// removed durable entry named.
    pub fn inos_at(&self, pos: Pos) -> (Option<Ino>, Option<Ino>) {
        match self.dirs.get(&pos.0) {
            Some(d) => (d.added.get(&pos.1).copied(), d.removed.get(pos.1)),
            None => (None, None),
        }
    }

    /// Whether directory `dir` has any pending position.
    pub fn any_in(&self, dir: Ino) -> bool {
        self.dirs
            .get(&dir)
            .is_some_and(|d| !d.added.is_empty() || !d.removed.is_empty())
    }

    /// The pending positions of directory `dir`: those filled, in order,
    /// then those emptied of a durable entry, in order.
    pub fn positions_in(&self, dir: Ino) -> Vec<Pos> {
        let Some(d) = self.dirs.get(&dir) else {
            return Vec::new();
        };
        let mut v: Vec<Pos> = d.added.keys().map(|&k| (dir, k)).collect();
        v.sort_unstable();
        v.extend(d.removed.keys().into_iter().map(|k| (dir, k)));
        v
    }

    /// Removed durable entries of directory `dir` under the name hash of
    /// position `key` (one of them may have carried the name now at `key`).
    pub fn removed_same_hash(&self, dir: Ino, key: u64) -> Vec<Ino> {
        self.dirs
            .get(&dir)
            .map_or_else(Vec::new, |d| d.removed.same_hash(key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn an_entry_added_and_removed_in_the_delta_leaves_nothing_pending() {
        let mut n = PendingNames::default();
        n.add((1, 10), 20);
        n.remove((1, 10), 20);
        assert!(!n.pending(20));
        assert_eq!(n.inos_at((1, 10)), (None, None));
    }

    #[test]
    fn a_durable_entry_removed_stays_pending_until_logged() {
        let mut n = PendingNames::default();
        n.remove((1, 10), 20);
        n.add((1, 10), 21);
        assert_eq!(n.inos_at((1, 10)), (Some(21), Some(20)));
        assert_eq!(n.positions(20), vec![(1, 10)]);
        // The new entry goes again: the durable one's removal still counts.
        n.remove((1, 10), 21);
        assert!(!n.pending(21));
        assert_eq!(n.positions(20), vec![(1, 10)]);
        n.logged((1, 10));
        assert!(!n.pending(20));
    }

    #[test]
    fn a_rename_back_keeps_the_durable_removal() {
        // 20 named at (1, 10) durably; renamed to (1, 70) and back.
        let mut n = PendingNames::default();
        n.remove((1, 10), 20);
        n.add((1, 70), 20);
        n.remove((1, 70), 20);
        n.add((1, 10), 20);
        assert_eq!(n.positions(20), vec![(1, 10)]);
        n.remove((1, 10), 20);
        assert_eq!(n.positions(20), vec![(1, 10)]);
        assert_eq!(n.inos_at((1, 10)), (None, Some(20)));
    }

    #[test]
    fn removed_entries_are_found_by_name_hash() {
        let mut n = PendingNames::default();
        n.remove((1, 5 << 16), 20);
        n.remove((1, (5 << 16) + 1), 21);
        n.remove((1, 6 << 16), 22);
        n.remove((2, 5 << 16), 23);
        assert_eq!(n.removed_same_hash(1, (5 << 16) + 3), vec![20, 21]);
    }

    /// One step against the model: fill, empty, log or commit a position.
    #[derive(Debug, Clone)]
    enum Step {
        Fill(Pos, Ino),
        Empty(Pos),
        Log(Pos),
        Commit,
    }

    fn step() -> impl Strategy<Value = Step> {
        // Keys of one name hash (several entries in a group) and of others.
        let key = prop_oneof![0u64..3, (5u64 << 16)..(5 << 16) + 2, Just(9u64 << 16)];
        let pos = (1u64..3, key);
        prop_oneof![
            4 => (pos.clone(), 10u64..15).prop_map(|(p, i)| Step::Fill(p, i)),
            3 => pos.clone().prop_map(Step::Empty),
            2 => pos.prop_map(Step::Log),
            1 => Just(Step::Commit),
        ]
    }

    proptest! {
        /// Against a model of what a crash would recover (`durable`) and
        /// what the directories hold (`now`): every position where they
        /// differ is pending, involving the inodes on both sides, and an
        /// inode's positions are exactly those that involve it.
        #[test]
        fn pending_positions_match_the_model(steps in proptest::collection::vec(step(), 1..60)) {
            let mut n = PendingNames::default();
            let mut durable: BTreeMap<Pos, Ino> = BTreeMap::new();
            let mut now: BTreeMap<Pos, Ino> = BTreeMap::new();
            for s in steps {
                match s {
                    Step::Fill(p, i) => {
                        if now.contains_key(&p) {
                            continue;
                        }
                        now.insert(p, i);
                        n.add(p, i);
                    }
                    Step::Empty(p) => {
                        let Some(i) = now.remove(&p) else { continue };
                        n.remove(p, i);
                    }
                    Step::Log(p) => {
                        n.logged(p);
                        match now.get(&p) {
                            Some(&i) => durable.insert(p, i),
                            None => durable.remove(&p),
                        };
                    }
                    Step::Commit => {
                        // As a freeze takes the books: fresh ones.
                        n = PendingNames::default();
                        durable = now.clone();
                    }
                }
                let all: BTreeSet<Pos> = durable.keys().chain(now.keys()).copied().collect();
                for p in all {
                    let (d, c) = (durable.get(&p).copied(), now.get(&p).copied());
                    let (added, removed) = n.inos_at(p);
                    if d != c {
                        prop_assert_eq!(removed, d, "removed durable entry at {:?}", p);
                        prop_assert_eq!(added, c, "new entry at {:?}", p);
                        for i in d.into_iter().chain(c) {
                            prop_assert!(n.positions(i).contains(&p), "{:?} not pending for {}", p, i);
                        }
                    } else {
                        // Unchanged, or emptied and filled again alike.
                        prop_assert!(added == removed, "{:?}: {:?} vs {:?}", p, added, removed);
                    }
                }
                for dir in 0u64..4 {
                    prop_assert_eq!(n.any_in(dir), !n.positions_in(dir).is_empty());
                }
                for i in 10u64..15 {
                    let ps = n.positions(i);
                    prop_assert_eq!(n.pending(i), !ps.is_empty());
                    for p in ps {
                        let (added, removed) = n.inos_at(p);
                        prop_assert!(added == Some(i) || removed == Some(i), "{:?} listed for {}", p, i);
                    }
                }
            }
        }
    }

    #[test]
    fn positions_of_one_directory() {
        let mut n = PendingNames::default();
        n.add((1, 7), 20);
        n.remove((1, 9), 21);
        n.add((2, 3), 22);
        n.remove((0, 3), 23);
        let mut got = n.positions_in(1);
        got.sort();
        assert_eq!(got, vec![(1, 7), (1, 9)]);
    }
}
