//! `tux3 dedupe [-n] [-v] [--zeros] TARGET [PATH...]`: find the blocks
//! regular files hold twice and share them (`tux3_tools::dedupe`). TARGET
//! is an unmounted image file or block device, which this command opens
//! (read-write), changes and closes, or a directory of a tux3 mount, whose
//! server does the work ([`tux3_fuse::IOC_DEDUPE`]) while this command
//! follows it. PATHs (files or directories, relative to TARGET's
//! directory; the image's is the volume's root) limit the walk; none:
//! all of it.
//!
//! Silent on success; `-v` lists the pairs and prints a summary; `-n`
//! changes nothing and prints the summary (and with `-v` the pairs). A
//! bar with rate and ETA on a terminal. Exit codes are fsck's: 0 done, 4
//! something could not be done (a file that could not be read, a call
//! that failed), 8 operational error, 16 usage error, 32 cancelled.
//!
//! Calls `tux3_tools::dedupe`, the FUSE adapter's ioctl encoding, and the
//! snapshot command's target and image helpers.

use super::fsck::{EXIT_OPERATIONAL, EXIT_USAGE};
use super::scrub::bytes_bar;
use super::target::{close, locate, open_image, Target};
use super::CliError;
use clap::Args;
use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tux3::ROOT_INO;
use tux3_fuse::{
    decode_dedupe_status, encode_dedupe_request, encode_dedupe_start, pair_line, DedupeStatus,
    DEDUPE_DRY_RUN, DEDUPE_NO_EXIT, DEDUPE_PAIRS, DEDUPE_STATUS, DEDUPE_ZEROS, IOC_DEDUPE,
};
use tux3_tools::dedupe::{self, Control, Options, Report};

pub const LONG_ABOUT: &str = "Find the blocks that regular files hold twice and share them: each \
block of every file is hashed (xxh3, 128 bits), runs of blocks equal to earlier ones are handed to \
the volume as one range each, and the volume compares them byte by byte and shares them only if \
they are equal, so a hash collision or a write racing with dedupe costs nothing but time. Only \
whole blocks are shared (the partial block at the end of a file is not), and only files of the \
live volume: snapshots are left as they are.\n\nTARGET is an unmounted image file or block device \
(opened read-write and closed cleanly) or a directory of a tux3 mount, whose server does the work \
while the volume is in use. PATHs (files or directories, relative to TARGET's directory, the \
image's being the volume's root) limit the files read; none: all of them.\n\nAll-zero blocks are \
counted but not shared (they should be holes) unless --zeros.\n\nSilent on success; -v lists each \
pair of ranges (DST @OFFSET = SRC @OFFSET: BYTES) and a summary: files, bytes read and the read \
rate, duplicate bytes found, bytes shared, bytes in zero blocks, calls that found the bytes \
differed. -n changes nothing and prints the summary.\n\nExit codes: 0 done, 4 something could not \
be done (a file that could not be read, a range that could not be shared), 8 operational error, \
16 usage error, 32 cancelled.";

/// Arguments of `tux3 dedupe`.
#[derive(Args, Debug)]
pub struct DedupeArgs {
    /// An unmounted image file or block device, or a directory of a tux3 mount
    pub target: PathBuf,
    /// Files or directories to read, relative to TARGET (default: all)
    pub paths: Vec<OsString>,
    /// List each pair of ranges shared, and a summary
    #[arg(short, long)]
    pub verbose: bool,
    /// Change nothing: find the duplicates and print the summary
    #[arg(short = 'n', long)]
    pub dry_run: bool,
    /// Share all-zero blocks too (they are better made holes)
    #[arg(long)]
    pub zeros: bool,
}

fn mib(b: u64) -> f64 {
    b as f64 / f64::from(1u32 << 20)
}

fn op(e: CliError) -> CliError {
    e.with_exit(EXIT_OPERATIONAL)
}

pub fn run(a: &DedupeArgs) -> Result<u8, CliError> {
    let paths: Vec<Vec<u8>> = a.paths.iter().map(|p| p.as_bytes().to_vec()).collect();
    if paths.iter().any(|p| p.split(|&b| b == b'/').any(|c| c == b"..")) {
        return Err(CliError::new("a PATH may not go up (`..`)").with_exit(EXIT_USAGE));
    }
    let (r, exit) = match locate(&a.target).map_err(op)? {
        Target::Mount(f, _) => on_mount(a, &f, &paths)?,
        Target::Image => on_image(a, &paths)?,
    };
    if a.verbose || a.dry_run {
        println!("{}", summary(&r, a.dry_run));
    }
    Ok(exit)
}

/// The summary line.
fn summary(r: &Summary, dry_run: bool) -> String {
    let secs = r.elapsed_ms as f64 / 1000.0;
    let shared = if dry_run {
        "dry run, nothing shared".to_string()
    } else {
        format!("{:.1} MiB shared", mib(r.shared))
    };
    format!(
        "{} files, {:.1} MiB read in {secs:.1} s ({:.1} MiB/s); {:.1} MiB duplicate, {shared}; \
         {:.1} MiB in zero blocks{}; {} calls, {} found the bytes differed",
        r.files,
        mib(r.read),
        mib(r.read) / secs.max(0.001),
        mib(r.dup),
        mib(r.zero),
        if r.unindexed > 0 {
            format!("; {:.1} MiB not indexed (the index was full)", mib(r.unindexed))
        } else {
            String::new()
        },
        r.calls,
        r.differing
    )
}

/// A run's figures, from the library or the server.
#[derive(Default)]
struct Summary {
    files: u64,
    read: u64,
    dup: u64,
    shared: u64,
    zero: u64,
    unindexed: u64,
    calls: u64,
    differing: u64,
    elapsed_ms: u64,
}

