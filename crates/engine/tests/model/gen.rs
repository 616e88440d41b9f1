//! Generated operations of the model-based test: [`Op`]s hold indices into
//! small pools (names, inodes, xattr names, owners) and are resolved against
//! the model's current state when they run, so a sequence stays meaningful
//! while it shrinks. Few names mean frequent collisions: EEXIST, overwrites,
//! renames over existing targets.

use super::ops::{pattern, Action, GIB, N};
use super::reference::Model;
use proptest::prelude::*;
use tux3::{FileType, Ino, RenameFlags, SetAttr, Timespec, XattrMode};

/// Entry names: short ones collide often; one is long but valid.
pub const NAMES: [&[u8]; 6] = [
    b"a",
    b"b",
    b"c",
    b"dd",
    b"e.txt",
    b"long-name-0123456789-abcdefghijklmnopqrstuvwxyz-0123456789-abcdefghijklmnopqrstuvwxyz-0123456789",
];

/// Names that no creating operation accepts (EINVAL; the last ENAMETOOLONG).
pub fn bad_name(i: usize) -> Vec<u8> {
    match i % 6 {
        0 => Vec::new(),
        1 => b".".to_vec(),
        2 => b"..".to_vec(),
        3 => b"a/b".to_vec(),
        4 => b"nul\0x".to_vec(),
        _ => vec![b'n'; 256],
    }
}

pub const XATTR_NAMES: [&[u8]; 5] = [
    b"user.a",
    b"user.bb",
    b"user.comment",
    b"trusted.t",
    b"security.a-rather-long-attribute-name-for-space",
];

const IDS: [u32; 5] = [0, 1, 1000, 65534, 123_456];

/// A generated operation: every inode and name is an index, resolved by
/// [`resolve`] against the model when the operation runs.
#[derive(Debug, Clone)]
pub enum Op {
    Getattr {
        node: u16,
    },
    Lookup {
        dir: u16,
        name: u8,
    },
    Create {
        dir: u16,
        name: u8,
        perm: u16,
        owner: u8,
    },
    Mkdir {
        dir: u16,
        name: u8,
        perm: u16,
        owner: u8,
    },
    Mknod {
        dir: u16,
        name: u8,
        kind: u8,
        perm: u16,
        rdev: u32,
        owner: u8,
    },
    Symlink {
        dir: u16,
        name: u8,
        len: u16,
        seed: u8,
        owner: u8,
    },
    Readlink {
        node: u16,
    },
    Link {
        node: u16,
        dir: u16,
        name: u8,
    },
    Unlink {
        dir: u16,
        name: u8,
    },
    Rmdir {
        dir: u16,
        name: u8,
    },
    Rename {
        dir: u16,
        name: u8,
        newdir: u16,
        newname: u8,
        flags: u8,
    },
    Write {
        node: u16,
        offset: u64,
        len: u16,
        seed: u8,
    },
    Read {
        node: u16,
        offset: u64,
        len: u16,
    },
    Truncate {
        node: u16,
        size: u64,
    },
    Chmod {
        node: u16,
        perm: u16,
    },
    Chown {
        node: u16,
        owner: u8,
    },
    Utimes {
        node: u16,
        atime: u32,
        mtime: u32,
    },
    SetXattr {
        node: u16,
        name: u8,
        len: u16,
        seed: u8,
        mode: u8,
    },
    GetXattr {
        node: u16,
        name: u8,
    },
    ListXattr {
        node: u16,
    },
    RemoveXattr {
        node: u16,
        name: u8,
    },
    Readdir {
        node: u16,
    },
    Statfs,
    Fsync {
        node: u16,
        datasync: bool,
    },
    Sync,
    Unify,
    Reopen,
    Crash,
}

/// Index `i` into `preferred`, or into `all` for the rare large indices
/// (so the "wrong kind" error paths are exercised too).
fn pick(i: u16, preferred: &[Ino], all: &[Ino]) -> Ino {
    if i >= 0xF000 || preferred.is_empty() {
        all[i as usize % all.len()]
    } else {
        preferred[i as usize % preferred.len()]
    }
}

