//! fsck of the scrub state record (FORMAT.md section 16): reserved inode 4
//! may be in the inode table only as the holder of attribute 13 — a
//! regular file with link count 1, no name, no data and no xattrs; its
//! record decoded already (the attribute's own checks). The inode is then
//! taken out of the inodes the other passes see: it is no file. Its
//! known-damage list (attribute 14) goes to the data pass, which names
//! those mismatches as known rather than as problems.
//!
//! Calls nothing in the engine but the record's type.

use super::{Findings, Fix};
use std::collections::BTreeMap;
use tux3::structures::inode::InodeAttrs;
use tux3::structures::scrub_state::SCRUB_INO;

/// Check inode 4's record, if any, and take it out of `inodes`.
pub(super) fn check(inodes: &mut BTreeMap<u64, InodeAttrs>, f: &mut Findings) {
    let Some(a) = inodes.get(&SCRUB_INO) else {
        return;
    };
    // A record holding neither attribute but a file's parent or data is
    // no scrub state record (a key gone astray, say): nothing says it
    // should become one.
    let a_file = a.parent != 0 || a.size != 0 || a.root.addr != 0 || !a.inline.is_empty();
    if a.scrub.is_none() && a.damage.is_empty() && a_file {
        f.problem(
            "scrub state",
            format!("inode {SCRUB_INO} (scrub state record): holds no scrub state (attribute 13)"),
        );
        inodes.remove(&SCRUB_INO);
        return;
    }
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
    if !a.damage.is_empty() {
        f.notes.push(format!(
            "inode {SCRUB_INO}: {} data block(s) recorded as damaged by a repair \
             (reads of them fail with EIO; `fsck --data` names the files)",
            a.damage.len()
        ));
        if let Some(scan) = f.data.as_mut() {
            scan.known = a.damage.clone();
        }
    }
    for b in bad {
        f.fixable(
            "scrub state",
            Fix::ScrubRecord,
            format!(
                "inode {SCRUB_INO} (scrub state record): {b} (repair sets the record back to a \
                 scrub state's, keeping what it holds of one)"
            ),
        );
    }
    inodes.remove(&SCRUB_INO);
}
