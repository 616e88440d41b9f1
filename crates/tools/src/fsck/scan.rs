//! One read-only fsck pass: both superblock copies, mount-time replay
//! (`Backend::open_checking`, which writes nothing and judges each leaf
//! map by its leaf), the log, the bitmap file and its
//! blocks, every inode-table node and inode record, every file's data map
//! (`files`: its tree with the replayed leaf changes applied as
//! `Volume::open` does, or the extents its record holds), extents and
//! directory entries; then the namespace (`names`) and block ownership
//! (`refs`) checks over what was collected, and the data blocks that failed
//! their checksums named by path (`datasums`), and the inode-table keys
//! and branch children out of place whose mending is known (`keyfix`,
//! `childfix`).
//!
//! Calls `backend::Backend` (open), `structures` decoders, and the sibling
//! modules `walk`, `logscan`, `files`, `names`, `refs`, `snapshots`,
//! `datasums`, `keyfix`, `childfix`.

use super::files::check_inode;
use super::names::{self, Complete, Entry};
use super::refs::{self, Owner, Ref};
use super::walk::walk;
use super::{logscan, Findings, Fix, Pass};
use std::collections::BTreeMap;
use std::sync::Arc;
use tux3::backend::{Backend, BITMAP_INO};
use tux3::device::Device;
use tux3::error::{Error, Result};
use tux3::structures::bitmap;
use tux3::structures::extent::{self, Extent};
use tux3::structures::inode::InodeAttrs;
use tux3::structures::superblock::Superblock;
use tux3::types::FileType;

