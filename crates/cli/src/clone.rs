//! `tux3 clone [-f] SRC DST` and `tux3 clone [-f] --image IMAGE SRC DST`:
//! make DST a copy of the regular file SRC that shares SRC's blocks
//! (`tux3::Fs::clone_range`: the blocks are shared, not copied; a later
//! write to either file takes new blocks and never changes the other).
//!
//! On a tux3 mount, SRC and DST are paths on it: DST is created (refused
//! if it exists, unless `--force`, which truncates it) and filled with
//! copy_file_range(2) in a loop, which the kernel forwards to the mount's
//! server (`FUSE_COPY_FILE_RANGE`). With `--image`, SRC and DST are paths
//! inside the unmounted image or block device IMAGE (the convention of
//! `tux3 defrag --image`), which this command opens, changes and closes.
//! Either way DST gets SRC's permission bits (not set-user-ID or
//! set-group-ID) and belongs to the caller.
//!
//! Silent on success. Exit codes are fsck's: 0 done, 4 the volume could
//! not clone it (no room, a damaged block, an immutable destination), 8
//! operational error (a path that cannot be reached, an image that cannot
//! be opened), 16 usage error (SRC not a regular file, DST exists, a path
//! not on a tux3 mount, SRC and DST on different volumes).
//!
//! Calls the engine API, and the image and snapshot commands' helpers.

use super::fsck::{EXIT_CLEAN, EXIT_ERRORS_LEFT, EXIT_OPERATIONAL, EXIT_USAGE};
use super::image::{resolve, split_path};
use super::target::{close, locate, open_image, Target};
use super::CliError;
use clap::Args;
use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use tux3::types::{FileType, SetAttr, NAME_MAX};
use tux3::{Errno, Error, Fs};

pub const LONG_ABOUT: &str = "Make DST a copy of the regular file SRC that shares SRC's blocks \
instead of copying them: constant time whatever the size, and no space taken until one of the two \
files is written (a write to either takes new blocks and never changes the other).\n\n\
SRC and DST are paths on one tux3 mount: DST is filled with copy_file_range(2), which the mount's \
server turns into a clone (cp --reflink and cp itself do the same). With --image, SRC and DST are \
paths inside the unmounted image or block device IMAGE (`/` is the volume's root).\n\n\
DST must not exist, unless --force: then it is truncated and cloned over. It gets SRC's \
permission bits (not set-user-ID or set-group-ID) and belongs to the caller.\n\n\
Silent on success. Exit codes: 0 done, 4 the volume could not clone it (no room, a block failing \
its checksum, an immutable or append-only destination), 8 operational error (a path that cannot \
be reached, an image that cannot be opened), 16 usage error (SRC not a regular file, DST exists, \
a path not on a tux3 mount, SRC and DST on different volumes).";

/// The exit codes, for the manual page.
pub const EXIT_CODES: &[(u8, &str)] = &[
    (EXIT_CLEAN, "DST is a clone of SRC"),
    (
        EXIT_ERRORS_LEFT,
        "the volume could not clone it: no room, a block failing its checksum, an immutable or \
         append-only destination",
    ),
    (
        EXIT_OPERATIONAL,
        "operational error: a path that cannot be reached, an image that cannot be opened",
    ),
    (
        EXIT_USAGE,
        "usage error: SRC not a regular file, DST exists (without --force), a path not on a tux3 \
         mount, SRC and DST on different volumes",
    ),
];

/// Arguments of `tux3 clone`.
#[derive(Args, Debug)]
pub struct CloneArgs {
    /// Regular file to clone
    pub src: OsString,
    /// The new file (it must not exist, unless --force)
    pub dst: OsString,
    /// Overwrite DST if it exists (it is truncated, then cloned over)
    #[arg(short, long)]
    pub force: bool,
    /// SRC and DST are inside this unmounted image file or block device
    #[arg(long, value_name = "IMAGE")]
    pub image: Option<PathBuf>,
}

fn usage(msg: impl Into<String>) -> CliError {
    CliError::new(msg).with_exit(EXIT_USAGE)
}

fn operational(what: impl std::fmt::Display, e: impl std::fmt::Display) -> CliError {
    CliError::at(what, e).with_exit(EXIT_OPERATIONAL)
}

