//! `tux3 scrub` on a mount: the server runs the scrub
//! (`tux3_tools::scrub`) in a thread of its own, and [`crate::IOC_SCRUB`]
//! starts it, reports on it and cancels it. The argument has a fixed size
//! ([`SCRUB_ARG_LEN`], native byte order: both sides are on one machine):
//!
//! | offset | size | in | out |
//! |---|---|---|---|
//! | 0 | 4 | command: 1 start, 2 status, 3 cancel | 1 a scrub is running, 0 none |
//! | 4 | 4 | flags: 1 begin again (`--restart`) | the last run's exit code (fsck's: 0, 4, 8, 32), 255 none yet |
//! | 8 | 8 | rate, bytes/s (0: no limit) | bytes checked |
//! | 16 | 8 | | bytes in all |
//! | 24 | 8 | | bytes read by this run |
//! | 32 | 8 | | milliseconds since this run began |
//! | 40 | 8 | | damaged data blocks found |
//! | 48 | 8 | | damaged metadata blocks found |
//! | 56 | .. | | the last run's findings, one per line, NUL-terminated (cut short if long) |
//!
//! The unmount cancels a running scrub, which saves its position; the next
//! `start` resumes it.
//!
//! Calls `tux3_tools::scrub` and the engine's `Fs`.

use parking_lot::Mutex;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;
use tux3::error::{Errno, Error, Result};
use tux3::Fs;
use tux3_tools::scrub::{self, Control, Ended, Hook, Options};

/// Size of the scrub ioctl's argument.
pub const SCRUB_ARG_LEN: usize = 4096;
pub const SCRUB_START: u32 = 1;
pub const SCRUB_STATUS: u32 = 2;
pub const SCRUB_CANCEL: u32 = 3;
pub const SCRUB_RESTART: u32 = 1;
/// Exit code field before any run ended.
pub const NO_EXIT: u32 = 255;
const TEXT_AT: usize = 56;

/// What the ioctl reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScrubStatus {
    pub running: bool,
    pub exit: u32,
    pub done: u64,
    pub total: u64,
    pub read: u64,
    pub elapsed_ms: u64,
    pub data_damage: u64,
    pub meta_damage: u64,
    pub text: String,
}

/// A request: `command`, `flags`, `rate`.
pub fn encode_request(command: u32, flags: u32, rate: u64) -> [u8; SCRUB_ARG_LEN] {
    let mut a = [0u8; SCRUB_ARG_LEN];
    a[0..4].copy_from_slice(&command.to_ne_bytes());
    a[4..8].copy_from_slice(&flags.to_ne_bytes());
    a[8..16].copy_from_slice(&rate.to_ne_bytes());
    a
}

/// The native-endian u32 at `at` of an ioctl argument (0 past its end).
pub(crate) fn u32_at(a: &[u8], at: usize) -> u32 {
    a.get(at..at + 4)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u32::from_ne_bytes)
}

/// The native-endian u64 at `at` of an ioctl argument (0 past its end).
pub(crate) fn u64_at(a: &[u8], at: usize) -> u64 {
    a.get(at..at + 8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_ne_bytes)
}

/// The status the server sent back.
pub fn decode_status(a: &[u8]) -> ScrubStatus {
    let text = a.get(TEXT_AT..).unwrap_or_default();
    let end = text.iter().position(|&b| b == 0).unwrap_or(text.len());
    ScrubStatus {
        running: u32_at(a, 0) == 1,
        exit: u32_at(a, 4),
        done: u64_at(a, 8),
        total: u64_at(a, 16),
        read: u64_at(a, 24),
        elapsed_ms: u64_at(a, 32),
        data_damage: u64_at(a, 40),
        meta_damage: u64_at(a, 48),
        text: String::from_utf8_lossy(&text[..end]).into_owned(),
    }
}

fn encode_status(s: &ScrubStatus) -> Vec<u8> {
    let mut a = vec![0u8; SCRUB_ARG_LEN];
    a[0..4].copy_from_slice(&u32::from(s.running).to_ne_bytes());
    a[4..8].copy_from_slice(&s.exit.to_ne_bytes());
    for (i, v) in [
        s.done,
        s.total,
        s.read,
        s.elapsed_ms,
        s.data_damage,
        s.meta_damage,
    ]
    .into_iter()
    .enumerate()
    {
        a[8 + 8 * i..16 + 8 * i].copy_from_slice(&v.to_ne_bytes());
    }
    let t = s.text.as_bytes();
    let n = t.len().min(SCRUB_ARG_LEN - TEXT_AT - 1);
    a[TEXT_AT..TEXT_AT + n].copy_from_slice(&t[..n]);
    a
}

