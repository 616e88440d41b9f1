//! `tux3 send`: write a snapshot as a stream, whole or against an older
//! snapshot of the same volume (the base), to any byte sink.
//!
//! The stream is deterministic: the same snapshots give the same records
//! in the same order (the plan's namespace steps, then the changed inodes
//! by number, each one's xattrs, data by offset and attributes), so a
//! receive cut off at record N is finished by generating the stream again
//! and writing from record N on ([`SendOptions::resume`]): records before
//! it are counted, not built (no file data is read for them).
//!
//! A changed regular file's data is compared extent by extent: a block
//! the snapshot maps to the same address as the base is the same block
//! (a block the base holds is never freed or rewritten while the base
//! exists), so only blocks at new addresses are sent; and the two extent
//! trees are compared as the inode tables are, skipping the nodes both
//! reach, so only the extents that differ are read. A file's holes stay
//! holes; where a block the base held became a hole, the file is cut
//! there first and everything after it sent again. A preallocated
//! (unwritten) extent reads as zeros and is sent as a hole, on either
//! side: so an address unwritten in the base and written now (filled in
//! place) is a change.
//!
//! Calls the engine (a snapshot opened read-only through [`tux3::Fs`] to
//! read names, xattrs and file data with their checksums checked, and the
//! backend to find the snapshots' inode tables), `plan.rs` and the
//! format (`mod.rs`).

use super::plan::{self, Changed};
use super::resume::Token;
use super::{Attrs, Begin, Record, Result, StreamError, Writer, DATA_CHUNK};
use crate::datamap;
use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Arc;
use tux3::backend::Backend;
use tux3::device::Device;
use tux3::structures::btree::TreeKind;
use tux3::structures::extent::{self, Extent};
use tux3::structures::inode::InodeAttrs;
use tux3::types::{FileType, OpenOptions, SnapOrigin, SnapshotInfo, ROOT_INO};
use tux3::Fs;

/// What to send.
#[derive(Default)]
pub struct SendOptions<'a> {
    /// The snapshot to send (`None` with a resume token: the one it names).
    pub snapshot: Option<&'a [u8]>,
    /// The base of an incremental stream (`None` with a resume token: the
    /// one it names, if any).
    pub base: Option<&'a [u8]>,
    /// Continue a receive that stopped where this token says.
    pub resume: Option<Token>,
}

/// What a send wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sent {
    /// Records in the whole stream (`Begin` and `End` included).
    pub records: u64,
    /// Bytes written (a resumed stream: those after the records skipped).
    pub bytes: u64,
    /// File bytes carried by `Write` records written.
    pub data_bytes: u64,
}

fn quoted(name: &[u8]) -> String {
    format!("\"{}\"", String::from_utf8_lossy(name))
}

/// The snapshot named `name`, or the one whose origin is `origin`.
fn find(all: &[SnapshotInfo], name: Option<&[u8]>, origin: Option<SnapOrigin>) -> Result<SnapshotInfo> {
    let found = all
        .iter()
        .filter(|s| !s.deleting)
        .find(|s| name.is_none_or(|n| s.name == n) && origin.is_none_or(|o| s.origin == o));
    found.cloned().ok_or_else(|| {
        StreamError::Refused(match (name, origin) {
            (Some(n), Some(_)) => format!("snapshot {} is not the one the resume token names", quoted(n)),
            (Some(n), None) => format!("no snapshot {}", quoted(n)),
            (None, Some(o)) => format!(
                "no snapshot of origin {:016x}/{} (the one the resume token names)",
                o.volume, o.id
            ),
            (None, None) => "no snapshot named".to_string(),
        })
    })
}

fn open_snapshot(dev: &Arc<dyn Device>, name: &[u8]) -> Result<Fs> {
    let opts = OpenOptions {
        read_only: true,
        snapshot: Some(name.to_vec()),
        ..OpenOptions::default()
    };
    Fs::open(dev.clone(), opts).map_err(StreamError::engine(format!("opening snapshot {}", quoted(name))))
}

