//! Checks of the reference model alone (no engine): expected errno tables for
//! names, links, renames, data and xattrs; random sequences keep the model's
//! invariants; the sequence strategy shrinks to a minimal case. These pass
//! independently of the engine, so a model-based failure points at the engine.

use super::gen::{op, resolve};
use super::ops::{model_apply, Action, Outcome, GIB, N};
use super::reference::{Model, R};
use super::seq::seq;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestError, TestRunner};
use tux3::{Errno, FileType, Ino, RenameFlags, SetAttr, XattrMode, ROOT_INO};

struct T {
    m: Model,
    next: Ino,
}

impl T {
    fn new() -> T {
        T {
            m: Model::new(0o755, 0, 0, 100),
            next: 100,
        }
    }
    fn run(&mut self, a: Action) -> R<Outcome> {
        self.next += 1;
        let r = model_apply(&mut self.m, &a, self.next);
        self.m
            .check_invariants()
            .unwrap_or_else(|e| panic!("after {a:?}: {e}"));
        r
    }
    /// Run `a` and expect `want` (Ok(()) matches any success).
    fn expect(&mut self, a: Action, want: R<()>) {
        let dbg = format!("{a:?}");
        let got = self.run(a).map(|_| ());
        assert_eq!(got, want, "{dbg}");
    }
    fn ino(&self, dir: Ino, name: &str) -> Ino {
        self.m.inodes[&dir].entries[name.as_bytes()]
    }
    fn nlink(&self, ino: Ino) -> u32 {
        self.m.inodes[&ino].nlink
    }
}

fn n(s: &str) -> N {
    N(s.as_bytes().to_vec())
}
fn create(dir: Ino, name: &str) -> Action {
    Action::Create {
        dir,
        name: n(name),
        perm: 0o644,
        uid: 0,
        gid: 0,
    }
}
fn mkdir(dir: Ino, name: &str) -> Action {
    Action::Mkdir {
        dir,
        name: n(name),
        perm: 0o755,
        uid: 0,
        gid: 0,
    }
}
fn rename(dir: Ino, name: &str, newdir: Ino, newname: &str, noreplace: bool, exchange: bool) -> Action {
    Action::Rename {
        dir,
        name: n(name),
        newdir,
        newname: n(newname),
        flags: RenameFlags {
            noreplace,
            exchange,
            whiteout: None,
        },
    }
}
fn truncate(ino: Ino, size: u64) -> Action {
    Action::SetAttr {
        ino,
        set: SetAttr {
            size: Some(size),
            ..SetAttr::default()
        },
    }
}

const OK: R<()> = Ok(());
const R1: Ino = ROOT_INO;

#[test]
fn model_self_check_names() {
    let mut t = T::new();
    t.expect(create(R1, "f"), OK);
    t.expect(create(R1, "f"), Err(Errno::EEXIST));
    t.expect(mkdir(R1, "f"), Err(Errno::EEXIST));
    for bad in ["", ".", "..", "a/b", "x\0y"] {
        t.expect(create(R1, bad), Err(Errno::EINVAL));
        t.expect(mkdir(R1, bad), Err(Errno::EINVAL));
    }
    t.expect(
        Action::Create {
            dir: R1,
            name: N(vec![b'x'; 256]),
            perm: 0,
            uid: 0,
            gid: 0,
        },
        Err(Errno::ENAMETOOLONG),
    );
    t.expect(
        Action::Create {
            dir: R1,
            name: N(vec![b'x'; 255]),
            perm: 0,
            uid: 0,
            gid: 0,
        },
        OK,
    );
    let f = t.ino(R1, "f");
    t.expect(create(f, "g"), Err(Errno::ENOTDIR));
    t.expect(create(f, ""), Err(Errno::ENOTDIR));
    t.expect(create(9999, "g"), Err(Errno::ENOENT));
    t.expect(
        Action::Lookup {
            dir: R1,
            name: n("nope"),
        },
        Err(Errno::ENOENT),
    );
    t.expect(
        Action::Lookup {
            dir: f,
            name: n("nope"),
        },
        Err(Errno::ENOTDIR),
    );
    t.expect(
        Action::Lookup {
            dir: R1,
            name: N(vec![b'x'; 256]),
        },
        Err(Errno::ENAMETOOLONG),
    );
    let sl = Action::Symlink {
        dir: R1,
        name: n("s"),
        target: n("target"),
        uid: 3,
        gid: 4,
    };
    assert_eq!(t.run(sl).unwrap(), Outcome::Attr(t.m.view(t.ino(R1, "s"))));
    let s = t.ino(R1, "s");
    let v = t.m.view(s);
    assert_eq!(
        (v.kind, v.mode, v.size, v.uid, v.gid),
        (FileType::Symlink, libc::S_IFLNK | 0o777, Some(6), 3, 4)
    );
    assert_eq!(
        t.run(Action::Readlink { ino: s }),
        Ok(Outcome::Bytes(n("target")))
    );
    t.expect(Action::Readlink { ino: f }, Err(Errno::EINVAL));
    let mknod = Action::Mknod {
        dir: R1,
        name: n("c"),
        mode: libc::S_IFCHR | 0o600,
        rdev: 0x0801,
        uid: 0,
        gid: 0,
    };
    t.expect(mknod, OK);
    let c = t.m.view(t.ino(R1, "c"));
    assert_eq!(
        (c.kind, c.rdev, c.mode, c.nlink),
        (FileType::CharDevice, 0x0801, libc::S_IFCHR | 0o600, 1)
    );
    let root = t.m.view(R1);
    assert_eq!(
        (root.kind, root.mode, root.nlink),
        (FileType::Directory, libc::S_IFDIR | 0o755, 2)
    );
}

