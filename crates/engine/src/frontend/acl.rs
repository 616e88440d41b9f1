//! Frontend layer: POSIX access control lists, kept as the two xattrs Linux
//! names them by (`system.posix_acl_access`, `system.posix_acl_default`) in
//! the kernel's own encoding (a version word, then 8-byte entries). What a
//! filesystem owes them, as ext4 does it:
//!
//! - an access ACL that says no more than the mode bits is not stored; one
//!   that does sets the group bits of the mode from its mask;
//! - a chmod rewrites the owner, mask (or group) and other entries;
//! - a file made in a directory with a default ACL gets that ACL, masked by
//!   the mode it was made with (and no umask); a directory also inherits the
//!   default ACL itself.
//!
//! Calls nothing outside this module but the inode attributes.

use crate::error::{err, Errno, Result};
use crate::structures::inode::InodeAttrs;

/// Name of the access ACL's xattr.
pub const ACL_ACCESS: &[u8] = b"system.posix_acl_access";
/// Name of the default ACL's xattr (directories only).
pub const ACL_DEFAULT: &[u8] = b"system.posix_acl_default";

const VERSION: u32 = 2;
const USER_OBJ: u16 = 0x01;
const USER: u16 = 0x02;
const GROUP_OBJ: u16 = 0x04;
const GROUP: u16 = 0x08;
const MASK: u16 = 0x10;
const OTHER: u16 = 0x20;
/// Most entries an ACL may have (what fits a 64 KiB xattr).
const MAX_ENTRIES: usize = (65536 - 4) / 8;

/// One entry: tag, permission bits (rwx), user or group id for the named kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    tag: u16,
    perm: u16,
    id: u32,
}

/// A decoded, valid ACL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acl(Vec<Entry>);

impl Acl {
    /// Decode and check an ACL xattr value: EINVAL unless it has the
    /// version, whole entries in order, exactly one owner, owning-group and
    /// other entry, and a mask whenever it names users or groups.
    pub fn parse(value: &[u8]) -> Result<Acl> {
        let Some((head, body)) = value.split_first_chunk::<4>() else {
            return err(Errno::EINVAL);
        };
        if u32::from_le_bytes(*head) != VERSION || body.len() % 8 != 0 || body.len() / 8 > MAX_ENTRIES {
            return err(Errno::EINVAL);
        }
        let entries: Vec<Entry> = body
            .chunks_exact(8)
            .map(|e| Entry {
                tag: u16::from_le_bytes([e[0], e[1]]),
                perm: u16::from_le_bytes([e[2], e[3]]),
                id: u32::from_le_bytes([e[4], e[5], e[6], e[7]]),
            })
            .collect();
        let count = |tag| entries.iter().filter(|e| e.tag == tag).count();
        let named = count(USER) + count(GROUP);
        let ordered = entries.windows(2).all(|w| {
            (w[0].tag, w[0].id) < (w[1].tag, w[1].id) || (w[0].tag == w[1].tag && !is_named(w[0].tag))
        });
        let known = entries
            .iter()
            .all(|e| e.perm & !7 == 0 && [USER_OBJ, USER, GROUP_OBJ, GROUP, MASK, OTHER].contains(&e.tag));
        if !known
            || !ordered
            || count(USER_OBJ) != 1
            || count(GROUP_OBJ) != 1
            || count(OTHER) != 1
            || count(MASK) > 1
            || (named > 0 && count(MASK) == 0)
        {
            return err(Errno::EINVAL);
        }
        Ok(Acl(entries))
    }

