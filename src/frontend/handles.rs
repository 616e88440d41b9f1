//! Open handles and orphans: an inode whose last name is removed while a
//! handle is open stays alive (in cache) until the last handle is released,
//! so reads and writes through open file descriptors keep working, as POSIX
//! requires. SEEK_DATA / SEEK_HOLE also live here.

use super::Volume;
use crate::api::types::*;
use crate::error::{err, Errno, Result};
use crate::structures::extent;

impl Volume {
    pub fn open_handle(&mut self, ino: Ino) -> Result<()> {
        self.inode(ino)?;
        *self.handles.entry(ino).or_insert(0) += 1;
        Ok(())
    }

    pub fn release_handle(&mut self, ino: Ino) -> Result<()> {
        let left = match self.handles.get_mut(&ino) {
            Some(n) => {
                *n = n.saturating_sub(1);
                *n
            }
            None => return Ok(()),
        };
        if left == 0 {
            self.handles.remove(&ino);
            if self.orphans.remove(&ino) && !self.be.read_only {
                self.free_inode(ino)?;
            }
        }
        Ok(())
    }

    /// Whether `ino` must outlive its last name.
    pub(super) fn is_open(&self, ino: Ino) -> bool {
        self.handles.get(&ino).is_some_and(|n| *n > 0)
    }

    pub fn seek_data(&mut self, ino: Ino, offset: u64, data: bool) -> Result<u64> {
        let bs = self.bs();
        let dev = self.be.dev.clone();
        let i = self.inode(ino)?;
        if i.kind() != FileType::Regular {
            return err(Errno::EINVAL);
        }
        let size = i.attrs.size;
        if offset >= size {
            return err(Errno::ENXIO);
        }
        let mut lblock = offset / bs;
        let last = (size - 1) / bs;
        while lblock <= last {
            let has =
                i.pages.get(lblock).is_some() || extent::lookup(&mut i.tree, dev.as_ref(), lblock)?.is_some();
            if has == data {
                return Ok((lblock * bs).max(offset));
            }
            // Skip ahead: to the next extent start (looking for data) or
            // past this extent (looking for a hole).
            let next = if data {
                let e = extent::next(&mut i.tree, dev.as_ref(), lblock + 1)?;
                let p = i.pages.next_after(lblock);
                match (e.map(|e| e.lblock), p) {
                    (Some(a), Some(b)) => a.min(b),
                    (Some(a), None) => a,
                    (None, Some(b)) => b,
                    (None, None) => last + 1,
                }
            } else {
                lblock + 1
            };
            lblock = next.max(lblock + 1);
        }
        if data {
            err(Errno::ENXIO)
        } else {
            Ok(size)
        }
    }
}
