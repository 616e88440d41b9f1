//! `tux3 dedupe` on a mount: the server runs the dedupe
//! (`tux3_tools::dedupe`) in a thread of its own, and [`IOC_DEDUPE`],
//! sent on a directory of the mount, starts it (over the paths given,
//! relative to that directory), reports on it and cancels it, as
//! [`crate::IOC_SCRUB`] does for a scrub. The argument has a fixed size
//! ([`DEDUPE_ARG_LEN`], native byte order: both sides are on one machine):
//!
//! | offset | size | in | out |
//! |---|---|---|---|
//! | 0 | 4 | command: 1 start, 2 status, 3 cancel | 1 a dedupe is running, 0 none |
//! | 4 | 4 | flags: 1 dry run, 2 zero blocks too, 4 list pairs | the last run's exit code (0, 4, 8, 32), 255 none yet |
//! | 8 | 8 | status: lines already taken | bytes matched |
//! | 16 | 8 | | bytes in all |
//! | 24 | 8 | | bytes read |
//! | 32 | 8 | | milliseconds since the run began |
//! | 40..104 | 8 each | | the report: files, duplicate, shared, zero, unindexed bytes, calls, differing calls, failures (final once the run ended) |
//! | 104 | 8 | | number of the first line below |
//! | 112 | .. | start: the paths, each NUL-terminated, an empty one last | lines (each `\n`-ended, NUL after the last): `P` and a pair (with flag 4), `E` and what could not be done |
//!
//! A status request drops the lines before the number it gives: the
//! client takes them in turn. The unmount cancels a running dedupe.
//!
//! Calls `tux3_tools::dedupe` and the engine's `Fs`.

use super::Tux3Fuse;
use crate::scrub::{u32_at, u64_at};
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;
use tux3::error::{Errno, Error, Result};
use tux3::types::Ino;
use tux3::Fs;
use tux3_tools::dedupe::{self, Control, Options, Outcome, Report};

/// Size of the dedupe ioctl's argument.
pub const DEDUPE_ARG_LEN: usize = 4096;
/// The ioctl (`_IOWR(0xE3, 17, [u8; 4096])`, layout above).
pub const IOC_DEDUPE: u32 = libc::_IOWR::<[u8; DEDUPE_ARG_LEN]>(0xE3, 17) as u32;
pub const DEDUPE_START: u32 = 1;
pub const DEDUPE_STATUS: u32 = 2;
pub const DEDUPE_CANCEL: u32 = 3;
pub const DEDUPE_DRY_RUN: u32 = 1;
pub const DEDUPE_ZEROS: u32 = 2;
pub const DEDUPE_PAIRS: u32 = 4;
/// Exit code field before any run ended.
pub const DEDUPE_NO_EXIT: u32 = 255;
const LINES_AT: usize = 104;
const TEXT_AT: usize = 112;

/// What the ioctl reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DedupeStatus {
    pub running: bool,
    pub exit: u32,
    pub done: u64,
    pub total: u64,
    pub read: u64,
    pub elapsed_ms: u64,
    pub files: u64,
    pub dup_bytes: u64,
    pub shared_bytes: u64,
    pub zero_bytes: u64,
    pub unindexed_bytes: u64,
    pub calls: u64,
    pub differing: u64,
    pub failures: u64,
    /// Number of the first of `lines`.
    pub first_line: u64,
    pub lines: Vec<String>,
}

/// A start request over `paths` (relative to the directory the ioctl is
/// sent on; none: all of it). EINVAL-free: `None` if the paths do not fit
/// or one holds a NUL.
pub fn encode_start(flags: u32, paths: &[&[u8]]) -> Option<[u8; DEDUPE_ARG_LEN]> {
    let mut a = [0u8; DEDUPE_ARG_LEN];
    a[0..4].copy_from_slice(&DEDUPE_START.to_ne_bytes());
    a[4..8].copy_from_slice(&flags.to_ne_bytes());
    let mut at = TEXT_AT;
    for p in paths {
        let p = if p.is_empty() { &b"."[..] } else { p };
        if p.contains(&0) || at + p.len() + 2 > DEDUPE_ARG_LEN {
            return None;
        }
        a[at..at + p.len()].copy_from_slice(p);
        at += p.len() + 1;
    }
    Some(a)
}

/// A status (or cancel) request, having taken the lines before `seen`.
pub fn encode_request(command: u32, seen: u64) -> [u8; DEDUPE_ARG_LEN] {
    let mut a = [0u8; DEDUPE_ARG_LEN];
    a[0..4].copy_from_slice(&command.to_ne_bytes());
    a[8..16].copy_from_slice(&seen.to_ne_bytes());
    a
}