    /// The xattr value.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(4 + 8 * self.0.len());
        v.extend_from_slice(&VERSION.to_le_bytes());
        for e in &self.0 {
            v.extend_from_slice(&e.tag.to_le_bytes());
            v.extend_from_slice(&e.perm.to_le_bytes());
            v.extend_from_slice(&e.id.to_le_bytes());
        }
        v
    }

    /// Whether the ACL says no more than mode bits can (only the owner,
    /// owning-group and other entries).
    fn is_plain(&self) -> bool {
        self.0
            .iter()
            .all(|e| matches!(e.tag, USER_OBJ | GROUP_OBJ | OTHER))
    }

    /// The permission bits of `mode` that the ACL decides: owner, the
    /// group class (the mask if there is one, else the owning group), other.
    fn mode_bits(&self, mode: u32) -> u32 {
        let mut m = mode & !0o777;
        let has_mask = self.0.iter().any(|e| e.tag == MASK);
        for e in &self.0 {
            let p = u32::from(e.perm);
            match e.tag {
                USER_OBJ => m |= p << 6,
                GROUP_OBJ if !has_mask => m |= p << 3,
                MASK => m |= p << 3,
                OTHER => m |= p,
                _ => {}
            }
        }
        m
    }

    /// Apply a chmod to `mode` (permission bits): owner, group class and
    /// other entries take the new bits.
    pub fn chmod(&mut self, mode: u32) {
        let has_mask = self.0.iter().any(|e| e.tag == MASK);
        for e in &mut self.0 {
            match e.tag {
                USER_OBJ => e.perm = ((mode >> 6) & 7) as u16,
                GROUP_OBJ if !has_mask => e.perm = ((mode >> 3) & 7) as u16,
                MASK => e.perm = ((mode >> 3) & 7) as u16,
                OTHER => e.perm = (mode & 7) as u16,
                _ => {}
            }
        }
    }

    /// Mask an inherited ACL by the mode a file is made with, narrowing
    /// both: returns the new mode.
    fn create_masq(&mut self, mode: u32) -> u32 {
        let mut m = mode;
        let has_mask = self.0.iter().any(|e| e.tag == MASK);
        for e in &mut self.0 {
            let (shift, applies) = match e.tag {
                USER_OBJ => (6, true),
                OTHER => (0, true),
                MASK => (3, true),
                GROUP_OBJ => (3, !has_mask),
                _ => (0, false),
            };
            if applies {
                e.perm &= ((m >> shift) & 7) as u16;
                m &= (u32::from(e.perm) << shift) | !(0o7 << shift);
            }
        }
        m
    }
}

fn is_named(tag: u16) -> bool {
    tag == USER || tag == GROUP
}

/// Set the access ACL `value` on `a` the way a filesystem must: check it,
/// set the mode's permission bits from it, and store it only if it says
/// more than they do (else remove the xattr). Returns whether the xattr is
/// to be stored (false: it was folded into the mode).
pub fn set_access(a: &mut InodeAttrs, value: &[u8]) -> Result<bool> {
    let acl = Acl::parse(value)?;
    a.mode = acl.mode_bits(a.mode);
    Ok(!acl.is_plain())
}

/// Check a default ACL value (an empty value is not allowed either).
pub fn check_default(value: &[u8]) -> Result<()> {
    Acl::parse(value).map(|_| ())
}

/// A chmod of `a` to `mode`: rewrite its access ACL's base entries.
pub fn chmod(a: &mut InodeAttrs, mode: u32) {
    if let Some(v) = a.xattrs.get_mut(ACL_ACCESS) {
        if let Ok(mut acl) = Acl::parse(v) {
            acl.chmod(mode);
            *v = acl.encode();
        }
    }
}

/// What a new inode takes from its directory's default ACL.
#[derive(Debug, PartialEq, Eq)]
pub struct Inherited {
    /// Its mode, masked by the ACL.
    pub mode: u32,
    /// The access ACL to store (none when the mode says it all).
    pub access: Option<Vec<u8>>,
    /// The default ACL to store (directories).
    pub default: Option<Vec<u8>>,
}

