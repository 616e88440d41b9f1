//! API layer: access times. [`Fs::accessed`] moves one after a read or a
//! listing; [`Fs::read_into_accessed`] reads and moves it in one visit to
//! the inode (a FUSE read: the update costs no second lookup and lock).
//! Both are lazy and never wait for a commit (`frontend/atime.rs`).
//!
//! Calls the frontend (`Volume::accessed_shared`, the read planned with its
//! access time) through the shared delta guard.

use super::Fs;
use crate::error::Result;
use crate::types::*;

impl Fs {
    /// A read or listing of `ino` took place: its access time moves to now
    /// if `rule` says so (true then). A cheap change the current delta
    /// carries: it forces no commit of its own (not even the periodic
    /// one: [`Fs::commit_by_time`]), and never waits for one (a
    /// FUSE queue thread calls it after a read): on a volume too full to
    /// take a change without a commit first, and on a read-only one, the
    /// access time stays.
    pub fn accessed(&self, ino: Ino, rule: AtimeRule) -> Result<bool> {
        if rule == AtimeRule::Never {
            return Ok(false);
        }
        let now = Timespec::now();
        self.shared_vol()
            .accessed_shared(ino, rule, now)
            .unwrap_or(Ok(false))
    }

    /// [`Fs::read_into`] that moves `ino`'s access time as `rule` says, as
    /// [`Fs::accessed`] after it would, but under the file's lock the read
    /// takes anyway. The access time moves once the read is planned (its
    /// device reads may still fail, as the kernel moves it for a read that
    /// fails); one that cannot move stays, and the read goes on.
    pub fn read_into_accessed(
        &self,
        ino: Ino,
        offset: u64,
        out: &mut [u8],
        rule: AtimeRule,
    ) -> Result<usize> {
        let access = (rule != AtimeRule::Never).then(|| (rule, Timespec::now()));
        self.read_into_as(ino, offset, out, access)
    }
}
