//! `tux3 receive`: apply a send stream to a volume's live image and take
//! the snapshot it carries.
//!
//! Before the first change, `Begin` is checked against the target: a
//! full stream needs an empty live volume (a root without entries or
//! xattrs: what mkfs makes); an incremental one needs the base, found by
//! its origin, and the live volume is first made the base's image
//! (`Fs::snapshot_rollback`: whatever was changed on it since is
//! dropped, as `zfs receive -F` does). The snapshot's name must be free
//! and its origin not here already.
//!
//! Records are then applied in order through the engine API; inodes are
//! created under the source's numbers (`Fs::create_numbered`). Every
//! [`ReceiveOptions::checkpoint_bytes`] or `checkpoint_records` the
//! progress is committed (`Fs::sync`) together with the resume token
//! (`resume.rs`), and again when the stream breaks off or goes bad, so a
//! receive cut anywhere (a pipe broken, either side killed, a crash)
//! leaves the live volume at a point the token names and no snapshot. A
//! resumed stream starts at that point; a whole stream sent again skips
//! what was applied. Should a commit between checkpoints (the receiver's
//! own, or the engine's under memory or space pressure) have made more
//! durable than the token says, the records between are applied again:
//! a resumed receive skips each whose work is done or moot
//! ([`Apply::done_already`]: the inode it makes exists, the entry it
//! moves or removes no longer names its inode, the inode it changes is
//! gone).
//!
//! At `End` the token goes, the root directory gets its own attributes
//! back (the token's xattr changed its ctime) and the snapshot is taken
//! with the stream's origin (`Fs::snapshot_create_received`), in one unify.
//!
//! Calls the engine API ([`tux3::Fs`]), the format (`mod.rs`) and the
//! token (`resume.rs`).

use super::resume::{self, Token, TOKEN_XATTR};
use super::{Attrs, Begin, Reader, Record, Result, StreamError};
use std::io::Read;
use tux3::types::{FileType, RenameFlags, SetAttr, SnapshotInfo, XattrMode, ROOT_INO};
use tux3::{Errno, Fs};

/// How often a receive commits its progress.
#[derive(Debug, Clone, Copy)]
pub struct ReceiveOptions {
    /// After this many bytes of records applied...
    pub checkpoint_bytes: u64,
    /// ...or this many records.
    pub checkpoint_records: u64,
    /// Commit the token of the last record applied when the stream breaks
    /// off (off only in tests: what a crash between checkpoints leaves,
    /// with a commit of changes past the token).
    pub checkpoint_at_error: bool,
}

impl Default for ReceiveOptions {
    fn default() -> Self {
        ReceiveOptions {
            checkpoint_bytes: 2 << 20,
            checkpoint_records: 20_000,
            checkpoint_at_error: true,
        }
    }
}

/// What a receive made.
#[derive(Debug, Clone)]
pub struct Received {
    pub snapshot: SnapshotInfo,
    /// Records applied by this receive (not those a cut one applied).
    pub records: u64,
    /// Bytes of stream read.
    pub bytes: u64,
}

fn quoted(name: &[u8]) -> String {
    format!("\"{}\"", String::from_utf8_lossy(name))
}

fn origin_text(o: tux3::types::SnapOrigin) -> String {
    format!("{:016x}/{}", o.volume, o.id)
}

/// Read a stream from `inp` and apply it to the live volume of `fs`;
/// `progress(bytes)` is called now and then with the bytes read.
pub fn receive(
    fs: &Fs,
    inp: impl Read,
    opts: &ReceiveOptions,
    progress: &mut dyn FnMut(u64),
) -> Result<Received> {
    let mut r = Reader::new(inp)?;
    let begin = match r.read()? {
        Some((_, Record::Begin(b))) => b,
        // The reader refuses any other first record.
        _ => {
            return Err(StreamError::Cut {
                record: 0,
                offset: 16,
            })
        }
    };
    let (token, resumed) = prepare(fs, &begin)?;
    let mut a = Apply {
        fs,
        token,
        tolerant: resumed,
        since_bytes: 0,
        since_records: 0,
        synced: false,
        records: 0,
    };
    let outcome = a.run(&mut r, &begin, opts, progress);
    match outcome {
        Ok(snapshot) => Ok(Received {
            snapshot,
            records: a.records,
            bytes: r.offset,
        }),
        Err(e) => {
            // Keep what was applied: a resume starts after it.
            if opts.checkpoint_at_error {
                let _ = a.checkpoint();
            }
            Err(e)
        }
    }
}

