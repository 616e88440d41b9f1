//! What a scrub reads: every block the committed volume references — both
//! superblock copies, the log since the last unify, the bitmap file and its
//! blocks, the inode table, every file's tree and data, and the same for
//! every snapshot (the snapshot table, each image's inode table and trees)
//! — each with what it is, sorted by address with overlaps taken out, so
//! a block two trees share is read once.
//!
//! The trees are walked with fsck's tolerant walker (`fsck::walk`): a node
//! that does not load is listed (its block is still scrubbed) and its
//! siblings are walked. Nodes a snapshot shares with the live volume or an
//! earlier snapshot are walked once (`walk_pruned`).
//!
//! Calls `backend::Backend` (a read-only open: replay writes nothing),
//! `datamap`, the structures' decoders, `log` and the fsck walker.

use crate::datamap;
use crate::fsck::follow;
use crate::fsck::walk::{walk_pruned, Walked};
use std::collections::HashSet;
use std::sync::Arc;
use tux3::backend::snapshot::SNAP_INO;
use tux3::backend::{Backend, BITMAP_INO};
use tux3::device::Device;
use tux3::error::{Error, Result};
use tux3::structures::btree::{Tree, TreeKind};
use tux3::structures::extent::{self, Extent};
use tux3::structures::inode::InodeAttrs;

/// What a block is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum What {
    /// Superblock copy `0` or `1`.
    Superblock,
    /// A node of tree `tree` (0: an inode table, 2: the bitmap file, 3:
    /// the snapshot table, else the data tree of that inode) at `level`
    /// (`None`: it did not load, so its level is unknown).
    Node {
        tree: u64,
        kind: TreeKind,
        level: Option<u8>,
    },
    /// Bitmap block `index` of the bitmap file.
    Bitmap { index: u64 },
    /// A log block since the last unify.
    Log,
    /// File data of inode `ino` from logical block `lblock`, born in
    /// generation `birth`, with a checksum per block (empty: none).
    Data {
        ino: u64,
        lblock: u64,
        birth: u32,
        sums: Vec<u32>,
    },
}

/// A run of blocks of one kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub start: u64,
    pub count: u64,
    pub what: What,
}

impl Item {
    pub fn end(&self) -> u64 {
        self.start.saturating_add(self.count)
    }

    /// The checksum block `b` (inside this item) must have, if data.
    pub fn sum_at(&self, b: u64) -> Option<u32> {
        match &self.what {
            What::Data { sums, .. } => sums
                .get(usize::try_from(b.checked_sub(self.start)?).ok()?)
                .copied(),
            _ => None,
        }
    }
}

/// A snapshot as the report names it.
#[derive(Debug, Clone)]
pub struct Snap {
    pub id: u64,
    pub name: Vec<u8>,
}

/// Data blocks one more file maps: (start, count, ino, lblock).
pub type Sharer = (u64, u64, u64, u64);

/// Everything to read, and what the walk could not.
#[derive(Default)]
pub struct Plan {
    /// Sorted by address, disjoint.
    pub items: Vec<Item>,
    /// Nodes that did not load (each error names its block), with the tree.
    pub unwalked: Vec<(u64, String)>,
    pub snaps: Vec<Snap>,
    /// Blocks the live volume freed that snapshots hold: (start, count,
    /// birth, death).
    pub dead: Vec<(u64, u64, u32, u32)>,
    /// Data blocks more than one file maps (clones, dedupe; a snapshot's
    /// version of a file too), beyond the one `items` names: (start,
    /// count, ino, lblock), sorted by start. Read once, named for all.
    pub sharers: Vec<Sharer>,
    pub block_size: u64,
}

impl Plan {
    /// Blocks to read in all.
    pub fn blocks(&self) -> u64 {
        self.items.iter().map(|i| i.count).sum()
    }

    /// Blocks to read below address `at`.
    pub fn blocks_below(&self, at: u64) -> u64 {
        self.items
            .iter()
            .map(|i| i.end().min(at).saturating_sub(i.start.min(at)))
            .sum()
    }

    /// The item holding block `b`.
    pub fn find(&self, b: u64) -> Option<&Item> {
        let i = self.items.partition_point(|it| it.end() <= b);
        self.items.get(i).filter(|it| it.start <= b)
    }

