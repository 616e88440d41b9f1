//! Send streams: the records — what each kind means and carries, and
//! their bodies' encoding (little-endian fields, names after a length
//! byte, the last variable field running to the body's end). The framing
//! around a body is `frame.rs`'s; docs/FORMAT.md section 15 lists every
//! byte. Calls only the engine's value types.

use super::HEAD_LEN;
use tux3::types::{SnapOrigin, Timespec};

/// Mode, owner and times of an inode, as `Attr` and `End` carry them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Attrs {
    /// The whole mode, type bits included.
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub atime: Timespec,
    pub mtime: Timespec,
    pub ctime: Timespec,
    /// Birth time (no POSIX call sets it; the engine's receive API does).
    pub btime: Timespec,
}

/// What a stream is: which snapshot, from which base.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Begin {
    /// The snapshot sent.
    pub source: SnapOrigin,
    /// The snapshot it is sent against (`None`: a full stream).
    pub base: Option<SnapOrigin>,
    /// The number of the record after `Begin`: 1 for a whole stream, more
    /// for one resumed where a receive stopped.
    pub resume_from: u64,
    /// Inode number of the staging directory the stream creates in the
    /// root while it moves entries around (free in the base and the
    /// snapshot).
    pub staging_ino: u64,
    /// The source's block size (for information).
    pub block_size: u32,
    /// The snapshot's name.
    pub name: Vec<u8>,
    /// The staging directory's name in the root (free in both).
    pub staging_name: Vec<u8>,
}

/// One record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    Begin(Begin),
    /// The end: the root directory's own attributes, set last.
    End(Attrs),
    /// `parent/name` is made as inode `ino`; `target` for a symlink.
    Create {
        parent: u64,
        ino: u64,
        mode: u32,
        uid: u32,
        gid: u32,
        rdev: u64,
        btime: Timespec,
        name: Vec<u8>,
        target: Vec<u8>,
    },
    /// A new name `parent/name` for the existing non-directory `ino`.
    Link {
        ino: u64,
        parent: u64,
        name: Vec<u8>,
    },
    /// Remove the non-directory entry `parent/name`, which names `ino`.
    Unlink {
        parent: u64,
        ino: u64,
        name: Vec<u8>,
    },
    /// Remove the empty directory `parent/name`, which is `ino`.
    Rmdir {
        parent: u64,
        ino: u64,
        name: Vec<u8>,
    },
    /// Move `parent/name`, which names `ino` (a directory if `is_dir`),
    /// to `newparent/newname` (which is free).
    Rename {
        parent: u64,
        newparent: u64,
        ino: u64,
        is_dir: bool,
        name: Vec<u8>,
        newname: Vec<u8>,
    },
    /// File bytes at `offset`.
    Write {
        ino: u64,
        offset: u64,
        data: Vec<u8>,
    },
    /// Set the size of a regular file (cutting or extending with a hole).
    Truncate {
        ino: u64,
        size: u64,
    },
    SetXattr {
        ino: u64,
        name: Vec<u8>,
        value: Vec<u8>,
    },
    RemoveXattr {
        ino: u64,
        name: Vec<u8>,
    },
    /// Mode, owner and times of `ino`, set after its other changes.
    Attr {
        ino: u64,
        attrs: Attrs,
    },
    /// Symlink `ino` (of the base) points to `target` now.
    Symlink {
        ino: u64,
        target: Vec<u8>,
    },
    /// Device `ino` (of the base) has device number `rdev` now.
    Rdev {
        ino: u64,
        rdev: u64,
    },
    /// Bytes `dst_offset..+len` of regular file `dst` read as bytes
    /// `src_offset..+len` of regular file `src`, which holds them already
    /// (an earlier record of the stream gave them): the receiver shares
    /// the blocks where it can (`Fs::clone_range`) instead of being sent
    /// the data again.
    Clone {
        dst: u64,
        dst_offset: u64,
        src: u64,
        src_offset: u64,
        len: u64,
    },
}

/// `Begin`'s flag: the stream is incremental (the base fields count).
pub const BEGIN_INCREMENTAL: u32 = 1;

/// Record kinds, as the byte at offset 4 of a record gives them.
pub mod kind {
    pub const BEGIN: u8 = 1;
    pub const END: u8 = 2;
    pub const CREATE: u8 = 3;
    pub const LINK: u8 = 4;
    pub const UNLINK: u8 = 5;
    pub const RMDIR: u8 = 6;
    pub const RENAME: u8 = 7;
    pub const WRITE: u8 = 8;
    pub const TRUNCATE: u8 = 9;
    pub const SET_XATTR: u8 = 10;
    pub const REMOVE_XATTR: u8 = 11;
    pub const ATTR: u8 = 12;
    pub const SYMLINK: u8 = 13;
    pub const RDEV: u8 = 14;
    pub const CLONE: u8 = 15;
}

/// Little-endian field writer.
struct Put(Vec<u8>);

