//! `fsck.tux3`: the checker fsck(8) runs for volumes of type tux3, with
//! fsck(8)'s conventions: `fsck.tux3 [-a|-p|-n|-y] [-f] [-C FD] [-V]
//! DEVICE` and its exit codes (0 clean, 1 repaired, 4 problems left, 8
//! operational error, 16 usage error, 32 cancelled). The check is
//! `tux3 fsck`'s ([`super::fsck::check_target`]); this file owns only the
//! command line and the cancellation.
//!
//! Calls [`super::fsck`], clap and libc (signal handling).

use super::fsck::{check_target, exit_codes_help, EXIT_CANCELLED, EXIT_OPERATIONAL, EXIT_USAGE};
use clap::Parser;
use std::io;
use std::path::PathBuf;
use std::process::ExitCode;

/// The command line of `fsck.tux3`.
#[derive(Parser, Debug)]
#[command(
    name = "fsck.tux3",
    bin_name = "fsck.tux3",
    version,
    args_override_self = true,
    about = "Check and repair a tux3 volume: the checker fsck(8) runs for type tux3",
    long_about = "Check a tux3 volume (an image file or a block device) and, with -p, -a or -y, \
                  repair what can be repaired safely: leaked blocks, link counts, blocks \
                  attributes, blocks in use but marked free, a damaged older superblock copy. \
                  It never asks: without -p, -a or -y nothing is changed, as with -n. Every \
                  check is complete, so -f changes nothing. Do not check a mounted volume.\n\n\
                  SIGINT or SIGTERM cancel the check (exit 32); a repair cancelled midway \
                  leaves the volume as a crash would, and the next check starts over.",
    after_long_help = exit_codes_help(),
)]
pub struct FsckHelperArgs {
    /// Preen: repair what can be repaired, without asking (-a is the same)
    #[arg(short = 'p', visible_short_alias = 'a')]
    pub preen: bool,
    /// Open the volume read-only and change nothing (problems: exit 4)
    #[arg(short = 'n', conflicts_with_all = ["preen", "yes"])]
    pub no: bool,
    /// Answer yes: repair everything that can be repaired
    #[arg(short = 'y', conflicts_with = "preen")]
    pub yes: bool,
    /// Force a check of a clean volume (every check is complete: accepted)
    #[arg(short = 'f')]
    pub force: bool,
    /// Progress for fsck(8) on descriptor FD (accepted; a progress bar is
    /// drawn on standard error when it is a terminal)
    #[arg(short = 'C', value_name = "FD", allow_negative_numbers = true)]
    pub progress_fd: Option<i32>,
    /// Image file or block device holding the volume
    #[arg(value_name = "DEVICE")]
    pub target: PathBuf,
}

impl FsckHelperArgs {
    /// Whether the check may write.
    pub fn repair(&self) -> bool {
        self.preen || self.yes
    }
}

/// Entry point of the `fsck.tux3` binary.
pub fn main() -> ExitCode {
    super::init_logging();
    // First, so that a signal that arrives at any point cancels cleanly.
    if let Err(e) = cancel_on_signals() {
        eprintln!("fsck.tux3: installing signal handlers: {e}");
        return ExitCode::from(EXIT_OPERATIONAL);
    }
    let args: FsckHelperArgs = match super::parse_helper(EXIT_USAGE) {
        Ok(a) => a,
        Err(code) => return code,
    };
    match check_target(&args.target, args.repair(), false) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            if !e.message.is_empty() {
                eprintln!("fsck.tux3: {}", e.message);
            }
            ExitCode::from(e.exit)
        }
    }
}

/// What a cancelled check writes on stderr.
const CANCELLED: &[u8] = b"fsck.tux3: cancelled\n";

extern "C" fn cancel(_signal: libc::c_int) {
    // SAFETY: write and _exit are async-signal-safe.
    unsafe {
        libc::write(2, CANCELLED.as_ptr().cast(), CANCELLED.len());
        libc::_exit(i32::from(EXIT_CANCELLED));
    }
}

/// Exit 32 at SIGINT or SIGTERM, and let them in even if the caller
/// blocked them.
fn cancel_on_signals() -> io::Result<()> {
    let handler: extern "C" fn(libc::c_int) = cancel;
    // SAFETY: sigaction and sigprocmask with initialised structures; the
    // handler calls only async-signal-safe functions.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for signal in [libc::SIGINT, libc::SIGTERM] {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = handler as libc::sighandler_t;
            libc::sigemptyset(&mut action.sa_mask);
            if libc::sigaction(signal, &action, std::ptr::null_mut()) != 0 {
                return Err(io::Error::last_os_error());
            }
            libc::sigaddset(&mut set, signal);
        }
        if libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut()) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}
