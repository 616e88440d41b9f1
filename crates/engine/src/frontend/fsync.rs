//! Frontend layer: fast fsync — commit one inode's changes ahead of the open
//! delta, as an fsync commit in the log — its record (inode image), its dirty
//! data inline in the log blocks, and the closure of its pending name changes
//! (below) — with a single flush. The open delta keeps the same changes; its
//! full commit later supersedes the fsync commit (replay skips fsync commits
//! that a full commit follows).
//!
//! The closure ([`Volume::closure`]): the fsynced inode brings its pending
//! directory positions (`names.rs`), each position the inodes its new and its
//! removed durable entry name (and a new entry the removed durable entries
//! under its name hash), and so on. Each live inode in it is logged whole
//! (image, pages not yet logged, `Orphan` if it is one); each inode freed in
//! the open delta as its image with link count 0 plus `Orphan`, so the next
//! mount frees it; each position as `DirentSet` or `DirentRemove`; each
//! directory as its image. Replay then finds names and link counts that
//! agree, and a rename lands whole. The fast path needs every other inode of
//! the closure to be a regular file or symlink without pending extent-tree
//! changes, at most [`INLINE_PAGES`] pages each to log, at most
//! [`CLOSURE_MAX`] inodes reached through name changes, and every directory
//! involved either durable where it is or made in the open delta (then logged
//! as its image and new entry); a directory whose link count changed brings
//! its entries that name directories. Anything else (a directory moved or
//! removed) falls back to a full delta commit, which is always correct.
//!
//! An fsync commit may also go ahead of a delta commit in flight, while that
//! commit writes its data (before its log is encoded, `Volume::encode_log`),
//! when the delta in flight holds no change to the inodes of the closure (nor
//! to its directories and freed inodes) that an fsync commit has not made
//! durable already, and no orphan is among them — or only data and attributes
//! of theirs, whose frozen pages it then logs too ([`Frozen::coverable`]):
//! the fsync commit then depends on nothing the commit in flight writes, and
//! the commit's log follows it in the chain. Replay keeps such an fsync
//! commit live after that delta's commit (it carries the next delta's
//! number). Otherwise the fsync waits for the commit in flight. The same
//! holds ahead of a unify that does not start a fresh log
//! (`CommitJob::holds_log`).
//!
//! Once a delta commit in flight has written its log (`Volume::log_written`)
//! and only its flush is left, an fsync commit of any inodes follows it in
//! the chain, as after a finished delta: its own flush makes the delta
//! durable too. (Replay drops such fsync commits with the delta if a crash
//! before that flush left the delta unproven: `log/chain.rs`.)
//!
//! Calls the backend (`prepare_fsync`), the cache and log (the records).

use super::names::{PendingNames, Pos};
use super::Volume;
use crate::backend::commit::CommitJob;
use crate::error::Result;
use crate::log::record::InlineBytes;
use crate::log::Record;
use crate::types::*;
use std::collections::{BTreeSet, HashSet};

/// Most pages an fsync commit may log for one inode. (Each is written
/// twice, in the log and later in place, but an fsync of a file past it
/// commits the whole delta: every file's dirty data, with its own flush.)
pub const INLINE_PAGES: usize = 64;
/// Bytes of file data per inline record (fits a 1 KiB log block).
pub const INLINE_CHUNK: usize = 896;

/// The delta commit in flight, as fsync commits may go ahead of it (while
/// it writes its data).
pub struct Frozen {
    /// Inodes it changes that no fsync commit has made durable already.
    pub uncovered: HashSet<Ino>,
    /// Those of them whose only changes there are file data and attributes
    /// (a regular file or symlink, no name or link change, no tree change
    /// but its data's mapping, its name durable): an fsync commit makes
    /// one durable by logging its frozen pages too.
    pub coverable: HashSet<Ino>,
}

/// What an fsync needs.
pub enum FsyncPlan {
    /// Nothing of these inodes is pending: they are durable already.
    Nothing,
    /// Their changes need a full delta commit.
    Full,
    /// The delta commit in flight holds changes of theirs: plan again once
    /// it is durable.
    Wait,
    /// An fsync commit, frozen; the caller writes it and calls `finish`.
    Job(Box<CommitJob>),
}

/// What one fsync commit makes durable: the fsynced inodes and the closure
/// of their pending name changes.
#[derive(Default)]
struct Closure {
    /// Live inodes to log whole (image, unlogged pages, orphan mark).
    inodes: Vec<Ino>,
    /// Inodes freed in the open delta whose durable name it removes: logged
    /// with link count 0 as orphans (the next mount frees them).
    freed: Vec<Ino>,
    /// Directory positions whose entry (or its absence) it logs.
    positions: BTreeSet<Pos>,
    /// Their directories, whose images it logs.
    dirs: BTreeSet<Ino>,
    /// Directories made in the open delta that it makes durable (also in
    /// `dirs`).
    new_dirs: Vec<Ino>,
}

