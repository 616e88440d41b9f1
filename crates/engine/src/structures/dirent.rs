//! Structures layer: directory entries. A directory's data tree is keyed by
//! hash position: `key = hash47(name) << 16 | collision index`, so a lookup
//! reads one path of the tree (O(log n) blocks) and a position never moves
//! while the entry exists (readdir positions stay valid). Value: `ino u64,
//! type u8, name`.
//!
//! A name's positions are one key range, so a lookup is one probe of the
//! tree (`Tree::probe`): one descent, then the entries of the range in
//! order, each borrowed from its leaf and compared with the name. The same
//! probe finds the lowest free position and where it goes, which a create
//! then fills without searching again. The hash of a stored name is its
//! key: it is computed for the name looked up, never again for a stored one
//! that matches (equal names hash alike). A stored name that does not match
//! is still checked against its key, so a misplaced entry is reported as
//! before; readdir takes the key as it is (fsck checks every entry).
//!
//! Calls the btree and the base modules (codec, error, types).

use super::btree::{Probe, Spot, Tree};
use crate::codec::{Reader, Writer, INO_LIMIT};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::types::FileType;

/// Collision indexes per hash value.
pub const COLLISIONS: u64 = 1 << 16;

/// Mask of a hash: 47 bits. Unit tests may narrow it on their thread
/// ([`narrow::narrow_hash`]) to make names collide at will.
#[cfg(not(test))]
fn hash_mask() -> u64 {
    (1 << 47) - 1
}

#[cfg(test)]
fn hash_mask() -> u64 {
    narrow::HASH_MASK.with(|m| m.get())
}

/// Unit tests only: hashes of fewer bits on this thread, so that many names
/// share a hash (long collision chains) — what real names do only after
/// some 2^24 tries per pair.
#[cfg(test)]
pub(crate) mod narrow {
    use std::cell::Cell;

    thread_local! {
        /// The mask `hash` applies on this thread.
        pub(super) static HASH_MASK: Cell<u64> = const { Cell::new((1 << 47) - 1) };
    }

    /// Keep `bits` bits of each hash on this thread until the guard drops.
    pub(crate) fn narrow_hash(bits: u32) -> Narrowed {
        let old = HASH_MASK.with(|m| m.replace((1u64 << bits).saturating_sub(1)));
        Narrowed(old)
    }

    /// Restores the hash when dropped.
    pub(crate) struct Narrowed(u64);

    impl Drop for Narrowed {
        fn drop(&mut self) {
            HASH_MASK.with(|m| m.set(self.0));
        }
    }
}

/// 47-bit FNV-1a hash of a name, never zero (position 0 is "start").
pub fn hash(name: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in name {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    let h = (h ^ (h >> 47)) & hash_mask();
    h.max(1)
}

/// First key of the positions of `name`'s hash.
pub fn key_base(name: &[u8]) -> u64 {
    hash(name) << 16
}

/// A decoded directory entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dirent {
    pub ino: u64,
    pub kind: FileType,
    pub name: Vec<u8>,
}

/// A directory entry read in place: the name borrowed from its leaf.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirentRef<'a> {
    pub ino: u64,
    pub kind: FileType,
    pub name: &'a [u8],
}

/// The value of an entry naming `ino` of type `kind`.
pub fn encode(ino: u64, kind: FileType, name: &[u8]) -> Vec<u8> {
    let mut w = Writer::with_capacity(name.len().saturating_add(9));
    w.u64(ino);
    w.u8(kind.dirent_code());
    w.bytes(name);
    w.buf
}

impl Dirent {
    pub fn encode(&self) -> Vec<u8> {
        encode(self.ino, self.kind, &self.name)
    }

    /// Decode the entry at `key` of a directory leaf `block`, checking
    /// everything, the name's hash against `key` included.
    pub fn decode(b: &[u8], key: u64, block: u64) -> Result<Dirent> {
        let e = DirentRef::parse(b, key, block)?;
        e.check_hash(key, block)?;
        Ok(e.to_dirent())
    }
}

