//! `tux3 mount [-f] [-o OPTIONS] TARGET MOUNTPOINT` and the `mount.tux3`
//! helper of mount(8): open the volume, mount it through FUSE and serve it —
//! in the background (the command returns once the mount is live, saying
//! nothing; the server keeps none of the caller's descriptors and logs to
//! the system log or `-o log=FILE`) or, with `-f`, in the foreground. The
//! session ends at `umount`, SIGTERM or SIGINT; the volume is then closed
//! (everything committed) and the server exits 0.
//!
//! A volume is locked while mounted (`lock_volume`). A mount whose volume's
//! previous server is still closing it (a plain umount(2) returns before
//! that) waits for it, up to [`CLOSE_WAIT`]; a volume a live server holds
//! is refused, naming where it is mounted. A live server says so by a
//! shared lock on one byte of the volume ([`LIVE_MARK`]), which it lets go
//! when its mount ends, before it closes the volume.
//!
//! Calls [`tux3::open_path`], [`tux3::Fs::open`],
//! [`tux3_fuse`] (mount and serve) and `log_sink` (where messages go).

use super::image::image_error;
use super::log_sink;
pub use super::mount_opts::{
    one_line, options_help, parse_helper_args, parse_options, parse_options_over, HelperArgs, MountOptions,
    OPTION_DOCS,
};
use super::CliError;
use clap::Args;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};
use tux3::error::Errno;
use tux3::open_path;
use tux3::types::OpenOptions;
use tux3::Fs;
use tux3_fuse::Mounted;

/// What `tux3 mount --help` and its man page say first.
pub const LONG_ABOUT: &str = "Mount a volume through FUSE. Without -f the command returns once \
     the mount is live and leaves a server process; umount, SIGTERM or SIGINT end it and commit \
     everything.\n\nMounted by root, every user gets in under the kernel's permission checks, \
     and set-user-ID files and device nodes work unless nosuid or nodev say otherwise (as for \
     any filesystem); -o private lets only the mounter in. A mounter who is not root gets \
     FUSE's rules: only they get in, nosuid,nodev.\n\n-o snapshot=NAME mounts a snapshot \
     (see tux3 snapshot) read-only, beside the live volume's mount if need be.\n\n\
     Without -f the command says nothing on success; the server closes every descriptor \
     it was given, points standard input, output and error at /dev/null, and sends its \
     messages to the system log (/dev/log, facility daemon, as tux3[PID]), or to the file \
     -o log=FILE names. With -f they go to standard error (or that file). One of them: \
     where the kernel has FUSE over io_uring but keeps it switched off, the mount serves \
     requests through /dev/fuse and logs once how to switch it on for later mounts \
     (echo Y > /sys/module/fuse/parameters/enable_uring).\n\n\
     If the volume's previous server is still closing it (umount(2) returns before it \
     has committed everything), the mount waits for it, up to 30 seconds; a volume \
     mounted elsewhere is refused, naming its mount point.";

/// Arguments of `tux3 mount`.
#[derive(Args, Debug)]
#[command(
    after_long_help = options_help(),
)]
pub struct MountArgs {
    /// Stay in the foreground (messages to stderr unless -o log=FILE; end
    /// with Ctrl-C or umount)
    #[arg(short = 'f', long)]
    pub foreground: bool,
    /// Comma-separated mount options (ro, private, nosuid, fsync=strict,
    /// commit=SECONDS, ...: see --help); may be repeated
    #[arg(short = 'o', value_name = "OPTIONS")]
    pub options: Vec<String>,
    /// Image file or block device holding the volume (with -o remount:
    /// the mount point, if no directory follows)
    pub target: PathBuf,
    /// Directory to mount it on
    pub mountpoint: Option<PathBuf>,
}

