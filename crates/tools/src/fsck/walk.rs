//! Tolerant tree walker for fsck and dump. `Tree::visit` loads the root
//! (as replayed in memory); from there this module walks every node itself:
//! children already in memory (rebuilt or loaded by replay) are followed in
//! memory, children on disk are read and decoded with the engine's node
//! decoder without being kept. A node that fails to load is recorded and its
//! siblings are still walked, so one bad block hides only what lies below
//! it. Checks on the way: key order across leaves, the routing invariant T1
//! (a branch entry's separator equals the first separator below it), no
//! node reached twice (a damaged tree that shares or loops through nodes
//! cannot make the walk explode), and nesting at most `MAX_DEPTH` levels.
//!
//! Calls `structures::btree` (Tree::visit for the root, node::decode).

use std::collections::HashSet;
use tux3::device::Device;
use tux3::error::{Errno, Error};
use tux3::structures::btree::node::{decode, Slot};
use tux3::structures::btree::{Node, Tree, TreeKind};

/// Deepest nesting of branches accepted (the format allows 16 levels).
const MAX_DEPTH: usize = 32;

/// Receives each leaf: its address and its (key, value) entries.
pub(crate) type LeafFn<'a> = dyn FnMut(u64, &[(u64, Vec<u8>)]) + 'a;

/// What a walk saw.
#[derive(Default)]
pub(crate) struct Walked {
    /// (address, level) of every node; address 0 = built in memory by replay.
    pub nodes: Vec<(u64, u8)>,
    pub leaves: u64,
    pub branches: u64,
    /// Nodes that could not be read (each error names its block).
    pub errors: Vec<Error>,
    /// (address, separator, level) of each node read that did not decode.
    pub undecoded: Vec<(u64, u64, u8)>,
    /// (address, separator, first key) of each leaf whose separator is out
    /// of step with its keys (above its first, or not above the previous
    /// leaf's last) where its first key would be in step.
    pub misplaced: Vec<(u64, u64, u64)>,
    /// (address, separator) of each leaf, in key order.
    pub leaf_seps: Vec<(u64, u64)>,
    /// (branch address, entry index, separator, child address) of each
    /// entry of a branch of leaves, in key order.
    pub leaf_entries: Vec<(u64, usize, u64, u64)>,
}

impl Walked {
    pub fn complete(&self) -> bool {
        self.errors.is_empty()
    }
}

struct Walker<'a> {
    dev: &'a dyn Device,
    owner: u64,
    kind: TreeKind,
    what: &'a str,
    leaf: &'a mut LeafFn<'a>,
    problem: &'a mut dyn FnMut(String),
    out: Walked,
    seen: HashSet<u64>,
    leaf_index: u64,
    last_key: Option<u64>,
    last_sep: Option<u64>,
    buf: Vec<u8>,
    /// Nodes already walked in another tree that shares them (snapshots):
    /// skipped, with everything below them; each node walked is added.
    prune: Option<&'a mut HashSet<u64>>,
}

/// Walk `tree` (called `what` in messages). `leaf(addr, entries)` sees every
/// readable leaf in key order; `problem(line)` receives order and shape
/// problems. Never fails: unreadable nodes are listed in the result.
pub(crate) fn walk(
    dev: &dyn Device,
    tree: &mut Tree,
    what: &str,
    leaf: &mut LeafFn,
    problem: &mut dyn FnMut(String),
) -> Walked {
    walk_pruned(dev, tree, what, leaf, problem, None)
}

/// [`walk`], skipping every node in `prune` (and what lies below it) and
/// adding each node walked to it: trees that share nodes (snapshots) are
/// walked once in all, however many share them.
pub(crate) fn walk_pruned<'a>(
    dev: &'a dyn Device,
    tree: &mut Tree,
    what: &'a str,
    leaf: &'a mut LeafFn<'a>,
    problem: &'a mut dyn FnMut(String),
    prune: Option<&'a mut HashSet<u64>>,
) -> Walked {
    let mut w = Walker {
        dev,
        owner: tree.id,
        kind: tree.kind,
        what,
        leaf,
        problem,
        out: Walked::default(),
        seen: HashSet::new(),
        leaf_index: 0,
        last_key: None,
        last_sep: None,
        buf: vec![0u8; dev.block_size() as usize],
        prune,
    };
    let mut walked = false;
    // Only the root comes from `visit`; the walker does the rest and stops
    // `visit` from loading everything into the tree with a marker error.
    let r = tree.visit(dev, &mut |addr, _level, sep, node| {
        walked = true;
        w.node(addr, sep, node, true, 0);
        Err(Error::Posix(Errno::EBUSY))
    });
    if let (Err(e), false) = (r, walked) {
        // The root itself did not load: a leaf (or branch) on disk that
        // does not decode, at separator 0.
        if let Error::Corrupt { block, .. } = e {
            w.out.undecoded.push((block, 0, tree.depth()));
        }
        w.out.errors.push(e);
    }
    w.out
}

