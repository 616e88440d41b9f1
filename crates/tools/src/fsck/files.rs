//! fsck of one inode and its data: its number, type and link count, its
//! data tree as a mount sees it (the replayed leaf changes applied, or the
//! extents its record holds: a small file's whole map, format attribute 9),
//! and its extents or directory entries. Extents held in the record are
//! checked exactly like a tree's: disjoint, inside the volume and the file
//! size (a preallocated, unwritten extent may lie past it), summing to the `blocks` attribute, and owning their blocks (so the
//! bitmap, overlap and leak checks in `refs` see them), and carrying data
//! checksums exactly on a `DATA_SUMS` volume (`datasums`, which also reads
//! the blocks when fsck checks data). Only the record's own leaf in memory
//! has address 0: it owns no block.
//!
//! Calls `datamap` (the tree from a root or a record), the structures'
//! decoders and the sibling modules `walk`, `refs` and `datasums`.

use super::names::Entry;
use super::refs::{Owner, Ref};
use super::walk::{place, walk};
use super::{Findings, Fix};
use crate::datamap;
use tux3::backend::{Backend, TreeReplay, FIRST_INO};
use tux3::structures::dirent::Dirent;
use tux3::structures::extent::{self, Extent};
use tux3::structures::inode::InodeAttrs;
use tux3::types::{FileType, ROOT_INO};

/// One inode: its number and attributes, its tree (with the log's changes)
/// or the extents its record holds, and its extents or directory entries.
/// Returns whether its data map was read whole.
#[allow(clippy::too_many_arguments)]
pub(super) fn check_inode(
    be: &Backend,
    ino: u64,
    a: &InodeAttrs,
    replay: Option<&TreeReplay>,
    bs: u64,
    refs: &mut Vec<Ref>,
    entries: &mut Vec<Entry>,
    f: &mut Findings,
) -> bool {
    let dev = be.dev.as_ref();
    if ino != ROOT_INO && ino < FIRST_INO {
        f.problem(
            "inode",
            format!("inode {ino}: reserved inode number in the inode table"),
        );
    }
    let kind = FileType::from_mode(a.mode);
    let xattr_file = super::xattrs::is_xattr_file(a);
    // A mode naming no type (`records` says so): which tree its data
    // has is not known.
    if kind.is_none() && !xattr_file {
        return false;
    }
    if a.nlink == 0 {
        if be.orphans.contains(&ino) {
            // Kept alive by a handle when the volume went down: the orphan
            // list says so, and a writable mount frees it (names.rs checks
            // the list itself).
            f.notes.push(format!(
                "inode {ino}: orphan (open and unlinked at the crash), freed at the next mount"
            ));
        } else {
            f.problem(
                "inode",
                format!("inode {ino}: link count 0 but still in the inode table"),
            );
        }
    }
    let held = !a.inline.is_empty();
    if held && !be.sb.inline_maps {
        let (version, flags) = be.sb.version_and_flags();
        f.problem(
            "extent",
            format!(
                "inode {ino}: its record holds extents, but the superblock (format version \
                 {version}, flags {flags:#x}) lacks the INLINE_MAPS flag"
            ),
        );
    }
    let is_dir = kind == Some(FileType::Directory);
    let mut tree = match datamap::data_tree(be, ino, a, replay) {
        Ok(t) => t,
        Err(e) => {
            f.error("tree", &format!("inode {ino}: replaying its tree"), &e);
            return false;
        }
    };
    let what = if is_dir {
        format!("directory {ino}")
    } else if held {
        format!("extents of inode {ino}")
    } else {
        format!("extent tree of inode {ino}")
    };
    let mut extents: Vec<(u64, Extent)> = Vec::new();
    let (mut lines, mut shape) = (Vec::new(), Vec::new());
    // What a rebuild of a damaged directory keeps: (name, inode).
    let mut kept: Vec<(Vec<u8>, u64)> = Vec::new();
    let w = walk(
        dev,
        &mut tree,
        &what,
        &mut |leaf, items| {
            for (k, v) in items {
                if is_dir {
                    match Dirent::decode(v, *k, leaf) {
                        Ok(d) => {
                            kept.push((d.name.clone(), d.ino));
                            entries.push(Entry {
                                dir: ino,
                                leaf,
                                ino: d.ino,
                                kind: d.kind,
                                name: d.name,
                            })
                        }
                        Err(e) => {
                            kept.extend(super::salvage::entry(v));
                            lines.push(super::describe(&what, &e));
                        }
                    }
                } else {
                    match extent::decode(*k, v, leaf, &tux3::structures::bounds(dev)) {
                        Ok(e) => extents.push((leaf, e)),
                        Err(e) => lines.push(super::describe(&what, &e)),
                    }
                }
            }
        },
        &mut |line| shape.push(line),
    );
    // Nodes at address 0 (the record's leaf, or rebuilt by replay) own no block.
    for &(addr, level) in &w.nodes {
        if addr != 0 {
            refs.push(Ref {
                start: addr,
                count: 1,
                owner: Owner::Node { tree: ino, level },
            });
        }
    }
    super::snapshots::retired_refs(&tree, ino, refs);
    if is_dir && !(lines.is_empty() && shape.is_empty() && w.complete()) {
        // A damaged directory: rebuilt from what can be read of it.
        for &(addr, _, level) in &w.undecoded {
            if level == 0 {
                kept.extend(super::salvage::leaf(dev, addr, ino));
            }
        }
        let mut lines: Vec<String> = lines.into_iter().chain(shape).collect();
        lines.extend(w.errors.iter().map(|e| super::describe(&what, e)));
        let fix = Fix::RebuildDir {
            dir: ino,
            entries: kept,
        };
        f.fixable_all(
            "tree",
            fix,
            lines,
            "repair rebuilds the directory from the entries it can read",
        );
        return false;
    }
    for line in lines.into_iter().chain(shape) {
        f.problem("tree", line);
    }
    if !w.complete() {
        for e in &w.errors {
            f.error("tree", &what, e);
        }
        // What was read still owns its blocks; the totals cannot be checked.
        for (_, e) in &extents {
            refs.push(data_ref(ino, e));
        }
        return false;
    }
    let c = Extents {
        ino,
        a,
        kind,
        held,
        bs,
        block_count: be.sb.block_count,
        data_sums: be.sb.data_sums,
    };
    c.check(&extents, refs, f);
    super::datasums::verify(dev, ino, None, extents.iter().map(|(_, e)| e), f);
    if xattr_file {
        super::xattrs::check_contents(dev, ino, a, &extents, f);
    }
    true
}

