//! Frontend layer: file data and attributes — read, write, truncate, setattr.
//! Writes land in dirty pages of the current delta; the backend allocates and
//! writes them at commit (delayed allocation keeps sequential files
//! contiguous).
//!
//! Invariant F1: bytes beyond the file size within its last block are zero,
//! in cache and on media, so extending a file never exposes old data.
//! Debug builds assert it in cache (`check_tail`, the last block only, if
//! cached) after a write reaching the last block and after a truncate.
//!
//! Calls the cache (through `Volume`) and structures (extent trees).

use super::{max_file_size, Volume};
use crate::backend::alloc::SumsHandle;
use crate::cache::Inode;
use crate::device::Device;
use crate::error::{err, Errno, Error, Result};
use crate::structures::{extent, extent_range};
use crate::types::*;
use std::sync::atomic::Ordering::Relaxed;

/// Contents of logical block `lblock` of `i` as it is now.
fn block_of(i: &mut Inode, dev: &dyn Device, sums: &SumsHandle, bs: u64, lblock: u64) -> Result<Vec<u8>> {
    if let Some(data) = i.pages.content(lblock) {
        return Ok(data.as_ref().clone());
    }
    let mut buf = vec![0u8; bs as usize];
    // An unwritten (preallocated) extent reads as zeros.
    if let Some(e) = extent::lookup(&mut i.tree, dev, lblock)?.filter(|e| !e.unwritten) {
        crate::device::read_named(dev, e.physical(lblock), &mut buf)?;
        // A write into part of a block keeps the rest: never bytes that
        // fail their checksum, which the new one would cover.
        verify(i.ino, &sums.resolve(&e.piece(lblock, lblock + 1)), lblock, &buf)?;
    }
    Ok(buf)
}

/// F1, in debug builds: the cached bytes of `i`'s last block past its size
/// are zero. Looks at that one block, and only if it is cached.
pub(super) fn check_tail(i: &Inode, bs: u64) {
    let (size, last) = (i.attrs.size, i.attrs.size / bs);
    let tail = (size % bs) as usize;
    if !cfg!(debug_assertions) || tail == 0 {
        return;
    }
    if let Some(data) = i.pages.content(last) {
        debug_assert!(
            data.iter().skip(tail).all(|&b| b == 0),
            "F1: inode {} holds data past its size {size} in its last block {last}",
            i.ino
        );
    }
}

/// Read up to `size` bytes at `offset` of `i` into a new buffer; short
/// only at end of file.
pub(super) fn read_from(
    i: &mut Inode,
    dev: &dyn Device,
    sums: &SumsHandle,
    bs: u64,
    offset: u64,
    size: usize,
) -> Result<Vec<u8>> {
    let len = i.attrs.size.saturating_sub(offset).min(size as u64) as usize;
    let mut out = vec![0u8; len];
    let n = read_into(i, dev, sums, bs, offset, &mut out)?;
    out.truncate(n);
    Ok(out)
}

/// Read `out.len()` bytes at `offset` of `i` into `out` (clamped to the
/// file size); returns how many. [`plan_read`] then [`read_blocks`].
pub(super) fn read_into(
    i: &mut Inode,
    dev: &dyn Device,
    sums: &SumsHandle,
    bs: u64,
    offset: u64,
    out: &mut [u8],
) -> Result<usize> {
    let (n, reads) = plan_read(i, dev, sums, bs, offset, out)?;
    read_blocks(dev, bs, out, &reads)?;
    Ok(n)
}

/// Whether `data`, read from logical block `lblock` of extent `e` of file
/// `ino`, matches the checksum the extent holds for it (an extent without
/// checksums matches anything). A mismatch is [`Error::BadData`].
pub(crate) fn verify(ino: Ino, e: &extent::Extent, lblock: u64, data: &[u8]) -> Result<()> {
    let Some(expected) = e.sum_at(lblock) else {
        return Ok(());
    };
    let found = extent::block_sum(data);
    if found == expected {
        return Ok(());
    }
    Err(Error::BadData(Box::new(crate::error::BadData {
        ino,
        lblock,
        pblock: e.physical(lblock),
        birth: e.birth,
        expected,
        found,
    })))
}