/// The last run's end: exit code, findings, counts.
#[derive(Default)]
struct Last {
    exit: u32,
    text: String,
    data: u64,
    meta: u64,
}

/// The server's scrub: at most one runs.
#[derive(Default)]
pub struct ScrubSlot {
    inner: Mutex<Slot>,
}

#[derive(Default)]
struct Slot {
    ctl: Arc<Control>,
    thread: Option<JoinHandle<()>>,
    began: Option<Instant>,
    last: Arc<Mutex<Option<Last>>>,
}

/// fsck's exit code for an operational error.
const EXIT_OPERATIONAL: u32 = 8;

impl ScrubSlot {
    /// Serve one request.
    pub fn ioctl(&self, fs: &Arc<Fs>, arg: &[u8], may_change: bool) -> Result<Vec<u8>> {
        let command = u32_at(arg, 0);
        let mut s = self.inner.lock();
        let running = s.thread.as_ref().is_some_and(|t| !t.is_finished());
        match command {
            SCRUB_STATUS => {}
            SCRUB_START | SCRUB_CANCEL if !may_change => return Err(Error::Posix(Errno::EPERM)),
            SCRUB_START if running => return Err(Error::Posix(Errno::EBUSY)),
            SCRUB_START => {
                if let Some(t) = s.thread.take() {
                    let _ = t.join();
                }
                let opts = Options {
                    rate: u64_at(arg, 8),
                    restart: u32_at(arg, 4) & SCRUB_RESTART != 0,
                };
                s.ctl = Arc::new(Control::default());
                s.began = Some(Instant::now());
                *s.last.lock() = None;
                let (fs, ctl, last) = (fs.clone(), s.ctl.clone(), s.last.clone());
                let t = std::thread::Builder::new()
                    .name("tux3-scrub".into())
                    .spawn(move || {
                        let r = scrub::run(&fs, opts, &ctl, &mut |_, _, _| Hook::Go);
                        *last.lock() = Some(ended(r));
                    })
                    .map_err(Error::Io)?;
                s.thread = Some(t);
            }
            SCRUB_CANCEL if !running => return Err(Error::Posix(Errno(libc::ESRCH))),
            SCRUB_CANCEL => s.ctl.cancel.store(true, Relaxed),
            _ => return Err(Error::Posix(Errno::EINVAL)),
        }
        let last = s.last.lock();
        let st = ScrubStatus {
            running: s.thread.as_ref().is_some_and(|t| !t.is_finished()) && last.is_none(),
            exit: last.as_ref().map_or(NO_EXIT, |l| l.exit),
            done: s.ctl.done.load(Relaxed),
            total: s.ctl.total.load(Relaxed),
            read: s.ctl.read.load(Relaxed),
            elapsed_ms: s.began.map_or(0, |b| b.elapsed().as_millis() as u64),
            data_damage: last.as_ref().map_or(0, |l| l.data),
            meta_damage: last.as_ref().map_or(0, |l| l.meta),
            text: last.as_ref().map_or(String::new(), |l| l.text.clone()),
        };
        Ok(encode_status(&st))
    }

    /// Cancel a running scrub and wait for it to save its position (the
    /// mount is ending).
    pub fn stop(&self) {
        let mut s = self.inner.lock();
        s.ctl.cancel.store(true, Relaxed);
        if let Some(t) = s.thread.take() {
            let _ = t.join();
        }
    }
}

fn ended(r: Result<(Ended, scrub::Report)>) -> Last {
    match r {
        Ok((how, report)) => {
            let lines = report.lines();
            let exit = u32::from(scrub::exit_code(how, &report));
            let mut text = lines.join("\n");
            if how != Ended::Finished {
                text.insert_str(0, "cancelled; `tux3 scrub start` resumes it\n");
            }
            Last {
                exit,
                text,
                data: report.data_blocks(),
                meta: report.meta_blocks(),
            }
        }
        Err(e) => Last {
            exit: EXIT_OPERATIONAL,
            text: format!("scrub failed: {e}"),
            ..Last::default()
        },
    }
}
