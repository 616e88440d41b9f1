//! Frontend layer: what receiving a replicated snapshot needs beyond the
//! POSIX operations — an inode created under the number its source gave
//! it, so that a replica mirrors its source's inode numbers (a send
//! stream names inodes by number, and an incremental stream or a resumed
//! one needs no map from the source's numbers to the replica's), with
//! the source's birth time (and that time set again later); a symlink's
//! target and a device's number changed in place; the numbers freed in
//! this session forgotten, so that a number the source freed and gave out
//! again can be given out again here; and the received snapshot taken
//! with the receive's token removed in the same unify.
//!
//! Calls the namespace, file, xattr and snapshot operations (`namespace.rs`:
//! the common part of every create; `file.rs`: truncate) and the inode
//! table.

use super::Volume;
use crate::backend::FIRST_INO;
use crate::error::{err, Errno, Result};
use crate::types::*;

impl Volume {
    /// Create `parent/name` as inode `ino` (`mode` with its type bits; a
    /// symlink takes its `target`), born at `btime`. EEXIST if the name
    /// or the number is taken, EBUSY if the number was freed in this
    /// session (see [`Volume::forget_freed_numbers`]), EINVAL for a number
    /// outside `FIRST_INO ..< 2^48` or a type and target that disagree.
    #[allow(clippy::too_many_arguments)]
    pub fn create_numbered(
        &mut self,
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
        let kind = FileType::from_mode(mode).ok_or(crate::error::Error::Posix(Errno::EINVAL))?;
        let symlink = kind == FileType::Symlink;
        if symlink != target.is_some() {
            return err(Errno::EINVAL);
        }
        if let Some(t) = target {
            super::namespace::check_target(t)?;
        }
        let mode = if symlink { libc::S_IFLNK | 0o777 } else { mode };
        let ino = self.new_inode(parent, name, mode, rdev, uid, gid, Some(ino))?;
        if let Some(t) = target {
            self.copy_to_pages(ino, 0, t)?;
        }
        let i = self.inode(ino)?;
        i.attrs.btime = btime;
        self.touch(ino);
        self.getattr(ino)
    }

    /// Inode number `ino`, checked free for [`Volume::create_numbered`]
    /// and counted as given out.
    pub(super) fn claim_ino(&mut self, ino: Ino) -> Result<Ino> {
        if !(FIRST_INO..1 << 48).contains(&ino) {
            return err(Errno::EINVAL);
        }
        if self.books.get_mut().freed_inos.contains(&ino) {
            return err(Errno::EBUSY);
        }
        // A number the source never sends may hold one of our xattr files.
        self.move_xattr_file(ino)?;
        let dev = self.be.dev.clone();
        if self.cache.contains(ino) || self.be.itable.get_mut().get(dev.as_ref(), ino)?.is_some() {
            return err(Errno::EEXIST);
        }
        let max = self.max_ino.get_mut();
        *max = (*max).max(ino);
        Ok(ino)
    }

    /// Set the birth time of `ino` (which no POSIX call sets): a replica
    /// keeps its source's.
    pub fn set_btime(&mut self, ino: Ino, btime: Timespec) -> Result<()> {
        self.inode(ino)?;
        self.begin_change(1)?;
        self.inode(ino)?.attrs.btime = btime;
        self.touch(ino);
        Ok(())
    }

    /// Make symlink `ino` point to `target` (a number freed and given out
    /// again to another symlink: its replica is this one, changed).
    pub fn set_symlink_target(&mut self, ino: Ino, target: &[u8]) -> Result<()> {
        super::namespace::check_target(target)?;
        if self.inode(ino)?.kind() != FileType::Symlink {
            return err(Errno::EINVAL);
        }
        self.begin_change(3)?;
        self.truncate(ino, 0)?;
        self.copy_to_pages(ino, 0, target)?;
        self.touch(ino);
        Ok(())
    }

    /// Set the device number of character or block device `ino`.
    pub fn set_rdev(&mut self, ino: Ino, rdev: u64) -> Result<()> {
        let kind = self.inode(ino)?.kind();
        if !matches!(kind, FileType::CharDevice | FileType::BlockDevice) {
            return err(Errno::EINVAL);
        }
        self.begin_change(1)?;
        self.inode(ino)?.attrs.rdev = rdev;
        self.touch(ino);
        Ok(())
    }

    /// Remove the root's xattr `token` (if there; the root's ctime stays
    /// what it was) and ask for snapshot `name` of origin `origin`, then
    /// unify: the caller holds the commit lock, so the removal is durable
    /// only with the snapshot.
    pub fn take_received_snapshot(&mut self, name: &[u8], origin: SnapOrigin, token: &[u8]) -> Result<()> {
        let root = crate::types::ROOT_INO;
        let ctime = self.inode(root)?.attrs.ctime;
        match self.removexattr(root, token) {
            Err(e) if e.errno() == Errno::ENODATA => {}
            r => r?,
        }
        self.inode(root)?.attrs.ctime = ctime;
        self.snapshot_request(name, Some(origin))?;
        self.commit(true)
    }

    /// Let numbers freed in this session be given out again by
    /// [`Volume::create_numbered`]. Only for a volume no FUSE kernel
    /// serves (it may still know an old inode by its number), and only
    /// once the deltas that freed them are committed: the caller syncs
    /// first.
    pub fn forget_freed_numbers(&mut self) {
        self.books.get_mut().freed_inos.clear();
    }
}
