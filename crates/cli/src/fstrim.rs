//! `tux3 fstrim [-v] [--minimum BYTES] TARGET`: give the free space of a
//! volume back to the device — holes punched in an image file, discards
//! on a block device — as fstrim(8) does for a mounted filesystem. On a
//! path of a tux3 mount the server does the work ([`tux3_fuse::IOC_FSTRIM`],
//! sent for [`tux3_fuse::TRIM_STEP`] bytes of the volume at a time, which
//! drives the bar); on an unmounted image or device the volume is opened
//! (locked as a mount would lock it) and trimmed here. Either way only
//! blocks free for good are discarded, in bounded batches that hold the
//! volume one at a time (`Fs::trim`).
//!
//! Silent on success; `-v` prints what fstrim(8) prints
//! ("/mnt: 1 GiB (1073741824 bytes) trimmed"). Exit codes are fsck's: 0
//! done, 8 operational error (the device cannot discard, a read-only
//! volume, ...), 16 usage error.
//!
//! Calls the snapshot command's target and image helpers and the FUSE
//! adapter's ioctl encoding.

use super::fsck::{EXIT_CLEAN, EXIT_OPERATIONAL, EXIT_USAGE};
use super::target::{close, locate, open_image, Target};
use super::{parse_size, CliError};
use clap::Args;
use std::fs::File;
use std::io::{self, IsTerminal};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use tux3::Errno;
use tux3_fuse::{decode_range, encode_range, IOC_FSTRIM, TRIM_STEP};

pub const LONG_ABOUT: &str = "Give the free space of a volume back to the device: holes punched in \
an image file (the host's allocated size drops), discards (TRIM/UNMAP) on a block device. Only \
blocks that no durable state of the volume and no snapshot refers to are discarded; the open delta \
is committed first, so what was deleted before the command counts.\n\nTARGET is a path on a tux3 \
mount (the server does the work) or an unmounted image file or block device. The volume is held \
one bounded batch at a time, so a mount stays usable meanwhile.\n\nA mount with -o discard does \
this after every commit for the blocks that commit freed.\n\nExit codes: 0 done, 8 operational \
error (the device cannot discard, a read-only volume, not a tux3 volume), 16 usage error.";

/// Exit codes, for the man page.
pub const EXIT_CODES: &[(u8, &str)] = &[
    (EXIT_CLEAN, "the free space was trimmed (or there was none)"),
    (
        EXIT_OPERATIONAL,
        "operational error: the device cannot discard, the volume is read-only or not a tux3 volume, \
         the mount refused",
    ),
    (EXIT_USAGE, "usage error"),
];

/// Arguments of `tux3 fstrim`.
#[derive(Args, Debug)]
pub struct FstrimArgs {
    /// A path on a tux3 mount, or an unmounted image file or block device
    pub target: PathBuf,
    /// Print how much was trimmed ("TARGET: 1 GiB (1073741824 bytes) trimmed")
    #[arg(short, long)]
    pub verbose: bool,
    /// Discard only free runs at least this long (4096, 64K, 1M; default:
    /// any, one block at least)
    #[arg(short, long, value_name = "BYTES", value_parser = parse_size)]
    pub minimum: Option<u64>,
}

pub fn run(a: &FstrimArgs) -> Result<u8, CliError> {
    let op = |e: CliError| e.with_exit(EXIT_OPERATIONAL);
    let minimum = a.minimum.unwrap_or(0);
    let trimmed = match locate(&a.target).map_err(op)? {
        Target::Mount(f, _) => through_mount(&a.target, &f, minimum)?,
        Target::Image => on_image(&a.target, minimum)?,
    };
    if a.verbose {
        println!(
            "{}: {} ({trimmed} bytes) trimmed",
            a.target.display(),
            human(trimmed)
        );
    }
    Ok(EXIT_CLEAN)
}

/// What an error of a trim means, for its message.
fn explain(target: &Path, errno: i32) -> CliError {
    let what = match errno {
        libc::EOPNOTSUPP => "the device cannot discard (the discard operation is not supported)".to_string(),
        libc::EROFS => "the volume is read-only".to_string(),
        libc::EPERM => "only root or the user who mounted it may trim a mount".to_string(),
        libc::EINVAL => "--minimum is larger than the volume".to_string(),
        libc::ENOTTY => "the server does not know fstrim (an older tux3?)".to_string(),
        e => io::Error::from_raw_os_error(e).to_string(),
    };
    CliError::new(format!("{}: {what}", target.display())).with_exit(EXIT_OPERATIONAL)
}