/// A device read that a file read makes once it has let go of the file:
/// `len` bytes from byte `skip` of block `pblock` on, into `out[pos..]`,
/// each whole block checked against its checksum (`sums`, from the
/// extent: one per block the read touches; none on a volume without).
#[derive(Clone, Debug)]
pub(super) struct DeviceRead {
    pub(super) pos: usize,
    pub(super) pblock: u64,
    pub(super) skip: usize,
    pub(super) len: usize,
    /// The extent the blocks are in, cut to them: checksums and the
    /// logical block, for the check and its report.
    pub(super) extent: extent::Extent,
    pub(super) ino: Ino,
}

impl DeviceRead {
    /// The block this read starts at the beginning of, filling its buffer
    /// from the start.
    pub(super) fn block_at_start(&self) -> Option<u64> {
        (self.pos == 0 && self.skip == 0).then_some(self.pblock)
    }
}

/// The part of a read of `out.len()` bytes at `offset` of `i` (clamped to
/// the file size) that needs the file: dirty pages are copied into `out`
/// and holes zeroed now, extents mapped (loading extent nodes as needed);
/// the device reads are returned for [`read_blocks`], which needs only the
/// device. Also returns how many bytes the read gives.
pub(super) fn plan_read(
    i: &mut Inode,
    dev: &dyn Device,
    sums: &SumsHandle,
    bs: u64,
    offset: u64,
    out: &mut [u8],
) -> Result<(usize, Vec<DeviceRead>)> {
    let mut reads = Vec::new();
    let file_size = i.attrs.size;
    if offset >= file_size || out.is_empty() {
        return Ok((0, reads));
    }
    let end = file_size.min(offset.saturating_add(out.len() as u64));
    let mut pos = 0usize;
    let mut lblock = offset / bs;
    // Blocks below this are in a hole the last lookup found: zeroes, with
    // no descent per block.
    let mut hole_end = 0;
    while lblock * bs < end {
        let from = (offset.max(lblock * bs) - lblock * bs) as usize;
        let to = ((end - lblock * bs).min(bs)) as usize;
        if let Some(data) = i.pages.content(lblock) {
            out[pos..pos + to - from].copy_from_slice(&data[from..to]);
            pos += to - from;
            lblock += 1;
            continue;
        }
        let found = if lblock < hole_end {
            None
        } else {
            extent::lookup(&mut i.tree, dev, lblock)?
        };
        // An unwritten (preallocated) extent reads as a hole to its end.
        if let Some(e) = found.as_ref().filter(|e| e.unwritten) {
            hole_end = e.end();
        }
        let Some(e) = found.filter(|e| !e.unwritten) else {
            if lblock >= hole_end {
                // A hole: it lasts up to the next extent.
                hole_end = extent::next(&mut i.tree, dev, lblock)?.map_or(u64::MAX, |e| e.lblock);
            }
            out[pos..pos + to - from].fill(0);
            pos += to - from;
            lblock += 1;
            continue;
        };
        // The rest of this extent that we need, in one request, stopping
        // at the first block that has a dirty page.
        let last = (end - 1) / bs;
        let mut n = (e.lblock + e.count - lblock).min(last - lblock + 1);
        for k in 1..n {
            if i.pages.get(lblock + k).is_some() {
                n = k;
                break;
            }
        }
        let len = (((lblock + n) * bs).min(end) - (lblock * bs + from as u64)) as usize;
        let read = DeviceRead {
            pos,
            pblock: e.physical(lblock),
            skip: from,
            len,
            extent: sums.resolve(&e.piece(lblock, lblock + n)),
            ino: i.ino,
        };
        push_read(&mut reads, read, bs);
        pos += len;
        lblock += n;
    }
    Ok((pos, reads))
}

