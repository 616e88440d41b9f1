//! Namespace operations on names that collide in their hash (hashes
//! narrowed to three bits on the test's thread, `dirent::narrow`), against
//! a model of two directories: create, unlink, rename (plain, noreplace,
//! exchange, across the two), lookup and readdir (paged; every entry at the
//! position the model gives it: the lowest collision index free when it
//! was added, never moving while it lives), through commits, unifies and
//! reopens (replay).

#![allow(clippy::arithmetic_side_effects, clippy::indexing_slicing)]

use crate::backend::mkfs;
use crate::device::{Device, MemDevice};
use crate::error::{Errno, Error};
use crate::frontend::Volume;
use crate::structures::dirent::narrow::narrow_hash;
use crate::structures::dirent::{key_base, COLLISIONS};
use crate::types::*;
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Names: lengths 1 to 250 so that a 1 KiB leaf holds few, and a hash's
/// entries (an eighth of them) span leaves.
const NAMES: usize = 80;

fn name(i: usize) -> Vec<u8> {
    let mut n = format!("n{i}-").into_bytes();
    n.resize(n.len().max((i * 53) % 250), b'a' + (i % 26) as u8);
    n
}

#[derive(Debug, Clone)]
enum Op {
    Create(usize, usize),
    Unlink(usize, usize),
    /// (dir, name, dir, name, flags: 0 none, 1 noreplace, 2 exchange)
    Rename(usize, usize, usize, usize, u8),
    Lookup(usize, usize),
    /// Read the whole directory in pages of this many entries.
    Readdir(usize, usize),
    Sync,
    Unify,
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    let d = 0usize..2;
    let n = 0..NAMES;
    prop_oneof![
        8 => (d.clone(), n.clone()).prop_map(|(d, n)| Op::Create(d, n)),
        3 => (d.clone(), n.clone()).prop_map(|(d, n)| Op::Unlink(d, n)),
        4 => (d.clone(), n.clone(), d.clone(), n.clone(), 0u8..3)
            .prop_map(|(a, x, b, y, f)| Op::Rename(a, x, b, y, f)),
        3 => (d.clone(), n).prop_map(|(d, n)| Op::Lookup(d, n)),
        2 => (d, 1usize..9).prop_map(|(d, p)| Op::Readdir(d, p)),
        1 => Just(Op::Sync),
        1 => Just(Op::Unify),
        1 => Just(Op::Reopen),
    ]
}

fn errno<T: std::fmt::Debug>(r: crate::error::Result<T>) -> Option<Errno> {
    match r {
        Ok(_) => None,
        Err(Error::Posix(e)) => Some(e),
        Err(e) => panic!("unexpected error {e}"),
    }
}

struct Harness {
    dev: Arc<MemDevice>,
    vol: Volume,
    /// The two directories: the root and one below it.
    dirs: [Ino; 2],
    /// Per directory: name -> (inode, position).
    model: [Dir; 2],
}

/// A directory of the model.
#[derive(Default)]
struct Dir {
    names: BTreeMap<Vec<u8>, (Ino, u64)>,
    /// Position -> name.
    at: BTreeMap<u64, Vec<u8>>,
}

impl Dir {
    fn ino(&self, name: &[u8]) -> Option<Ino> {
        self.names.get(name).map(|e| e.0)
    }

    /// Add `name` at the lowest free position of its hash.
    fn add(&mut self, name: &[u8], ino: Ino) {
        let base = key_base(name);
        let key = (base..base + COLLISIONS)
            .find(|k| !self.at.contains_key(k))
            .unwrap();
        self.at.insert(key, name.to_vec());
        assert!(self.names.insert(name.to_vec(), (ino, key)).is_none());
    }

    fn remove(&mut self, name: &[u8]) {
        if let Some((_, key)) = self.names.remove(name) {
            self.at.remove(&key);
        }
    }
}

impl Harness {
    fn new() -> Harness {
        let dev = Arc::new(MemDevice::new(1024, 1 << 15));
        mkfs::format(dev.as_ref(), &FormatOptions::default()).unwrap();
        let d: Arc<dyn Device> = dev.clone();
        let mut vol = Volume::open(d, OpenOptions::default()).unwrap();
        let sub = vol
            .mknod(ROOT_INO, b"sub", libc::S_IFDIR | 0o755, 0, 0, 0)
            .unwrap()
            .ino;
        let mut model = [Dir::default(), Dir::default()];
        // Not among the test's names, but it takes a position.
        model[0].add(b"sub", sub);
        Harness {
            dev,
            vol,
            dirs: [ROOT_INO, sub],
            model,
        }
    }

