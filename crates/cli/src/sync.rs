//! `tux3 sync [PATH...]`: make everything written so far through tux3
//! mounts durable. `sync` and `syncfs` do not reach a FUSE server, so this
//! sends the mount's sync ioctl ([`tux3_fuse::IOC_SYNC`]) on PATH (any
//! file or directory of a mount), or on the root of every tux3 mount in
//! `/proc/self/mounts` when no PATH is given.
//!
//! Calls only the FUSE adapter's ioctl number; the work is the server's.

use super::CliError;
use clap::Args;
use std::fs::File;
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use tux3_fuse::IOC_SYNC;

/// Arguments of `tux3 sync`.
#[derive(Args, Debug)]
pub struct SyncArgs {
    /// Files or directories on tux3 mounts (default: every tux3 mount)
    pub paths: Vec<PathBuf>,
}

pub fn run(a: &SyncArgs) -> Result<u8, CliError> {
    let paths = if a.paths.is_empty() {
        let all = tux3_mounts().map_err(|e| CliError::at("/proc/self/mounts", e))?;
        if all.is_empty() {
            return Err(CliError::new("no tux3 mount found in /proc/self/mounts"));
        }
        all
    } else {
        a.paths.clone()
    };
    // Every path gets its try (a dead mount does not keep the others from
    // their sync); each failure is reported as it happens.
    let mut failed = false;
    for p in &paths {
        if let Err(e) = sync_one(p) {
            eprintln!("tux3 sync: {}", e.message);
            failed = true;
        }
    }
    if failed {
        return Err(CliError::new(String::new()));
    }
    Ok(0)
}

/// Send the sync ioctl on `path`.
fn sync_one(path: &Path) -> Result<(), CliError> {
    let what = path.display();
    // Read access is enough, for files and directories alike; O_NONBLOCK
    // keeps a FIFO from blocking the open.
    let f = File::options()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| CliError::at(&what, e))?;
    // SAFETY: IOC_SYNC takes no argument; the descriptor is open.
    let rc = unsafe { libc::ioctl(f.as_raw_fd(), IOC_SYNC as _) };
    if rc == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    Err(match e.raw_os_error() {
        Some(libc::ENOTTY | libc::EINVAL | libc::ENOSYS | libc::EOPNOTSUPP) => {
            CliError::new(format!("{what}: not on a tux3 mount"))
        }
        _ => CliError::at(format!("{what}: sync failed"), e),
    })
}

/// Mount points of type `fuse.tux3`, from `/proc/self/mounts`.
pub(crate) fn tux3_mounts() -> io::Result<Vec<PathBuf>> {
    Ok(tux3_mount_table()?.into_iter().map(|(_, dir)| dir).collect())
}

/// The mounts of type `fuse.tux3` in `/proc/self/mounts`: (source, mount
/// point). The source is the volume's image or device (`tux3 mount` names
/// it by its canonical path).
pub(crate) fn tux3_mount_table() -> io::Result<Vec<(PathBuf, PathBuf)>> {
    let text = std::fs::read_to_string("/proc/self/mounts")?;
    Ok(text
        .lines()
        .filter_map(|l| {
            let mut f = l.split(' ');
            let (source, dir, kind) = (f.next()?, f.next()?, f.next()?);
            (kind == "fuse.tux3").then(|| (PathBuf::from(unescape(source)), PathBuf::from(unescape(dir))))
        })
        .collect())
}

/// Undo the octal escapes of `/proc/self/mounts` (`\040` for a space).
pub(crate) fn unescape(field: &str) -> String {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (b[i], octal) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_table_escapes_are_undone() {
        assert_eq!(unescape(r"/mnt/a\040b\011c"), "/mnt/a b\tc");
        assert_eq!(unescape(r"/mnt/\134x"), "/mnt/\\x");
        assert_eq!(unescape(r"/mnt/end\04"), r"/mnt/end\04");
    }
}
