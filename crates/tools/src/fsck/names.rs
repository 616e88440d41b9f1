//! Namespace checks for fsck: every directory entry names an existing inode
//! of the type it says, no name appears twice in a directory, every inode is
//! reachable from the root, a directory has exactly one name and its
//! `parent` attribute names the directory holding it, and link counts match
//! (non-directories: one per entry; directories: 2 + subdirectories).
//! An unnamed inode with link count 0 is fine if the log's orphan list holds
//! it (a writable mount frees it); every listed orphan must be an existing,
//! unnamed inode with link count 0, and a listed directory (removed while
//! held open) must hold no entries.
//!
//! Works on what `scan` collected; reads nothing. The walk from the root is
//! iterative with a visited set, so cycles in a damaged namespace end.

use super::{Findings, Fix};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use tux3::backend::FIRST_INO;
use tux3::structures::inode::InodeAttrs;
use tux3::types::{FileType, ROOT_INO};

/// One directory entry as found in a directory leaf.
pub(super) struct Entry {
    pub dir: u64,
    /// Leaf block holding it (0: in memory only).
    pub leaf: u64,
    pub ino: u64,
    pub kind: FileType,
    pub name: Vec<u8>,
}

/// What the checks may rely on.
pub(super) struct Complete {
    /// Every inode-table node was read.
    pub itable: bool,
    /// Every directory tree was read.
    pub dirs: bool,
}

fn show(name: &[u8]) -> String {
    format!("{:?}", String::from_utf8_lossy(name))
}

fn kind_of(a: &InodeAttrs) -> Option<FileType> {
    FileType::from_mode(a.mode)
}

pub(super) fn check(
    inodes: &BTreeMap<u64, InodeAttrs>,
    orphans: &BTreeSet<u64>,
    entries: &[Entry],
    c: Complete,
    f: &mut Findings,
) {
    let is_dir = |ino: u64| {
        inodes
            .get(&ino)
            .is_some_and(|a| kind_of(a) == Some(FileType::Directory))
    };
    // Entries by target, subdirectory counts, duplicate names.
    let mut names_of: HashMap<u64, Vec<usize>> = HashMap::new();
    let mut subdirs: HashMap<u64, u64> = HashMap::new();
    let mut names: HashSet<(u64, &[u8])> = HashSet::new();
    for (i, e) in entries.iter().enumerate() {
        let at = format!(
            "directory {} (leaf block {}): entry {}",
            e.dir,
            e.leaf,
            show(&e.name)
        );
        if !names.insert((e.dir, &e.name)) {
            rebuild(f, entries, e.dir, format!("{at} appears more than once"));
        }
        let Some(target) = inodes.get(&e.ino) else {
            if c.itable {
                f.fixable(
                    "names",
                    super::Fix::DropEntry {
                        dir: e.dir,
                        name: e.name.clone(),
                    },
                    format!(
                        "{at} names inode {}, which does not exist (repair removes the entry)",
                        e.ino
                    ),
                );
            }
            continue;
        };
        let actual = kind_of(target);
        if actual != Some(e.kind) {
            let line = format!(
                "{at} is typed {:?}, but inode {} is {:?} (mode {:o})",
                e.kind, e.ino, actual, target.mode
            );
            rebuild(f, entries, e.dir, line);
        }
        names_of.entry(e.ino).or_default().push(i);
        if actual == Some(FileType::Directory) {
            *subdirs.entry(e.dir).or_default() += 1;
        }
    }

    // The root.
    match inodes.get(&ROOT_INO) {
        None if c.itable => f.problem("root", "inode 1 (the root directory) is missing".into()),
        Some(a) if kind_of(a) != Some(FileType::Directory) => f.problem(
            "root",
            format!("inode 1 (the root) is not a directory (mode {:o})", a.mode),
        ),
        Some(a) if a.parent != ROOT_INO => f.fixable(
            "root",
            super::Fix::Parent {
                ino: ROOT_INO,
                parent: ROOT_INO,
            },
            format!(
                "inode 1 (the root): parent attribute is {}, expected 1 (repair sets it)",
                a.parent
            ),
        ),
        _ => {}
    }

    // Xattr files: named by their owners' records, not by entries.
    let named: HashMap<u64, usize> = names_of.iter().map(|(&i, v)| (i, v.len())).collect();
    if c.itable {
        super::xattrs::check_refs(inodes, &named, f);
    }
    // Names per inode, parents, link counts.
    for (&ino, a) in inodes.iter().filter(|(_, a)| !super::xattrs::is_xattr_file(a)) {
        let list = names_of.get(&ino).map_or(&[][..], |v| v.as_slice());
        let where_ = |list: &[usize]| {
            let dirs: Vec<String> = list
                .iter()
                .take(8)
                .map(|&i| format!("{} in directory {}", show(&entries[i].name), entries[i].dir))
                .collect();
            dirs.join(", ")
        };
        if is_dir(ino) {
            if ino == ROOT_INO {
                if !list.is_empty() {
                    f.problem(
                        "names",
                        format!("inode 1 (the root) is named by entries: {}", where_(list)),
                    );
                }
            } else if list.len() > 1 {
                let line = format!(
                    "inode {ino}: directory reachable twice: named by {} entries: {}",
                    list.len(),
                    where_(list)
                );
                // Its parent's entry stays; the directories holding the
                // others are rebuilt without them.
                let strays: BTreeSet<u64> = list
                    .iter()
                    .map(|&i| entries[i].dir)
                    .filter(|&d| d != a.parent)
                    .collect();
                if strays.len() == list.len() {
                    f.problem("names", line);
                } else {
                    for d in strays {
                        rebuild(f, entries, d, line.clone());
                    }
                }
            } else if let Some(&i) = list.first() {
                if a.parent != entries[i].dir {
                    f.fixable(
                        "parent",
                        Fix::Parent {
                            ino,
                            parent: entries[i].dir,
                        },
                        format!(
                            "inode {ino}: directory's parent attribute is {}, but it is named \
                             in directory {} (repair sets it)",
                            a.parent, entries[i].dir
                        ),
                    );
                }
            }
            // A directory removed while held: an orphan, unnamed and empty.
            let orphan = orphans.contains(&ino) && list.is_empty() && a.nlink == 0;
            let want = 2 + subdirs.get(&ino).copied().unwrap_or(0);
            if orphan {
                let held = entries.iter().filter(|e| e.dir == ino).count();
                if held > 0 {
                    f.problem(
                        "orphan list",
                        format!("inode {ino}: directory on the orphan list holds {held} entries"),
                    );
                }
            } else if c.dirs && u64::from(a.nlink) != want {
                link_problem(f, ino, a.nlink, want);
            }
        } else if c.dirs && c.itable {
            let want = list.len() as u64;
            if orphans.contains(&ino) && want > 0 {
                f.problem(
                    "orphan list",
                    format!(
                        "inode {ino}: on the orphan list in the log, but named by {} entries: {}",
                        list.len(),
                        where_(list)
                    ),
                );
            }
            if want == 0 && a.nlink == 0 && orphans.contains(&ino) {
                // A listed orphan: noted by scan, freed at the next mount.
            } else if want == 0 {
                let line = format!(
                    "inode {ino} ({:?}, link count {}) is not named by any directory \
                     entry (orphan)",
                    kind_of(a),
                    a.nlink
                );
                reattach(f, ino, a, line);
            } else if u64::from(a.nlink) != want {
                link_problem(f, ino, a.nlink, want);
            }
        }
    }

    check_orphan_list(inodes, orphans, c.itable, f);

    // Reachability from the root, through directories only.
    if !(c.itable && c.dirs && is_dir(ROOT_INO)) {
        return;
    }
    let mut children: HashMap<u64, Vec<u64>> = HashMap::new();
    for e in entries {
        if is_dir(e.ino) {
            children.entry(e.dir).or_default().push(e.ino);
        }
    }
    let mut reached: HashSet<u64> = HashSet::from([ROOT_INO]);
    let mut queue = VecDeque::from([ROOT_INO]);
    while let Some(d) = queue.pop_front() {
        for &c in children.get(&d).map_or(&[][..], |v| v.as_slice()) {
            if reached.insert(c) {
                queue.push_back(c);
            }
        }
    }
    for &ino in inodes.keys() {
        let Some(list) = names_of.get(&ino) else {
            // Unnamed: reported above (orphan) or the root; a listed
            // orphan directory is checked above.
            let listed = orphans.contains(&ino) && inodes[&ino].nlink == 0;
            if is_dir(ino) && ino != ROOT_INO && !listed {
                let line = format!("inode {ino}: directory not named by any entry (unreachable)");
                reattach(f, ino, &inodes[&ino], line);
            }
            continue;
        };
        let ok = if is_dir(ino) {
            reached.contains(&ino)
        } else {
            list.iter().any(|&i| reached.contains(&entries[i].dir))
        };
        if !ok {
            f.problem(
                "orphan",
                format!(
                    "inode {ino} is not reachable from the root (only named in directories \
                     cut off from it: a cycle)"
                ),
            );
        }
    }
}