/// Check `Begin` against the target and get it ready: the token of the
/// receive from there on, and whether it resumes one that stopped.
fn prepare(fs: &Fs, b: &Begin) -> Result<(Token, bool)> {
    let held = resume::stored(fs)?;
    let want = Token {
        source: b.source,
        base: b.base,
        next: b.resume_from,
    };
    if let Some(t) = held {
        if (t.source, t.base) != (b.source, b.base) {
            return Err(StreamError::Refused(format!(
                "a receive of another stream (snapshot {}) is in progress here: resume it with \
                 tux3 send --resume {}, or abandon it with tux3 receive --abort",
                origin_text(t.source),
                t.encode()
            )));
        }
        if b.resume_from > t.next {
            return Err(StreamError::Refused(format!(
                "the stream resumes at record {} but this receive stopped before record {}: \
                 send with --resume {}",
                b.resume_from,
                t.next,
                t.encode()
            )));
        }
        return Ok((t, true));
    }
    if b.resume_from > 1 {
        return Err(StreamError::Refused(format!(
            "the stream resumes at record {}, but no receive is in progress here: send it whole",
            b.resume_from
        )));
    }
    let all = fs
        .snapshot_list()
        .map_err(StreamError::engine("listing snapshots"))?;
    if let Some(s) = all.iter().find(|s| !s.deleting && s.name == b.name) {
        return Err(StreamError::Refused(format!(
            "the name of snapshot {} is taken here (id {})",
            quoted(&s.name),
            s.id
        )));
    }
    if let Some(s) = all.iter().find(|s| !s.deleting && s.origin == b.source) {
        return Err(StreamError::Refused(format!(
            "this snapshot ({}) is here already, as {}",
            origin_text(b.source),
            quoted(&s.name)
        )));
    }
    match b.base {
        None => {
            let entries = fs
                .readdir(ROOT_INO, 0, 1)
                .map_err(StreamError::engine("reading the root"))?;
            let xattrs = fs
                .listxattr(ROOT_INO)
                .map_err(StreamError::engine("reading the root"))?;
            if !entries.is_empty() || !xattrs.is_empty() {
                return Err(StreamError::Refused(
                    "a full stream needs an empty volume (as mkfs makes it), and this one's root \
                     directory is not empty"
                        .into(),
                ));
            }
        }
        Some(o) => {
            let Some(base) = all.iter().find(|s| !s.deleting && s.origin == o) else {
                return Err(StreamError::Refused(format!(
                    "the stream is incremental from snapshot {}, which this volume does not have: \
                     send a full stream, or one from a snapshot it has",
                    origin_text(o)
                )));
            };
            fs.snapshot_rollback(&base.name)
                .map_err(StreamError::engine(format!(
                    "making the volume its base snapshot {} again",
                    quoted(&base.name)
                )))?;
        }
    }
    resume::store(fs, &want)?;
    fs.sync()
        .map_err(StreamError::engine("committing the start of the receive"))?;
    Ok((want, false))
}

/// Applies records.
struct Apply<'a> {
    fs: &'a Fs,
    /// `next`: the first record not applied.
    token: Token,
    /// Take a record as done when its effect is there already.
    tolerant: bool,
    since_bytes: u64,
    since_records: u64,
    records: u64,
    /// A checkpoint of this receive was made durable: the first one waits
    /// for its commit, so a receive cut off soon after it keeps it.
    synced: bool,
}