impl Put {
    fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn time(&mut self, t: Timespec) -> &mut Self {
        self.0.extend_from_slice(&t.sec.to_le_bytes());
        self.u32(t.nsec)
    }
    /// A name of 1..=255 bytes, after its length byte.
    fn name(&mut self, n: &[u8]) -> &mut Self {
        self.u8(n.len() as u8);
        self.bytes(n)
    }
    fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.0.extend_from_slice(b);
        self
    }
    fn attrs(&mut self, a: &Attrs) -> &mut Self {
        self.u32(a.mode).u32(a.uid).u32(a.gid);
        self.time(a.atime).time(a.mtime).time(a.ctime).time(a.btime)
    }
}

impl Record {
    /// The kind byte and the body.
    pub fn encode_body(&self) -> (u8, Vec<u8>) {
        let mut p = Put(Vec::new());
        let k = match self {
            Record::Begin(b) => {
                let (bv, bi) = b.base.map_or((0, 0), |o| (o.volume, o.id));
                p.u64(b.source.volume).u64(b.source.id).u64(bv).u64(bi);
                p.u64(b.resume_from).u64(b.staging_ino).u32(b.block_size);
                p.u32(b.base.is_some() as u32);
                p.name(&b.name).name(&b.staging_name);
                kind::BEGIN
            }
            Record::End(a) => {
                p.attrs(a);
                kind::END
            }
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
                p.u64(*parent).u64(*ino).u32(*mode).u32(*uid).u32(*gid).u64(*rdev);
                p.time(*btime).name(name).bytes(target);
                kind::CREATE
            }
            Record::Link { ino, parent, name } => {
                p.u64(*ino).u64(*parent).bytes(name);
                kind::LINK
            }
            Record::Unlink { parent, ino, name } => {
                p.u64(*parent).u64(*ino).bytes(name);
                kind::UNLINK
            }
            Record::Rmdir { parent, ino, name } => {
                p.u64(*parent).u64(*ino).bytes(name);
                kind::RMDIR
            }
            Record::Rename {
                parent,
                newparent,
                ino,
                is_dir,
                name,
                newname,
            } => {
                p.u64(*parent).u64(*newparent).u64(*ino).u8(*is_dir as u8);
                p.name(name).bytes(newname);
                kind::RENAME
            }
            Record::Write { ino, offset, data } => {
                p.u64(*ino).u64(*offset).bytes(data);
                kind::WRITE
            }
            Record::Truncate { ino, size } => {
                p.u64(*ino).u64(*size);
                kind::TRUNCATE
            }
            Record::SetXattr { ino, name, value } => {
                p.u64(*ino).name(name).bytes(value);
                kind::SET_XATTR
            }
            Record::RemoveXattr { ino, name } => {
                p.u64(*ino).bytes(name);
                kind::REMOVE_XATTR
            }
            Record::Attr { ino, attrs } => {
                p.u64(*ino).attrs(attrs);
                kind::ATTR
            }
            Record::Symlink { ino, target } => {
                p.u64(*ino).bytes(target);
                kind::SYMLINK
            }
            Record::Rdev { ino, rdev } => {
                p.u64(*ino).u64(*rdev);
                kind::RDEV
            }
            Record::Clone {
                dst,
                dst_offset,
                src,
                src_offset,
                len,
            } => {
                p.u64(*dst).u64(*dst_offset).u64(*src).u64(*src_offset).u64(*len);
                kind::CLONE
            }
        };
        (k, p.0)
    }

    /// Record `seq` framed: head, body, checksum.
    pub fn frame(&self, seq: u64) -> Vec<u8> {
        let (k, body) = self.encode_body();
        let mut out = Vec::with_capacity(HEAD_LEN + body.len() + 4);
        out.extend_from_slice(&(body.len() as u32).to_le_bytes());
        out.extend_from_slice(&[k, 0, 0, 0]);
        out.extend_from_slice(&seq.to_le_bytes());
        out.extend_from_slice(&body);
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Decode a body of kind `k`; the error says what is wrong.
    pub fn decode(k: u8, body: &[u8]) -> std::result::Result<Record, String> {
        let mut g = Get { b: body, at: 0 };
        let r = match k {
            kind::BEGIN => {
                let (sv, si, bv, bi) = (g.u64()?, g.u64()?, g.u64()?, g.u64()?);
                let (resume_from, staging_ino, block_size) = (g.u64()?, g.u64()?, g.u32()?);
                let flags = g.u32()?;
                if flags & !BEGIN_INCREMENTAL != 0 {
                    return Err(format!("Begin: unknown flags {flags:#x}"));
                }
                let (name, staging_name) = (g.name()?, g.name()?);
                if resume_from == 0 {
                    return Err("Begin: resume_from is 0".into());
                }
                Record::Begin(Begin {
                    source: SnapOrigin { volume: sv, id: si },
                    base: (flags & BEGIN_INCREMENTAL != 0).then_some(SnapOrigin { volume: bv, id: bi }),
                    resume_from,
                    staging_ino,
                    block_size,
                    name,
                    staging_name,
                })
            }
            kind::END => Record::End(g.attrs()?),
            kind::CREATE => Record::Create {
                parent: g.u64()?,
                ino: g.u64()?,
                mode: g.u32()?,
                uid: g.u32()?,
                gid: g.u32()?,
                rdev: g.u64()?,
                btime: g.time()?,
                name: g.name()?,
                target: g.rest().to_vec(),
            },
            kind::LINK => Record::Link {
                ino: g.u64()?,
                parent: g.u64()?,
                name: g.rest_name()?,
            },
            kind::UNLINK => Record::Unlink {
                parent: g.u64()?,
                ino: g.u64()?,
                name: g.rest_name()?,
            },
            kind::RMDIR => Record::Rmdir {
                parent: g.u64()?,
                ino: g.u64()?,
                name: g.rest_name()?,
            },
            kind::RENAME => Record::Rename {
                parent: g.u64()?,
                newparent: g.u64()?,
                ino: g.u64()?,
                is_dir: match g.take(1)?[0] {
                    0 => false,
                    1 => true,
                    b => return Err(format!("Rename: is_dir {b} is neither 0 nor 1")),
                },
                name: g.name()?,
                newname: g.rest_name()?,
            },
            kind::WRITE => {
                let (ino, offset) = (g.u64()?, g.u64()?);
                let data = g.rest().to_vec();
                if data.is_empty() {
                    return Err("Write: no data".into());
                }
                Record::Write { ino, offset, data }
            }
            kind::TRUNCATE => Record::Truncate {
                ino: g.u64()?,
                size: g.u64()?,
            },
            kind::SET_XATTR => Record::SetXattr {
                ino: g.u64()?,
                name: g.name()?,
                value: g.rest().to_vec(),
            },
            kind::REMOVE_XATTR => Record::RemoveXattr {
                ino: g.u64()?,
                name: g.rest_name()?,
            },
            kind::ATTR => Record::Attr {
                ino: g.u64()?,
                attrs: g.attrs()?,
            },
            kind::SYMLINK => {
                let ino = g.u64()?;
                let target = g.rest().to_vec();
                if target.is_empty() || target.len() > 4095 {
                    return Err(format!("Symlink: target of {} bytes", target.len()));
                }
                Record::Symlink { ino, target }
            }
            kind::RDEV => Record::Rdev {
                ino: g.u64()?,
                rdev: g.u64()?,
            },
            kind::CLONE => {
                let (dst, dst_offset, src, src_offset, len) =
                    (g.u64()?, g.u64()?, g.u64()?, g.u64()?, g.u64()?);
                if len == 0 {
                    return Err("Clone: length 0".into());
                }
                if dst_offset.checked_add(len).is_none() || src_offset.checked_add(len).is_none() {
                    return Err(format!(
                        "Clone: {len} bytes at offset {dst_offset} of inode {dst} from offset \
                         {src_offset} of inode {src} run past 2^64"
                    ));
                }
                Record::Clone {
                    dst,
                    dst_offset,
                    src,
                    src_offset,
                    len,
                }
            }
            other => {
                return Err(format!(
                    "unknown record kind {other} (a stream of a newer tux3? this one reads kinds 1 to {})",
                    kind::CLONE
                ))
            }
        };
        if g.at != body.len() {
            return Err(format!("{} bytes left over after the fields", body.len() - g.at));
        }
        Ok(r)
    }
}