/// Most inodes a closure may reach through name changes (beyond the
/// fsynced ones) before the fsync takes a full commit.
const CLOSURE_MAX: usize = 32;

/// What an fsync commit changes in the volume once it is prepared.
#[derive(Default)]
struct Logged {
    records: Vec<Record>,
    /// Pages copied into the log: (inode, block).
    pages: Vec<(Ino, u64)>,
    /// The images it logs.
    images: Vec<(Ino, Vec<u8>)>,
}

impl Volume {
    /// Plan an fsync of `inos` (a group: one commit serves them all).
    pub fn fsync_plan(&mut self, inos: &[Ino]) -> Result<FsyncPlan> {
        self.settle();
        if self.be.read_only {
            return Ok(FsyncPlan::Nothing);
        }
        if self.failed {
            return Err(crate::error::Error::Posix(crate::error::Errno::EIO));
        }
        let frozen = self.pipeline.frozen();
        let uncovered = |ino: &Ino| frozen.is_some_and(|f| f.uncovered.contains(ino));
        let start: Vec<Ino> = inos
            .iter()
            .copied()
            .filter(|i| uncovered(i) || (self.cache.dirty.lock().contains(i) && !self.fsync_covered(*i)))
            .collect();
        let Some(c) = self.closure(&start)? else {
            return Ok(FsyncPlan::Full);
        };
        // Inodes whose changes in the commit in flight this one covers.
        let mut frozen_too = Vec::new();
        // A delta commit that has written its log is behind this one in
        // nothing: this commit follows it in the chain.
        if let Some(ahead) = self.pipeline.frozen_or_wait() {
            // Only ahead of a delta commit writing its data, and only when
            // that commit holds nothing of these inodes not yet durable — or
            // only their data and attributes, which this commit logs too.
            let Some(frozen) = ahead else {
                return Ok(FsyncPlan::Wait);
            };
            let waits = |ino: &Ino| {
                (frozen.uncovered.contains(ino) && !frozen.coverable.contains(ino))
                    || self.be.orphans.contains(ino)
            };
            if c.inodes.iter().any(waits)
                || c.freed
                    .iter()
                    .chain(&c.dirs)
                    .any(|i| frozen.uncovered.contains(i))
            {
                return Ok(FsyncPlan::Wait);
            }
            frozen_too = c
                .inodes
                .iter()
                .copied()
                .filter(|i| frozen.uncovered.contains(i))
                .collect();
        }
        let logged = self.closure_records(&c)?;
        if logged.records.is_empty() {
            return Ok(FsyncPlan::Nothing);
        }
        let job = self.be.prepare_fsync(logged.records)?;
        // The records are in the log's tail now: their pages, entries and
        // name changes count as logged.
        for (ino, lblock) in logged.pages {
            if let Some(i) = self.cache.get_mut(ino) {
                i.pages.mark_logged(lblock);
            }
        }
        let books = self.books.get_mut();
        for &pos in &c.positions {
            books.names.logged(pos);
        }
        for ino in &c.inodes {
            books.ns_touched.remove(ino);
            self.data_changed.get_mut().remove(ino);
            if let Some(i) = self.cache.get_mut(*ino) {
                i.data_delta = 0;
            }
        }
        self.fsync_logged.extend(logged.images);
        // Everything of theirs is in this commit now, frozen changes too.
        if let Some(Some(frozen)) = self.pipeline.ahead_of() {
            for ino in &frozen_too {
                frozen.uncovered.remove(ino);
                frozen.coverable.remove(ino);
            }
        }
        self.pipeline.plan_fsync();
        self.in_flight_bytes += job.data_bytes();
        Ok(FsyncPlan::Job(Box::new(job)))
    }

    /// Whether an fdatasync of `ino` has nothing to do: no commit is in
    /// flight, and its data, size and names (a directory's: its entries)
    /// are durable (only attributes that reading the data back does not
    /// need — times, mode, owner, xattrs — may be pending).
    pub fn datasync_needless(&self, ino: Ino) -> bool {
        // After a failed commit nothing the session changed is known to be
        // durable (the failed delta's books were cleared at its freeze).
        if self.failed || self.commit_in_flight() || self.data_changed.lock().contains(&ino) {
            return false;
        }
        let books = self.books.lock();
        !books.names.pending(ino) && !books.names.any_in(ino)
    }