/// `tux3 mount`.
pub fn run(args: &MountArgs) -> Result<u8, CliError> {
    if super::remount::is_remount(&args.options) {
        let dir = args.mountpoint.as_ref().unwrap_or(&args.target);
        return super::remount::remount(dir, &args.options)
            .map(|()| 0)
            .map_err(CliError::new);
    }
    let Some(mountpoint) = &args.mountpoint else {
        return Err(CliError::new(
            "missing the directory to mount on: tux3 mount IMAGE DIR",
        ));
    };
    let opts = parse_options(&args.options, false).map_err(CliError::new)?;
    if args.foreground {
        if let Some(log) = &opts.log {
            log_sink::to_file(log).map_err(|e| CliError::at(log.display(), e))?;
            log_sink::log_panics();
        }
        let (mounted, _lock) = start(&args.target, mountpoint, &opts).map_err(CliError::new)?;
        serve(mounted)
    } else {
        daemon(&args.target, mountpoint, &opts)
    }
}

/// Entry point of the `mount.tux3` binary: `mount.tux3 SPEC DIR [-sfnv]
/// [-o OPTIONS]`, as mount(8) runs it. Exit codes follow mount(8): 0
/// mounted, 1 bad invocation, 32 mount failure.
pub fn helper_main() -> ExitCode {
    super::init_logging();
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let say = |msg: &str| {
        let _ = writeln!(io::stderr(), "mount.tux3: {msg}");
    };
    let h = match HelperArgs::parse_args(&args) {
        Ok(h) => h,
        Err(e) if !e.use_stderr() => {
            // --help, --version.
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            say(&one_line(&e));
            return ExitCode::from(1);
        }
    };
    if super::remount::is_remount(&h.options) {
        if h.fake {
            return ExitCode::SUCCESS;
        }
        return match super::remount::remount(&h.mountpoint, &h.options) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                say(&e);
                ExitCode::from(32)
            }
        };
    }
    let opts = match parse_options(&h.options, h.sloppy) {
        Ok(o) => o,
        Err(e) => {
            say(&e);
            return ExitCode::from(1);
        }
    };
    if h.fake {
        return ExitCode::SUCCESS;
    }
    match daemon(&h.target, &h.mountpoint, &opts) {
        Ok(0) => {
            if h.verbose {
                say(&format!(
                    "{} mounted on {}",
                    h.target.display(),
                    h.mountpoint.display()
                ));
            }
            ExitCode::SUCCESS
        }
        Ok(_) => ExitCode::from(32),
        Err(e) => {
            if !e.message.is_empty() {
                say(&e.message);
            }
            ExitCode::from(32)
        }
    }
}

/// Serve a live mount until it ends; then the volume is closed.
fn serve(mounted: Mounted) -> Result<u8, CliError> {
    mounted.serve().map_err(CliError::new)?;
    Ok(0)
}

/// Lock the volume, open it and mount it. Returns the live mount and the
/// lock, which must be held until the volume is closed.
fn start(target: &Path, mountpoint: &Path, opts: &MountOptions) -> Result<(Mounted, File), String> {
    tux3_fuse::block_signals().map_err(|e| format!("blocking signals: {e}"))?;
    let ro = opts.fuse.read_only;
    // A snapshot mount takes no lock. Its blocks are never written while
    // the snapshot exists (the live volume writes elsewhere), so there is
    // nothing to keep a writer from; and the live volume's read-write
    // mount holds the exclusive lock (an exclusive open of a block
    // device), which a shared lock or a second open with O_EXCL would run
    // into, while a snapshot is meant to be mountable beside it. The lock
    // returned is then the image opened read-only, without a lock.
    //
    // It marks the snapshot as mounted instead (`mark_snapshot_mounted`),
    // which `tux3 snapshot delete` checks.
    let lock = match &opts.snapshot {
        Some(name) => {
            let err = |e: io::Error| super::strip_os_error(format!("{}: {e}", target.display()));
            let file = File::open(target).map_err(err)?;
            mark_snapshot_mounted(&file, name.as_bytes()).map_err(err)?;
            file
        }
        None => lock_for_mount(target, ro)?,
    };
    let dev = open_path(target, !ro).map_err(|e| image_error(target, e).message)?;
    let mut open = OpenOptions {
        read_only: ro,
        commit_interval: opts.commit_interval,
        fsync_strict: opts.fsync_strict,
        discard: opts.discard,
        snapshot: opts.snapshot.as_ref().map(|n| n.as_bytes().to_vec()),
        ..OpenOptions::default()
    };
    if let Some(limit) = opts.dirty_limit {
        open.dirty_limit = limit;
    }
    if let Some(limit) = opts.inode_limit {
        open.inode_limit = limit;
    }
    if let Some(limit) = opts.dir_leaf_limit {
        open.dir_leaf_limit = limit;
    }
    // The kernel's page cache holds the file data read through the mount:
    // the engine's own clean pages only bridge a commit, as dirty ones do.
    open.clean_limit = open.dirty_limit;
    let fs = Fs::open(dev, open).map_err(|e| match (&opts.snapshot, e.errno()) {
        (Some(name), Errno::ENOENT) => format!("{}: no snapshot \"{name}\"", target.display()),
        _ => image_error(target, e).message,
    })?;
    let mut fopts = opts.fuse.clone();
    fopts.fsname = target
        .canonicalize()
        .unwrap_or_else(|_| target.to_path_buf())
        .to_string_lossy()
        .into_owned();
    // Taken before the mount is live, let go of once it has ended.
    let live = match opts.snapshot {
        Some(_) => None,
        None => {
            Some(mark_live(target).map_err(|e| format!("{}: marking it mounted: {e}", target.display()))?)
        }
    };
    let mut mounted = tux3_fuse::mount(fs, mountpoint, &fopts)
        .map_err(|e| super::strip_os_error(format!("mounting on {}: {e}", mountpoint.display())))?;
    if let Some(live) = live {
        mounted.when_ended(move || drop(live));
    }
    Ok((mounted, lock))
}

