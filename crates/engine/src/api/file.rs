//! API layer: a file's data and attributes — getattr, setattr (a size
//! change truncates or extends), read, write with its backpressure,
//! SEEK_DATA/SEEK_HOLE, extended attributes, and the handles that keep a
//! file with no name alive. Each runs under the shared delta guard when the
//! frontend can (`frontend/shared.rs`) and exclusively otherwise; a read's
//! device I/O runs with no guard held.
//!
//! Calls the frontend (`Volume::read`, `write`, `write_pressure`,
//! `setattr`, the xattr and handle calls and their shared forms), the
//! commit scheduling (a write waits for a commit under dirty pressure) and
//! the rest of the API (`Fs::checked` for data checksums, `Fs::synced` for
//! a file flagged sync, `Fs::accessed`).

use super::{held, Fs, COLD_ROUNDS};
use crate::error::Result;
use crate::frontend::{Pressure, Staged, TreeNeed};
use crate::types::{AtimeRule, Attr, Ino, SetAttr, StripPrivs, Timespec, XattrMode};

impl Fs {
    /// Attributes of `ino`.
    pub fn getattr(&self, ino: Ino) -> Result<Attr> {
        self.warm(ino);
        if let Some(r) = self.shared_vol().getattr_shared(ino, false) {
            return r;
        }
        self.vol().getattr(ino)
    }

    /// [`Fs::getattr`], and a handle taken on `ino` unless it is a
    /// directory, in one step (as [`Fs::lookup_held`]): for an entry of a
    /// listing the kernel will count as a lookup.
    pub fn getattr_held(&self, ino: Ino) -> Result<Attr> {
        self.warm(ino);
        if let Some(r) = self.shared_vol().getattr_shared(ino, true) {
            return r;
        }
        let mut v = self.vol();
        let attr = v.getattr(ino)?;
        held(&mut v, attr, true)
    }

    /// Change attributes of `ino`; a size change truncates or extends.
    pub fn setattr(&self, ino: Ino, set: &SetAttr) -> Result<Attr> {
        self.setattr_stripping(ino, set, StripPrivs::Nothing)
    }

    /// [`Fs::setattr`] that also takes away `strip`'s privileges from a
    /// non-directory, in the same change (after `set`'s mode, if any).
    pub fn setattr_stripping(&self, ino: Ino, set: &SetAttr, strip: StripPrivs) -> Result<Attr> {
        let r = self.setattr_now(ino, set, strip);
        self.synced(ino, r)
    }

    fn setattr_now(&self, ino: Ino, set: &SetAttr, strip: StripPrivs) -> Result<Attr> {
        self.warm(ino);
        if let Some(r) = self.shared_vol().setattr_shared(ino, set, strip) {
            return r;
        }
        if let Some(size) = set.size {
            // A truncate that cuts reads the extent map, and the block it
            // cuts into, under the exclusive guard.
            self.warm_tree(ino, TreeNeed::Cut(size));
            self.warm_tail(ino, size);
        }
        let mut vol = self.vol();
        vol.setattr(ino, set)?;
        vol.strip_privs(ino, strip)?;
        vol.getattr(ino)
    }

    /// Take a handle on `ino`: a file was opened, or the kernel looked it
    /// up. While any handle is held, removing its last name keeps the inode
    /// (an orphan) until the last one is released.
    pub fn open_handle(&self, ino: Ino) -> Result<()> {
        if let Some(r) = self.shared_vol().open_handle_shared(ino) {
            return r;
        }
        self.vol().open_handle(ino)
    }

    /// A handle of `ino` was closed; frees an orphan after its last handle.
    pub fn release_handle(&self, ino: Ino) -> Result<()> {
        self.release_handles(ino, 1)
    }

    /// Release `count` handles of `ino` at once (the kernel forgetting
    /// `count` lookups); frees an orphan after its last handle. Releasing
    /// more than are held releases them all.
    pub fn release_handles(&self, ino: Ino, count: u64) -> Result<()> {
        if let Some(r) = self.shared_vol().release_handles_shared(ino, count) {
            return r;
        }
        self.vol().release_handles(ino, count)
    }

