//! Directories: mkdir, rmdir, unlink errnos, directory link counts,
//! readdir (getdents64), including reading while entries are removed, and
//! directories held open after their last name went (rmdir, a rename over
//! them, after an exchange moved them).

use std::collections::{HashMap, HashSet};

use crate::sys;
use crate::util::*;

pub const CASES: &[Case] = &[
    Case::new("dirs/mkdir_basic", mkdir_basic),
    Case::new("dirs/mkdir_exists", mkdir_exists),
    Case::new("dirs/mkdir_missing_parent", mkdir_missing_parent),
    Case::new("dirs/mkdir_component_not_dir", mkdir_component_not_dir),
    Case::new("dirs/rmdir_not_empty", rmdir_not_empty),
    Case::new("dirs/rmdir_file", rmdir_file),
    Case::new("dirs/rmdir_missing", rmdir_missing),
    Case::new("dirs/rmdir_dot", rmdir_dot),
    Case::new("dirs/unlink_dir", unlink_dir),
    Case::new("dirs/unlink_missing", unlink_missing),
    Case::new("dirs/unlink_open_file", unlink_open_file),
    Case::new("dirs/nlink_counts", nlink_counts),
    Case::new("dirs/readdir_all", readdir_all),
    Case::new("dirs/readdir_while_removing", readdir_while_removing),
    Case::new("dirs/rmdir_open_dir", rmdir_open_dir),
    Case::new("dirs/rename_over_open_dir", rename_over_open_dir),
    Case::new("dirs/exchange_open_dir", exchange_open_dir),
];

fn mkdir_basic(c: &Ctx) -> Res {
    let d = c.p("d");
    ok("mkdir", sys::mkdir(&d, 0o750))?;
    let st = ok("stat", sys::stat(&d))?;
    check_type("new dir", &st, libc::S_IFDIR)?;
    check_eq!(st.st_mode & 0o7777, 0o750, "mode of new dir");
    let dot = ok("stat d/.", sys::stat(&c.p("d/.")))?;
    check_eq!(dot.st_ino, st.st_ino, "inode of d/.");
    let dotdot = ok("stat d/..", sys::stat(&c.p("d/..")))?;
    let parent = ok("stat parent", sys::stat(&c.dir))?;
    check_eq!(dotdot.st_ino, parent.st_ino, "inode of d/..");
    Ok(())
}

fn mkdir_exists(c: &Ctx) -> Res {
    ok("mkdir", sys::mkdir(&c.p("d"), 0o755))?;
    want_err("mkdir existing dir", sys::mkdir(&c.p("d"), 0o755), libc::EEXIST)?;
    put(&c.p("f"), b"x")?;
    want_err("mkdir over a file", sys::mkdir(&c.p("f"), 0o755), libc::EEXIST)?;
    ok("symlink", sys::symlink(b"nowhere", &c.p("l")))?;
    want_err(
        "mkdir over a dangling symlink",
        sys::mkdir(&c.p("l"), 0o755),
        libc::EEXIST,
    )?;
    want_err(
        "symlink target not created",
        sys::lstat(&c.p("nowhere")),
        libc::ENOENT,
    )?;
    Ok(())
}

fn mkdir_missing_parent(c: &Ctx) -> Res {
    want_err(
        "mkdir a/b with a missing",
        sys::mkdir(&c.p("a/b"), 0o755),
        libc::ENOENT,
    )?;
    want_err("a still missing", sys::lstat(&c.p("a")), libc::ENOENT)?;
    Ok(())
}

fn mkdir_component_not_dir(c: &Ctx) -> Res {
    put(&c.p("f"), b"x")?;
    want_err("mkdir f/d", sys::mkdir(&c.p("f/d"), 0o755), libc::ENOTDIR)?;
    Ok(())
}

