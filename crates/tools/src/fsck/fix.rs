//! `fsck --repair`: applies the repairs a read-only pass found safe, through
//! the engine — mount read-write for a repair (replaying the log;
//! `OpenOptions::repair` passes over inode records and snapshot-table
//! entries that do not decode, for the repair to replace), call the
//! `Volume::repair_*` hooks (`crates/engine/src/frontend/repair.rs`), unify
//! so every change and a fresh superblock land together, and close. Nothing is written if
//! the volume does not mount.
//!
//! Calls `frontend::Volume` only.

use super::Fix;
use std::sync::Arc;
use tux3::device::Device;
use tux3::error::Result;
use tux3::frontend::Volume;
use tux3::types::OpenOptions;

/// Apply `fixes`; returns the problem lines repaired.
pub(super) fn apply(dev: Arc<dyn Device>, fixes: &[(Fix, String)]) -> Result<Vec<String>> {
    let opts = OpenOptions {
        repair: true,
        ..OpenOptions::default()
    };
    let mut v = Volume::open(dev, opts)?;
    let mut done = Vec::new();
    // Damaged directories are rebuilt first, then records and entries
    // go (nothing after may load them), then unnamed inodes are named.
    let order = |f: &Fix| match f {
        Fix::ItableLeaf { .. } | Fix::ItableSeps { .. } | Fix::Record { .. } => 0,
        Fix::RebuildDir { .. } => 1,
        Fix::DropRecord { .. } | Fix::DropEntry { .. } => 2,
        Fix::Reattach { .. } => 3,
        _ => 4,
    };
    let mut fixes: Vec<&(Fix, String)> = fixes.iter().collect();
    fixes.sort_by_key(|(f, _)| order(f));
    for (fix, line) in fixes {
        match *fix {
            Fix::DropRecord { ino } => v.repair_drop_record(ino)?,
            Fix::Record { ino, ref record } => v.repair_record(ino, record.clone())?,
            Fix::ItableLeaf { sep, ref records } => v.repair_itable_leaf(sep, records)?,
            Fix::ItableSeps { ref seps } => {
                for &(addr, sep, first) in seps {
                    v.repair_itable_sep(addr, sep, first)?;
                }
            }
            Fix::RebuildDir { dir, ref entries } => v.repair_rebuild_dir(dir, entries)?,
            // A rebuilt directory may have left the entry out already.
            Fix::DropEntry { dir, ref name } => match v.repair_drop_entry(dir, name) {
                Err(e) if e.errno() == tux3::Errno::ENOENT => {}
                r => r?,
            },
            Fix::Reattach { ino } => v.repair_reattach(ino)?,
            Fix::Parent { ino, parent } => v.repair_parent(ino, parent)?,
            // Several problems may name one snapshot: the first deletes it.
            Fix::DeleteSnapshot { ref name } => match v.snapshot_delete(name) {
                Err(e) if e.errno() == tux3::Errno::ENOENT => {}
                r => r?,
            },
            Fix::Nlink { ino, nlink } => v.repair_nlink(ino, nlink)?,
            Fix::Blocks { ino, blocks } => v.repair_blocks(ino, blocks)?,
            Fix::Free { start, count } => v.repair_free(start, count)?,
            Fix::SharedRefs { start, count, refs } => v.repair_shared(start, count, refs)?,
            Fix::DropSums { start, count } => v.repair_drop_sums(start, count)?,
            Fix::Bury { start, count, birth } => v.repair_bury(start, count, birth)?,
            Fix::Unbury { start } => v.repair_unbury(start)?,
            Fix::MarkUsed { start, count } => v.repair_mark_used(start, count)?,
            Fix::XattrFile { owner, xf } => v.repair_xattr_file(owner, xf)?,
            // Every extent of the inode at once: a second line finds none left.
            Fix::Sums { ino } => {
                v.repair_sums(ino)?;
            }
            // The unify below writes the copy not in use: the damaged one.
            Fix::Superblock { .. } => {}
            // Every such extent of the inode at once.
            Fix::TrimPastEnd { ino } => {
                v.repair_trim(ino)?;
            }
            Fix::KnownDamage { ref list } => v.set_known_damage(list)?,
            Fix::ScrubRecord => v.repair_scrub_inode()?,
            // The open above replayed the log without the bad records.
            Fix::SkipRecords => {}
        }
        done.push(line.clone());
    }
    v.unify()?;
    v.close()?;
    Ok(done)
}
