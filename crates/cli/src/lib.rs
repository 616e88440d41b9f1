//! Command line: the `tux3` program and the helpers `mount.tux3`,
//! `mkfs.tux3` and `fsck.tux3`. Owns argument parsing (clap), dispatch to
//! one module per command, error printing and exit codes.
//!
//! The top of the stack (crate tux3-cli): calls the engine's public
//! surface — [`tux3::Fs`] (engine API), [`tux3::open_path`] and
//! [`tux3::device`] (opening and creating images) — the offline tools
//! ([`tux3_tools`]: fsck, dump, graph) and the FUSE adapter
//! ([`tux3_fuse`]: `mount`, and the ioctls of `sync` and `snapshot`), the
//! send streams ([`tux3_tools::stream`]: `send`, `receive`), and clap_mangen
//! (`man`: the manual pages).

// Library code returns errors; it never unwraps (tests may).
#![deny(clippy::unwrap_used, clippy::expect_used)]

mod args;
mod cat;
mod clone;
mod dedupe;
mod defrag;
mod dump;
mod format;
mod fsck;
pub mod fsck_helper;
mod fstrim;
mod graph;
mod host;
mod image;
mod import;
mod log_sink;
mod ls;
mod man;
mod mkfs;
pub mod mkfs_helper;
pub mod mount;
mod mount_opts;
mod receive;
mod remount;
mod resize;
mod scrub;
mod send;
mod snapshot;
mod sync;
mod target;
pub mod umount;

pub use args::{parse_block_size, parse_size, MAX_BLOCK_SIZE, MIN_BLOCK_SIZE};
pub use format::{civil_date, format_time, mode_string};
pub use image::split_path;

use clap::{Parser, Subcommand};
use std::fmt::Display;
use std::io::{self, ErrorKind};
use std::process::ExitCode;

/// `tux3`: make, check and inspect tux3 volumes.
#[derive(Parser, Debug)]
#[command(
    name = "tux3",
    version,
    about = "Make, check and inspect tux3 volumes (image files or block devices)"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Create a tux3 volume, optionally filled from a host directory tree
    Mkfs(mkfs::MkfsArgs),
    /// Check a volume; exit 0 clean, 1 repaired, 4 errors left, 8 operational error
    Fsck(fsck::FsckArgs),
    /// Print a report of the volume's structures
    Dump(dump::DumpArgs),
    /// Draw the volume's disk structure as Graphviz (.dot, .svg or .png)
    Graph(graph::GraphArgs),
    /// List a directory of a volume (read-only)
    Ls(ls::LsArgs),
    /// Write a regular file of a volume to standard output (read-only)
    Cat(cat::CatArgs),
    /// Print the target of a symbolic link of a volume (read-only)
    Readlink(cat::ReadlinkArgs),
    /// Mount a volume through FUSE (in the background unless -f)
    #[command(long_about = mount::LONG_ABOUT)]
    Mount(mount::MountArgs),
    /// Make everything written through tux3 mounts durable now
    Sync(sync::SyncArgs),
    /// Unmount a tux3 mount once its server has committed everything
    #[command(long_about = umount::LONG_ABOUT)]
    Umount(umount::UmountArgs),
    /// Create, list and delete snapshots of a volume (mounted or not)
    #[command(long_about = snapshot::LONG_ABOUT)]
    Snapshot(snapshot::SnapshotArgs),
    /// Check every block of a volume and its snapshots (mounted or not)
    #[command(long_about = scrub::LONG_ABOUT)]
    Scrub(scrub::ScrubArgs),
    /// Grow or shrink a volume (mounted or not)
    #[command(long_about = resize::LONG_ABOUT)]
    Resize(resize::ResizeArgs),
    /// Give a volume's free space back to the device (mounted or not)
    #[command(long_about = fstrim::LONG_ABOUT)]
    Fstrim(fstrim::FstrimArgs),
    /// Rewrite fragmented files contiguously (mounted or not)
    #[command(long_about = defrag::LONG_ABOUT)]
    Defrag(defrag::DefragArgs),
    /// Copy a file by sharing its blocks: constant time, no space taken (mounted or not)
    #[command(long_about = clone::LONG_ABOUT)]
    Clone(clone::CloneArgs),
    /// Share the blocks files hold twice (mounted or not)
    #[command(long_about = dedupe::LONG_ABOUT)]
    Dedupe(dedupe::DedupeArgs),
    /// Write a snapshot (whole, or what changed since an older one) to standard output
    Send(send::SendArgs),
    /// Create a snapshot on a volume from a stream tux3 send wrote
    Receive(receive::ReceiveArgs),
    /// Write the manual pages (section 8) into a directory
    #[command(hide = true)]
    Man(man::ManArgs),
}