    /// The snapshots holding data block `b` born in generation `birth`: a
    /// live block is in every snapshot taken since its birth, a block the
    /// live volume freed in those taken before its death.
    pub fn holders(&self, b: u64, birth: u32) -> Vec<Vec<u8>> {
        let death = self
            .dead
            .iter()
            .find(|&&(s, c, _, _)| s <= b && b < s.saturating_add(c))
            .map(|d| u64::from(d.3));
        self.snaps
            .iter()
            .filter(|s| s.id >= u64::from(birth) && death.is_none_or(|d| s.id < d))
            .map(|s| s.name.clone())
            .collect()
    }

    /// Whether data block `b` is live (not only in snapshots).
    pub fn is_live(&self, b: u64) -> bool {
        !self
            .dead
            .iter()
            .any(|&(s, c, _, _)| s <= b && b < s.saturating_add(c))
    }
}

struct Collect<'a> {
    dev: &'a dyn Device,
    /// The volume's checksum table: a clone's extents keep theirs there.
    sums: tux3::backend::alloc::SumsHandle,
    items: Vec<Item>,
    unwalked: Vec<(u64, String)>,
    prune: HashSet<u64>,
}

impl Collect<'_> {
    /// Walk `tree` (nodes shared with a tree walked before are skipped),
    /// keeping its nodes; returns the entries of its leaves.
    fn tree(&mut self, tree: &mut Tree, what: &str) -> Vec<(u64, u64, Vec<u8>)> {
        let (id, kind) = (tree.id, tree.kind);
        let mut entries = Vec::new();
        let w: Walked = {
            let mut leaf = |addr: u64, es: &[(u64, Vec<u8>)]| {
                entries.extend(es.iter().map(|(k, v)| (addr, *k, v.clone())));
            };
            let mut problem = |_line: String| {};
            walk_pruned(
                self.dev,
                tree,
                what,
                &mut leaf,
                &mut problem,
                Some(&mut self.prune),
            )
        };
        for &(addr, level) in &w.nodes {
            if addr != 0 {
                self.node(addr, id, kind, Some(level));
            }
        }
        for e in &w.errors {
            if let Error::Corrupt { block, .. } = e {
                if *block >= 2 && *block < self.dev.block_count() {
                    self.node(*block, id, kind, None);
                }
            }
            self.unwalked.push((error_block(e), format!("{what}: {e}")));
        }
        entries
    }

    fn node(&mut self, addr: u64, tree: u64, kind: TreeKind, level: Option<u8>) {
        self.items.push(Item {
            start: addr,
            count: 1,
            what: What::Node { tree, kind, level },
        });
    }

    fn extents(&mut self, ino: u64, es: &[Extent]) {
        for e in es.iter().filter(|e| !e.unwritten) {
            let e = &self.sums.resolve(e);
            self.items.push(Item {
                start: e.pblock,
                count: e.count,
                what: What::Data {
                    ino,
                    lblock: e.lblock,
                    birth: e.birth,
                    sums: e.sums.clone(),
                },
            });
        }
    }

    /// The inodes of one inode table (live, or a snapshot's) and their data.
    fn itable(&mut self, be: &Backend, tree: &mut Tree, live: bool, replays: &Replays) {
        let bounds = tux3::structures::bounds(self.dev);
        let entries = self.tree(tree, "inode table");
        for (leaf, ino, v) in entries {
            let Ok(a) = InodeAttrs::decode(&v, ino, leaf, &bounds) else {
                continue;
            };
            self.extents(ino, &a.inline);
            if a.root.addr == 0 && !(live && replays.contains_key(&ino)) {
                continue;
            }
            if self.prune.contains(&a.root.addr) {
                continue;
            }
            let replay = if live { replays.get(&ino) } else { None };
            let mut t = match datamap::data_tree(be, ino, &a, replay) {
                Ok(t) => t,
                Err(e) => {
                    self.unwalked
                        .push((error_block(&e), format!("tree of inode {ino}: {e}")));
                    continue;
                }
            };
            let entries = self.tree(&mut t, "file tree");
            if t.kind == TreeKind::Extents {
                let es: Vec<Extent> = entries
                    .iter()
                    .filter_map(|(leaf, k, v)| extent::decode(*k, v, *leaf, &bounds).ok())
                    .collect();
                self.extents(ino, &es);
            }
        }
    }
}

type Replays = std::collections::HashMap<u64, tux3::backend::TreeReplay>;

/// The block a corruption error names (0 if none).
pub fn error_block(e: &Error) -> u64 {
    match e {
        Error::Corrupt { block, .. } => *block,
        _ => 0,
    }
}

