//! `tux3 send [-i BASE] TARGET SNAP`: write snapshot SNAP of a volume to
//! standard output as a send stream (docs/FORMAT.md section 15), whole or
//! against the older snapshot BASE; `--resume TOKEN` continues a receive
//! that was cut off. TARGET is an unmounted image or block device, or any
//! path on a tux3 mount: a snapshot never changes, so it is read from the
//! mount's image directly (as a snapshot is mounted beside the live
//! volume), without the server.
//!
//! Also owns what send and receive share on the command line: the exit
//! codes, the progress bar, the mapping of stream errors to messages.
//!
//! Calls the stream's sender ([`tux3_tools::stream::send`]),
//! [`tux3::open_path`] and `target.rs`'s way of telling a mount from
//! an image.

use super::image::image_error;
use super::mount::lock_volume;
use super::target::{locate, Target};
use super::CliError;
use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::ffi::OsString;
use std::io::{self, IsTerminal};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use tux3::open_path;
use tux3_tools::stream::resume::Token;
use tux3_tools::stream::send::{send, SendOptions};
use tux3_tools::stream::StreamError;

/// Done.
pub const EXIT_OK: u8 = 0;
/// Refused: the stream does not fit the target (base missing, name taken,
/// another receive in progress, no such snapshot).
pub const EXIT_REFUSED: u8 = 1;
/// The stream is damaged or was cut off (receive: what arrived is kept,
/// and `--resume-token` says where to resume).
pub const EXIT_DAMAGED: u8 = 4;
/// Operational error: the volume could not be opened, read or written,
/// or the other end of the pipe went away.
pub const EXIT_OPERATIONAL: u8 = 8;

/// The exit codes of send and receive, for `--help` and the manual.
pub const EXIT_CODES: &[(u8, &str)] = &[
    (EXIT_OK, "done"),
    (
        EXIT_REFUSED,
        "refused: the stream does not fit the target (its base is missing, the name is taken, \
         another receive is in progress), or no such snapshot",
    ),
    (
        EXIT_DAMAGED,
        "the stream is damaged or was cut off: receive keeps what arrived (tux3 receive \
         --resume-token TARGET prints where to resume)",
    ),
    (
        EXIT_OPERATIONAL,
        "operational error: the volume could not be opened, read or written, or the other end \
         of the pipe went away",
    ),
    (2, "usage error"),
];

const LONG_ABOUT: &str = "Write snapshot SNAP to standard output as a send stream, for tux3 \
     receive on another volume (through a pipe, a file or ssh). With -i BASE, only what changed \
     since the older snapshot BASE is sent: the receiving volume must hold BASE (received \
     before). The stream is checksummed record by record; a receive cut off anywhere keeps \
     what arrived, and `tux3 send --resume TOKEN TARGET` (TOKEN from `tux3 receive \
     --resume-token` on the receiving side) sends the rest.\n\nTARGET is an unmounted image \
     file or block device, or any path on a tux3 mount (the snapshot is read from the mount's \
     image; nothing is written).\n\nA progress bar goes to standard error when it is a \
     terminal.";

/// Arguments of `tux3 send`.
#[derive(Args, Debug)]
#[command(long_about = LONG_ABOUT, after_help = exit_codes_help())]
pub struct SendArgs {
    /// Send only what changed since this older snapshot
    #[arg(short = 'i', long = "incremental", value_name = "BASE")]
    pub base: Option<OsString>,
    /// Continue a receive that stopped: the token `tux3 receive --resume-token` printed
    #[arg(long, value_name = "TOKEN")]
    pub resume: Option<String>,
    /// A path on a tux3 mount, or an unmounted image file or block device
    pub target: PathBuf,
    /// The snapshot to send (with --resume: may be left out)
    #[arg(required_unless_present = "resume")]
    pub snapshot: Option<OsString>,
}

