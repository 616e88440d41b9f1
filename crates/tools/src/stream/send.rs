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
//! This file finds the snapshots and writes the stream around its inodes
//! (`Begin`, the namespace steps, `End`); `contents.rs` writes each changed
//! inode's records, and `sent_blocks.rs` finds the data sent before that a
//! clone can name.
//!
//! Calls the engine (a snapshot opened read-only through [`tux3::Fs`] to
//! read names and symlink targets, and the backend to find the snapshots'
//! inode tables), `plan.rs`, `full.rs`, `contents.rs`, `sent_blocks.rs`
//! and the format (`mod.rs`).

use super::contents::Contents;
use super::plan;
use super::resume::Token;
use super::sent_blocks::SentBlocks;
use super::{Attrs, Begin, Record, Result, StreamError, Writer};
use std::io::Write;
use std::sync::Arc;
use tux3::backend::Backend;
use tux3::device::Device;
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
