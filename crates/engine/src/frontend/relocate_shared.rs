//! Frontend layer: keeping clones shared through a shrink. The walk of
//! `api/relocate.rs` moves a block that several mappings share with the
//! first file it finds mapping it (the *claimer*) and leaves the others
//! where they are; once the claimer's copy is on the device, each other
//! mapping is pointed at it here ([`Volume::repoint_moved`]), one step
//! under the exclusive delta guard, as a clone would share it.
//!
//! A mapping is pointed at the copy only when, under the guard, the bytes
//! the claimer maps now are the old blocks' bytes (compared on the
//! device) and the other file still maps the old blocks themselves with
//! no page of its own unwritten there: then both read the same bytes
//! before and after. Anything else (either file written, truncated or
//! gone since) keeps its blocks, and the shrink's next pass moves them
//! as it moves any other data.
//!
//! Calls the cache (inodes, through `on_device`) and `clone_blocks`
//! (frontend/clone.rs), and reads the device.

use super::clone::BlockRun;
use super::Volume;
use crate::error::{Errno, Error, Result};
use crate::types::Ino;

/// A run of old blocks past the end, as a claimer maps it: `old`'s
/// `count` blocks are what `claimer` mapped from `lblock` on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct MovedRun {
    pub old: u64,
    pub count: u64,
    pub claimer: Ino,
    pub lblock: u64,
}

impl Volume {
    /// Point each of `others` (`(ino, lblock)`: a file mapping `run.old`'s
    /// blocks from `lblock` on) at what `run.claimer` maps now, where that
    /// is a copy of the old blocks below `limit`. `old_bytes` are the old
    /// blocks' bytes if read beforehand (a shrink's: they cannot change,
    /// nothing is allocated past the limit); else they are read here,
    /// once a file is found still mapping them (so they are in use, and
    /// hold what that file reads). Returns the blocks repointed (a
    /// multiple of `run.count`); none if the claimer's copy is not what
    /// was moved.
    pub fn repoint_moved(
        &mut self,
        run: MovedRun,
        others: &[(Ino, u64)],
        old_bytes: Option<&[u8]>,
        limit: u64,
    ) -> Result<u64> {
        let MovedRun {
            old,
            count,
            claimer,
            lblock,
        } = run;
        let copy = match self.on_device(claimer, lblock, count) {
            Ok(Some(c)) => c.at,
            Ok(None) | Err(Error::Posix(Errno::ENOENT)) => return Ok(0),
            Err(e) => return Err(e),
        };
        // Not moved (the claimer still maps the old blocks), or moved to
        // where a shrink cannot keep it.
        let unmoved = copy.iter().enumerate().all(|(k, &b)| b == old + k as u64);
        if unmoved || copy.iter().any(|&b| b >= limit) {
            return Ok(0);
        }
        let mut checked = match old_bytes {
            Some(bytes) if !self.same_bytes(&copy, bytes)? => return Ok(0),
            Some(_) => true,
            None => false,
        };
        let mut done = 0;
        for &(ino, at) in others {
            let maps_old = match self.on_device(ino, at, count) {
                Ok(Some(m)) => m.at.iter().enumerate().all(|(k, &b)| b == old + k as u64),
                Ok(None) | Err(Error::Posix(Errno::ENOENT)) => false,
                Err(e) => return Err(e),
            };
            if !maps_old {
                continue;
            }
            if !checked {
                let mut bytes = vec![0u8; (count * self.bs()) as usize];
                self.be.dev.read(old, &mut bytes)?;
                if !self.same_bytes(&copy, &bytes)? {
                    return Ok(done);
                }
                checked = true;
            }
            let size = self.getattr(ino)?.size;
            let share = BlockRun {
                src: claimer,
                src_block: lblock,
                dst: ino,
                dst_block: at,
                count,
            };
            self.clone_blocks(share, size, false)?;
            done += count;
        }
        Ok(done)
    }

    /// Whether the device's blocks `at` (one address per block) hold
    /// `want`, block for block.
    fn same_bytes(&self, at: &[u64], want: &[u8]) -> Result<bool> {
        let bs = self.bs() as usize;
        if want.len() != at.len() * bs {
            return Ok(false);
        }
        let dev = self.be.dev.clone();
        let mut buf = vec![0u8; want.len()];
        let mut k = 0;
        while k < at.len() {
            // Contiguous addresses are one read.
            let mut n = 1;
            while k + n < at.len() && at[k + n] == at[k] + n as u64 {
                n += 1;
            }
            dev.read(at[k], &mut buf[k * bs..(k + n) * bs])?;
            k += n;
        }
        Ok(buf == want)
    }
}