impl<'a> DirentRef<'a> {
    /// Decode the entry at `key` of a directory leaf `block` in place,
    /// checking all but the name's hash (`check_hash`): for callers that
    /// know it already (a name equal to one that hashes to `key`) or that
    /// do not depend on it.
    pub fn parse(b: &'a [u8], key: u64, block: u64) -> Result<DirentRef<'a>> {
        let mut r = Reader::new(b, block);
        let ino = r.u64("dirent inode")?;
        let code = r.u8("dirent type")?;
        let name = r.bytes(r.remaining(), "dirent name")?;
        if ino == 0 || ino >= INO_LIMIT {
            return Err(r.bad(format!("dirent at position {key:#x}: inode {ino} out of range")));
        }
        let kind = FileType::from_dirent_code(code)
            .ok_or_else(|| r.bad(format!("dirent at position {key:#x}: unknown type {code}")))?;
        if name.is_empty() || name.len() > crate::types::NAME_MAX || name.contains(&b'/') || name.contains(&0)
        {
            return Err(r.bad(format!("dirent at position {key:#x}: invalid name")));
        }
        Ok(DirentRef { ino, kind, name })
    }

    /// The name hashes to its position `key` (in leaf `block`).
    pub fn check_hash(&self, key: u64, block: u64) -> Result<()> {
        if key >> 16 != hash(self.name) {
            return Err(Error::corrupt(
                block,
                format!("dirent at position {key:#x}: name does not hash to its position"),
            ));
        }
        Ok(())
    }

    pub fn to_dirent(&self) -> Dirent {
        Dirent {
            ino: self.ino,
            kind: self.kind,
            name: self.name.to_vec(),
        }
    }
}

/// Where a name is in a directory, or where it would go.
#[derive(Debug)]
pub enum Lookup {
    /// The entry at `spot.key` has the name and names `ino`, of type `kind`.
    Found { ino: u64, kind: FileType, spot: Spot },
    /// No entry has the name. `free`: the lowest free position of its
    /// hash and where it goes (`Tree::insert_at`), while the tree holds
    /// it (`Tree::holds`); `None` if all [`COLLISIONS`] are taken.
    Absent { free: Option<Spot> },
}

/// The positions of `name`'s hash: `base..base + COLLISIONS`.
fn positions(name: &[u8]) -> (u64, u64) {
    let base = key_base(name);
    // hash < 2^47, so base + COLLISIONS < 2^63.
    (base, base.saturating_add(COLLISIONS))
}

/// Look `name` up in directory tree `tree`: one probe of its positions.
pub fn lookup(tree: &mut Tree, dev: &dyn Device, name: &[u8]) -> Result<Lookup> {
    let (from, to) = positions(name);
    let probe = tree.probe(dev, from, to, |key, value, leaf| {
        let e = DirentRef::parse(value, key, leaf)?;
        if e.name == name {
            // Equal names hash alike: its position is right.
            return Ok(Some((e.ino, e.kind)));
        }
        e.check_hash(key, leaf)?;
        Ok(None)
    })?;
    Ok(match probe {
        Probe::Found((ino, kind), spot) => Lookup::Found { ino, kind, spot },
        Probe::Free(spot) => Lookup::Absent { free: Some(spot) },
        Probe::Full => Lookup::Absent { free: None },
    })
}

/// The lowest free position of `name`'s hash and where it goes; `None` if
/// all are taken. (For a name known absent, when the spot a lookup gave no
/// longer holds.)
pub fn free_position(tree: &mut Tree, dev: &dyn Device, name: &[u8]) -> Result<Option<Spot>> {
    let (from, to) = positions(name);
    Ok(match tree.probe(dev, from, to, |_, _, _| Ok(None::<()>))? {
        Probe::Free(spot) => Some(spot),
        Probe::Found(..) | Probe::Full => None,
    })
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects, clippy::indexing_slicing)]
mod tests {
    use super::*;

    #[test]
    fn hash_is_stable_and_nonzero() {
        assert_ne!(hash(b""), 0);
        assert_eq!(hash(b"hello"), hash(b"hello"));
        assert_ne!(hash(b"hello"), hash(b"hellp"));
        assert!(hash(b"x") < 1 << 47);
    }

    #[test]
    fn round_trip() {
        let d = Dirent {
            ino: 42,
            kind: FileType::Symlink,
            name: b"name".to_vec(),
        };
        let key = key_base(b"name") | 3;
        assert_eq!(Dirent::decode(&d.encode(), key, 9).unwrap(), d);
        assert!(Dirent::decode(&d.encode(), key_base(b"other"), 9).is_err());
    }
}

