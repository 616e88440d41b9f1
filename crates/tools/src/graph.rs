//! The disk structure of a volume as a Graphviz digraph (`tux3 graph`):
//! both superblock copies (the one in use highlighted), the log chain since
//! the last unify (one node per block, chained by `next`), the inode table
//! after replay, the bitmap file's tree and bitmap blocks, and each inode's
//! data tree (extent leaves list extents, directory leaves entry names),
//! with edges from inode-table entries to data-tree roots and from directory
//! entries to inodes. Record-shaped nodes, one cluster per tree, one colour
//! per block type. At most `max_nodes` nodes are drawn; every group cut
//! short ends in one "… N more" node. Everything read is untrusted: blocks
//! that do not decode become red "corrupt block N" nodes, never panics.
//!
//! Reads only, like `dump`: `Backend::open(dev, true)` for the replayed
//! inode table, the fsck log follower (`tools::fsck::follow`) for the chain
//! and, in `graph/trees.rs`, the fsck tree walker for every tree.

mod trees;

use super::fsck::follow;
use std::fmt::Write;
use std::sync::Arc;
use trees::{bitmap_file, data_trees, itable};
use tux3::backend::Backend;
use tux3::device::Device;
use tux3::error::{Error, Result};
use tux3::log::{read_chain, Record};
use tux3::structures::superblock::Superblock;
use tux3::types::FileType;

/// Entries listed in one leaf node before the rest are summarized.
const MAX_FIELDS: usize = 8;
/// Characters of a name shown before it is cut.
const NAME_CHARS: usize = 24;

/// Fill colours by block type: (branch, leaf) pairs for trees.
const SB: [&str; 2] = ["#fff2cc", "#ffd966"];
const LOG: [&str; 2] = ["#9fc5e8", "#6fa8dc"];
const ITABLE: (&str, &str) = ("#f6b26b", "#fce5cd");
const EXTENTS: (&str, &str) = ("#93c47d", "#d9ead3");
const DIRENTS: (&str, &str) = ("#c27ba0", "#ead1dc");
const BITMAP: (&str, &str) = ("#b7b7b7", "#b7b7b7");
const BITMAP_BLOCK: &str = "#eeeeee";
const BAD: &str = "#ff6666";
const DASHED: &str = ", style=\"filled,dashed\"";

/// The dot text being built and the node budget.
struct Dot {
    out: String,
    /// Node statements counted against the budget.
    nodes: usize,
    /// Budget of the current section (at most `max`).
    limit: usize,
    max: usize,
    ids: usize,
}

/// Escape text for a record label field; control characters become `?`.
fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '{' | '}' | '|' | '<' | '>' | '"' | '\\' => {
                o.push('\\');
                o.push(c);
            }
            c if c.is_control() => o.push('?'),
            c => o.push(c),
        }
    }
    o
}