/// Most a mount waits for the previous server of its volume to close it.
pub const CLOSE_WAIT: Duration = Duration::from_secs(30);

/// The volume's lock for a mount ([`lock_volume`]). Held by the server of
/// a live mount (its [`LIVE_MARK`] held, and a tux3 mount of the volume in
/// the mount table): refused, naming the mount point. Held otherwise — by
/// a server whose mount is gone (umount(2) returns before the server has
/// even seen it) and which is closing the volume, or by another tux3
/// command — waited for, up to [`CLOSE_WAIT`] (said once in the log).
fn lock_for_mount(target: &Path, read_only: bool) -> Result<File, String> {
    let began = Instant::now();
    let mut said = false;
    loop {
        if let Some(lock) = try_lock_volume(target, read_only)? {
            return Ok(lock);
        }
        let live =
            is_live(target).map_err(|e| super::strip_os_error(format!("{}: {e}", target.display())))?;
        let on = mount_points(target);
        if live && !on.is_empty() {
            return Err(format!(
                "{}: already mounted on {}",
                target.display(),
                on.join(", ")
            ));
        }
        if began.elapsed() >= CLOSE_WAIT {
            let by = if live {
                "by a tux3 server whose mount is not in this mount table (detached with \
                 umount -l while files are open on it, or in another mount namespace)"
            } else {
                "by a tux3 server still closing it, or another tux3 command"
            };
            return Err(format!(
                "{}: in use: still locked after {} s, {by}",
                target.display(),
                CLOSE_WAIT.as_secs()
            ));
        }
        if !said {
            tracing::warn!(
                "{}: waiting for the previous server to close the volume",
                target.display()
            );
            said = true;
        }
        // Nothing to wait on but the lock (an exclusive open of a block
        // device has no waiting form): a short poll, as `tux3 umount` does.
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Where the volume at `target` is mounted through tux3 (its live volume
/// or snapshots), as `/proc/self/mounts` says.
fn mount_points(target: &Path) -> Vec<String> {
    let want = target.canonicalize().unwrap_or_else(|_| target.to_path_buf());
    super::sync::tux3_mount_table()
        .unwrap_or_default()
        .into_iter()
        .filter(|(source, _)| *source == want)
        .map(|(_, dir)| dir.display().to_string())
        .collect()
}

/// Keep others from opening the volume while it is mounted: an exclusive
/// open of a block device, a `flock` of an image file (shared when
/// read-only, so several read-only mounts may coexist).
pub(crate) fn lock_volume(target: &Path, read_only: bool) -> Result<File, String> {
    try_lock_volume(target, read_only)?.ok_or_else(|| {
        if is_block_device(target) {
            format!("{}: device is busy (mounted or in use)", target.display())
        } else {
            format!("{}: in use (already mounted?)", target.display())
        }
    })
}

fn is_block_device(target: &Path) -> bool {
    std::fs::metadata(target).is_ok_and(|m| m.file_type().is_block_device())
}

/// [`lock_volume`], `None` when someone else holds the lock.
fn try_lock_volume(target: &Path, read_only: bool) -> Result<Option<File>, String> {
    let err = |e: io::Error| super::strip_os_error(format!("{}: {e}", target.display()));
    let meta = std::fs::metadata(target).map_err(err)?;
    if meta.file_type().is_block_device() {
        return match std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_EXCL)
            .open(target)
        {
            Ok(f) => Ok(Some(f)),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => Ok(None),
            Err(e) => Err(err(e)),
        };
    }
    let file = File::open(target).map_err(err)?;
    let how = if read_only { libc::LOCK_SH } else { libc::LOCK_EX };
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(file.as_raw_fd(), how | libc::LOCK_NB) } != 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
            return Ok(None);
        }
        return Err(err(e));
    }
    Ok(Some(file))
}

