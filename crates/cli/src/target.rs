//! TARGET of the commands that work on a volume mounted or not
//! (`snapshot`, `send`, `receive`, `scrub`, `defrag`, `dedupe`, `clone`,
//! `fstrim`, `resize`): a path on a tux3 mount, whose server does the work,
//! or an image file or block device that is not mounted, which the command
//! opens (locked as a mount would lock it), changes and closes. Which one
//! is decided by the device: a path whose `st_dev` is that of a
//! `fuse.tux3` mount in `/proc/self/mounts` is on that mount. Also the work
//! that needs a mounted volume to itself ([`with_unmounted`]: unmount it,
//! work on its image, mount it again).
//!
//! Calls [`tux3::open_path`], the engine API ([`tux3::Fs`]: open and
//! close), the mount table (`sync.rs`), the volume lock (`mount.rs`),
//! `umount.rs`, and the FUSE adapter's mount-info ioctl.

use super::image::image_error;
use super::mount::lock_volume;
use super::sync::tux3_mount_table;
use super::CliError;
use std::fs::File;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use tux3::types::OpenOptions;
use tux3::{open_path, Fs};
use tux3_fuse::{IOC_MOUNT_INFO, MOUNT_INFO_LEN};

/// Do `work` on the image of the tux3 mount that `f` (a path on it,
/// `target` in messages) is on, unmounted: ask the server how it was
/// mounted, unmount (refused while files are open on it: they would point
/// into the other image), call `work` with the image's path, and mount it
/// again with the same options, whether `work` succeeded or not. `what`
/// names the work in messages ("roll back", "receive").
pub(crate) fn with_unmounted(
    target: &Path,
    f: File,
    what: &str,
    work: &mut dyn FnMut(&Path) -> Result<(), CliError>,
) -> Result<(), CliError> {
    let t = target.display();
    let mut info = [0u8; MOUNT_INFO_LEN];
    // SAFETY: the command's size is that of `info`, which the kernel
    // fills; it outlives the call.
    if unsafe { libc::ioctl(f.as_raw_fd(), IOC_MOUNT_INFO as _, info.as_mut_ptr()) } != 0 {
        let e = io::Error::last_os_error();
        return Err(CliError::at(
            format!("{t}: asking its server how it was mounted"),
            e,
        ));
    }
    let mut parts = info.split(|&b| b == 0);
    let source = PathBuf::from(std::ffi::OsStr::from_bytes(parts.next().unwrap_or_default()));
    let options = String::from_utf8_lossy(parts.next().unwrap_or_default()).into_owned();
    let meta = f.metadata().map_err(|e| CliError::at(&t, e))?;
    let mountpoint = tux3_mount_table()
        .unwrap_or_default()
        .into_iter()
        .find(|(src, m)| *src == source && std::fs::metadata(m).is_ok_and(|mm| mm.dev() == meta.dev()))
        .map(|(_, m)| m)
        .ok_or_else(|| CliError::new(format!("{t}: its mount point is not in /proc/self/mounts")))?;
    drop(f);
    super::umount::umount_now(
        &mountpoint,
        0,
        &format!("files are open on it, which would point into the other image; close them and {what} again"),
    )?;
    // The server closes the volume once it is unmounted; wait for it.
    super::umount::wait_released(&source, std::time::Duration::from_secs(1), &|m: &str| {
        eprintln!("tux3 {what}: {m}")
    });
    let done = work(&source);
    let mut mount = std::process::Command::new(std::env::current_exe().map_err(|e| CliError::at("tux3", e))?);
    mount.arg("mount");
    if !options.is_empty() {
        mount.arg("-o").arg(&options);
    }
    // The server it starts stays in the background: it must not hold our
    // standard streams open (a caller reading them would wait for ever).
    let status = mount
        .arg(&source)
        .arg(&mountpoint)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
    match status {
        Ok(s) if s.success() => done,
        _ => Err(CliError::new(format!(
            "{}: {}; mounting it again failed: run tux3 mount{} {} {}",
            t,
            match &done {
                Ok(()) => format!("{what}: done"),
                Err(e) => e.message.clone(),
            },
            if options.is_empty() {
                String::new()
            } else {
                format!(" -o {options}")
            },
            source.display(),
            mountpoint.display()
        ))
        .with_exit(done.as_ref().err().map_or(1, |e| e.exit))),
    }
}

/// Where the work is done.
pub(crate) enum Target {
    /// On a tux3 mount: a descriptor of the path, for the ioctls, and the
    /// mount's source (its image or device).
    Mount(File, PathBuf),
    /// An image file or block device, not on a tux3 mount.
    Image,
}

/// Decide what `target` is: a path on a tux3 mount, or an image.
pub(crate) fn locate(target: &Path) -> Result<Target, CliError> {
    let meta = std::fs::metadata(target).map_err(|e| CliError::at(target.display(), e))?;
    // A mount point that cannot be reached (its server died) is skipped.
    let on_mount = tux3_mount_table()
        .unwrap_or_default()
        .into_iter()
        .find(|(_, m)| std::fs::metadata(m).is_ok_and(|mm| mm.dev() == meta.dev()));
    if let Some((source, _)) = on_mount {
        // Read access is enough, for files and directories alike;
        // O_NONBLOCK keeps a FIFO from blocking the open.
        let f = File::options()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(target)
            .map_err(|e| CliError::at(target.display(), e))?;
        return Ok(Target::Mount(f, source));
    }
    let kind = meta.file_type();
    if kind.is_file() || kind.is_block_device() {
        return Ok(Target::Image);
    }
    Err(CliError::new(format!(
        "{}: neither on a tux3 mount nor an image file or block device",
        target.display()
    )))
}

/// Open the unmounted volume at `target`, locked as a mount would lock it
/// (exclusively to change it, shared to read it), so a mounted volume is
/// never changed behind its server's back. The lock is the file returned;
/// hold it until the volume is closed.
pub(crate) fn open_image(target: &Path, writable: bool) -> Result<(Fs, File), CliError> {
    let lock = lock_volume(target, !writable).map_err(|e| {
        if e.contains("in use") || e.contains("busy") {
            CliError::new(format!("{e}: give a path on its mount instead"))
        } else {
            CliError::new(e)
        }
    })?;
    let dev = open_path(target, writable).map_err(|e| image_error(target, e))?;
    let opts = OpenOptions {
        read_only: !writable,
        ..OpenOptions::default()
    };
    let fs = Fs::open(dev, opts).map_err(|e| image_error(target, e))?;
    Ok((fs, lock))
}

pub(crate) fn close(target: &Path, fs: Fs) -> Result<(), CliError> {
    fs.close()
        .map_err(|e| CliError::at(format!("{}: close", target.display()), e))
}
