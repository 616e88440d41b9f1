//! `tux3 snapshot diff`: what changed between two snapshots, as created,
//! deleted, modified and renamed paths, in time that follows what changed.
//!
//! Write-anywhere makes the comparison cheap: a block is never rewritten
//! in place, so a node address both snapshots reach holds the same bytes in
//! both, and everything below it is the same. Two trees are compared level
//! by level (a node's level is its height above the leaves, the same in any
//! tree that holds it): nodes present at a level in both are dropped, the
//! rest are opened, down to the leaves, whose entries are then matched by
//! key. The inode tables are compared so; then the directories among the
//! changed inodes, the same way; entries gone and entries new give the
//! paths, and an inode that lost one name and gained another was renamed.
//!
//! A file's data map is part of its inode record, which is compared whole:
//! the root of its extent tree (a changed leaf is written elsewhere, so the
//! root changes) or the extents the record itself holds (format attribute
//! 9, a small file's whole map). Extents that differ, or a map that moved
//! from the record to a tree or back, make the file modified like a new
//! tree root does; a file's extent tree is never opened.
//!
//! A path is built from the directory's `parent` attribute and its name in
//! that parent (one directory read per level, cached). A file whose data or
//! attributes changed but whose names did not is found through its parent
//! hint (the directory it was made or last renamed in); only a file without
//! one (made before hints were written) or whose hinted name is gone is
//! named by a walk of the newer snapshot's directories, stopped once every
//! such file is found.
//!
//! Calls the engine's backend (to open the volume and find the snapshots)
//! and its structures' decoders.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use tux3::backend::Backend;
use tux3::device::Device;
use tux3::error::{Error, Result};
use tux3::structures::btree::node::{decode, Node, Slot};
use tux3::structures::btree::{Tree, TreeKind};
use tux3::structures::dirent::Dirent;
use tux3::structures::inode::InodeAttrs;
use tux3::structures::superblock::Root;
use tux3::types::{FileType, ROOT_INO};

/// What happened to a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// `+`: the path is new in the newer snapshot.
    Created,
    /// `-`: the path is gone.
    Deleted,
    /// `M`: the path names the same inode, whose data or attributes changed.
    Modified,
    /// `R`: the inode moved from `path` to `to`.
    Renamed,
}

impl Kind {
    /// The one-letter code `zfs diff` uses too.
    pub fn code(self) -> char {
        match self {
            Kind::Created => '+',
            Kind::Deleted => '-',
            Kind::Modified => 'M',
            Kind::Renamed => 'R',
        }
    }
}

/// One change.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Change {
    pub kind: Kind,
    /// The path (in the older snapshot for `Deleted` and `Renamed`).
    pub path: Vec<u8>,
    /// `Renamed`: the path in the newer snapshot.
    pub to: Option<Vec<u8>>,
    pub ino: u64,
    pub dir: bool,
}

/// Entries that differ between two trees: key -> (value in `a`, in `b`).
pub(crate) type Differ = BTreeMap<u64, (Option<Vec<u8>>, Option<Vec<u8>>)>;

/// One snapshot's view: its inode table and what was read of it (the
/// send stream's planner reads snapshots through it too).
pub(crate) struct View<'d> {
    dev: &'d dyn Device,
    itable: Tree,
    attrs: HashMap<u64, Option<InodeAttrs>>,
    paths: HashMap<u64, Option<Vec<u8>>>,
}