    /// `lseek` with `SEEK_DATA` (`data`) or `SEEK_HOLE`: the first offset at
    /// or after `offset` that holds data (or lies in a hole). ENXIO past the
    /// end of file.
    pub fn seek_data(&self, ino: Ino, offset: u64, data: bool) -> Result<u64> {
        self.warm(ino);
        if let Some(r) = self.warming(|v, s| v.seek_data_shared(ino, offset, data, s)) {
            return r;
        }
        self.vol().seek_data(ino, offset, data)
    }

    /// Read up to `size` bytes at `offset`; short only at end of file.
    pub fn read(&self, ino: Ino, offset: u64, size: usize) -> Result<Vec<u8>> {
        // The shared guard is let go at the end of the statement: the
        // device reads run without it.
        self.warm(ino);
        let planned = self.warming(|v, s| v.plan_read_shared(ino, offset, size, s));
        if let Some(r) = planned {
            let r = r.and_then(|p| p.read());
            return self.checked(r).map(|(n, mut out)| {
                out.truncate(n);
                out
            });
        }
        let r = self.vol().read(ino, offset, size);
        self.checked(r)
    }

    /// Read into `out` at `offset`: the number of bytes read, short only at
    /// end of file. Saves [`Fs::read`]'s buffer: file data goes straight
    /// from the device (or the dirty pages) into `out`.
    pub fn read_into(&self, ino: Ino, offset: u64, out: &mut [u8]) -> Result<usize> {
        self.read_into_as(ino, offset, out, None)
    }

    /// [`Fs::read_into`]; with `access`, the read moves `ino`'s access
    /// time as that rule says at that time (`api/atime.rs`).
    pub(super) fn read_into_as(
        &self,
        ino: Ino,
        offset: u64,
        out: &mut [u8],
        access: Option<(AtimeRule, Timespec)>,
    ) -> Result<usize> {
        self.warm(ino);
        let mut staged = Staged::default();
        for _ in 0..COLD_ROUNDS {
            let planned = self
                .shared_vol()
                .plan_read_into_shared(ino, offset, out, &staged, access);
            match planned {
                Some(Ok(Ok(p))) => return self.checked(p.read().map(|(n, _)| n)),
                Some(Ok(Err(cold))) => self.read_cold(cold, &mut staged),
                Some(Err(e)) => return Err(e),
                None => break,
            }
        }
        let r = self.vol().read_into(ino, offset, out);
        if let (Ok(_), Some((rule, _))) = (&r, access) {
            // A read the shared path could not plan: its access time after
            // it (one that cannot move stays, as there).
            let _ = self.accessed(ino, rule);
        }
        self.checked(r)
    }

    /// Write `data` at `offset`, extending the file as needed. Returns the
    /// number of bytes written (all of them, or an error).
    ///
    /// Backpressure (see
    /// [`OpenOptions::dirty_limit`](crate::types::OpenOptions::dirty_limit)):
    /// a write that would take dirty file data past the limit first waits
    /// for the commit in flight, or commits the open delta itself when none
    /// is. ENOSPC while a commit is in flight is retried once it is durable
    /// (space it pins comes back, and the write may then commit to make
    /// room).
    pub fn write(&self, ino: Ino, offset: u64, data: &[u8]) -> Result<usize> {
        self.write_stripping(ino, offset, data, StripPrivs::Nothing)
    }

    /// [`Fs::write`] that also takes away `strip`'s privileges, in the same
    /// change: what a file server does for a write by a caller it knows.
    /// A write into part of a block whose data fails its checksum fails
    /// with EIO, counted and logged as a read's would be.
    pub fn write_stripping(&self, ino: Ino, offset: u64, data: &[u8], strip: StripPrivs) -> Result<usize> {
        let r = self.write_unchecked(ino, offset, data, strip);
        let r = self.checked(r);
        self.synced(ino, r)
    }

