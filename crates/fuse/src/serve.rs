//! Mounting and serving: mounts the FUSE filesystem (fuser, straight through
//! mount(2), which also answers INIT), runs the request threads (`/dev/fuse`:
//! `devfuse.rs`; io_uring: `uring/`), turns SIGTERM, SIGINT and SIGHUP
//! into an unmount, ends the mount if an io_uring queue thread panics
//! (aborting the connection, then unmounting), and closes the volume with
//! [`tux3::Fs::close`] once the session is over. (Deltas end by time in the
//! engine's own commit thread: `OpenOptions::commit_interval`.) A mount
//! says once when the kernel has FUSE over io_uring switched off, and how
//! to switch it on. Messages are `tracing` events: the program serving the
//! mount decides where they go (the tux3 command: standard error, the
//! system log or a file).
//!
//! Calls [`tux3::Fs`] (`sync`, `close`), `devfuse.rs` and `uring/`.

use super::devfuse::DevThreads;
use super::idle_poll::IdlePoll;
use super::uring::{self, Rings};
use super::{FuseOptions, Tux3Fuse};
use fuser::{Config, MountOption, Session, SessionACL, SessionUnmounter};
use std::ffi::CString;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::thread::JoinHandleExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use tux3::Fs;

/// Signals that end the session; SIGUSR1 only wakes the signal thread so it
/// can stop.
const END_SIGNALS: [libc::c_int; 3] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP];
const WAKE_SIGNAL: libc::c_int = libc::SIGUSR1;

/// A message of the server (a warning: something did not go as asked), as
/// a `tracing` event.
pub(crate) fn log(msg: &str) {
    tracing::warn!("{msg}");
}

fn signal_set() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; sigemptyset initializes it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in END_SIGNALS.iter().chain([WAKE_SIGNAL].iter()) {
            libc::sigaddset(&mut set, *s);
        }
        set
    }
}

/// Block the session-ending signals in the calling thread and every thread
/// it starts afterwards, so that only the signal thread of [`Mounted::serve`]
/// receives them. Call it before starting any thread (before opening the
/// volume), or an early SIGTERM kills the process without closing it.
pub fn block_signals() -> io::Result<()> {
    let set = signal_set();
    // SAFETY: valid set; the old mask is not wanted.
    let r = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if r != 0 {
        return Err(io::Error::from_raw_os_error(r));
    }
    Ok(())
}

/// A live mount: the kernel answered INIT, requests may arrive.
pub struct Mounted {
    /// fuser's session: the mount and the connection's first descriptor.
    session: Session<Tux3Fuse>,
    /// The adapter the `/dev/fuse` threads serve.
    fuse: Tux3Fuse,
    fs: Arc<Fs>,
    mountpoint: PathBuf,
    /// The io_uring queue threads, if the kernel agreed to them.
    rings: Option<Rings>,
    /// The idle pollers (`-o idle_poll`).
    idle: Option<IdlePoll>,
    /// Run once the mount has ended, before the volume is closed.
    ended: Option<Box<dyn FnOnce() + Send>>,
}

/// Mount `fs` at `mountpoint`. Returns once the mount is live; the requests
/// are served by [`Mounted::serve`].
pub fn mount(fs: Fs, mountpoint: &Path, opts: &FuseOptions) -> io::Result<Mounted> {
    let mountpoint = mountpoint.canonicalize()?;
    if !mountpoint.is_dir() {
        return Err(io::Error::from_raw_os_error(libc::ENOTDIR));
    }
    if opts.uring == Some(true) && !uring::kernel_enabled() {
        return Err(io::Error::other(
            "the kernel does not let FUSE use io_uring (needs Linux 6.14 or later and \
             `echo Y > /sys/module/fuse/parameters/enable_uring`); mount without -o uring",
        ));
    }
    if opts.uring.is_none() && uring_switched_off() {
        log(URING_OFF);
    }
    let fs = Arc::new(fs);
    let config = session_config(opts);
    let fuse = Tux3Fuse::new(fs.clone(), opts.clone());
    let idle = match opts.idle_poll {
        Some(window) => {
            let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
            let p = IdlePoll::start(cpus, window)?;
            fuse.set_idle_poll(p.waker());
            Some(p)
        }
        None => None,
    };
    let mut session = Session::new(fuse.clone(), &mountpoint, &config)?;
    fuse.set_notifier(session.notifier());
    set_read_ahead(&mountpoint);
    // INIT is answered: the kernel takes ring registrations now.
    let rings = if fuse.uring() {
        let queues = uring::queue_count();
        let per_queue = opts.threads.div_ceil(queues);
        let stop = stopper(session.unmount_callable(), &mountpoint)?;
        match Rings::start(&fuse, session.as_fd(), per_queue, stop) {
            Ok(r) => {
                fuse.forgets.set_queues_up(true);
                Some(r)
            }
            Err(e) if opts.uring == Some(true) => return Err(e),
            Err(e) => {
                log(&format!("io_uring queues: {e}; requests go through /dev/fuse"));
                None
            }
        }
    } else {
        None
    };
    Ok(Mounted {
        session,
        fuse,
        fs,
        mountpoint,
        rings,
        idle,
        ended: None,
    })
}

