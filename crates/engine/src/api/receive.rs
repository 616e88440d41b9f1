//! API layer: the operations a receiver of a replicated snapshot needs
//! beyond the POSIX ones (`tux3 receive`, crates/tools/src/stream): create
//! an inode under the number the source gave it, with the source's birth
//! time (and set that again); change a symlink's target or a device's
//! number in place; let numbers freed in this session be given out again;
//! start a commit without waiting; take the received snapshot with the
//! receive's token removed in the same unify. The frontend does the work
//! (`frontend/receive.rs`).

use super::Fs;
use crate::error::Result;
use crate::types::{Attr, Ino, SnapOrigin, SnapshotInfo, Timespec};

impl Fs {
    /// Create `parent/name` as inode number `ino`: `mode` carries the
    /// `S_IFMT` type bits (a directory, a symlink with its `target`, or
    /// any other node); the birth time is `btime`. Errors as
    /// [`Fs::mknod`], and EEXIST when the number is taken, EBUSY when it
    /// was freed in this session (commit, then
    /// [`Fs::forget_freed_numbers`]), EINVAL for a number below 16 or
    /// from 2^48 on.
    #[allow(clippy::too_many_arguments)]
    pub fn create_numbered(
        &self,
        parent: Ino,
        name: &[u8],
        ino: Ino,
        mode: u32,
        rdev: u64,
        uid: u32,
        gid: u32,
        btime: Timespec,
        target: Option<&[u8]>,
    ) -> Result<Attr> {
        self.warm(parent);
        self.vol()
            .create_numbered(parent, name, ino, mode, rdev, uid, gid, btime, target)
    }

    /// Set the birth time of `ino`, which no POSIX call sets: a replica
    /// keeps its source's.
    pub fn set_btime(&self, ino: Ino, btime: Timespec) -> Result<()> {
        self.warm(ino);
        self.vol().set_btime(ino, btime)
    }

    /// Make symlink `ino` point to `target` (EINVAL if it is no symlink),
    /// in place: a replica's symlink whose number the source gave to
    /// another symlink.
    pub fn set_symlink_target(&self, ino: Ino, target: &[u8]) -> Result<()> {
        self.warm(ino);
        self.vol().set_symlink_target(ino, target)
    }

    /// Set the device number of character or block device `ino` (EINVAL
    /// for any other type).
    pub fn set_rdev(&self, ino: Ino, rdev: u64) -> Result<()> {
        self.warm(ino);
        self.vol().set_rdev(ino, rdev)
    }

    /// Take the received snapshot `name`, recording `origin` (as
    /// [`Fs::snapshot_create_received`]), and remove the root's xattr
    /// `token` (the receive's own state) in the same unify, with no
    /// commit between: a crash leaves both or neither.
    pub fn snapshot_create_received_clearing(
        &self,
        name: &[u8],
        origin: SnapOrigin,
        token: &[u8],
    ) -> Result<SnapshotInfo> {
        self.shared
            .with_commit_lock(|| self.vol().take_received_snapshot(name, origin, token))?;
        self.shared_vol()
            .snapshot_info(name)
            .ok_or(crate::error::Error::Posix(crate::error::Errno::EIO))
    }

    /// Let the numbers freed since open be given out again by
    /// [`Fs::create_numbered`]. Only for a volume no FUSE kernel serves
    /// (the kernel may still know an old inode by its number), and only
    /// after a [`Fs::sync`] that made their freeing durable.
    pub fn forget_freed_numbers(&self) {
        self.vol().forget_freed_numbers();
    }

    /// Start a commit of everything done so far without waiting for it:
    /// the background committer's turn (a volume opened with a
    /// `commit_interval`). Returns false, and does nothing, on a volume
    /// without one: then only [`Fs::sync`] or the dirty limit commits.
    /// What a later commit makes durable always includes what this one
    /// would have: operations join deltas in the order they were made.
    pub fn commit_soon(&self) -> bool {
        match &self.wake_committer {
            Some(wake) => {
                self.shared
                    .commit_asked
                    .store(true, std::sync::atomic::Ordering::Release);
                let _ = wake.try_send(());
                true
            }
            None => false,
        }
    }
}