impl Apply<'_> {
    fn run<R: Read>(
        &mut self,
        r: &mut Reader<R>,
        begin: &Begin,
        opts: &ReceiveOptions,
        progress: &mut dyn FnMut(u64),
    ) -> Result<SnapshotInfo> {
        loop {
            let at = r.offset;
            let Some((seq, rec)) = r.read()? else {
                return Err(StreamError::Cut {
                    record: self.token.next.max(begin.resume_from),
                    offset: at,
                });
            };
            if seq < self.token.next {
                continue; // applied by the receive that was cut
            }
            if let Record::End(root) = rec {
                return self.finish(begin, &root);
            }
            self.apply(seq, &rec)?;
            self.records += 1;
            self.token.next = seq + 1;
            self.since_bytes += r.offset - at;
            self.since_records += 1;
            if self.since_bytes >= opts.checkpoint_bytes || self.since_records >= opts.checkpoint_records {
                self.checkpoint()?;
                progress(r.offset);
            }
        }
    }

    /// Commit what was applied with the token that says so. With a
    /// background committer the commit is only started (but the first of
    /// the receive is waited for, so a receive cut off again and again
    /// still moves on): the token joins the delta after the changes it
    /// covers, so any commit that holds it holds them, and the stream goes
    /// on while the commit writes.
    fn checkpoint(&mut self) -> Result<()> {
        resume::store(self.fs, &self.token)?;
        if !self.synced || !self.fs.commit_soon() {
            self.synced = true;
            self.fs.sync().map_err(StreamError::engine(format!(
                "committing up to record {}",
                self.token.next
            )))?;
        }
        self.since_bytes = 0;
        self.since_records = 0;
        Ok(())
    }

    fn finish(&mut self, begin: &Begin, root: &Attrs) -> Result<SnapshotInfo> {
        self.set_attrs(ROOT_INO, root)
            .map_err(StreamError::engine("setting the root directory's attributes"))?;
        // The token goes in the unify that takes the snapshot, no commit
        // between (one could make its removal durable alone).
        let made = self
            .fs
            .snapshot_create_received_clearing(&begin.name, begin.source, TOKEN_XATTR);
        made.map_err(|e| match e.errno() {
            Errno::EEXIST => StreamError::Refused(format!(
                "the name of snapshot {} was taken here meanwhile",
                quoted(&begin.name)
            )),
            _ => StreamError::engine(format!("taking snapshot {}", quoted(&begin.name)))(e),
        })
    }

    fn set_attrs(&self, ino: u64, a: &Attrs) -> tux3::Result<()> {
        let symlink = a.mode & libc::S_IFMT == libc::S_IFLNK;
        let set = SetAttr {
            mode: (!symlink).then_some(a.mode & 0o7777),
            uid: Some(a.uid),
            gid: Some(a.gid),
            size: None,
            atime: Some(a.atime),
            mtime: Some(a.mtime),
            ctime: Some(a.ctime),
        };
        self.fs.setattr(ino, &set)?;
        self.fs.set_btime(ino, a.btime)
    }

    /// Whether `parent/name` names `ino`, a directory or not as `dir` says.
    fn names(&self, parent: u64, name: &[u8], ino: u64, dir: bool) -> bool {
        self.fs
            .lookup(parent, name)
            .is_ok_and(|a| a.ino == ino && (a.kind == FileType::Directory) == dir)
    }

    fn exists(&self, ino: u64) -> bool {
        self.fs.getattr(ino).is_ok()
    }

    /// A resumed receive: whether `rec` has nothing to do, because what
    /// it would change is not there (it was applied before, and maybe
    /// undone by a later record) or what it would make is.
    fn done_already(&self, rec: &Record) -> bool {
        match rec {
            Record::Create { ino, .. } => self.exists(*ino),
            Record::Link { ino, parent, name } => {
                let file = self.fs.getattr(*ino).is_ok_and(|a| a.kind != FileType::Directory);
                !file || self.fs.lookup(*parent, name).is_ok()
            }
            Record::Unlink { parent, ino, name } => !self.names(*parent, name, *ino, false),
            Record::Rmdir { parent, ino, name } => !self.names(*parent, name, *ino, true),
            Record::Rename {
                parent,
                ino,
                is_dir,
                name,
                ..
            } => !self.names(*parent, name, *ino, *is_dir),
            Record::Write { ino, .. }
            | Record::Truncate { ino, .. }
            | Record::SetXattr { ino, .. }
            | Record::RemoveXattr { ino, .. }
            | Record::Attr { ino, .. }
            | Record::Symlink { ino, .. }
            | Record::Rdev { ino, .. } => !self.exists(*ino),
            // Applied again it reads the same bytes into the same place:
            // its source is never changed after the data it names is sent.
            Record::Clone { dst, .. } => !self.exists(*dst),
            Record::Begin(_) | Record::End(_) => false,
        }
    }

    fn apply(&mut self, seq: u64, rec: &Record) -> Result<()> {
        let fs = self.fs;
        let t = self.tolerant;
        if t && self.done_already(rec) {
            return Ok(());
        }
        let r = match rec {
            Record::Create {
                parent,
                ino,
                mode,
                uid,
                gid,
                rdev,
                btime,
                name,
                target,
            } => {
                let target = (*mode & libc::S_IFMT == libc::S_IFLNK).then_some(&target[..]);
                let make =
                    || fs.create_numbered(*parent, name, *ino, *mode, *rdev, *uid, *gid, *btime, target);
                match make() {
                    Err(e) if e.errno() == Errno::EBUSY => {
                        // The number was freed in this session (a file of
                        // another type had it): once that is durable, it
                        // may be given out again.
                        self.checkpoint()?;
                        fs.sync()
                            .map_err(StreamError::engine(format!("committing before record {seq}")))?;
                        fs.forget_freed_numbers();
                        make().map(|_| ())
                    }
                    r => r.map(|_| ()),
                }
            }
            Record::Link { ino, parent, name } => fs.link(*ino, *parent, name).map(|_| ()),
            Record::Unlink { parent, name, .. } => fs.unlink(*parent, name),
            Record::Rmdir { parent, name, .. } => fs.rmdir(*parent, name),
            Record::Rename {
                parent,
                newparent,
                name,
                newname,
                ..
            } => {
                let flags = RenameFlags {
                    noreplace: true,
                    exchange: false,
                    whiteout: None,
                };
                fs.rename(*parent, name, *newparent, newname, flags)
            }
            Record::Write { ino, offset, data } => fs.write(*ino, *offset, data).map(|_| ()),
            Record::Truncate { ino, size } => {
                let set = SetAttr {
                    size: Some(*size),
                    ..SetAttr::default()
                };
                fs.setattr(*ino, &set).map(|_| ())
            }
            Record::SetXattr { ino, name, value } => {
                if *ino == ROOT_INO && name == TOKEN_XATTR {
                    return Err(StreamError::Refused(format!(
                        "record {seq} sets the root's xattr {}, which receive keeps for itself",
                        quoted(TOKEN_XATTR)
                    )));
                }
                fs.setxattr(*ino, name, value, XattrMode::Any)
            }
            Record::RemoveXattr { ino, name } => match fs.removexattr(*ino, name) {
                Err(e) if t && e.errno() == Errno::ENODATA => Ok(()),
                r => r,
            },
            Record::Attr { ino, attrs } => self.set_attrs(*ino, attrs),
            Record::Symlink { ino, target } => fs.set_symlink_target(*ino, target),
            Record::Rdev { ino, rdev } => fs.set_rdev(*ino, *rdev),
            Record::Clone {
                dst,
                dst_offset,
                src,
                src_offset,
                len,
            } => {
                self.check_clone(seq, rec)?;
                match fs.clone_range(*src, *src_offset, *dst, *dst_offset, *len) {
                    Ok(n) if n == *len => Ok(()),
                    Ok(n) => {
                        return Err(StreamError::Refused(format!(
                            "record {seq} ({}): only {n} bytes could be cloned",
                            describe(rec)
                        )))
                    }
                    Err(e) => Err(e),
                }
            }
            Record::Begin(_) | Record::End(_) => Ok(()),
        };
        r.map_err(|e| StreamError::Engine {
            what: format!("record {seq} ({})", describe(rec)),
            err: e,
        })
    }
}

