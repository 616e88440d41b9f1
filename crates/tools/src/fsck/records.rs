//! What fsck can mend of a damaged inode record (for `Fix::Record`),
//! keeping every attribute: a fixed-size attribute's length set back to
//! its size, or a variable one's to the length that leaves the most
//! attributes decoding (a longer one swallows the next); a damaged tag
//! set back to the only tag missing from the record whose attribute has
//! that length (an xattr's only when its body reads as an xattr with a
//! namespaced name); mode bits above the file type cleared (the type a
//! directory's where the data tree's root node is one's, or for the root;
//! none where the node is an extent tree's and the type a directory).
//! Each mended record must decode whole, and the root's be a directory.
//! Also a record that decodes but holds what none is written with: a
//! device number on a file that is no device (the parent hint whose tag
//! lost a bit: the number is kept as the hint when there is none), a mode
//! naming no file type, given the type its data tree's root node says (a
//! directory's; the root inode is one) or else the type every entry
//! naming the inode says, its permission bits kept, and a symlink whose
//! record holds its one extent elsewhere than at logical block 0 or
//! longer than its target.
//!
//! Calls the inode record's decoder and encoder, the node header's
//! verification and the device (a tree's root node, read).

use super::names::Entry;
use super::{Findings, Fix};
use std::collections::BTreeMap;
use tux3::codec::{verify, Bounds, INO_LIMIT};
use tux3::device::Device;
use tux3::structures::btree::node::{BRANCH_MAGIC, LEAF_MAGIC};
use tux3::structures::btree::TreeKind;
use tux3::structures::inode::InodeAttrs;
use tux3::types::{FileType, ROOT_INO};

/// The size of fixed-size attribute `tag` (FORMAT.md 7.1).
fn fixed_len(tag: u8) -> Option<usize> {
    match tag {
        1 => Some(16),
        2 | 4 | 5 | 8 | 10 => Some(8),
        3 => Some(48),
        6 => Some(9),
        11 => Some(4),
        _ => None,
    }
}

/// Tags a mended tag may take: each known one but the scrub state's.
const TAGS: [u8; 12] = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12];
const TAG_XATTR: u8 = 7;
const XATTR_NAMESPACES: [&[u8]; 4] = [b"user.", b"trusted.", b"security.", b"system."];

/// The offsets of the attribute headers of `raw` as its lengths give
/// them, up to the first that runs past the end.
fn chain(raw: &[u8]) -> Vec<usize> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while at + 3 <= raw.len() {
        out.push(at);
        let len = usize::from(u16::from_le_bytes([raw[at + 1], raw[at + 2]]));
        at += 3 + len;
    }
    out
}

fn set_len(raw: &[u8], at: usize, len: usize) -> Option<Vec<u8>> {
    let mut r = raw.to_vec();
    r.get_mut(at + 1..at + 3)?
        .copy_from_slice(&u16::try_from(len).ok()?.to_le_bytes());
    Some(r)
}