impl From<&Report> for Summary {
    fn from(r: &Report) -> Summary {
        Summary {
            files: r.files,
            read: r.bytes_scanned,
            dup: r.dup_bytes,
            shared: r.shared_bytes,
            zero: r.zero_bytes,
            unindexed: r.unindexed_bytes,
            calls: r.calls,
            differing: r.differing,
            elapsed_ms: r.elapsed.as_millis() as u64,
        }
    }
}

impl From<&DedupeStatus> for Summary {
    fn from(s: &DedupeStatus) -> Summary {
        Summary {
            files: s.files,
            read: s.read,
            dup: s.dup_bytes,
            shared: s.shared_bytes,
            zero: s.zero_bytes,
            unindexed: s.unindexed_bytes,
            calls: s.calls,
            differing: s.differing,
            elapsed_ms: s.elapsed_ms,
        }
    }
}

/// Print `line` above the bar, if there is one.
fn say(bar: Option<&indicatif::ProgressBar>, line: &str, err: bool) {
    let p = || {
        if err {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    };
    match bar {
        Some(b) => b.suspend(p),
        None => p(),
    }
}

/// Dedupe the unmounted image TARGET in the foreground.
fn on_image(a: &DedupeArgs, paths: &[Vec<u8>]) -> Result<(Summary, u8), CliError> {
    let (fs, lock) = open_image(&a.target, !a.dry_run).map_err(op)?;
    let opts = Options {
        dry_run: a.dry_run,
        zeros: a.zeros,
        ..Options::default()
    };
    let ctl = Control::default();
    let (stop, bar) = (std::sync::atomic::AtomicBool::new(false), bytes_bar("dedupe", 1));
    let r = std::thread::scope(|s| {
        if let Some(b) = &bar {
            let (ctl, stop) = (&ctl, &stop);
            s.spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    b.set_length(ctl.total.load(std::sync::atomic::Ordering::Relaxed).max(1));
                    b.set_position(ctl.done.load(std::sync::atomic::Ordering::Relaxed));
                    std::thread::sleep(Duration::from_millis(200));
                }
            });
        }
        let r = dedupe::run(&fs, ROOT_INO, paths, &opts, &ctl, &mut |p| {
            if a.verbose {
                say(bar.as_ref(), &pair_line(p), false);
            }
        });
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        r
    });
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let closed = close(&a.target, fs).map_err(op);
    drop(lock);
    let r = r.map_err(|e| CliError::at(a.target.display(), e).with_exit(EXIT_OPERATIONAL))?;
    closed?;
    for f in &r.failures {
        eprintln!("tux3 dedupe: {f}");
    }
    Ok((Summary::from(&r), tux3_fuse::dedupe_exit_code(&r)))
}

/// Have the server of TARGET's mount dedupe, and follow it to its end.
fn on_mount(a: &DedupeArgs, f: &File, paths: &[Vec<u8>]) -> Result<(Summary, u8), CliError> {
    let flags = if a.dry_run { DEDUPE_DRY_RUN } else { 0 }
        | if a.zeros { DEDUPE_ZEROS } else { 0 }
        | if a.verbose { DEDUPE_PAIRS } else { 0 };
    let refs: Vec<&[u8]> = paths.iter().map(Vec::as_slice).collect();
    let mut arg = encode_dedupe_start(flags, &refs)
        .ok_or_else(|| CliError::new("the PATHs are too long for one request").with_exit(EXIT_USAGE))?;
    let mut st = ioctl(&a.target, f, &mut arg)?;
    let bar = bytes_bar("dedupe", 1);
    let mut seen = 0;
    loop {
        let mut taken = st.first_line;
        for l in &st.lines {
            match l.split_at(1) {
                ("P", pair) => say(bar.as_ref(), pair, false),
                (_, what) => say(bar.as_ref(), &format!("tux3 dedupe: {what}"), true),
            }
            taken += 1;
        }
        seen = seen.max(taken);
        if !st.running && st.exit != DEDUPE_NO_EXIT && st.lines.is_empty() {
            break;
        }
        if let Some(b) = &bar {
            b.set_length(st.total.max(1));
            b.set_position(st.done);
        }
        if st.running && st.lines.is_empty() {
            std::thread::sleep(Duration::from_millis(200));
        }
        let mut arg = encode_dedupe_request(DEDUPE_STATUS, seen);
        st = ioctl(&a.target, f, &mut arg)?;
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    Ok((Summary::from(&st), st.exit as u8))
}

/// Send one dedupe request on the mount.
fn ioctl(
    target: &Path,
    f: &File,
    arg: &mut [u8; tux3_fuse::DEDUPE_ARG_LEN],
) -> Result<DedupeStatus, CliError> {
    // SAFETY: the argument is IOC_DEDUPE's size; the descriptor is open.
    if unsafe { libc::ioctl(f.as_raw_fd(), IOC_DEDUPE as _, arg.as_mut_ptr()) } != 0 {
        let e = io::Error::last_os_error();
        let what = match e.raw_os_error() {
            Some(libc::EBUSY) => "a dedupe is running already".to_string(),
            Some(libc::ENOTTY) => "the server does not know dedupe (an older tux3?)".to_string(),
            Some(libc::EPERM) => "only root and the user who mounted it may dedupe".to_string(),
            _ => e.to_string(),
        };
        return Err(CliError::new(format!("{}: {what}", target.display())).with_exit(EXIT_OPERATIONAL));
    }
    Ok(decode_dedupe_status(arg))
}
