//! A full stream without holding the volume in memory: its namespace
//! records come from a walk of the snapshot's directories from the root,
//! breadth first, each directory's entries in key order (a `Create` at an
//! inode's first name, a `Link` at each further one), and its inodes from
//! the inode table read in number order, a batch at a time. What is held
//! is the queue of directories still to read and the inodes with more
//! than one name seen so far — not every record and entry, as the
//! comparison with a base (`plan.rs`) holds what differs.
//!
//! The records are those `plan.rs` gives against an empty base, in an
//! order of their own (deterministic, as a resume needs).
//!
//! Calls the engine API (the snapshot opened read-only: readdir, getattr,
//! readlink) and the inode table's decoder.

use super::plan::Changed;
use super::{Record, Result, StreamError, Writer};
use std::collections::{HashSet, VecDeque};
use std::io::Write;
use std::ops::ControlFlow;
use tux3::device::Device;
use tux3::structures::btree::{Tree, TreeKind};
use tux3::structures::inode::InodeAttrs;
use tux3::structures::superblock::Root;
use tux3::types::{FileType, ROOT_INO};
use tux3::Fs;

/// Entries read from a directory at a time.
const BATCH: usize = 512;

/// Write the namespace records of a full stream of the snapshot open as
/// `fs` (those a resume skips are counted, not built: no symlink is read
/// for them).
pub fn namespace<W: Write>(fs: &Fs, w: &mut Writer<W>, progress: &mut dyn FnMut(u64)) -> Result<()> {
    let what = |d: u64| StreamError::engine(format!("reading directory {d} of the snapshot"));
    let mut dirs = VecDeque::from([ROOT_INO]);
    // Inodes of more than one name, once their first is made.
    let mut linked: HashSet<u64> = HashSet::new();
    while let Some(dir) = dirs.pop_front() {
        let mut pos = 0;
        loop {
            let batch = fs.readdir(dir, pos, BATCH).map_err(what(dir))?;
            let Some(last) = batch.last() else { break };
            pos = last.next;
            for e in batch {
                let is_dir = e.kind == FileType::Directory;
                if is_dir {
                    dirs.push_back(e.ino);
                }
                let want = w.wants_next();
                let a = match (is_dir, want) {
                    (true, false) => None,
                    _ => Some(fs.getattr(e.ino).map_err(what(dir))?),
                };
                let again = a.as_ref().is_some_and(|a| !is_dir && a.nlink > 1) && !linked.insert(e.ino);
                let Some(a) = a.filter(|_| want) else {
                    w.skip();
                    continue;
                };
                if again {
                    w.put(&Record::Link {
                        ino: e.ino,
                        parent: dir,
                        name: e.name,
                    })?;
                    continue;
                }
                let target = if e.kind == FileType::Symlink {
                    fs.readlink(e.ino).map_err(what(dir))?
                } else {
                    Vec::new()
                };
                w.put(&Record::Create {
                    parent: dir,
                    ino: e.ino,
                    mode: a.mode,
                    uid: a.uid,
                    gid: a.gid,
                    rdev: a.rdev,
                    btime: a.btime,
                    name: e.name,
                    target,
                })?;
            }
            progress(w.bytes);
        }
    }
    Ok(())
}

/// Call `each` with every inode of the snapshot whose inode table is at
/// `root` that has a name, in number order, read `BATCH` at a time.
pub fn inodes(dev: &dyn Device, root: Root, each: &mut dyn FnMut(Changed) -> Result<()>) -> Result<()> {
    let bounds = tux3::structures::bounds(dev);
    let mut table = Tree::open(0, TreeKind::Itable, root);
    let mut from = 0u64;
    loop {
        let mut got: Vec<(u64, Vec<u8>)> = Vec::with_capacity(BATCH);
        table
            .scan(dev, from, u64::MAX, |k, v, _| {
                got.push((k, v.to_vec()));
                Ok(if got.len() < BATCH {
                    ControlFlow::Continue(())
                } else {
                    ControlFlow::Break(())
                })
            })
            .map_err(StreamError::engine("reading the snapshot's inode table"))?;
        let Some(&(last, _)) = got.last() else {
            return Ok(());
        };
        for (ino, raw) in got {
            let a = InodeAttrs::decode(&raw, ino, 0, &bounds).map_err(StreamError::engine(format!(
                "reading inode {ino} of the snapshot"
            )))?;
            // (An xattr file is sent as its owner's xattrs.)
            if a.nlink > 0 && a.mode & libc::S_IFMT != tux3::structures::xattr_file::S_IFXATTR {
                each(Changed {
                    ino,
                    base: None,
                    snap: a,
                })?;
            }
        }
        match last.checked_add(1) {
            Some(n) => from = n,
            None => return Ok(()),
        }
    }
}
