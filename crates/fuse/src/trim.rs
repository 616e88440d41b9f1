//! `tux3 fstrim` on a mount, and fstrim(8): the server discards the free
//! space of the volume (`Fs::trim`). Two ioctls carry the same argument,
//! the kernel's `struct fstrim_range` (native byte order: both sides are
//! on one machine):
//!
//! | offset | size | in | out |
//! |---|---|---|---|
//! | 0 | 8 | first byte of the volume to look at | as given |
//! | 8 | 8 | bytes to look at | bytes discarded |
//! | 16 | 8 | shortest free run worth discarding, bytes | as given |
//!
//! [`crate::IOC_FSTRIM`] is ours; [`FITRIM`] is what fstrim(8) sends to a
//! mount point, which the kernel passes on to a FUSE server for a
//! directory. Both are for root and the mounter only (EPERM): a trim costs
//! the device work. The whole range is done in one request, in the
//! engine's bounded batches; `tux3 fstrim` sends ranges of
//! [`TRIM_STEP`] bytes to show progress.
//!
//! Calls the engine's `Fs`.

use tux3::error::{Errno, Error, Result};
use tux3::Fs;

/// Size of the argument: `struct fstrim_range`.
pub const FSTRIM_ARG_LEN: usize = 24;

/// FITRIM, `_IOWR('X', 121, struct fstrim_range)`.
pub const FITRIM: u32 = libc::_IOWR::<[u8; FSTRIM_ARG_LEN]>(b'X' as u32, 121) as u32;

/// Bytes of the volume `tux3 fstrim` asks for per request.
pub const TRIM_STEP: u64 = 16 << 30;

/// The argument: `start`, `len`, `minimum`, all bytes.
pub fn encode_range(start: u64, len: u64, minimum: u64) -> [u8; FSTRIM_ARG_LEN] {
    let mut a = [0u8; FSTRIM_ARG_LEN];
    for (i, v) in [start, len, minimum].into_iter().enumerate() {
        a[8 * i..8 * i + 8].copy_from_slice(&v.to_ne_bytes());
    }
    a
}

/// `(start, len, minimum)`, `None` if the argument is short.
pub fn decode_range(a: &[u8]) -> Option<(u64, u64, u64)> {
    let at = |i: usize| {
        a.get(8 * i..8 * i + 8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_ne_bytes)
    };
    Some((at(0)?, at(1)?, at(2)?))
}

/// Serve a trim request from a caller who may (`may_change`) or may not
/// change the volume; the reply is the argument with `len` set to the
/// bytes discarded.
pub fn ioctl(fs: &Fs, arg: &[u8], may_change: bool) -> Result<Vec<u8>> {
    if !may_change {
        return Err(Error::Posix(Errno::EPERM));
    }
    let (start, len, minimum) = decode_range(arg).ok_or(Error::Posix(Errno::EINVAL))?;
    let report = fs.trim(start, len, minimum, &mut |_, _| ())?;
    Ok(encode_range(start, report.bytes, minimum).to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_range_round_trips_and_fitrim_is_the_kernels() {
        let a = encode_range(1, u64::MAX, 4096);
        assert_eq!(decode_range(&a), Some((1, u64::MAX, 4096)));
        assert_eq!(decode_range(&a[..23]), None);
        // linux/fs.h: #define FITRIM _IOWR('X', 121, struct fstrim_range)
        if cfg!(any(target_arch = "x86_64", target_arch = "aarch64")) {
            assert_eq!(FITRIM, 0xc018_5879);
            assert_eq!(crate::IOC_FSTRIM, 0xc018_e307);
        }
    }
}
