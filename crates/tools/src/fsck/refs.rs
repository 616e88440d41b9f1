//! Block ownership for fsck: every referenced block range with its owner,
//! and the checks over them — ranges inside the volume, no block claimed
//! twice, every referenced block marked in use in the (replayed) bitmap,
//! and no block in use that nothing references (a leak).
//!
//! Calls nothing in the engine: the caller passes the bitmap as `is_used`.

use super::{Findings, Fix};
use std::fmt;

/// Who references a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Owner {
    /// Superblock copy 0 or 1.
    Superblock(u64),
    /// Bitmap block with this index in the bitmap file.
    BitmapBlock(u64),
    /// A node of tree `tree` (0: inode table, 2: bitmap file, else inode).
    Node { tree: u64, level: u8 },
    /// File data of inode `ino` from logical block `lblock`.
    Data { ino: u64, lblock: u64 },
    /// A committed log block since the last unify.
    Log { seq: u64 },
    /// The block reserved for the next log block.
    LogReserved,
    /// Freed by the live volume, held by a snapshot (the dead list).
    Dead { birth: u32 },
    /// A node of tree `tree` that the last unify's image still holds but
    /// the log took out of the tree (a snapshot-table node emptied by
    /// reclaim, an inode-table branch left without children), or a node of
    /// a snapshot table left empty: the next unify frees it.
    Retired { tree: u64 },
}

impl Owner {
    /// Metadata (everything but file data and the still empty reserved log block).
    pub fn is_metadata(&self) -> bool {
        !matches!(self, Owner::Data { .. } | Owner::LogReserved)
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Owner::Superblock(c) => write!(f, "superblock copy {c}"),
            Owner::BitmapBlock(i) => write!(f, "bitmap block {i}"),
            Owner::Node { tree, level } => {
                let node = if level == 0 { "leaf" } else { "branch" };
                match tree {
                    0 => write!(f, "inode table {node}"),
                    tux3::backend::BITMAP_INO => write!(f, "bitmap file extent {node}"),
                    tux3::backend::snapshot::SNAP_INO => write!(f, "snapshot table {node}"),
                    ino => write!(f, "{node} of the tree of inode {ino}"),
                }
            }
            Owner::Data { ino, lblock } => {
                write!(f, "data of inode {ino} from logical block {lblock}")
            }
            Owner::Log { seq } => write!(f, "log block seq {seq}"),
            Owner::LogReserved => write!(f, "the reserved next log block"),
            Owner::Dead { birth } => write!(f, "the dead list (born in generation {birth})"),
            Owner::Retired { tree } => {
                let what = match tree {
                    0 => "inode table".to_string(),
                    tux3::backend::snapshot::SNAP_INO => "snapshot table".to_string(),
                    ino => format!("tree of inode {ino}"),
                };
                write!(f, "a node of the {what} the next unify frees")
            }
        }
    }
}

/// `count` blocks from `start`, owned by `owner`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ref {
    pub start: u64,
    pub count: u64,
    pub owner: Owner,
}

impl Ref {
    fn end(&self) -> u64 {
        self.start.saturating_add(self.count)
    }
}

/// "block N (1 block)" or "blocks N-M (K blocks)": every range with its length.
fn span(start: u64, count: u64) -> String {
    if count == 1 {
        format!("block {start} (1 block)")
    } else {
        format!(
            "blocks {start}-{} ({count} blocks)",
            start.saturating_add(count.saturating_sub(1))
        )
    }
}

/// Run every ownership check. `leaks` is false when some structure could
/// not be read completely (its blocks would look leaked).
/// `shared`: ranges (start, end, sorted) the shared-extent table counts,
/// where file data may be claimed more than once (`shared.rs` checks the
/// counts).
pub(super) fn check(
    refs: &[Ref],
    shared: &[(u64, u64)],
    is_used: &dyn Fn(u64) -> bool,
    block_count: u64,
    leaks: bool,
    f: &mut Findings,
) {
    // Inside the volume; clip what is not.
    let mut inside: Vec<Ref> = Vec::with_capacity(refs.len());
    for r in refs {
        if r.count == 0 {
            continue;
        }
        if r.end() > block_count || r.start.checked_add(r.count).is_none() {
            f.problem(
                "outside",
                format!(
                    "{}: {} lies outside the volume ({block_count} blocks)",
                    span(r.start, r.count),
                    r.owner
                ),
            );
        }
        if r.start < block_count {
            let end = r.end().min(block_count);
            inside.push(Ref {
                count: end - r.start,
                ..*r
            });
        }
    }
    inside.sort_by_key(|r| (r.start, r.count));

    // Claimed twice: every range with its length.
    let mut overlapped: Vec<(u64, u64)> = Vec::new();
    let mut widest: Option<Ref> = None;
    for r in &inside {
        if let Some(w) = widest {
            let end = r.end().min(w.end());
            let both_data = matches!(r.owner, Owner::Data { .. }) && matches!(w.owner, Owner::Data { .. });
            let counted = || {
                let i = shared.partition_point(|s| s.1 <= r.start);
                shared.get(i).is_some_and(|s| s.0 <= r.start && end <= s.1)
            };
            if r.start < w.end() && !(both_data && counted()) {
                overlapped.push((r.start, end));
                f.twice.add(end - r.start);
                f.problem(
                    "overlap",
                    format!(
                        "{}: claimed twice: by {} (at block {}) and by {}",
                        span(r.start, end - r.start),
                        w.owner,
                        w.start,
                        r.owner
                    ),
                );
            }
        }
        if widest.is_none_or(|w| r.end() > w.end()) {
            widest = Some(*r);
        }
    }

    // Referenced but marked free.
    for r in &inside {
        let mut b = r.start;
        while b < r.end() {
            if is_used(b) {
                b += 1;
                continue;
            }
            let s = b;
            while b < r.end() && !is_used(b) {
                b += 1;
            }
            let line = format!(
                "{}: referenced by {} but marked free in the bitmap",
                span(s, b - s),
                r.owner
            );
            let shared = overlapped.iter().any(|&(os, oe)| os < b && s < oe);
            if shared {
                f.problem("marked free", line);
            } else {
                f.fixable(
                    "marked free",
                    Fix::MarkUsed {
                        start: s,
                        count: b - s,
                    },
                    line,
                );
            }
        }
    }

    // In use but referenced by nothing.
    if !leaks {
        return;
    }
    let mut covered_to = 0u64;
    let mut gaps: Vec<(u64, u64)> = Vec::new();
    for r in &inside {
        if r.start > covered_to {
            gaps.push((covered_to, r.start));
        }
        covered_to = covered_to.max(r.end());
    }
    if covered_to < block_count {
        gaps.push((covered_to, block_count));
    }
    for (gs, ge) in gaps {
        let mut b = gs;
        while b < ge {
            if !is_used(b) {
                b += 1;
                continue;
            }
            let s = b;
            while b < ge && is_used(b) {
                b += 1;
            }
            f.leaked.add(b - s);
            f.fixable(
                "leak",
                Fix::Free {
                    start: s,
                    count: b - s,
                },
                format!(
                    "{}: marked in use but referenced by nothing (leaked)",
                    span(s, b - s)
                ),
            );
        }
    }
}