/// Mend record `raw` of inode `ino` (leaf `leaf` of `dev`), which does not decode;
/// the mended record and what was changed. A fixed size is tried first,
/// then a tag, then a variable length (the one that leaves the most
/// attributes: a longer one swallows the next), then the mode.
pub(super) fn mend(
    dev: &dyn Device,
    raw: &[u8],
    ino: u64,
    leaf: u64,
    bounds: &Bounds,
) -> Option<(Vec<u8>, String)> {
    let decodes = |r: &[u8]| {
        InodeAttrs::decode(r, ino, leaf, bounds)
            .is_ok_and(|a| ino != ROOT_INO || FileType::from_mode(a.mode) == Some(FileType::Directory))
    };
    let heads = chain(raw);
    let head = |at: usize| {
        (
            raw[at],
            usize::from(u16::from_le_bytes([raw[at + 1], raw[at + 2]])),
        )
    };
    // A fixed size.
    for (k, &at) in heads.iter().enumerate() {
        let (tag, len) = head(at);
        if let Some(n) = fixed_len(tag).filter(|n| *n != len) {
            if let Some(r) = set_len(raw, at, n).filter(|r| decodes(r)) {
                let how = format!(
                    "repair sets attribute {} (tag {tag}) length {len} back to {n}",
                    k + 1
                );
                return Some((r, how));
            }
        }
    }
    // A tag.
    let present: Vec<u8> = heads.iter().map(|&at| raw[at]).collect();
    for (k, &at) in heads.iter().enumerate() {
        let (tag, len) = head(at);
        if TAGS.contains(&tag) && fixed_len(tag).is_none_or(|n| n == len) {
            continue;
        }
        let Some(body) = raw.get(at + 3..at + 3 + len) else {
            continue;
        };
        let fits: Vec<(u8, Vec<u8>)> = TAGS
            .iter()
            .filter(|t| !present.contains(t) || **t == TAG_XATTR)
            .filter(|&&t| fixed_len(t).is_none_or(|n| n == len))
            .filter(|&&t| t != TAG_XATTR || namespaced_xattr(body))
            .map(|&t| {
                let mut r = raw.to_vec();
                r[at] = t;
                (t, r)
            })
            .filter(|(_, r)| decodes(r))
            .collect();
        if let [(t, r)] = &fits[..] {
            return Some((
                r.clone(),
                format!("repair sets attribute {} tag {tag} back to {t}", k + 1),
            ));
        }
    }
    // A variable length.
    for (k, &at) in heads.iter().enumerate() {
        let (tag, len) = head(at);
        if !TAGS.contains(&tag) || fixed_len(tag).is_some() {
            continue;
        }
        let mut fits: Vec<(usize, usize, Vec<u8>)> = (0..=raw.len() - at - 3)
            .filter(|&l| l != len)
            .filter_map(|l| set_len(raw, at, l).map(|r| (chain(&r).len(), l, r)))
            .filter(|(_, _, r)| decodes(r))
            .collect();
        fits.sort_by_key(|f| std::cmp::Reverse(f.0));
        match &fits[..] {
            [(n, l, r), rest @ ..] if rest.first().is_none_or(|o| o.0 < *n) => {
                let how = format!(
                    "repair sets attribute {} (tag {tag}) length {len} back to {l}",
                    k + 1
                );
                return Some((r.clone(), how));
            }
            _ => {}
        }
    }
    // Mode bits above the file type; the type a directory's when its
    // tree is one's (or it is the root), and none when it is not.
    let at = *heads.iter().find(|&&at| head(at) == (1, 16))?;
    let mode = u32::from_le_bytes(raw.get(at + 3..at + 7)?.try_into().ok()?);
    let mut kept = mode & 0o177_777;
    let mut r = raw.to_vec();
    r.get_mut(at + 3..at + 7)?.copy_from_slice(&kept.to_le_bytes());
    let a = InodeAttrs::decode(&r, ino, leaf, bounds).ok()?;
    let tree = root_kind(dev, ino, a.root.addr);
    let is_dir = FileType::from_mode(kept) == Some(FileType::Directory);
    if (ino == ROOT_INO || tree == Some(TreeKind::Dirents as u8)) && !is_dir {
        kept = libc::S_IFDIR | (mode & 0o7777);
    } else if tree == Some(TreeKind::Extents as u8) && is_dir {
        return None;
    }
    r.get_mut(at + 3..at + 7)?.copy_from_slice(&kept.to_le_bytes());
    (kept != mode && FileType::from_mode(kept).is_some() && decodes(&r))
        .then(|| (r, format!("repair sets mode {mode:#o} to {kept:#o}")))
}

/// The tree kind the root node of inode `ino`'s data tree at `addr` says
/// it has, if it is a sound node of that inode's.
fn root_kind(dev: &dyn Device, ino: u64, addr: u64) -> Option<u8> {
    if addr < 2 || addr >= dev.block_count() {
        return None;
    }
    let mut buf = vec![0u8; dev.block_size() as usize];
    dev.read(addr, &mut buf).ok()?;
    let sound = [LEAF_MAGIC, BRANCH_MAGIC]
        .iter()
        .any(|&m| verify(&buf, addr, m, "node").is_ok());
    (sound && buf.get(16..24) == Some(&ino.to_le_bytes()[..])).then(|| buf.get(24).copied())?
}

/// Whether `body` reads as an xattr: a name of 1 ..= 255 bytes in a
/// namespace, without NUL.
fn namespaced_xattr(body: &[u8]) -> bool {
    let Some((&n, rest)) = body.split_first() else {
        return false;
    };
    let Some(name) = rest.get(..usize::from(n)) else {
        return false;
    };
    n > 0 && !name.contains(&0) && XATTR_NAMESPACES.iter().any(|p| name.starts_with(p))
}

