//! `tux3 cat TARGET PATH` and `tux3 readlink TARGET PATH`: copy a regular
//! file of a volume to standard output, or print a symlink's target. The
//! image is opened read-only.
//!
//! Calls the engine API ([`tux3::Fs::read`], [`tux3::Fs::readlink`])
//! through the helpers in `image`.

use super::image::{open_read_only, resolve_arg};
use super::{stdout_error, CliError};
use clap::Args;
use std::ffi::OsString;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use tux3::types::FileType;

/// Bytes asked of the engine per read.
const CHUNK: usize = 1 << 20;

/// Arguments of `tux3 cat`.
#[derive(Args, Debug)]
pub struct CatArgs {
    /// Image file or block device holding the volume
    pub target: PathBuf,
    /// Path of a regular file inside the volume
    pub path: OsString,
}

/// Arguments of `tux3 readlink`.
#[derive(Args, Debug)]
pub struct ReadlinkArgs {
    /// Image file or block device holding the volume
    pub target: PathBuf,
    /// Path of a symbolic link inside the volume
    pub path: OsString,
}

fn kind_name(kind: FileType) -> &'static str {
    match kind {
        FileType::Regular => "a regular file",
        FileType::Directory => "a directory",
        FileType::Symlink => "a symbolic link",
        FileType::Fifo => "a fifo",
        FileType::CharDevice => "a character device",
        FileType::BlockDevice => "a block device",
        FileType::Socket => "a socket",
    }
}

/// `tux3 cat`.
pub fn run(args: &CatArgs) -> Result<u8, CliError> {
    let fs = open_read_only(&args.target)?;
    let path = args.path.as_bytes();
    let shown = String::from_utf8_lossy(path).into_owned();
    let attr = resolve_arg(&fs, path)?;
    match attr.kind {
        FileType::Regular => {}
        FileType::Directory => return Err(CliError::new(format!("{shown}: Is a directory"))),
        FileType::Symlink => {
            let target = fs.readlink(attr.ino).map_err(|e| CliError::at(&shown, e))?;
            return Err(CliError::new(format!(
                "{shown}: is a symbolic link to '{}'; links are not followed",
                String::from_utf8_lossy(&target)
            )));
        }
        other => {
            return Err(CliError::new(format!(
                "{shown}: is {}, not a regular file",
                kind_name(other)
            )))
        }
    }
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let mut offset = 0u64;
    loop {
        let data = fs
            .read(attr.ino, offset, CHUNK)
            .map_err(|e| CliError::at(format!("{shown}: read at offset {offset}"), e))?;
        if data.is_empty() {
            break;
        }
        out.write_all(&data).map_err(stdout_error)?;
        offset += data.len() as u64;
    }
    out.flush().map_err(stdout_error)?;
    Ok(0)
}

/// `tux3 readlink`.
pub fn run_readlink(args: &ReadlinkArgs) -> Result<u8, CliError> {
    let fs = open_read_only(&args.target)?;
    let path = args.path.as_bytes();
    let shown = String::from_utf8_lossy(path).into_owned();
    let attr = resolve_arg(&fs, path)?;
    if attr.kind != FileType::Symlink {
        return Err(CliError::new(format!(
            "{shown}: is {}, not a symbolic link",
            kind_name(attr.kind)
        )));
    }
    let mut target = fs.readlink(attr.ino).map_err(|e| CliError::at(&shown, e))?;
    target.push(b'\n');
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    out.write_all(&target)
        .and_then(|_| out.flush())
        .map_err(stdout_error)?;
    Ok(0)
}
