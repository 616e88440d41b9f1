//! Frontend layer: file data and attributes — read, write, truncate, setattr.
//! Writes land in dirty pages of the current delta; the backend allocates and
//! writes them at commit (delayed allocation keeps sequential files
//! contiguous).
//!
//! Invariant F1: bytes beyond the file size within its last block are zero,
//! in cache and on media, so extending a file never exposes old data.
//!
//! Calls the cache (through `Volume`) and structures (extent trees).

use super::{max_file_size, Volume};
use crate::error::{err, Errno, Result};
use crate::structures::extent;
use crate::types::*;

impl Volume {
    /// Contents of logical block `lblock` of `ino` as it is now.
    fn block(&mut self, ino: Ino, lblock: u64) -> Result<Vec<u8>> {
        let bs = self.be.bs;
        let dev = self.be.dev.clone();
        let i = self.inode(ino)?;
        if let Some(data) = i.pages.content(lblock) {
            return Ok(data.as_ref().clone());
        }
        let mut buf = vec![0u8; bs];
        if let Some(e) = extent::lookup(&mut i.tree, dev.as_ref(), lblock)? {
            dev.read(e.pblock + (lblock - e.lblock), &mut buf)?;
        }
        Ok(buf)
    }

    /// Read `size` bytes at `offset`, clamped to the file size.
    pub(super) fn read_data(&mut self, ino: Ino, offset: u64, size: usize) -> Result<Vec<u8>> {
        let bs = self.bs();
        let dev = self.be.dev.clone();
        let file_size = self.inode(ino)?.attrs.size;
        if offset >= file_size || size == 0 {
            return Ok(Vec::new());
        }
        let end = file_size.min(offset.saturating_add(size as u64));
        let mut out = Vec::with_capacity((end - offset) as usize);
        let mut lblock = offset / bs;
        while lblock * bs < end {
            let i = self.inode(ino)?;
            let from = (offset.max(lblock * bs) - lblock * bs) as usize;
            let to = ((end - lblock * bs).min(bs)) as usize;
            if let Some(data) = i.pages.content(lblock) {
                out.extend_from_slice(&data[from..to]);
                lblock += 1;
                continue;
            }
            match extent::lookup(&mut i.tree, dev.as_ref(), lblock)? {
                Some(e) => {
                    // Read the rest of this extent that we need, in one request,
                    // stopping at the first block that has a dirty page.
                    let last = (end - 1) / bs;
                    let mut n = (e.lblock + e.count - lblock).min(last - lblock + 1);
                    for k in 1..n {
                        if i.pages.get(lblock + k).is_some() {
                            n = k;
                            break;
                        }
                    }
                    let mut buf = vec![0u8; (n * bs) as usize];
                    dev.read(e.pblock + (lblock - e.lblock), &mut buf)?;
                    let first = from;
                    let stop = ((end - lblock * bs).min(n * bs)) as usize;
                    out.extend_from_slice(&buf[first..stop]);
                    lblock += n;
                }
                None => {
                    out.resize(out.len() + (to - from), 0);
                    lblock += 1;
                }
            }
        }
        Ok(out)
    }

    pub fn read(&mut self, ino: Ino, offset: u64, size: usize) -> Result<Vec<u8>> {
        match self.inode(ino)?.kind() {
            FileType::Directory => return err(Errno::EISDIR),
            FileType::Regular => {}
            _ => return err(Errno::EINVAL),
        }
        self.read_data(ino, offset, size)
    }

    pub fn write(&mut self, ino: Ino, offset: u64, data: &[u8]) -> Result<usize> {
        match self.inode(ino)?.kind() {
            FileType::Directory => return err(Errno::EISDIR),
            FileType::Regular => {}
            _ => return err(Errno::EINVAL),
        }
        if data.is_empty() {
            return Ok(0);
        }
        self.copy_to_pages(ino, offset, data)?;
        Ok(data.len())
    }

    /// Put `data` at `offset` into dirty pages and extend the size.
    pub(super) fn copy_to_pages(&mut self, ino: Ino, offset: u64, data: &[u8]) -> Result<()> {
        let bs = self.bs();
        let end = offset
            .checked_add(data.len() as u64)
            .filter(|&e| e <= max_file_size(bs));
        let Some(end) = end else { return err(Errno::EFBIG) };
        let first = offset / bs;
        let last = (end - 1) / bs;
        let i = self.inode(ino)?;
        let new_pages = (first..=last).filter(|b| !i.pages.is_dirty(*b)).count() as u64;
        self.begin_change(new_pages + 2)?;
        let delta = self.be.delta;
        let i = self.inode(ino)?;
        let (old_size, clean_before) = (i.attrs.size, i.pages.clean_len());
        for lblock in first..=last {
            let start = lblock * bs;
            let from = offset.max(start) - start;
            let to = end.min(start + bs) - start;
            let whole = from == 0 && to == bs;
            let fill = if whole || self.inode(ino)?.pages.get(lblock).is_some() || start >= old_size {
                None
            } else {
                Some(self.block(ino, lblock)?)
            };
            let was_clean = !self.inode(ino)?.pages.is_dirty(lblock);
            let src = &data[(start + from - offset) as usize..(start + to - offset) as usize];
            let page = self
                .inode(ino)?
                .pages
                .page_mut(lblock, delta, || fill.unwrap_or_else(|| vec![0u8; bs as usize]));
            page[from as usize..to as usize].copy_from_slice(src);
            if was_clean {
                self.dirty_bytes += bs;
            }
        }
        let now = Timespec::now();
        let i = self.inode(ino)?;
        let clean_after = i.pages.clean_len();
        i.attrs.size = i.attrs.size.max(end);
        i.attrs.mtime = now;
        i.attrs.ctime = now;
        self.touch(ino);
        self.data_changed.insert(ino);
        self.clean.changed(ino, clean_before, clean_after, bs);
        Ok(())
    }

