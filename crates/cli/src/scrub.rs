//! `tux3 scrub start|status|cancel TARGET`: read every block of a volume
//! and its snapshots and check it against its checksum
//! (`tux3_tools::scrub`). On a path of a tux3 mount the server does the
//! work in the background ([`tux3_fuse::IOC_SCRUB`]): `start` returns once
//! it runs (or, with `--wait`, shows progress and the findings when it
//! ends), `status` reports on it and `cancel` stops it. On an unmounted
//! image `start` opens the volume and runs in the foreground; `status`
//! prints the volume's scrub state record. An interrupted scrub (cancel,
//! unmount, crash, Ctrl-C) resumes at the next `start` from its saved
//! position; `--restart` begins again.
//!
//! Exit codes are fsck's: 0 clean, 4 damage found, 8 operational error,
//! 16 usage error, 32 cancelled. A bar on a terminal; silent on success
//! otherwise.
//!
//! Calls `tux3_tools::scrub`, the FUSE adapter's ioctl encoding, and the
//! snapshot command's target and image helpers.

use super::fsck::{EXIT_CANCELLED, EXIT_CLEAN, EXIT_ERRORS_LEFT, EXIT_OPERATIONAL, EXIT_USAGE};
use super::target::{close, locate, open_image, Target};
use super::CliError;
use clap::{Args, Subcommand};
use std::fs::File;
use std::io::{self, IsTerminal};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tux3_fuse::{
    decode_status, encode_request, ScrubStatus, IOC_SCRUB, NO_EXIT, SCRUB_CANCEL, SCRUB_RESTART,
};
use tux3_fuse::{SCRUB_START, SCRUB_STATUS};
use tux3_tools::scrub::{self, Control, Hook, Options, DEFAULT_RATE};

pub const LONG_ABOUT: &str = "Read every block of a volume and of its snapshots, once, in device \
order, and check it: file data against its checksums, metadata against its header checksum and \
address. Damaged files are named by every path, with the snapshots that hold the damaged blocks; \
damaged metadata by structure and block.\n\nOn a path of a tux3 mount the server scrubs in the \
background: `start` returns once it runs (with --wait it shows progress and the findings at the end), \
`status` reports progress (bytes, rate, ETA) or the last findings, `cancel` stops it. On an unmounted \
image `start` runs in the foreground and `status` prints the volume's scrub state.\n\nThe position is \
saved on the volume every 0.5% (and at cancel and unmount): after an unmount, a crash or Ctrl-C, \
`start` resumes; --restart begins again.\n\nExit codes: 0 clean, 4 damage found, 8 operational \
error, 16 usage error, 32 cancelled.";

/// Arguments of `tux3 scrub`.
#[derive(Args, Debug)]
pub struct ScrubArgs {
    #[command(subcommand)]
    pub action: Action,
}

#[derive(Subcommand, Debug)]
pub enum Action {
    /// Start (or resume) a scrub
    Start(StartArgs),
    /// Print a scrub's progress or findings
    Status(TargetArg),
    /// Stop a running scrub (on a mount); its position is kept
    Cancel(TargetArg),
}

#[derive(Args, Debug)]
pub struct TargetArg {
    /// A path on a tux3 mount, or an image file or block device
    pub target: PathBuf,
}

#[derive(Args, Debug)]
pub struct StartArgs {
    /// A path on a tux3 mount, or an image file or block device
    pub target: PathBuf,
    /// Begin at the first block even if a scrub was interrupted
    #[arg(long)]
    pub restart: bool,
    /// Read at most this many MiB/s; 0 or "max": as fast as the device
    /// reads [default: 64]
    #[arg(long, value_name = "MB/s", value_parser = parse_rate)]
    pub rate: Option<u64>,
    /// On a mount: wait for the scrub to end, showing progress, and exit
    /// with its result
    #[arg(long)]
    pub wait: bool,
}

/// MiB/s as bytes/s; "max" and 0 are no limit.
fn parse_rate(s: &str) -> Result<u64, String> {
    if s == "max" {
        return Ok(0);
    }
    let mb: f64 = s
        .parse()
        .map_err(|_| format!("{s:?} is not a number of MiB/s or \"max\""))?;
    if !(mb.is_finite() && mb >= 0.0) {
        return Err(format!("{s:?} is not a rate"));
    }
    Ok((mb * (1u64 << 20) as f64) as u64)
}

