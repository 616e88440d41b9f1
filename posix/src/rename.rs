//! rename(2) and renameat2(2): replacing files and directories, the errno of
//! each type mismatch, renames onto the same inode, RENAME_NOREPLACE,
//! RENAME_EXCHANGE, RENAME_WHITEOUT, directory link counts and ctime.

use crate::sys::{self, RENAME_EXCHANGE, RENAME_NOREPLACE, RENAME_WHITEOUT};
use crate::util::*;

pub const CASES: &[Case] = &[
    Case::new("rename/file_new_name", file_new_name),
    Case::new("rename/file_over_file", file_over_file),
    Case::new("rename/dir_new_name", dir_new_name),
    Case::new("rename/dir_over_empty_dir", dir_over_empty_dir),
    Case::new("rename/dir_over_nonempty_dir", dir_over_nonempty_dir),
    Case::new("rename/file_over_dir", file_over_dir),
    Case::new("rename/dir_over_file", dir_over_file),
    Case::new("rename/dir_into_own_subdir", dir_into_own_subdir),
    Case::new("rename/same_name", same_name),
    Case::new("rename/hard_links_onto_each_other", hard_links_onto_each_other),
    Case::new("rename/missing_source", missing_source),
    Case::new("rename/noreplace", noreplace),
    Case::new("rename/exchange", exchange),
    Case::new("rename/exchange_missing", exchange_missing),
    Case::new("rename/subdir_between_parents", subdir_between_parents),
    Case::new("rename/times", times),
    Case::new("rename/whiteout", whiteout),
];

fn ino(c: &Ctx, name: &str) -> Result<u64, Fail> {
    Ok(ok(&format!("lstat {name}"), sys::lstat(&c.p(name)))?.st_ino as u64)
}

fn gone(c: &Ctx, name: &str) -> Res {
    want_err(
        &format!("{name} should be gone"),
        sys::lstat(&c.p(name)),
        libc::ENOENT,
    )
}

fn file_new_name(c: &Ctx) -> Res {
    put(&c.p("a"), b"data")?;
    let i = ino(c, "a")?;
    ok("rename a b", sys::rename(&c.p("a"), &c.p("b")))?;
    gone(c, "a")?;
    check_eq!(ino(c, "b")?, i, "inode of b");
    check_eq!(get(&c.p("b"))?, b"data".to_vec(), "content of b");
    ok("mkdir", sys::mkdir(&c.p("d"), 0o755))?;
    ok("rename b d/c", sys::rename(&c.p("b"), &c.p("d/c")))?;
    gone(c, "b")?;
    check_eq!(ino(c, "d/c")?, i, "inode after cross-dir rename");
    Ok(())
}

fn file_over_file(c: &Ctx) -> Res {
    put(&c.p("a"), b"new")?;
    put(&c.p("b"), b"old")?;
    ok("link b keep", sys::link(&c.p("b"), &c.p("keep")))?;
    let (ia, ib) = (ino(c, "a")?, ino(c, "b")?);
    check_eq!(
        ok("stat", sys::lstat(&c.p("keep")))?.st_nlink,
        2,
        "nlink of target before"
    );
    ok("rename a over b", sys::rename(&c.p("a"), &c.p("b")))?;
    gone(c, "a")?;
    check_eq!(ino(c, "b")?, ia, "inode of b after rename");
    check_eq!(get(&c.p("b"))?, b"new".to_vec(), "content of b");
    let keep = ok("stat keep", sys::lstat(&c.p("keep")))?;
    check_eq!(keep.st_ino as u64, ib, "inode of the replaced file's other link");
    check_eq!(keep.st_nlink, 1, "nlink of replaced file");
    check_eq!(get(&c.p("keep"))?, b"old".to_vec(), "content of replaced file");
    // The last link replaced: an open fd keeps the old inode, with nlink 0.
    let fd = ok("open keep", sys::open(&c.p("keep"), libc::O_RDONLY, 0))?;
    ok("rename b over keep", sys::rename(&c.p("b"), &c.p("keep")))?;
    check_eq!(
        ok("fstat", sys::fstat(&fd))?.st_nlink,
        0,
        "nlink of fully replaced file"
    );
    check_eq!(
        ok("pread", sys::pread(&fd, 10, 0))?,
        b"old".to_vec(),
        "old content via fd"
    );
    Ok(())
}