    /// Set the size of a regular file: drop data beyond it (F1) or extend
    /// with a hole.
    fn truncate(&mut self, ino: Ino, size: u64) -> Result<()> {
        let bs = self.bs();
        if size > max_file_size(bs) {
            return err(Errno::EFBIG);
        }
        let dev = self.be.dev.clone();
        let i = self.inode(ino)?;
        let (old, clean_before) = (i.attrs.size, i.pages.clean_len());
        if size < old {
            let keep = size.div_ceil(bs);
            if !size.is_multiple_of(bs) {
                // Zero the tail of the last kept block (F1).
                let lblock = size / bs;
                let mut b = self.block(ino, lblock)?;
                b[(size % bs) as usize..].fill(0);
                let delta = self.be.delta;
                let was_clean = !self.inode(ino)?.pages.is_dirty(lblock);
                *self.inode(ino)?.pages.page_mut(lblock, delta, Vec::new) = b;
                if was_clean {
                    self.dirty_bytes += bs;
                }
            }
            let i = self.inode(ino)?;
            let dropped = i.pages.truncate(keep) as u64;
            let freed = extent::punch(&mut i.tree, dev.as_ref(), keep, u64::MAX)?;
            let n: u64 = freed.iter().map(|f| f.1).sum();
            i.attrs.blocks = i.attrs.blocks.saturating_sub(n);
            for (s, c) in freed {
                self.be.alloc.free_range(s, c);
            }
            self.dirty_bytes = self.dirty_bytes.saturating_sub(dropped * bs);
            let clean_after = self.inode(ino)?.pages.clean_len();
            self.clean.changed(ino, clean_before, clean_after, bs);
        }
        self.inode(ino)?.attrs.size = size;
        self.data_changed.insert(ino);
        Ok(())
    }

    /// Take away `strip`'s privileges from a non-directory (see
    /// [`StripPrivs`]). Called right after a write or setattr of `ino`,
    /// whose change already reserved space for its inode.
    pub fn strip_privs(&mut self, ino: Ino, strip: StripPrivs) -> Result<()> {
        let i = self.inode(ino)?;
        if strip == StripPrivs::Nothing || i.kind() == FileType::Directory {
            return Ok(());
        }
        let mut changed = i.attrs.xattrs.remove(XATTR_CAPS).is_some();
        if strip == StripPrivs::CapsAndIds {
            let mode = i.attrs.mode;
            let mut kill = libc::S_ISUID;
            if mode & libc::S_IXGRP != 0 {
                kill |= libc::S_ISGID;
            }
            i.attrs.mode = mode & !kill;
            changed |= i.attrs.mode != mode;
        }
        if changed {
            i.attrs.ctime = Timespec::now();
            self.touch(ino);
        }
        Ok(())
    }

    pub fn setattr(&mut self, ino: Ino, set: &SetAttr) -> Result<Attr> {
        let kind = self.inode(ino)?.kind();
        if set.size.is_some() {
            match kind {
                FileType::Directory => return err(Errno::EISDIR),
                FileType::Regular => {}
                _ => return err(Errno::EINVAL),
            }
        }
        let old_size = self.inode(ino)?.attrs.size;
        if set.size.is_some_and(|s| s < old_size) {
            self.begin_release(3)?;
        } else {
            self.begin_change(3)?;
        }
        let now = Timespec::now();
        if let Some(size) = set.size {
            self.truncate(ino, size)?;
            let i = self.inode(ino)?;
            i.attrs.mtime = now;
        }
        let i = self.inode(ino)?;
        if let Some(m) = set.mode {
            i.attrs.mode = (i.attrs.mode & libc::S_IFMT) | (m & 0o7777);
        }
        if let Some(u) = set.uid {
            i.attrs.uid = u;
        }
        if let Some(g) = set.gid {
            i.attrs.gid = g;
        }
        if let Some(t) = set.atime {
            i.attrs.atime = t;
        }
        if let Some(t) = set.mtime {
            i.attrs.mtime = t;
        }
        i.attrs.ctime = set.ctime.unwrap_or(now);
        self.touch(ino);
        self.getattr(ino)
    }
}
