//! `tux3 defrag` on a mount: [`IOC_DEFRAG`], sent on a regular file of the
//! mount, has the server rewrite that file (`Fs::defrag`) and answer with
//! what it did. The argument has a fixed size ([`DEFRAG_ARG_LEN`], native
//! byte order: both sides are on one machine):
//!
//! | offset | size | in | out |
//! |---|---|---|---|
//! | 0 | 4 | flags: 1 unshare, 2 dry run | |
//! | 0 | 8 | | extents before |
//! | 8 | 8 | | extents after |
//! | 16 | 8 | | bytes rewritten |
//! | 24 | 8 | | bytes still shared with snapshots |
//! | 32 | 8 | | bytes of clones pointed at the rewritten copy |
//!
//! The call returns when the file is rewritten and committed. Errors are
//! `Fs::defrag`'s: EISDIR, EINVAL (not a regular file, or unknown flags),
//! EROFS, ENOSPC, EIO; EPERM for a caller that is neither root nor the
//! mounter (defrag takes the volume's space and I/O), unless it is a dry
//! run.
//!
//! Calls the engine's `Fs::defrag` (through the adapter's `Fs`).

use super::Tux3Fuse;
use tux3::error::{Errno, Error, Result};
use tux3::types::Ino;
use tux3::{DefragOptions, DefragReport, Fs};

/// Size of the defrag ioctl's argument.
pub const DEFRAG_ARG_LEN: usize = 64;

/// The ioctl that defragments the file it is sent on
/// (`_IOWR(0xE3, 16, [u8; 64])`, layout above).
pub const IOC_DEFRAG: u32 = libc::_IOWR::<[u8; DEFRAG_ARG_LEN]>(0xE3, 16) as u32;

/// Flag: rewrite extents shared with snapshots too.
pub const DEFRAG_UNSHARE: u32 = 1;
/// Flag: change nothing, report what a rewrite would do.
pub const DEFRAG_DRY_RUN: u32 = 2;

/// The request: `flags`.
pub fn encode_defrag_request(flags: u32) -> [u8; DEFRAG_ARG_LEN] {
    let mut a = [0u8; DEFRAG_ARG_LEN];
    a[..4].copy_from_slice(&flags.to_ne_bytes());
    a
}

fn u64_at(a: &[u8], at: usize) -> u64 {
    a.get(at..at + 8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_ne_bytes)
}

/// The report the server sent back.
pub fn decode_defrag_report(a: &[u8]) -> DefragReport {
    DefragReport {
        extents_before: u64_at(a, 0),
        extents_after: u64_at(a, 8),
        bytes_rewritten: u64_at(a, 16),
        shared_bytes: u64_at(a, 24),
        repointed_bytes: u64_at(a, 32),
    }
}

fn encode_report(r: &DefragReport) -> Vec<u8> {
    let mut a = vec![0u8; DEFRAG_ARG_LEN];
    for (i, v) in [
        r.extents_before,
        r.extents_after,
        r.bytes_rewritten,
        r.shared_bytes,
        r.repointed_bytes,
    ]
    .into_iter()
    .enumerate()
    {
        a[8 * i..8 * i + 8].copy_from_slice(&v.to_ne_bytes());
    }
    a
}

impl Tux3Fuse {
    /// Serve [`IOC_DEFRAG`] on `ino` for user `uid` (root and the mounter
    /// only, as the snapshot ioctls that change the volume).
    pub(super) fn defrag_ioctl(&self, ino: Ino, uid: u32, arg: &[u8]) -> Result<Vec<u8>> {
        // SAFETY: geteuid has no preconditions.
        let may_change = uid == 0 || uid == unsafe { libc::geteuid() };
        serve(&self.fs, ino, arg, may_change)
    }
}

/// The request's flags (none if it is short: the kernel sends the
/// argument's whole size).
fn flags_of(arg: &[u8]) -> u32 {
    arg.get(..4)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u32::from_ne_bytes)
}

/// Serve one request on `ino`, from a caller who `may_change` the volume.
fn serve(fs: &Fs, ino: Ino, arg: &[u8], may_change: bool) -> Result<Vec<u8>> {
    if !may_change && flags_of(arg) & DEFRAG_DRY_RUN == 0 {
        return Err(Error::Posix(Errno::EPERM));
    }
    let flags = flags_of(arg);
    if flags & !(DEFRAG_UNSHARE | DEFRAG_DRY_RUN) != 0 {
        return Err(Error::Posix(Errno::EINVAL));
    }
    let opts = DefragOptions {
        unshare: flags & DEFRAG_UNSHARE != 0,
        dry_run: flags & DEFRAG_DRY_RUN != 0,
        ..DefragOptions::default()
    };
    let report = fs.defrag(ino, &opts, &mut |_, _| {})?;
    Ok(encode_report(&report))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_survives_its_encoding() {
        let r = DefragReport {
            extents_before: 1000,
            extents_after: 2,
            bytes_rewritten: 1 << 30,
            shared_bytes: 7 << 12,
            repointed_bytes: 3 << 20,
        };
        assert_eq!(decode_defrag_report(&encode_report(&r)), r);
        assert_eq!(IOC_DEFRAG >> 30, 3, "read and write");
    }
}