/// Directory operations on a tree as the frontend does them (one lookup,
/// then the change at the place it found), with hashes of two bits: long
/// chains of colliding names, spread over many small leaves under two
/// branch levels, against a model of positions (lowest free collision
/// index, never moving).
#[cfg(test)]
#[allow(clippy::arithmetic_side_effects, clippy::indexing_slicing)]
mod collisions {
    use super::narrow::narrow_hash;
    use super::*;
    use crate::device::MemDevice;
    use crate::structures::btree::TreeKind;
    use proptest::prelude::*;
    use std::collections::BTreeMap;
    use std::ops::ControlFlow;

    const NAMES: usize = 160;
    /// Small blocks: a leaf holds 2 to 20 of these names, a branch 30
    /// children, so trees of a hundred names have two branch levels.
    const BS: usize = 512;

    /// Name `i`: lengths 1 to 200 (each name's digits, then filler).
    fn name(i: usize) -> Vec<u8> {
        let mut n = format!("{i}").into_bytes();
        n.resize(n.len().max(1 + (i * 37) % 200), b'a' + (i % 26) as u8);
        n
    }

    #[derive(Debug, Clone)]
    enum Op {
        Create(usize),
        Unlink(usize),
        /// As a rename does: look both up, remove the target, then the
        /// source (its spot taken before the target went), add the new
        /// name.
        Rename(usize, usize),
        Lookup(usize),
        /// Readdir from the position of the n-th entry, at most `max`.
        Readdir(usize, usize),
        /// Look the first up, create or unlink the second, then remove the
        /// first through its now stale spot.
        StaleRemove(usize, usize),
        /// Look the first up (absent), create the second, then add the
        /// first: through its spot if the tree still holds it, else looked
        /// for again.
        StaleCreate(usize, usize),
        Commit,
        /// Unify, then reopen the tree from the device (cold nodes).
        Reload,
    }

    fn op() -> impl Strategy<Value = Op> {
        let n = 0..NAMES;
        prop_oneof![
            12 => n.clone().prop_map(Op::Create),
            4 => n.clone().prop_map(Op::Unlink),
            3 => (n.clone(), n.clone()).prop_map(|(a, b)| Op::Rename(a, b)),
            3 => n.clone().prop_map(Op::Lookup),
            2 => (0usize..NAMES, 1usize..40).prop_map(|(a, m)| Op::Readdir(a, m)),
            2 => (n.clone(), n.clone()).prop_map(|(a, b)| Op::StaleRemove(a, b)),
            2 => (n.clone(), n).prop_map(|(a, b)| Op::StaleCreate(a, b)),
            1 => Just(Op::Commit),
            1 => Just(Op::Reload),
        ]
    }

    /// The model: position -> (name, inode).
    #[derive(Default)]
    struct Model {
        at: BTreeMap<u64, (Vec<u8>, u64)>,
    }

    impl Model {
        fn find(&self, name: &[u8]) -> Option<(u64, u64)> {
            let base = key_base(name);
            self.at
                .range(base..base + COLLISIONS)
                .find(|(_, (n, _))| n == name)
                .map(|(&k, (_, i))| (k, *i))
        }
        fn free(&self, name: &[u8]) -> u64 {
            let base = key_base(name);
            (base..base + COLLISIONS)
                .find(|k| !self.at.contains_key(k))
                .unwrap()
        }
        fn create(&mut self, name: &[u8], ino: u64) -> Option<u64> {
            if self.find(name).is_some() {
                return None;
            }
            let k = self.free(name);
            self.at.insert(k, (name.to_vec(), ino));
            Some(k)
        }
        fn unlink(&mut self, name: &[u8]) -> Option<u64> {
            let (k, _) = self.find(name)?;
            self.at.remove(&k);
            Some(k)
        }
    }

    struct Dir {
        dev: MemDevice,
        tree: Tree,
        next_block: u64,
        next_ino: u64,
    }

    impl Dir {
        fn found(&mut self, name: &[u8]) -> Option<(u64, Spot)> {
            match lookup(&mut self.tree, &self.dev, name).unwrap() {
                Lookup::Found { ino, spot, .. } => Some((ino, spot)),
                Lookup::Absent { .. } => None,
            }
        }

        /// Create `name`; None if it exists.
        fn create(&mut self, name: &[u8]) -> Option<(u64, u64)> {
            let Lookup::Absent { free } = lookup(&mut self.tree, &self.dev, name).unwrap() else {
                return None;
            };
            let spot = free.unwrap();
            assert!(self.tree.holds(&spot));
            self.next_ino += 1;
            let ino = self.next_ino;
            self.tree
                .insert_at(&self.dev, &spot, encode(ino, FileType::Regular, name))
                .unwrap();
            Some((spot.key, ino))
        }