/// The blocks of extent `e` of inode `ino`, owned as its data.
fn data_ref(ino: u64, e: &Extent) -> Ref {
    Ref {
        start: e.pblock,
        count: e.count,
        owner: Owner::Data {
            ino,
            lblock: e.lblock,
        },
    }
}

/// The extents of one inode and what they are checked against.
struct Extents<'a> {
    ino: u64,
    a: &'a InodeAttrs,
    kind: Option<FileType>,
    /// Its record holds its extents (the leaf at address 0 is the record).
    held: bool,
    bs: u64,
    block_count: u64,
    /// The volume's written extents carry checksums (`DATA_SUMS`).
    data_sums: bool,
}

impl Extents<'_> {
    /// Where an extent found in leaf `leaf` lives, for messages.
    fn place(&self, leaf: u64) -> String {
        if self.held && leaf == 0 {
            "its inode record".to_string()
        } else {
            place(leaf)
        }
    }

    /// Disjoint, inside the volume, within the file size (unless unwritten:
    /// preallocated past the end), summing to the `blocks` attribute; only
    /// files and symlinks hold any, only files unwritten ones. Each owns
    /// its blocks in `refs`.
    fn check(&self, extents: &[(u64, Extent)], refs: &mut Vec<Ref>, f: &mut Findings) {
        let (ino, a, kind, block_count) = (self.ino, self.a, self.kind, self.block_count);
        let holds_data =
            matches!(kind, Some(FileType::Regular | FileType::Symlink)) || super::xattrs::is_xattr_file(a);
        let size_blocks = a.size.div_ceil(self.bs);
        let mut sum = 0u64;
        let mut prev_end = 0u64;
        for (i, (leaf, e)) in extents.iter().enumerate() {
            let at = format!(
                "inode {ino}, {}: extent at logical block {} (block {}, {} blocks)",
                self.place(*leaf),
                e.lblock,
                e.pblock,
                e.count
            );
            if !holds_data && i == 0 {
                f.problem("extent", format!("{at}: a {kind:?} holds no data"));
            }
            if i > 0 && e.lblock < prev_end {
                f.problem("extent", format!("{at} overlaps the previous extent"));
            }
            let end = e.lblock.saturating_add(e.count);
            if e.unwritten && kind != Some(FileType::Regular) {
                f.problem(
                    "extent",
                    format!("{at}: unwritten in a {kind:?}, not a regular file"),
                );
            }
            // Preallocated blocks may lie past the end (KEEP_SIZE).
            let within = if e.unwritten { u64::MAX } else { size_blocks };
            // A regular file's extent past its end: the repair takes it out
            // (nothing past the end is part of the file).
            let past = if e.lblock >= within {
                Some("starts at or beyond")
            } else if end > within {
                Some("reaches beyond")
            } else {
                None
            };
            if let Some(how) = past {
                let line = format!("{at} {how} the end of the file (size {})", a.size);
                if kind == Some(FileType::Regular) {
                    let line = format!("{line} (repair takes out what lies past the end)");
                    f.fixable("extent", Fix::TrimPastEnd { ino }, line);
                } else {
                    f.problem("extent", line);
                }
            }
            if e.pblock < 2 || e.pblock.saturating_add(e.count) > block_count {
                f.problem(
                    "extent",
                    format!("{at} lies outside the volume ({block_count} blocks)"),
                );
            }
            if holds_data {
                let at = if self.held && *leaf == 0 {
                    format!("{at} (attribute 12 absent or empty)")
                } else {
                    at
                };
                super::datasums::check_form(e, self.data_sums, &at, ino, true, f);
            }
            refs.push(data_ref(ino, e));
            sum = sum.saturating_add(e.count);
            prev_end = prev_end.max(end);
        }
        if sum != a.blocks {
            f.fixable(
                "blocks",
                Fix::Blocks { ino, blocks: sum },
                format!(
                    "inode {ino}: blocks attribute is {}, but its extents hold {sum}",
                    a.blocks
                ),
            );
        }
    }
}