fn rmdir_not_empty(c: &Ctx) -> Res {
    ok("mkdir", sys::mkdir(&c.p("d"), 0o755))?;
    put(&c.p("d/f"), b"x")?;
    want_err("rmdir with a file inside", sys::rmdir(&c.p("d")), libc::ENOTEMPTY)?;
    ok("unlink d/f", sys::unlink(&c.p("d/f")))?;
    ok("mkdir d/s", sys::mkdir(&c.p("d/s"), 0o755))?;
    want_err(
        "rmdir with a subdir inside",
        sys::rmdir(&c.p("d")),
        libc::ENOTEMPTY,
    )?;
    want_err("rmdir d/s/..", sys::rmdir(&c.p("d/s/..")), libc::ENOTEMPTY)?;
    ok("rmdir d/s", sys::rmdir(&c.p("d/s")))?;
    ok("rmdir d (now empty)", sys::rmdir(&c.p("d")))?;
    want_err("d gone", sys::lstat(&c.p("d")), libc::ENOENT)?;
    Ok(())
}

fn rmdir_file(c: &Ctx) -> Res {
    put(&c.p("f"), b"x")?;
    want_err("rmdir a file", sys::rmdir(&c.p("f")), libc::ENOTDIR)?;
    ok(
        "symlink to dir",
        sys::mkdir(&c.p("d"), 0o755).and(sys::symlink(b"d", &c.p("l"))),
    )?;
    want_err("rmdir a symlink to a dir", sys::rmdir(&c.p("l")), libc::ENOTDIR)?;
    ok("file still there", sys::lstat(&c.p("f")))?;
    Ok(())
}

fn rmdir_missing(c: &Ctx) -> Res {
    want_err("rmdir missing", sys::rmdir(&c.p("nope")), libc::ENOENT)?;
    Ok(())
}

fn rmdir_dot(c: &Ctx) -> Res {
    ok("mkdir", sys::mkdir(&c.p("d"), 0o755))?;
    want_err("rmdir d/.", sys::rmdir(&c.p("d/.")), libc::EINVAL)?;
    ok("d still there", sys::stat(&c.p("d")))?;
    Ok(())
}

fn unlink_dir(c: &Ctx) -> Res {
    ok("mkdir", sys::mkdir(&c.p("d"), 0o755))?;
    want_err("unlink a directory", sys::unlink(&c.p("d")), libc::EISDIR)?;
    ok("d still there", sys::stat(&c.p("d")))?;
    Ok(())
}

fn unlink_missing(c: &Ctx) -> Res {
    want_err("unlink missing", sys::unlink(&c.p("nope")), libc::ENOENT)?;
    want_err(
        "unlink in missing dir",
        sys::unlink(&c.p("nodir/f")),
        libc::ENOENT,
    )?;
    Ok(())
}

fn unlink_open_file(c: &Ctx) -> Res {
    let p = c.p("f");
    put(&p, b"still here")?;
    let fd = ok("open", sys::open(&p, libc::O_RDWR, 0))?;
    ok("unlink", sys::unlink(&p))?;
    want_err("name gone", sys::lstat(&p), libc::ENOENT)?;
    check_eq!(
        ok("fstat", sys::fstat(&fd))?.st_nlink,
        0,
        "nlink of unlinked open file"
    );
    check_eq!(
        ok("pread", sys::pread(&fd, 100, 0))?,
        b"still here".to_vec(),
        "content via open fd"
    );
    ok("pwrite after unlink", sys::pwrite(&fd, b"S", 0))?;
    check_eq!(
        ok("pread", sys::pread(&fd, 100, 0))?,
        b"Still here".to_vec(),
        "content after write"
    );
    Ok(())
}

fn nlink(c: &Ctx, name: &str) -> Result<u64, Fail> {
    Ok(ok(&format!("lstat {name}"), sys::lstat(&c.p(name)))?.st_nlink as u64)
}