fn decode_paths(a: &[u8]) -> Vec<Vec<u8>> {
    a.get(TEXT_AT..)
        .unwrap_or_default()
        .split(|&b| b == 0)
        .take_while(|p| !p.is_empty())
        .map(<[u8]>::to_vec)
        .collect()
}

/// The status the server sent back.
pub fn decode_status(a: &[u8]) -> DedupeStatus {
    let text = a.get(TEXT_AT..).unwrap_or_default();
    let end = text.iter().position(|&b| b == 0).unwrap_or(text.len());
    let r = |i: usize| u64_at(a, 40 + 8 * i);
    DedupeStatus {
        running: u32_at(a, 0) == 1,
        exit: u32_at(a, 4),
        done: u64_at(a, 8),
        total: u64_at(a, 16),
        read: u64_at(a, 24),
        elapsed_ms: u64_at(a, 32),
        files: r(0),
        dup_bytes: r(1),
        shared_bytes: r(2),
        zero_bytes: r(3),
        unindexed_bytes: r(4),
        calls: r(5),
        differing: r(6),
        failures: r(7),
        first_line: u64_at(a, LINES_AT),
        lines: String::from_utf8_lossy(&text[..end])
            .lines()
            .map(String::from)
            .collect(),
    }
}

fn encode_status(s: &DedupeStatus) -> Vec<u8> {
    let mut a = vec![0u8; DEDUPE_ARG_LEN];
    a[0..4].copy_from_slice(&u32::from(s.running).to_ne_bytes());
    a[4..8].copy_from_slice(&s.exit.to_ne_bytes());
    for (i, v) in [
        s.done,
        s.total,
        s.read,
        s.elapsed_ms,
        s.files,
        s.dup_bytes,
        s.shared_bytes,
        s.zero_bytes,
        s.unindexed_bytes,
        s.calls,
        s.differing,
        s.failures,
        s.first_line,
    ]
    .into_iter()
    .enumerate()
    {
        a[8 + 8 * i..16 + 8 * i].copy_from_slice(&v.to_ne_bytes());
    }
    let mut at = TEXT_AT;
    for l in &s.lines {
        if at + l.len() + 2 > DEDUPE_ARG_LEN {
            break;
        }
        a[at..at + l.len()].copy_from_slice(l.as_bytes());
        a[at + l.len()] = b'\n';
        at += l.len() + 1;
    }
    a
}

/// A pair as a line.
pub fn pair_line(p: &dedupe::Pair) -> String {
    let how = match p.outcome {
        Outcome::Found => "duplicate",
        Outcome::Shared => "shared",
        Outcome::Differed => "differed",
        Outcome::Failed => "failed",
    };
    format!(
        "{} @{} = {} @{}: {} bytes {how}",
        p.dst, p.dst_off, p.src, p.src_off, p.len
    )
}

/// The exit code of a run (fsck's: 0 done, 4 something could not be
/// done, 32 cancelled).
pub fn exit_code(r: &Report) -> u8 {
    if !r.failures.is_empty() {
        4
    } else if r.cancelled {
        32
    } else {
        0
    }
}

/// Lines for the client, numbered from `first`.
#[derive(Default)]
struct Lines {
    first: u64,
    lines: VecDeque<String>,
}

/// The server's dedupe: at most one runs.
#[derive(Default)]
pub struct DedupeSlot {
    inner: Mutex<Slot>,
}

#[derive(Default)]
struct Slot {
    ctl: Arc<Control>,
    thread: Option<JoinHandle<()>>,
    began: Option<Instant>,
    last: Arc<Mutex<Option<(u32, Report)>>>,
    lines: Arc<Mutex<Lines>>,
}

impl Tux3Fuse {
    /// Serve [`IOC_DEDUPE`] on `ino` for user `uid`.
    pub(super) fn dedupe_ioctl(&self, ino: Ino, uid: u32, arg: &[u8]) -> Result<Vec<u8>> {
        // SAFETY: geteuid has no preconditions.
        let may_change = uid == 0 || uid == unsafe { libc::geteuid() };
        self.dedupe.ioctl(&self.fs, ino, arg, may_change)
    }
}