/// Add `r` to `reads`, as the end of the last one when it goes on where
/// that one stops, in the file, in `out` and on the device, and its blocks
/// are of the same kind (both with checksums or both without, born in the
/// same generation). A long extent with checksums is stored as entries of
/// at most [`extent::MAX_SUMMED`] blocks: a device read for each would cut
/// a 1 MiB read into four.
fn push_read(reads: &mut Vec<DeviceRead>, r: DeviceRead, bs: u64) {
    if let Some(last) = reads.last_mut() {
        let (a, b) = (&last.extent, &r.extent);
        let whole_blocks = (last.skip + last.len) as u64 == a.count * bs;
        if whole_blocks
            && r.skip == 0
            && last.pos + last.len == r.pos
            && a.end() == b.lblock
            && a.physical(a.end()) == b.pblock
            && a.birth == b.birth
            && a.is_summed() == b.is_summed()
            && a.table_sums == b.table_sums
        {
            last.len += r.len;
            last.extent.count += b.count;
            last.extent.sums.extend_from_slice(&b.sums);
            return;
        }
    }
    reads.push(r);
}

/// Make the device reads of a planned read ([`plan_read`]): whole blocks
/// straight into `out`, a partial first or last block through a buffer.
/// Every block read is checked against its checksum before any of it is
/// returned: a mismatch fails the whole read with [`Error::BadData`].
pub(super) fn read_blocks(dev: &dyn Device, bs: u64, out: &mut [u8], reads: &[DeviceRead]) -> Result<()> {
    let bsz = bs as usize;
    for r in reads {
        let e = &r.extent;
        let check = |pblock: u64, data: &[u8]| verify(r.ino, e, e.lblock + (pblock - r.pblock), data);
        let partial = |pblock: u64, skip: usize, into: &mut [u8]| -> Result<()> {
            let mut buf = vec![0u8; bsz];
            crate::device::read_named(dev, pblock, &mut buf)?;
            check(pblock, &buf)?;
            into.copy_from_slice(&buf[skip..skip + into.len()]);
            Ok(())
        };
        let (mut pos, mut pblock, mut len) = (r.pos, r.pblock, r.len);
        if r.skip > 0 || len < bsz {
            let take = (bsz - r.skip).min(len);
            partial(pblock, r.skip, &mut out[pos..pos + take])?;
            (pos, pblock, len) = (pos + take, pblock + 1, len - take);
        }
        let whole = len / bsz * bsz;
        if whole > 0 {
            let into = &mut out[pos..pos + whole];
            crate::device::read_named(dev, pblock, into)?;
            if e.is_summed() {
                for (k, block) in into.chunks(bsz).enumerate() {
                    check(pblock + k as u64, block)?;
                }
            }
        }
        if len > whole {
            partial(pblock + (whole / bsz) as u64, 0, &mut out[pos + whole..pos + len])?;
        }
    }
    Ok(())
}

/// Apply `set`'s mode, owner and times to `i` (not its size), with ctime
/// `set.ctime` or `now`.
pub(super) fn set_attrs(i: &mut Inode, set: &SetAttr, now: Timespec) {
    let a = &mut i.attrs;
    if let Some(m) = set.mode {
        a.mode = (a.mode & libc::S_IFMT) | (m & 0o7777);
        super::acl::chmod(a, m);
    }
    if let Some(u) = set.uid {
        a.uid = u;
    }
    if let Some(g) = set.gid {
        a.gid = g;
    }
    if let Some(t) = set.atime {
        a.atime = t;
    }
    if let Some(t) = set.mtime {
        a.mtime = t;
    }
    a.ctime = set.ctime.unwrap_or(now);
}

/// Whether `i` may be read or written as file data.
pub(super) fn check_file(i: &Inode) -> Result<()> {
    match i.kind() {
        FileType::Directory => err(Errno::EISDIR),
        FileType::Regular => Ok(()),
        _ => err(Errno::EINVAL),
    }
}