/// Write the stream `opts` asks for, of the volume on `dev`, to `out`;
/// `progress(bytes)` is called now and then with the bytes written.
pub fn send(
    dev: Arc<dyn Device>,
    opts: &SendOptions,
    out: impl Write,
    progress: &mut dyn FnMut(u64),
) -> Result<Sent> {
    // The live volume's superblock, log and snapshot table are read from
    // the device once for all the opens below (`ReadOnce`: as of one
    // moment, while a mount's server may be writing them), not through
    // the read-ahead; the snapshots, which never change, in large requests
    // where they run in block order (`ReadAhead`).
    let live_dev: Arc<dyn Device> = Arc::new(super::ahead::ReadOnce::new(dev));
    let dev: Arc<dyn Device> = Arc::new(super::ahead::ReadAhead::new(live_dev.clone()));
    let (be, _) = Backend::open(live_dev.clone(), true).map_err(StreamError::engine("opening the volume"))?;
    let all = {
        let live = Fs::open(
            live_dev,
            OpenOptions {
                read_only: true,
                ..OpenOptions::default()
            },
        )
        .map_err(StreamError::engine("opening the volume"))?;
        live.snapshot_list()
            .map_err(StreamError::engine("listing snapshots"))?
    };
    let token = opts.resume.as_ref();
    let snap = find(&all, opts.snapshot, token.map(|t| t.source))?;
    let base = match (opts.base, token) {
        (None, Some(t)) => t.base.map(|o| find(&all, None, Some(o))).transpose()?,
        (Some(b), Some(t)) => {
            let Some(o) = t.base else {
                return Err(StreamError::Refused(
                    "the resume token is for a full stream: give no base".into(),
                ));
            };
            Some(find(&all, Some(b), Some(o))?)
        }
        (b, None) => b.map(|b| find(&all, Some(b), None)).transpose()?,
    };
    if let Some(b) = &base {
        if b.id >= snap.id {
            return Err(StreamError::Refused(format!(
                "base {} is not older than snapshot {}",
                quoted(&b.name),
                quoted(&snap.name)
            )));
        }
    }
    let root_of = |name: &[u8]| {
        be.snaps
            .find(name)
            .map(|r| r.itable)
            .ok_or_else(|| StreamError::Refused(format!("no snapshot {}", quoted(name))))
    };
    let (snap_root, base_root) = (
        root_of(&snap.name)?,
        base.as_ref().map(|b| root_of(&b.name)).transpose()?,
    );
    let fs = open_snapshot(&dev, &snap.name)?;
    let fs_base = base.as_ref().map(|b| open_snapshot(&dev, &b.name)).transpose()?;
    let mut taken = |name: &[u8]| -> tux3::Result<bool> {
        for f in std::iter::once(&fs).chain(fs_base.as_ref()) {
            match f.lookup(ROOT_INO, name) {
                Ok(_) => return Ok(true),
                Err(e) if e.errno() == tux3::Errno::ENOENT => {}
                Err(e) => return Err(e),
            }
        }
        Ok(false)
    };
    let comparing = || StreamError::engine(format!("comparing snapshot {}", quoted(&snap.name)));
    // A full stream is read off the snapshot as it goes (`full.rs`); an
    // incremental one is planned from what differs first.
    let plan = match base_root {
        Some(_) => Some(plan::plan(dev.as_ref(), base_root, snap_root, &mut taken).map_err(comparing())?),
        None => None,
    };
    let staging = match &plan {
        Some(p) => p.staging.clone(),
        None => plan::staging(dev.as_ref(), None, snap_root, &mut taken).map_err(comparing())?,
    };

    let resume_from = token.map_or(1, |t| t.next.max(1));
    let mut w = Writer::new(out, resume_from)?;
    let mut sent = Sent::default();
    w.put(&Record::Begin(Begin {
        source: snap.origin,
        base: base.as_ref().map(|b| b.origin),
        resume_from,
        staging_ino: staging.0,
        block_size: dev.block_size(),
        name: snap.name.clone(),
        staging_name: staging.1,
    }))?;
    let Some(plan) = plan else {
        return full_stream(dev.as_ref(), &be, &fs, snap_root, w, progress);
    };
    for mut r in plan.namespace {
        if !w.wants_next() {
            w.skip();
            continue;
        }
        if let Record::Create {
            ino, mode, target, ..
        } = &mut r
        {
            if FileType::from_mode(*mode) == Some(FileType::Symlink) {
                *target = fs
                    .readlink(*ino)
                    .map_err(StreamError::engine(format!("reading symlink {ino}")))?;
            }
        }
        w.put(&r)?;
        progress(w.bytes);
    }
    let mut gen = Contents {
        dev: dev.as_ref(),
        be: &be,
        fs: &fs,
        fs_base: fs_base.as_ref(),
        w: &mut w,
        data_bytes: 0,
    };
    for c in &plan.changed {
        gen.inode(c)?;
        progress(gen.w.bytes);
    }
    sent.data_bytes = gen.data_bytes;
    w.put(&Record::End(attrs_of(&plan.root)))?;
    w.flush()?;
    progress(w.bytes);
    sent.records = w.next_seq();
    sent.bytes = w.bytes;
    Ok(sent)
}

/// The rest of a full stream after `Begin`.
fn full_stream<W: Write>(
    dev: &dyn Device,
    be: &Backend,
    fs: &Fs,
    snap_root: tux3::structures::superblock::Root,
    mut w: Writer<W>,
    progress: &mut dyn FnMut(u64),
) -> Result<Sent> {
    super::full::namespace(fs, &mut w, progress)?;
    let mut gen = Contents {
        dev,
        be,
        fs,
        fs_base: None,
        w: &mut w,
        data_bytes: 0,
    };
    let mut root = None;
    super::full::inodes(dev, snap_root, &mut |c| {
        if c.ino == ROOT_INO {
            root = Some(attrs_of(&c.snap));
        }
        gen.inode(&c)?;
        progress(gen.w.bytes);
        Ok(())
    })?;
    let data_bytes = gen.data_bytes;
    let root = root.ok_or_else(|| StreamError::Engine {
        what: "reading the snapshot".into(),
        err: tux3::Error::corrupt(snap_root.addr, "the snapshot has no root directory"),
    })?;
    w.put(&Record::End(root))?;
    w.flush()?;
    progress(w.bytes);
    Ok(Sent {
        records: w.next_seq(),
        bytes: w.bytes,
        data_bytes,
    })
}

