//! Frontend layer: the scrub state record (`structures/scrub_state.rs`),
//! kept in the record of reserved inode 4 like any inode's attributes: a
//! change dirties the inode, and the next delta commit writes it, so the
//! record is exactly as crash-safe as every other inode record. The inode
//! has no name, no data and is never evicted (it is reserved); it exists
//! from the first time a state is written. The same record holds the
//! known-damage list a repair writes (attribute 14).
//!
//! Calls the cache (inodes) and the backend's inode table.

use super::Volume;
use crate::error::{err, Errno, Result};
use crate::structures::inode::InodeAttrs;
use crate::structures::scrub_state::{KnownDamage, ScrubState, MAX_KNOWN_DAMAGE, SCRUB_INO};
use crate::types::Timespec;

impl Volume {
    /// The device, shared (a scrub reads it beside the volume).
    pub fn device_arc(&self) -> std::sync::Arc<dyn crate::device::Device> {
        self.be.dev.clone()
    }

    /// The scrub state record, if the volume has one.
    pub fn scrub_state(&mut self) -> Result<Option<ScrubState>> {
        if let Some(i) = self.cache.get_mut(SCRUB_INO) {
            return Ok(i.attrs.scrub);
        }
        let dev = self.be.dev.clone();
        let Some((raw, leaf)) = self.be.itable.get_mut().get_at(dev.as_ref(), SCRUB_INO)? else {
            return Ok(None);
        };
        let attrs = InodeAttrs::decode(&raw, SCRUB_INO, leaf, &crate::structures::bounds(dev.as_ref()))?;
        Ok(attrs.scrub)
    }

    /// Replace the scrub state record; the next delta commit writes it.
    pub fn set_scrub_state(&mut self, state: ScrubState) -> Result<()> {
        self.scrub_inode()?;
        if let Some(i) = self.cache.get_mut(SCRUB_INO) {
            i.attrs.scrub = Some(state);
        }
        self.touch(SCRUB_INO);
        Ok(())
    }

    /// The data blocks a repair recorded as damaged (FORMAT.md 16.1).
    pub fn known_damage(&mut self) -> Result<Vec<KnownDamage>> {
        if let Some(i) = self.cache.get_mut(SCRUB_INO) {
            return Ok(i.attrs.damage.clone());
        }
        let dev = self.be.dev.clone();
        let Some((raw, leaf)) = self.be.itable.get_mut().get_at(dev.as_ref(), SCRUB_INO)? else {
            return Ok(Vec::new());
        };
        let attrs = InodeAttrs::decode(&raw, SCRUB_INO, leaf, &crate::structures::bounds(dev.as_ref()))?;
        Ok(attrs.damage)
    }

    /// Replace the known-damage list by `list` (sorted by block and cut to
    /// [`MAX_KNOWN_DAMAGE`] entries, one per block); a volume without a
    /// scrub state record gets one that says no scrub ran. The next delta
    /// commit writes it.
    pub fn set_known_damage(&mut self, list: &[KnownDamage]) -> Result<()> {
        let mut list = list.to_vec();
        list.sort();
        list.dedup_by_key(|d| d.block);
        list.truncate(MAX_KNOWN_DAMAGE);
        self.scrub_inode()?;
        if let Some(i) = self.cache.get_mut(SCRUB_INO) {
            i.attrs.scrub.get_or_insert_with(ScrubState::default);
            i.attrs.damage = list;
        }
        self.touch(SCRUB_INO);
        Ok(())
    }

    /// Repair: inode 4's record set back to what a scrub state record is
    /// (a regular file, link count 1, no data, no xattrs, flags or
    /// parent), keeping its scrub state (a fresh one if it lost it) and
    /// its known-damage list. Blocks it mapped become leaks, which the
    /// next check frees.
    pub fn repair_scrub_inode(&mut self) -> Result<()> {
        self.scrub_inode()?;
        if let Some(i) = self.cache.get_mut(SCRUB_INO) {
            let a = &mut i.attrs;
            a.mode = libc::S_IFREG | 0o600;
            a.nlink = 1;
            a.size = 0;
            a.blocks = 0;
            a.rdev = 0;
            a.parent = 0;
            a.flags = 0;
            a.root = Default::default();
            a.inline.clear();
            a.xattrs.clear();
            a.xattr_file = 0;
            a.scrub.get_or_insert_with(ScrubState::default);
        }
        self.touch(SCRUB_INO);
        Ok(())
    }

    /// Inode 4 in the cache, writable: its record as the table holds it,
    /// or a fresh one when it has none or it does not decode.
    fn scrub_inode(&mut self) -> Result<()> {
        if self.be.read_only {
            return err(Errno::EROFS);
        }
        if self.failed {
            return err(Errno::EIO);
        }
        if self.cache.contains(SCRUB_INO) {
            return Ok(());
        }
        let dev = self.be.dev.clone();
        let bounds = crate::structures::bounds(dev.as_ref());
        // A record that does not decode is replaced whole.
        let old = self.be.itable.get_mut().get_at(dev.as_ref(), SCRUB_INO)?;
        let attrs = match old.and_then(|(raw, leaf)| InodeAttrs::decode(&raw, SCRUB_INO, leaf, &bounds).ok())
        {
            Some(a) => a,
            None => {
                let now = Timespec::now();
                InodeAttrs {
                    mode: libc::S_IFREG | 0o600,
                    nlink: 1,
                    atime: now,
                    mtime: now,
                    ctime: now,
                    btime: now,
                    ..InodeAttrs::default()
                }
            }
        };
        self.cache.insert(crate::cache::Inode::new(SCRUB_INO, attrs));
        Ok(())
    }
}