    /// The closure of `start`'s pending changes, or `None` if they need a
    /// full delta commit. Each inode brings its pending positions; each
    /// position brings the inodes its new and its removed entry name, and
    /// a new entry brings the removed durable entries under its name hash
    /// (one may have carried its name). A directory whose link count
    /// changed brings its positions that name directories. Replay then
    /// finds every name change of every inode it touches, so link counts
    /// and names agree.
    fn closure(&mut self, start: &[Ino]) -> Result<Option<Closure>> {
        let mut c = Closure::default();
        let mut seen = HashSet::new();
        let mut queue = Vec::new();
        for &ino in start {
            if !self.inode(ino)?.is_dir() {
                queue.push(ino);
                continue;
            }
            // A directory brings its pending positions, and itself if its
            // own name is not durable yet (as every directory of the
            // closure does, below).
            let positions = self.books.get_mut().names.positions_in(ino);
            let image = self.inode(ino)?.attrs.encode();
            let pending = self.books.get_mut().names.pending(ino);
            if positions.is_empty() && !pending && self.fsync_logged.get(&ino) == Some(&image) {
                continue;
            }
            c.dirs.insert(ino);
            for pos in positions {
                visit(&self.books.get_mut().names, pos, &mut c, &mut queue);
            }
        }
        // Inodes reached through name changes (not fsynced themselves).
        let mut reached = 0;
        let mut scanned = HashSet::new();
        loop {
            while let Some(ino) = queue.pop() {
                if !seen.insert(ino) {
                    continue;
                }
                if !start.contains(&ino) {
                    reached += 1;
                    if reached > CLOSURE_MAX {
                        return Ok(None);
                    }
                }
                let positions = self.books.get_mut().names.positions(ino);
                for &pos in &positions {
                    visit(&self.books.get_mut().names, pos, &mut c, &mut queue);
                }
                let is_dir = self.cache.lock(ino).map(|i| i.is_dir());
                match is_dir {
                    Some(true) => {
                        // Only a directory made in the open delta, whose
                        // one change of name is its new entry: a moved or
                        // removed one takes a full commit.
                        let names = &self.books.get_mut().names;
                        if positions.iter().any(|&p| names.inos_at(p).1 == Some(ino)) {
                            return Ok(None);
                        }
                        c.new_dirs.push(ino);
                        c.dirs.insert(ino);
                    }
                    Some(false) => c.inodes.push(ino),
                    None if self.books.get_mut().freed_images.contains_key(&ino) => c.freed.push(ino),
                    None => return Ok(None),
                }
            }
            // Each directory of the closure once: one whose link count
            // changed brings the positions that name directories (made,
            // moved or removed ones).
            let todo: Vec<Ino> = c.dirs.iter().copied().filter(|d| scanned.insert(*d)).collect();
            if todo.is_empty() {
                break;
            }
            // A directory whose own name is not durable yet goes too (if
            // it is new; see above).
            let books = self.books.get_mut();
            queue.extend(todo.iter().copied().filter(|d| books.names.pending(*d)));
            // An inode not in the cache and not a freed file may have been
            // a directory.
            let cache = &self.cache;
            let names_dir = |i: Ino| match cache.lock(i) {
                Some(n) => n.is_dir(),
                None => !books.freed_images.contains_key(&i),
            };
            for dir in todo.into_iter().filter(|d| books.ns_touched.contains(d)) {
                for pos in books.names.positions_in(dir) {
                    let (added, removed) = books.names.inos_at(pos);
                    if added.into_iter().chain(removed).any(names_dir) {
                        visit(&books.names, pos, &mut c, &mut queue);
                    }
                }
            }
        }
        for &dir in &c.dirs {
            // Its own name is durable, or new and logged here.
            let pending = self.books.get_mut().names.pending(dir);
            if !self.inode(dir)?.is_dir() || (pending && !c.new_dirs.contains(&dir)) {
                return Ok(None);
            }
        }
        // An xattr file made, written or freed in the open delta goes with
        // its owner in a full commit.
        let xattr_files = &self.books.get_mut().xattr_files;
        if c.inodes.iter().chain(&c.dirs).any(|i| xattr_files.contains(i)) {
            return Ok(None);
        }
        let mut pages = 0;
        for &ino in &c.inodes {
            let i = self.inode(ino)?;
            let n = i.pages.not_logged().len();
            if !matches!(i.kind(), FileType::Regular | FileType::Symlink)
                || i.tree.has_dirty_leaves()
                || i.pages.dropped_fsynced()
                || n > INLINE_PAGES
            {
                return Ok(None);
            }
            pages += n as u64;
        }
        // Its log blocks come out of the space ordinary changes may take,
        // never out of the reserve (`space.rs`): a nearly full volume
        // commits the delta instead, which the reserve covers.
        if self.spare() < 2 * (pages + 8) {
            return Ok(None);
        }
        Ok(Some(c))
    }