/// The end of a write of `len` bytes at `offset`, or EFBIG.
pub(super) fn write_end(bs: u64, offset: u64, len: usize) -> Result<u64> {
    match offset.checked_add(len as u64).filter(|&e| e <= max_file_size(bs)) {
        Some(end) => Ok(end),
        None => err(Errno::EFBIG),
    }
}

/// Pages a write of `offset..end` newly dirties in `i` (its reservation).
pub(super) fn new_pages(i: &Inode, bs: u64, offset: u64, end: u64) -> u64 {
    (offset / bs..=(end - 1) / bs)
        .filter(|b| !i.pages.is_dirty(*b))
        .count() as u64
}

/// Pages a write of `offset..end` newly dirties in `i` whose blocks are
/// preallocated (unwritten) and no snapshot holds (`held_upto`): the
/// commit fills those in place, taking no new block.
fn preallocated_pages(
    i: &mut Inode,
    dev: &dyn Device,
    bs: u64,
    (offset, end): (u64, u64),
    held_upto: Option<u32>,
) -> Result<u64> {
    let (first, last) = (offset / bs, end.div_ceil(bs));
    let mut n = 0;
    for e in extent_range::clipped(&mut i.tree, dev, first, last)? {
        if extent_range::fillable(&e, held_upto) {
            n += (e.lblock..e.end()).filter(|b| !i.pages.is_dirty(*b)).count() as u64;
        }
    }
    Ok(n)
}

impl Volume {
    /// Contents of logical block `lblock` of `ino` as it is now.
    pub(super) fn block(&mut self, ino: Ino, lblock: u64) -> Result<Vec<u8>> {
        let bs = self.bs();
        let dev = self.be.dev.clone();
        let sums = self.be.alloc.sums.handle();
        block_of(self.inode(ino)?, dev.as_ref(), &sums, bs, lblock)
    }

    /// Read `size` bytes at `offset`, clamped to the file size.
    pub(super) fn read_data(&mut self, ino: Ino, offset: u64, size: usize) -> Result<Vec<u8>> {
        let bs = self.bs();
        let dev = self.be.dev.clone();
        let sums = self.be.alloc.sums.handle();
        read_from(self.inode(ino)?, dev.as_ref(), &sums, bs, offset, size)
    }

    pub fn read(&mut self, ino: Ino, offset: u64, size: usize) -> Result<Vec<u8>> {
        check_file(self.inode(ino)?)?;
        self.read_data(ino, offset, size)
    }

    pub fn read_into(&mut self, ino: Ino, offset: u64, out: &mut [u8]) -> Result<usize> {
        let bs = self.bs();
        let dev = self.be.dev.clone();
        let sums = self.be.alloc.sums.handle();
        let i = self.inode(ino)?;
        check_file(i)?;
        read_into(i, dev.as_ref(), &sums, bs, offset, out)
    }

    pub fn write(&mut self, ino: Ino, offset: u64, data: &[u8]) -> Result<usize> {
        let i = self.inode(ino)?;
        check_file(i)?;
        super::flags::may_write(&i.attrs, offset)?;
        if data.is_empty() {
            return Ok(0);
        }
        self.copy_to_pages(ino, offset, data)?;
        Ok(data.len())
    }

    /// Put `data` at `offset` into dirty pages and extend the size.
    pub(super) fn copy_to_pages(&mut self, ino: Ino, offset: u64, data: &[u8]) -> Result<()> {
        let bs = self.bs();
        let end = write_end(bs, offset, data.len())?;
        let (dev, held) = (self.be.dev.clone(), self.be.alloc.held_upto);
        let i = self.inode(ino)?;
        let new =
            new_pages(i, bs, offset, end) - preallocated_pages(i, dev.as_ref(), bs, (offset, end), held)?;
        if new == 0 {
            // Its blocks were preallocated: a full volume takes it still,
            // as it takes a truncate (see `begin_release`).
            self.begin_release(2)?;
        } else {
            self.begin_change(new + 2)?;
        }
        let mut i = self.cache.lock(ino).ok_or(Error::Posix(Errno::ENOENT))?;
        self.copy_into(&mut i, offset, end, data)
    }

