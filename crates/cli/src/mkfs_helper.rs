//! `mkfs.tux3`: the program mkfs(8) runs for type tux3, with mkfs(8)'s
//! conventions: `mkfs.tux3 [options] DEVICE [SIZE]`, `-q` quiet, `-V`
//! version, `-F` to format over an existing filesystem (refused without
//! it), exit 0 on success and 1 on any failure, usage errors included. The
//! formatting is `tux3 mkfs`'s ([`super::mkfs::run`]); this file owns only
//! the command line and the check for an existing filesystem.
//!
//! Calls [`super::mkfs`], [`tux3::open_path`] (is there a tux3 volume) and
//! blkid(8), where installed (is there any other filesystem).

use super::args::parse_size;
use super::mkfs::{run as mkfs_run, MkfsArgs};
use super::CliError;
use clap::Parser;
use std::path::Path;
use std::process::{Command, ExitCode, Stdio};

/// Exit code of any failure, as mkfs(8) documents.
pub const EXIT_FAILURE: u8 = 1;

/// The command line of `mkfs.tux3`.
#[derive(Parser, Debug)]
#[command(
    name = "mkfs.tux3",
    bin_name = "mkfs.tux3",
    version,
    args_override_self = true,
    about = "Make a tux3 volume: the program mkfs(8) runs for type tux3",
    long_about = "Make a tux3 volume on a block device or an image file (created sparse when it \
                  does not exist and a size is given; extended when shorter than the size). \
                  A target that already holds a tux3 volume, or any filesystem blkid(8) \
                  recognises, is refused unless -F is given.\n\n\
                  Exit status: 0 success, 1 failure (usage errors included)."
)]
pub struct MkfsHelperArgs {
    #[command(flatten)]
    pub mkfs: MkfsArgs,
    /// Format even a target that holds a filesystem already
    #[arg(short = 'F', long)]
    pub force: bool,
    /// Volume size: a number of blocks (mkfs(8)'s size argument), or bytes
    /// with a K, M, G or T suffix; the same as --size
    #[arg(value_name = "SIZE", conflicts_with = "size")]
    pub blocks: Option<String>,
}

impl MkfsHelperArgs {
    /// The `tux3 mkfs` arguments this command line means.
    pub fn resolve(mut self) -> Result<(MkfsArgs, bool), String> {
        if let Some(text) = &self.blocks {
            self.mkfs.size = Some(size_argument(text, self.mkfs.block_size)?);
        }
        Ok((self.mkfs, self.force))
    }
}

/// mkfs(8)'s size argument: a number of blocks of `block_size` bytes, or a
/// size with a suffix.
pub fn size_argument(text: &str, block_size: u32) -> Result<u64, String> {
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        let blocks: u64 = text
            .parse()
            .map_err(|_| format!("invalid size '{text}': number too large"))?;
        return blocks
            .checked_mul(u64::from(block_size))
            .ok_or_else(|| format!("invalid size '{text}': too large"));
    }
    parse_size(text)
}

/// Entry point of the `mkfs.tux3` binary.
pub fn main() -> ExitCode {
    super::init_logging();
    let args: MkfsHelperArgs = match super::parse_helper(EXIT_FAILURE) {
        Ok(a) => a,
        Err(code) => return code,
    };
    let result = args.resolve().map_err(CliError::new).and_then(|(mkfs, force)| {
        if !force {
            refuse_existing(&mkfs.target)?;
        }
        mkfs_run(&mkfs)
    });
    match result {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mkfs.tux3: {}", e.message);
            ExitCode::from(EXIT_FAILURE)
        }
    }
}

/// Refuse a target that holds a tux3 volume or another filesystem.
fn refuse_existing(target: &Path) -> Result<(), CliError> {
    if !target.exists() {
        return Ok(());
    }
    let found = if tux3::open_path(target, false).is_ok() {
        Some("a tux3 volume".to_string())
    } else {
        blkid_type(target).map(|t| format!("a filesystem of type {t}"))
    };
    match found {
        Some(what) => Err(CliError::new(format!(
            "{}: holds {what} already; give -F to format it anyway",
            target.display()
        ))),
        None => Ok(()),
    }
}

/// The filesystem type blkid(8) finds on `target` by probing it, if blkid
/// is installed and finds one.
fn blkid_type(target: &Path) -> Option<String> {
    let out = Command::new("blkid")
        .args(["-p", "-o", "value", "-s", "TYPE"])
        .arg(target)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    let kind = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && !kind.is_empty()).then_some(kind)
}
