//! POSIX ACLs, written as the kernel's xattr encoding: an access ACL with a
//! named entry is enforced and shows its mask as the group bits, chmod
//! rewrites the mask, an ACL the mode bits can say is folded into them, a
//! directory's default ACL is inherited (masked by the mode asked for, not
//! by the umask), and a default ACL on a file is refused. Skipped where the
//! filesystem has no ACLs (EOPNOTSUPP); the enforcement part needs root.

use crate::sys;
use crate::util::*;

pub const CASES: &[Case] = &[
    Case::new("acl/named_user_and_mask", named_user_and_mask),
    Case::new("acl/plain_acl_folds_into_mode", plain_acl_folds_into_mode),
    Case::new("acl/default_acl_inherited", default_acl_inherited),
];

const NOBODY: u32 = 65534;
const ACCESS: &str = "system.posix_acl_access";
const DEFAULT: &str = "system.posix_acl_default";
const UNDEFINED: u32 = u32::MAX;
const USER_OBJ: u16 = 1;
const USER: u16 = 2;
const GROUP_OBJ: u16 = 4;
const MASK: u16 = 0x10;
const OTHER: u16 = 0x20;

/// The xattr value of an ACL with these `(tag, perm, id)` entries.
fn encode(entries: &[(u16, u16, u32)]) -> Vec<u8> {
    let mut v = 2u32.to_le_bytes().to_vec();
    for &(tag, perm, id) in entries {
        v.extend_from_slice(&tag.to_le_bytes());
        v.extend_from_slice(&perm.to_le_bytes());
        v.extend_from_slice(&id.to_le_bytes());
    }
    v
}

fn decode(v: &[u8]) -> Vec<(u16, u16, u32)> {
    v.get(4..)
        .unwrap_or_default()
        .chunks_exact(8)
        .map(|e| {
            (
                u16::from_le_bytes([e[0], e[1]]),
                u16::from_le_bytes([e[2], e[3]]),
                u32::from_le_bytes([e[4], e[5], e[6], e[7]]),
            )
        })
        .collect()
}

/// Set an ACL; EOPNOTSUPP means the filesystem has none: skip.
fn set_acl(p: &std::path::Path, name: &str, entries: &[(u16, u16, u32)]) -> Res {
    match sys::setxattr(p, name, &encode(entries), 0) {
        Ok(()) => Ok(()),
        Err(e) if e.0 == libc::EOPNOTSUPP => Err(Fail::Skip("no POSIX ACLs".into())),
        Err(e) => Err(Fail::Fail(format!("setxattr {name}: unexpected {e}"))),
    }
}

fn get_acl(p: &std::path::Path, name: &str) -> Result<Vec<(u16, u16, u32)>, Fail> {
    Ok(decode(&ok("getxattr ACL", sys::getxattr(p, name, 4096))?.1))
}

fn mode(p: &std::path::Path) -> Result<u32, Fail> {
    Ok(ok("stat", sys::stat(p))?.st_mode & 0o7777)
}

fn named_user_and_mask(c: &Ctx) -> Res {
    let f = c.p("f");
    put(&f, b"secret")?;
    ok("chmod", sys::chmod(&f, 0o600))?;
    set_acl(
        &f,
        ACCESS,
        &[
            (USER_OBJ, 6, UNDEFINED),
            (USER, 4, NOBODY),
            (GROUP_OBJ, 0, UNDEFINED),
            (MASK, 4, UNDEFINED),
            (OTHER, 0, UNDEFINED),
        ],
    )?;
    check_eq!(mode(&f)?, 0o640, "the mask shows as the group bits");
    ok("chmod", sys::chmod(&f, 0o600))?;
    let acl = get_acl(&f, ACCESS)?;
    check!(
        acl.contains(&(MASK, 0, UNDEFINED)),
        "chmod 600 left the mask in {acl:?}"
    );
    check!(acl.contains(&(USER, 4, NOBODY)), "the named entry stays: {acl:?}");
    if c.need_perm().is_ok() {
        as_user(NOBODY, NOBODY, &[], || {
            want_err("read, mask ---", sys::open(&f, libc::O_RDONLY, 0), libc::EACCES)
        })?;
        ok("chmod", sys::chmod(&f, 0o640))?;
        as_user(NOBODY, NOBODY, &[], || {
            ok("read, named entry r--", sys::open(&f, libc::O_RDONLY, 0)).map(drop)?;
            want_err(
                "write, named entry r--",
                sys::open(&f, libc::O_WRONLY, 0),
                libc::EACCES,
            )
        })?;
    }
    Ok(())
}

fn plain_acl_folds_into_mode(c: &Ctx) -> Res {
    let f = c.p("f");
    put(&f, b"x")?;
    ok("chmod", sys::chmod(&f, 0o600))?;
    set_acl(
        &f,
        ACCESS,
        &[
            (USER_OBJ, 7, UNDEFINED),
            (GROUP_OBJ, 5, UNDEFINED),
            (OTHER, 1, UNDEFINED),
        ],
    )?;
    check_eq!(mode(&f)?, 0o751, "mode from a plain ACL");
    // Nothing is stored: the mode says it all.
    want_err(
        "getxattr of a folded ACL",
        sys::getxattr(&f, ACCESS, 4096),
        libc::ENODATA,
    )
}

fn default_acl_inherited(c: &Ctx) -> Res {
    let d = c.p("d");
    ok("mkdir", sys::mkdir(&d, 0o755))?;
    let default = [
        (USER_OBJ, 7, UNDEFINED),
        (USER, 7, NOBODY),
        (GROUP_OBJ, 5, UNDEFINED),
        (MASK, 7, UNDEFINED),
        (OTHER, 5, UNDEFINED),
    ];
    set_acl(&d, DEFAULT, &default)?;
    let (f, sub) = (d.join("f"), d.join("sub"));
    // SAFETY: umask has no preconditions; the suite runs one case at a time.
    let old = unsafe { libc::umask(0o077) };
    let made = sys::open(&f, libc::O_CREAT | libc::O_WRONLY, 0o666)
        .map(drop)
        .and_then(|()| sys::mkdir(&sub, 0o777));
    unsafe { libc::umask(old) };
    ok("create in a directory with a default ACL", made)?;
    check_eq!(
        mode(&f)?,
        0o664,
        "file mode: masked by the default ACL, not the umask"
    );
    check_eq!(mode(&sub)?, 0o775, "directory mode");
    let acl = get_acl(&f, ACCESS)?;
    check!(
        acl.contains(&(USER, 7, NOBODY)) && acl.contains(&(MASK, 6, UNDEFINED)),
        "{acl:?}"
    );
    check!(acl.contains(&(OTHER, 4, UNDEFINED)), "{acl:?}");
    check_eq!(
        get_acl(&sub, DEFAULT)?,
        default.to_vec(),
        "a directory inherits the default ACL"
    );
    want_err(
        "default ACL on a file",
        sys::setxattr(&f, DEFAULT, &encode(&default), 0),
        libc::EACCES,
    )?;
    Ok(())
}
