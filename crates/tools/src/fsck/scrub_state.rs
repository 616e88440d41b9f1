//! fsck of the scrub state record (FORMAT.md section 16): reserved inode 4
//! may be in the inode table only as the holder of attribute 13 — a
//! regular file with link count 1, no name, no data and no xattrs; its
//! record decoded already (the attribute's own checks). The inode is then
//! taken out of the inodes the other passes see: it is no file.
//!
//! Calls nothing in the engine but the record's type.

use super::Findings;
use std::collections::BTreeMap;
use tux3::structures::inode::InodeAttrs;
use tux3::structures::scrub_state::SCRUB_INO;

/// Check inode 4's record, if any, and take it out of `inodes`.
pub(super) fn check(inodes: &mut BTreeMap<u64, InodeAttrs>, f: &mut Findings) {
    let Some(a) = inodes.get(&SCRUB_INO) else {
        return;
    };
    let mut bad = Vec::new();
    if a.scrub.is_none() {
        bad.push("holds no scrub state (attribute 13)".to_string());
    }
    if a.mode & libc::S_IFMT != libc::S_IFREG || a.nlink != 1 {
        bad.push(format!(
            "mode {:o} and link count {}, expected a regular file with 1",
            a.mode, a.nlink
        ));
    }
    if a.size != 0 || a.blocks != 0 || a.root.addr != 0 || !a.inline.is_empty() {
        bad.push("holds data".to_string());
    }
    if !a.xattrs.is_empty() || a.xattr_file != 0 {
        bad.push("holds xattrs".to_string());
    }
    for b in bad {
        f.problem(
            "scrub state",
            format!("inode {SCRUB_INO} (scrub state record): {b}"),
        );
    }
    inodes.remove(&SCRUB_INO);
}