        /// Remove the entry at `spot`, which must be `name`'s.
        fn remove(&mut self, spot: &Spot, name: &[u8]) {
            let v = self
                .tree
                .remove_at(&self.dev, spot)
                .unwrap()
                .expect("entry at the spot");
            assert_eq!(Dirent::decode(&v, spot.key, 0).unwrap().name, name);
        }

        /// Add `name` naming `ino` at `free` if the tree holds it, else at
        /// the lowest free position looked for again.
        fn add(&mut self, name: &[u8], ino: u64, free: Option<Spot>) -> u64 {
            let spot = match free {
                Some(s) if self.tree.holds(&s) => s,
                _ => free_position(&mut self.tree, &self.dev, name).unwrap().unwrap(),
            };
            self.tree
                .insert_at(&self.dev, &spot, encode(ino, FileType::Regular, name))
                .unwrap();
            spot.key
        }

        fn commit(&mut self, unify: bool) {
            let mut out = Vec::new();
            let mut maps = Vec::new();
            let mut next = self.next_block;
            let mut alloc = || {
                next += 1;
                Ok(next)
            };
            self.tree
                .redirect_leaves(BS, 0, &mut alloc, &mut out, &mut maps)
                .unwrap();
            self.tree.unmaps.clear();
            if unify {
                let mut freed = Vec::new();
                let root = self
                    .tree
                    .redirect_branches(BS, 0, &mut alloc, &mut out, &mut freed)
                    .unwrap();
                self.next_block = next;
                for (a, b) in out {
                    self.dev.write(a, &b).unwrap();
                }
                self.tree = Tree::open(self.tree.id, TreeKind::Dirents, root);
                return;
            }
            self.next_block = next;
            for (a, b) in out {
                self.dev.write(a, &b).unwrap();
            }
        }