/// Every inode on the orphan list exists and has link count 0 (whether it
/// is unnamed, and a directory empty, is checked with the names above).
fn check_orphan_list(
    inodes: &BTreeMap<u64, InodeAttrs>,
    orphans: &BTreeSet<u64>,
    itable: bool,
    f: &mut Findings,
) {
    for &ino in orphans {
        let line = match inodes.get(&ino) {
            None if itable => "is not in the inode table".to_string(),
            None => continue,
            Some(a) if a.nlink != 0 => format!("has link count {}", a.nlink),
            Some(_) => continue,
        };
        f.problem(
            "orphan list",
            format!("inode {ino}: on the orphan list in the log, but it {line}"),
        );
    }
}

/// Rebuild directory `dir` with its entries (which the rebuild checks
/// against the inodes they name), unless a rebuild of it is recorded
/// already (from what could be read of its damaged tree).
fn rebuild(f: &mut Findings, entries: &[Entry], dir: u64, line: String) {
    let line = format!("{line} (repair rebuilds directory {dir})");
    if f.fixes
        .iter()
        .any(|(x, _)| matches!(x, Fix::RebuildDir { dir: d, .. } if *d == dir))
    {
        f.also("names", line);
        return;
    }
    let kept = entries
        .iter()
        .filter(|e| e.dir == dir)
        .map(|e| (e.name.clone(), e.ino))
        .collect();
    f.fixable("names", Fix::RebuildDir { dir, entries: kept }, line);
}

/// Name inode `ino`, which no entry names, in `/lost+found` (one with a
/// type; not a reserved number).
fn reattach(f: &mut Findings, ino: u64, a: &InodeAttrs, line: String) {
    if ino >= FIRST_INO && kind_of(a).is_some() {
        let line = format!("{line} (repair names it in /lost+found)");
        f.fixable("orphan", Fix::Reattach { ino }, line);
    } else {
        f.problem("orphan", line);
    }
}

fn link_problem(f: &mut Findings, ino: u64, have: u32, want: u64) {
    let line = format!("inode {ino}: link count is {have}, should be {want}");
    match u32::try_from(want) {
        Ok(n) if n > 0 => f.fixable("nlink", Fix::Nlink { ino, nlink: n }, line),
        _ => f.problem("nlink", line),
    }
}