/// Read-ahead of a mount, in KiB: the kernel's default backing-device
/// read-ahead is 128 KiB, which caps a sequential read at 128 KiB requests.
/// 4 MiB keeps up to four of the largest requests (`MAX_READAHEAD`, 1 MiB)
/// in flight, which the io_uring queues read in parallel (see
/// `uring::dispatch::READ_HANDOFF`): a loop device reads 1 MiB at 1.2 GB/s
/// one at a time and at 3 GB/s four at a time. More (8 or 16 MiB) measured
/// no faster.
const READ_AHEAD_KB: u32 = 4096;

/// Raise the read-ahead of the mount at `mountpoint` (its backing-device
/// info, `/sys/class/bdi/MAJOR:MINOR/read_ahead_kb`) to [`READ_AHEAD_KB`].
/// INIT can only lower it. Only root may: for anyone else it stays at the
/// kernel's default, silently; other failures are logged.
fn set_read_ahead(mountpoint: &Path) {
    let set = mount_dev(mountpoint).and_then(|dev| {
        std::fs::write(
            format!("/sys/class/bdi/{dev}/read_ahead_kb"),
            READ_AHEAD_KB.to_string(),
        )
    });
    if let Err(e) = set {
        if !matches!(e.kind(), io::ErrorKind::PermissionDenied) {
            log(&format!(
                "setting the read-ahead of {}: {e}",
                mountpoint.display()
            ));
        }
    }
}

/// Where the kernel says whether FUSE may use io_uring (`Y` or `N`); absent
/// in kernels without FUSE over io_uring.
const URING_SWITCH: &str = "/sys/module/fuse/parameters/enable_uring";

/// What a mount says, once, when the kernel has FUSE over io_uring but keeps
/// it switched off.
const URING_OFF: &str = "FUSE over io_uring is switched off in this kernel, so requests go \
     through /dev/fuse; to switch it on for later mounts: \
     echo Y > /sys/module/fuse/parameters/enable_uring";

/// Whether the kernel has FUSE over io_uring but keeps it off.
fn uring_switched_off() -> bool {
    std::fs::read_to_string(URING_SWITCH).is_ok_and(|v| v.trim() == "N")
}

/// fuser's configuration for `opts`. The kernel flags follow `opts`
/// (fuser mounts `nosuid,nodev` unless told `suid`, `dev`); with
/// `allow_other` the kernel always checks permissions.
fn session_config(opts: &FuseOptions) -> Config {
    let mut mo = vec![
        MountOption::FSName(opts.fsname.clone()),
        // Shows as type `fuse.tux3` in /proc/mounts.
        MountOption::CUSTOM("subtype=tux3".to_string()),
    ];
    if opts.default_permissions || opts.allow_other {
        mo.push(MountOption::DefaultPermissions);
    }
    mo.push(if opts.read_only {
        MountOption::RO
    } else {
        MountOption::RW
    });
    let flags = [
        (opts.exec, MountOption::Exec, MountOption::NoExec),
        (opts.suid, MountOption::Suid, MountOption::NoSuid),
        (opts.dev, MountOption::Dev, MountOption::NoDev),
        (opts.atime, MountOption::Atime, MountOption::NoAtime),
        (opts.sync, MountOption::Sync, MountOption::Async),
    ];
    for (set, yes, no) in flags {
        match set {
            Some(true) => mo.push(yes),
            Some(false) => mo.push(no),
            None => {}
        }
    }
    if opts.dirsync {
        mo.push(MountOption::DirSync);
    }
    let mut config = Config::default();
    config.mount_options = mo;
    config.acl = if opts.allow_other {
        SessionACL::All
    } else {
        SessionACL::Owner
    };
    config
}