fn nlink_counts(c: &Ctx) -> Res {
    put(&c.p("f"), b"")?;
    check_eq!(nlink(c, "f")?, 1, "nlink of new file");
    ok("mkdir d", sys::mkdir(&c.p("d"), 0o755))?;
    check_eq!(nlink(c, "d")?, 2, "nlink of new dir");
    for s in ["d/a", "d/b", "d/c"] {
        ok("mkdir", sys::mkdir(&c.p(s), 0o755))?;
    }
    put(&c.p("d/file"), b"")?;
    check_eq!(nlink(c, "d")?, 5, "nlink of dir with 3 subdirs and a file");
    ok("rmdir d/b", sys::rmdir(&c.p("d/b")))?;
    check_eq!(nlink(c, "d")?, 4, "nlink after rmdir of a subdir");
    ok("unlink d/file", sys::unlink(&c.p("d/file")))?;
    check_eq!(nlink(c, "d")?, 4, "nlink after unlink of a file");
    Ok(())
}

/// Read a whole directory with getdents64 in small chunks.
fn read_all(c: &Ctx, name: &str) -> Result<Vec<Vec<u8>>, Fail> {
    let fd = ok(
        "open dir",
        sys::open(&c.p(name), libc::O_RDONLY | libc::O_DIRECTORY, 0),
    )?;
    let mut all = Vec::new();
    loop {
        let chunk = ok("getdents64", sys::getdents(&fd, 512))?;
        if chunk.is_empty() {
            return Ok(all);
        }
        all.extend(chunk);
    }
}

fn readdir_all(c: &Ctx) -> Res {
    ok("mkdir", sys::mkdir(&c.p("d"), 0o755))?;
    let mut want: HashSet<Vec<u8>> = HashSet::new();
    for i in 0..100 {
        let n = format!("entry-{i:03}");
        if i % 10 == 0 {
            ok("mkdir", sys::mkdir(&c.p(&format!("d/{n}")), 0o755))?;
        } else {
            put(&c.p(&format!("d/{n}")), b"")?;
        }
        want.insert(n.into_bytes());
    }
    want.insert(b".".to_vec());
    want.insert(b"..".to_vec());
    let got = read_all(c, "d")?;
    let set: HashSet<Vec<u8>> = got.iter().cloned().collect();
    check_eq!(got.len(), set.len(), "entries returned (duplicates?)");
    check!(
        set == want,
        "readdir returned {} entries, want {}: missing {:?}",
        set.len(),
        want.len(),
        want.difference(&set)
            .map(|v| String::from_utf8_lossy(v).into_owned())
            .collect::<Vec<_>>()
    );
    // An empty directory lists just . and ..
    ok("mkdir e", sys::mkdir(&c.p("e"), 0o755))?;
    let mut e = read_all(c, "e")?;
    e.sort();
    check_eq!(e, vec![b".".to_vec(), b"..".to_vec()], "entries of an empty dir");
    Ok(())
}