/// Run one pass. Errors only when the image is not a usable volume at all
/// (no valid superblock, truncated, I/O failure); damage is reported.
pub(super) fn pass(dev: Arc<dyn Device>, opts: &super::FsckOptions) -> Result<Pass> {
    let progress = opts.progress;
    let mut f = Findings {
        data: opts.data.then(super::datasums::DataScan::default),
        ..Findings::default()
    };
    let sb = Superblock::load(dev.as_ref())?;
    check_copies(dev.as_ref(), &sb, &mut f);
    let opened = match Backend::open_checking(dev.clone(), true) {
        // A log record that fails validation: a repair replays the log
        // without it (what it carries is lost), or maps the leaf where its
        // block says it belongs, so the rest is checked as that replay
        // leaves the volume.
        Err(e @ Error::Corrupt { .. }) => match Backend::open_with(dev.clone(), true, None, true) {
            Ok((be, replays))
                if !be.skipped.is_empty() || !be.snaps.passed_over.is_empty() || !be.mended.is_empty() =>
            {
                let mounted = |(block, what): &(u64, String)| {
                    format!("block {block}: the volume cannot be mounted: {what}")
                };
                for (block, what) in &be.mended {
                    f.fixable("mount", Fix::SkipRecords, format!("block {block}: {what}"));
                }
                let lines = be.skipped.iter().map(mounted).collect();
                f.fixable_all(
                    "mount",
                    Fix::SkipRecords,
                    lines,
                    "repair replays the log without that record",
                );
                // Each line says what the repair does.
                for line in be.snaps.passed_over.iter().map(mounted) {
                    f.fixable("mount", Fix::SkipRecords, line);
                }
                Ok((be, replays))
            }
            _ => Err(e),
        },
        r => r,
    };
    let (mut be, replays) = match opened {
        Ok(x) => x,
        Err(e @ Error::Corrupt { .. }) => {
            f.error("mount", "the volume cannot be mounted", &e);
            return Ok(Pass {
                findings: f,
                inodes: 0,
                blocks_used: 0,
                unify_frees: 0,
                refs: Vec::new(),
                keyfixes: Vec::new(),
            });
        }
        Err(e) => return Err(e),
    };
    f.sum_table = Some(be.alloc.sums.handle());
    let dev = be.dev.clone();
    let dev = dev.as_ref();
    let mut refs: Vec<Ref> = vec![
        Ref {
            start: 0,
            count: 1,
            owner: Owner::Superblock(0),
        },
        Ref {
            start: 1,
            count: 1,
            owner: Owner::Superblock(1),
        },
    ];

    // The log since the last unify.
    let log = logscan::scan(dev, &be.sb, &|b| !be.alloc.is_used(b), &mut f)?;
    for lb in &log.blocks[..log.committed] {
        refs.push(Ref {
            start: lb.addr,
            count: 1,
            owner: Owner::Log { seq: lb.seq },
        });
    }
    refs.push(Ref {
        start: log.chain.tail.next,
        count: 1,
        owner: Owner::LogReserved,
    });

    let mut complete = check_bitmap(&mut be, &mut refs, &mut f);

    // The inode table.
    let mut inodes: BTreeMap<u64, InodeAttrs> = BTreeMap::new();
    let mut leaf_keys: Vec<Vec<u64>> = Vec::new();
    let itable_damaged;
    let itable_shape_bad;
    let walked = {
        let (itable, fr) = (be.itable.get_mut(), &mut f);
        let (mut bad, mut shape, mut sums_bad) = (Vec::new(), Vec::new(), Vec::new());
        let (mut undecodable, mut kept) = (Vec::new(), Vec::new());
        let w = walk(
            dev,
            itable,
            "inode table",
            &mut |leaf, entries| {
                leaf_keys.push(entries.iter().map(|e| e.0).collect());
                for (ino, v) in entries {
                    let bounds = tux3::structures::bounds(dev);
                    match InodeAttrs::decode(v, *ino, leaf, &bounds) {
                        Ok(a) => {
                            inodes.insert(*ino, a);
                        }
                        Err(e) => match super::datasums::without_sums(dev, v, *ino, leaf) {
                            // Only its checksums are wrong: checked
                            // without them, and repaired.
                            Some(a) => {
                                sums_bad.push((*ino, super::describe(&format!("inode {ino}"), &e)));
                                inodes.insert(*ino, a);
                            }
                            None => {
                                let line = super::describe(&format!("inode {ino}"), &e);
                                // A field that does not decode may be
                                // mended, the record kept (`records`),
                                // and checked as it will be. Else the
                                // root stays (without it nothing is
                                // named): without one attribute, it may
                                // decode, and the repair keeps the rest.
                                if let Some((record, how)) = super::records::mend(dev, v, *ino, leaf, &bounds)
                                {
                                    if let Ok(a) = InodeAttrs::decode(&record, *ino, leaf, &bounds) {
                                        inodes.insert(*ino, a);
                                    }
                                    kept.push((*ino, record, how, line));
                                } else if *ino == tux3::types::ROOT_INO {
                                    match root_without_one(v, *ino, leaf, &bounds) {
                                        Some((record, tag)) => {
                                            let how = format!(
                                                "repair drops its attribute of tag {tag} and keeps the rest"
                                            );
                                            kept.push((*ino, record, how, line))
                                        }
                                        None => bad.push(line),
                                    }
                                } else {
                                    undecodable.push((*ino, line));
                                }
                            }
                        },
                    }
                }
            },
            &mut |line| shape.push(line),
        );
        for line in bad {
            fr.problem("inode table", line);
        }
        for (ino, record, how, line) in kept {
            let line = format!("{line} ({how})");
            fr.fixable("inode table", Fix::Record { ino, record }, line);
        }
        // A leaf whose separator is out of step with its keys (a damaged
        // branch entry) gets its first key as separator.
        itable_shape_bad = !shape.is_empty() || !w.errors.is_empty();
        let resep: Vec<(u64, u64, u64)> = w.misplaced.iter().copied().filter(|m| m.0 != 0).collect();
        if resep.is_empty() {
            for line in shape {
                fr.problem("inode table", line);
            }
        } else {
            let fix = Fix::ItableSeps { seps: resep };
            fr.fixable_all(
                "inode table",
                fix,
                shape,
                "repair sets the leaf's separator to its first key",
            );
        }
        itable_damaged = !undecodable.is_empty();
        for (ino, line) in undecodable {
            let line = format!("{line} (repair takes the record out)");
            fr.fixable("inode table", super::Fix::DropRecord { ino }, line);
        }
        for (ino, line) in sums_bad {
            fr.fixable(
                "data sums",
                Fix::Sums { ino },
                format!("{line} (repair drops the checksums and computes them from the data on disk)"),
            );
        }
        w
    };
    for &(addr, level) in &walked.nodes {
        node_ref(&mut refs, addr, 0, level);
    }
    super::snapshots::retired_refs(be.itable.get_mut(), 0, &mut refs);
    let scrub_held = inodes
        .get(&tux3::structures::scrub_state::SCRUB_INO)
        .is_some_and(|a| a.scrub.is_some() || !a.damage.is_empty());
    super::scrub_state::check(&mut inodes, &mut f);
    let itable_ok = walked.complete();
    for e in &walked.errors {
        complete = false;
        let leaf = walked.undecoded.iter().find(|(addr, _, level)| {
            *level == 0 && matches!(e, Error::Corrupt { block, .. } if block == addr)
        });
        // Only the keys the leaf's place in its branch gives it: below the
        // next leaf's separator (a block holds stale entries past its count).
        let salvaged = leaf.map(|&(addr, sep, _)| {
            let mut next = walked.leaf_entries.iter().skip_while(|e| e.3 != addr).skip(1);
            let below = next.next().map_or(u64::MAX, |e| e.2);
            let mut records = super::salvage::itable_leaf(dev, addr, sep);
            records.retain(|(ino, _)| *ino < below);
            (sep, records)
        });
        let root = tux3::types::ROOT_INO;
        match salvaged {
            // A leaf that does not decode: replaced by the records it
            // holds; not the root's without the root's record (nothing
            // would be named).
            Some((sep, records)) if sep > root || records.iter().any(|(ino, _)| *ino == root) => {
                let line = super::describe("inode table node", e);
                let line = format!(
                    "{line} (repair replaces the leaf with the {} records it can read)",
                    records.len()
                );
                f.fixable("inode table", Fix::ItableLeaf { sep, records }, line);
            }
            _ => f.error("inode table", "inode table node", e),
        }
    }

    // Replayed changes of trees whose inode is gone.
    for (ino, r) in &replays {
        if itable_ok && !inodes.contains_key(ino) {
            for (sep, addr) in &r.ops {
                if let Some(a) = addr {
                    f.problem(
                        "log",
                        format!(
                            "block {a}: the log maps it as the leaf at {sep} of inode {ino}, \
                             which is not in the inode table"
                        ),
                    );
                }
            }
        }
    }

    // Every inode and its tree (a directory's whose mode lost its type,
    // read as one).
    super::records::retype_dirs(dev, &mut inodes, &mut f);
    let bar = progress.then(|| progress_bar(inodes.len() as u64));
    let mut entries: Vec<Entry> = Vec::new();
    let mut dirs_ok = itable_ok;
    let bs = be.bs as u64;
    for (&ino, a) in &inodes {
        if let Some(b) = &bar {
            b.inc(1);
        }
        let ok = check_inode(
            &be,
            ino,
            a,
            replays.get(&ino),
            bs,
            &mut refs,
            &mut entries,
            &mut f,
        );
        super::records::stray_rdev(ino, a, &mut f);
        super::records::symlink_map(ino, a, bs, &mut f);
        if !ok {
            complete = false;
            if FileType::from_mode(a.mode) == Some(FileType::Directory) {
                dirs_ok = false;
            }
        }
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }

    // Inode-table keys out of place whose inode can be told.
    let mut keyfixes = super::keyfix::gather(dev, &walked, leaf_keys, &inodes, &entries, scrub_held);
    for k in &keyfixes {
        f.also("inode table", k.line());
    }

    // Snapshots: the table owns its nodes and the dead list; what the
    // snapshots reference must be owned already.
    if !super::snapshots::table_refs(&mut be, &mut refs, &mut f) {
        complete = false;
    }
    if !be.snaps.records.is_empty() {
        // Roots of the live trees (a file whose record holds its extents
        // has none) that the log has not changed since the last unify: a
        // snapshot sharing one has been checked with it. One the log
        // changed was walked with the log's leaves, not the unified ones a
        // snapshot taken at that unify reads.
        let unchanged = |owner: u64| replays.get(&owner).is_none_or(|r| r.ops.is_empty());
        let mut seen: std::collections::HashSet<u64> = inodes
            .iter()
            .filter(|(ino, _)| unchanged(**ino))
            .map(|(_, a)| a.root.addr)
            // (A damaged record is a snapshot's damage too if it shares
            // the table: walk its copy, so the repair deletes it.)
            .chain((!be.itable_replayed && !itable_damaged).then_some(be.sb.itable.addr))
            .filter(|&addr| addr != 0)
            .collect();
        // Blocks a snapshot references that the repair puts on the dead
        // list are not leaks.
        let buried = super::snapshots::check_snapshots(&be, &refs, &mut seen, &mut f);
        refs.extend(buried);
    }

    super::datasums::report(&inodes, &entries, bs, &mut f);
    super::records::retype(&mut inodes, &entries, &mut f);
    names::check(
        &inodes,
        &be.orphans,
        &entries,
        Complete {
            itable: itable_ok,
            dirs: dirs_ok,
        },
        &mut f,
    );
    let alloc = &be.alloc;
    // Inode-table branch entries whose child went astray, and their leaves.
    let children = if itable_shape_bad {
        super::childfix::find(dev, &walked.leaf_entries, &refs, &|b| alloc.is_used(b))
    } else if itable_ok {
        let present =
            |k: u64| inodes.contains_key(&k) || (scrub_held && k == tux3::structures::scrub_state::SCRUB_INO);
        // Inodes wanted and missing: the root, or one an entry names. Only
        // then are the unreferenced blocks read for a lost leaf.
        let dangling: std::collections::HashSet<u64> =
            entries.iter().map(|e| e.ino).filter(|&k| !present(k)).collect();
        let root = tux3::types::ROOT_INO;
        let wanted = |k: u64| (k == root && !present(root)) || dangling.contains(&k);
        if dangling.is_empty() && present(root) {
            Vec::new()
        } else {
            super::childfix::lost(
                dev,
                &walked.leaf_entries,
                &refs,
                &|b| alloc.is_used(b),
                &present,
                &wanted,
            )
        }
    } else {
        Vec::new()
    };
    for k in &children {
        f.also("inode table", k.line());
    }
    keyfixes.extend(children);
    let shared = super::shared::check(&refs, &alloc.shared, complete, &mut f);
    super::datasums::check_table(&alloc.sums.read(), &|b| alloc.is_used(b), &mut f);
    refs::check(
        &refs,
        &shared,
        &|b| alloc.is_used(b),
        be.sb.block_count,
        complete,
        &mut f,
    );
    if complete {
        super::repoint::check(dev, &inodes, &refs, &|b| alloc.is_used(b), &mut f);
    }
    Ok(Pass {
        findings: f,
        inodes: inodes.len() as u64,
        blocks_used: alloc.blocks() - alloc.free(),
        unify_frees: refs
            .iter()
            .filter(|r| matches!(r.owner, Owner::Log { .. } | Owner::Retired { .. }))
            .map(|r| r.count)
            .sum(),
        refs,
        keyfixes,
    })
}

