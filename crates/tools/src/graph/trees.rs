//! The trees of `tux3 graph`: the inode table, the bitmap file (with its
//! bitmap blocks) and every inode's data tree, each drawn from the fsck
//! walker's preorder node list (`tools::fsck::walk`): a node's parent is
//! the last node one level up, a branch's key range is that of the leaves
//! below it. Leaves list their first entries (inodes, extents as
//! `lblock..+count -> pblock`, directory names) as record fields with ports,
//! which the edges to data-tree roots and from names to inodes start from.
//! A file whose record holds its extents (format attribute 9) has no tree:
//! its inode-table entry lists them (`extents lblock..+count -> pblock`),
//! and no data-tree node is drawn for it.

use super::{at, cut_text, esc, kind_name, Dot, BAD, BITMAP, BITMAP_BLOCK, DASHED, DIRENTS, EXTENTS};
use super::{ITABLE, MAX_FIELDS, NAME_CHARS};
use crate::datamap;
use crate::fsck::walk;
use std::collections::HashMap;
use tux3::backend::{Backend, TreeReplay, BITMAP_INO};
use tux3::device::Device;
use tux3::error::{Error, Result};
use tux3::structures::bitmap;
use tux3::structures::btree::{Tree, TreeKind};
use tux3::structures::dirent::Dirent;
use tux3::structures::extent::{self, Extent};
use tux3::structures::inode::InodeAttrs;
use tux3::structures::superblock::Superblock;
use tux3::types::FileType;

/// One (key, value) entry of a leaf.
type Entry = (u64, Vec<u8>);
/// A leaf's entries.
type Entries = [Entry];

/// A leaf's entries as record fields (escaped, with ports) and whether
/// some entry failed to decode.
type Fields = (Vec<String>, bool);

/// Renders a leaf: `(node id, or None when past the budget; address; entries)`.
type LeafFn<'a> = dyn FnMut(Option<&str>, u64, &Entries) -> Fields + 'a;

/// Draw one tree (inside the caller's cluster) with colours `fills`.
/// `leaf` sees every leaf and renders those drawn. Returns the root's node
/// id, if drawn, and how many nodes were left out.
fn draw_tree(
    d: &mut Dot,
    dev: &dyn Device,
    tree: &mut Tree,
    what: &str,
    fills: (&str, &str),
    leaf: &mut LeafFn,
) -> (Option<String>, usize) {
    let mut leaves: Vec<(u64, Vec<Entry>)> = Vec::new();
    let mut problems = Vec::new();
    let hex = tree.kind == TreeKind::Dirents;
    let key = |k: u64| if hex { format!("{k:#x}") } else { k.to_string() };
    let w = walk(
        dev,
        tree,
        what,
        &mut |a, e| leaves.push((a, e.to_vec())),
        &mut |l| problems.push(l),
    );
    // The walker lists nodes in preorder; leaves arrive in the same order.
    let mut leaf_of = vec![None; w.nodes.len()];
    let mut next = 0;
    for (i, &(addr, level)) in w.nodes.iter().enumerate() {
        if level == 0 && leaves.get(next).is_some_and(|l| l.0 == addr) {
            leaf_of[i] = Some(next);
            next += 1;
        }
    }
    let (mut root, mut cut) = (None, 0);
    let mut last_at: Vec<Option<String>> = vec![None; 40];
    for (i, &(addr, level)) in w.nodes.iter().enumerate() {
        if d.full() {
            if let Some(l) = leaf_of[i] {
                leaf(None, addr, &leaves[l].1);
            }
            cut += 1;
            continue;
        }
        let id = d.id();
        if let Some(l) = leaf_of[i] {
            let entries = &leaves[l].1;
            let (mut fields, bad) = leaf(Some(&id), addr, entries);
            let keys = match (entries.first(), entries.last()) {
                (Some(a), Some(_)) if entries.len() == 1 => format!("1 entry, key {}", key(a.0)),
                (Some(a), Some(b)) => format!("{} entries, keys {}..{}", entries.len(), key(a.0), key(b.0)),
                _ => "empty".into(),
            };
            let head = if bad {
                format!("corrupt block {addr}")
            } else {
                format!("{what} leaf")
            };
            fields.splice(0..0, [esc(&head), esc(&at(addr)), esc(&keys)]);
            d.node(&id, &fields, if bad { BAD } else { fills.1 }, "");
        } else {
            // A branch: its subtree is the nodes after it with a lower level.
            let end = (i + 1..w.nodes.len())
                .find(|&j| w.nodes[j].1 >= level)
                .unwrap_or(w.nodes.len());
            let children = w.nodes[i + 1..end].iter().filter(|n| n.1 + 1 == level).count();
            let below: Vec<&Entries> = leaf_of[i + 1..end]
                .iter()
                .flatten()
                .map(|&l| &leaves[l].1[..])
                .collect();
            let lo = below.iter().find_map(|e| e.first());
            let hi = below.iter().rev().find_map(|e| e.last());
            let keys = match (lo, hi) {
                (Some(a), Some(b)) => format!("keys {}..{}", key(a.0), key(b.0)),
                _ => "no keys".into(),
            };
            let fields = [
                format!("{what} branch"),
                format!("{}, level {level}", at(addr)),
                format!("{children} children, {keys}"),
            ];
            let fields: Vec<String> = fields.iter().map(|f| esc(f)).collect();
            d.node(&id, &fields, fills.0, if addr == 0 { DASHED } else { "" });
        }
        match last_at.get(level as usize + 1).cloned().flatten() {
            Some(p) => d.edge(&p, &id, ""),
            None => drop(root.get_or_insert_with(|| id.clone())),
        }
        if let Some(slot) = last_at.get_mut(level as usize) {
            *slot = Some(id);
        }
    }
    for e in &w.errors {
        match d.full() {
            true => cut += 1,
            false => drop(root.get_or_insert(d.corrupt(0, e))),
        }
    }
    if let (Some(first), false) = (problems.first(), d.full()) {
        let head = format!("{} shape problems", problems.len());
        d.add(&[head, cut_text(first, 100)], BAD, "");
    }
    (root, cut)
}