/// 500 files; read with getdents64 in small chunks, deleting as we go: every
/// returned name that is a multiple of 4, and on each chunk two names not yet
/// returned (index 2 mod 4). Names never deleted (odd indices) must be
/// returned exactly once; no name may be returned twice.
fn readdir_while_removing(c: &Ctx) -> Res {
    const N: usize = 500;
    ok("mkdir", sys::mkdir(&c.p("d"), 0o755))?;
    for i in 0..N {
        put(&c.p(&format!("d/f{i}")), b"")?;
    }
    let fd = ok(
        "open dir",
        sys::open(&c.p("d"), libc::O_RDONLY | libc::O_DIRECTORY, 0),
    )?;
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut deleted: HashSet<usize> = HashSet::new();
    let mut ahead: Vec<usize> = (0..N).filter(|i| i % 4 == 2).rev().collect();
    let mut calls = 0;
    loop {
        let chunk = ok("getdents64", sys::getdents(&fd, 256))?;
        calls += 1;
        check!(calls < 10 * N, "getdents64 never reached the end");
        if chunk.is_empty() {
            break;
        }
        for raw in chunk {
            let name = String::from_utf8_lossy(&raw).into_owned();
            *seen.entry(name.clone()).or_insert(0) += 1;
            if let Some(i) = name.strip_prefix('f').and_then(|s| s.parse::<usize>().ok()) {
                if i % 4 == 0 && deleted.insert(i) {
                    ok("unlink returned entry", sys::unlink(&c.p(&format!("d/{name}"))))?;
                }
            }
        }
        for _ in 0..2 {
            while let Some(i) = ahead.pop() {
                if !seen.contains_key(&format!("f{i}")) {
                    deleted.insert(i);
                    ok("unlink unreturned entry", sys::unlink(&c.p(&format!("d/f{i}"))))?;
                    break;
                }
            }
        }
    }
    let dups: Vec<&String> = seen.iter().filter(|(_, &n)| n > 1).map(|(k, _)| k).collect();
    check!(dups.is_empty(), "names returned more than once: {dups:?}");
    let missing: Vec<usize> = (0..N)
        .filter(|i| !deleted.contains(i) && !seen.contains_key(&format!("f{i}")))
        .collect();
    check!(
        missing.is_empty(),
        "never-deleted names not returned: {missing:?}"
    );
    check!(
        seen.contains_key(".") && seen.contains_key(".."),
        "no . or .. returned"
    );
    let unknown: Vec<&String> = seen
        .keys()
        .filter(|k| {
            *k != "."
                && *k != ".."
                && !k
                    .strip_prefix('f')
                    .is_some_and(|s| s.parse::<usize>().is_ok_and(|i| i < N))
        })
        .collect();
    check!(unknown.is_empty(), "unexpected names returned: {unknown:?}");
    // Sanity: the unreturned deletions really happened before their turn.
    let early = (0..N).filter(|i| i % 4 == 2 && deleted.contains(i)).count();
    check!(early > 0, "no entry was deleted before being returned");
    Ok(())
}

/// Make directory `name` with the extended attribute `user.k` = `v` (where
/// the filesystem has user attributes: the bool) and open it.
fn open_new_dir(c: &Ctx, name: &str) -> Result<(sys::Fd, bool), Fail> {
    let p = c.p(name);
    ok("mkdir", sys::mkdir(&p, 0o755))?;
    let xattr = match sys::setxattr(&p, "user.k", b"v", 0) {
        Ok(()) => true,
        Err(e) if e.0 == libc::EOPNOTSUPP => false,
        Err(e) => return Err(Fail::Fail(format!("setxattr user.k: unexpected {e}"))),
    };
    let fd = ok("open dir", sys::open(&p, libc::O_RDONLY | libc::O_DIRECTORY, 0))?;
    Ok((fd, xattr))
}