/// Mode, owner and times of a record.
pub fn attrs_of(a: &InodeAttrs) -> Attrs {
    Attrs {
        mode: a.mode,
        uid: a.uid,
        gid: a.gid,
        atime: a.atime,
        mtime: a.mtime,
        ctime: a.ctime,
        btime: a.btime,
    }
}

/// Writes the contents of the changed inodes.
struct Contents<'a, W: Write> {
    dev: &'a dyn Device,
    be: &'a Backend,
    fs: &'a Fs,
    /// The base snapshot of an incremental stream.
    fs_base: Option<&'a Fs>,
    w: &'a mut Writer<W>,
    data_bytes: u64,
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

    fn inode(&mut self, c: &Changed) -> Result<()> {
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
            let (mut off, end) = (s * bs, (e * bs).min(size));
            while off < end {
                let n = (end - off).min(DATA_CHUNK as u64) as usize;
                if self.w.wants_next() {
                    let got = self
                        .fs
                        .read_into(c.ino, off, &mut buf[..n])
                        .map_err(StreamError::engine(format!("reading inode {} at {off}", c.ino)))?;
                    if got != n {
                        return Err(StreamError::Engine {
                            what: format!("reading inode {} at {off}", c.ino),
                            err: tux3::Error::corrupt(0, format!("{got} bytes where {n} were expected")),
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
        if cur != size {
            self.w.put(&Record::Truncate { ino: c.ino, size })?;
        }
        Ok(())
    }
}

/// The extents of sorted, disjoint `list` that overlap blocks `[s, e)`.
fn overlapping(list: &[Extent], s: u64, e: u64) -> &[Extent] {
    let from = list.partition_point(|x| x.lblock + x.count <= s);
    let to = list.partition_point(|x| x.lblock < e);
    list.get(from..to.max(from)).unwrap_or_default()
}

/// The block ranges of `[s, e)` that no extent of `list` maps.
fn gaps(list: &[Extent], s: u64, e: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut at = s;
    for x in overlapping(list, s, e) {
        if x.lblock > at {
            out.push((at, x.lblock.min(e)));
        }
        at = at.max(x.lblock + x.count);
    }
    if at < e {
        out.push((at, e));
    }
    out
}

/// The block ranges `now` maps that `before` does not map to the same
/// addresses (only its blocks below `kept` count), in order, merged.
fn changed_runs(now: &[Extent], before: &[Extent], kept: u64) -> Vec<(u64, u64)> {
    let mut runs: Vec<(u64, u64)> = Vec::new();
    let mut push = |s: u64, e: u64| match runs.last_mut() {
        Some(r) if r.1 == s => r.1 = e,
        _ => runs.push((s, e)),
    };
    for n in now {
        let (s, e) = (n.lblock, n.lblock + n.count);
        // Where the base maps the same blocks to the same addresses.
        let mut at = s;
        for o in overlapping(before, s, e.min(kept)) {
            let same_place = n.pblock.wrapping_sub(n.lblock) == o.pblock.wrapping_sub(o.lblock);
            if !same_place {
                continue;
            }
            let (os, oe) = (o.lblock.max(s), (o.lblock + o.count).min(e).min(kept));
            if os >= oe {
                continue;
            }
            if os > at {
                push(at, os);
            }
            at = at.max(oe);
        }
        if at < e {
            push(at, e);
        }
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn x(lblock: u64, pblock: u64, count: u64) -> Extent {
        Extent {
            lblock,
            pblock,
            count,
            birth: 1,
            unwritten: false,
            sums: Vec::new(),
        }
    }

    #[test]
    fn only_blocks_at_new_addresses_are_changed() {
        // One block rewritten in the middle of a 10-block extent.
        let before = [x(0, 100, 10)];
        let now = [x(0, 100, 4), x(4, 500, 1), x(5, 105, 5)];
        assert_eq!(changed_runs(&now, &before, 10), vec![(4, 5)]);
        // Blocks past what the receiver kept are sent again.
        assert_eq!(changed_runs(&now, &before, 6), vec![(4, 5), (6, 10)]);
        // A new file: everything.
        assert_eq!(changed_runs(&now, &[], 0), vec![(0, 10)]);
    }

    #[test]
    fn gaps_are_the_unmapped_blocks() {
        let list = [x(2, 100, 2), x(6, 200, 1)];
        assert_eq!(gaps(&list, 0, 10), vec![(0, 2), (4, 6), (7, 10)]);
        assert_eq!(gaps(&list, 2, 4), vec![]);
        assert_eq!(gaps(&list, 3, 7), vec![(4, 6)]);
    }
}
