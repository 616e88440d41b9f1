//! `tux3 receive TARGET`: read a send stream from standard input and
//! create the snapshot it carries on TARGET, an unmounted image or block
//! device, or a path on a tux3 mount; `--resume-token` prints where a
//! receive that was cut off stopped, `--abort` abandons it. The live
//! volume must be made the stream's base and then changed by the receive
//! alone, which a mount in use cannot offer: a mounted volume is
//! unmounted for the receive (refused while files are open on it) and
//! mounted again with its options after it, as a rollback through a mount
//! is (`target.rs`, `with_unmounted`). Its token is read from the
//! mount's image, read-only, beside the server.
//!
//! Calls the stream's receiver ([`tux3_tools::stream::receive`]), the
//! engine API ([`tux3::Fs`]), and `send.rs`'s exit codes and progress bar.

use super::image::image_error;
use super::mount::lock_volume;
use super::send::{exit_codes_help, progress_bar, stream_failure, EXIT_OK, EXIT_OPERATIONAL, EXIT_REFUSED};
use super::target::{locate, with_unmounted, Target};
use super::CliError;
use clap::Args;
use std::io::{self, IsTerminal, Write};
use std::path::{Path, PathBuf};
use tux3::types::OpenOptions;
use tux3::{open_path, Fs};
use tux3_tools::stream::receive::{abort, receive, ReceiveOptions};
use tux3_tools::stream::resume;

const LONG_ABOUT: &str = "Read a send stream (from tux3 send) on standard input and create the \
     snapshot it carries on TARGET, an unmounted image file or block device or a path on a \
     tux3 mount. The live volume \
     becomes the snapshot's image too. A full stream needs an empty volume (as mkfs makes \
     it); an incremental one needs its base snapshot, and first makes the live volume that \
     snapshot again, dropping changes made to it since.\n\nA receive cut off (a broken pipe, \
     a damaged record, a crash of either side) keeps what arrived and no snapshot: `tux3 \
     receive --resume-token TARGET` prints a token, and `tux3 send --resume TOKEN ...` sends \
     the rest; sending the whole stream again works too. `--abort` abandons it instead.\n\n\
     Into a mounted volume: it is unmounted for the receive (refused while files are open on \
     it) and mounted again with the same options afterwards, whether the receive finished or \
     not.\n\nA progress \
     bar goes to standard error when it is a terminal; nothing is printed on success \
     otherwise.";

/// Arguments of `tux3 receive`.
#[derive(Args, Debug)]
#[command(long_about = LONG_ABOUT, after_help = exit_codes_help())]
pub struct ReceiveArgs {
    /// Print the token of the receive in progress (for tux3 send --resume) and exit
    #[arg(long, conflicts_with = "abort")]
    pub resume_token: bool,
    /// Abandon the receive in progress: the live volume goes back to its base (an empty root for a full stream)
    #[arg(long)]
    pub abort: bool,
    /// An unmounted image file or block device, or a path on a tux3 mount
    pub target: PathBuf,
}

fn open(target: &Path, writable: bool) -> Result<(Fs, std::fs::File), CliError> {
    let lock = lock_volume(target, !writable).map_err(|e| CliError::new(e).with_exit(EXIT_OPERATIONAL))?;
    Ok((open_unlocked(target, writable)?, lock))
}

/// The volume at `target`, without its lock (the caller holds it, or only
/// reads beside a mount's server).
fn open_unlocked(target: &Path, writable: bool) -> Result<Fs, CliError> {
    let dev = open_path(target, writable).map_err(|e| image_error(target, e).with_exit(EXIT_OPERATIONAL))?;
    // A receive writes each block once and reads none back: clean pages
    // kept for reads would only take fresh memory (each page zeroed by the
    // kernel on first touch) for the whole stream.
    let opts = OpenOptions {
        read_only: !writable,
        clean_limit: 8 << 20,
        dirty_limit: 64 << 20,
        // A committer of its own: a checkpoint starts a commit and the
        // stream goes on while it writes.
        commit_interval: writable.then(|| std::time::Duration::from_secs(5)),
        ..OpenOptions::default()
    };
    Fs::open(dev, opts).map_err(|e| image_error(target, e).with_exit(EXIT_OPERATIONAL))
}

fn close(target: &Path, fs: Fs) -> Result<(), CliError> {
    fs.close()
        .map_err(|e| CliError::at(format!("{}: close", target.display()), e).with_exit(EXIT_OPERATIONAL))
}

pub fn run(a: &ReceiveArgs) -> Result<u8, CliError> {
    let t = &a.target;
    if !a.resume_token && !a.abort && io::stdin().is_terminal() {
        return Err(CliError::new(
            "standard input is a terminal: give it a stream (tux3 send ... | tux3 receive TARGET)",
        )
        .with_exit(2));
    }
    match locate(t)? {
        Target::Mount(_, source) if a.resume_token => print_token(t, &source, false),
        Target::Mount(f, _) => {
            with_unmounted(t, f, "receive", &mut |image| on_image(a, t, image))?;
            Ok(EXIT_OK)
        }
        Target::Image if a.resume_token => print_token(t, t, true),
        Target::Image => on_image(a, t, t).map(|()| EXIT_OK),
    }
}

/// Print the token of the receive in progress on `image` (`t` in
/// messages); `locked`: take the volume's lock (not beside a mount's
/// server, which holds it: a receive never runs on a mounted volume, so
/// what the image says is what a receive left).
fn print_token(t: &Path, image: &Path, locked: bool) -> Result<u8, CliError> {
    let (fs, _lock) = if locked {
        let (fs, lock) = open(image, false)?;
        (fs, Some(lock))
    } else {
        (open_unlocked(image, false)?, None)
    };
    let token = resume::stored(&fs).map_err(|e| stream_failure(t, e))?;
    close(t, fs)?;
    let Some(token) = token else {
        return Err(
            CliError::new(format!("{}: no receive is in progress", t.display())).with_exit(EXIT_REFUSED),
        );
    };
    let mut out = io::stdout();
    writeln!(out, "{}", token.encode()).map_err(super::stdout_error)?;
    Ok(EXIT_OK)
}

/// Receive (or `--abort`) on the unmounted volume at `image`; `t` names
/// it in messages.
fn on_image(a: &ReceiveArgs, t: &Path, image: &Path) -> Result<(), CliError> {
    let (fs, _lock) = open(image, true)?;
    if a.abort {
        let had = abort(&fs).map_err(|e| stream_failure(t, e));
        close(t, fs)?;
        if had?.is_none() {
            return Err(
                CliError::new(format!("{}: no receive is in progress", t.display())).with_exit(EXIT_REFUSED),
            );
        }
        return Ok(());
    }
    let bar = progress_bar("received");
    let stdin = io::stdin();
    super::send::grow_pipe(libc::STDIN_FILENO);
    let inp = io::BufReader::with_capacity(1 << 20, stdin.lock());
    let r = receive(&fs, inp, &ReceiveOptions::default(), &mut |bytes| {
        if let Some(b) = &bar {
            b.set_position(bytes);
        }
    });
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    // Closing commits what a failed receive applied (its token covers it).
    let closed = close(t, fs);
    r.map_err(|e| {
        let mut err = stream_failure(t, e);
        if err.exit == super::send::EXIT_DAMAGED {
            err.message.push_str(&format!(
                "; what arrived is kept: tux3 receive --resume-token {} prints where to resume",
                t.display()
            ));
        }
        err
    })?;
    closed
}