#[test]
fn model_self_check_links() {
    let mut t = T::new();
    t.expect(mkdir(R1, "d"), OK);
    t.expect(mkdir(R1, "e"), OK);
    let d = t.ino(R1, "d");
    assert_eq!((t.nlink(R1), t.nlink(d)), (4, 2));
    t.expect(mkdir(d, "sub"), OK);
    assert_eq!((t.nlink(R1), t.nlink(d)), (4, 3));
    t.expect(create(d, "f"), OK);
    let f = t.ino(d, "f");
    t.expect(
        Action::Link {
            ino: d,
            dir: R1,
            name: n("dl"),
        },
        Err(Errno::EPERM),
    );
    t.expect(
        Action::Link {
            ino: d,
            dir: R1,
            name: n("e"),
        },
        Err(Errno::EEXIST),
    );
    t.expect(
        Action::Link {
            ino: f,
            dir: R1,
            name: n("e"),
        },
        Err(Errno::EEXIST),
    );
    t.expect(
        Action::Link {
            ino: f,
            dir: f,
            name: n("x"),
        },
        Err(Errno::ENOTDIR),
    );
    t.expect(
        Action::Link {
            ino: f,
            dir: R1,
            name: n("fl"),
        },
        OK,
    );
    assert_eq!(t.nlink(f), 2);
    t.expect(
        Action::Unlink {
            dir: R1,
            name: n("d"),
        },
        Err(Errno::EISDIR),
    );
    t.expect(
        Action::Unlink {
            dir: R1,
            name: n("zz"),
        },
        Err(Errno::ENOENT),
    );
    t.expect(
        Action::Rmdir {
            dir: R1,
            name: n("fl"),
        },
        Err(Errno::ENOTDIR),
    );
    t.expect(
        Action::Rmdir {
            dir: R1,
            name: n("d"),
        },
        Err(Errno::ENOTEMPTY),
    );
    t.expect(
        Action::Rmdir {
            dir: R1,
            name: n("zz"),
        },
        Err(Errno::ENOENT),
    );
    t.expect(Action::Unlink { dir: d, name: n("f") }, OK);
    assert_eq!(t.nlink(f), 1);
    t.expect(
        Action::Unlink {
            dir: R1,
            name: n("fl"),
        },
        OK,
    );
    assert!(!t.m.inodes.contains_key(&f), "last unlink frees the inode");
    t.expect(
        Action::Rmdir {
            dir: d,
            name: n("sub"),
        },
        OK,
    );
    t.expect(
        Action::Rmdir {
            dir: R1,
            name: n("d"),
        },
        OK,
    );
    assert_eq!(t.nlink(R1), 3);
}