/// A leaf's entries as fields: `show` decodes one entry into its text and
/// a value that `keep(place, value)` receives with where it is drawn (a
/// `node:port` for listed entries, the node for the rest, `None` if the
/// leaf is not drawn). `noun` names the entries in the "… N more" field.
fn entry_fields<T>(
    id: Option<&str>,
    entries: &Entries,
    noun: &str,
    show: impl Fn(u64, &[u8]) -> Result<(String, T)>,
    keep: &mut dyn FnMut(Option<String>, T),
) -> Fields {
    let (mut fields, mut bad) = (Vec::new(), false);
    for (i, (k, v)) in entries.iter().enumerate() {
        let listed = id.is_some() && i < MAX_FIELDS;
        match show(*k, v) {
            Ok((text, value)) => {
                if listed {
                    fields.push(format!("<p{i}> {}", esc(&text)));
                }
                keep(
                    id.map(|id| {
                        if listed {
                            format!("{id}:p{i}")
                        } else {
                            id.to_string()
                        }
                    }),
                    value,
                );
            }
            Err(_) => {
                bad = true;
                if listed {
                    fields.push(esc(&format!("key {k:#x}: does not decode")));
                }
            }
        }
    }
    if id.is_some() && entries.len() > MAX_FIELDS {
        fields.push(esc(&format!("… {} more {noun}", entries.len() - MAX_FIELDS)));
    }
    (fields, bad)
}

/// One inode as the inode table lists it, and where it is drawn.
pub(super) struct Inode {
    ino: u64,
    attrs: InodeAttrs,
    at: Option<String>,
}

/// The inode table after replay; returns its inodes in order.
/// The live inode table; returns its inodes and its root's node id.
pub(super) fn itable(d: &mut Dot, be: &mut Backend) -> (Vec<Inode>, Option<String>) {
    let dev = be.dev.clone();
    let mut inodes = Vec::new();
    d.open("itable", "inode table (after replay)", "#e69138");
    let (root, cut) = draw_tree(
        d,
        dev.as_ref(),
        be.itable.get_mut(),
        "itable",
        ITABLE,
        &mut |id, leaf, entries| {
            let show = |ino, v: &[u8]| {
                let a = InodeAttrs::decode(v, ino, leaf, &tux3::structures::bounds(dev.as_ref()))?;
                let mut text = format!("inode {ino}: {} {} B", kind_name(a.mode), a.size);
                if !a.inline.is_empty() {
                    let list: Vec<String> = a.inline.iter().map(datamap::show).collect();
                    text.push_str(&format!(", extents {}", list.join(", ")));
                }
                Ok((text, (ino, a)))
            };
            entry_fields(id, entries, "inodes", show, &mut |at, (ino, attrs)| {
                inodes.push(Inode { ino, attrs, at })
            })
        },
    );
    d.more(cut, "inode table nodes");
    d.close();
    if let Some(r) = &root {
        d.edge(
            "sb_use:it",
            r,
            "label=\"itable (after replay)\", color=\"#e69138\"",
        );
    }
    (inodes, root)
}

/// Fields of an extent leaf; `out` collects (drawn place, extent) pairs.
fn extent_fields(
    id: Option<&str>,
    leaf: u64,
    entries: &Entries,
    bounds: &tux3::codec::Bounds,
    out: &mut Vec<(String, Extent)>,
) -> Fields {
    let show = |k, v: &[u8]| {
        let e = extent::decode(k, v, leaf, bounds)?;
        Ok((datamap::show(&e), e))
    };
    entry_fields(id, entries, "extents", show, &mut |at, e| {
        out.extend(at.map(|a| (a, e)))
    })
}