/// A bar on stderr, with the `progress` feature (the `tux3` command has it).
#[cfg(feature = "progress")]
fn progress_bar(total: u64) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::with_draw_target(Some(total), indicatif::ProgressDrawTarget::stderr());
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("fsck: {bar:40} {pos}/{len} inodes checked ({eta} left)")
    {
        bar.set_style(style);
    }
    bar
}

/// Without the `progress` feature, no bar.
#[cfg(not(feature = "progress"))]
fn progress_bar(_total: u64) -> NoBar {
    NoBar
}

#[cfg(not(feature = "progress"))]
struct NoBar;

#[cfg(not(feature = "progress"))]
impl NoBar {
    fn inc(&self, _: u64) {}
    fn finish_and_clear(&self) {}
}

fn node_ref(refs: &mut Vec<Ref>, addr: u64, tree: u64, level: u8) {
    if addr != 0 {
        refs.push(Ref {
            start: addr,
            count: 1,
            owner: Owner::Node { tree, level },
        });
    }
}

/// Both superblock copies: the one not in use must be valid too, describe
/// the same volume and sit in its home block.
fn check_copies(dev: &dyn Device, sb: &Superblock, f: &mut Findings) {
    if let Some(line) = super::superfind::head_out_of_step(dev, sb) {
        f.problem("superblock", line);
    }
    let mut buf = vec![0u8; dev.block_size() as usize];
    for copy in 0..2u64 {
        if let Err(e) = dev.read(copy, &mut buf) {
            f.problem("superblock", format!("block {copy}: superblock copy {copy}: {e}"));
            continue;
        }
        match Superblock::decode(&buf, copy) {
            Err(e) => f.fixable(
                "superblock",
                Fix::Superblock { copy },
                super::describe(&format!("superblock copy {copy} is unusable"), &e),
            ),
            Ok(other) => {
                if other.home() != copy {
                    f.problem(
                        "superblock",
                        format!(
                            "block {copy}: superblock copy {copy} has sequence {}, which \
                             belongs in copy {}",
                            other.seq,
                            other.home()
                        ),
                    );
                }
                // An older copy may still have the size from before a
                // resize that crashed before its second unify.
                let same = other.volume_id == sb.volume_id
                    && other.block_size == sb.block_size
                    && (other.block_count == sb.block_count || other.seq < sb.seq);
                if !same {
                    f.problem(
                        "superblock",
                        format!(
                            "block {copy}: superblock copy {copy} describes another volume \
                             (id {:#x}, {} blocks of {} bytes; in use: id {:#x}, {} of {})",
                            other.volume_id,
                            other.block_count,
                            other.block_size,
                            sb.volume_id,
                            sb.block_count,
                            sb.block_size
                        ),
                    );
                }
            }
        }
    }
}