    /// The commit about to be frozen, as fsync commits may go ahead of it
    /// (called at freeze, before the delta is prepared).
    pub(super) fn frozen_state(&self) -> Frozen {
        let uncovered = self.uncovered();
        let books = self.books.lock();
        // The books first: a delta of new files (each with its name
        // pending) then looks none of them up in the cache.
        let data_only = |ino: &&Ino| {
            if books.ns_touched.contains(*ino)
                || books.xattr_files.contains(*ino)
                || books.names.pending(**ino)
                || self.be.orphans.contains(*ino)
            {
                return false;
            }
            let Some(i) = self.cache.lock(**ino) else {
                return false;
            };
            matches!(i.kind(), FileType::Regular | FileType::Symlink)
                && !i.tree.has_dirty_leaves()
                && !i.pages.dropped_fsynced()
        };
        let coverable = uncovered.iter().filter(data_only).copied().collect();
        Frozen { uncovered, coverable }
    }

    /// The records of closure `c`.
    fn closure_records(&mut self, c: &Closure) -> Result<Logged> {
        let mut out = Logged::default();
        for &ino in &c.inodes {
            self.inode_records(ino, &mut out)?;
        }
        for ino in &c.freed {
            // (Always there: the closure took `ino` from these books.)
            let Some(image) = self.books.get_mut().freed_images.get(*ino) else {
                continue;
            };
            let attrs = image.to_vec();
            out.records.push(Record::InodeImage { ino: *ino, attrs });
            out.records.push(Record::Orphan { ino: *ino });
        }
        let dev = self.be.dev.clone();
        for &(dir, key) in &c.positions {
            out.records
                .push(match self.dir(dir)?.tree.get(dev.as_ref(), key)? {
                    Some(entry) => Record::DirentSet { dir, key, entry },
                    None => Record::DirentRemove { dir, key },
                });
        }
        for &dir in &c.dirs {
            let attrs = self.inode(dir)?.attrs.encode();
            out.images.push((dir, attrs.clone()));
            out.records.push(Record::InodeImage { ino: dir, attrs });
        }
        Ok(out)
    }

    /// The records that make live inode `ino` durable: its image, its
    /// orphan mark, and its pages no fsync commit has logged yet.
    fn inode_records(&mut self, ino: Ino, out: &mut Logged) -> Result<()> {
        let orphan = self.be.orphans.contains(&ino);
        let named = self.be.named.contains(&ino);
        let bs = self.be.bs as u64;
        let i = self.inode(ino)?;
        // Its dirty pages, and those the commit in flight froze that no
        // fsync commit has logged (only while that commit writes its data).
        let pending = i.pages.not_logged();
        let size = i.attrs.size;
        let attrs = i.attrs.encode();
        out.images.push((ino, attrs.clone()));
        out.records.push(Record::InodeImage { ino, attrs });
        if orphan {
            out.records.push(Record::Orphan { ino });
        } else if named {
            // Off the orphan list, which a durable commit may still hold
            // it on: so is the list this commit makes durable.
            out.records.push(Record::Named { ino });
        }
        out.records
            .reserve(pending.len() * (bs as usize).div_ceil(INLINE_CHUNK));
        for &lblock in &pending {
            let Some(page) = i.pages.get(lblock) else { continue };
            let len = size.saturating_sub(lblock * bs).min(bs) as usize;
            for offset in (0..len).step_by(INLINE_CHUNK) {
                let end = (offset + INLINE_CHUNK).min(len);
                out.records.push(Record::DataInline {
                    ino,
                    lblock,
                    offset: offset as u16,
                    data: InlineBytes::share(&page.data, offset, end - offset),
                });
            }
        }
        out.pages.extend(pending.iter().map(|&b| (ino, b)));
        Ok(())
    }
}

/// Add position `pos` to closure `c`, and the inodes it brings to `queue`.
fn visit(names: &PendingNames, pos: Pos, c: &mut Closure, queue: &mut Vec<Ino>) {
    if !c.positions.insert(pos) {
        return;
    }
    let (added, removed) = names.inos_at(pos);
    queue.extend(added.into_iter().chain(removed));
    if added.is_some() {
        queue.extend(names.removed_same_hash(pos.0, pos.1));
    }
    c.dirs.insert(pos.0);
}