impl DedupeSlot {
    /// Serve one request sent on `ino`.
    pub fn ioctl(&self, fs: &Arc<Fs>, ino: Ino, arg: &[u8], may_change: bool) -> Result<Vec<u8>> {
        let command = u32_at(arg, 0);
        let flags = u32_at(arg, 4);
        let mut s = self.inner.lock();
        let running = s.thread.as_ref().is_some_and(|t| !t.is_finished());
        match command {
            DEDUPE_STATUS => {
                let mut l = s.lines.lock();
                let seen = u64_at(arg, 8).max(l.first);
                while l.first < seen && l.lines.pop_front().is_some() {
                    l.first += 1;
                }
            }
            DEDUPE_START if flags & !(DEDUPE_DRY_RUN | DEDUPE_ZEROS | DEDUPE_PAIRS) != 0 => {
                return Err(Error::Posix(Errno::EINVAL))
            }
            DEDUPE_START | DEDUPE_CANCEL if !may_change && flags & DEDUPE_DRY_RUN == 0 => {
                return Err(Error::Posix(Errno::EPERM))
            }
            DEDUPE_START if running => return Err(Error::Posix(Errno::EBUSY)),
            DEDUPE_START => {
                if let Some(t) = s.thread.take() {
                    let _ = t.join();
                }
                let opts = Options {
                    dry_run: flags & DEDUPE_DRY_RUN != 0,
                    zeros: flags & DEDUPE_ZEROS != 0,
                    ..Options::default()
                };
                let pairs = flags & DEDUPE_PAIRS != 0;
                let paths = decode_paths(arg);
                s.ctl = Arc::new(Control::default());
                s.began = Some(Instant::now());
                s.lines = Arc::default();
                *s.last.lock() = None;
                let (fs, ctl, last, lines) = (fs.clone(), s.ctl.clone(), s.last.clone(), s.lines.clone());
                let t = std::thread::Builder::new()
                    .name("tux3-dedupe".into())
                    .spawn(move || {
                        let r = dedupe::run(&fs, ino, &paths, &opts, &ctl, &mut |p| {
                            if pairs {
                                lines.lock().lines.push_back(format!("P{}", pair_line(p)));
                            }
                        });
                        let ended = match r {
                            Ok(r) => {
                                let mut l = lines.lock();
                                l.lines.extend(r.failures.iter().map(|f| format!("E{f}")));
                                (u32::from(exit_code(&r)), r)
                            }
                            Err(e) => {
                                let r = Report {
                                    failures: vec![format!("dedupe failed: {e}")],
                                    ..Report::default()
                                };
                                lines.lock().lines.push_back(format!("E{}", r.failures[0]));
                                (8, r)
                            }
                        };
                        *last.lock() = Some(ended);
                    })
                    .map_err(Error::Io)?;
                s.thread = Some(t);
            }
            DEDUPE_CANCEL if !running => return Err(Error::Posix(Errno(libc::ESRCH))),
            DEDUPE_CANCEL => s.ctl.cancel.store(true, Relaxed),
            _ => return Err(Error::Posix(Errno::EINVAL)),
        }
        let last = s.last.lock();
        let r = last.as_ref().map(|(_, r)| r.clone()).unwrap_or_default();
        let l = s.lines.lock();
        let st = DedupeStatus {
            running: s.thread.as_ref().is_some_and(|t| !t.is_finished()) && last.is_none(),
            exit: last.as_ref().map_or(DEDUPE_NO_EXIT, |(e, _)| *e),
            done: s.ctl.done.load(Relaxed),
            total: s.ctl.total.load(Relaxed),
            read: s.ctl.read.load(Relaxed),
            elapsed_ms: match (&*last, s.began) {
                (Some((_, r)), _) => r.elapsed.as_millis() as u64,
                (None, Some(b)) => b.elapsed().as_millis() as u64,
                (None, None) => 0,
            },
            files: r.files,
            dup_bytes: r.dup_bytes,
            shared_bytes: r.shared_bytes,
            zero_bytes: r.zero_bytes,
            unindexed_bytes: r.unindexed_bytes,
            calls: r.calls,
            differing: r.differing,
            failures: r.failures.len() as u64,
            first_line: l.first,
            lines: l.lines.iter().take(64).cloned().collect(),
        };
        Ok(encode_status(&st))
    }

    /// Cancel a running dedupe and wait for it (the mount is ending).
    pub fn stop(&self) {
        let mut s = self.inner.lock();
        s.ctl.cancel.store(true, Relaxed);
        if let Some(t) = s.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_survives_its_encoding() {
        let s = DedupeStatus {
            running: true,
            exit: DEDUPE_NO_EXIT,
            done: 1,
            total: 2,
            read: 3,
            elapsed_ms: 4,
            files: 5,
            dup_bytes: 6,
            shared_bytes: 7,
            zero_bytes: 8,
            unindexed_bytes: 9,
            calls: 10,
            differing: 11,
            failures: 12,
            first_line: 13,
            lines: vec!["Pa".into(), "Eb c".into()],
        };
        assert_eq!(decode_status(&encode_status(&s)), s);
        assert_eq!(IOC_DEDUPE >> 30, 3, "read and write");
        let a = encode_start(DEDUPE_DRY_RUN, &[b"x/y", b"", b"z"]).unwrap();
        assert_eq!(decode_paths(&a), [b"x/y".to_vec(), b".".to_vec(), b"z".to_vec()]);
        assert!(encode_start(0, &[&[b'a'; 5000][..]]).is_none());
    }
}
