//! Hard links (link(2)) and symbolic links (symlink(2), readlink(2)):
//! link counts, shared content, errnos, and symlink target round trips.

use crate::sys;
use crate::util::*;

pub const CASES: &[Case] = &[
    Case::new("links/link_basic", link_basic),
    Case::new("links/link_exists", link_exists),
    Case::new("links/link_dir", link_dir),
    Case::new("links/link_missing", link_missing),
    Case::new("links/unlink_one_of_two", unlink_one_of_two),
    Case::new("links/symlink_round_trip", symlink_round_trip),
    Case::new("links/symlink_dangling", symlink_dangling),
    Case::new("links/symlink_exists", symlink_exists),
    Case::new("links/readlink_not_symlink", readlink_not_symlink),
    Case::new("links/symlink_loop", symlink_loop),
    Case::new("links/link_to_symlink", link_to_symlink),
];

fn link_basic(c: &Ctx) -> Res {
    let (a, b) = (c.p("a"), c.p("b"));
    put(&a, b"one")?;
    ok("link a b", sys::link(&a, &b))?;
    let (sa, sb) = (ok("stat a", sys::stat(&a))?, ok("stat b", sys::stat(&b))?);
    check_eq!(sa.st_ino, sb.st_ino, "inode of both names");
    check_eq!(sa.st_nlink, 2, "nlink after link");
    // Content is shared both ways.
    let fd = ok("open b", sys::open(&b, libc::O_WRONLY, 0))?;
    ok("pwrite via b", sys::pwrite(&fd, b"ONE", 0))?;
    drop(fd);
    check_eq!(get(&a)?, b"ONE".to_vec(), "content via a");
    let fd = ok("open a", sys::open(&a, libc::O_WRONLY | libc::O_APPEND, 0))?;
    ok("append via a", sys::write(&fd, b"+"))?;
    drop(fd);
    check_eq!(get(&b)?, b"ONE+".to_vec(), "content via b");
    ok("mkdir", sys::mkdir(&c.p("d"), 0o755))?;
    ok("link a d/c", sys::link(&a, &c.p("d/c")))?;
    check_eq!(ok("stat", sys::stat(&a))?.st_nlink, 3, "nlink after second link");
    Ok(())
}

fn link_exists(c: &Ctx) -> Res {
    put(&c.p("a"), b"a")?;
    put(&c.p("b"), b"b")?;
    want_err(
        "link onto existing file",
        sys::link(&c.p("a"), &c.p("b")),
        libc::EEXIST,
    )?;
    ok("mkdir", sys::mkdir(&c.p("d"), 0o755))?;
    want_err(
        "link onto existing dir",
        sys::link(&c.p("a"), &c.p("d")),
        libc::EEXIST,
    )?;
    check_eq!(ok("stat", sys::stat(&c.p("a")))?.st_nlink, 1, "nlink unchanged");
    check_eq!(get(&c.p("b"))?, b"b".to_vec(), "b untouched");
    Ok(())
}

fn link_dir(c: &Ctx) -> Res {
    ok("mkdir", sys::mkdir(&c.p("d"), 0o755))?;
    want_err("link a directory", sys::link(&c.p("d"), &c.p("e")), libc::EPERM)?;
    want_err("no new name", sys::lstat(&c.p("e")), libc::ENOENT)?;
    check_eq!(
        ok("stat", sys::stat(&c.p("d")))?.st_nlink,
        2,
        "dir nlink unchanged"
    );
    Ok(())
}

fn link_missing(c: &Ctx) -> Res {
    want_err(
        "link missing source",
        sys::link(&c.p("nope"), &c.p("x")),
        libc::ENOENT,
    )?;
    put(&c.p("a"), b"a")?;
    want_err(
        "link into missing dir",
        sys::link(&c.p("a"), &c.p("nodir/x")),
        libc::ENOENT,
    )?;
    Ok(())
}

fn unlink_one_of_two(c: &Ctx) -> Res {
    put(&c.p("a"), b"shared")?;
    ok("link", sys::link(&c.p("a"), &c.p("b")))?;
    ok("unlink a", sys::unlink(&c.p("a")))?;
    let sb = ok("stat b", sys::stat(&c.p("b")))?;
    check_eq!(sb.st_nlink, 1, "nlink after unlinking one name");
    check_eq!(get(&c.p("b"))?, b"shared".to_vec(), "content via remaining name");
    Ok(())
}

