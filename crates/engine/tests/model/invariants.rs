//! Internal consistency of the reference model, checked after every step of
//! the model's own tests and before every full comparison with the engine:
//! a model bug must not be mistaken for an engine bug.

use super::reference::{Model, CHUNK};
use std::collections::BTreeMap;
use tux3::{Ino, ROOT_INO};

impl Model {
    /// Internal consistency: every inode reachable from the root exactly as
    /// often as its link count says, parents right, no data beyond EOF.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut refs: BTreeMap<Ino, u32> = BTreeMap::new();
        for (&ino, n) in &self.inodes {
            let mut subdirs = 0;
            for &child in n.entries.values() {
                let c = self
                    .inodes
                    .get(&child)
                    .ok_or(format!("dir {ino} names dead inode {child}"))?;
                *refs.entry(child).or_default() += 1;
                if c.is_dir() {
                    subdirs += 1;
                    if c.parent != ino {
                        return Err(format!("dir {child} in {ino} has parent {}", c.parent));
                    }
                }
            }
            if n.is_dir() && n.nlink != 2 + subdirs {
                return Err(format!("dir {ino}: nlink {} with {subdirs} subdirs", n.nlink));
            }
            if !n.entries.is_empty() && !n.is_dir() {
                return Err(format!("non-dir {ino} has entries"));
            }
            if let Some((&last, _)) = n.data.last_key_value() {
                if last * CHUNK >= n.size {
                    return Err(format!("inode {ino}: chunk {last} beyond size {}", n.size));
                }
                if let Some(chunk) = n.data.get(&(n.size / CHUNK)) {
                    if chunk[(n.size % CHUNK) as usize..].iter().any(|&b| b != 0) {
                        return Err(format!("inode {ino}: nonzero bytes beyond size"));
                    }
                }
            }
        }
        for (&ino, n) in &self.inodes {
            let r = refs.get(&ino).copied().unwrap_or(0);
            let want = if ino == ROOT_INO {
                0
            } else if n.is_dir() {
                1
            } else {
                n.nlink
            };
            if r != want {
                return Err(format!(
                    "inode {ino} ({:?}) referenced {r} times, expected {want}",
                    n.kind
                ));
            }
        }
        Ok(())
    }
}
