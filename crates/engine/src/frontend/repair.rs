//! Frontend layer: repair hooks for `fsck --repair`
//! (`crates/tools/src/fsck/fix.rs`) — small, direct
//! changes to a mounted volume that the checker has proven right — set a
//! link count or a `blocks` attribute, free leaked blocks, mark referenced
//! blocks in use, take out an inode record that does not decode and the
//! entries that name an inode that is not there, give a written extent
//! that lacks them its blocks' checksums (from the data on the device; a
//! record whose checksum attribute does not decode is read without it and
//! rewritten), take out a file's extents past its end, rebuild a
//! directory from the entries fsck could read, and
//! name an inode no entry names in `/lost+found`. Each change joins the
//! current delta like any operation; the caller unifies afterwards.
//!
//! Calls the cache (inodes), the extent structures and the backend's
//! allocator.

use super::Volume;
use crate::cache::Inode;
use crate::error::{err, Errno, Error, Result};
use crate::structures::btree::Tree;
use crate::structures::extent::{self, Extent};
use crate::structures::inode::{without_sums, InodeAttrs};
use crate::structures::xattr_file::S_IFXATTR;
use crate::types::{FileType, Ino, ROOT_INO};

/// The directory of the root where a repair names the inodes that no
/// entry names any more.
pub const LOST_FOUND: &[u8] = b"lost+found";

impl Volume {
    fn repair_begin(&self) -> Result<()> {
        if self.be.read_only || self.failed {
            return err(Errno::EROFS);
        }
        Ok(())
    }

    /// Set the link count of `ino`.
    pub fn repair_nlink(&mut self, ino: Ino, nlink: u32) -> Result<()> {
        self.repair_begin()?;
        self.inode(ino)?.attrs.nlink = nlink;
        self.touch(ino);
        Ok(())
    }

    /// Set the `blocks` attribute (data blocks held) of `ino`.
    pub fn repair_blocks(&mut self, ino: Ino, blocks: u64) -> Result<()> {
        self.repair_begin()?;
        self.inode(ino)?.attrs.blocks = blocks;
        self.touch(ino);
        Ok(())
    }

    /// Free blocks that are in use but referenced by nothing.
    pub fn repair_free(&mut self, start: u64, count: u64) -> Result<()> {
        self.repair_begin()?;
        self.be.alloc.free_range(start, count);
        Ok(())
    }

    /// Set the shared-extent table's count of `start..start+count` to
    /// `refs` (below 2: no run), the times the files map those blocks.
    pub fn repair_shared(&mut self, start: u64, count: u64, refs: u32) -> Result<()> {
        self.repair_begin()?;
        self.be.alloc.shared.set(start, count, refs);
        Ok(())
    }

    /// Drop the checksum table's entries of blocks `start..+count` (free
    /// blocks: an entry there would be found by no extent).
    pub fn repair_drop_sums(&mut self, start: u64, count: u64) -> Result<()> {
        self.repair_begin()?;
        self.be.alloc.sums.forget(start, count);
        Ok(())
    }