/// Entry name for index `i`: mostly from [`NAMES`], rarely invalid.
fn new_name(i: u8) -> N {
    N(if i >= 244 {
        bad_name(i as usize)
    } else {
        NAMES[i as usize % NAMES.len()].to_vec()
    })
}

/// Name to look up: from [`NAMES`], rarely too long.
fn old_name(i: u8) -> N {
    N(if i >= 250 {
        vec![b'n'; 256]
    } else {
        NAMES[i as usize % NAMES.len()].to_vec()
    })
}

fn owner(o: u8) -> (u32, u32) {
    (
        IDS[o as usize % IDS.len()],
        IDS[o as usize / IDS.len() % IDS.len()],
    )
}

/// Resolve `op` against the current model.
pub fn resolve(op: &Op, m: &Model) -> Action {
    let all = m.inos();
    let dirs = m.inos_where(|n| n.kind == FileType::Directory);
    let files = m.inos_where(|n| n.kind == FileType::Regular);
    let links = m.inos_where(|n| n.kind == FileType::Symlink);
    let any = |i: u16| pick(i, &all, &all);
    let dir = |i: u16| pick(i, &dirs, &all);
    let file = |i: u16| pick(i, &files, &all);
    match *op {
        Op::Getattr { node } => Action::Getattr { ino: any(node) },
        Op::Lookup { dir: d, name } => Action::Lookup {
            dir: dir(d),
            name: old_name(name),
        },
        Op::Create {
            dir: d,
            name,
            perm,
            owner: o,
        } => {
            let (uid, gid) = owner(o);
            Action::Create {
                dir: dir(d),
                name: new_name(name),
                perm: perm as u32,
                uid,
                gid,
            }
        }
        Op::Mkdir {
            dir: d,
            name,
            perm,
            owner: o,
        } => {
            let (uid, gid) = owner(o);
            Action::Mkdir {
                dir: dir(d),
                name: new_name(name),
                perm: perm as u32,
                uid,
                gid,
            }
        }
        Op::Mknod {
            dir: d,
            name,
            kind,
            perm,
            rdev,
            owner: o,
        } => {
            let (uid, gid) = owner(o);
            let (fmt, rdev) = match kind % 5 {
                0 => (libc::S_IFIFO, 0),
                1 => (libc::S_IFCHR, rdev as u64),
                2 => (libc::S_IFBLK, rdev as u64),
                3 => (libc::S_IFSOCK, 0),
                _ => (libc::S_IFREG, 0),
            };
            Action::Mknod {
                dir: dir(d),
                name: new_name(name),
                mode: fmt | (perm as u32 & 0o7777),
                rdev,
                uid,
                gid,
            }
        }
        Op::Symlink {
            dir: d,
            name,
            len,
            seed,
            owner: o,
        } => {
            let (uid, gid) = owner(o);
            let len = 1 + len as usize % tux3::SYMLINK_MAX;
            let target = pattern(seed | 1, 0, len).iter().map(|b| b'a' + b % 26).collect();
            Action::Symlink {
                dir: dir(d),
                name: new_name(name),
                target: N(target),
                uid,
                gid,
            }
        }
        Op::Readlink { node } => Action::Readlink {
            ino: pick(node, &links, &all),
        },
        Op::Link { node, dir: d, name } => Action::Link {
            ino: file(node),
            dir: dir(d),
            name: new_name(name),
        },
        Op::Unlink { dir: d, name } => Action::Unlink {
            dir: dir(d),
            name: old_name(name),
        },
        Op::Rmdir { dir: d, name } => {
            // Odd name indices pick an existing subdirectory, to hit success.
            let subdirs: Vec<(Ino, &Vec<u8>)> = dirs
                .iter()
                .flat_map(|&p| m.inodes[&p].entries.iter().map(move |(n, i)| (p, n, *i)))
                .filter(|&(_, _, i)| m.inodes[&i].kind == FileType::Directory)
                .map(|(p, n, _)| (p, n))
                .collect();
            match subdirs.get(d as usize % subdirs.len().max(1)) {
                Some(&(p, n)) if name % 2 == 1 => Action::Rmdir {
                    dir: p,
                    name: N(n.clone()),
                },
                _ => Action::Rmdir {
                    dir: dir(d),
                    name: old_name(name),
                },
            }
        }
        Op::Rename {
            dir: d,
            name,
            newdir,
            newname,
            flags,
        } => Action::Rename {
            dir: dir(d),
            name: old_name(name),
            newdir: dir(newdir),
            newname: new_name(newname),
            flags: RenameFlags {
                noreplace: flags % 8 == 5 || flags == 255,
                exchange: flags % 8 == 6 || flags == 255,
                whiteout: None,
            },
        },
        Op::Write {
            node,
            offset,
            len,
            seed,
        } => Action::Write {
            ino: file(node),
            offset,
            len: len as usize,
            seed,
        },
        Op::Read { node, offset, len } => Action::Read {
            ino: file(node),
            offset,
            len: len as usize,
        },
        Op::Truncate { node, size } => Action::SetAttr {
            ino: file(node),
            set: SetAttr {
                size: Some(size),
                ..SetAttr::default()
            },
        },
        Op::Chmod { node, perm } => Action::SetAttr {
            ino: any(node),
            set: SetAttr {
                mode: Some(perm as u32),
                ..SetAttr::default()
            },
        },
        Op::Chown { node, owner: o } => {
            let (uid, gid) = owner(o);
            let set = SetAttr {
                uid: Some(uid),
                gid: Some(gid),
                ..SetAttr::default()
            };
            Action::SetAttr { ino: any(node), set }
        }
        Op::Utimes { node, atime, mtime } => {
            let ts = |s: u32| Timespec {
                sec: (s & 0x7fff_ffff) as i64,
                nsec: 0,
            };
            let set = SetAttr {
                atime: Some(ts(atime)),
                mtime: Some(ts(mtime)),
                ..SetAttr::default()
            };
            Action::SetAttr { ino: any(node), set }
        }
        Op::SetXattr {
            node,
            name,
            len,
            seed,
            mode,
        } => Action::SetXattr {
            ino: any(node),
            name: N(XATTR_NAMES[name as usize % XATTR_NAMES.len()].to_vec()),
            len: len as usize,
            seed,
            mode: [XattrMode::Any, XattrMode::Create, XattrMode::Replace][mode as usize % 3],
        },
        Op::GetXattr { node, name } => Action::GetXattr {
            ino: any(node),
            name: N(XATTR_NAMES[name as usize % XATTR_NAMES.len()].to_vec()),
        },
        Op::ListXattr { node } => Action::ListXattr { ino: any(node) },
        Op::RemoveXattr { node, name } => Action::RemoveXattr {
            ino: any(node),
            name: N(XATTR_NAMES[name as usize % XATTR_NAMES.len()].to_vec()),
        },
        Op::Readdir { node } => Action::Readdir { ino: dir(node) },
        Op::Statfs => Action::Statfs,
        Op::Fsync { node, datasync } => Action::Fsync {
            ino: any(node),
            datasync,
        },
        Op::Sync => Action::Sync,
        Op::Unify => Action::Unify,
        Op::Reopen => Action::Reopen,
        Op::Crash => Action::Crash,
    }
}