impl Mounted {
    /// The canonical path of the mount point.
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// Run `f` once the mount has ended (unmounted, the requests served),
    /// before the volume is closed: the tux3 command lets go of its mark
    /// of a live mount there, so a new mount knows to wait for the close.
    pub fn when_ended(&mut self, f: impl FnOnce() + Send + 'static) {
        self.ended = Some(Box::new(f));
    }

    /// Serve requests until the volume is unmounted (`umount`, `fusermount3
    /// -u`, or SIGTERM/SIGINT/SIGHUP, which unmount it), then close the
    /// volume, committing everything. The error is a message for the user.
    pub fn serve(mut self) -> Result<(), String> {
        block_signals().map_err(|e| format!("blocking signals: {e}"))?;
        let done = Arc::new(AtomicBool::new(false));
        let signals = spawn_signal_thread(self.session.unmount_callable(), &self.mountpoint, done.clone())
            .map_err(|e| format!("starting the signal thread: {e}"))?;
        let served = DevThreads::start(&self.fuse, self.session.as_fd(), self.fuse.opts.threads)
            .and_then(DevThreads::join);
        // The connection is over: fuser's session goes (unmounting if
        // nothing did yet, as its own loop did at its end).
        drop(self.session);
        // A running scrub saves its position and lets go of the volume.
        self.fuse.scrub.stop();
        self.fuse.dedupe.stop();
        drop(self.fuse);
        // The kernel ended the queues with the connection.
        let ring_panicked = self.rings.take().is_some_and(Rings::join);
        drop(self.idle.take()); // the pollers stop

        done.store(true, Ordering::SeqCst);
        // SAFETY: the thread is alive until it sees `done`; waking it with a
        // blocked signal it waits for is harmless.
        unsafe {
            libc::pthread_kill(signals.as_pthread_t(), WAKE_SIGNAL);
        }
        let _ = signals.join();
        if let Some(f) = self.ended.take() {
            f();
        }

        let closed = match Arc::try_unwrap(self.fs) {
            Ok(fs) => fs.close().map_err(|e| format!("closing the volume: {e}")),
            // A request thread is still alive (it panicked): commit what we can.
            Err(fs) => fs.sync().map_err(|e| format!("committing the volume: {e}")),
        };
        let served = if ring_panicked {
            Err(io::Error::other(
                "an io_uring queue thread panicked; the mount was ended",
            ))
        } else {
            served
        };
        match (served, closed) {
            (Ok(()), r) => r,
            (Err(e), Ok(())) => Err(format!("serving {}: {e}", self.mountpoint.display())),
            (Err(e), Err(c)) => Err(format!("serving {}: {e}; {c}", self.mountpoint.display())),
        }
    }
}

/// What ends the mount after an io_uring queue thread panicked: abort the
/// FUSE connection (every request in flight fails, none waits for the dead
/// thread; fuser's session and the other queues end), then unmount it, or
/// detach it if it is busy.
fn stopper(unmounter: SessionUnmounter, mountpoint: &Path) -> io::Result<uring::Stop> {
    let path = CString::new(mountpoint.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "mount point contains a NUL byte"))?;
    let unmounter = parking_lot::Mutex::new(unmounter);
    let mountpoint = mountpoint.to_path_buf();
    Ok(Arc::new(move || {
        let dev = mount_dev(&mountpoint);
        let aborted = match &dev {
            Ok(dev) => abort_connection(dev),
            Err(e) => Err(io::Error::new(e.kind(), e.to_string())),
        };
        if let Err(e) = aborted {
            log(&format!(
                "aborting the FUSE connection of {}: {e}",
                mountpoint.display()
            ));
        }
        let unmounted = unmounter.lock().unmount();
        // fuser leaves a mount it takes for gone, or a busy one: detach it
        // if it is still this one.
        if dev.is_ok() && mount_dev(&mountpoint).ok() == dev.as_ref().ok().cloned() {
            let why = unmounted
                .err()
                .map_or("still mounted".to_string(), |e| e.to_string());
            log(&format!(
                "unmounting {}: {why}; detaching it",
                mountpoint.display()
            ));
            // SAFETY: valid C string.
            unsafe {
                libc::umount2(path.as_ptr(), libc::MNT_DETACH);
            }
        }
    }))
}