pub fn run(a: &ScrubArgs) -> Result<u8, CliError> {
    let target = match &a.action {
        Action::Start(s) => &s.target,
        Action::Status(t) | Action::Cancel(t) => &t.target,
    };
    let usage = |e: CliError| e.with_exit(EXIT_OPERATIONAL);
    match (locate(target).map_err(usage)?, &a.action) {
        (Target::Mount(f, _), Action::Start(s)) => {
            let flags = if s.restart { SCRUB_RESTART } else { 0 };
            let st = ioctl(target, &f, SCRUB_START, flags, s.rate.unwrap_or(DEFAULT_RATE))?;
            if s.wait {
                wait(target, &f, st)
            } else {
                Ok(EXIT_CLEAN)
            }
        }
        (Target::Mount(f, _), Action::Status(_)) => {
            let st = ioctl(target, &f, SCRUB_STATUS, 0, 0)?;
            print_status(target, &st);
            Ok(if st.running || st.exit == NO_EXIT { EXIT_CLEAN } else { st.exit as u8 })
        }
        (Target::Mount(f, _), Action::Cancel(_)) => ioctl(target, &f, SCRUB_CANCEL, 0, 0).map(|_| EXIT_CLEAN),
        (Target::Image, Action::Start(s)) => foreground(target, s),
        (Target::Image, Action::Status(_)) => image_status(target),
        (Target::Image, Action::Cancel(_)) => Err(CliError::new(format!(
            "{}: not mounted: a scrub of an image runs in the foreground (stop it with Ctrl-C; `start` resumes it)",
            target.display()
        ))
        .with_exit(EXIT_USAGE)),
    }
}

/// Send one scrub request on the mount.
fn ioctl(target: &Path, f: &File, command: u32, flags: u32, rate: u64) -> Result<ScrubStatus, CliError> {
    let mut arg = encode_request(command, flags, rate);
    // SAFETY: the argument is IOC_SCRUB's size; the descriptor is open.
    if unsafe { libc::ioctl(f.as_raw_fd(), IOC_SCRUB as _, arg.as_mut_ptr()) } != 0 {
        let e = io::Error::last_os_error();
        let what = match e.raw_os_error() {
            Some(libc::EBUSY) => "a scrub is running already".to_string(),
            Some(libc::ESRCH) => "no scrub is running".to_string(),
            Some(libc::ENOTTY | libc::EINVAL) => {
                "the server does not know scrub (an older tux3?)".to_string()
            }
            _ => e.to_string(),
        };
        return Err(CliError::new(format!("{}: {what}", target.display())).with_exit(EXIT_OPERATIONAL));
    }
    Ok(decode_status(&arg))
}

/// A bar over bytes, with rate and ETA, on a terminal, headed `what`.
pub(crate) fn bytes_bar(what: &str, total: u64) -> Option<indicatif::ProgressBar> {
    if !io::stderr().is_terminal() {
        return None;
    }
    let b = indicatif::ProgressBar::with_draw_target(Some(total), indicatif::ProgressDrawTarget::stderr());
    let template = format!("{what} {{bar:40}} {{bytes}}/{{total_bytes}} {{bytes_per_sec}} ETA {{eta}}");
    if let Ok(style) = indicatif::ProgressStyle::with_template(&template) {
        b.set_style(style);
    }
    Some(b)
}

/// Follow a scrub on a mount to its end.
fn wait(target: &Path, f: &File, mut st: ScrubStatus) -> Result<u8, CliError> {
    let b = bytes_bar("scrub", st.total.max(1));
    while st.running || st.exit == NO_EXIT {
        if let Some(b) = &b {
            b.set_length(st.total.max(1));
            b.set_position(st.done);
        }
        std::thread::sleep(Duration::from_millis(250));
        st = ioctl(target, f, SCRUB_STATUS, 0, 0)?;
    }
    if let Some(b) = b {
        b.finish_and_clear();
    }
    print_findings(target, &st.text, st.exit as u8);
    Ok(st.exit as u8)
}

/// Findings on stdout; a summary on a terminal.
fn print_findings(target: &Path, text: &str, exit: u8) {
    for line in text.lines() {
        println!("{line}");
    }
    if exit == EXIT_CLEAN && io::stdout().is_terminal() {
        println!("{}: clean", target.display());
    }
}

fn mib(b: u64) -> f64 {
    b as f64 / f64::from(1u32 << 20)
}

