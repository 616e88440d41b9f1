//! Frontend layer: the scrub state record (`structures/scrub_state.rs`),
//! kept in the record of reserved inode 4 like any inode's attributes: a
//! change dirties the inode, and the next delta commit writes it, so the
//! record is exactly as crash-safe as every other inode record. The inode
//! has no name, no data and is never evicted (it is reserved); it exists
//! from the first time a state is written.
//!
//! Calls the cache (inodes) and the backend's inode table.

use super::Volume;
use crate::error::{err, Errno, Result};
use crate::structures::inode::InodeAttrs;
use crate::structures::scrub_state::{ScrubState, SCRUB_INO};
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
        if self.be.read_only {
            return err(Errno::EROFS);
        }
        if self.failed {
            return err(Errno::EIO);
        }
        if !self.cache.contains(SCRUB_INO) {
            let dev = self.be.dev.clone();
            let bounds = crate::structures::bounds(dev.as_ref());
            // A record that does not decode is replaced whole.
            let old = self.be.itable.get_mut().get_at(dev.as_ref(), SCRUB_INO)?;
            let attrs =
                match old.and_then(|(raw, leaf)| InodeAttrs::decode(&raw, SCRUB_INO, leaf, &bounds).ok()) {
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
        }
        if let Some(i) = self.cache.get_mut(SCRUB_INO) {
            i.attrs.scrub = Some(state);
        }
        self.touch(SCRUB_INO);
        Ok(())
    }
}
