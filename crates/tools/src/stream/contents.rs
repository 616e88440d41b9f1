//! `tux3 send`: the records of each changed inode, in the order the
//! stream gives them — the xattrs that differ from the base's (set or
//! removed), then a regular file's data (the blocks at new addresses, as
//! `Write` records or as `Clone` records where the same blocks were sent
//! before, after a cut where the base's data became a hole), a symlink's
//! target or a device's number, then its attributes. `send.rs` says which
//! blocks count as changed.
//!
//! Calls the engine (the snapshots opened read-only through [`tux3::Fs`]
//! for xattrs, symlink targets and file data with their checksums checked;
//! the backend and `datamap` for extent trees, `snapdiff::changed_entries`
//! to compare two of them), `sent_blocks.rs` and the format (`mod.rs`).

use super::plan::Changed;
use super::send::{attrs_of, CLONE_CHUNK};
use super::sent_blocks::{changed_runs, gaps, Piece, SentBlocks};
use super::{Record, Result, StreamError, Writer, DATA_CHUNK};
use crate::datamap;
use std::collections::BTreeMap;
use std::io::Write;
use tux3::backend::Backend;
use tux3::device::Device;
use tux3::structures::btree::TreeKind;
use tux3::structures::extent::{self, Extent};
use tux3::structures::inode::InodeAttrs;
use tux3::types::FileType;
use tux3::Fs;

/// Writes the contents of the changed inodes.
pub(super) struct Contents<'a, W: Write> {
    pub(super) dev: &'a dyn Device,
    pub(super) be: &'a Backend,
    pub(super) fs: &'a Fs,
    /// The base snapshot of an incremental stream.
    pub(super) fs_base: Option<&'a Fs>,
    pub(super) w: &'a mut Writer<W>,
    pub(super) data_bytes: u64,
    pub(super) cloned_bytes: u64,
    /// Where the data sent so far went, by snapshot address.
    pub(super) sent: SentBlocks,
}

