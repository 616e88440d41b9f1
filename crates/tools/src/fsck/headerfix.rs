//! `fsck --repair` of a tree node whose header alone is damaged (owner,
//! tree kind, level or entry count), or a branch entry (a child outside
//! the volume, a separator out of order), or a bitmap block whose index
//! alone is wrong (from the mount's error only), or the bitmap file's map
//! (`bitmapmap`, which it calls first): the mount's error, or the check's
//! line, names the node and what its parent expects; the node is mended
//! (`btree::mend`) and written back in place before the repair mounts —
//! first those that stop the mount, as often as the next one needs it,
//! then those the check named. What the check names may be a pointer gone
//! astray rather than a damaged header (another file's node, a depth
//! wrong in a record): from its lines only the tree kind, the entry count,
//! the owner of the inode table's and the snapshot table's nodes (one
//! tree each of that kind) and the level of the live inode table's (whose
//! depth the superblock gives; a snapshot's is its record's) are mended.
//!
//! Calls `frontend::Volume::open` (read-only, as a repair opens), the
//! node mender and the device.

use std::sync::Arc;
use tux3::device::Device;
use tux3::error::{Error, Result};
use tux3::frontend::Volume;
use tux3::structures::bitmap;
use tux3::structures::btree::mend::{mend_branch, mend_header, Mended};
use tux3::structures::btree::TreeKind;
use tux3::types::OpenOptions;

/// Most nodes mended before the mount is tried as it is.
const MAX_NODES: usize = 8;

/// Mend the nodes whose header stops the mount, then those `problems`
/// name ("block N: ..."); one line per node mended.
pub(super) fn mend(dev: &Arc<dyn Device>, problems: &[String]) -> Result<Vec<String>> {
    let mut done = Vec::new();
    // A superblock copy out of step may have mounted an older image,
    // whose pointers lead to blocks reused since: nothing is mended.
    if problems.iter().any(|l| l.contains(": superblock copy ")) {
        return Ok(done);
    }
    let opts = OpenOptions {
        read_only: true,
        repair: true,
        ..OpenOptions::default()
    };
    for _ in 0..MAX_NODES {
        let (block, what) = match Volume::open(dev.clone(), opts.clone()) {
            Ok(v) => {
                v.close()?;
                break;
            }
            Err(Error::Corrupt { block, what }) => (block, what),
            Err(_) => break,
        };
        if block < 2 || block >= dev.block_count() {
            break;
        }
        // An extent of the bitmap file's map that does not hold: the map
        // is rebuilt from the bitmap blocks (`bitmapmap`).
        if let Some(how) = super::bitmapmap::rebuild(dev)? {
            done.push(format!(
                "block {block}: the volume cannot be mounted: {what} ({how})"
            ));
            continue;
        }
        let how = match mend_one(dev, block, &what, |_| true)? {
            Some(how) => how,
            None => match mend_bitmap(dev, block, &what)? {
                Some(how) => how,
                None => break,
            },
        };
        done.push(format!(
            "block {block}: the volume cannot be mounted: {what} ({how})"
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    for line in problems {
        let Some(block) = line
            .strip_prefix("block ")
            .and_then(|l| l.split(':').next())
            .and_then(|n| n.parse::<u64>().ok())
        else {
            continue;
        };
        if block >= 2 && block < dev.block_count() && seen.insert(block) {
            // The live table's walk, not a snapshot's (whose depth is its
            // record's, which may be the damaged field).
            let live_table = !line.contains(": snapshot ");
            let trusted = |m: &Mended| match m.field {
                "tree kind" | "entry count" | "branch entry" => true,
                "owner" => matches!(m.kind, TreeKind::Itable | TreeKind::Snapshots),
                // The inode table's depth is the superblock's, checked
                // first; a node of it mended to another level must then
                // decode whole as what its parent expects.
                "level" => m.kind == TreeKind::Itable && live_table,
                _ => false,
            };
            if let Some(how) = mend_one(dev, block, line, trusted)? {
                done.push(format!("{line} ({how})"));
            }
        }
    }
    Ok(done)
}

/// Mend node `block` refused with `what`, and write it back if `keep`
/// accepts the change.
fn mend_one(
    dev: &Arc<dyn Device>,
    block: u64,
    what: &str,
    keep: impl Fn(&Mended) -> bool,
) -> Result<Option<String>> {
    let mut buf = vec![0u8; dev.block_size() as usize];
    dev.read(block, &mut buf)?;
    let mut mended = mend_header(&mut buf, block, what, dev.block_count()).filter(|m| keep(m));
    if mended.is_none() {
        dev.read(block, &mut buf)?;
        mended = mend_branch(dev.as_ref(), &mut buf, block, what).filter(|m| keep(m));
    }
    let Some(m) = mended else {
        return Ok(None);
    };
    let how = m.how;
    dev.write(block, &buf)?;
    dev.flush()?;
    Ok(Some(format!("repair mended the node: {how}")))
}

/// Mend bitmap block `block`, whose index the bitmap file refused with
/// `what`, and write it back.
fn mend_bitmap(dev: &Arc<dyn Device>, block: u64, what: &str) -> Result<Option<String>> {
    let mut buf = vec![0u8; dev.block_size() as usize];
    dev.read(block, &mut buf)?;
    let Some(how) = bitmap::mend_index(&mut buf, block, what) else {
        return Ok(None);
    };
    dev.write(block, &buf)?;
    dev.flush()?;
    Ok(Some(format!("repair mended the block: {how}")))
}
