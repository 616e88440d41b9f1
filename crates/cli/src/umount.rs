//! `tux3 umount [-l] [-f] MOUNTPOINT` and `umount.fuse.tux3`, the helper
//! umount(8) runs for mounts of type `fuse.tux3`: unmount a tux3 mount and
//! return only once its server has committed everything and closed the
//! volume, as umount(8) does for a kernel filesystem. umount(2) alone (and
//! `fusermount3 -u`) returns as soon as the kernel lets go of the mount,
//! while the server may still be writing the last delta: a crash, a second
//! mount or a `mkfs` of the device right then would lose it.
//!
//! The server holds the volume's lock (`mount::lock_volume`: a `flock` of
//! an image, an exclusive open of a block device) until the volume is
//! closed; waiting is taking that lock for a moment.
//!
//! Calls [`super::mount::lock_volume`] and reads `/proc/self/mounts`.

use super::mount::lock_volume;
use super::sync::{tux3_mount_table, unescape};
use super::CliError;
use clap::Args;
use std::ffi::{CString, OsString};
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Arguments of `tux3 umount`.
#[derive(Args, Debug)]
pub struct UmountArgs {
    /// Detach the mount now and let the server finish once the files open
    /// on it are closed (umount2's MNT_DETACH); returns at once
    #[arg(short = 'l', long)]
    pub lazy: bool,
    /// Force the unmount even if the server does not answer (MNT_FORCE)
    #[arg(short = 'f', long)]
    pub force: bool,
    /// The mount point (or the image or device mounted)
    pub mountpoint: PathBuf,
}

/// What `tux3 umount --help` and its man page say first.
pub const LONG_ABOUT: &str = "Unmount a tux3 mount and wait until its server has committed \
     everything and closed the volume. umount(8) does the same through umount.fuse.tux3, which \
     make install puts in /sbin; umount(2) and fusermount3 -u return while the server may still \
     be writing.";

/// `tux3 umount`.
pub fn run(a: &UmountArgs) -> Result<u8, CliError> {
    let say = |m: &str| eprintln!("tux3 umount: {m}");
    unmount(&a.mountpoint, a.lazy, a.force, &say)?;
    Ok(0)
}