impl Apply<'_> {
    /// A `Clone` record names two regular files of this volume, a source
    /// range inside its file's size (the stream sent those bytes before),
    /// a destination range below the largest file, and not two
    /// overlapping ranges of one file: else it is refused, named, before
    /// the engine is asked.
    fn check_clone(&self, seq: u64, rec: &Record) -> Result<()> {
        let Record::Clone {
            dst,
            dst_offset,
            src,
            src_offset,
            len,
        } = *rec
        else {
            return Ok(());
        };
        let refuse = |why: String| StreamError::Refused(format!("record {seq} ({}): {why}", describe(rec)));
        let regular = |ino: u64, role: &str| match self.fs.getattr(ino) {
            Ok(a) if a.kind == FileType::Regular => Ok(a),
            Ok(a) => Err(refuse(format!(
                "its {role} inode {ino} is a {:?}, not a regular file",
                a.kind
            ))),
            Err(e) if e.errno() == Errno::ENOENT => {
                Err(refuse(format!("its {role} inode {ino} does not exist")))
            }
            Err(e) => Err(StreamError::engine(format!("record {seq} ({})", describe(rec)))(
                e,
            )),
        };
        let s = regular(src, "source")?;
        regular(dst, "destination")?;
        // (`Record::decode` refused ranges past 2^64.)
        if src_offset + len > s.size {
            return Err(refuse(format!(
                "the source's bytes {src_offset}..{} run past its size {} (a clone names only bytes \
                 the stream gave before)",
                src_offset + len,
                s.size
            )));
        }
        let bs = self
            .fs
            .statfs()
            .map_err(StreamError::engine("reading the volume's block size"))?
            .block_size;
        let max = (u64::from(bs) << 40).min(i64::MAX as u64);
        if dst_offset + len > max {
            return Err(refuse(format!(
                "the destination's end {} is past the largest file ({max} bytes)",
                dst_offset + len
            )));
        }
        if src == dst && src_offset < dst_offset + len && dst_offset < src_offset + len {
            return Err(refuse("the source and destination ranges overlap".into()));
        }
        Ok(())
    }
}

