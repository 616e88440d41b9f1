//! Operations of the model-based test: the concrete [`Action`]s applied to
//! both sides, their comparable [`Outcome`]s, and how the reference model
//! executes an action. The generated form lives in gen.rs.

use super::reference::{Entry, Model, View, R};
use std::fmt;
use tux3::{Ino, RenameFlags, SetAttr, XattrMode};

pub const GIB: u64 = 1 << 30;

/// Deterministic bytes for position `pos` of a write; seed 0 writes zeros.
pub fn pattern(seed: u8, pos: u64, len: usize) -> Vec<u8> {
    if seed == 0 {
        return vec![0; len];
    }
    (0..len as u64)
        .map(|i| {
            let x = (pos + i).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ ((seed as u64) << 29);
            (x >> 53) as u8 ^ seed
        })
        .collect()
}

/// A name or byte string, shown readably (long ones abbreviated).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct N(pub Vec<u8>);

impl fmt::Debug for N {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = String::from_utf8_lossy(&self.0);
        if self.0.len() > 24 {
            let head: String = s.chars().take(16).collect();
            write!(f, "{head:?}..({} bytes)", self.0.len())
        } else {
            write!(f, "{s:?}")
        }
    }
}

/// A concrete operation on both the engine and the model.
#[derive(Debug, Clone)]
pub enum Action {
    Lookup {
        dir: Ino,
        name: N,
    },
    Getattr {
        ino: Ino,
    },
    Create {
        dir: Ino,
        name: N,
        perm: u32,
        uid: u32,
        gid: u32,
    },
    Mkdir {
        dir: Ino,
        name: N,
        perm: u32,
        uid: u32,
        gid: u32,
    },
    Mknod {
        dir: Ino,
        name: N,
        mode: u32,
        rdev: u64,
        uid: u32,
        gid: u32,
    },
    Symlink {
        dir: Ino,
        name: N,
        target: N,
        uid: u32,
        gid: u32,
    },
    Readlink {
        ino: Ino,
    },
    Link {
        ino: Ino,
        dir: Ino,
        name: N,
    },
    Unlink {
        dir: Ino,
        name: N,
    },
    Rmdir {
        dir: Ino,
        name: N,
    },
    Rename {
        dir: Ino,
        name: N,
        newdir: Ino,
        newname: N,
        flags: RenameFlags,
    },
    /// Writes `pattern(seed, offset, len)`.
    Write {
        ino: Ino,
        offset: u64,
        len: usize,
        seed: u8,
    },
    Read {
        ino: Ino,
        offset: u64,
        len: usize,
    },
    SetAttr {
        ino: Ino,
        set: SetAttr,
    },
    /// Sets the value `pattern(seed, 0, len)`.
    SetXattr {
        ino: Ino,
        name: N,
        len: usize,
        seed: u8,
        mode: XattrMode,
    },
    GetXattr {
        ino: Ino,
        name: N,
    },
    ListXattr {
        ino: Ino,
    },
    RemoveXattr {
        ino: Ino,
        name: N,
    },
    Readdir {
        ino: Ino,
    },
    Statfs,
    Fsync {
        ino: Ino,
        datasync: bool,
    },
    Sync,
    Unify,
    Reopen,
    Crash,
}

impl Action {
    /// Whether a successful result names a newly created inode.
    pub fn creates(&self) -> bool {
        matches!(
            self,
            Action::Create { .. } | Action::Mkdir { .. } | Action::Mknod { .. } | Action::Symlink { .. }
        )
    }

    /// Directories whose entries the action may change.
    pub fn dirs_touched(&self) -> Vec<Ino> {
        match self {
            Action::Create { dir, .. }
            | Action::Mkdir { dir, .. }
            | Action::Mknod { dir, .. }
            | Action::Symlink { dir, .. }
            | Action::Link { dir, .. }
            | Action::Unlink { dir, .. }
            | Action::Rmdir { dir, .. } => vec![*dir],
            Action::Rename { dir, newdir, .. } => vec![*dir, *newdir],
            _ => Vec::new(),
        }
    }
}

/// What an operation returned, in comparable form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Unit,
    Attr(View),
    Bytes(N),
    Count(usize),
    Names(Vec<N>),
    Entries(Vec<Entry>),
    Statfs { block_size: u32, name_max: u32 },
}

/// Execute `a` on the model. `new_ino` is the number a created inode gets.
pub fn model_apply(m: &mut Model, a: &Action, new_ino: Ino) -> R<Outcome> {
    use Outcome as O;
    Ok(match a {
        Action::Lookup { dir, name } => O::Attr(m.lookup(*dir, &name.0)?),
        Action::Getattr { ino } => O::Attr(m.getattr(*ino)?),
        Action::Create {
            dir,
            name,
            perm,
            uid,
            gid,
        } => O::Attr(m.mknod(
            *dir,
            &name.0,
            libc::S_IFREG | (perm & 0o7777),
            0,
            *uid,
            *gid,
            new_ino,
        )?),
        Action::Mkdir {
            dir,
            name,
            perm,
            uid,
            gid,
        } => O::Attr(m.mknod(
            *dir,
            &name.0,
            libc::S_IFDIR | (perm & 0o7777),
            0,
            *uid,
            *gid,
            new_ino,
        )?),
        Action::Mknod {
            dir,
            name,
            mode,
            rdev,
            uid,
            gid,
        } => O::Attr(m.mknod(*dir, &name.0, *mode, *rdev, *uid, *gid, new_ino)?),
        Action::Symlink {
            dir,
            name,
            target,
            uid,
            gid,
        } => O::Attr(m.symlink(*dir, &name.0, &target.0, *uid, *gid, new_ino)?),
        Action::Readlink { ino } => O::Bytes(N(m.readlink(*ino)?)),
        Action::Link { ino, dir, name } => O::Attr(m.link(*ino, *dir, &name.0)?),
        Action::Unlink { dir, name } => m.unlink(*dir, &name.0).map(|_| O::Unit)?,
        Action::Rmdir { dir, name } => m.rmdir(*dir, &name.0).map(|_| O::Unit)?,
        Action::Rename {
            dir,
            name,
            newdir,
            newname,
            flags,
        } => m
            .rename(*dir, &name.0, *newdir, &newname.0, *flags)
            .map(|_| O::Unit)?,
        Action::Write {
            ino,
            offset,
            len,
            seed,
        } => O::Count(m.write(*ino, *offset, &pattern(*seed, *offset, *len))?),
        Action::Read { ino, offset, len } => O::Bytes(N(m.read(*ino, *offset, *len)?)),
        Action::SetAttr { ino, set } => O::Attr(m.setattr(*ino, set)?),
        Action::SetXattr {
            ino,
            name,
            len,
            seed,
            mode,
        } => m
            .setxattr(*ino, &name.0, &pattern(*seed, 0, *len), *mode)
            .map(|_| O::Unit)?,
        Action::GetXattr { ino, name } => O::Bytes(N(m.getxattr(*ino, &name.0)?)),
        Action::ListXattr { ino } => O::Names(m.listxattr(*ino)?.into_iter().map(N).collect()),
        Action::RemoveXattr { ino, name } => m.removexattr(*ino, &name.0).map(|_| O::Unit)?,
        Action::Readdir { ino } => O::Entries(m.readdir(*ino)?),
        Action::Statfs => O::Statfs {
            block_size: 4096,
            name_max: tux3::NAME_MAX as u32,
        },
        Action::Fsync { ino, .. } => m.getattr(*ino).map(|_| O::Unit)?,
        Action::Sync | Action::Unify | Action::Reopen | Action::Crash => O::Unit,
    })
}