/// Entry point of the `umount.fuse.tux3` binary, as umount(8) runs it:
/// `umount.fuse.tux3 {DIR|SOURCE} [-flnrv] [-t TYPE]`. Exit codes follow
/// umount(8): 0 unmounted, 1 bad invocation, 32 failure.
pub fn helper_main() -> ExitCode {
    let say = |m: &str| {
        let _ = writeln!(io::stderr(), "umount.fuse.tux3: {m}");
    };
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let h = match HelperArgs::parse(&args) {
        Ok(h) => h,
        Err(e) => {
            say(&e);
            return ExitCode::from(1);
        }
    };
    match unmount(&h.target, h.lazy, h.force, &say) {
        Ok(()) => {
            if h.verbose {
                say(&format!("{} unmounted", h.target.display()));
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            say(&e.message);
            ExitCode::from(32)
        }
    }
}

/// The helper's command line.
#[derive(Debug, PartialEq, Eq)]
struct HelperArgs {
    target: PathBuf,
    lazy: bool,
    force: bool,
    verbose: bool,
}

impl HelperArgs {
    /// `{DIR|SOURCE} [-flnrv] [-t TYPE]`, flags anywhere and clustered
    /// (`-fv`). `-n` (no mtab) and `-r` (remount read-only on failure)
    /// change nothing here; `-N` (another mount namespace) is refused.
    fn parse(args: &[OsString]) -> Result<HelperArgs, String> {
        let mut target = None;
        let (mut lazy, mut force, mut verbose) = (false, false, false);
        let mut it = args.iter();
        while let Some(a) = it.next() {
            let bytes = a.as_bytes();
            if bytes.len() < 2 || bytes[0] != b'-' {
                if target.replace(PathBuf::from(a)).is_some() {
                    return Err(format!(
                        "more than one mount point given ({})",
                        a.to_string_lossy()
                    ));
                }
                continue;
            }
            for &c in &bytes[1..] {
                match c {
                    b'l' => lazy = true,
                    b'f' => force = true,
                    b'v' => verbose = true,
                    b'n' | b'r' => {}
                    b't' => {
                        it.next().ok_or("-t needs a type")?;
                    }
                    b'N' => return Err("-N (another mount namespace) is not supported".into()),
                    _ => return Err(format!("unknown option -{}", c as char)),
                }
            }
        }
        let target = target.ok_or("no mount point given")?;
        Ok(HelperArgs {
            target,
            lazy,
            force,
            verbose,
        })
    }
}

/// The tux3 mount `path` names: its mount point or its source (image or
/// device). Returns (source, mount point).
fn find_mount(path: &Path) -> Result<(PathBuf, PathBuf), CliError> {
    let want = path.canonicalize().map_err(|e| CliError::at(path.display(), e))?;
    let table = tux3_mount_table().map_err(|e| CliError::at("/proc/self/mounts", e))?;
    // The last matching line is the mount on top.
    table
        .iter()
        .rev()
        .find(|(_, dir)| *dir == want)
        .or_else(|| table.iter().rev().find(|(src, _)| *src == want))
        .cloned()
        .ok_or_else(|| CliError::new(format!("{}: not a tux3 mount", path.display())))
}

/// Unmount the tux3 mount `path` names and, unless `lazy`, wait until its
/// server has closed the volume. `say` reports a long wait.
pub(crate) fn unmount(path: &Path, lazy: bool, force: bool, say: &dyn Fn(&str)) -> Result<(), CliError> {
    let (source, mountpoint) = find_mount(path)?;
    let mut flags = 0;
    if lazy {
        flags |= libc::MNT_DETACH;
    }
    if force {
        flags |= libc::MNT_FORCE;
    }
    let read_only = mounted_read_only(&mountpoint);
    umount_now(
        &mountpoint,
        flags,
        "files are open on it; -l detaches it now and lets the server finish once they are closed",
    )?;
    // A read-only mount (a snapshot beside the live volume) writes nothing
    // to wait for, and the lock stays with the other mount of the volume.
    let others = tux3_mount_table()
        .unwrap_or_default()
        .iter()
        .any(|(src, _)| *src == source);
    let nothing_to_wait_for = lazy || (read_only && others);
    if !nothing_to_wait_for {
        wait_released(&source, WAIT_NOTE, say);
    }
    Ok(())
}

/// Whether the mount at `mountpoint` (the one on top) is read-only, by
/// its options in /proc/self/mounts (false when they cannot be read).
fn mounted_read_only(mountpoint: &Path) -> bool {
    let Ok(table) = std::fs::read_to_string("/proc/self/mounts") else {
        return false;
    };
    table
        .lines()
        .rev()
        .filter_map(|l| {
            let mut f = l.split(' ');
            let dir = PathBuf::from(unescape(f.nth(1)?));
            let opts = f.nth(1)?;
            (dir == mountpoint).then(|| opts.split(',').any(|o| o == "ro"))
        })
        .next()
        .unwrap_or(false)
}

/// umount2(2) of `mountpoint` with `flags`; `busy` says what to do when
/// files are open on it.
pub(crate) fn umount_now(mountpoint: &Path, flags: libc::c_int, busy: &str) -> Result<(), CliError> {
    let mp = CString::new(mountpoint.as_os_str().as_bytes())
        .map_err(|_| CliError::new(format!("{}: bad mount point", mountpoint.display())))?;
    // SAFETY: a NUL-terminated path.
    if unsafe { libc::umount2(mp.as_ptr(), flags) } == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    Err(match e.raw_os_error() {
        Some(libc::EBUSY) => CliError::new(format!("{}: busy: {busy}", mountpoint.display())),
        _ => CliError::at(format!("{}: unmount", mountpoint.display()), e),
    })
}

/// When a wait for the server is reported.
const WAIT_NOTE: Duration = Duration::from_secs(1);

/// Wait until the server of the volume at `source`, just unmounted, has
/// closed it (its lock can be taken), saying so once after `note`. A
/// snapshot mount holds no lock: nothing to wait for.
pub(crate) fn wait_released(source: &Path, note: Duration, say: &dyn Fn(&str)) {
    let start = Instant::now();
    let mut said = false;
    while lock_volume(source, false).is_err() {
        if !said && start.elapsed() >= note {
            say(&format!(
                "waiting for the tux3 server to commit and close {}",
                source.display()
            ));
            said = true;
        }
        // Nothing to wait on but the lock: a short poll, as fsck(8) or
        // mount(8) would do for a device in use.
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<HelperArgs, String> {
        HelperArgs::parse(&args.iter().map(OsString::from).collect::<Vec<_>>())
    }

    #[test]
    fn helper_arguments_as_umount_passes_them() {
        let h = parse(&["/mnt/a b", "-n", "-t", "fuse.tux3", "-fv"]).unwrap();
        assert_eq!(
            h,
            HelperArgs {
                target: PathBuf::from("/mnt/a b"),
                lazy: false,
                force: true,
                verbose: true,
            }
        );
        assert!(parse(&["-l", "/mnt"]).unwrap().lazy);
        assert_eq!(parse(&["-n"]).unwrap_err(), "no mount point given");
        assert_eq!(parse(&["/mnt", "-x"]).unwrap_err(), "unknown option -x");
        assert!(parse(&["/mnt", "-N", "4026531840"])
            .unwrap_err()
            .contains("namespace"));
        assert!(parse(&["/a", "/b"]).is_err());
        assert_eq!(parse(&["/mnt", "-t"]).unwrap_err(), "-t needs a type");
    }
}