fn symlink_round_trip(c: &Ctx) -> Res {
    put(&c.p("f"), b"via link")?;
    let targets: [&[u8]; 4] = [b"f", b"./f", b"../nowhere/x", b"/absolute/path with spaces"];
    for (i, t) in targets.iter().enumerate() {
        let l = c.p(&format!("l{i}"));
        ok("symlink", sys::symlink(t, &l))?;
        check_eq!(ok("readlink", sys::readlink(&l))?, t.to_vec(), "readlink target");
        let st = ok("lstat", sys::lstat(&l))?;
        check_type("lstat of symlink", &st, libc::S_IFLNK)?;
        check_eq!(st.st_size as usize, t.len(), "symlink st_size = target length");
    }
    // A long target (but under a page).
    let long = vec![b'x'; 1000];
    ok("symlink long", sys::symlink(&long, &c.p("long")))?;
    check_eq!(ok("readlink", sys::readlink(&c.p("long")))?, long, "long target");
    // stat and open follow the link.
    check_type(
        "stat through link",
        &ok("stat", sys::stat(&c.p("l0")))?,
        libc::S_IFREG,
    )?;
    check_eq!(get(&c.p("l0"))?, b"via link".to_vec(), "content through link");
    Ok(())
}

fn symlink_dangling(c: &Ctx) -> Res {
    let l = c.p("l");
    ok("symlink", sys::symlink(b"missing", &l))?;
    want_err("stat dangling", sys::stat(&l), libc::ENOENT)?;
    want_err("open dangling", sys::open(&l, libc::O_RDONLY, 0), libc::ENOENT)?;
    check_type("lstat dangling", &ok("lstat", sys::lstat(&l))?, libc::S_IFLNK)?;
    check_eq!(
        ok("readlink", sys::readlink(&l))?,
        b"missing".to_vec(),
        "readlink dangling"
    );
    ok("unlink dangling", sys::unlink(&l))?;
    want_err("gone", sys::lstat(&l), libc::ENOENT)?;
    Ok(())
}

fn symlink_exists(c: &Ctx) -> Res {
    put(&c.p("f"), b"x")?;
    want_err(
        "symlink onto existing file",
        sys::symlink(b"t", &c.p("f")),
        libc::EEXIST,
    )?;
    ok("symlink", sys::symlink(b"t", &c.p("l")))?;
    want_err(
        "symlink onto existing symlink",
        sys::symlink(b"u", &c.p("l")),
        libc::EEXIST,
    )?;
    check_eq!(
        ok("readlink", sys::readlink(&c.p("l")))?,
        b"t".to_vec(),
        "target unchanged"
    );
    want_err(
        "symlink in missing dir",
        sys::symlink(b"t", &c.p("nodir/l")),
        libc::ENOENT,
    )?;
    Ok(())
}

fn readlink_not_symlink(c: &Ctx) -> Res {
    put(&c.p("f"), b"x")?;
    want_err("readlink a file", sys::readlink(&c.p("f")), libc::EINVAL)?;
    ok("mkdir", sys::mkdir(&c.p("d"), 0o755))?;
    want_err("readlink a dir", sys::readlink(&c.p("d")), libc::EINVAL)?;
    want_err("readlink missing", sys::readlink(&c.p("nope")), libc::ENOENT)?;
    Ok(())
}

fn symlink_loop(c: &Ctx) -> Res {
    ok("symlink a->b", sys::symlink(b"b", &c.p("a")))?;
    ok("symlink b->a", sys::symlink(b"a", &c.p("b")))?;
    want_err("stat a symlink loop", sys::stat(&c.p("a")), libc::ELOOP)?;
    want_err(
        "open a symlink loop",
        sys::open(&c.p("a"), libc::O_RDONLY, 0),
        libc::ELOOP,
    )?;
    Ok(())
}

/// link(2) on Linux does not follow a symlink source: the new name is
/// another link to the symlink itself.
fn link_to_symlink(c: &Ctx) -> Res {
    put(&c.p("f"), b"x")?;
    ok("symlink", sys::symlink(b"f", &c.p("l")))?;
    ok("link l m", sys::link(&c.p("l"), &c.p("m")))?;
    let (sl, sm) = (
        ok("lstat l", sys::lstat(&c.p("l")))?,
        ok("lstat m", sys::lstat(&c.p("m")))?,
    );
    check_type("m", &sm, libc::S_IFLNK)?;
    check_eq!(sm.st_ino, sl.st_ino, "inode of m");
    check_eq!(sm.st_nlink, 2, "nlink of symlink with two names");
    check_eq!(
        ok("stat f", sys::stat(&c.p("f")))?.st_nlink,
        1,
        "target nlink unchanged"
    );
    Ok(())
}