    fn step(&mut self, op: Op) -> Result<(), TestCaseError> {
        match op {
            Op::Create(d, i) => {
                let n = name(i);
                let got = self.vol.mknod(self.dirs[d], &n, libc::S_IFREG | 0o644, 0, 0, 0);
                if self.model[d].ino(&n).is_some() {
                    prop_assert_eq!(errno(got), Some(Errno::EEXIST));
                } else {
                    let a = got.unwrap();
                    self.model[d].add(&n, a.ino);
                }
            }
            Op::Unlink(d, i) => {
                let n = name(i);
                let got = self.vol.unlink(self.dirs[d], &n);
                if self.model[d].ino(&n).is_some() {
                    prop_assert_eq!(errno(got), None);
                    self.model[d].remove(&n);
                } else {
                    prop_assert_eq!(errno(got), Some(Errno::ENOENT));
                }
            }
            Op::Rename(a, x, b, y, f) => {
                let (nx, ny) = (name(x), name(y));
                let flags = RenameFlags {
                    noreplace: f == 1,
                    exchange: f == 2,
                    whiteout: None,
                };
                let got = errno(self.vol.rename(self.dirs[a], &nx, self.dirs[b], &ny, flags));
                let src = self.model[a].ino(&nx);
                let tgt = self.model[b].ino(&ny);
                let want = match (src, tgt) {
                    (None, _) => Some(Errno::ENOENT),
                    (Some(_), Some(_)) if flags.noreplace => Some(Errno::EEXIST),
                    (Some(_), None) if flags.exchange => Some(Errno::ENOENT),
                    _ => None,
                };
                prop_assert_eq!(got, want);
                if want.is_some() || (a == b && x == y) {
                    return Ok(());
                }
                let src = src.unwrap();
                // As the frontend does it: both names go, then the new ones
                // come, each at the lowest position then free.
                self.model[a].remove(&nx);
                self.model[b].remove(&ny);
                if flags.exchange {
                    self.model[a].add(&nx, tgt.unwrap());
                }
                self.model[b].add(&ny, src);
            }
            Op::Lookup(d, i) => {
                let n = name(i);
                let got = self.vol.lookup(self.dirs[d], &n);
                match self.model[d].ino(&n) {
                    Some(ino) => prop_assert_eq!(got.unwrap().ino, ino),
                    None => prop_assert_eq!(errno(got), Some(Errno::ENOENT)),
                }
            }
            Op::Readdir(d, page) => {
                let mut all = BTreeMap::new();
                let mut pos = 0;
                loop {
                    let got = self.vol.readdir(self.dirs[d], pos, page).unwrap();
                    prop_assert!(got.len() <= page);
                    let Some(last) = got.last() else { break };
                    pos = last.next;
                    for e in got {
                        prop_assert!(e.next > 0);
                        let key = e.next - 1;
                        prop_assert!(all.insert(e.name.clone(), (e.ino, key)).is_none(), "listed twice");
                        prop_assert_eq!(crate::structures::dirent::hash(&e.name), key >> 16);
                    }
                }
                prop_assert_eq!(&all, &self.model[d].names);
            }
            Op::Sync => self.vol.sync().unwrap(),
            Op::Unify => self.vol.unify().unwrap(),
            Op::Reopen => {
                self.vol.close_in_place().unwrap();
                let d: Arc<dyn Device> = self.dev.clone();
                self.vol = Volume::open(d, OpenOptions::default()).unwrap();
            }
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    #[test]
    fn colliding_names_against_a_model(ops in proptest::collection::vec(op(), 1..400)) {
        let _narrow = narrow_hash(3);
        let mut h = Harness::new();
        for op in ops {
            h.step(op)?;
        }
        // Everything is where the model says, after a last reopen too.
        h.step(Op::Reopen)?;
        for d in 0..2 {
            h.step(Op::Readdir(d, 5))?;
            for i in 0..NAMES {
                h.step(Op::Lookup(d, i))?;
            }
        }
    }
}
