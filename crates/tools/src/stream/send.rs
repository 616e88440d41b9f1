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
    /// Most places [`SentBlocks`] remembers (`None`:
    /// [`CLONE_MAP_ENTRIES`]; `Some(0)`: send every clone as data). A
    /// resumed stream must be sent with the same value as the stream it
    /// resumes (the records differ otherwise).
    pub clone_map_entries: Option<usize>,
}

/// Most places of data sent that a send remembers to find clones by:
/// about 64 bytes each (40 of key and value, the rest a B-tree's nodes
/// two-thirds full), so at most 32 MiB. An entry is one run of blocks
/// contiguous on disk and in its file (an extent or part of one), so it
/// takes over half a million extents sent before a clone of a later one
/// is sent as data (correct, just not shared on the receiver).
pub const CLONE_MAP_ENTRIES: usize = 1 << 19;

/// Most bytes one `Clone` record names (a writer's choice: a record may
/// name up to 2^64 − 1): a receiver whose clone still copies does at most
/// this much in one engine call.
pub const CLONE_CHUNK: u64 = 16 << 20;

/// What a send wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sent {
    /// Records in the whole stream (`Begin` and `End` included).
    pub records: u64,
    /// Bytes written (a resumed stream: those after the records skipped).
    pub bytes: u64,
    /// File bytes carried by `Write` records written.
    pub data_bytes: u64,
    /// File bytes named by `Clone` records written (sent as a reference).
    pub cloned_bytes: u64,
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
        let map = opts.clone_map_entries.unwrap_or(CLONE_MAP_ENTRIES);
        return full_stream(dev.as_ref(), &be, &fs, snap_root, w, map, progress);
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
        cloned_bytes: 0,
        sent: SentBlocks::new(opts.clone_map_entries.unwrap_or(CLONE_MAP_ENTRIES)),
    };
    for c in &plan.changed {
        gen.inode(c)?;
        progress(gen.w.bytes);
    }
    sent.data_bytes = gen.data_bytes;
    sent.cloned_bytes = gen.cloned_bytes;
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
    clone_map_entries: usize,
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
        cloned_bytes: 0,
        sent: SentBlocks::new(clone_map_entries),
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
    let (data_bytes, cloned_bytes) = (gen.data_bytes, gen.cloned_bytes);
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
        cloned_bytes,
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
    cloned_bytes: u64,
    /// Where the data sent so far went, by snapshot address.
    sent: SentBlocks,
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

/// What to send of a run of a file's blocks: data, or a reference to
/// the same blocks sent before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Piece {
    /// Blocks `[s, e)`, as `Write` records (the last cut at the size).
    Data(u64, u64),
    /// Bytes `offset..+len` read as `src_offset..+len` of inode `src`.
    Clone {
        offset: u64,
        len: u64,
        src: u64,
        src_offset: u64,
    },
}

/// Where a run of blocks sent as data went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Place {
    ino: u64,
    /// Its first logical block in `ino`.
    lblock: u64,
    count: u64,
    /// `ino`'s size (a clone may not name bytes past it: they were not sent).
    size: u64,
}

/// Where the blocks of the snapshot sent as data so far went: first
/// physical block → [`Place`], the runs disjoint, at most `limit` of them
/// (see [`CLONE_MAP_ENTRIES`]; once full, nothing more is remembered).
/// Built the same on a resumed send (the records skipped are decided as
/// if written), so the records after the resume point are the same.
struct SentBlocks {
    map: BTreeMap<u64, Place>,
    limit: usize,
}

impl SentBlocks {
    fn new(limit: usize) -> SentBlocks {
        SentBlocks {
            map: BTreeMap::new(),
            limit,
        }
    }