/// The byte of a volume (far past the end of any image, just below the
/// snapshot marks) on which the server of a live mount of it holds a
/// shared open-file-description lock, from just before its mount is live
/// until it has ended ([`tux3_fuse::Mounted::when_ended`]). Snapshot
/// mounts do not take it.
pub const LIVE_MARK: libc::off_t = (1 << 62) - 1;

/// Mark the volume at `target` as served by a live mount for as long as
/// the returned descriptor stays open.
fn mark_live(target: &Path) -> io::Result<File> {
    let file = File::open(target)?;
    let l = lock_request(libc::F_RDLCK, LIVE_MARK);
    // SAFETY: fcntl with a valid descriptor and a `flock` that outlives it.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &l) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(file)
}

/// Whether a live mount's server holds the volume at `target`
/// ([`LIVE_MARK`]).
fn is_live(target: &Path) -> io::Result<bool> {
    is_marked(target, LIVE_MARK)
}

/// Whether someone holds a lock on byte `at` of the volume at `image`.
fn is_marked(image: &Path, at: libc::off_t) -> io::Result<bool> {
    let file = File::open(image)?;
    let mut l = lock_request(libc::F_WRLCK, at);
    // SAFETY: fcntl with a valid descriptor and a `flock` it may fill in.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_GETLK, &mut l) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(i32::from(l.l_type) != libc::F_UNLCK)
}

/// Where the mark of a mounted snapshot goes: a byte far past the end of
/// any image (from 2^62), picked by a hash of the name.
fn snapshot_mark(name: &[u8]) -> libc::off_t {
    // FNV-1a, 64 bits.
    let hash = name.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    ((1u64 << 62) + (hash >> 24)) as libc::off_t
}

/// A lock request (`struct flock`) for byte `at`.
fn lock_request(kind: libc::c_int, at: libc::off_t) -> libc::flock {
    // SAFETY: an all-zero `flock` is a valid value of this plain C struct.
    let mut l: libc::flock = unsafe { std::mem::zeroed() };
    l.l_type = kind as _;
    l.l_whence = libc::SEEK_SET as _;
    l.l_start = at;
    l.l_len = 1;
    l
}

