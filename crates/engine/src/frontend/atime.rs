//! Frontend layer: access times, under the shared delta guard. A read or a
//! listing moves one as the mount's rule says ([`AtimeRule`]), lazily: the
//! inode joins the open delta's dirty set (its first change there only)
//! but the delta is not marked changed, so the periodic commit skips a
//! delta that holds access times alone (`lazy_changed`); a sync, an
//! unmount or the next real change writes them — or the periodic commit,
//! once they have filled the room the delta may take (each first one of
//! an inode promises a change's space). A file read moves it under
//! the lock the read takes anyway (`Volume::plan_unlocked`), so a read
//! visits its inode once.
//!
//! Calls the inode cache's dirty set and the space reservation
//! (`space.rs`).

use super::Volume;
use crate::cache::Inode;
use crate::error::Result;
use crate::types::*;
use std::sync::atomic::Ordering::Relaxed;

impl Volume {
    /// A read or listing of `ino` at `now`: its access time moves if
    /// `rule` says so (true then). The change rides in the current delta;
    /// `None` when the volume has no room for a change without a commit.
    pub fn accessed_shared(&self, ino: Ino, rule: AtimeRule, now: Timespec) -> Option<Result<bool>> {
        let mut i = or_fail!(self.inode_shared(ino));
        self.access_locked(&mut i, rule, now)
    }

    /// [`Volume::accessed_shared`] of `i`, which the caller holds locked.
    /// An inode the open delta carries already costs nothing more: its
    /// commit writes its record whatever else changed, and its first
    /// change there reserved the space for that. Any other takes a change's
    /// reservation (without marking the delta changed) and joins the dirty
    /// set. When the open delta has no room left for that, the access time
    /// stays and the delta counts as changed: the periodic commit takes it
    /// (with the access times it holds), and those after it move again.
    pub(super) fn access_locked(
        &self,
        i: &mut Inode,
        rule: AtimeRule,
        now: Timespec,
    ) -> Option<Result<bool>> {
        let a = &i.attrs;
        // (A volume a failed commit left read-only keeps its times.)
        if self.be.read_only
            || self.failed
            || a.flags & flags::NOATIME != 0
            || !rule.moves(a.atime, a.mtime, a.ctime, now)
        {
            return Some(Ok(false));
        }
        if i.delta != self.be.delta {
            match self.reserve_shared_as(3, false) {
                Some(Ok(())) => {}
                Some(Err(e)) => return Some(Err(e)),
                None => {
                    // The delta has no room for more: let the periodic
                    // commit take it, so that those after it move again.
                    self.changed.store(true, Relaxed);
                    return None;
                }
            }
            // Lazily: the next commit carries it, a periodic one not for it.
            i.delta = self.be.delta;
            self.cache.mark_dirty(i.ino);
            if !self.lazy_changed.load(Relaxed) {
                self.lazy_changed.store(true, Relaxed);
            }
        }
        i.attrs.atime = now;
        Some(Ok(true))
    }
}