#[test]
fn model_self_check_rename() {
    let mut t = T::new();
    for a in [
        mkdir(R1, "d1"),
        mkdir(R1, "d2"),
        mkdir(R1, "e"),
        create(R1, "f2"),
        create(R1, "f3"),
    ] {
        t.expect(a, OK);
    }
    let (d1, d2) = (t.ino(R1, "d1"), t.ino(R1, "d2"));
    t.expect(mkdir(d1, "sub"), OK);
    t.expect(create(d1, "f1"), OK);
    let f2 = t.ino(R1, "f2");
    t.expect(
        Action::Link {
            ino: f2,
            dir: R1,
            name: n("h"),
        },
        OK,
    );
    let table: &[(Action, R<()>)] = &[
        (rename(R1, "f2", R1, "x", true, true), Err(Errno::EINVAL)),
        (rename(R1, "zz", R1, "x", false, false), Err(Errno::ENOENT)),
        (rename(R1, "f2", R1, "h", false, false), OK),
        (rename(R1, "f2", R1, "f2", false, false), OK),
        (rename(R1, "f2", R1, "f2", true, false), Err(Errno::EEXIST)),
        (rename(R1, "f2", R1, "h", false, true), OK),
        (rename(R1, "e", R1, "f3", false, false), Err(Errno::ENOTDIR)),
        (rename(R1, "f3", R1, "e", false, false), Err(Errno::EISDIR)),
        (rename(R1, "e", R1, "d1", false, false), Err(Errno::ENOTEMPTY)),
        (rename(R1, "d1", d1, "x", false, false), Err(Errno::EINVAL)),
        (
            rename(R1, "d1", t.ino(d1, "sub"), "x", false, false),
            Err(Errno::EINVAL),
        ),
        (rename(d1, "f1", R1, "d1", false, false), Err(Errno::ENOTEMPTY)),
        (rename(d1, "f1", R1, "d1", false, true), Err(Errno::EINVAL)),
        (rename(R1, "f3", R1, "f2", true, false), Err(Errno::EEXIST)),
        (rename(R1, "f3", R1, "nothing", false, true), Err(Errno::ENOENT)),
        (rename(R1, "f3", R1, "", false, false), Err(Errno::EINVAL)),
        (rename(R1, "f3", 9999, "x", false, false), Err(Errno::ENOENT)),
        (rename(R1, "f3", f2, "x", false, false), Err(Errno::ENOTDIR)),
    ];
    for (a, want) in table {
        t.expect(a.clone(), *want);
    }
    assert_eq!(
        (t.nlink(f2), t.m.inodes[&R1].entries.len()),
        (2, 6),
        "failed renames change nothing"
    );
    // Directory over an empty directory: the target goes, nlinks follow.
    let e = t.ino(R1, "e");
    t.expect(rename(R1, "e", d1, "sub", false, false), OK);
    assert_eq!((t.nlink(R1), t.nlink(d1), t.ino(d1, "sub")), (4, 3, e));
    // Exchange a file and a directory across parents.
    t.expect(rename(d1, "sub", d2, "f", false, true), Err(Errno::ENOENT));
    t.expect(rename(d1, "sub", R1, "f3", false, true), OK);
    assert_eq!((t.nlink(R1), t.nlink(d1), t.ino(R1, "f3")), (5, 2, e));
    assert_eq!(t.m.inodes[&e].parent, R1);
    // File over file: the old target loses its only link.
    let f3 = t.ino(d1, "sub");
    t.expect(rename(d1, "sub", R1, "h", false, false), OK);
    assert_eq!((t.nlink(f2), t.ino(R1, "h")), (1, f3));
    // Directory moves across parents.
    t.expect(rename(R1, "f3", d2, "moved", false, false), OK);
    assert_eq!((t.nlink(R1), t.nlink(d2), t.m.inodes[&e].parent), (4, 3, d2));
}

