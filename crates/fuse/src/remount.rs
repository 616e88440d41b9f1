//! Options that may change on a live mount (`mount -o remount,...`): read-
//! only or read-write, and when access times move. The `tux3 mount -o
//! remount` command (and mount.tux3 under mount(8)) changes the kernel's
//! side with mount(2) and this server's with [`IOC_REMOUNT`], whose
//! argument is encoded and decoded here for both.
//!
//! Going read-only commits everything: the kernel refuses writers from then
//! on, and the server moves no access time. Going read-write again is
//! refused (EROFS) when the volume itself was opened read-only.
//!
//! Calls [`tux3::Fs`] (`sync`).

use super::Tux3Fuse;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering::Relaxed};
use tux3::error::{Errno, Error, Result};
use tux3::types::AtimeRule;

/// The ioctl that changes a live mount's options (`_IOW(0xE3, 6, [u8;
/// 8])`); the argument is [`RemountArg::encode`]'s. For root and the
/// mounter only (EPERM otherwise).
pub const IOC_REMOUNT: u32 = libc::_IOW::<[u8; 8]>(0xE3, 6) as u32;

/// What a remount changes; `None`: as it was.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RemountArg {
    pub read_only: Option<bool>,
    pub atime: Option<AtimeRule>,
    pub diratime: Option<bool>,
}

const RO_GIVEN: u32 = 1;
const RO: u32 = 2;
const ATIME_GIVEN: u32 = 4;
const ATIME_SHIFT: u32 = 3; // two bits: 0 never, 1 relative, 2 strict
const DIRATIME_GIVEN: u32 = 32;
const DIRATIME: u32 = 64;

impl RemountArg {
    pub fn encode(&self) -> [u8; 8] {
        let mut f = 0;
        if let Some(ro) = self.read_only {
            f |= RO_GIVEN | if ro { RO } else { 0 };
        }
        if let Some(a) = self.atime {
            f |= ATIME_GIVEN | (rule_code(a) << ATIME_SHIFT);
        }
        if let Some(d) = self.diratime {
            f |= DIRATIME_GIVEN | if d { DIRATIME } else { 0 };
        }
        let mut out = [0u8; 8];
        out[..4].copy_from_slice(&f.to_le_bytes());
        out
    }

    /// `None` for an argument of the wrong size or with unknown bits.
    pub fn decode(arg: &[u8]) -> Option<RemountArg> {
        let f = u32::from_le_bytes(arg.get(..4)?.try_into().ok()?);
        let code = (f >> ATIME_SHIFT) & 3;
        if arg.len() != 8 || f >> 7 != 0 || code == 3 {
            return None;
        }
        Some(RemountArg {
            read_only: (f & RO_GIVEN != 0).then_some(f & RO != 0),
            atime: (f & ATIME_GIVEN != 0).then(|| rule_of(code)),
            diratime: (f & DIRATIME_GIVEN != 0).then_some(f & DIRATIME != 0),
        })
    }
}

fn rule_code(a: AtimeRule) -> u32 {
    match a {
        AtimeRule::Never => 0,
        AtimeRule::Relative => 1,
        AtimeRule::Strict => 2,
    }
}

fn rule_of(code: u32) -> AtimeRule {
    match code {
        0 => AtimeRule::Never,
        2 => AtimeRule::Strict,
        _ => AtimeRule::Relative,
    }
}

/// The options of a live mount that a remount may change, shared by every
/// request thread.
#[derive(Debug)]
pub(super) struct Live {
    read_only: AtomicBool,
    atime: AtomicU8,
    diratime: AtomicBool,
}

impl Live {
    pub(super) fn new(read_only: bool, atime: AtimeRule, diratime: bool) -> Live {
        Live {
            read_only: AtomicBool::new(read_only),
            atime: AtomicU8::new(rule_code(atime) as u8),
            diratime: AtomicBool::new(diratime),
        }
    }

    /// The mount is read-only now (mounted so, or remounted).
    pub(super) fn read_only(&self) -> bool {
        self.read_only.load(Relaxed)
    }

    /// The access-time rule for a file, or a directory (`dir`).
    pub(super) fn atime_rule(&self, dir: bool) -> AtimeRule {
        if self.read_only.load(Relaxed) || (dir && !self.diratime.load(Relaxed)) {
            return AtimeRule::Never;
        }
        rule_of(u32::from(self.atime.load(Relaxed)))
    }
}

impl Tux3Fuse {
    /// Serve [`IOC_REMOUNT`] (the caller's rights checked already).
    pub(super) fn remount(&self, arg: &[u8]) -> Result<()> {
        let a = RemountArg::decode(arg).ok_or(Error::Posix(Errno::EINVAL))?;
        if a.read_only == Some(false) && self.opts.read_only {
            // The volume itself is open read-only.
            return Err(Error::Posix(Errno::EROFS));
        }
        if let Some(rule) = a.atime {
            self.live.atime.store(rule_code(rule) as u8, Relaxed);
        }
        if let Some(d) = a.diratime {
            self.live.diratime.store(d, Relaxed);
        }
        match a.read_only {
            Some(true) if !self.opts.read_only => {
                self.live.read_only.store(true, Relaxed);
                self.fs.sync()
            }
            Some(ro) => {
                self.live.read_only.store(ro, Relaxed);
                Ok(())
            }
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_round_trip_and_bad_ones_are_refused() {
        for read_only in [None, Some(true), Some(false)] {
            for atime in [
                None,
                Some(AtimeRule::Never),
                Some(AtimeRule::Relative),
                Some(AtimeRule::Strict),
            ] {
                for diratime in [None, Some(true), Some(false)] {
                    let a = RemountArg {
                        read_only,
                        atime,
                        diratime,
                    };
                    assert_eq!(RemountArg::decode(&a.encode()), Some(a));
                }
            }
        }
        assert_eq!(RemountArg::decode(&[0; 4]), None);
        assert_eq!(RemountArg::decode(&[0x80, 0, 0, 0, 0, 0, 0, 0]), None);
        assert_eq!(RemountArg::decode(&[(3 << 3) | 4, 0, 0, 0, 0, 0, 0, 0]), None);
    }
}