fn dir_new_name(c: &Ctx) -> Res {
    ok("mkdir", sys::mkdir(&c.p("d"), 0o755))?;
    put(&c.p("d/f"), b"x")?;
    let i = ino(c, "d")?;
    ok("rename d e", sys::rename(&c.p("d"), &c.p("e")))?;
    gone(c, "d")?;
    check_eq!(ino(c, "e")?, i, "inode of e");
    check_eq!(get(&c.p("e/f"))?, b"x".to_vec(), "content under renamed dir");
    Ok(())
}

fn dir_over_empty_dir(c: &Ctx) -> Res {
    ok("mkdir", sys::mkdir(&c.p("a"), 0o755))?;
    ok("mkdir", sys::mkdir(&c.p("b"), 0o755))?;
    put(&c.p("a/f"), b"x")?;
    let before = ok("stat .", sys::stat(&c.dir))?.st_nlink;
    let ia = ino(c, "a")?;
    ok("rename a over empty b", sys::rename(&c.p("a"), &c.p("b")))?;
    gone(c, "a")?;
    check_eq!(ino(c, "b")?, ia, "inode of b");
    check_eq!(get(&c.p("b/f"))?, b"x".to_vec(), "content moved along");
    check_eq!(
        ok("stat .", sys::stat(&c.dir))?.st_nlink,
        before - 1,
        "parent nlink after replacing a dir"
    );
    Ok(())
}

fn dir_over_nonempty_dir(c: &Ctx) -> Res {
    ok("mkdir", sys::mkdir(&c.p("a"), 0o755))?;
    ok("mkdir", sys::mkdir(&c.p("b"), 0o755))?;
    put(&c.p("b/f"), b"x")?;
    want_err(
        "rename dir over non-empty dir",
        sys::rename(&c.p("a"), &c.p("b")),
        libc::ENOTEMPTY,
    )?;
    ok("a still there", sys::lstat(&c.p("a")))?;
    ok("b/f still there", sys::lstat(&c.p("b/f")))?;
    Ok(())
}

fn file_over_dir(c: &Ctx) -> Res {
    put(&c.p("f"), b"x")?;
    ok("mkdir", sys::mkdir(&c.p("d"), 0o755))?;
    want_err(
        "rename file over dir",
        sys::rename(&c.p("f"), &c.p("d")),
        libc::EISDIR,
    )?;
    check_type("d", &ok("lstat d", sys::lstat(&c.p("d")))?, libc::S_IFDIR)?;
    ok("f still there", sys::lstat(&c.p("f")))?;
    Ok(())
}

fn dir_over_file(c: &Ctx) -> Res {
    put(&c.p("f"), b"x")?;
    ok("mkdir", sys::mkdir(&c.p("d"), 0o755))?;
    want_err(
        "rename dir over file",
        sys::rename(&c.p("d"), &c.p("f")),
        libc::ENOTDIR,
    )?;
    check_type("f", &ok("lstat f", sys::lstat(&c.p("f")))?, libc::S_IFREG)?;
    ok("d still there", sys::lstat(&c.p("d")))?;
    Ok(())
}

fn dir_into_own_subdir(c: &Ctx) -> Res {
    ok("mkdir", sys::mkdir(&c.p("d"), 0o755))?;
    ok("mkdir", sys::mkdir(&c.p("d/sub"), 0o755))?;
    want_err(
        "rename d d/sub/x",
        sys::rename(&c.p("d"), &c.p("d/sub/x")),
        libc::EINVAL,
    )?;
    want_err("rename d d/x", sys::rename(&c.p("d"), &c.p("d/x")), libc::EINVAL)?;
    ok("d/sub still there", sys::lstat(&c.p("d/sub")))?;
    gone(c, "d/sub/x")?;
    Ok(())
}

fn same_name(c: &Ctx) -> Res {
    put(&c.p("f"), b"x")?;
    let i = ino(c, "f")?;
    ok("rename f f", sys::rename(&c.p("f"), &c.p("f")))?;
    check_eq!(ino(c, "f")?, i, "inode after self-rename");
    check_eq!(
        ok("stat", sys::lstat(&c.p("f")))?.st_nlink,
        1,
        "nlink after self-rename"
    );
    ok("mkdir", sys::mkdir(&c.p("d"), 0o755))?;
    ok("rename d d", sys::rename(&c.p("d"), &c.p("d")))?;
    ok("d still there", sys::lstat(&c.p("d")))?;
    Ok(())
}