/// A bar over the bytes of the volume looked at, on a terminal.
fn bar(total: u64) -> indicatif::ProgressBar {
    if !io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let b =
        indicatif::ProgressBar::with_draw_target(Some(total.max(1)), indicatif::ProgressDrawTarget::stderr());
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("fstrim {bar:40} {bytes}/{total_bytes} ETA {eta}")
    {
        b.set_style(style);
    }
    b
}

/// Trim through the mount, [`TRIM_STEP`] bytes of the volume per request,
/// until the server says the range lies past the volume.
fn through_mount(target: &Path, f: &File, minimum: u64) -> Result<u64, CliError> {
    let total = volume_bytes(f).unwrap_or(0);
    let b = bar(total);
    let (mut start, mut trimmed) = (0u64, 0u64);
    loop {
        let mut arg = encode_range(start, TRIM_STEP, minimum);
        // SAFETY: the argument is IOC_FSTRIM's size; the descriptor is open.
        if unsafe { libc::ioctl(f.as_raw_fd(), IOC_FSTRIM as _, arg.as_mut_ptr()) } != 0 {
            let e = io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO);
            // Past the end of the volume: done (at 0 it is --minimum).
            if e == libc::EINVAL && start > 0 {
                break;
            }
            b.finish_and_clear();
            return Err(explain(target, e));
        }
        trimmed += decode_range(&arg).map_or(0, |(_, len, _)| len);
        start = start.saturating_add(TRIM_STEP);
        b.set_position(start.min(total));
        if start == u64::MAX {
            break;
        }
    }
    b.finish_and_clear();
    Ok(trimmed)
}

/// Bytes of the volume the mount holds, for the bar (statvfs).
fn volume_bytes(f: &File) -> Option<u64> {
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: fstatvfs fills the struct through a valid pointer.
    let rc = unsafe { libc::fstatvfs(f.as_raw_fd(), &mut st) };
    (rc == 0).then(|| (st.f_blocks as u64).saturating_mul(st.f_frsize as u64))
}

/// Open the unmounted volume and trim it here.
fn on_image(target: &Path, minimum: u64) -> Result<u64, CliError> {
    let op = |e: CliError| e.with_exit(EXIT_OPERATIONAL);
    let (fs, lock) = open_image(target, true).map_err(op)?;
    let mut b: Option<indicatif::ProgressBar> = None;
    let r = fs.trim(0, u64::MAX, minimum, &mut |done, total| {
        b.get_or_insert_with(|| bar(total)).set_position(done);
    });
    if let Some(b) = b {
        b.finish_and_clear();
    }
    let closed = close(target, fs).map_err(op);
    drop(lock);
    let report = r.map_err(|e| match e.errno() {
        Errno::EIO => CliError::at(target.display(), e).with_exit(EXIT_OPERATIONAL),
        errno => explain(target, errno.0),
    })?;
    closed?;
    Ok(report.bytes)
}

/// A size as fstrim(8) prints it: "0 B", "512 B", "1 GiB", "63.9 MiB".
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut exp = 0;
    while exp + 1 < UNITS.len() && bytes >= 1u64 << (10 * (exp + 1)) {
        exp += 1;
    }
    if exp == 0 {
        return format!("{bytes} B");
    }
    let whole = bytes >> (10 * exp);
    let rest = bytes - (whole << (10 * exp));
    // One decimal, rounded; dropped when it is 0.
    let tenth = ((rest as u128 * 10 + (1u128 << (10 * exp - 1))) >> (10 * exp)) as u64;
    match tenth {
        0 => format!("{whole} {}", UNITS[exp]),
        10 => format!("{} {}", whole + 1, UNITS[exp]),
        t => format!("{whole}.{t} {}", UNITS[exp]),
    }
}

#[cfg(test)]
mod tests {
    use super::human;

    #[test]
    fn sizes_read_as_fstrim_prints_them() {
        assert_eq!(human(0), "0 B");
        assert_eq!(human(512), "512 B");
        assert_eq!(human(1 << 30), "1 GiB");
        assert_eq!(human(64 << 20), "64 MiB");
        assert_eq!(human(67_000_000), "63.9 MiB");
        assert_eq!(human((1 << 20) - 1), "1024 KiB");
        assert_eq!(human(1536), "1.5 KiB");
    }
}