/// Little-endian field reader over a body; errors name the field's place.
struct Get<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Get<'a> {
    fn take(&mut self, n: usize) -> std::result::Result<&'a [u8], String> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len());
        let Some(end) = end else {
            return Err(format!(
                "body too short: {} bytes, a field needs {n} at {}",
                self.b.len(),
                self.at
            ));
        };
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u32(&mut self) -> std::result::Result<u32, String> {
        let mut a = [0u8; 4];
        a.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(a))
    }
    fn u64(&mut self) -> std::result::Result<u64, String> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(a))
    }
    fn time(&mut self) -> std::result::Result<Timespec, String> {
        let sec = self.u64()? as i64;
        let nsec = self.u32()?;
        if nsec >= 1_000_000_000 {
            return Err(format!("nanoseconds {nsec} out of range"));
        }
        Ok(Timespec { sec, nsec })
    }
    fn attrs(&mut self) -> std::result::Result<Attrs, String> {
        Ok(Attrs {
            mode: self.u32()?,
            uid: self.u32()?,
            gid: self.u32()?,
            atime: self.time()?,
            mtime: self.time()?,
            ctime: self.time()?,
            btime: self.time()?,
        })
    }
    fn name(&mut self) -> std::result::Result<Vec<u8>, String> {
        let n = self.take(1)?[0] as usize;
        if n == 0 {
            return Err("empty name".into());
        }
        Ok(self.take(n)?.to_vec())
    }
    fn rest(&mut self) -> &'a [u8] {
        let s = &self.b[self.at..];
        self.at = self.b.len();
        s
    }
    fn rest_name(&mut self) -> std::result::Result<Vec<u8>, String> {
        let n = self.rest();
        if n.is_empty() || n.len() > 255 {
            return Err(format!("name of {} bytes", n.len()));
        }
        Ok(n.to_vec())
    }
}