/// A directory open on `fd` whose last name is gone (`what`) still answers
/// through the descriptor, as an unlinked open file does: fstat (link
/// count 0), fchmod, fchown, futimens, fgetxattr and fsetxattr work; reading it finds no
/// entry (getdents64: ENOENT, the kernel's answer for a removed directory).
fn check_removed_dir(fd: &sys::Fd, xattr: bool, what: &str) -> Res {
    let st = ok(&format!("fstat ({what})"), sys::fstat(fd))?;
    check_type(what, &st, libc::S_IFDIR)?;
    check_eq!(st.st_nlink, 0, format!("nlink ({what})"));
    ok(&format!("fchmod ({what})"), sys::fchmod(fd, 0o701))?;
    let st = ok("fstat after fchmod", sys::fstat(fd))?;
    check_eq!(st.st_mode & 0o7777, 0o701, format!("mode after fchmod ({what})"));
    if sys::is_root() {
        ok(&format!("fchown ({what})"), sys::fchown(fd, 4321, 8765))?;
        let st = ok("fstat after fchown", sys::fstat(fd))?;
        check_eq!(
            (st.st_uid, st.st_gid),
            (4321, 8765),
            format!("owner after fchown ({what})")
        );
    }
    ok(
        &format!("futimens ({what})"),
        sys::futimens(fd, sys::ts(1_000_000, 5), sys::ts(2_000_000, 7)),
    )?;
    let st = ok("fstat after futimens", sys::fstat(fd))?;
    check_eq!(
        (atime(&st), mtime(&st)),
        ((1_000_000, 5), (2_000_000, 7)),
        format!("times after futimens ({what})")
    );
    if xattr {
        check_eq!(
            ok(&format!("fgetxattr ({what})"), sys::fgetxattr(fd, "user.k", 16))?,
            b"v".to_vec(),
            format!("user.k ({what})")
        );
        ok(
            &format!("fsetxattr ({what})"),
            sys::fsetxattr(fd, "user.k", b"w", 0),
        )?;
        check_eq!(
            ok("fgetxattr after fsetxattr", sys::fgetxattr(fd, "user.k", 16))?,
            b"w".to_vec(),
            format!("user.k after fsetxattr ({what})")
        );
    }
    want_err(
        &format!("getdents64 ({what})"),
        sys::getdents(fd, 512),
        libc::ENOENT,
    )?;
    Ok(())
}

fn rmdir_open_dir(c: &Ctx) -> Res {
    let (fd, xattr) = open_new_dir(c, "d")?;
    ok("rmdir", sys::rmdir(&c.p("d")))?;
    want_err("name gone", sys::lstat(&c.p("d")), libc::ENOENT)?;
    check_removed_dir(&fd, xattr, "after rmdir")
}

fn rename_over_open_dir(c: &Ctx) -> Res {
    // Replaced by a directory of the same parent, and of another one.
    let (same, xattr) = open_new_dir(c, "d")?;
    let (other, _) = open_new_dir(c, "d2")?;
    ok("mkdir e", sys::mkdir(&c.p("e"), 0o755))?;
    ok("mkdir p", sys::mkdir(&c.p("p"), 0o755))?;
    ok("mkdir p/e", sys::mkdir(&c.p("p/e"), 0o755))?;
    let e = ok("stat e", sys::stat(&c.p("e")))?.st_ino;
    ok("rename e over d", sys::rename(&c.p("e"), &c.p("d")))?;
    check_eq!(ok("stat d", sys::stat(&c.p("d")))?.st_ino, e, "inode named d");
    check_removed_dir(&same, xattr, "replaced by a rename in its directory")?;
    ok("rename p/e over d2", sys::rename(&c.p("p/e"), &c.p("d2")))?;
    check_removed_dir(&other, xattr, "replaced by a rename from another directory")
}

fn exchange_open_dir(c: &Ctx) -> Res {
    let (fd, xattr) = open_new_dir(c, "a")?;
    put(&c.p("a/f"), b"")?;
    ok("mkdir b", sys::mkdir(&c.p("b"), 0o755))?;
    let ino = ok("fstat", sys::fstat(&fd))?.st_ino;
    ok(
        "exchange a and b",
        sys::renameat2(&c.p("a"), &c.p("b"), sys::RENAME_EXCHANGE),
    )?;
    // The exchange moved it: it lives on under the other name.
    let st = ok("fstat after exchange", sys::fstat(&fd))?;
    check_eq!(st.st_nlink, 2, "nlink after exchange");
    check_eq!(ok("stat b", sys::stat(&c.p("b")))?.st_ino, ino, "inode named b");
    let mut names = ok("getdents64 after exchange", sys::getdents(&fd, 512))?;
    names.sort();
    check_eq!(
        names,
        vec![b".".to_vec(), b"..".to_vec(), b"f".to_vec()],
        "entries after exchange"
    );
    ok("unlink b/f", sys::unlink(&c.p("b/f")))?;
    ok("rmdir b", sys::rmdir(&c.p("b")))?;
    check_removed_dir(&fd, xattr, "exchanged, then removed")
}