/// At most `n` characters of `s`, marked when cut.
fn cut_text(s: &str, n: usize) -> String {
    match s.char_indices().nth(n) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

/// "block N", or that the node exists only in memory (rebuilt by replay).
fn at(addr: u64) -> String {
    match addr {
        0 => "in memory (replay)".into(),
        a => format!("block {a}"),
    }
}

fn kind_name(mode: u32) -> String {
    FileType::from_mode(mode).map_or("?".into(), |k| format!("{k:?}").to_lowercase())
}

impl Dot {
    fn id(&mut self) -> String {
        self.ids += 1;
        format!("n{}", self.ids)
    }

    fn full(&self) -> bool {
        self.nodes >= self.limit
    }

    /// Give the next section `num/den` of what is left (at least one node).
    fn section(&mut self, num: usize, den: usize) {
        let left = self.max.saturating_sub(self.nodes);
        self.limit = self.nodes + (left * num / den).max(1).min(left);
    }

    /// A record node; `fields` are escaped already (ports allowed).
    fn node(&mut self, id: &str, fields: &[String], fill: &str, extra: &str) {
        self.nodes += 1;
        let label = fields.join("|");
        let _ = writeln!(
            self.out,
            "  {id} [label=\"{label}\", fillcolor=\"{fill}\"{extra}];"
        );
    }

    /// A new record node of plain-text fields; returns its id.
    fn add(&mut self, fields: &[String], fill: &str, extra: &str) -> String {
        let id = self.id();
        let fields: Vec<String> = fields.iter().map(|f| esc(f)).collect();
        self.node(&id, &fields, fill, extra);
        id
    }

    fn edge(&mut self, from: &str, to: &str, attrs: &str) {
        let _ = writeln!(self.out, "  {from} -> {to} [{attrs}];");
    }

    /// The one "… N more" node of a group cut short (not counted).
    fn more(&mut self, n: usize, what: &str) -> Option<String> {
        if n == 0 {
            return None;
        }
        let id = self.id();
        let label = esc(&format!("… {n} more {what}"));
        let _ = writeln!(
            self.out,
            "  {id} [label=\"{label}\", shape=note, fillcolor=white];"
        );
        Some(id)
    }

    /// A red node for a block that could not be read or decoded (`block`
    /// unless the error names one).
    fn corrupt(&mut self, block: u64, e: &Error) -> String {
        let (block, what) = match e {
            Error::Corrupt { block, what } => (*block, what.clone()),
            other => (block, other.to_string()),
        };
        self.add(&[format!("corrupt block {block}"), cut_text(&what, 100)], BAD, "")
    }

    fn open(&mut self, name: &str, label: &str, color: &str) {
        let label = esc(label);
        let _ = writeln!(
            self.out,
            "  subgraph cluster_{name} {{\n  label=\"{label}\"; style=rounded; color=\"{color}\";"
        );
    }

    fn close(&mut self) {
        self.out.push_str("  }\n");
    }
}

/// The dot text of the volume on `dev`, drawing at most `max_nodes` nodes
/// (plus one "… N more" node per group cut short).
pub fn graph(dev: Arc<dyn Device>, max_nodes: usize) -> Result<String> {
    let mut d = Dot {
        out: String::new(),
        nodes: 0,
        limit: max_nodes,
        max: max_nodes,
        ids: 0,
    };
    let sb = superblocks(&mut d, dev.as_ref());
    if let Some(sb) = &sb {
        d.section(1, 4);
        let head = log(&mut d, dev.as_ref(), sb);
        d.edge("sb_use:log", &head, "label=\"log head\", color=\"#3d85c6\"");
        d.section(1, 5);
        bitmap_file(&mut d, dev.as_ref(), sb);
        match Backend::open(dev.clone(), true) {
            Ok((mut be, replays)) => {
                d.section(1, 3);
                let (inodes, live_root) = itable(&mut d, &mut be);
                d.section(1, 1);
                data_trees(&mut d, &be, &inodes, &replays);
                snapshots(&mut d, &be, live_root.as_deref());
            }
            Err(e) => {
                let id = d.corrupt(0, &e);
                d.edge("sb_use:it", &id, "label=\"cannot replay\"");
            }
        }
    }
    let title = sb.map_or("not a usable tux3 volume".into(), |s| {
        let (n, bs, u) = (s.block_count, s.block_size, s.unifies);
        format!("tux3 volume: {n} blocks of {bs} bytes, {u} unifies")
    });
    Ok(format!(
        "digraph tux3 {{\n  graph [rankdir=LR, ordering=out, fontname=Helvetica, fontsize=11, labelloc=t, \
         nodesep=0.15, ranksep=0.5, label=\"{}\"];\n  node [shape=record, style=filled, \
         fontname=Helvetica, fontsize=9];\n  edge [fontname=Helvetica, fontsize=8];\n{}}}\n",
        esc(&title),
        d.out
    ))
}

/// The snapshot table: one node per snapshot, with an edge to the live
/// inode table's root when it shares it (no change since it was taken),
/// and the dead list's size.
fn snapshots(d: &mut Dot, be: &Backend, live_root: Option<&str>) {
    let snaps = &be.snaps;
    if snaps.records.is_empty() && snaps.dead.is_empty() {
        return;
    }
    d.open("snapshots", "snapshots (after replay)", "#674ea7");
    let bs = be.bs as u64;
    let live = be.itable.lock().unified.addr;
    for r in snaps.records.values() {
        let state = if r.deleting {
            "deleted, space coming back"
        } else {
            "ok"
        };
        let id = d.add(
            &[
                format!(
                    "snapshot {} \"{}\"",
                    r.id,
                    cut_text(&String::from_utf8_lossy(&r.name), NAME_CHARS)
                ),
                format!("inode table {}", at(r.itable.addr)),
                format!(
                    "refers to {} KiB, alone {} KiB",
                    r.referenced * bs / 1024,
                    snaps.unique_blocks(r.id) * bs / 1024
                ),
                state.to_string(),
            ],
            "#d9d2e9",
            "",
        );
        d.edge(
            "sb_use:it",
            &id,
            "label=\"snapshot table\", color=\"#674ea7\", style=dashed",
        );
        if let (Some(root), true) = (live_root, r.itable.addr == live) {
            d.edge(&id, root, "label=\"shares the inode table\", color=\"#674ea7\"");
        }
    }
    d.add(
        &[
            "dead list".to_string(),
            format!("{} extents, {} blocks", snaps.dead.len(), snaps.dead_blocks),
            "freed by the live volume, held by snapshots".to_string(),
        ],
        "#b4a7d6",
        "",
    );
    d.close();
}

/// Both copies; the one in use gets id `sb_use` (with ports `it`, `bm`,
/// `log`). Returns the superblock in use.
fn superblocks(d: &mut Dot, dev: &dyn Device) -> Option<Superblock> {
    let inuse = Superblock::load(dev).ok();
    d.open("sb", "superblock (blocks 0 and 1)", "#bf9000");
    let mut buf = vec![0u8; dev.block_size() as usize];
    for copy in 0..2u64 {
        let read = dev.read(copy, &mut buf).map_err(Error::from);
        let s = match read.and_then(|_| Superblock::decode(&buf, copy)) {
            Ok(s) => s,
            Err(e) => {
                d.corrupt(copy, &e);
                continue;
            }
        };
        let used = inuse.as_ref().is_some_and(|u| u.seq == s.seq);
        let (id, state) = match used {
            true => ("sb_use".to_string(), "IN USE"),
            false => (format!("sb{copy}"), "older copy"),
        };
        let (it, bm) = (s.itable, s.bitmap);
        let fields = [
            format!("superblock copy {copy} (block {copy})"),
            format!("{state}, seq {}", s.seq),
            format!("{} blocks of {} B", s.block_count, s.block_size),
            format!("<it> itable root {} depth {}", it.addr, it.depth),
            format!(
                "<bm> bitmap root {} depth {}, {} blocks",
                bm.addr, bm.depth, s.bitmap_blocks
            ),
            format!("<log> log head {} seq {}", s.log_head, s.log_seq),
            format!("next delta {}, {} unifies", s.next_delta, s.unifies),
        ];
        d.node(
            &id,
            &fields,
            SB[used as usize],
            if used { ", penwidth=2" } else { "" },
        );
    }
    d.close();
    inuse
}

/// "N records: a balloc, b leafmap, …" (by variant, in order of appearance).
fn counts(records: &[Record]) -> String {
    let mut n: Vec<(String, usize)> = Vec::new();
    for r in records {
        let debug = format!("{r:?}");
        let kind = debug.split([' ', '{', '(']).next().unwrap_or("").to_lowercase();
        match n.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, c)) => *c += 1,
            None => n.push((kind, 1)),
        }
    }
    let parts: Vec<String> = n.iter().map(|(k, c)| format!("{c} {k}")).collect();
    format!("{} records: {}", records.len(), parts.join(", "))
}