fn print_status(target: &Path, st: &ScrubStatus) {
    let t = target.display();
    if st.running {
        let secs = (st.elapsed_ms as f64 / 1000.0).max(0.001);
        let rate = st.read as f64 / secs;
        let left = st.total.saturating_sub(st.done) as f64;
        let eta = if rate > 0.0 {
            format!("{:.0} s", left / rate)
        } else {
            "unknown".into()
        };
        let pct = if st.total == 0 {
            0.0
        } else {
            100.0 * st.done as f64 / st.total as f64
        };
        println!(
            "{t}: scrub running: {:.1} of {:.1} MiB ({pct:.1}%), {:.1} MiB/s, ETA {eta}",
            mib(st.done),
            mib(st.total),
            rate / f64::from(1u32 << 20)
        );
    } else if st.exit == NO_EXIT {
        println!("{t}: no scrub has run since the mount");
    } else {
        let how = match st.exit as u8 {
            EXIT_CLEAN => "finished, clean",
            EXIT_ERRORS_LEFT => "finished, damage found",
            EXIT_CANCELLED => "cancelled",
            _ => "failed",
        };
        println!(
            "{t}: scrub {how}: {:.1} of {:.1} MiB checked; {} damaged data blocks, {} damaged metadata blocks",
            mib(st.done),
            mib(st.total),
            st.data_damage,
            st.meta_damage
        );
        for line in st.text.lines() {
            println!("{line}");
        }
    }
}

/// Scrub an unmounted image in the foreground.
fn foreground(target: &Path, s: &StartArgs) -> Result<u8, CliError> {
    let op = |e: CliError| e.with_exit(EXIT_OPERATIONAL);
    // Read-only if the image cannot be written: nothing is saved then.
    let writable = std::fs::OpenOptions::new().write(true).open(target).is_ok();
    let (fs, lock) = open_image(target, writable).map_err(op)?;
    let opts = Options {
        rate: s.rate.unwrap_or(DEFAULT_RATE),
        restart: s.restart,
    };
    let ctl = Control::default();
    let mut b: Option<indicatif::ProgressBar> = None;
    let began = Instant::now();
    let r = scrub::run(&fs, opts, &ctl, &mut |_, done, total| {
        let b =
            b.get_or_insert_with(|| bytes_bar("scrub", total).unwrap_or_else(indicatif::ProgressBar::hidden));
        b.set_position(done);
        Hook::Go
    });
    if let Some(b) = b {
        b.finish_and_clear();
    }
    let closed = close(target, fs).map_err(op);
    drop(lock);
    let (ended, report) = r.map_err(|e| CliError::at(target.display(), e).with_exit(EXIT_OPERATIONAL))?;
    closed?;
    let exit = scrub::exit_code(ended, &report);
    print_findings(target, &report.lines().join("\n"), exit);
    if exit == EXIT_CLEAN && io::stdout().is_terminal() {
        println!(
            "{:.1} MiB checked in {:.1} s",
            mib(report.state.total),
            began.elapsed().as_secs_f64()
        );
    }
    Ok(exit)
}

/// The image's scrub state record.
fn image_status(target: &Path) -> Result<u8, CliError> {
    let op = |e: CliError| e.with_exit(EXIT_OPERATIONAL);
    let (fs, lock) = open_image(target, false).map_err(op)?;
    let st = fs.scrub_state();
    let errors = fs.data_errors();
    let known = fs.known_damage().map(|k| k.len()).unwrap_or(0);
    close(target, fs).map_err(op)?;
    drop(lock);
    let st = st.map_err(|e| CliError::at(target.display(), e).with_exit(EXIT_OPERATIONAL))?;
    let t = target.display();
    match st {
        None => println!("{t}: no scrub has run; {errors} data checksum errors met by reads"),
        Some(s) => println!(
            "{t}: scrub {}: {:.1} of {:.1} MiB checked (position block {}); {} damaged data blocks, {} damaged metadata blocks; {} data checksum errors met by reads",
            s.phase.name(),
            mib(s.done),
            mib(s.total),
            s.position,
            s.data_damage,
            s.meta_damage,
            s.data_errors
        ),
    }
    if known > 0 {
        println!("{t}: {known} data blocks recorded as known damage by fsck --repair (fsck --data names the files)");
    }
    Ok(EXIT_CLEAN)
}