/// [`EXIT_CODES`] as text for `--help`.
pub fn exit_codes_help() -> String {
    let mut text = String::from("Exit status:\n");
    for (code, meaning) in EXIT_CODES {
        text.push_str(&format!("  {code}  {meaning}\n"));
    }
    text
}

/// A stream error as a command's failure, with its exit code.
pub fn stream_failure(target: &std::path::Path, e: StreamError) -> CliError {
    let exit = match &e {
        StreamError::Refused(_) => EXIT_REFUSED,
        e if e.is_damage() => EXIT_DAMAGED,
        StreamError::Version(_) => EXIT_REFUSED,
        _ => EXIT_OPERATIONAL,
    };
    let text = match &e {
        StreamError::Io(io) if io.kind() == io::ErrorKind::BrokenPipe => {
            "the other end of the stream stopped reading (broken pipe)".to_string()
        }
        e => e.to_string(),
    };
    CliError::new(format!("{}: {text}", target.display())).with_exit(exit)
}

/// A byte counter on standard error, if it is a terminal.
pub fn progress_bar(verb: &str) -> Option<ProgressBar> {
    io::stderr().is_terminal().then(|| {
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        let template = format!("{verb} {{bytes}} ({{bytes_per_sec}}) {{elapsed}}");
        if let Ok(style) = ProgressStyle::with_template(&template) {
            bar.set_style(style);
        }
        bar
    })
}

pub fn run(a: &SendArgs) -> Result<u8, CliError> {
    let t = &a.target;
    if io::stdout().is_terminal() {
        return Err(CliError::new(
            "standard output is a terminal: send the stream to a pipe or a file (tux3 send ... | tux3 receive ...)",
        )
        .with_exit(2));
    }
    let resume = a
        .resume
        .as_deref()
        .map(Token::decode)
        .transpose()
        .map_err(|e| CliError::new(e).with_exit(2))?;
    let image = match locate(t)? {
        Target::Mount(_, source) => source,
        Target::Image => t.clone(),
    };
    // A shared lock on an image keeps it from being mounted or changed
    // meanwhile; a mounted one is read beside its server (snapshots do
    // not change).
    let _lock = if image == *t {
        let lock = lock_volume(t, true).map_err(|e| {
            let hint = if e.contains("in use") || e.contains("busy") {
                ": give a path on its mount instead"
            } else {
                ""
            };
            CliError::new(format!("{e}{hint}")).with_exit(EXIT_OPERATIONAL)
        })?;
        Some(lock)
    } else {
        None
    };
    let dev = open_path(&image, false).map_err(|e| image_error(&image, e).with_exit(EXIT_OPERATIONAL))?;
    let opts = SendOptions {
        snapshot: a.snapshot.as_ref().map(|s| s.as_bytes()),
        base: a.base.as_ref().map(|s| s.as_bytes()),
        resume,
        ..SendOptions::default()
    };
    let bar = progress_bar("sent");
    let stdout = io::stdout();
    grow_pipe(libc::STDOUT_FILENO);
    let out = io::BufWriter::with_capacity(1 << 20, stdout.lock());
    let r = send(dev, &opts, out, &mut |bytes| {
        if let Some(b) = &bar {
            b.set_position(bytes);
        }
    });
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    r.map_err(|e| stream_failure(t, e))?;
    Ok(EXIT_OK)
}

/// Bytes a pipe between send and receive should hold: with Linux's 64 KiB
/// default, every 256 KiB record waits on the other side several times.
const PIPE_BYTES: libc::c_int = 1 << 20;

/// Make `fd` hold [`PIPE_BYTES`] if it is a pipe (nothing otherwise, nor
/// when the system's limit is lower: the stream works at any size).
pub(crate) fn grow_pipe(fd: libc::c_int) {
    // SAFETY: F_SETPIPE_SZ takes an int and fails harmlessly (EBADF,
    // EINVAL on a non-pipe, EPERM over the limit) on any descriptor.
    unsafe {
        libc::fcntl(fd, libc::F_SETPIPE_SZ, PIPE_BYTES);
    }
}