/// A record in words, for error messages.
fn describe(r: &Record) -> String {
    let n = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    match r {
        Record::Begin(_) => "Begin".into(),
        Record::End(_) => "End".into(),
        Record::Create {
            parent, ino, name, ..
        } => {
            format!("create inode {ino} as {}/{}", parent, n(name))
        }
        Record::Link { ino, parent, name } => format!("link inode {ino} as {parent}/{}", n(name)),
        Record::Unlink { parent, ino, name } => format!("unlink {parent}/{} (inode {ino})", n(name)),
        Record::Rmdir { parent, ino, name } => format!("rmdir {parent}/{} (inode {ino})", n(name)),
        Record::Rename {
            parent,
            newparent,
            name,
            newname,
            ..
        } => format!("rename {parent}/{} to {newparent}/{}", n(name), n(newname)),
        Record::Write { ino, offset, data } => {
            format!("write {} bytes at {offset} of inode {ino}", data.len())
        }
        Record::Truncate { ino, size } => format!("set the size of inode {ino} to {size}"),
        Record::SetXattr { ino, name, .. } => format!("set xattr {} of inode {ino}", n(name)),
        Record::RemoveXattr { ino, name } => format!("remove xattr {} of inode {ino}", n(name)),
        Record::Attr { ino, .. } => format!("set the attributes of inode {ino}"),
        Record::Symlink { ino, .. } => format!("set the target of symlink {ino}"),
        Record::Rdev { ino, rdev } => format!("set the device number of inode {ino} to {rdev:#x}"),
        Record::Clone {
            dst,
            dst_offset,
            src,
            src_offset,
            len,
        } => format!("clone {len} bytes at {src_offset} of inode {src} to {dst_offset} of inode {dst}"),
    }
}

/// Abandon the receive in progress on `fs`: an incremental one's live
/// volume goes back to its base; a full one's is emptied. The token
/// goes. `Ok(None)` when none was in progress.
pub fn abort(fs: &Fs) -> Result<Option<Token>> {
    let Some(t) = resume::stored(fs)? else {
        return Ok(None);
    };
    match t.base {
        Some(o) => {
            let all = fs
                .snapshot_list()
                .map_err(StreamError::engine("listing snapshots"))?;
            let Some(base) = all.iter().find(|s| !s.deleting && s.origin == o) else {
                return Err(StreamError::Refused(format!(
                    "the base snapshot {} of the receive in progress is gone",
                    origin_text(o)
                )));
            };
            fs.snapshot_rollback(&base.name)
                .map_err(StreamError::engine("rolling back to the base"))?;
        }
        None => {
            empty_dir(fs, ROOT_INO)?;
            resume::clear(fs)?;
            for name in fs
                .listxattr(ROOT_INO)
                .map_err(StreamError::engine("reading the root"))?
            {
                fs.removexattr(ROOT_INO, &name)
                    .map_err(StreamError::engine("emptying the root"))?;
            }
        }
    }
    fs.sync().map_err(StreamError::engine("committing"))?;
    Ok(Some(t))
}

/// Remove everything below directory `dir`.
fn empty_dir(fs: &Fs, dir: u64) -> Result<()> {
    loop {
        let batch = fs
            .readdir(dir, 0, 256)
            .map_err(StreamError::engine("reading a directory"))?;
        if batch.is_empty() {
            return Ok(());
        }
        for e in batch {
            let r = if e.kind == tux3::types::FileType::Directory {
                empty_dir(fs, e.ino)?;
                fs.rmdir(dir, &e.name)
            } else {
                fs.unlink(dir, &e.name)
            };
            r.map_err(StreamError::engine("emptying the volume"))?;
        }
    }
}