impl Command {
    /// The subcommand's name, for error messages.
    pub fn name(&self) -> &'static str {
        match self {
            Command::Mkfs(_) => "mkfs",
            Command::Fsck(_) => "fsck",
            Command::Dump(_) => "dump",
            Command::Graph(_) => "graph",
            Command::Ls(_) => "ls",
            Command::Cat(_) => "cat",
            Command::Readlink(_) => "readlink",
            Command::Mount(_) => "mount",
            Command::Sync(_) => "sync",
            Command::Umount(_) => "umount",
            Command::Snapshot(a) => a.action.command_name(),
            Command::Scrub(_) => "scrub",
            Command::Resize(_) => "resize",
            Command::Fstrim(_) => "fstrim",
            Command::Defrag(_) => "defrag",
            Command::Clone(_) => "clone",
            Command::Dedupe(_) => "dedupe",
            Command::Send(_) => "send",
            Command::Receive(_) => "receive",
            Command::Man(_) => "man",
        }
    }
}

/// A command's failure: the message printed after `tux3 <cmd>: ` and the
/// process exit code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CliError {
    pub message: String,
    pub exit: u8,
}

impl CliError {
    /// A failure with exit code 1.
    pub fn new(message: impl Into<String>) -> CliError {
        CliError {
            message: strip_os_error(message.into()),
            exit: 1,
        }
    }

    /// `what: err`, exit code 1.
    pub fn at(what: impl Display, err: impl Display) -> CliError {
        CliError::new(format!("{what}: {err}"))
    }

    /// The same failure with another exit code.
    pub fn with_exit(mut self, exit: u8) -> CliError {
        self.exit = exit;
        self
    }

    /// Standard output was closed by its reader (`| head`): stop quietly.
    fn broken_pipe() -> CliError {
        CliError {
            message: String::new(),
            exit: 0,
        }
    }
}

/// Remove the ` (os error N)` notes that `std::io::Error` adds to messages:
/// `No such file or directory (os error 2)` becomes `No such file or directory`.
pub fn strip_os_error(mut message: String) -> String {
    const NOTE: &str = " (os error ";
    while let Some(start) = message.find(NOTE) {
        let rest = &message[start + NOTE.len()..];
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 || rest.as_bytes().get(digits) != Some(&b')') {
            break;
        }
        message.replace_range(start..start + NOTE.len() + digits + 1, "");
    }
    message
}

/// Map an error writing to standard output: a closed pipe ends the command
/// quietly, anything else is reported.
pub(crate) fn stdout_error(e: io::Error) -> CliError {
    if e.kind() == ErrorKind::BrokenPipe {
        CliError::broken_pipe()
    } else {
        CliError::at("standard output", e)
    }
}

/// Run one parsed command line; returns the exit code.
pub fn run(cli: Cli) -> Result<u8, CliError> {
    match cli.command {
        Command::Mkfs(a) => mkfs::run(&a),
        Command::Fsck(a) => fsck::run(&a),
        Command::Dump(a) => dump::run(&a),
        Command::Graph(a) => graph::run(&a),
        Command::Ls(a) => ls::run(&a),
        Command::Cat(a) => cat::run(&a),
        Command::Readlink(a) => cat::run_readlink(&a),
        Command::Mount(a) => mount::run(&a),
        Command::Sync(a) => sync::run(&a),
        Command::Umount(a) => umount::run(&a),
        Command::Snapshot(a) => snapshot::run(&a),
        Command::Scrub(a) => scrub::run(&a),
        Command::Resize(a) => resize::run(&a),
        Command::Fstrim(a) => fstrim::run(&a),
        Command::Defrag(a) => defrag::run(&a),
        Command::Clone(a) => clone::run(&a),
        Command::Dedupe(a) => dedupe::run(&a),
        Command::Send(a) => send::run(&a),
        Command::Receive(a) => receive::run(&a),
        Command::Man(a) => man::run(&a),
    }
}