/// A device number in the record of `ino`, which is no device: the
/// parent hint's number under the device number's tag (one bit apart),
/// kept as the hint when the record has none, else dropped.
pub(super) fn stray_rdev(ino: u64, a: &InodeAttrs, f: &mut Findings) {
    let kind = FileType::from_mode(a.mode);
    if a.rdev == 0 || matches!(kind, Some(FileType::CharDevice | FileType::BlockDevice)) {
        return;
    }
    let mut fixed = a.clone();
    fixed.rdev = 0;
    let how = if a.parent == 0 && (1..INO_LIMIT).contains(&a.rdev) {
        fixed.parent = a.rdev;
        "repair takes it for the parent hint, which the record lacks"
    } else {
        "repair drops it"
    };
    f.fixable(
        "inode",
        Fix::Record {
            ino,
            record: fixed.encode(),
        },
        format!(
            "inode {ino}: device number {:#x} on a file that is no device ({how})",
            a.rdev
        ),
    );
}

/// Inodes whose mode names no file type whose data tree is a directory's
/// (its root node says so; the root inode is one whatever it holds): a
/// directory again, its permission bits kept, for the rest of the pass
/// too (its entries are then read).
pub(super) fn retype_dirs(dev: &dyn Device, inodes: &mut BTreeMap<u64, InodeAttrs>, f: &mut Findings) {
    for (&ino, a) in inodes.iter_mut() {
        if FileType::from_mode(a.mode).is_some() || super::xattrs::is_xattr_file(a) {
            continue;
        }
        let dir_tree = root_kind(dev, ino, a.root.addr) == Some(TreeKind::Dirents as u8);
        if ino == ROOT_INO || dir_tree {
            let why = if dir_tree {
                "its tree is a directory's"
            } else {
                "the root"
            };
            give_type(ino, a, FileType::Directory, why, f);
        }
    }
}

/// Inodes whose mode names no file type, given the type the entries
/// naming them agree on, for the rest of the pass too (their permission
/// bits kept); else found and left.
pub(super) fn retype(inodes: &mut BTreeMap<u64, InodeAttrs>, entries: &[Entry], f: &mut Findings) {
    for (&ino, a) in inodes.iter_mut() {
        if FileType::from_mode(a.mode).is_some() || super::xattrs::is_xattr_file(a) {
            continue;
        }
        let mut kinds = entries.iter().filter(|e| e.ino == ino).map(|e| e.kind);
        match kinds.next().filter(|k| kinds.all(|o| o == *k)) {
            Some(kind) => give_type(ino, a, kind, "the type its entries name", f),
            None => f.problem(
                "inode",
                format!("inode {ino}: mode {:o} names no file type", a.mode),
            ),
        }
    }
}

/// Give inode `ino` (attributes `a`) type `kind` for `why`.
fn give_type(ino: u64, a: &mut InodeAttrs, kind: FileType, why: &str, f: &mut Findings) {
    let was = a.mode;
    a.mode = kind.mode_bits() | (was & 0o7777);
    f.fixable(
        "inode",
        Fix::Record {
            ino,
            record: a.encode(),
        },
        format!(
            "inode {ino}: mode {was:o} names no file type (repair gives it mode {:o}: {why})",
            a.mode
        ),
    );
}

/// A symlink whose record holds its map (one extent: a target is never
/// sparse) with that extent elsewhere than at logical block 0 or longer
/// than the target: its blocks are the target's from the first, so the
/// extent is put at 0 and cut to the target's length (the checksums of
/// the blocks kept stay).
pub(super) fn symlink_map(ino: u64, a: &InodeAttrs, bs: u64, f: &mut Findings) {
    let [e] = &a.inline[..] else {
        return;
    };
    let blocks = a.size.div_ceil(bs.max(1));
    if FileType::from_mode(a.mode) != Some(FileType::Symlink)
        || blocks == 0
        || e.count < blocks
        || (e.lblock == 0 && e.count == blocks)
    {
        return;
    }
    let mut fixed = a.clone();
    fixed.inline[0] = e.piece(e.lblock, e.lblock + blocks).moved_to(0);
    f.fixable(
        "extent",
        Fix::Record {
            ino,
            record: fixed.encode(),
        },
        format!(
            "inode {ino}, its inode record: the symlink's extent at logical block {} ({} blocks) is \
             not its target's {blocks} blocks from logical block 0 (repair puts it there)",
            e.lblock, e.count
        ),
    );
}