fn node() -> impl Strategy<Value = u16> {
    prop_oneof![12 => 0u16..0xF000, 1 => 0xF000u16..=0xFFFF]
}

/// Inodes for xattr operations: mostly the first few, so attributes pile up.
fn xnode() -> impl Strategy<Value = u16> {
    prop_oneof![3 => 0u16..3, 1 => node()]
}

/// File offsets: small, around block boundaries, across 4 GiB, beyond it.
pub fn offset() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => 0u64..16384,
        3 => (0u64..40, 0u64..256).prop_map(|(b, d)| (b * 4096).saturating_sub(128) + d),
        1 => (0u64..16384).prop_map(|d| 4 * GIB - 8192 + d),
        2 => (0u64..8, 0u64..8192).prop_map(|(k, d)| 5 * GIB + k * 65536 + d),
        1 => (0u64..8192).prop_map(|d| (1 << 40) + d),
    ]
}

/// Truncate sizes: down to zero or small, up past 4 GiB.
fn size() -> impl Strategy<Value = u64> {
    prop_oneof![
        3 => 0u64..20000,
        2 => (0u64..40).prop_map(|b| b * 4096),
        1 => (0u64..8192).prop_map(|d| 4 * GIB - 4096 + d),
        1 => (0u64..200_000).prop_map(|d| 5 * GIB + d),
    ]
}