/// Entry point of the `tux3` binary.
/// Send the engine's warnings and errors (a background commit that failed,
/// for one) to standard error, or where a mount's server sends them once it
/// has detached (`log_sink.rs`); `RUST_LOG` (for example `tux3=debug`)
/// selects more or less.
pub fn init_logging() {
    log_sink::init();
}

/// Parse a helper's command line (`mkfs.tux3`, `fsck.tux3`): `--help` and
/// `--version` print and exit 0, a usage error prints and exits `usage`.
pub(crate) fn parse_helper<P: Parser>(usage: u8) -> Result<P, ExitCode> {
    P::try_parse().map_err(|e| {
        let _ = e.print();
        ExitCode::from(if e.use_stderr() { usage } else { 0 })
    })
}

/// mimalloc's option number of `purge_delay` (`mi_option_purge_delay` in
/// its `mimalloc.h`, the same in its versions 2 and 3; libmimalloc-sys's
/// own constants follow an older list).
pub const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// mimalloc's option number of `allow_thp` (version 3's `mimalloc.h`):
/// whether it asks the kernel for transparent huge pages
/// (`MADV_HUGEPAGE`) on the memory it maps.
pub const MI_OPTION_ALLOW_THP: libmimalloc_sys::mi_option_t = 43;

/// How long memory freed stays with mimalloc before it goes back to the
/// system, in ms ([`tune_allocator`]).
pub const PURGE_DELAY_MS: std::os::raw::c_long = 60_000;

/// Settings of the global allocator (mimalloc) for a server: memory freed
/// goes back to the system after [`PURGE_DELAY_MS`] unused. A mount (or the
/// engine under dbench) frees and allocates page buffers by the thousand a
/// second; each range returned comes back as fresh memory that the kernel
/// faults in and zeroes, whole 2 MiB huge pages at a time (mimalloc asks for
/// them), and on a virtual machine whose host takes free memory back each
/// first touch also exits to the host. With mimalloc 3's default of 1 s,
/// dbench's files (written, kept a few seconds, deleted, written again)
/// freed memory just long enough: 20 s of the engine's dbench at 8 clients
/// made 4,030 `madvise(MADV_DONTNEED)` calls and 62,851 page faults, a
/// delay of 10 s 6,910 faults, 60 s 413 (bench/fsync-floor.md, "Memory
/// given back"). Memory a burst freed still goes back, a minute later.
///
/// Nor does it ask for huge pages: the first touch of a huge page zeroes
/// 2 MiB at once, under whatever lock the toucher holds. Beside a million
/// unlinks, whose books grow by tables of megabytes each delta, those
/// faults were most of the unlinks' long holds of the delta guard, and
/// another process's fsync p99 was 5-13x its idle p99 with them, 2-4.6x
/// without (six runs each, bench/clone-delete.md). Call it first thing in
/// `main` of a binary whose global allocator is mimalloc.
pub fn tune_allocator() {
    // SAFETY: mimalloc's options are plain integers it reads atomically;
    // setting one is allowed at any time, from any thread.
    unsafe {
        libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS);
        libmimalloc_sys::mi_option_set(MI_OPTION_ALLOW_THP, 0);
    }
}

pub fn main() -> ExitCode {
    init_logging();
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let cli = match Cli::try_parse_from(&argv) {
        Ok(cli) => cli,
        Err(e) => {
            // Help and version go to stdout and succeed; usage errors exit 2
            // (16 for fsck, as e2fsck does, and for fstrim, defrag and dedupe,
            // whose codes are fsck's).
            let _ = e.print();
            if !e.use_stderr() {
                return ExitCode::SUCCESS;
            }
            let is_fsck = argv
                .get(1)
                .is_some_and(|a| a == "fsck" || a == "fstrim" || a == "defrag" || a == "dedupe");
            return ExitCode::from(if is_fsck { fsck::EXIT_USAGE } else { 2 });
        }
    };
    let name = cli.command.name();
    match run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            if !e.message.is_empty() {
                eprintln!("tux3 {name}: {}", e.message);
            }
            ExitCode::from(e.exit)
        }
    }
}
