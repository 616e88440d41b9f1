//! `tux3 resize TARGET SIZE|max`: grow or shrink a volume, on a path of
//! its mount (the server resizes it, [`tux3_fuse::IOC_RESIZE`]) or an
//! unmounted image file or block device (`Fs::resize`). An image file is
//! extended or cut to the new size; a block device must be as large
//! already. Growing takes the same time at any size; shrinking moves
//! everything past the new end below it (file data, tree nodes, the log,
//! the bitmap), unless a snapshot holds blocks there: then it fails
//! naming the snapshots, changing nothing.
//!
//! Exit codes: 0 resized (or already that size), 8 operational error,
//! 16 usage error. Silent on success unless `-v`.
//!
//! Calls the engine's resize, the FUSE adapter's ioctl number and the
//! snapshot command's target and image helpers.

use super::args::parse_size;
use super::fsck::{EXIT_OPERATIONAL, EXIT_USAGE};
use super::target::{close, locate, open_image, Target};
use super::CliError;
use clap::Args;
use std::fs::File;
use std::io;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use tux3::Fs;
use tux3_fuse::{IOC_RESIZE, RESIZE_ARG_LEN};

pub const LONG_ABOUT: &str = "Grow or shrink a volume, mounted or not. SIZE is a size in bytes \
with an optional K, M, G or T suffix, or +SIZE or -SIZE for a change, or \"max\": as large as the \
device (or the image file, if something else made it larger).\n\nOn a path of a tux3 mount the \
server resizes the volume while it is in use; on an unmounted image file the file is extended or \
cut to the new size, and a block device must be as large already.\n\nGrowing takes the same time \
at any size: the new space is free at once. Shrinking moves everything in use past the new end \
below it — file data, preallocated ranges, tree nodes, the log and the free-space bitmap — in \
batches while the volume stays in use; extents shared between clones are copied (each file gets \
its own), so they need that room. What a snapshot holds cannot move: if a snapshot holds blocks \
past the new end the shrink fails naming it (on a mount the server's log names it) and nothing \
moves; delete it first. What is in use must fit in the new size. A crash at any point leaves the \
old size or the new one, with everything intact.\
\n\nExit codes: 0 resized, 8 operational error, 16 usage error.";

/// Arguments of `tux3 resize`.
#[derive(Args, Debug)]
pub struct ResizeArgs {
    /// A path on a tux3 mount, or an image file or block device
    pub target: PathBuf,
    /// The new size (bytes, with K, M, G or T), +SIZE, -SIZE, or "max"
    #[arg(value_parser = parse_new_size, allow_hyphen_values = true)]
    pub size: NewSize,
    /// Print the old and the new size
    #[arg(long, short = 'v')]
    pub verbose: bool,
}

/// A size as given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NewSize {
    Bytes(u64),
    Grow(u64),
    Shrink(u64),
    Max,
}

fn parse_new_size(text: &str) -> Result<NewSize, String> {
    if text == "max" {
        return Ok(NewSize::Max);
    }
    match text.as_bytes().first() {
        Some(b'+') => parse_size(&text[1..]).map(NewSize::Grow),
        Some(b'-') => parse_size(&text[1..]).map(NewSize::Shrink),
        _ => parse_size(text).map(NewSize::Bytes),
    }
}

impl NewSize {
    /// The new size in bytes, given the current one (0: max).
    fn bytes(self, now: u64) -> Result<u64, String> {
        match self {
            NewSize::Bytes(b) => Ok(b),
            NewSize::Grow(d) => now.checked_add(d).ok_or_else(|| "size too large".to_string()),
            NewSize::Shrink(d) => now
                .checked_sub(d)
                .filter(|&b| b > 0)
                .ok_or_else(|| format!("cannot shrink a volume of {now} bytes by {d}")),
            NewSize::Max => Ok(0),
        }
    }
}

pub fn run(a: &ResizeArgs) -> Result<u8, CliError> {
    let target = a.target.as_path();
    let (old, new, bs) = match locate(target)? {
        Target::Mount(f, _) => on_mount(target, &f, a.size)?,
        Target::Image => on_image(target, a.size)?,
    };
    if a.verbose {
        println!(
            "{}: {old} blocks ({}) -> {new} blocks ({})",
            target.display(),
            human(old * bs),
            human(new * bs)
        );
    }
    Ok(0)
}