    /// Drop `owner`'s reference to xattr file `xf` if it names it (`owner`
    /// 0: none does), and free `xf` if it is an xattr file.
    pub fn repair_xattr_file(&mut self, owner: Ino, xf: Ino) -> Result<()> {
        self.repair_begin()?;
        if owner != 0 {
            let o = self.inode(owner)?;
            if o.attrs.xattr_file == xf {
                o.attrs.xattr_file = 0;
                o.spilled = None;
                self.touch(owner);
            }
        }
        match self.inode(xf) {
            Ok(x) if x.attrs.mode & libc::S_IFMT == S_IFXATTR => self.free_inode(xf),
            Ok(_) | Err(Error::Posix(Errno::ENOENT)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Mark referenced blocks in use that the bitmap says are free.
    pub fn repair_mark_used(&mut self, start: u64, count: u64) -> Result<()> {
        self.repair_begin()?;
        if !self.be.alloc.apply_alloc(start, count) {
            return Err(Error::corrupt(
                start,
                format!("{count} blocks outside the volume"),
            ));
        }
        self.be.alloc.delta_allocs.push((start, count));
        Ok(())
    }

    /// Take inode `ino`'s record out of the inode table, whatever it holds
    /// (it does not decode): the blocks it reached are leaked blocks the
    /// same repair frees, and the entries naming it go by
    /// [`Volume::repair_drop_entry`].
    pub fn repair_drop_record(&mut self, ino: Ino) -> Result<()> {
        self.repair_begin()?;
        let dev = self.be.dev.clone();
        self.cache.remove(ino);
        self.be.orphans.remove(&ino);
        self.be.itable.get_mut().remove(dev.as_ref(), ino)?;
        Ok(())
    }

    /// Remove the entry `name` of directory `dir`, which names an inode
    /// that is not there, as an unlink changes the directory (nothing
    /// else: there is no inode to unlink).
    pub fn repair_drop_entry(&mut self, dir: Ino, name: &[u8]) -> Result<()> {
        self.repair_begin()?;
        let e = self.find(dir, name)?.ok_or(Error::Posix(Errno::ENOENT))?;
        self.remove_entry(dir, &e.spot, e.ino)
    }

    /// Give directory `dir` a new tree holding `entries` (name, inode) —
    /// what fsck read of its damaged one. Each entry takes the type of the
    /// inode it names; one naming an inode that is not there (or does not
    /// decode), an xattr file, a directory whose `parent` is not `dir`, an
    /// invalid name or a name already taken is left out. The old tree's
    /// blocks are leaks the next check frees; the link counts are the
    /// next check's to set.
    pub fn repair_rebuild_dir(&mut self, dir: Ino, entries: &[(Vec<u8>, Ino)]) -> Result<()> {
        self.repair_begin()?;
        let d = self.dir(dir)?;
        d.tree = Tree::new_empty(dir, d.tree.kind);
        self.touch(dir);
        for (name, ino) in entries {
            if super::namespace::check_name(name).is_err() || *ino == dir || *ino == ROOT_INO {
                continue;
            }
            let attrs = match self.inode(*ino) {
                Ok(i) => i.attrs.clone(),
                Err(Error::Posix(_) | Error::Corrupt { .. }) => continue,
                Err(e) => return Err(e),
            };
            let Some(kind) = FileType::from_mode(attrs.mode) else {
                continue;
            };
            if kind == FileType::Directory && attrs.parent != dir {
                continue;
            }
            if self.find(dir, name)?.is_some() {
                continue;
            }
            self.add_entry(dir, name, *ino, kind, None)?;
        }
        Ok(())
    }

    /// Put `record` in the inode table as inode `ino`'s (its record did
    /// not decode; this is what fsck kept of it).
    pub fn repair_record(&mut self, ino: Ino, record: Vec<u8>) -> Result<()> {
        self.repair_begin()?;
        let dev = self.be.dev.clone();
        self.cache.remove(ino);
        self.be.itable.get_mut().insert(dev.as_ref(), ino, record)
    }

    /// Replace the inode-table leaf with separator `sep`, which does not
    /// decode, by `records` (inode, record): the leaf leaves the table's
    /// leaf list (the whole table, if it is the root) and each record not
    /// in the table already goes back in. What the lost records reached is
    /// the next check's to repair (entries naming nothing, leaked blocks).
    pub fn repair_itable_leaf(&mut self, sep: u64, records: &[(Ino, Vec<u8>)]) -> Result<()> {
        self.repair_begin()?;
        let dev = self.be.dev.clone();
        let t = self.be.itable.get_mut();
        if t.depth() == 0 {
            *t = Tree::new_empty(t.id, t.kind);
        } else {
            t.unmap_leaf(dev.as_ref(), sep)?;
            // The first leaf gone, the next one takes its keys.
            t.lower_first_sep(dev.as_ref(), sep)?;
        }
        for (ino, record) in records {
            if t.get(dev.as_ref(), *ino)?.is_none() {
                t.insert(dev.as_ref(), *ino, record.clone())?;
            }
        }
        // The table's end, which the mount may not have read.
        self.note_itable_end()
    }

    /// Move the inode-table leaf at `addr` from separator `sep` to `to`
    /// (its first key): a damaged branch entry routed keys past it.
    pub fn repair_itable_sep(&mut self, addr: u64, sep: u64, to: u64) -> Result<()> {
        self.repair_begin()?;
        let dev = self.be.dev.clone();
        let t = self.be.itable.get_mut();
        t.unmap_leaf(dev.as_ref(), sep)?;
        t.map_leaf(dev.as_ref(), to, addr)
    }

    /// Set directory `ino`'s parent attribute to `parent` (the directory
    /// whose entry names it).
    pub fn repair_parent(&mut self, ino: Ino, parent: Ino) -> Result<()> {
        self.repair_begin()?;
        self.dir(ino)?.attrs.parent = parent;
        self.touch(ino);
        Ok(())
    }

    /// Name inode `ino`, which no entry names, `#ino` in `/lost+found`
    /// (made if absent): a directory gets it as its parent (and adds to
    /// its link count), any other file a link count of 1.
    pub fn repair_reattach(&mut self, ino: Ino) -> Result<()> {
        self.repair_begin()?;
        let lf = match self.find(ROOT_INO, LOST_FOUND)? {
            Some(e) => e.ino,
            None => {
                self.mknod(ROOT_INO, LOST_FOUND, libc::S_IFDIR | 0o700, 0, 0, 0)?
                    .ino
            }
        };
        let kind = FileType::from_mode(self.inode(ino)?.attrs.mode).ok_or(Error::Posix(Errno::EINVAL))?;
        let mut name = format!("#{ino}").into_bytes();
        let mut n = 0;
        while self.find(lf, &name)?.is_some() {
            n += 1;
            name = format!("#{ino}.{n}").into_bytes();
        }
        self.add_entry(lf, &name, ino, kind, None)?;
        if kind == FileType::Directory {
            self.inode(ino)?.attrs.parent = lf;
            self.dir(lf)?.attrs.nlink += 1;
            self.touch(lf);
        } else {
            self.inode(ino)?.attrs.nlink = 1;
        }
        self.touch(ino);
        Ok(())
    }
}

impl Volume {
    /// Give every written extent of `ino` that has no checksums the
    /// CRC32C of each of its blocks as the device holds them now (a volume
    /// with data checksums whose extent lacks them, or whose checksums the
    /// checksum table should hold and does not). The blocks stay where
    /// they are; only the map changes, in the current delta. Returns the
    /// blocks summed (0 on a volume without data checksums).
    pub fn repair_sums(&mut self, ino: Ino) -> Result<u64> {
        self.repair_begin()?;
        if !self.be.sb.data_sums {
            return Ok(0);
        }
        let dev = self.be.dev.clone();
        let bs = self.be.bs;
        let stripped = self.load_without_sums(ino)?;
        let tree = &mut self.inode(ino)?.tree;
        let all = extent::all(tree, dev.as_ref())?;
        let (in_table, bare): (Vec<Extent>, Vec<Extent>) = all
            .into_iter()
            .filter(|e| !e.unwritten && !e.is_summed())
            .partition(|e| e.table_sums);
        let mut summed = 0;
        // Blocks whose checksums the extent says are in the checksum table
        // but which the table lacks get them there.
        let mut buf = vec![0u8; bs];
        for e in in_table {
            for b in e.pblock..e.pblock.saturating_add(e.count) {
                if self.be.alloc.sums.get(b).is_none() {
                    dev.read(b, &mut buf)?;
                    self.be.alloc.sums.put(b, &[extent::block_sum(&buf)]);
                    summed += 1;
                }
            }
        }
        let tree = &mut self.inode(ino)?.tree;
        for e in bare {
            let mut sums = Vec::new();
            let mut buf = vec![0u8; bs];
            for k in 0..e.count {
                dev.read(e.physical(e.lblock.saturating_add(k)), &mut buf)?;
                sums.push(extent::block_sum(&buf));
            }
            let with = Extent::summed(e.lblock, e.pblock, e.birth, sums);
            // The same blocks, mapped again: nothing is freed.
            extent::map_extent(tree, dev.as_ref(), &with)?;
            summed += e.count;
        }
        if summed > 0 || stripped {
            self.touch(ino);
        }
        Ok(summed)
    }

    /// Take out of `ino`'s map every extent, written or preallocated, past
    /// the end of the file (a damaged extent or count): what lies there is
    /// no part of the file. Its blocks are not freed here: they may be
    /// another file's (a count run into them); those nothing else maps
    /// are leaks the check that follows frees. Returns the blocks unmapped.
    pub fn repair_trim(&mut self, ino: Ino) -> Result<u64> {
        self.repair_begin()?;
        let dev = self.be.dev.clone();
        let bs = self.be.bs as u64;
        self.load_without_sums(ino)?;
        let i = self.inode(ino)?;
        let keep = i.attrs.size.div_ceil(bs);
        let cut = extent::punch(&mut i.tree, dev.as_ref(), keep, u64::MAX)?;
        let n: u64 = cut.iter().map(|c| c.1).sum();
        i.attrs.blocks = i.attrs.blocks.saturating_sub(n);
        self.touch(ino);
        Ok(n)
    }

    /// Load inode `ino` into the cache without its record's sums attribute
    /// when the record does not decode with it (a wrong count, or sums
    /// without extents) but does without: the caller computes them anew
    /// and the record is rewritten. Whether it did.
    fn load_without_sums(&mut self, ino: Ino) -> Result<bool> {
        if self.cache.contains(ino) {
            return Ok(false);
        }
        let dev = self.be.dev.clone();
        let Some((raw, leaf)) = self.be.itable.get_mut().get_at(dev.as_ref(), ino)? else {
            return err(Errno::ENOENT);
        };
        let bounds = crate::structures::bounds(dev.as_ref());
        if InodeAttrs::decode(&raw, ino, leaf, &bounds).is_ok() {
            return Ok(false);
        }
        let Some(bare) = without_sums(&raw) else {
            return Ok(false);
        };
        let attrs = InodeAttrs::decode(&bare, ino, leaf, &bounds)?;
        self.cache.insert(Inode::new(ino, attrs));
        Ok(true)
    }
}
