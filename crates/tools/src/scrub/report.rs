//! What a scrub found, as people read it: each damaged file once, by
//! every path that names it (the live volume's names; "inode N" when none
//! does), with the snapshots holding its damaged blocks; each damaged
//! metadata block by structure ("inode table leaf, block N", "extent leaf
//! of inode 17 (/a/b), block N", "bitmap block 3 at block N", "log block
//! N"); and the tree nodes that did not even load. A damaged block a
//! repair recorded (the known-damage list) is counted as such.
//!
//! Calls the API (`Fs::paths_of`) and the plan.

use super::plan::{Item, Plan, What};
use super::read::Bad;
use std::collections::BTreeMap;
use tux3::structures::btree::TreeKind;
use tux3::structures::scrub_state::ScrubState;
use tux3::Fs;

/// One damaged file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Damage {
    pub ino: u64,
    pub paths: Vec<String>,
    /// (logical block, device block) of each damaged block.
    pub blocks: Vec<(u64, u64)>,
    /// Snapshots holding any of them.
    pub snapshots: Vec<String>,
    /// Whether the live volume holds any of them (else only snapshots do).
    pub live: bool,
    /// How many of them a repair recorded as known damage (FORMAT.md 16.1).
    pub known: usize,
}

/// A scrub's findings.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub files: Vec<Damage>,
    /// One line per damaged metadata block: structure, block, why.
    pub metadata: Vec<(u64, String)>,
    /// Tree nodes whose blocks read clean but did not decode.
    pub unwalked: Vec<String>,
    /// The state saved at the end.
    pub state: ScrubState,
}

impl Report {
    pub fn data_blocks(&self) -> u64 {
        self.files.iter().map(|f| f.blocks.len() as u64).sum()
    }

    pub fn meta_blocks(&self) -> u64 {
        (self.metadata.len() + self.unwalked.len()) as u64
    }

    pub fn is_clean(&self) -> bool {
        self.files.is_empty() && self.metadata.is_empty() && self.unwalked.is_empty()
    }

    /// The findings, one per line.
    pub fn lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        for f in &self.files {
            let names = if f.paths.is_empty() {
                format!("inode {}", f.ino)
            } else {
                f.paths.join(", ")
            };
            let blocks: Vec<String> = f.blocks.iter().map(|(l, p)| format!("{l}@{p}")).collect();
            let mut line = format!(
                "damaged file: {names} (inode {}), blocks (file@device) {}",
                f.ino,
                blocks.join(" ")
            );
            if !f.snapshots.is_empty() {
                line.push_str(&format!("; held by snapshots {}", f.snapshots.join(", ")));
            }
            if !f.live {
                line.push_str("; only in snapshots");
            }
            if f.known > 0 {
                line.push_str(&format!(
                    "; {} of them known damage, recorded by fsck --repair",
                    f.known
                ));
            }
            out.push(line);
        }
        for (_, m) in &self.metadata {
            out.push(format!("damaged metadata: {m}"));
        }
        for u in &self.unwalked {
            out.push(format!("damaged metadata (does not decode): {u}"));
        }
        out
    }
}

/// The report of the confirmed bad blocks.
pub fn build(fs: &Fs, plan: &Plan, bad: &[(Item, Bad)]) -> Report {
    let mut files: BTreeMap<u64, Damage> = BTreeMap::new();
    let mut paths: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    let mut path_of = |ino: u64| -> Vec<String> {
        paths
            .entry(ino)
            .or_insert_with(|| {
                fs.paths_of(ino)
                    .iter()
                    .map(|p| String::from_utf8_lossy(p).into_owned())
                    .collect()
            })
            .clone()
    };
    let mut r = Report::default();
    let known = fs.known_damage().unwrap_or_default();
    let is_known = |it: &Item, block: u64| {
        it.sum_at(block)
            .is_some_and(|want| known.iter().any(|d| d.block == block && d.expected == want))
    };
    for (it, b) in bad {
        match &it.what {
            What::Data {
                ino, lblock, birth, ..
            } => {
                let d = files.entry(*ino).or_insert_with(|| Damage {
                    ino: *ino,
                    ..Damage::default()
                });
                d.blocks
                    .push((lblock.saturating_add(b.block - it.start), b.block));
                d.known += usize::from(is_known(it, b.block));
                for s in plan.holders(b.block, *birth) {
                    let s = String::from_utf8_lossy(&s).into_owned();
                    if !d.snapshots.contains(&s) {
                        d.snapshots.push(s);
                    }
                }
                d.live |= plan.is_live(b.block);
                // Every other file that maps the block (a clone) is damaged too.
                for &(s, c, other, l) in &plan.sharers {
                    if s <= b.block && b.block < s.saturating_add(c) && other != *ino {
                        let d = files.entry(other).or_insert_with(|| Damage {
                            ino: other,
                            ..Damage::default()
                        });
                        let at = (l.saturating_add(b.block - s), b.block);
                        if !d.blocks.contains(&at) {
                            d.blocks.push(at);
                        }
                        d.live |= plan.is_live(b.block);
                    }
                }
            }
            w => {
                let what = structure(w, b.block, &mut path_of);
                r.metadata.push((b.block, format!("{what}: {}", b.why)));
            }
        }
    }
    for d in files.values_mut() {
        d.paths = path_of(d.ino);
    }
    r.files = files.into_values().collect();
    let reported: Vec<u64> = r.metadata.iter().map(|m| m.0).collect();
    r.unwalked = plan
        .unwalked
        .iter()
        .filter(|(b, _)| !reported.contains(b))
        .map(|(_, w)| w.clone())
        .collect();
    r
}

/// "inode table leaf, block N" and the like.
fn structure(w: &What, block: u64, path_of: &mut dyn FnMut(u64) -> Vec<String>) -> String {
    match w {
        What::Superblock => format!("superblock copy {block}, block {block}"),
        What::Log => format!("log block {block}"),
        What::Bitmap { index } => format!("bitmap block {index} at block {block}"),
        What::Node { tree, kind, level } => {
            let node = match level {
                Some(0) => "leaf",
                Some(_) => "branch",
                None => "node",
            };
            let owner = match (tree, kind) {
                (0, _) => "inode table".to_string(),
                (2, _) => "bitmap file".to_string(),
                (3, TreeKind::Snapshots) => "snapshot table".to_string(),
                (ino, k) => {
                    let what = if *k == TreeKind::Dirents {
                        "directory"
                    } else {
                        "extent"
                    };
                    let p = path_of(*ino);
                    if p.is_empty() {
                        format!("{what} {node} of inode {ino}")
                    } else {
                        format!("{what} {node} of inode {ino} ({})", p.join(", "))
                    }
                }
            };
            if owner.contains(node) {
                format!("{owner}, block {block}")
            } else {
                format!("{owner} {node}, block {block}")
            }
        }
        What::Data { ino, .. } => format!("data of inode {ino}, block {block}"),
    }
}