fn write_len() -> impl Strategy<Value = u16> {
    prop_oneof![4 => 0u16..600, 3 => 0u16..=20480, 1 => Just(4096u16), 1 => Just(8192u16)]
}

/// One generated operation; weights favour namespace churn and file data.
pub fn op() -> BoxedStrategy<Op> {
    let name = any::<u8>;
    let perm = || 0u16..=0o7777;
    prop_oneof![
        2 => node().prop_map(|node| Op::Getattr { node }),
        4 => (node(), name()).prop_map(|(dir, name)| Op::Lookup { dir, name }),
        10 => (node(), name(), perm(), any::<u8>())
            .prop_map(|(dir, name, perm, owner)| Op::Create { dir, name, perm, owner }),
        5 => (node(), name(), perm(), any::<u8>())
            .prop_map(|(dir, name, perm, owner)| Op::Mkdir { dir, name, perm, owner }),
        2 => (node(), name(), any::<u8>(), perm(), any::<u32>(), any::<u8>())
            .prop_map(|(dir, name, kind, perm, rdev, owner)| Op::Mknod { dir, name, kind, perm, rdev, owner }),
        3 => (node(), name(), prop_oneof![0u16..64, 0u16..1100], any::<u8>(), any::<u8>())
            .prop_map(|(dir, name, len, seed, owner)| Op::Symlink { dir, name, len, seed, owner }),
        1 => node().prop_map(|node| Op::Readlink { node }),
        4 => (node(), node(), name()).prop_map(|(node, dir, name)| Op::Link { node, dir, name }),
        6 => (node(), name()).prop_map(|(dir, name)| Op::Unlink { dir, name }),
        5 => (node(), name()).prop_map(|(dir, name)| Op::Rmdir { dir, name }),
        10 => (node(), name(), node(), name(), any::<u8>())
            .prop_map(|(dir, name, newdir, newname, flags)| Op::Rename { dir, name, newdir, newname, flags }),
        10 => (node(), offset(), write_len(), any::<u8>())
            .prop_map(|(node, offset, len, seed)| Op::Write { node, offset, len, seed }),
        6 => (node(), offset(), 0u16..24576).prop_map(|(node, offset, len)| Op::Read { node, offset, len }),
        5 => (node(), size()).prop_map(|(node, size)| Op::Truncate { node, size }),
        2 => (node(), perm()).prop_map(|(node, perm)| Op::Chmod { node, perm }),
        2 => (node(), any::<u8>()).prop_map(|(node, owner)| Op::Chown { node, owner }),
        1 => (node(), any::<u32>(), any::<u32>()).prop_map(|(node, atime, mtime)| Op::Utimes { node, atime, mtime }),
        5 => (xnode(), name(), prop_oneof![0u16..40, 0u16..600, 0u16..3000, 0u16..=u16::MAX], any::<u8>(), any::<u8>())
            .prop_map(|(node, name, len, seed, mode)| Op::SetXattr { node, name, len, seed, mode }),
        2 => (xnode(), name()).prop_map(|(node, name)| Op::GetXattr { node, name }),
        1 => xnode().prop_map(|node| Op::ListXattr { node }),
        2 => (xnode(), name()).prop_map(|(node, name)| Op::RemoveXattr { node, name }),
        3 => node().prop_map(|node| Op::Readdir { node }),
        1 => Just(Op::Statfs),
        2 => (node(), any::<bool>()).prop_map(|(node, datasync)| Op::Fsync { node, datasync }),
        2 => Just(Op::Sync),
        1 => Just(Op::Unify),
        2 => Just(Op::Reopen),
        2 => Just(Op::Crash),
    ]
    .boxed()
}