/// The FUSE control filesystem, where each connection has an `abort` file.
const FUSECTL: &str = "/sys/fs/fuse/connections";

/// Abort the FUSE connection of the mount on device `dev` (`major:minor`)
/// through the control filesystem (mounting it for the moment if the
/// system has not, and unmounting it again after).
fn abort_connection(dev: &str) -> io::Result<()> {
    let minor = dev
        .split(':')
        .nth(1)
        .ok_or_else(|| io::Error::other(format!("device {dev} in mountinfo")))?;
    let abort = Path::new(FUSECTL).join(minor).join("abort");
    let dir = CString::new(FUSECTL).map_err(io::Error::other)?;
    let mut mounted_here = false;
    if !abort.exists() {
        let src = c"fusectl";
        // SAFETY: valid C strings; no mount data.
        mounted_here =
            unsafe { libc::mount(src.as_ptr(), dir.as_ptr(), src.as_ptr(), 0, std::ptr::null()) } == 0;
    }
    let done = std::fs::write(&abort, b"1");
    if mounted_here {
        // SAFETY: valid C string; only the mount made above.
        unsafe {
            libc::umount2(dir.as_ptr(), 0);
        }
    }
    done
}

/// The `major:minor` of the mount at `mountpoint` (the last one there),
/// from /proc/self/mountinfo: no request to the mount itself.
fn mount_dev(mountpoint: &Path) -> io::Result<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo")?;
    let want = mountpoint.as_os_str().as_bytes();
    info.lines()
        .rev()
        .find_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let (dev, at) = (f.get(2)?, f.get(4)?);
            (unescape(at) == want).then(|| dev.to_string())
        })
        .ok_or_else(|| io::Error::other("not in /proc/self/mountinfo"))
}

/// A mountinfo path with its octal escapes (`\040` for a space) undone.
fn unescape(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b.get(i + 1..i + 4).and_then(|d| {
            let d = std::str::from_utf8(d).ok()?;
            u8::from_str_radix(d, 8).ok()
        });
        match (b[i], octal) {
            (b'\\', Some(c)) => {
                out.push(c);
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

/// The thread that waits for SIGTERM/SIGINT/SIGHUP and unmounts.
fn spawn_signal_thread(
    mut unmounter: SessionUnmounter,
    mountpoint: &Path,
    done: Arc<AtomicBool>,
) -> io::Result<JoinHandle<()>> {
    let path = CString::new(mountpoint.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "mount point contains a NUL byte"))?;
    thread::Builder::new().name("tux3-signals".into()).spawn(move || {
        let set = signal_set();
        let mut unmounted = false;
        loop {
            let mut sig: libc::c_int = 0;
            // SAFETY: valid set and out pointer.
            let r = unsafe { libc::sigwait(&set, &mut sig) };
            if done.load(Ordering::SeqCst) {
                return;
            }
            if r != 0 || sig == WAKE_SIGNAL || unmounted {
                continue;
            }
            unmounted = true;
            if let Err(e) = unmounter.unmount() {
                if e.raw_os_error() == Some(libc::EBUSY) {
                    log(&format!(
                        "{}: busy; detached, the volume closes when its last open file is closed",
                        mountpoint_text(&path)
                    ));
                } else {
                    log(&format!("unmounting {}: {e}", mountpoint_text(&path)));
                }
                // SAFETY: valid C string.
                unsafe {
                    libc::umount2(path.as_ptr(), libc::MNT_DETACH);
                }
            }
        }
    })
}

fn mountpoint_text(path: &CString) -> String {
    String::from_utf8_lossy(path.as_bytes()).into_owned()
}