fn hard_links_onto_each_other(c: &Ctx) -> Res {
    put(&c.p("a"), b"x")?;
    ok("link a b", sys::link(&c.p("a"), &c.p("b")))?;
    ok("rename a b (same inode)", sys::rename(&c.p("a"), &c.p("b")))?;
    let (sa, sb) = (
        ok("lstat a", sys::lstat(&c.p("a")))?,
        ok("lstat b", sys::lstat(&c.p("b")))?,
    );
    check_eq!(sa.st_ino, sb.st_ino, "both names, same inode");
    check_eq!(sa.st_nlink, 2, "nlink after rename between links");
    Ok(())
}

fn missing_source(c: &Ctx) -> Res {
    want_err(
        "rename missing",
        sys::rename(&c.p("nope"), &c.p("x")),
        libc::ENOENT,
    )?;
    put(&c.p("f"), b"x")?;
    want_err(
        "rename into missing dir",
        sys::rename(&c.p("f"), &c.p("nodir/x")),
        libc::ENOENT,
    )?;
    want_err(
        "rename into a file's path",
        sys::rename(&c.p("f"), &c.p("f/x")),
        libc::ENOTDIR,
    )?;
    Ok(())
}

fn noreplace(c: &Ctx) -> Res {
    put(&c.p("a"), b"A")?;
    put(&c.p("b"), b"B")?;
    want_err(
        "RENAME_NOREPLACE onto existing",
        sys::renameat2(&c.p("a"), &c.p("b"), RENAME_NOREPLACE),
        libc::EEXIST,
    )?;
    check_eq!(get(&c.p("a"))?, b"A".to_vec(), "a untouched");
    check_eq!(get(&c.p("b"))?, b"B".to_vec(), "b untouched");
    ok(
        "RENAME_NOREPLACE to new name",
        sys::renameat2(&c.p("a"), &c.p("c"), RENAME_NOREPLACE),
    )?;
    gone(c, "a")?;
    check_eq!(get(&c.p("c"))?, b"A".to_vec(), "c after rename");
    Ok(())
}

fn exchange(c: &Ctx) -> Res {
    put(&c.p("f"), b"file")?;
    ok("mkdir", sys::mkdir(&c.p("d"), 0o755))?;
    put(&c.p("d/inner"), b"in")?;
    let (i_f, i_d) = (ino(c, "f")?, ino(c, "d")?);
    ok(
        "RENAME_EXCHANGE f d",
        sys::renameat2(&c.p("f"), &c.p("d"), RENAME_EXCHANGE),
    )?;
    let sf = ok("lstat f", sys::lstat(&c.p("f")))?;
    let sd = ok("lstat d", sys::lstat(&c.p("d")))?;
    check_type("f after exchange", &sf, libc::S_IFDIR)?;
    check_type("d after exchange", &sd, libc::S_IFREG)?;
    check_eq!(sf.st_ino as u64, i_d, "inode of f");
    check_eq!(sd.st_ino as u64, i_f, "inode of d");
    check_eq!(get(&c.p("d"))?, b"file".to_vec(), "content of d");
    check_eq!(get(&c.p("f/inner"))?, b"in".to_vec(), "content of f/inner");
    // Across directories: the directory's .. follows it.
    ok("mkdir p", sys::mkdir(&c.p("p"), 0o755))?;
    put(&c.p("p/x"), b"px")?;
    ok(
        "RENAME_EXCHANGE f p/x",
        sys::renameat2(&c.p("f"), &c.p("p/x"), RENAME_EXCHANGE),
    )?;
    check_eq!(get(&c.p("f"))?, b"px".to_vec(), "content of f");
    check_eq!(get(&c.p("p/x/inner"))?, b"in".to_vec(), "content of p/x/inner");
    check_eq!(ino(c, "p/x/..")?, ino(c, "p")?, "p/x/.. after exchange");
    Ok(())
}

fn exchange_missing(c: &Ctx) -> Res {
    put(&c.p("a"), b"A")?;
    want_err(
        "RENAME_EXCHANGE with missing target",
        sys::renameat2(&c.p("a"), &c.p("b"), RENAME_EXCHANGE),
        libc::ENOENT,
    )?;
    check_eq!(get(&c.p("a"))?, b"A".to_vec(), "a untouched");
    gone(c, "b")?;
    want_err(
        "RENAME_EXCHANGE|RENAME_NOREPLACE",
        sys::renameat2(&c.p("a"), &c.p("a"), RENAME_EXCHANGE | RENAME_NOREPLACE),
        libc::EINVAL,
    )?;
    Ok(())
}

