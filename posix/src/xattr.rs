//! User extended attributes: set/get/list/remove, XATTR_CREATE and
//! XATTR_REPLACE, ENODATA and ERANGE; the largest value (64 KiB; E2BIG
//! past it), the longest name (255 bytes; ERANGE past it) and names up to
//! the 64 KiB of a listxattr answer. Skipped if the filesystem answers
//! EOPNOTSUPP for user.* attributes; the 64 KiB value is skipped where the
//! filesystem holds no value that large (ENOSPC: ext4 without `ea_inode`),
//! and the names stop early where it answers ENOSPC (ext4 holds a block of
//! them).

use crate::sys;
use crate::util::*;

pub const CASES: &[Case] = &[
    Case::new("xattr/set_get_list_remove", set_get_list_remove),
    Case::new("xattr/create_replace_flags", create_replace_flags),
    Case::new("xattr/missing_and_erange", missing_and_erange),
    Case::new("xattr/on_directory", on_directory),
    Case::new("xattr/largest_value", largest_value),
    Case::new("xattr/longest_name", longest_name),
    Case::new("xattr/names_to_the_list_limit", names_to_the_list_limit),
];

/// The largest value Linux passes (`XATTR_SIZE_MAX`).
const VALUE_MAX: usize = 65536;

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed))
        .collect()
}

/// Set a first attribute; EOPNOTSUPP means the fs has no user xattrs: skip.
fn first_set(p: &std::path::Path, name: &str, val: &[u8]) -> Res {
    match sys::setxattr(p, name, val, 0) {
        Ok(()) => Ok(()),
        Err(e) if e.0 == libc::EOPNOTSUPP => Err(Fail::Skip("user xattrs not supported".into())),
        Err(e) => Err(Fail::Fail(format!("setxattr {name}: unexpected {e}"))),
    }
}