/// The bitmap file's extent tree and its bitmap blocks.
pub(super) fn bitmap_file(d: &mut Dot, dev: &dyn Device, sb: &Superblock) {
    let mut tree = Tree::open(BITMAP_INO, TreeKind::Extents, sb.bitmap);
    let mut extents = Vec::new();
    d.open("bitmap", "bitmap file (inode 2)", "#666666");
    let (root, mut cut) = draw_tree(d, dev, &mut tree, "bitmap", BITMAP, &mut |id, leaf, entries| {
        extent_fields(id, leaf, entries, &tux3::structures::bounds(dev), &mut extents)
    });
    if let Some(r) = &root {
        d.edge("sb_use:bm", r, "label=bitmap, color=\"#666666\"");
    }
    let mut buf = vec![0u8; dev.block_size() as usize];
    for (from, e) in extents {
        let n = e.count.min(sb.bitmap_blocks.saturating_sub(e.lblock));
        for i in 0..n {
            if d.full() {
                cut += (n - i) as usize;
                break;
            }
            let (index, addr) = (e.lblock + i, e.pblock.saturating_add(i));
            let read = match addr >= 2 && addr < dev.block_count() {
                true => dev.read(addr, &mut buf).map_err(Error::from),
                false => Err(Error::corrupt(
                    addr,
                    format!("bitmap block {index} outside the volume"),
                )),
            };
            let id = match read.and_then(|_| bitmap::decode(&buf, addr, index)) {
                Ok(bits) => {
                    let used: u32 = bits.iter().map(|b| b.count_ones()).sum();
                    let fields = [
                        format!("bitmap block {index}"),
                        at(addr),
                        format!("{used} blocks in use"),
                    ];
                    d.add(&fields, BITMAP_BLOCK, "")
                }
                Err(err) => d.corrupt(addr, &err),
            };
            d.edge(&from, &id, "");
        }
    }
    d.more(cut, "bitmap nodes and blocks");
    d.close();
}

/// Every inode's data tree (with the log's changes), while the budget lasts.
/// Extents a record holds are drawn with the record (see [`itable`]): a tree
/// is drawn for such a file only if the log maps leaves of it.
pub(super) fn data_trees(d: &mut Dot, be: &Backend, inodes: &[Inode], replays: &HashMap<u64, TreeReplay>) {
    let dev = be.dev.as_ref();
    let (mut cut_trees, mut cut_nodes) = (0usize, 0usize);
    let mut links: Vec<(String, u64)> = Vec::new();
    for n in inodes {
        let replay = replays.get(&n.ino);
        let reset = replay.is_some_and(|r| r.reset);
        if (n.attrs.root.addr == 0 || reset) && replay.is_none_or(|r| r.ops.is_empty()) {
            continue;
        }
        if d.full() {
            cut_trees += 1;
            continue;
        }
        let is_dir = FileType::from_mode(n.attrs.mode) == Some(FileType::Directory);
        let kind = if is_dir {
            TreeKind::Dirents
        } else {
            TreeKind::Extents
        };
        // As a mount builds it: from the record's extents, else the root.
        let mut tree = tux3::cache::data_tree(n.ino, kind, &n.attrs, reset);
        let label = format!("inode {} ({}) data tree", n.ino, kind_name(n.attrs.mode));
        d.open(
            &format!("ino{}", n.ino),
            &label,
            if is_dir { "#a64d79" } else { "#6aa84f" },
        );
        let (root, cut) = match replay.map(|r| be.replay_tree(&mut tree, r)) {
            Some(Err(e)) => (Some(d.corrupt(n.attrs.root.addr, &e)), 0),
            _ if is_dir => draw_tree(d, dev, &mut tree, "dir", DIRENTS, &mut |id, leaf, entries| {
                let show = |k, v: &[u8]| {
                    let e = Dirent::decode(v, k, leaf)?;
                    Ok((
                        format!(
                            "{} -> {}",
                            cut_text(&String::from_utf8_lossy(&e.name), NAME_CHARS),
                            e.ino
                        ),
                        e.ino,
                    ))
                };
                entry_fields(id, entries, "names", show, &mut |at, ino| {
                    links.extend(at.filter(|a| a.contains(':')).map(|a| (a, ino)))
                })
            }),
            _ => draw_tree(d, dev, &mut tree, "extent", EXTENTS, &mut |id, leaf, entries| {
                extent_fields(id, leaf, entries, &tux3::structures::bounds(dev), &mut Vec::new())
            }),
        };
        cut_nodes += cut;
        d.close();
        if let (Some(from), Some(r)) = (&n.at, &root) {
            d.edge(from, r, "style=dashed, color=\"#6aa84f\", label=root");
        }
    }
    match (cut_nodes, cut_trees) {
        (0, t) => d.more(t, "data trees"),
        (n, 0) => d.more(n, "data-tree nodes"),
        (n, t) => d.more(
            n + t,
            &format!("data-tree nodes and trees ({n} nodes, {t} trees)"),
        ),
    };
    // Directory entries to the inodes they name, where both are drawn.
    let at: HashMap<u64, &String> = inodes
        .iter()
        .filter_map(|n| Some((n.ino, n.at.as_ref()?)))
        .collect();
    for (from, ino) in links {
        if let Some(to) = at.get(&ino) {
            d.edge(&from, to, "style=dotted, color=\"#a64d79\", constraint=false");
        }
    }
}
