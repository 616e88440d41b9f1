//! What a send stream holds: the difference between a base snapshot (none
//! for a full stream: an empty volume) and the snapshot sent, worked out
//! in time that follows the change, and the namespace operations that
//! turn one tree into the other.
//!
//! **Which inodes changed.** The two inode tables are compared as `tux3
//! snapshot diff` compares them (`snapdiff::changed_entries`): nodes both
//! reach at the same address hold the same bytes (nothing is rewritten in
//! place) and are skipped, so an unchanged inode costs nothing. An inode
//! is the same in both when its number and type agree (a number freed and
//! given out again to a file of the same type is treated as that file
//! changed: its data is compared block by block like any other, which is
//! exact, since the base holds its blocks and they cannot have been
//! reused); a number whose type changed is a file gone and a file new. An
//! inode without links (an orphan: open when its last name went) is not
//! part of a snapshot's tree and is left out on both sides.
//!
//! **Namespace.** The replica mirrors the source's inode numbers, so every
//! operation names directories by number and no order of moves can lose
//! track of one. The changed directories' entries are compared the same
//! way, giving entries gone and entries new. Then, in five steps:
//!
//! 1. every entry gone is removed: an inode that stays (moved, or a
//!    directory that must survive its old name being reused) is renamed
//!    into a staging directory in the root under its number, unless it
//!    keeps a name it had (then the entry is unlinked); an inode that goes
//!    is unlinked, or if a directory, staged too;
//! 2. the staged directories that go (empty now: all their entries were
//!    gone) are removed;
//! 3. new inodes are created at one of their new entries, parents first
//!    (a queue of directories that exist), staged inodes are renamed to
//!    their new entry, and every other new entry is a link;
//! 4. the staging directory is removed.
//!
//! After step 1 no name the snapshot uses is held by anything else, so
//! renames over existing names, swaps (`RENAME_EXCHANGE`), moves across
//! parents and a directory replaced by a file (or the reverse) all come
//! out as plain moves to free names. The staging directory's name and
//! number are free in both snapshots.
//!
//! Calls the engine's structures (inode records, directory entries) and
//! `snapdiff`'s tree comparison.

use super::Record;
use crate::snapdiff::{changed_entries, View};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use tux3::device::Device;
use tux3::error::{Error, Result};
use tux3::structures::btree::{Tree, TreeKind};
use tux3::structures::dirent::Dirent;
use tux3::structures::inode::InodeAttrs;
use tux3::structures::superblock::Root;
use tux3::types::{FileType, ROOT_INO};

/// An inode whose contents the stream carries: its record in the base
/// (`None` unless it is the same file there) and in the snapshot.
pub struct Changed {
    pub ino: u64,
    pub base: Option<InodeAttrs>,
    pub snap: InodeAttrs,
}

/// A stream's plan.
pub struct Plan {
    /// Namespace records, in order.
    pub namespace: Vec<Record>,
    /// Inodes whose xattrs, data and attributes follow, by number.
    pub changed: Vec<Changed>,
    /// The root directory's record in the snapshot.
    pub root: InodeAttrs,
    /// Staging directory: number and name.
    pub staging: (u64, Vec<u8>),
}

/// An entry: directory, name, inode, whether a directory.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Entry {
    dir: u64,
    name: Vec<u8>,
    ino: u64,
    is_dir: bool,
}

/// An xattr file (sent as its owner's xattrs, never as an inode).
fn is_xattr_file(a: &InodeAttrs) -> bool {
    a.mode & libc::S_IFMT == tux3::structures::xattr_file::S_IFXATTR
}

fn is_dir(a: &InodeAttrs) -> bool {
    FileType::from_mode(a.mode) == Some(FileType::Directory)
}

/// A record as part of a snapshot's tree: an inode without links (an
/// orphan: open, and its last name or its directory removed) is not.
fn linked(a: Option<InodeAttrs>) -> Option<InodeAttrs> {
    a.filter(|a| a.nlink > 0)
}

/// Decode an inode-table value read by the comparison.
fn decode(dev: &dyn Device, ino: u64, v: &Option<Vec<u8>>) -> Result<Option<InodeAttrs>> {
    let bounds = tux3::structures::bounds(dev);
    let a = v
        .as_ref()
        .map(|v| InodeAttrs::decode(v, ino, 0, &bounds))
        .transpose()?;
    Ok(linked(a))
}

/// The last inode number of the table at `root`.
fn last_ino(dev: &dyn Device, root: Root) -> Result<u64> {
    let mut t = Tree::open(0, TreeKind::Itable, root);
    Ok(t.prev(dev, u64::MAX)?.map_or(0, |(k, _)| k))
}

/// The staging directory: a number past both inode tables, a name
/// neither root holds (`taken` says whether one does).
pub fn staging(
    dev: &dyn Device,
    base: Option<Root>,
    snap: Root,
    taken: &mut dyn FnMut(&[u8]) -> Result<bool>,
) -> Result<(u64, Vec<u8>)> {
    let mut name = b".tux3-receive".to_vec();
    let mut n = 0;
    while taken(&name)? {
        n += 1;
        name = format!(".tux3-receive-{n}").into_bytes();
    }
    let last = last_ino(dev, base.unwrap_or_default())?.max(last_ino(dev, snap)?);
    Ok((last.max(15) + 1, name))
}