impl<'d> View<'d> {
    pub(crate) fn new(dev: &'d dyn Device, root: Root) -> View<'d> {
        View {
            dev,
            itable: Tree::open(0, TreeKind::Itable, root),
            attrs: HashMap::new(),
            paths: HashMap::new(),
        }
    }

    pub(crate) fn attrs(&mut self, ino: u64) -> Result<Option<InodeAttrs>> {
        if let Some(a) = self.attrs.get(&ino) {
            return Ok(a.clone());
        }
        let a = match self.itable.get_at(self.dev, ino)? {
            Some((raw, leaf)) => Some(InodeAttrs::decode(
                &raw,
                ino,
                leaf,
                &tux3::structures::bounds(self.dev),
            )?),
            None => None,
        };
        self.attrs.insert(ino, a.clone());
        Ok(a)
    }

    /// Every entry of directory `dir`.
    fn entries(&mut self, dir: u64) -> Result<Vec<Dirent>> {
        let Some(a) = self.attrs(dir)? else {
            return Ok(Vec::new());
        };
        let mut tree = Tree::open(dir, TreeKind::Dirents, a.root);
        let mut out = Vec::new();
        let mut err = None;
        tree.scan(self.dev, 0, u64::MAX, |key, v, leaf| {
            match Dirent::decode(v, key, leaf) {
                Ok(d) => out.push(d),
                Err(e) => err = Some(e),
            }
            Ok(std::ops::ControlFlow::Continue(()))
        })?;
        match err {
            Some(e) => Err(e),
            None => Ok(out),
        }
    }

    /// The path of directory `dir` ("" for the root), through the parent
    /// attributes.
    fn dir_path(&mut self, dir: u64) -> Result<Option<Vec<u8>>> {
        if dir == ROOT_INO {
            return Ok(Some(Vec::new()));
        }
        if let Some(p) = self.paths.get(&dir) {
            return Ok(p.clone());
        }
        let mut out = None;
        if let Some(a) = self.attrs(dir)? {
            if a.parent != dir && a.parent != 0 {
                if let Some(mut p) = self.dir_path(a.parent)? {
                    if let Some(d) = self.entries(a.parent)?.into_iter().find(|d| d.ino == dir) {
                        p.push(b'/');
                        p.extend_from_slice(&d.name);
                        out = Some(p);
                    }
                }
            }
        }
        self.paths.insert(dir, out.clone());
        Ok(out)
    }

    /// A path of each of `want`, by a walk of the directories from the root
    /// that stops once all are found.
    fn find_paths(&mut self, want: &HashSet<u64>) -> Result<HashMap<u64, Vec<u8>>> {
        let mut found = HashMap::new();
        if want.is_empty() {
            return Ok(found);
        }
        let mut queue = VecDeque::from([(ROOT_INO, Vec::new())]);
        let mut seen = HashSet::from([ROOT_INO]);
        while let Some((dir, path)) = queue.pop_front() {
            for d in self.entries(dir)? {
                let mut p = path.clone();
                p.push(b'/');
                p.extend_from_slice(&d.name);
                if want.contains(&d.ino) {
                    found.entry(d.ino).or_insert_with(|| p.clone());
                }
                if d.kind == FileType::Directory && seen.insert(d.ino) {
                    queue.push_back((d.ino, p));
                }
            }
            if found.len() == want.len() {
                break;
            }
        }
        Ok(found)
    }
}

/// Entries that differ between the trees at `a` and `b` (owner `owner`,
/// kind `kind`), opening only nodes the two do not share (the send
/// stream's planner compares snapshots with it too).
pub(crate) fn changed_entries(
    dev: &dyn Device,
    owner: u64,
    kind: TreeKind,
    a: Root,
    b: Root,
) -> Result<Differ> {
    let count = dev.block_count();
    let bs = dev.block_size() as usize;
    let load = |addr: u64, level: u8| -> Result<Node> {
        if addr < 2 || addr >= count {
            return Err(Error::corrupt(
                addr,
                format!("{} node address outside the volume", kind.name()),
            ));
        }
        let mut buf = vec![0u8; bs];
        dev.read(addr, &mut buf)?;
        decode(&buf, addr, owner, kind, level, count)
    };
    let start = |r: Root| -> Vec<u64> {
        if r.addr == 0 {
            Vec::new()
        } else {
            vec![r.addr]
        }
    };
    let (mut fa, mut fb) = (start(a), start(b));
    let (mut la, mut lb) = (a.depth, b.depth);
    let mut ea: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
    let mut eb: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
    // Open one side's frontier: children one level down, or leaf entries.
    let open = |front: Vec<u64>, level: u8, entries: &mut BTreeMap<u64, Vec<u8>>| -> Result<Vec<u64>> {
        let mut next = Vec::new();
        for addr in front {
            match load(addr, level)? {
                Node::Leaf(l) => entries.extend(l.entries),
                Node::Branch(br) => next.extend(br.children.iter().map(|c| match c.slot {
                    Slot::Disk(x) => x,
                    Slot::Mem(ref n) => n.addr(),
                })),
            }
        }
        Ok(next)
    };
    while !fa.is_empty() || !fb.is_empty() {
        // The taller side (or the only one left) goes down a level alone.
        if !fa.is_empty() && (fb.is_empty() || la > lb) {
            fa = open(fa, la, &mut ea)?;
            la = la.saturating_sub(1);
            continue;
        }
        if !fb.is_empty() && (fa.is_empty() || lb > la) {
            fb = open(fb, lb, &mut eb)?;
            lb = lb.saturating_sub(1);
            continue;
        }
        // Both at the same level: what both hold is the same below.
        let in_b: HashSet<u64> = fb.iter().copied().collect();
        let shared: HashSet<u64> = fa.iter().copied().filter(|x| in_b.contains(x)).collect();
        fa.retain(|x| !shared.contains(x));
        fb.retain(|x| !shared.contains(x));
        fa = open(fa, la, &mut ea)?;
        fb = open(fb, lb, &mut eb)?;
        la = la.saturating_sub(1);
        lb = lb.saturating_sub(1);
    }
    let mut out = Differ::new();
    for (k, v) in &ea {
        if eb.get(k) != Some(v) {
            out.insert(*k, (Some(v.clone()), eb.get(k).cloned()));
        }
    }
    for (k, v) in eb {
        if !ea.contains_key(&k) {
            out.insert(k, (None, Some(v)));
        }
    }
    Ok(out)
}

fn join(dir: &[u8], name: &[u8]) -> Vec<u8> {
    let mut p = dir.to_vec();
    p.push(b'/');
    p.extend_from_slice(name);
    p
}

/// The changes from snapshot `older` to snapshot `newer` of the volume on
/// `dev` (opened read-only: nothing is written), sorted by path.
pub fn diff(dev: Arc<dyn Device>, older: &[u8], newer: &[u8]) -> Result<Vec<Change>> {
    let (be, _) = Backend::open(dev.clone(), true)?;
    let find = |name: &[u8]| {
        be.snaps
            .find(name)
            .map(|r| r.itable)
            .ok_or_else(|| Error::NotFound(format!("no snapshot named {:?}", String::from_utf8_lossy(name))))
    };
    let (ra, rb) = (find(older)?, find(newer)?);
    let dev = dev.as_ref();
    let (mut va, mut vb) = (View::new(dev, ra), View::new(dev, rb));
    let inodes = changed_entries(dev, 0, TreeKind::Itable, ra, rb)?;
    let bounds = tux3::structures::bounds(dev);
    let mut gone: Vec<(u64, Vec<u8>, u64, bool)> = Vec::new(); // (dir, name, ino, is dir)
    let mut new: Vec<(u64, Vec<u8>, u64, bool)> = Vec::new();
    let mut modified: Vec<(u64, bool)> = Vec::new();
    for (&ino, (a, b)) in &inodes {
        let a = a
            .as_ref()
            .map(|v| InodeAttrs::decode(v, ino, 0, &bounds))
            .transpose()?;
        let b = b
            .as_ref()
            .map(|v| InodeAttrs::decode(v, ino, 0, &bounds))
            .transpose()?;
        let is_dir = |x: &Option<InodeAttrs>| {
            x.as_ref()
                .is_some_and(|x| FileType::from_mode(x.mode) == Some(FileType::Directory))
        };
        let (da, db) = (is_dir(&a), is_dir(&b));
        if a.is_some() && b.is_some() && da == db {
            modified.push((ino, db));
        }
        if da || db {
            let root = |x: &Option<InodeAttrs>, d: bool| {
                if d {
                    x.as_ref().map_or(Root::default(), |x| x.root)
                } else {
                    Root::default()
                }
            };
            for (key, (ea, eb)) in changed_entries(dev, ino, TreeKind::Dirents, root(&a, da), root(&b, db))? {
                if let Some(v) = ea {
                    let d = Dirent::decode(&v, key, 0)?;
                    gone.push((ino, d.name, d.ino, d.kind == FileType::Directory));
                }
                if let Some(v) = eb {
                    let d = Dirent::decode(&v, key, 0)?;
                    new.push((ino, d.name, d.ino, d.kind == FileType::Directory));
                }
            }
        }
    }
    // An entry both gone and new under the same name and inode is a value
    // that moved between leaves only.
    let same: HashSet<(u64, Vec<u8>, u64)> = gone
        .iter()
        .map(|g| (g.0, g.1.clone(), g.2))
        .filter(|g| new.iter().any(|n| (n.0, &n.1, n.2) == (g.0, &g.1, g.2)))
        .collect();
    gone.retain(|g| !same.contains(&(g.0, g.1.clone(), g.2)));
    new.retain(|n| !same.contains(&(n.0, n.1.clone(), n.2)));

    let mut out = Vec::new();
    let mut renamed_from: HashMap<u64, Vec<u8>> = HashMap::new();
    let mut named_new: HashSet<u64> = HashSet::new();
    for (dir, name, ino, is_dir) in &gone {
        let path = join(&va.dir_path(*dir)?.unwrap_or_default(), name);
        let moved = new.iter().any(|n| n.2 == *ino) && vb.attrs(*ino)?.is_some();
        if moved && !renamed_from.contains_key(ino) {
            renamed_from.insert(*ino, path);
        } else {
            out.push(Change {
                kind: Kind::Deleted,
                path,
                to: None,
                ino: *ino,
                dir: *is_dir,
            });
        }
    }
    for (dir, name, ino, is_dir) in &new {
        let path = join(&vb.dir_path(*dir)?.unwrap_or_default(), name);
        named_new.insert(*ino);
        match renamed_from.remove(ino) {
            Some(from) => out.push(Change {
                kind: Kind::Renamed,
                path: from,
                to: Some(path),
                ino: *ino,
                dir: *is_dir,
            }),
            None => out.push(Change {
                kind: Kind::Created,
                path,
                to: None,
                ino: *ino,
                dir: *is_dir,
            }),
        }
    }
    // Inodes whose record changed: modified, unless created above or only
    // renamed with nothing else changed (the ctime changes on a rename,
    // which `zfs diff` reports as R alone too).
    let renamed: HashSet<u64> = out
        .iter()
        .filter(|c| c.kind == Kind::Renamed)
        .map(|c| c.ino)
        .collect();
    let mut unnamed = HashSet::new();
    for &(ino, _) in &modified {
        if named_new.contains(&ino) && !renamed.contains(&ino) {
            continue;
        }
        if renamed.contains(&ino) {
            continue;
        }
        unnamed.insert(ino);
    }
    let mut dirs: HashMap<u64, Vec<u8>> = HashMap::new();
    for &(ino, is_dir) in &modified {
        if is_dir && unnamed.contains(&ino) {
            if let Some(p) = vb.dir_path(ino)? {
                dirs.insert(ino, p);
            }
        }
    }
    // A file's parent hint names the directory it was made or last renamed
    // in: one directory read, when the name is still there; a walk for the
    // rest (files from before hints, or whose hinted name went).
    let mut found: HashMap<u64, Vec<u8>> = HashMap::new();
    let mut files: HashSet<u64> = HashSet::new();
    for ino in unnamed.iter().copied().filter(|i| !dirs.contains_key(i)) {
        let hint = vb.attrs(ino)?.map_or(0, |a| a.parent);
        let named = match (hint != 0).then_some(hint) {
            Some(dir) => match vb.entries(dir)?.into_iter().find(|d| d.ino == ino) {
                Some(d) => vb.dir_path(dir)?.map(|p| join(&p, &d.name)),
                None => None,
            },
            None => None,
        };
        match named {
            Some(p) => {
                found.insert(ino, p);
            }
            None => {
                files.insert(ino);
            }
        }
    }
    found.extend(vb.find_paths(&files)?);
    for &(ino, is_dir) in &modified {
        if !unnamed.contains(&ino) {
            continue;
        }
        let path = match dirs.get(&ino).or_else(|| found.get(&ino)) {
            Some(p) if p.is_empty() => b"/".to_vec(),
            Some(p) => p.clone(),
            // An inode no name reaches (an orphan when the snapshot was taken).
            None => continue,
        };
        out.push(Change {
            kind: Kind::Modified,
            path,
            to: None,
            ino,
            dir: is_dir,
        });
    }
    out.sort_by(|x, y| (&x.path, x.kind).cmp(&(&y.path, y.kind)));
    Ok(out)
}
