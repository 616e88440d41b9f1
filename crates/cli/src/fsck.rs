//! `tux3 fsck [--repair] [--data] TARGET`: check a volume, with e2fsck's exit codes:
//! 0 clean, 1 problems repaired, 4 problems left, 8 operational error (the
//! image cannot be opened or is not a usable volume), 16 usage error. The
//! check itself ([`check_target`]) also serves `fsck.tux3`.
//!
//! Calls [`tux3::open_path`] and [`tux3_tools::fsck::check`].

use super::image::image_error;
use super::{stdout_error, CliError};
use clap::Args;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use tux3::open_path;
use tux3_tools::fsck::{check, FsckOptions};

/// Exit code: no problems.
pub const EXIT_CLEAN: u8 = 0;
/// Exit code: problems found and all repaired.
pub const EXIT_REPAIRED: u8 = 1;
/// Exit code: problems left.
pub const EXIT_ERRORS_LEFT: u8 = 4;
/// Exit code: the check could not run.
pub const EXIT_OPERATIONAL: u8 = 8;
/// Exit code: the command line was wrong.
pub const EXIT_USAGE: u8 = 16;
/// Exit code: interrupted (`fsck.tux3`, at SIGINT or SIGTERM).
pub const EXIT_CANCELLED: u8 = 32;

/// fsck(8)'s exit codes as the checkers use them, for `--help` and the
/// man pages.
pub const EXIT_CODES: &[(u8, &str)] = &[
    (EXIT_CLEAN, "no problems"),
    (EXIT_REPAIRED, "problems found and all repaired"),
    (EXIT_ERRORS_LEFT, "problems left unrepaired"),
    (
        EXIT_OPERATIONAL,
        "operational error: the volume could not be opened or is not a tux3 volume",
    ),
    (EXIT_USAGE, "usage error"),
    (EXIT_CANCELLED, "cancelled by SIGINT or SIGTERM (fsck.tux3)"),
];

/// [`EXIT_CODES`] as text for `--help`.
pub fn exit_codes_help() -> String {
    let mut text = String::from("Exit status:\n");
    for (code, meaning) in EXIT_CODES {
        text.push_str(&format!("  {code:>2}  {meaning}\n"));
    }
    text
}

/// What `--data` does and why it is not the default, for `--help`.
pub const DATA_HELP: &str = "Data checksums: on a volume with data checksums (the default at mkfs) \
fsck always checks that every written extent carries them, and --repair computes missing ones \
from the data on disk. With --data it also reads every data block of the live files and of the \
snapshots (a shared block once) and compares it with its checksum; a mismatch names the block, \
every path of the file, the inode, the offset and both checksums, and leaves exit status 4. \
--repair cannot mend the data (there is no second copy, and nothing says whether the data or \
its checksum went wrong): it records the block as known damage in the volume, leaving the block \
as it is. Reads of it keep failing with EIO, and later checks name it in a note and exit 0; \
rewriting, truncating or deleting the file, or restoring it, clears it. --data is off by default \
because it reads all the data, where the rest of fsck reads only the metadata; on a mounted \
volume `tux3 scrub` does the same reading.";

/// Arguments of `tux3 fsck`.
#[derive(Args, Debug)]
#[command(after_long_help = format!("{DATA_HELP}\n\n{}", exit_codes_help()))]
pub struct FsckArgs {
    /// Repair what can be repaired (opens the image for writing)
    #[arg(long)]
    pub repair: bool,
    /// Also read every data block and compare it with its checksum (off by
    /// default: it reads all the data; see below)
    #[arg(long)]
    pub data: bool,
    /// Image file or block device holding the volume
    pub target: PathBuf,
}

/// `tux3 fsck`.
pub fn run(args: &FsckArgs) -> Result<u8, CliError> {
    check_target(&args.target, args.repair, args.data)
}

/// Check the volume on `target` (repairing with `repair`), print the report
/// on stdout, and return the exit code.
pub(crate) fn check_target(target: &Path, repair: bool, data: bool) -> Result<u8, CliError> {
    let operational = |e| image_error(target, e).with_exit(EXIT_OPERATIONAL);
    let dev = open_path(target, repair).map_err(operational)?;
    let opts = FsckOptions {
        repair,
        progress: std::io::stderr().is_terminal(),
        data,
    };
    let report = check(dev, &opts).map_err(operational)?;

    let mut text = String::new();
    for line in &report.repaired {
        text.push_str(&format!("repaired: {line}\n"));
    }
    for line in &report.notes {
        text.push_str(&format!("note: {line}\n"));
    }
    for line in &report.problems {
        text.push_str(line);
        text.push('\n');
    }
    for (tally, what) in [(report.leaked, "leaked"), (report.claimed_twice, "claimed twice")] {
        if tally.blocks > 0 {
            text.push_str(&format!(
                "{what}: {} blocks in {} ranges\n",
                tally.blocks, tally.ranges
            ));
        }
    }
    if report.freed > 0 {
        text.push_str(&format!("repaired: freed {} leaked blocks\n", report.freed));
    }
    let mut counts = format!("{} inodes, {} blocks used", report.inodes, report.blocks_used);
    if report.unify_frees > 0 {
        counts.push_str(&format!(
            " ({} of them the log and nodes the next unify frees)",
            report.unify_frees
        ));
    }
    if let Some(n) = report.data_checked {
        counts.push_str(&format!(", {n} data blocks read and checked"));
    }
    let target = target.display();
    let (summary, code) = if !report.problems.is_empty() {
        let s = format!(
            "{target}: {} problems left, {} repaired; {counts}",
            report.problems.len(),
            report.repaired.len()
        );
        (s, EXIT_ERRORS_LEFT)
    } else if !report.repaired.is_empty() {
        let s = format!("{target}: {} problems repaired; {counts}", report.repaired.len());
        (s, EXIT_REPAIRED)
    } else {
        (format!("{target}: clean, {counts}"), EXIT_CLEAN)
    };
    text.push_str(&summary);
    text.push('\n');
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        // A closed pipe does not change what the check found.
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(stdout_error(e).with_exit(EXIT_OPERATIONAL))
        }
        _ => Ok(code),
    }
}