    /// Put `data` at `offset..end` into `i`'s dirty pages and extend its
    /// size, the space reserved already: the write itself, for the
    /// exclusive and the shared path alike (the caller holds `i`'s lock).
    pub(super) fn copy_into(&self, i: &mut Inode, offset: u64, end: u64, data: &[u8]) -> Result<()> {
        let bs = self.bs();
        let dev = self.be.dev.as_ref();
        let delta = self.be.delta;
        let summed = self.be.sb.data_sums;
        let first = offset / bs;
        let last = (end - 1) / bs;
        let (old_size, clean_before) = (i.attrs.size, i.pages.clean_len());
        let mut newly_dirty = 0;
        // Only the first and the last block can be written in part: read
        // what they hold before anything changes, so that a failed read
        // leaves the file as it was.
        let mut fills = [None, None];
        for (k, lblock) in [first, last].into_iter().enumerate() {
            let start = lblock * bs;
            let (from, to) = (offset.max(start) - start, end.min(start + bs) - start);
            let whole = from == 0 && to == bs;
            if !(whole || i.pages.get(lblock).is_some() || start >= old_size || (k == 1 && last == first)) {
                fills[k] = Some(block_of(i, dev, &self.be.alloc.sums.handle(), bs, lblock)?);
            }
        }
        for lblock in first..=last {
            let start = lblock * bs;
            let from = offset.max(start) - start;
            let to = end.min(start + bs) - start;
            let whole = from == 0 && to == bs;
            let fill = if lblock == first {
                fills[0].take()
            } else if lblock == last {
                fills[1].take()
            } else {
                None
            };
            if !i.pages.is_dirty(lblock) {
                newly_dirty += bs;
            }
            let src = &data[(start + from - offset) as usize..(start + to - offset) as usize];
            // A new page that the write fills whole is made from the data
            // itself: not zeroed first, nor copied twice.
            let fresh = whole && i.pages.get(lblock).is_none();
            let page = i.pages.page_mut(lblock, delta, || match fill {
                _ if fresh => src.to_vec(),
                Some(fill) => fill,
                None => vec![0u8; bs as usize],
            });
            if !fresh {
                page[from as usize..to as usize].copy_from_slice(src);
            }
            // A write that finishes the page takes its checksum now, while
            // the bytes are in cache, not at the commit (FORMAT.md 7.6).
            if summed && to == bs {
                let sum = crate::structures::extent::block_sum(page);
                i.pages.set_sum(lblock, sum);
            }
        }
        self.dirty_bytes.fetch_add(newly_dirty, Relaxed);
        let now = Timespec::now();
        let clean_after = i.pages.clean_len();
        i.attrs.size = i.attrs.size.max(end);
        if last == i.attrs.size.saturating_sub(1) / bs {
            check_tail(i, bs);
        }
        i.attrs.mtime = now;
        i.attrs.ctime = now;
        self.touch_locked(i);
        if i.data_delta != delta {
            i.data_delta = delta;
            self.data_changed.lock().insert(i.ino);
        }
        if clean_before != clean_after {
            self.clean.lock().changed(i.ino, clean_before, clean_after, bs);
        }
        Ok(())
    }