/// Entries of directory `ino` that differ between roots `a` and `b`: (gone, new).
fn dir_changes(dev: &dyn Device, ino: u64, a: Root, b: Root) -> Result<(Vec<Entry>, Vec<Entry>)> {
    let (mut gone, mut new) = (Vec::new(), Vec::new());
    for (key, (va, vb)) in changed_entries(dev, ino, TreeKind::Dirents, a, b)? {
        for (v, out) in [(va, &mut gone), (vb, &mut new)] {
            if let Some(v) = v {
                let d = Dirent::decode(&v, key, 0)?;
                out.push(Entry {
                    dir: ino,
                    is_dir: d.kind == FileType::Directory,
                    name: d.name,
                    ino: d.ino,
                });
            }
        }
    }
    Ok((gone, new))
}

/// Plan the stream from the snapshot whose inode table is at `base`
/// (`None`: an empty volume) to the one at `snap`. `taken(name)` says
/// whether either snapshot's root holds `name`.
pub fn plan(
    dev: &dyn Device,
    base: Option<Root>,
    snap: Root,
    taken: &mut dyn FnMut(&[u8]) -> Result<bool>,
) -> Result<Plan> {
    let ra = base.unwrap_or_default();
    // Which inodes differ, and how.
    let mut sides: BTreeMap<u64, (Option<InodeAttrs>, Option<InodeAttrs>)> = BTreeMap::new();
    // Owners whose xattr file changed: their xattrs are compared whole.
    let mut xattr_owners = BTreeSet::new();
    for (ino, (va, vb)) in changed_entries(dev, 0, TreeKind::Itable, ra, snap)? {
        // A side that is an xattr file is no inode of the tree (a number
        // may be an xattr file on one side and a file on the other).
        let mut side = |v: &Option<Vec<u8>>| -> Result<Option<InodeAttrs>> {
            let x = decode(dev, ino, v)?;
            if let Some(x) = x.as_ref().filter(|x| is_xattr_file(x)) {
                xattr_owners.insert(x.parent);
                return Ok(None);
            }
            Ok(x)
        };
        let (a, b) = (side(&va)?, side(&vb)?);
        if a.is_some() || b.is_some() {
            sides.insert(ino, (a, b));
        }
    }
    let mut view_b = View::new(dev, snap);
    let root = view_b
        .attrs(ROOT_INO)?
        .ok_or_else(|| Error::corrupt(snap.addr, "the snapshot has no root directory"))?;
    if base.is_none() {
        // A full stream: the base is an empty root, the same directory.
        let empty = InodeAttrs {
            mode: root.mode,
            btime: root.btime,
            nlink: 2,
            ..InodeAttrs::default()
        };
        sides.insert(ROOT_INO, (Some(empty), Some(root.clone())));
    }
    let same = |a: &InodeAttrs, b: &InodeAttrs| FileType::from_mode(a.mode) == FileType::from_mode(b.mode);
    // An inode in the base that is the same file in the snapshot.
    let survives =
        |sides: &BTreeMap<u64, (Option<InodeAttrs>, Option<InodeAttrs>)>, ino: u64| match sides.get(&ino) {
            None => true,
            Some((Some(a), Some(b))) => same(a, b),
            Some(_) => false,
        };

    // Entries gone and new.
    let (mut gone, mut new) = (Vec::new(), Vec::new());
    for (&ino, (a, b)) in &sides {
        let root_of = |x: &Option<InodeAttrs>| {
            x.as_ref()
                .filter(|x| is_dir(x))
                .map_or(Root::default(), |x| x.root)
        };
        let (da, db) = (root_of(a), root_of(b));
        let pair = match (a, b) {
            (Some(a), Some(b)) if same(a, b) => vec![(da, db)],
            _ => vec![(da, Root::default()), (Root::default(), db)],
        };
        for (x, y) in pair {
            if x == y {
                continue;
            }
            let (g, n) = dir_changes(dev, ino, x, y)?;
            gone.extend(g);
            new.extend(n);
        }
    }
    // An entry both gone and new (its value moved within the tree only).
    let both: HashSet<Entry> = {
        let g: HashSet<&Entry> = gone.iter().collect();
        new.iter().filter(|e| g.contains(e)).cloned().collect()
    };
    gone.retain(|e| !both.contains(e));
    new.retain(|e| !both.contains(e));

    let (staging_ino, staging_name) = staging(dev, base, snap, taken)?;
    let stage = |ino: u64| ino.to_string().into_bytes();

    let mut new_count: HashMap<u64, u32> = HashMap::new();
    for e in &new {
        *new_count.entry(e.ino).or_default() += 1;
    }
    let mut ops = Vec::new();
    let mut staging_made = false;
    let make_staging = |ops: &mut Vec<Record>, made: &mut bool| {
        if !*made {
            *made = true;
            ops.push(Record::Create {
                parent: ROOT_INO,
                ino: staging_ino,
                mode: libc::S_IFDIR | 0o700,
                uid: 0,
                gid: 0,
                rdev: 0,
                btime: root.btime,
                name: staging_name.clone(),
                target: Vec::new(),
            });
        }
    };
    // Step 1: entries gone.
    let mut staged: BTreeSet<u64> = BTreeSet::new();
    let mut dead_dirs = Vec::new();
    let mut touched: BTreeSet<u64> = BTreeSet::new();
    for e in &gone {
        let stays = survives(&sides, e.ino);
        let keeps_a_name = !e.is_dir && stays && {
            let nlink = match sides.get(&e.ino) {
                Some((_, Some(b))) => b.nlink,
                _ => view_b.attrs(e.ino)?.map_or(0, |b| b.nlink),
            };
            nlink > new_count.get(&e.ino).copied().unwrap_or(0)
        };
        if stays {
            touched.insert(e.ino);
        }
        if (e.is_dir || (stays && !keeps_a_name)) && !staged.contains(&e.ino) {
            make_staging(&mut ops, &mut staging_made);
            ops.push(Record::Rename {
                parent: e.dir,
                newparent: staging_ino,
                ino: e.ino,
                is_dir: e.is_dir,
                name: e.name.clone(),
                newname: stage(e.ino),
            });
            staged.insert(e.ino);
            if !stays {
                dead_dirs.push(e.ino);
            }
        } else {
            ops.push(Record::Unlink {
                parent: e.dir,
                ino: e.ino,
                name: e.name.clone(),
            });
        }
    }
    // Step 2: directories that go, empty now.
    for ino in dead_dirs {
        staged.remove(&ino);
        ops.push(Record::Rmdir {
            parent: staging_ino,
            ino,
            name: stage(ino),
        });
    }
    // Step 3: new entries, parents first.
    let mut by_dir: BTreeMap<u64, Vec<Entry>> = BTreeMap::new();
    for e in new {
        by_dir.entry(e.dir).or_default().push(e);
    }
    let mut ready: VecDeque<u64> = by_dir.keys().copied().filter(|&d| survives(&sides, d)).collect();
    let mut created: HashSet<u64> = HashSet::new();
    let mut placed: HashSet<u64> = HashSet::new();
    while let Some(dir) = ready.pop_front() {
        for e in by_dir.remove(&dir).unwrap_or_default() {
            if !survives(&sides, e.ino) && !created.contains(&e.ino) {
                let Some((_, Some(b))) = sides.get(&e.ino) else {
                    return Err(Error::corrupt(
                        snap.addr,
                        format!("entry for inode {} not in the table", e.ino),
                    ));
                };
                ops.push(Record::Create {
                    parent: e.dir,
                    ino: e.ino,
                    mode: b.mode,
                    uid: b.uid,
                    gid: b.gid,
                    rdev: b.rdev,
                    btime: b.btime,
                    name: e.name.clone(),
                    // A symlink's target: the sender reads it.
                    target: Vec::new(),
                });
                created.insert(e.ino);
                if e.is_dir && by_dir.contains_key(&e.ino) {
                    ready.push_back(e.ino);
                }
            } else if staged.contains(&e.ino) && !placed.contains(&e.ino) {
                ops.push(Record::Rename {
                    parent: staging_ino,
                    newparent: e.dir,
                    ino: e.ino,
                    is_dir: e.is_dir,
                    name: stage(e.ino),
                    newname: e.name.clone(),
                });
                placed.insert(e.ino);
            } else {
                touched.insert(e.ino);
                ops.push(Record::Link {
                    ino: e.ino,
                    parent: e.dir,
                    name: e.name.clone(),
                });
            }
        }
    }
    if let Some((dir, _)) = by_dir.iter().next() {
        return Err(Error::corrupt(
            snap.addr,
            format!("directory {dir} has new entries but no name leads to it"),
        ));
    }
    // Step 4: what is still staged kept another name; then the staging
    // directory goes.
    for ino in staged.iter().filter(|i| !placed.contains(i)) {
        ops.push(Record::Unlink {
            parent: staging_ino,
            ino: *ino,
            name: stage(*ino),
        });
    }
    if staging_made {
        ops.push(Record::Rmdir {
            parent: ROOT_INO,
            ino: staging_ino,
            name: staging_name.clone(),
        });
    }

    // Contents: every inode of the snapshot that changed, and those the
    // namespace steps touched.
    let mut changed = Vec::new();
    let mut seen = HashSet::new();
    for (&ino, (a, b)) in &sides {
        if let Some(b) = b {
            let base = a.clone().filter(|a| same(a, b));
            changed.push(Changed {
                ino,
                base,
                snap: b.clone(),
            });
            seen.insert(ino);
        }
    }
    for ino in touched.into_iter().chain(xattr_owners) {
        if seen.insert(ino) {
            if let Some(b) = view_b.attrs(ino)? {
                changed.push(Changed {
                    ino,
                    base: Some(b.clone()),
                    snap: b,
                });
            }
        }
    }
    changed.sort_by_key(|c| c.ino);
    Ok(Plan {
        namespace: ops,
        changed,
        root,
        staging: (staging_ino, staging_name),
    })
}
