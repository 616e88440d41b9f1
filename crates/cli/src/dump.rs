//! `tux3 dump TARGET`: print the structure report of a volume.
//!
//! Calls [`tux3::open_path`] (read-only) and
//! [`tux3_tools::dump::report`].

use super::image::image_error;
use super::{stdout_error, CliError};
use clap::Args;
use std::io::Write;
use std::path::PathBuf;
use tux3::open_path;
use tux3_tools::dump::report;

/// Arguments of `tux3 dump`.
#[derive(Args, Debug)]
pub struct DumpArgs {
    /// Image file or block device holding the volume
    pub target: PathBuf,
}

/// `tux3 dump`.
pub fn run(args: &DumpArgs) -> Result<u8, CliError> {
    let dev = open_path(&args.target, false).map_err(|e| image_error(&args.target, e))?;
    let mut text = report(dev).map_err(|e| image_error(&args.target, e))?;
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    out.write_all(text.as_bytes())
        .and_then(|_| out.flush())
        .map_err(stdout_error)?;
    Ok(0)
}