fn usage(target: &Path, e: String) -> CliError {
    CliError::at(target.display(), e).with_exit(EXIT_USAGE)
}

fn on_image(target: &Path, size: NewSize) -> Result<(u64, u64, u64), CliError> {
    let (fs, _lock) = open_image(target, true).map_err(|e| e.with_exit(EXIT_OPERATIONAL))?;
    let r = resize_image(target, &fs, size);
    let closed = close(target, fs).map_err(|e| e.with_exit(EXIT_OPERATIONAL));
    let r = r?;
    closed?;
    Ok(r)
}

fn resize_image(target: &Path, fs: &Fs, size: NewSize) -> Result<(u64, u64, u64), CliError> {
    let op = |e: tux3::Error| match e {
        tux3::Error::Busy(what) => CliError::at(target.display(), what).with_exit(EXIT_OPERATIONAL),
        e => failed(target, e.errno().0),
    };
    let st = fs.statfs().map_err(op)?;
    let bs = u64::from(st.block_size);
    let bytes = size.bytes(st.blocks * bs).map_err(|e| usage(target, e))?;
    let blocks = if bytes == 0 {
        fs.device_capacity().map_err(op)?
    } else {
        bytes / bs
    };
    let r = fs.resize(blocks).map_err(op)?;
    Ok((r.old_blocks, r.new_blocks, bs))
}

fn on_mount(target: &Path, f: &File, size: NewSize) -> Result<(u64, u64, u64), CliError> {
    let op = |e: io::Error| CliError::at(target.display(), e).with_exit(EXIT_OPERATIONAL);
    // SAFETY: statvfs writes one struct through the pointer, which is valid.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstatvfs(f.as_raw_fd(), &mut st) } != 0 {
        return Err(op(io::Error::last_os_error()));
    }
    let bs = st.f_frsize as u64;
    let bytes = size
        .bytes(st.f_blocks as u64 * bs)
        .map_err(|e| usage(target, e))?;
    let mut arg = [0u8; RESIZE_ARG_LEN];
    arg[..8].copy_from_slice(&bytes.to_ne_bytes());
    // SAFETY: the argument is IOC_RESIZE's size; the descriptor is open.
    if unsafe { libc::ioctl(f.as_raw_fd(), IOC_RESIZE as _, arg.as_mut_ptr()) } != 0 {
        return Err(failed(
            target,
            io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO),
        ));
    }
    let word = |i: usize| u64::from_ne_bytes(arg[i..i + 8].try_into().unwrap_or_default());
    Ok((word(0), word(8), bs))
}

/// A resize that failed with `errno`, said as what it means.
fn failed(target: &Path, errno: i32) -> CliError {
    let what = match errno {
        libc::ENOSPC => "what is in use does not fit in the new size".to_string(),
        libc::EBUSY => "blocks past the new end are held: by snapshots (delete them first), or by \
                        changes made meanwhile (try again); the server's log says which"
            .to_string(),
        libc::ENOTTY => "the server does not know resize (an older tux3?)".to_string(),
        e => io::Error::from_raw_os_error(e).to_string(),
    };
    CliError::at(target.display(), what).with_exit(EXIT_OPERATIONAL)
}

/// `1.5 GiB`, for messages.
fn human(bytes: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", units[u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_absolute_relative_and_max() {
        assert_eq!(parse_new_size("1G"), Ok(NewSize::Bytes(1 << 30)));
        assert_eq!(parse_new_size("+64M"), Ok(NewSize::Grow(64 << 20)));
        assert_eq!(parse_new_size("-1T"), Ok(NewSize::Shrink(1 << 40)));
        assert_eq!(parse_new_size("max"), Ok(NewSize::Max));
        assert!(parse_new_size("big").is_err());
        assert_eq!(NewSize::Grow(10).bytes(100), Ok(110));
        assert!(NewSize::Shrink(100).bytes(100).is_err());
        assert_eq!(NewSize::Max.bytes(100), Ok(0));
    }
}