    /// Set the size of a regular file: drop data beyond it (F1, asserted
    /// at the end) or extend with a hole.
    pub(super) fn truncate(&mut self, ino: Ino, size: u64) -> Result<()> {
        let bs = self.bs();
        if size > max_file_size(bs) {
            return err(Errno::EFBIG);
        }
        let dev = self.be.dev.clone();
        let i = self.inode(ino)?;
        let (old, clean_before) = (i.attrs.size, i.pages.clean_len());
        if size < old {
            let keep = size.div_ceil(bs);
            let lblock = size / bs;
            // A hole or a preallocated block reads as zeros already.
            let held = i.pages.content(lblock).is_some()
                || extent::lookup(&mut i.tree, dev.as_ref(), lblock)?.is_some_and(|e| !e.unwritten);
            if !size.is_multiple_of(bs) && held {
                // Zero the tail of the last kept block (F1).
                let mut b = self.block(ino, lblock)?;
                b[(size % bs) as usize..].fill(0);
                let delta = self.be.delta;
                let was_clean = !self.inode(ino)?.pages.is_dirty(lblock);
                *self.inode(ino)?.pages.page_mut(lblock, delta, Vec::new) = b;
                if was_clean {
                    self.dirty_bytes.fetch_add(bs, Relaxed);
                }
            }
            let i = self.inode(ino)?;
            let dropped = i.pages.truncate(keep) as u64;
            let freed = extent::punch(&mut i.tree, dev.as_ref(), keep, u64::MAX)?;
            let n: u64 = freed.iter().map(|f| f.1).sum();
            i.attrs.blocks = i.attrs.blocks.saturating_sub(n);
            for (s, c, born) in freed {
                self.be.alloc.free_born(s, c, born);
            }
            let d = self.dirty_bytes.get_mut();
            *d = d.saturating_sub(dropped * bs);
            let clean_after = self.inode(ino)?.pages.clean_len();
            self.clean.get_mut().changed(ino, clean_before, clean_after, bs);
        }
        let i = self.inode(ino)?;
        i.attrs.size = size;
        check_tail(i, bs);
        self.data_changed.get_mut().insert(ino);
        Ok(())
    }

    /// Take away `strip`'s privileges from a non-directory (see
    /// [`StripPrivs`]). Called right after a write or setattr of `ino`,
    /// whose change already reserved space for its inode.
    pub fn strip_privs(&mut self, ino: Ino, strip: StripPrivs) -> Result<()> {
        let i = self.inode(ino)?;
        if super::shared::strip_locked(i, strip) {
            i.attrs.ctime = Timespec::now();
            self.touch(ino);
        }
        Ok(())
    }

    pub fn setattr(&mut self, ino: Ino, set: &SetAttr) -> Result<Attr> {
        super::flags::may_change(&self.inode(ino)?.attrs)?;
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
        set_attrs(self.inode(ino)?, set, now);
        self.touch(ino);
        self.getattr(ino)
    }
}

// Each test breaks F1 in cache and shows that the next size change
// catches it.
#[cfg(test)]
#[cfg(debug_assertions)]
mod tests {
    use crate::backend::mkfs;
    use crate::device::{Device, MemDevice};
    use crate::frontend::Volume;
    use crate::types::*;
    use std::sync::Arc;

    /// A volume holding a 100-byte file whose cached last block has a
    /// byte set past the size (F1 broken in cache).
    fn broken_tail() -> (Volume, Ino) {
        let dev: Arc<dyn Device> = Arc::new(MemDevice::new(1024, 1 << 12));
        mkfs::format(dev.as_ref(), &FormatOptions::default()).unwrap();
        let mut vol = Volume::open(dev, OpenOptions::default()).unwrap();
        let ino = vol
            .mknod(ROOT_INO, b"f", libc::S_IFREG | 0o644, 0, 0, 0)
            .unwrap()
            .ino;
        vol.write(ino, 0, &[1; 100]).unwrap();
        let delta = vol.be.delta;
        vol.inode(ino).unwrap().pages.page_mut(0, delta, Vec::new)[500] = 7;
        (vol, ino)
    }

    #[test]
    #[should_panic(expected = "F1")]
    fn an_extending_write_over_a_dirty_tail_fails_f1() {
        let (mut vol, ino) = broken_tail();
        vol.write(ino, 100, &[2]).unwrap();
    }

    #[test]
    #[should_panic(expected = "F1")]
    fn a_size_change_over_a_dirty_tail_fails_f1() {
        let (mut vol, ino) = broken_tail();
        let set = SetAttr {
            size: Some(200),
            ..SetAttr::default()
        };
        vol.setattr(ino, &set).unwrap();
    }
}