fn names(p: &std::path::Path) -> Result<Vec<String>, Fail> {
    let (len, _) = ok("listxattr size", sys::listxattr(p, 0))?;
    let (len2, buf) = ok("listxattr", sys::listxattr(p, len + 64))?;
    check!(len2 <= len, "listxattr grew from {len} to {len2}");
    let mut v: Vec<String> = buf
        .split(|&b| b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        // Only user.* names belong to the case (security.* may be added by LSMs).
        .filter(|s| s.starts_with("user."))
        .collect();
    v.sort();
    Ok(v)
}

fn set_get_list_remove(c: &Ctx) -> Res {
    let f = c.p("f");
    put(&f, b"x")?;
    first_set(&f, "user.one", b"1")?;
    // Modest sizes: ext4 with 1 KiB blocks holds little more than 900 bytes.
    let big = vec![0xabu8; 200];
    ok("setxattr user.two", sys::setxattr(&f, "user.two", &big, 0))?;
    ok("setxattr empty value", sys::setxattr(&f, "user.empty", b"", 0))?;
    let (n, v) = ok("getxattr", sys::getxattr(&f, "user.one", 100))?;
    check_eq!((n, v), (1, b"1".to_vec()), "user.one");
    let (n, _) = ok("getxattr size", sys::getxattr(&f, "user.two", 0))?;
    check_eq!(n, 200, "size query of user.two");
    check_eq!(
        ok("getxattr", sys::getxattr(&f, "user.two", 300))?.1,
        big,
        "user.two value"
    );
    check_eq!(
        ok("getxattr", sys::getxattr(&f, "user.empty", 10))?.0,
        0,
        "empty value length"
    );
    check_eq!(
        names(&f)?,
        vec!["user.empty".to_string(), "user.one".into(), "user.two".into()],
        "listxattr"
    );
    // Overwrite without flags.
    ok("setxattr overwrite", sys::setxattr(&f, "user.one", b"uno", 0))?;
    check_eq!(
        ok("getxattr", sys::getxattr(&f, "user.one", 100))?.1,
        b"uno".to_vec(),
        "overwritten value"
    );
    ok("removexattr", sys::removexattr(&f, "user.one"))?;
    want_err(
        "getxattr removed",
        sys::getxattr(&f, "user.one", 100),
        libc::ENODATA,
    )?;
    want_err(
        "removexattr removed",
        sys::removexattr(&f, "user.one"),
        libc::ENODATA,
    )?;
    check_eq!(
        names(&f)?,
        vec!["user.empty".to_string(), "user.two".into()],
        "listxattr after remove"
    );
    // Attributes belong to the inode: visible through a hard link, survive rename.
    ok("link", sys::link(&f, &c.p("g")))?;
    ok("rename", sys::rename(&f, &c.p("h")))?;
    check_eq!(
        ok("getxattr via link", sys::getxattr(&c.p("g"), "user.two", 300))?.1,
        big,
        "value via link"
    );
    Ok(())
}

fn create_replace_flags(c: &Ctx) -> Res {
    let f = c.p("f");
    put(&f, b"x")?;
    first_set(&f, "user.a", b"old")?;
    want_err(
        "XATTR_CREATE on existing",
        sys::setxattr(&f, "user.a", b"new", libc::XATTR_CREATE),
        libc::EEXIST,
    )?;
    check_eq!(
        ok("getxattr", sys::getxattr(&f, "user.a", 100))?.1,
        b"old".to_vec(),
        "value after failed create"
    );
    want_err(
        "XATTR_REPLACE on missing",
        sys::setxattr(&f, "user.b", b"v", libc::XATTR_REPLACE),
        libc::ENODATA,
    )?;
    want_err(
        "user.b not created",
        sys::getxattr(&f, "user.b", 100),
        libc::ENODATA,
    )?;
    ok(
        "XATTR_CREATE on missing",
        sys::setxattr(&f, "user.b", b"v", libc::XATTR_CREATE),
    )?;
    ok(
        "XATTR_REPLACE on existing",
        sys::setxattr(&f, "user.a", b"new", libc::XATTR_REPLACE),
    )?;
    check_eq!(
        ok("getxattr", sys::getxattr(&f, "user.a", 100))?.1,
        b"new".to_vec(),
        "replaced value"
    );
    Ok(())
}

fn missing_and_erange(c: &Ctx) -> Res {
    let f = c.p("f");
    put(&f, b"x")?;
    first_set(&f, "user.long", b"0123456789")?;
    want_err(
        "getxattr missing",
        sys::getxattr(&f, "user.nope", 100),
        libc::ENODATA,
    )?;
    want_err(
        "getxattr missing (size query)",
        sys::getxattr(&f, "user.nope", 0),
        libc::ENODATA,
    )?;
    want_err(
        "getxattr small buffer",
        sys::getxattr(&f, "user.long", 4),
        libc::ERANGE,
    )?;
    let (len, _) = ok("listxattr size", sys::listxattr(&f, 0))?;
    check!(len >= "user.long\0".len(), "listxattr size {len} too small");
    want_err("listxattr small buffer", sys::listxattr(&f, 3), libc::ERANGE)?;
    want_err(
        "getxattr on missing file",
        sys::getxattr(&c.p("nope"), "user.long", 100),
        libc::ENOENT,
    )?;
    Ok(())
}

fn on_directory(c: &Ctx) -> Res {
    let d = c.p("d");
    ok("mkdir", sys::mkdir(&d, 0o755))?;
    first_set(&d, "user.dir", b"dv")?;
    check_eq!(
        ok("getxattr", sys::getxattr(&d, "user.dir", 100))?.1,
        b"dv".to_vec(),
        "value on dir"
    );
    check_eq!(names(&d)?, vec!["user.dir".to_string()], "listxattr on dir");
    ok("removexattr", sys::removexattr(&d, "user.dir"))?;
    check_eq!(names(&d)?, Vec::<String>::new(), "listxattr after remove");
    Ok(())
}

fn largest_value(c: &Ctx) -> Res {
    let f = c.p("f");
    put(&f, b"x")?;
    first_set(&f, "user.small", b"s")?;
    let big = pattern(VALUE_MAX, 1);
    match sys::setxattr(&f, "user.big", &big, 0) {
        Ok(()) => {}
        Err(e) if e.0 == libc::ENOSPC => {
            return Err(Fail::Skip(
                "no value of 64 KiB fits (ENOSPC, as on ext4 without ea_inode)".into(),
            ))
        }
        Err(e) => return Err(Fail::Fail(format!("setxattr of 64 KiB: unexpected {e}"))),
    }
    want_err(
        "setxattr past 64 KiB",
        sys::setxattr(&f, "user.bigger", &pattern(VALUE_MAX + 1, 2), 0),
        libc::E2BIG,
    )?;
    check_eq!(
        ok("getxattr size", sys::getxattr(&f, "user.big", 0))?.0,
        VALUE_MAX,
        "size query"
    );
    check_eq!(
        ok("getxattr", sys::getxattr(&f, "user.big", VALUE_MAX))?.1,
        big,
        "64 KiB value"
    );
    want_err(
        "getxattr one byte short",
        sys::getxattr(&f, "user.big", VALUE_MAX - 1),
        libc::ERANGE,
    )?;
    // Large replaced by small, small by large, and large by large.
    ok(
        "replace by small",
        sys::setxattr(&f, "user.big", b"tiny", libc::XATTR_REPLACE),
    )?;
    check_eq!(
        ok("getxattr", sys::getxattr(&f, "user.big", 100))?.1,
        b"tiny".to_vec(),
        "small again"
    );
    let other = pattern(50_000, 3);
    ok(
        "replace by large",
        sys::setxattr(&f, "user.small", &other, libc::XATTR_REPLACE),
    )?;
    check_eq!(
        ok("getxattr", sys::getxattr(&f, "user.small", VALUE_MAX))?.1,
        other,
        "large now"
    );
    let third = pattern(VALUE_MAX, 4);
    ok(
        "replace large by large",
        sys::setxattr(&f, "user.small", &third, 0),
    )?;
    check_eq!(
        ok("getxattr", sys::getxattr(&f, "user.small", VALUE_MAX))?.1,
        third,
        "replaced"
    );
    check_eq!(
        names(&f)?,
        vec!["user.big".to_string(), "user.small".into()],
        "listxattr"
    );
    ok("removexattr large", sys::removexattr(&f, "user.small"))?;
    want_err(
        "getxattr removed",
        sys::getxattr(&f, "user.small", VALUE_MAX),
        libc::ENODATA,
    )?;
    Ok(())
}

fn longest_name(c: &Ctx) -> Res {
    let f = c.p("f");
    put(&f, b"x")?;
    let name = format!("user.{}", "n".repeat(250));
    first_set(&f, &name, b"long")?;
    check_eq!(
        ok("getxattr", sys::getxattr(&f, &name, 100))?.1,
        b"long".to_vec(),
        "255-byte name"
    );
    check_eq!(names(&f)?, vec![name.clone()], "listxattr");
    let longer = format!("{name}n");
    want_err(
        "setxattr 256-byte name",
        sys::setxattr(&f, &longer, b"v", 0),
        libc::ERANGE,
    )?;
    want_err(
        "getxattr 256-byte name",
        sys::getxattr(&f, &longer, 100),
        libc::ERANGE,
    )?;
    ok("removexattr", sys::removexattr(&f, &name))?;
    Ok(())
}

fn names_to_the_list_limit(c: &Ctx) -> Res {
    let f = c.p("f");
    put(&f, b"x")?;
    let name = |k: usize| format!("user.{k:05}");
    first_set(&f, &name(0), b"0")?;
    // Each name takes 11 bytes of the answer: as many as fit in 64 KiB.
    let most = 65536 / 11;
    let mut set = 1;
    while set < most {
        match sys::setxattr(&f, &name(set), set.to_string().as_bytes(), libc::XATTR_CREATE) {
            Ok(()) => set += 1,
            Err(e) if e.0 == libc::ENOSPC => break,
            Err(e) => return Err(Fail::Fail(format!("setxattr {}: unexpected {e}", name(set)))),
        }
    }
    let (len, _) = ok("listxattr size", sys::listxattr(&f, 0))?;
    check_eq!(len, set * 11, format!("listxattr size with {set} names"));
    let want: Vec<String> = (0..set).map(name).collect();
    check_eq!(names(&f)?, want, format!("listxattr of {set} names"));
    for k in (0..set).step_by(97) {
        let v = ok("getxattr", sys::getxattr(&f, &name(k), 16))?.1;
        check_eq!(v, k.to_string().into_bytes(), format!("value of {}", name(k)));
    }
    Ok(())
}