/// The ACLs and mode of a new inode made with `mode` in a directory whose
/// default ACL is `default`. `None` when that is not a valid ACL.
pub fn inherit(default: &[u8], mode: u32, is_dir: bool) -> Option<Inherited> {
    let mut acl = Acl::parse(default).ok()?;
    let kind = mode & libc::S_IFMT;
    let m = acl.create_masq(mode & 0o7777);
    Some(Inherited {
        mode: kind | m,
        access: (!acl.is_plain()).then(|| acl.encode()),
        default: is_dir.then(|| default.to_vec()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(entries: &[(u16, u16, u32)]) -> Vec<u8> {
        let mut v = VERSION.to_le_bytes().to_vec();
        for &(t, p, id) in entries {
            v.extend_from_slice(&t.to_le_bytes());
            v.extend_from_slice(&p.to_le_bytes());
            v.extend_from_slice(&id.to_le_bytes());
        }
        v
    }

    const NOBODY: u32 = u32::MAX;

    #[test]
    fn a_plain_acl_folds_into_the_mode() {
        let mut a = InodeAttrs {
            mode: libc::S_IFREG | 0o644,
            ..Default::default()
        };
        let v = acl(&[(USER_OBJ, 7, NOBODY), (GROUP_OBJ, 5, NOBODY), (OTHER, 0, NOBODY)]);
        assert!(!set_access(&mut a, &v).unwrap());
        assert_eq!(a.mode, libc::S_IFREG | 0o750);
    }

    #[test]
    fn a_named_entry_keeps_the_acl_and_its_mask_sets_the_group_bits() {
        let mut a = InodeAttrs {
            mode: libc::S_IFREG | 0o644,
            ..Default::default()
        };
        let v = acl(&[
            (USER_OBJ, 6, NOBODY),
            (USER, 7, 1000),
            (GROUP_OBJ, 4, NOBODY),
            (MASK, 5, NOBODY),
            (OTHER, 4, NOBODY),
        ]);
        assert!(set_access(&mut a, &v).unwrap());
        assert_eq!(a.mode & 0o777, 0o654);
        a.xattrs.insert(ACL_ACCESS.to_vec(), v);
        chmod(&mut a, 0o700);
        let back = Acl::parse(&a.xattrs[ACL_ACCESS]).unwrap();
        assert_eq!(back.mode_bits(0) & 0o777, 0o700);
        // The named user and the owning group keep their bits; the mask
        // narrows them.
        assert!(back.0.contains(&Entry {
            tag: USER,
            perm: 7,
            id: 1000
        }));
        assert!(back.0.contains(&Entry {
            tag: GROUP_OBJ,
            perm: 4,
            id: NOBODY
        }));
    }

    #[test]
    fn malformed_acls_are_refused() {
        let ok = [(USER_OBJ, 6, NOBODY), (GROUP_OBJ, 4, NOBODY), (OTHER, 4, NOBODY)];
        assert!(Acl::parse(&acl(&ok)).is_ok());
        for bad in [
            acl(&ok[..2]),
            acl(&[(USER_OBJ, 6, 0), (USER, 7, 5), (GROUP_OBJ, 4, 0), (OTHER, 4, 0)]),
            acl(&[(GROUP_OBJ, 4, 0), (USER_OBJ, 6, 0), (OTHER, 4, 0)]),
            acl(&[(USER_OBJ, 8, 0), (GROUP_OBJ, 4, 0), (OTHER, 4, 0)]),
            acl(&[
                (USER_OBJ, 6, 0),
                (USER, 7, 5),
                (USER, 7, 5),
                (GROUP_OBJ, 4, 0),
                (MASK, 7, 0),
                (OTHER, 4, 0),
            ]),
            vec![1, 0, 0, 0],
            vec![2, 0, 0],
        ] {
            assert!(Acl::parse(&bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn inheritance_masks_the_default_acl_by_the_mode() {
        let d = acl(&[
            (USER_OBJ, 7, NOBODY),
            (USER, 7, 1000),
            (GROUP_OBJ, 5, NOBODY),
            (MASK, 7, NOBODY),
            (OTHER, 5, NOBODY),
        ]);
        let Inherited {
            mode,
            access,
            default,
        } = inherit(&d, libc::S_IFREG | 0o640, false).unwrap();
        assert_eq!(mode, libc::S_IFREG | 0o640);
        assert!(default.is_none());
        let a = Acl::parse(&access.unwrap()).unwrap();
        assert!(a.0.contains(&Entry {
            tag: MASK,
            perm: 4,
            id: NOBODY
        }));
        assert!(a.0.contains(&Entry {
            tag: OTHER,
            perm: 0,
            id: NOBODY
        }));
        let Inherited { mode, default, .. } = inherit(&d, libc::S_IFDIR | 0o777, true).unwrap();
        assert_eq!(mode, libc::S_IFDIR | 0o775);
        assert_eq!(default.unwrap(), d);
        // A plain default ACL gives no access ACL, only the masked mode.
        let plain = acl(&[(USER_OBJ, 7, NOBODY), (GROUP_OBJ, 0, NOBODY), (OTHER, 0, NOBODY)]);
        let Inherited { mode, access, .. } = inherit(&plain, libc::S_IFREG | 0o666, false).unwrap();
        assert_eq!((mode & 0o777, access), (0o600, None));
    }
}