/// The exit code of a clone the volume refused with `errno`: what the
/// caller asked for is impossible (16), or the volume could not do it (4).
fn clone_failed(what: impl std::fmt::Display, errno: i32) -> CliError {
    let e = io::Error::from_raw_os_error(errno);
    let exit = match errno {
        libc::EINVAL | libc::EISDIR | libc::EXDEV | libc::EBADF => EXIT_USAGE,
        libc::ENOSPC | libc::EIO | libc::EPERM | libc::EFBIG | libc::EDQUOT | libc::EROFS => EXIT_ERRORS_LEFT,
        _ => EXIT_OPERATIONAL,
    };
    CliError::at(what, e).with_exit(exit)
}

/// `tux3 clone`.
pub fn run(a: &CloneArgs) -> Result<u8, CliError> {
    match &a.image {
        Some(image) => on_image(image, a)?,
        None => on_mount(a)?,
    }
    Ok(EXIT_CLEAN)
}

/// Clone SRC to DST on a tux3 mount, through copy_file_range(2).
fn on_mount(a: &CloneArgs) -> Result<(), CliError> {
    let (src, dst) = (Path::new(&a.src), Path::new(&a.dst));
    let (s, d) = (src.display(), dst.display());
    let meta = std::fs::metadata(src).map_err(|e| operational(&s, e))?;
    if meta.is_dir() {
        return Err(usage(format!("{s}: is a directory")));
    }
    if !meta.is_file() {
        return Err(usage(format!("{s}: not a regular file")));
    }
    let not_tux3 = |p: &dyn std::fmt::Display| {
        usage(format!(
            "{p}: not on a tux3 mount (for a volume in an image: --image IMAGE SRC DST)"
        ))
    };
    if let Target::Image = locate(src).map_err(|e| e.with_exit(EXIT_OPERATIONAL))? {
        return Err(not_tux3(&s));
    }
    // DST's directory: on the same mount.
    let parent = match dst.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if dst.file_name().is_none() || a.dst.as_bytes().ends_with(b"/") {
        return Err(usage(format!("{d}: not a file name")));
    }
    let pmeta = std::fs::metadata(&parent).map_err(|e| operational(parent.display(), e))?;
    if !pmeta.is_dir() {
        return Err(usage(format!("{}: not a directory", parent.display())));
    }
    if pmeta.dev() != meta.dev() {
        if !matches!(locate(&parent), Ok(Target::Mount(..))) {
            return Err(not_tux3(&d));
        }
        return Err(usage(format!(
            "{s} and {d} are on different volumes: a clone shares blocks within one volume (copy it instead)"
        )));
    }
    if let Ok(m) = std::fs::symlink_metadata(dst) {
        if !a.force {
            return Err(usage(format!("{d}: exists (--force overwrites it)")));
        }
        if m.dev() == meta.dev() && m.ino() == meta.ino() {
            return Err(usage(format!("{s} and {d} are the same file")));
        }
        if m.is_dir() {
            return Err(usage(format!("{d}: is a directory")));
        }
    }
    let input = File::open(src).map_err(|e| operational(&s, e))?;
    let mode = meta.mode() & 0o1777;
    let mut opts = File::options();
    opts.write(true)
        .create(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW);
    if a.force {
        opts.truncate(true);
    } else {
        opts.create_new(true);
    }
    let output = opts.open(dst).map_err(|e| match e.raw_os_error() {
        Some(libc::EEXIST) => usage(format!("{d}: exists (--force overwrites it)")),
        Some(libc::ELOOP) => usage(format!("{d}: is a symbolic link")),
        Some(libc::EISDIR) => usage(format!("{d}: is a directory")),
        _ => operational(&d, e),
    })?;
    let r = copy_all(&input, &output, meta.len())
        .map_err(|e| clone_failed(format!("{s} -> {d}"), e.raw_os_error().unwrap_or(libc::EIO)))
        .and_then(|()| {
            // The create took the umask off.
            output
                .set_permissions(std::fs::Permissions::from_mode(mode))
                .map_err(|e| operational(&d, e))
        });
    if r.is_err() && !a.force {
        // Leave no partial copy of ours behind.
        let _ = std::fs::remove_file(dst);
    }
    r
}