/// The bitmap file: its extent tree, that it maps exactly its blocks (or,
/// sparse, none past them), and every bitmap block. Returns whether everything could be read.
fn check_bitmap(be: &mut Backend, refs: &mut Vec<Ref>, f: &mut Findings) -> bool {
    let dev = be.dev.clone();
    let dev = dev.as_ref();
    let nb = be.sb.bitmap_blocks;
    let mut extents: Vec<Extent> = Vec::new();
    let (mut lines, mut shape) = (Vec::new(), Vec::new());
    let w = walk(
        dev,
        &mut be.bitmap,
        "bitmap file",
        &mut |leaf, entries| {
            for (k, v) in entries {
                match extent::decode(*k, v, leaf, &tux3::structures::bounds(dev)) {
                    Ok(e) => extents.push(e),
                    Err(e) => lines.push(super::describe("bitmap file extent", &e)),
                }
            }
        },
        &mut |line| shape.push(line),
    );
    for line in lines.into_iter().chain(shape) {
        f.problem("bitmap", line);
    }
    for &(addr, level) in &w.nodes {
        node_ref(refs, addr, BITMAP_INO, level);
    }
    if !w.complete() {
        for e in &w.errors {
            f.error("bitmap", "bitmap file node", e);
        }
        return false;
    }
    let mut ok = true;
    let mut next = 0u64;
    let mut buf = vec![0u8; be.bs];
    for e in &extents {
        if e.lblock < next {
            f.problem(
                "bitmap",
                format!(
                    "block {}: bitmap file extent at {} overlaps the previous one",
                    e.pblock, e.lblock
                ),
            );
        }
        if e.lblock.saturating_add(e.count) > nb {
            f.problem(
                "bitmap",
                format!(
                    "block {}: bitmap file maps logical blocks {}+{} beyond its {nb} blocks",
                    e.pblock, e.lblock, e.count
                ),
            );
        }
        let count = e.count.min(nb.saturating_sub(e.lblock));
        refs.push(Ref {
            start: e.pblock,
            count: e.count,
            owner: Owner::BitmapBlock(e.lblock),
        });
        for i in 0..count {
            let (index, addr) = (e.lblock + i, e.pblock.saturating_add(i));
            if addr >= be.sb.block_count || dev.read(addr, &mut buf).is_err() {
                ok = false;
                continue;
            }
            if let Err(err) = bitmap::decode(&buf, addr, index) {
                f.error("bitmap", &format!("bitmap block {index}"), &err);
                ok = false;
            }
        }
        next = next.max(e.lblock.saturating_add(e.count));
    }
    // A sparse bitmap leaves out blocks whose bits are all clear.
    if next < nb && !be.sb.sparse_bitmap {
        f.problem(
            "bitmap",
            format!(
                "block {}: bitmap file ends at block {next}, the volume needs {nb}",
                be.sb.bitmap.addr
            ),
        );
        ok = false;
    }
    ok
}

/// The root's record `raw` without the one attribute whose removal leaves
/// a record that decodes as a directory, and that attribute's tag.
fn root_without_one(raw: &[u8], ino: u64, leaf: u64, bounds: &tux3::codec::Bounds) -> Option<(Vec<u8>, u8)> {
    (0..raw.len())
        .map_while(|k| tux3::structures::inode::without_attr(raw, k))
        .find(|(r, _)| {
            InodeAttrs::decode(r, ino, leaf, bounds).is_ok_and(|a| a.mode & libc::S_IFMT == libc::S_IFDIR)
        })
}