    fn write_unchecked(&self, ino: Ino, offset: u64, data: &[u8], strip: StripPrivs) -> Result<usize> {
        self.warm(ino);
        if let Some(r) = self.shared_vol().write_shared(ino, offset, data, strip) {
            let w = r?;
            if let (true, Some(wake)) = (w.wants_commit, &self.wake_committer) {
                let _ = wake.try_send(());
            }
            return Ok(w.bytes);
        }
        loop {
            let mut vol = self.vol();
            match vol.write_pressure(ino, offset, data.len()) {
                Pressure::Clear => {
                    let in_flight = vol.commit_in_flight();
                    // P5: a write that fits leaves the dirty data held
                    // within the limit (one that does not is a write alone,
                    // or one no commit could make room for).
                    let fits = cfg!(debug_assertions) && vol.write_fits(ino, offset, data.len());
                    let written = vol.write(ino, offset, data).and_then(|n| {
                        if n > 0 {
                            vol.strip_privs(ino, strip)?;
                        }
                        Ok(n)
                    });
                    let n = match written {
                        Err(e) if in_flight && e.errno() == crate::error::Errno::ENOSPC => {
                            drop(vol);
                            self.waiting(|| self.shared.with_commit_lock(|| ()));
                            continue;
                        }
                        r => r?,
                    };
                    debug_assert!(
                        !fits || vol.held_bytes() <= vol.dirty_limit(),
                        "P5: a write within the dirty limit left {} bytes held (limit {})",
                        vol.held_bytes(),
                        vol.dirty_limit()
                    );
                    let early = vol.wants_commit(ino);
                    drop(vol);
                    if let (true, Some(wake)) = (early, &self.wake_committer) {
                        let _ = wake.try_send(());
                    }
                    return Ok(n);
                }
                Pressure::WaitCommit => {
                    drop(vol);
                    self.waiting(|| self.shared.with_commit_lock(|| ()));
                }
                Pressure::Commit => {
                    drop(vol);
                    // (A commit started meanwhile may hold the lock.)
                    self.waiting(|| self.shared.commit(false))?;
                }
            }
        }
    }

    /// A write waiting for a commit (the one in flight, or its own behind
    /// it) in `wait`, counted in [`Fs::pending_writes`] meanwhile.
    fn waiting<T>(&self, wait: impl FnOnce() -> T) -> T {
        let count = &self.shared.writes_waiting;
        count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let r = wait();
        count.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        r
    }

    /// Whether [`Fs::write`] of `len` bytes at `offset` of `ino` would
    /// wait now, for a commit that brings dirty data back under the limit
    /// (a hint: the answer may change before the write runs).
    pub fn write_would_wait(&self, ino: Ino, offset: u64, len: usize) -> bool {
        self.shared_vol().write_would_wait(ino, offset, len)
    }

    /// Value of extended attribute `name`; ENODATA when absent.
    pub fn getxattr(&self, ino: Ino, name: &[u8]) -> Result<Vec<u8>> {
        self.warm(ino);
        if let Some(r) = self.shared_vol().getxattr_shared(ino, name) {
            return r;
        }
        self.vol().getxattr(ino, name)
    }

    /// Set extended attribute `name`.
    pub fn setxattr(&self, ino: Ino, name: &[u8], value: &[u8], mode: XattrMode) -> Result<()> {
        self.warm(ino);
        self.vol().setxattr(ino, name, value, mode)
    }

    /// Names of all extended attributes of `ino`, sorted.
    pub fn listxattr(&self, ino: Ino) -> Result<Vec<Vec<u8>>> {
        self.warm(ino);
        if let Some(r) = self.shared_vol().listxattr_shared(ino) {
            return r;
        }
        self.vol().listxattr(ino)
    }

    /// Remove extended attribute `name`; ENODATA when absent.
    pub fn removexattr(&self, ino: Ino, name: &[u8]) -> Result<()> {
        self.warm(ino);
        self.vol().removexattr(ino, name)
    }

    /// Largest total size of one inode's extended attributes, in bytes
    /// (each attribute costs its name length + value length + 4).
    pub fn xattr_space(&self) -> usize {
        self.shared_vol().xattr_space()
    }
}