/// The log chain since the last unify; returns the id of its first node.
fn log(d: &mut Dot, dev: &dyn Device, sb: &Superblock) -> String {
    d.open("log", "log since the last unify", "#3d85c6");
    let chain = read_chain(dev, sb.log_start());
    let (blocks, stop, stop_seq) = follow(dev, sb.log_head, sb.log_seq, Some(sb.log_prev_crc));
    let committed = chain.as_ref().map_or(0, |c| c.blocks().count().min(blocks.len()));
    let (mut first, mut prev, mut cut) = (None, None::<String>, 0);
    for (i, lb) in blocks.iter().enumerate() {
        if d.full() {
            cut = blocks.len() - i;
            break;
        }
        let state = match (lb.commit, i < committed) {
            (true, true) => "COMMIT",
            (false, true) => "no commit flag",
            (_, false) => "uncommitted (ignored)",
        };
        let fields = [
            format!("log block {}", lb.addr),
            format!("seq {}, delta {}", lb.seq, lb.delta),
            state.to_string(),
            counts(&lb.records),
            format!("next {}", lb.next),
        ];
        let id = d.add(
            &fields,
            LOG[lb.commit as usize],
            if i < committed { "" } else { DASHED },
        );
        if let Some(p) = &prev {
            d.edge(p, &id, "label=next, color=\"#3d85c6\"");
        }
        first.get_or_insert_with(|| id.clone());
        prev = Some(id);
    }
    let end = match (&chain, d.more(cut, "log blocks")) {
        (_, Some(m)) => m,
        (Err(e), None) => d.corrupt(stop, e),
        (Ok(c), None) => {
            let head = match blocks.is_empty() {
                true => "log is empty (nothing since the last unify)".to_string(),
                false => format!("end of log: block {stop} (seq {stop_seq}) is not the next log block"),
            };
            let next = format!("next log block goes to {} (seq {})", c.tail.next, c.tail.seq);
            let fields = [head, next];
            d.add(&fields, "white", ", shape=Mrecord, style=\"filled,dashed\"")
        }
    };
    if let Some(p) = &prev {
        d.edge(p, &end, "label=next, style=dashed");
    }
    d.close();
    first.unwrap_or(end)
}