fn subdir_between_parents(c: &Ctx) -> Res {
    for d in ["p1", "p2", "p1/s"] {
        ok("mkdir", sys::mkdir(&c.p(d), 0o755))?;
    }
    let nl = |n: &str| -> Result<u64, Fail> { Ok(ok("lstat", sys::lstat(&c.p(n)))?.st_nlink as u64) };
    check_eq!((nl("p1")?, nl("p2")?), (3, 2), "parents' nlink before");
    ok("rename p1/s p2/s", sys::rename(&c.p("p1/s"), &c.p("p2/s")))?;
    check_eq!((nl("p1")?, nl("p2")?), (2, 3), "parents' nlink after");
    check_eq!(nl("p2/s")?, 2, "moved dir's nlink");
    check_eq!(ino(c, "p2/s/..")?, ino(c, "p2")?, "moved dir's ..");
    // Replacing an empty dir in another parent.
    ok("mkdir p1/t", sys::mkdir(&c.p("p1/t"), 0o755))?;
    ok("rename p2/s over p1/t", sys::rename(&c.p("p2/s"), &c.p("p1/t")))?;
    check_eq!((nl("p1")?, nl("p2")?), (3, 2), "parents' nlink after replacing");
    Ok(())
}

/// rename updates ctime of the moved inode (Linux, tmpfs and ext4) and
/// mtime+ctime of both parent directories; atime/mtime of the inode stay.
fn times(c: &Ctx) -> Res {
    ok("mkdir", sys::mkdir(&c.p("p1"), 0o755))?;
    ok("mkdir", sys::mkdir(&c.p("p2"), 0o755))?;
    put(&c.p("p1/f"), b"x")?;
    for n in ["p1", "p2", "p1/f"] {
        set_old(&c.p(n))?;
    }
    let before = ok("stat", sys::lstat(&c.p("p1/f")))?;
    let dirs_before = [
        ok("stat", sys::lstat(&c.p("p1")))?,
        ok("stat", sys::lstat(&c.p("p2")))?,
    ];
    tick_past(&[&c.p("p1"), &c.p("p2"), &c.p("p1/f")])?;
    ok("rename p1/f p2/g", sys::rename(&c.p("p1/f"), &c.p("p2/g")))?;
    let after = ok("stat", sys::lstat(&c.p("p2/g")))?;
    check!(
        ctime(&after) > ctime(&before),
        "ctime of renamed file did not change"
    );
    check_eq!(mtime(&after), OLD, "mtime of renamed file");
    check_eq!(atime(&after), OLD, "atime of renamed file");
    for (p, b) in ["p1", "p2"].iter().zip(dirs_before.iter()) {
        let st = ok("stat", sys::lstat(&c.p(p)))?;
        check!(mtime(&st) != OLD, "mtime of {p} did not change");
        check!(ctime(&st) > ctime(b), "ctime of {p} did not change");
    }
    Ok(())
}

/// RENAME_WHITEOUT (needs CAP_MKNOD): the rename leaves a whiteout, a
/// character device 0/0, at the old name — of a file, over an existing
/// target, and of a directory; never with RENAME_EXCHANGE.
fn whiteout(c: &Ctx) -> Res {
    need_root()?;
    put(&c.p("a"), b"data")?;
    put(&c.p("old"), b"replaced")?;
    ok("mkdir", sys::mkdir(&c.p("d"), 0o755))?;
    let a = ino(c, "a")?;
    ok(
        "rename a b WHITEOUT",
        sys::renameat2(&c.p("a"), &c.p("b"), RENAME_WHITEOUT),
    )?;
    ok(
        "rename b old WHITEOUT",
        sys::renameat2(&c.p("b"), &c.p("old"), RENAME_WHITEOUT),
    )?;
    ok(
        "rename d e WHITEOUT",
        sys::renameat2(&c.p("d"), &c.p("e"), RENAME_WHITEOUT),
    )?;
    for name in ["a", "b", "d"] {
        let st = ok(&format!("lstat {name}"), sys::lstat(&c.p(name)))?;
        check_type(&format!("whiteout {name}"), &st, libc::S_IFCHR)?;
        check_eq!(
            st.st_rdev,
            sys::makedev(0, 0),
            format!("device of whiteout {name}")
        );
    }
    check_eq!(ino(c, "old")?, a, "the file under its last name");
    check_eq!(get(&c.p("old"))?, b"data".to_vec(), "its content");
    check_type("e", &ok("lstat e", sys::lstat(&c.p("e")))?, libc::S_IFDIR)?;
    put(&c.p("x"), b"x")?;
    want_err(
        "RENAME_EXCHANGE | RENAME_WHITEOUT",
        sys::renameat2(&c.p("x"), &c.p("old"), RENAME_EXCHANGE | RENAME_WHITEOUT),
        libc::EINVAL,
    )?;
    Ok(())
}