/// Everything the committed volume on `dev` references. The caller keeps
/// commits from running meanwhile (`Fs::with_commits_held`).
pub fn collect(dev: Arc<dyn Device>) -> Result<Plan> {
    let (mut be, replays) = Backend::open(dev.clone(), true)?;
    let d = dev.as_ref();
    let mut c = Collect {
        dev: d,
        sums: be.alloc.sums.handle(),
        items: Vec::new(),
        unwalked: Vec::new(),
        prune: HashSet::new(),
    };
    for copy in 0..2 {
        c.items.push(Item {
            start: copy,
            count: 1,
            what: What::Superblock,
        });
    }
    log_blocks(&mut c, &be);
    // The bitmap file and its blocks.
    let mut bitmap = std::mem::replace(
        &mut be.bitmap,
        Tree::open(BITMAP_INO, TreeKind::Extents, Default::default()),
    );
    let bounds = tux3::structures::bounds(d);
    for (leaf, k, v) in c.tree(&mut bitmap, "bitmap file") {
        if let Ok(e) = extent::decode(k, &v, leaf, &bounds) {
            for i in 0..e.count {
                c.items.push(Item {
                    start: e.pblock.saturating_add(i),
                    count: 1,
                    what: What::Bitmap {
                        index: e.lblock.saturating_add(i),
                    },
                });
            }
        }
    }
    // The live volume, then each snapshot.
    let mut itable = std::mem::replace(
        be.itable.get_mut(),
        Tree::open(0, TreeKind::Itable, Default::default()),
    );
    c.itable(&be, &mut itable, true, &replays);
    let mut snaps = std::mem::replace(
        &mut be.snaps.tree,
        Tree::open(SNAP_INO, TreeKind::Snapshots, Default::default()),
    );
    c.tree(&mut snaps, "snapshot table");
    let mut plan = Plan {
        block_size: u64::from(d.block_size()),
        ..Plan::default()
    };
    for rec in be.snaps.records.values().filter(|r| !r.deleting) {
        let mut t = Tree::open(0, TreeKind::Itable, rec.itable);
        c.itable(&be, &mut t, false, &replays);
        plan.snaps.push(Snap {
            id: rec.id,
            name: rec.name.clone(),
        });
    }
    plan.dead = be
        .snaps
        .dead_extents()
        .map(|(s, x)| (s, x.count, x.birth, x.death))
        .collect();
    plan.unwalked = c.unwalked;
    (plan.items, plan.sharers) = disjoint(c.items, d.block_count());
    Ok(plan)
}

/// The log blocks linked from the superblock's head; and the block
/// following stopped at, if it claims to be this log's (log magic and its
/// own address) — a damaged log block, or a stale one that reads clean.
fn log_blocks(c: &mut Collect, be: &Backend) {
    let sb = &be.sb;
    let (blocks, stop, _) = follow(c.dev, sb.log_head, sb.log_seq, Some(sb.log_prev_crc));
    for lb in &blocks {
        c.items.push(Item {
            start: lb.addr,
            count: 1,
            what: What::Log,
        });
    }
    let mut buf = vec![0u8; c.dev.block_size() as usize];
    if stop >= 2 && stop < c.dev.block_count() && c.dev.read(stop, &mut buf).is_ok() {
        let magic = buf
            .get(0..4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
        let addr = buf
            .get(8..16)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes);
        if magic == Some(tux3::log::block::MAGIC) && addr == Some(stop) {
            c.items.push(Item {
                start: stop,
                count: 1,
                what: What::Log,
            });
        }
    }
}

/// `items` sorted by address, each block in one item only (the first
/// found: the live volume's before a snapshot's), none past the volume;
/// and the data the items left out map (see [`Plan::sharers`]).
fn disjoint(mut items: Vec<Item>, block_count: u64) -> (Vec<Item>, Vec<Sharer>) {
    // A stable sort keeps the order found among items at one address.
    items.sort_by_key(|i| i.start);
    let mut out: Vec<Item> = Vec::with_capacity(items.len());
    let mut sharers = Vec::new();
    let mut covered = 0u64;
    for mut it in items {
        let end = it.end().min(block_count);
        if let What::Data { ino, lblock, .. } = it.what {
            let shared_end = end.min(covered);
            if it.start < shared_end {
                sharers.push((it.start, shared_end - it.start, ino, lblock));
            }
        }
        if end <= covered || it.start >= block_count {
            continue;
        }
        if it.start < covered {
            let cut = covered - it.start;
            if let What::Data { lblock, sums, .. } = &mut it.what {
                *lblock = lblock.saturating_add(cut);
                sums.drain(..usize::try_from(cut).unwrap_or(usize::MAX).min(sums.len()));
            }
            it.start = covered;
        }
        it.count = end - it.start;
        covered = end;
        out.push(it);
    }
    (out, sharers)
}