/// copy_file_range(2) of `len` bytes from the start of `input` to the
/// start of `output`, in as many calls as the kernel needs (one FUSE
/// request clones at most 4 GiB with a 32-bit reply). Stops early if the
/// source ends sooner (it shrank meanwhile).
fn copy_all(input: &File, output: &File, len: u64) -> io::Result<()> {
    let (mut off_in, mut off_out): (libc::loff_t, libc::loff_t) = (0, 0);
    let mut left = len;
    while left > 0 {
        let chunk = left.min(1 << 62) as usize;
        // SAFETY: both descriptors are open; the offsets outlive the call.
        let n = unsafe {
            libc::copy_file_range(
                input.as_raw_fd(),
                &mut off_in,
                output.as_raw_fd(),
                &mut off_out,
                chunk,
                0,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            break;
        }
        left -= n as u64;
    }
    Ok(())
}

/// Clone SRC to DST inside the unmounted `image`.
fn on_image(image: &Path, a: &CloneArgs) -> Result<(), CliError> {
    let op = |e: CliError| e.with_exit(EXIT_OPERATIONAL);
    let (fs, lock) = open_image(image, true).map_err(op)?;
    let r = clone_in(&fs, a);
    let closed = close(image, fs).map_err(op);
    drop(lock);
    r?;
    closed
}

/// `/path`, for messages.
fn shown(path: &[u8]) -> String {
    format!("/{}", String::from_utf8_lossy(path).trim_start_matches('/'))
}

fn clone_in(fs: &Fs, a: &CloneArgs) -> Result<(), CliError> {
    let (src, dst) = (a.src.as_bytes(), a.dst.as_bytes());
    let (s, d) = (shown(src), shown(dst));
    let engine = |what: &str, e: Error| match e {
        Error::Posix(Errno(code)) => clone_failed(what, code),
        other => operational(what, other),
    };
    let attr = resolve(fs, src).map_err(|e| operational(&s, e))?;
    match attr.kind {
        FileType::Regular => {}
        FileType::Directory => return Err(usage(format!("{s}: is a directory"))),
        _ => return Err(usage(format!("{s}: not a regular file"))),
    }
    // DST's directory and name.
    let comps = split_path(dst);
    let Some((&name, dir)) = comps.split_last() else {
        return Err(usage(format!("{d}: not a file name")));
    };
    if name == b".." || dst.ends_with(b"/") {
        return Err(usage(format!("{d}: not a file name")));
    }
    if name.len() > NAME_MAX {
        return Err(engine(&d, Error::Posix(Errno::ENAMETOOLONG)));
    }
    let dir_path = dir.join(&b'/');
    let parent = resolve(fs, &dir_path).map_err(|e| operational(shown(&dir_path), e))?;
    if parent.kind != FileType::Directory {
        return Err(usage(format!("{}: not a directory", shown(&dir_path))));
    }
    // SAFETY: geteuid and getegid have no preconditions.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let mode = attr.mode & 0o1777;
    let target = match fs.lookup(parent.ino, name) {
        Ok(_) if !a.force => return Err(usage(format!("{d}: exists (--force overwrites it)"))),
        Ok(old) if old.ino == attr.ino => return Err(usage(format!("{s} and {d} are the same file"))),
        Ok(old) if old.kind == FileType::Directory => return Err(usage(format!("{d}: is a directory"))),
        Ok(old) if old.kind != FileType::Regular => {
            return Err(usage(format!("{d}: exists and is not a regular file")))
        }
        Ok(old) => {
            let set = SetAttr {
                size: Some(0),
                mode: Some(mode),
                ..SetAttr::default()
            };
            fs.setattr(old.ino, &set).map_err(|e| engine(&d, e))?;
            old.ino
        }
        Err(e) if e.errno() == Errno::ENOENT => {
            fs.create(parent.ino, name, mode, uid, gid)
                .map_err(|e| engine(&d, e))?
                .ino
        }
        Err(e) => return Err(engine(&d, e)),
    };
    let done = fs
        .clone_range(attr.ino, 0, target, 0, attr.size)
        .map_err(|e| engine(&format!("{s} -> {d}"), e));
    if let Err(e) = done {
        if !a.force {
            let _ = fs.unlink(parent.ino, name);
        }
        return Err(e);
    }
    Ok(())
}