/// Mark snapshot `name` as mounted for as long as `image` (a descriptor
/// of its volume) stays open: a shared open-file-description lock on its
/// mark byte. Such locks are apart from the `flock` of a read-write mount,
/// and any number of mounts of one snapshot may hold them.
fn mark_snapshot_mounted(image: &File, name: &[u8]) -> io::Result<()> {
    let l = lock_request(libc::F_RDLCK, snapshot_mark(name));
    // SAFETY: fcntl with a valid descriptor and a `flock` that outlives it.
    if unsafe { libc::fcntl(image.as_raw_fd(), libc::F_OFD_SETLK, &l) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether snapshot `name` of the volume at `image` is mounted (its mark is
/// held, see [`mark_snapshot_mounted`]). Names are told apart by a hash: a
/// false "mounted" is possible, a missed one is not.
pub(crate) fn snapshot_is_mounted(image: &Path, name: &[u8]) -> io::Result<bool> {
    is_marked(image, snapshot_mark(name))
}

/// Mount in the background: fork (before any thread exists); the child
/// starts a session, opens the volume and mounts it, tells the parent through
/// a pipe (`OK`, or the error text), then serves. The parent returns 0 once
/// the mount is live, or the child's error.
fn daemon(target: &Path, mountpoint: &Path, opts: &MountOptions) -> Result<u8, CliError> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: fds has room for two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(CliError::at("pipe", io::Error::last_os_error()));
    }
    // SAFETY: pipe2 returned two fresh descriptors that we now own.
    let (read_end, write_end) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: no thread has been started yet (the caller only parsed
    // arguments), so the child may go on running Rust code.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(CliError::at("fork", io::Error::last_os_error()));
    }
    if pid == 0 {
        drop(read_end);
        return daemon_child(target, mountpoint, opts, File::from(write_end));
    }
    drop(write_end);
    let mut msg = String::new();
    let read = File::from(read_end).read_to_string(&mut msg);
    if read.is_ok() && msg == "OK" {
        return Ok(0);
    }
    let mut status = 0;
    // SAFETY: reaping our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    if !msg.is_empty() {
        return Err(CliError::new(msg));
    }
    Err(CliError::new(format!(
        "the mount server died before mounting (wait status {status})"
    )))
}

/// The background server's side of [`daemon`]. Before anything else it
/// lets go of what the caller gave it — every descriptor but the report
/// pipe; standard input, output and error become /dev/null — so that a
/// caller reading the command's output to its end (`out=$(tux3 mount ...)`)
/// gets it when the command exits, and no terminal or pipe is kept open
/// for the life of the mount. Messages go to the log from then on; errors
/// before the mount is live go back through the pipe as well.
fn daemon_child(target: &Path, mountpoint: &Path, opts: &MountOptions, report: File) -> Result<u8, CliError> {
    // SAFETY: plain system calls in a fresh, single-threaded child.
    unsafe { libc::setsid() };
    let mut report = detach(report);
    let routed = match &opts.log {
        Some(log) => log_sink::to_file(log).map_err(|e| format!("log file {}: {e}", log.display())),
        None => log_sink::to_syslog().map_err(|e| format!("system log: {e}")),
    };
    log_sink::log_panics();
    let started = routed.and_then(|()| start(target, mountpoint, opts));
    let (mounted, _lock) = match started {
        Ok(m) => m,
        Err(e) => {
            tracing::error!("{e}");
            let _ = report.write_all(e.as_bytes());
            return Ok(1);
        }
    };
    // Relative paths were resolved by now.
    let _ = std::env::set_current_dir("/");
    let _ = report.write_all(b"OK");
    drop(report);
    let served = serve(mounted);
    if let Err(e) = &served {
        tracing::error!("{}", e.message);
    }
    served
}

/// Let go of every descriptor the caller gave: standard input, output and
/// error become /dev/null, all others are closed but `keep` (moved above
/// them if it is one of them), which is returned.
fn detach(keep: File) -> File {
    // Above the standard descriptors (a caller may have closed some, so a
    // pipe can be 0, 1 or 2).
    // SAFETY: fcntl duplicating a descriptor we own.
    let keep = match unsafe { libc::fcntl(keep.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) } {
        fd if fd >= 3 => {
            drop(keep);
            // SAFETY: a fresh descriptor nothing else owns.
            unsafe { File::from_raw_fd(fd) }
        }
        _ => keep,
    };
    if let Ok(null) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        // (It may itself be one of the three, which must stay open.)
        let null = null.into_raw_fd();
        // SAFETY: dup2 onto the standard descriptors, then closing ours
        // unless it is one of them.
        unsafe {
            for fd in 0..3 {
                libc::dup2(null, fd);
            }
            if null > 2 {
                libc::close(null);
            }
        }
    }
    close_all_but(keep.as_raw_fd());
    keep
}

/// Close every descriptor above the standard ones but `keep`.
fn close_all_but(keep: RawFd) {
    let keep = keep.max(2) as libc::c_uint;
    // SAFETY: close_range on descriptor ranges; nothing in this
    // single-threaded process uses the ones closed.
    unsafe {
        if keep > 3 {
            libc::close_range(3, keep - 1, 0);
        }
        libc::close_range(keep + 1, libc::c_uint::MAX, 0);
    }
}