/// "block N", or a note that the node exists only in memory.
pub(crate) fn place(addr: u64) -> String {
    if addr == 0 {
        "in-memory node (rebuilt by replay)".to_string()
    } else {
        format!("block {addr}")
    }
}

impl Walker<'_> {
    fn fail(&mut self, addr: u64, what: String) {
        self.out
            .errors
            .push(Error::corrupt(addr, format!("{}: {what}", self.what)));
    }

    fn node(&mut self, addr: u64, sep: u64, node: &Node, root: bool, depth: usize) {
        if let Some(p) = self.prune.as_mut() {
            if addr != 0 && !p.insert(addr) {
                return;
            }
        }
        if addr != 0 && !self.seen.insert(addr) {
            self.fail(
                addr,
                "node reached twice (the tree shares or loops through it)".into(),
            );
            return;
        }
        if depth > MAX_DEPTH {
            self.fail(addr, format!("nested deeper than {MAX_DEPTH} levels"));
            return;
        }
        match node {
            Node::Leaf(l) => {
                self.out.nodes.push((addr, 0));
                self.out.leaves += 1;
                self.out.leaf_seps.push((addr, sep));
                self.check_leaf(addr, sep, &l.entries);
                (self.leaf)(addr, &l.entries);
            }
            Node::Branch(b) => {
                self.out.nodes.push((addr, b.level));
                self.out.branches += 1;
                let first = b.children.first().map(|c| c.sep);
                if !root && first != Some(sep) {
                    (self.problem)(format!(
                        "{}: {} branch: first separator {first:?} differs from its parent's \
                         entry {sep} (invariant T1)",
                        place(addr),
                        self.what
                    ));
                }
                let Some(level) = b.level.checked_sub(1) else {
                    self.fail(addr, "branch at level 0".into());
                    return;
                };
                for (i, c) in b.children.iter().enumerate() {
                    if b.level == 1 {
                        self.out.leaf_entries.push((addr, i, c.sep, c.slot.addr()));
                    }
                    match &c.slot {
                        Slot::Mem(n) => self.node(n.addr(), c.sep, n, false, depth + 1),
                        Slot::Disk(a) => self.disk(*a, level, c.sep, depth + 1),
                    }
                }
            }
        }
    }

    /// Read, decode and walk the on-disk node at `addr`.
    fn disk(&mut self, addr: u64, level: u8, sep: u64, depth: usize) {
        let count = self.dev.block_count();
        if addr < 2 || addr >= count {
            self.fail(addr, "node address outside the volume".into());
            return;
        }
        if self.prune.as_ref().is_some_and(|p| p.contains(&addr)) {
            return;
        }
        if let Err(e) = self.dev.read(addr, &mut self.buf) {
            self.out
                .errors
                .push(Error::corrupt(addr, format!("{}: cannot read: {e}", self.what)));
            return;
        }
        match decode(&self.buf, addr, self.owner, self.kind, level, count) {
            Ok(n) => self.node(addr, sep, &n, false, depth),
            Err(e) => {
                self.out.undecoded.push((addr, sep, level));
                self.out.errors.push(e)
            }
        }
    }

    fn check_leaf(&mut self, addr: u64, sep: u64, entries: &[(u64, Vec<u8>)]) {
        let at = place(addr);
        let what = self.what;
        if self.leaf_index > 0 {
            if let Some(prev) = self.last_sep {
                if sep <= prev {
                    (self.problem)(format!(
                        "{at}: {what} leaf: separator {sep} is not above the previous leaf's {prev}"
                    ));
                }
            }
            if let Some(&(k, _)) = entries.first() {
                if k < sep {
                    (self.problem)(format!(
                        "{at}: {what} leaf: key {k} lies below the leaf's separator {sep}"
                    ));
                }
            }
            if let Some(k) = self.last_key {
                if k >= sep {
                    (self.problem)(format!(
                        "{at}: {what} leaf: the previous leaf holds key {k}, at or above this \
                         leaf's separator {sep}"
                    ));
                }
            }
            let first = entries.first().map(|e| e.0);
            let wrong = first.is_some_and(|k| k < sep) || self.last_key.is_some_and(|k| k >= sep);
            if let (true, Some(k)) = (wrong, first) {
                if self.last_key.is_none_or(|l| k > l) && self.last_sep.is_none_or(|s| k > s) {
                    self.out.misplaced.push((addr, sep, k));
                }
            }
        }
        for &(k, _) in entries {
            if let Some(prev) = self.last_key {
                if k <= prev {
                    (self.problem)(format!(
                        "{at}: {what} leaf: key {k} is not above the previous key {prev}"
                    ));
                }
            }
            self.last_key = Some(k);
        }
        self.last_sep = Some(sep);
        self.leaf_index += 1;
    }
}