impl<W: Write> Contents<'_, W> {
    /// Every xattr of `ino` in `fs` whose record is `a`: the record's,
    /// and those of its xattr file (read through the snapshot).
    fn xattrs(fs: Option<&Fs>, ino: u64, a: &InodeAttrs) -> Result<BTreeMap<Vec<u8>, Vec<u8>>> {
        let (Some(fs), true) = (fs, a.xattr_file != 0) else {
            return Ok(a.xattrs.clone());
        };
        let reading = || StreamError::engine(format!("reading the xattrs of inode {ino}"));
        let mut all = BTreeMap::new();
        for name in fs.listxattr(ino).map_err(reading())? {
            let value = fs.getxattr(ino, &name).map_err(reading())?;
            all.insert(name, value);
        }
        Ok(all)
    }

    pub(super) fn inode(&mut self, c: &Changed) -> Result<()> {
        let old = match &c.base {
            Some(a) => Self::xattrs(self.fs_base, c.ino, a)?,
            None => BTreeMap::new(),
        };
        let now = Self::xattrs(Some(self.fs), c.ino, &c.snap)?;
        for (name, value) in &now {
            if old.get(name) != Some(value) {
                self.w.put(&Record::SetXattr {
                    ino: c.ino,
                    name: name.clone(),
                    value: value.clone(),
                })?;
            }
        }
        for name in old.keys().filter(|n| !now.contains_key(*n)) {
            self.w.put(&Record::RemoveXattr {
                ino: c.ino,
                name: name.clone(),
            })?;
        }
        match FileType::from_mode(c.snap.mode) {
            Some(FileType::Regular) => self.data(c)?,
            Some(FileType::Symlink) => self.symlink(c)?,
            Some(FileType::CharDevice | FileType::BlockDevice)
                if c.base.as_ref().is_some_and(|a| a.rdev != c.snap.rdev) =>
            {
                self.w.put(&Record::Rdev {
                    ino: c.ino,
                    rdev: c.snap.rdev,
                })?;
            }
            _ => {}
        }
        self.w.put(&Record::Attr {
            ino: c.ino,
            attrs: attrs_of(&c.snap),
        })
    }

    fn extents(&self, ino: u64, a: &InodeAttrs) -> Result<Vec<Extent>> {
        let what = || format!("reading the extents of inode {ino}");
        let mut tree =
            datamap::data_tree(self.be, ino, a, None).map_err(|e| StreamError::engine(what())(e))?;
        let mut all =
            datamap::tree_extents(self.dev, &mut tree).map_err(|e| StreamError::engine(what())(e))?;
        all.retain(|e| !e.unwritten);
        Ok(all)
    }

    /// A symlink of the base whose number now names another one (freed
    /// and given out again): its target again.
    fn symlink(&mut self, c: &Changed) -> Result<()> {
        let Some(a) = &c.base else { return Ok(()) };
        if a.size == c.snap.size && self.extents(c.ino, a)? == self.extents(c.ino, &c.snap)? {
            return Ok(());
        }
        if !self.w.wants_next() {
            self.w.skip();
            return Ok(());
        }
        let target = self
            .fs
            .readlink(c.ino)
            .map_err(StreamError::engine(format!("reading symlink {}", c.ino)))?;
        self.w.put(&Record::Symlink { ino: c.ino, target })
    }

    /// The extents of `ino` that differ between its base record `a` and
    /// its snapshot record `b` — (the base's, the snapshot's), each in
    /// logical order — read by comparing the two extent trees and skipping
    /// the nodes both reach (`snapdiff::changed_entries`); `None` when a
    /// record holds its map itself (then the maps are read whole: at most
    /// a few extents).
    fn differing_extents(
        &self,
        ino: u64,
        a: &InodeAttrs,
        b: &InodeAttrs,
    ) -> Result<Option<(Vec<Extent>, Vec<Extent>)>> {
        if !a.inline.is_empty() || !b.inline.is_empty() {
            return Ok(None);
        }
        let what = || StreamError::engine(format!("comparing the extents of inode {ino}"));
        let bounds = tux3::structures::bounds(self.dev);
        let diff = crate::snapdiff::changed_entries(self.dev, ino, TreeKind::Extents, a.root, b.root)
            .map_err(what())?;
        let (mut before, mut now) = (Vec::new(), Vec::new());
        for (key, (va, vb)) in diff {
            for (v, out) in [(va, &mut before), (vb, &mut now)] {
                if let Some(v) = v {
                    let e = extent::decode(key, &v, 0, &bounds).map_err(what())?;
                    if !e.unwritten {
                        out.push(e);
                    }
                }
            }
        }
        Ok(Some((before, now)))
    }

    /// A regular file's data: the blocks at addresses the base does not
    /// have at the same place, and its size.
    fn data(&mut self, c: &Changed) -> Result<()> {
        let bs = self.dev.block_size() as u64;
        let size = c.snap.size;
        let last = size.div_ceil(bs);
        // The first block `before` maps that `now` leaves a hole.
        let first_lost = |before: &[Extent], now: &[Extent]| {
            before.iter().find_map(|e| {
                let end = (e.lblock + e.count).min(last);
                gaps(now, e.lblock, end).first().map(|g| g.0)
            })
        };
        // Only the extents that differ, where the trees can say: what both
        // map alike is the same data. A hole made where the base had data
        // means sending all after it again: then every extent.
        let differ = match &c.base {
            Some(a) => self.differing_extents(c.ino, a, &c.snap)?,
            None => None,
        };
        let (before, now, lost) = match differ {
            Some((before, now)) if first_lost(&before, &now).is_none() => (before, now, None),
            _ => {
                let now = self.extents(c.ino, &c.snap)?;
                let before = match &c.base {
                    Some(a) => self.extents(c.ino, a)?,
                    None => Vec::new(),
                };
                let lost = first_lost(&before, &now);
                (before, now, lost)
            }
        };
        let mut cur = c.base.as_ref().map_or(0, |a| a.size);
        let keep = lost.map_or(size, |l| (l * bs).min(size));
        if cur > keep {
            self.w.put(&Record::Truncate {
                ino: c.ino,
                size: keep,
            })?;
            cur = keep;
        }
        let runs = changed_runs(&now, &before, cur.div_ceil(bs));
        let mut buf = vec![0u8; DATA_CHUNK];
        for (s, e) in runs {
            for piece in self.sent.pieces(c.ino, size, bs, &now, s, e.min(last)) {
                match piece {
                    Piece::Data(s, e) => {
                        let (mut off, end) = (s * bs, (e * bs).min(size));
                        while off < end {
                            let n = (end - off).min(DATA_CHUNK as u64) as usize;
                            if self.w.wants_next() {
                                let got = self.fs.read_into(c.ino, off, &mut buf[..n]).map_err(
                                    StreamError::engine(format!("reading inode {} at {off}", c.ino)),
                                )?;
                                if got != n {
                                    return Err(StreamError::Engine {
                                        what: format!("reading inode {} at {off}", c.ino),
                                        err: tux3::Error::corrupt(
                                            0,
                                            format!("{got} bytes where {n} were expected"),
                                        ),
                                    });
                                }
                                self.w.put(&Record::Write {
                                    ino: c.ino,
                                    offset: off,
                                    data: buf[..n].to_vec(),
                                })?;
                                self.data_bytes += n as u64;
                            } else {
                                self.w.skip();
                            }
                            off += n as u64;
                            cur = cur.max(off);
                        }
                    }
                    Piece::Clone {
                        offset,
                        len,
                        src,
                        src_offset,
                    } => {
                        let mut done = 0;
                        while done < len {
                            let n = (len - done).min(CLONE_CHUNK);
                            if self.w.wants_next() {
                                self.cloned_bytes += n;
                            }
                            self.w.put(&Record::Clone {
                                dst: c.ino,
                                dst_offset: offset + done,
                                src,
                                src_offset: src_offset + done,
                                len: n,
                            })?;
                            done += n;
                        }
                        cur = cur.max(offset + len);
                    }
                }
            }
        }
        if cur != size {
            self.w.put(&Record::Truncate { ino: c.ino, size })?;
        }
        Ok(())
    }
}