#[test]
fn model_self_check_data() {
    let mut t = T::new();
    t.expect(create(R1, "f"), OK);
    t.expect(mkdir(R1, "d"), OK);
    let (f, d) = (t.ino(R1, "f"), t.ino(R1, "d"));
    let write = |ino, offset, len, seed| Action::Write {
        ino,
        offset,
        len,
        seed,
    };
    let read = |ino, offset, len| Action::Read { ino, offset, len };
    assert_eq!(t.run(write(f, 5 * GIB + 10, 5000, 3)), Ok(Outcome::Count(5000)));
    assert_eq!(t.m.view(f).size, Some(5 * GIB + 5010));
    assert!(
        t.m.inodes[&f].data.len() <= 3,
        "a write at 5 GiB is stored sparsely"
    );
    let bytes = |r: R<Outcome>| match r {
        Ok(Outcome::Bytes(b)) => b.0,
        other => panic!("{other:?}"),
    };
    assert_eq!(bytes(t.run(read(f, 4 * GIB, 100))), vec![0; 100]);
    assert_eq!(
        bytes(t.run(read(f, 5 * GIB + 10, 5000))),
        super::ops::pattern(3, 5 * GIB + 10, 5000)
    );
    assert_eq!(bytes(t.run(read(f, 5 * GIB + 5000, 100))).len(), 10);
    assert!(bytes(t.run(read(f, 6 * GIB, 100))).is_empty());
    t.expect(write(f, 1 << 40, 0, 1), OK);
    assert_eq!(
        t.m.view(f).size,
        Some(5 * GIB + 5010),
        "an empty write does not extend"
    );
    t.expect(truncate(f, 5 * GIB + 100), OK);
    t.expect(truncate(f, 5 * GIB + 4000), OK);
    let tail = bytes(t.run(read(f, 5 * GIB, 4000)));
    assert_eq!(&tail[10..100], &super::ops::pattern(3, 5 * GIB + 10, 90)[..]);
    assert!(
        tail[100..].iter().all(|&b| b == 0),
        "truncate down then up reads zeros"
    );
    t.expect(truncate(f, 3 * GIB), OK);
    assert!(t.m.inodes[&f].data.is_empty());
    t.expect(write(d, 0, 10, 1), Err(Errno::EISDIR));
    t.expect(read(d, 0, 10), Err(Errno::EISDIR));
    t.expect(truncate(d, 0), Err(Errno::EISDIR));
    t.expect(
        Action::Symlink {
            dir: R1,
            name: n("s"),
            target: n("f"),
            uid: 0,
            gid: 0,
        },
        OK,
    );
    t.expect(truncate(t.ino(R1, "s"), 0), Err(Errno::EINVAL));
    let chmod = Action::SetAttr {
        ino: d,
        set: SetAttr {
            mode: Some(0o4751),
            ..SetAttr::default()
        },
    };
    t.expect(chmod, OK);
    assert_eq!(t.m.view(d).mode, libc::S_IFDIR | 0o4751);
}

#[test]
fn model_self_check_xattrs() {
    let mut t = T::new();
    let set = |name: &str, len, mode| Action::SetXattr {
        ino: R1,
        name: n(name),
        len,
        seed: 1,
        mode,
    };
    t.expect(set("user.a", 50, XattrMode::Any), OK);
    t.expect(set("user.b", 30, XattrMode::Create), OK);
    t.expect(set("user.c", 0, XattrMode::Any), OK);
    t.expect(set("user.a", 65537, XattrMode::Replace), Err(Errno::E2BIG));
    t.expect(set("user.a", 65536, XattrMode::Replace), OK);
    t.expect(set("user.a", 40, XattrMode::Replace), OK);
    t.expect(
        Action::RemoveXattr {
            ino: R1,
            name: n("user.c"),
        },
        OK,
    );
    t.expect(set("user.a", 1, XattrMode::Create), Err(Errno::EEXIST));
    t.expect(set("user.z", 1, XattrMode::Replace), Err(Errno::ENODATA));
    t.expect(set("", 1, XattrMode::Any), Err(Errno::ERANGE));
    t.expect(
        Action::GetXattr {
            ino: R1,
            name: n("user.z"),
        },
        Err(Errno::ENODATA),
    );
    t.expect(
        Action::RemoveXattr {
            ino: R1,
            name: n("user.z"),
        },
        Err(Errno::ENODATA),
    );
    assert_eq!(
        t.run(Action::ListXattr { ino: R1 }),
        Ok(Outcome::Names(vec![n("user.a"), n("user.b")]))
    );
    t.expect(
        Action::RemoveXattr {
            ino: R1,
            name: n("user.a"),
        },
        OK,
    );
    t.expect(set("user.c", 10, XattrMode::Any), OK);
}

#[test]
fn model_self_check_random() {
    let mut runner = TestRunner::new(Config {
        cases: 48,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&seq(op(), 1, 400), |ops| {
        let mut t = T::new();
        t.m.xattr_space = 2000;
        let mut durable = t.m.clone();
        for o in &ops {
            let a = resolve(o, &t.m);
            match a {
                Action::Crash => t.m = durable.clone(),
                Action::Sync | Action::Unify | Action::Reopen | Action::Fsync { .. } => durable = t.m.clone(),
                _ => {}
            }
            let _ = t.run(a);
        }
        Ok(())
    });
    result.unwrap();
}

#[test]
fn model_self_check_shrink() {
    let mut runner = TestRunner::new(Config {
        cases: 64,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&seq(0u32..1000, 50, 100), |v| {
        prop_assert!(v.iter().all(|&x| x < 900));
        Ok(())
    });
    match result {
        Err(TestError::Fail(_, minimal)) => assert_eq!(minimal, vec![900]),
        other => panic!("expected a shrunk failure, got {other:?}"),
    }
}