        /// Every entry, in order, checked in full (hash included).
        fn all(&mut self) -> Vec<(u64, Vec<u8>, u64)> {
            let mut v = Vec::new();
            self.tree
                .scan(&self.dev, 0, u64::MAX, |k, value, leaf| {
                    let e = Dirent::decode(value, k, leaf)?;
                    v.push((k, e.name, e.ino));
                    Ok(ControlFlow::Continue(()))
                })
                .unwrap();
            v
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
        #[test]
        fn colliding_names_against_a_model(ops in proptest::collection::vec(op(), 1..600)) {
            let _narrow = narrow_hash(2);
            let mut d = Dir {
                dev: MemDevice::new(BS as u32, 1 << 16),
                tree: Tree::new_empty(5, TreeKind::Dirents),
                next_block: 2,
                next_ino: 100,
            };
            let mut m = Model::default();
            for op in ops {
                match op {
                    Op::Create(a) => {
                        let n = name(a);
                        let want = m.find(&n).is_none().then(|| m.free(&n));
                        let got = d.create(&n);
                        prop_assert_eq!(got.map(|g| g.0), want);
                        if let Some((_, ino)) = got {
                            m.create(&n, ino);
                        }
                    }
                    Op::Unlink(a) => {
                        let n = name(a);
                        let got = d.found(&n);
                        prop_assert_eq!(got.as_ref().map(|g| g.1.key), m.find(&n).map(|f| f.0));
                        if let Some((_, spot)) = got {
                            d.remove(&spot, &n);
                            m.unlink(&n);
                        }
                    }
                    Op::Rename(a, b) => {
                        let (na, nb) = (name(a), name(b));
                        let Some((ino, src)) = d.found(&na) else {
                            prop_assert!(m.find(&na).is_none());
                            continue;
                        };
                        if a == b {
                            continue;
                        }
                        let (target, free) = match lookup(&mut d.tree, &d.dev, &nb).unwrap() {
                            Lookup::Found { spot, .. } => (Some(spot), None),
                            Lookup::Absent { free } => (None, free),
                        };
                        prop_assert_eq!(target.as_ref().map(|s| s.key), m.find(&nb).map(|f| f.0));
                        if let Some(t) = &target {
                            d.remove(t, &nb);
                            m.unlink(&nb);
                        }
                        d.remove(&src, &na);
                        m.unlink(&na);
                        let key = d.add(&nb, ino, free);
                        prop_assert_eq!(Some(key), m.create(&nb, ino));
                    }
                    Op::Lookup(a) => {
                        let n = name(a);
                        let got = d.found(&n).map(|(ino, s)| (s.key, ino));
                        prop_assert_eq!(got, m.find(&n));
                    }
                    Op::Readdir(at, max) => {
                        let from = m.at.keys().nth(at).map_or(0, |k| k + 1);
                        let want: Vec<u64> = m.at.range(from..).take(max).map(|(k, _)| *k).collect();
                        let got: Vec<u64> = d
                            .tree
                            .range_at(&d.dev, from, u64::MAX, max)
                            .unwrap()
                            .iter()
                            .map(|f| f.key)
                            .collect();
                        prop_assert_eq!(got, want);
                    }
                    Op::StaleRemove(a, b) => {
                        let (na, nb) = (name(a), name(b));
                        let Some((_, spot)) = d.found(&na) else { continue };
                        if a == b {
                            continue;
                        }
                        match d.found(&nb) {
                            Some((_, s)) => {
                                d.remove(&s, &nb);
                                m.unlink(&nb);
                            }
                            None => {
                                let (k, ino) = d.create(&nb).unwrap();
                                prop_assert_eq!(Some(k), m.create(&nb, ino));
                            }
                        }
                        prop_assert!(!d.tree.holds(&spot));
                        d.remove(&spot, &na);
                        m.unlink(&na);
                    }
                    Op::StaleCreate(a, b) => {
                        let (na, nb) = (name(a), name(b));
                        let Lookup::Absent { free } = lookup(&mut d.tree, &d.dev, &na).unwrap() else {
                            continue;
                        };
                        if a != b {
                            if let Some((k, ino)) = d.create(&nb) {
                                prop_assert_eq!(Some(k), m.create(&nb, ino));
                            }
                        }
                        if m.find(&na).is_some() {
                            continue;
                        }
                        d.next_ino += 1;
                        let ino = d.next_ino;
                        let key = d.add(&na, ino, free);
                        prop_assert_eq!(Some(key), m.create(&na, ino));
                    }
                    Op::Commit => d.commit(false),
                    Op::Reload => d.commit(true),
                }
                let want: Vec<(u64, Vec<u8>, u64)> =
                    m.at.iter().map(|(k, (n, i))| (*k, n.clone(), *i)).collect();
                prop_assert_eq!(d.all(), want);
            }
        }
    }

    #[test]
    fn a_full_hash_has_no_free_position() {
        let _narrow = narrow_hash(1);
        let dev = MemDevice::new(4096, 1 << 12);
        let mut t = Tree::new_empty(5, TreeKind::Dirents);
        // Every name hashes to 1: fill all its positions but one.
        let base = key_base(b"a");
        for k in base..base + COLLISIONS - 1 {
            t.insert(&dev, k, encode(9, FileType::Regular, format!("n{k}").as_bytes()))
                .unwrap();
        }
        let Lookup::Absent { free: Some(s) } = lookup(&mut t, &dev, b"a").unwrap() else {
            panic!("one position is free");
        };
        assert_eq!(s.key, base + COLLISIONS - 1);
        t.insert_at(&dev, &s, encode(9, FileType::Regular, b"a")).unwrap();
        assert!(matches!(
            lookup(&mut t, &dev, b"a").unwrap(),
            Lookup::Found { .. }
        ));
        assert!(matches!(
            lookup(&mut t, &dev, b"b").unwrap(),
            Lookup::Absent { free: None }
        ));
        assert!(free_position(&mut t, &dev, b"b").unwrap().is_none());
    }

    #[test]
    fn a_misplaced_colliding_entry_is_reported() {
        let dev = MemDevice::new(4096, 1 << 12);
        let mut t = Tree::new_empty(5, TreeKind::Dirents);
        let base = key_base(b"mine");
        // Some other name, stored under this hash: corrupt.
        t.insert(&dev, base, encode(9, FileType::Regular, b"other"))
            .unwrap();
        assert!(lookup(&mut t, &dev, b"mine").is_err());
        // The name itself at its hash is found without hashing it again.
        t.insert(&dev, base, encode(9, FileType::Regular, b"mine"))
            .unwrap();
        assert!(matches!(
            lookup(&mut t, &dev, b"mine").unwrap(),
            Lookup::Found { ino: 9, .. }
        ));
    }
}