    /// The places sent before of physical blocks `[p, p + n)`, clipped to
    /// them: (first physical block, place), in address order.
    fn sent_of(&self, p: u64, n: u64) -> Vec<(u64, Place)> {
        let first = match self.map.range(..=p).next_back() {
            Some((&s, v)) if s + v.count > p => s,
            _ => p,
        };
        let mut out = Vec::new();
        for (&s, v) in self.map.range(first..p + n) {
            let (from, to) = (s.max(p), (s + v.count).min(p + n));
            if from < to {
                let skip = from - s;
                out.push((
                    from,
                    Place {
                        lblock: v.lblock + skip,
                        count: to - from,
                        ..*v
                    },
                ));
            }
        }
        out
    }

    /// Remember that physical blocks from `p` went to `place`, joined to
    /// the run before when it continues it on disk and in the same file.
    fn remember(&mut self, p: u64, place: Place) {
        if let Some((&s, v)) = self.map.range_mut(..p).next_back() {
            if s + v.count == p && v.ino == place.ino && v.lblock + v.count == place.lblock {
                v.count += place.count;
                v.size = place.size;
                return;
            }
        }
        if self.map.len() < self.limit {
            self.map.insert(p, place);
        }
    }

    /// What to send of blocks `[s, e)` of inode `ino` (size `size`, every
    /// block of the range mapped by `extents`, sorted): where blocks were
    /// sent before, whole blocks of the source inside its size, a clone;
    /// the rest data, remembered. Adjacent data pieces are joined.
    fn pieces(&mut self, ino: u64, size: u64, bs: u64, extents: &[Extent], s: u64, e: u64) -> Vec<Piece> {
        let mut out: Vec<Piece> = Vec::new();
        let data = |out: &mut Vec<Piece>, a: u64, b: u64| match out.last_mut() {
            Some(Piece::Data(_, end)) if *end == a => *end = b,
            _ => out.push(Piece::Data(a, b)),
        };
        for x in overlapping(extents, s, e) {
            let (ls, le) = (x.lblock.max(s), (x.lblock + x.count).min(e));
            if ls >= le {
                continue;
            }
            let p = x.pblock + (ls - x.lblock);
            // Logical blocks [at, ..) of `ino` not yet decided.
            let mut at = ls;
            let mut fresh = Vec::new();
            for (from, place) in self.sent_of(p, le - ls) {
                let l = ls + (from - p);
                if l > at {
                    data(&mut out, at, l);
                    fresh.push((at, l));
                }
                // Bytes of this file the blocks hold, and whether the
                // source has them all (its last block may be cut short).
                let offset = l * bs;
                let mut len = (place.count * bs).min(size.saturating_sub(offset));
                let src_offset = place.lblock * bs;
                if src_offset + len > place.size {
                    len = place.size.saturating_sub(src_offset) / bs * bs;
                }
                let cloned = len.div_ceil(bs);
                // A clone continuing the last one in both files joins it
                // (extents of summed files hold 64 blocks at most: one
                // record each would cost a clone of 100 MiB 400 records).
                match out.last_mut() {
                    Some(Piece::Clone {
                        offset: o,
                        len: n,
                        src: f,
                        src_offset: so,
                    }) if len > 0 && *f == place.ino && *o + *n == offset && *so + *n == src_offset => {
                        *n += len
                    }
                    _ if len > 0 => out.push(Piece::Clone {
                        offset,
                        len,
                        src: place.ino,
                        src_offset,
                    }),
                    _ => {}
                }
                // What the source cannot give goes as data (not remembered:
                // those blocks are remembered at their first place).
                if cloned < place.count {
                    data(&mut out, l + cloned, l + place.count);
                }
                at = l + place.count;
            }
            if at < le {
                data(&mut out, at, le);
                fresh.push((at, le));
            }
            for (a, b) in fresh {
                let place = Place {
                    ino,
                    lblock: a,
                    count: b - a,
                    size,
                };
                self.remember(x.pblock + (a - x.lblock), place);
            }
        }
        out
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

    #[test]
    fn blocks_sent_before_are_cloned_and_the_rest_is_data() {
        let bs = 4096;
        let mut m = SentBlocks::new(100);
        // Inode 16: 10 blocks at 100.., sent as data and remembered.
        let a = [x(0, 100, 10)];
        assert_eq!(m.pieces(16, 10 * bs, bs, &a, 0, 10), vec![Piece::Data(0, 10)]);
        // Inode 17: blocks 2.. at 104.. (6 of 16's, then 2 of its own).
        let b = [x(2, 104, 8)];
        let size = 10 * bs - 100;
        assert_eq!(
            m.pieces(17, size, bs, &b, 2, 10),
            vec![
                Piece::Clone {
                    offset: 2 * bs,
                    len: 6 * bs,
                    src: 16,
                    src_offset: 4 * bs,
                },
                Piece::Data(8, 10),
            ]
        );
        // Inode 18 maps one of 17's own blocks and one of 16's: two
        // sources; its last block is cut by its size.
        let c = [x(0, 110, 1), x(1, 100, 1)];
        assert_eq!(
            m.pieces(18, bs + 10, bs, &c, 0, 2),
            vec![
                Piece::Clone {
                    offset: 0,
                    len: bs,
                    src: 17,
                    src_offset: 8 * bs,
                },
                Piece::Clone {
                    offset: bs,
                    len: 10,
                    src: 16,
                    src_offset: 0,
                },
            ]
        );
        // 17's last block (111, its block 9) holds bytes only to its
        // size: a file reading the whole block gets it as data.
        let d = [x(0, 111, 1)];
        assert_eq!(m.pieces(19, bs, bs, &d, 0, 1), vec![Piece::Data(0, 1)]);
        // ... one reading only what 17 has gets a clone.
        assert_eq!(
            m.pieces(20, bs - 100, bs, &d, 0, 1),
            vec![Piece::Clone {
                offset: 0,
                len: bs - 100,
                src: 17,
                src_offset: 9 * bs,
            }]
        );
    }

    #[test]
    fn clones_continuing_each_other_are_one_piece() {
        let bs = 4096;
        let mut m = SentBlocks::new(100);
        // Inode 16: three extents, contiguous in the file, not on disk.
        let a = [x(0, 100, 4), x(4, 300, 4), x(8, 200, 4)];
        assert_eq!(m.pieces(16, 12 * bs, bs, &a, 0, 12), vec![Piece::Data(0, 12)]);
        // Inode 17 maps them alike: one clone of all 12 blocks.
        assert_eq!(
            m.pieces(17, 12 * bs, bs, &a, 0, 12),
            vec![Piece::Clone {
                offset: 0,
                len: 12 * bs,
                src: 16,
                src_offset: 0,
            }]
        );
        // Inode 18 maps them backwards: three clones.
        let b = [x(0, 200, 4), x(4, 300, 4), x(8, 100, 4)];
        let want = |offset, src_offset| Piece::Clone {
            offset,
            len: 4 * bs,
            src: 16,
            src_offset,
        };
        assert_eq!(
            m.pieces(18, 12 * bs, bs, &b, 0, 12),
            vec![want(0, 8 * bs), want(4 * bs, 4 * bs), want(8 * bs, 0)]
        );
    }

    #[test]
    fn a_full_map_remembers_no_more_and_sends_data() {
        let bs = 4096;
        let mut m = SentBlocks::new(1);
        m.pieces(16, bs, bs, &[x(0, 100, 1)], 0, 1);
        // Contiguous on disk and in the file: joined, no new entry.
        m.pieces(16, 2 * bs, bs, &[x(1, 101, 1)], 1, 2);
        m.pieces(17, bs, bs, &[x(0, 500, 1)], 0, 1);
        assert_eq!(m.map.len(), 1);
        assert_eq!(
            m.pieces(18, 2 * bs, bs, &[x(0, 100, 2)], 0, 2),
            vec![Piece::Clone {
                offset: 0,
                len: 2 * bs,
                src: 16,
                src_offset: 0,
            }]
        );
        assert_eq!(
            m.pieces(19, bs, bs, &[x(0, 500, 1)], 0, 1),
            vec![Piece::Data(0, 1)]
        );
    }
}
