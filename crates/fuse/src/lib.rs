//! FUSE adapter (crate tux3-fuse, above the engine API): serves a mounted
//! volume to the kernel through `/dev/fuse` or io_uring; `fuser` mounts it
//! and answers INIT, our own code decodes and answers every other request.
//!
//! Owns the translation between FUSE requests and the engine API — and
//! nothing else: every request maps to one call of the public [`tux3::Fs`]
//! (plus a `getattr`/`open_handle` where FUSE wants an answer the engine call
//! does not give). No filesystem logic lives here.
//!
//! - `ops.rs`: INIT (fuser's `Filesystem::init`): what the server asks for;
//! - `devfuse.rs`: the `/dev/fuse` threads (read a request, answer it
//!   through the shared decoder, write the reply; FORGETs, DESTROY);
//! - `adapter.rs`: the adapter's state (the `Fs`, options, directory
//!   parents) and the request logic both transports share;
//! - `listing.rs`: whether a listing carries each entry's attributes;
//! - `forgets.rs`: FORGETs gathered into batches while the io_uring queues
//!   carry the other requests;
//! - `idle_poll.rs`: threads that keep idle CPUs awake while requests flow
//!   (`-o idle_poll`);
//! - `uring/`: the wire format and the request decoder of both transports
//!   (`abi.rs`, `args.rs`, `dispatch.rs`), and the io_uring transport
//!   (per-CPU queues);
//! - `serve.rs`: mounting, the session threads, the periodic commit, signals,
//!   and closing the volume at the end;
//! - `test_hooks.rs` (feature `test-hooks`, tests only): faults injected on
//!   purpose (a queue thread that panics);
//! - `ioctls.rs`: the ioctls the server answers itself (inode flags, and
//!   the volume's: snapshots, mount info, remount, resize, scrub, trim);
//! - `snapshot.rs`: the arguments of the snapshot ioctls, encoded and
//!   decoded (the `tux3 snapshot` command uses the same code);
//! - `trim.rs`: the trim ioctls (`tux3 fstrim`, fstrim(8)'s FITRIM);
//! - `scrub.rs`, `defrag.rs`, `dedupe.rs`: the scrub, defrag and dedupe
//!   ioctls, served and encoded;
//! - this file: the mount-time options, the ioctl numbers and value
//!   conversions.
//!
//! Calls only [`tux3::Fs`] and its value types.
#![deny(clippy::unwrap_used, clippy::expect_used)]

mod adapter;
mod dedupe;
mod defrag;
mod devfuse;
mod forgets;
mod idle_poll;
mod ioctls;
mod listing;
mod ops;
mod remount;
mod scrub;
mod serve;
mod snapshot;
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub mod test_hooks;
mod trim;
mod uring;

pub use adapter::Tux3Fuse;
pub use dedupe::{
    decode_status as decode_dedupe_status, encode_request as encode_dedupe_request,
    encode_start as encode_dedupe_start, exit_code as dedupe_exit_code, pair_line, DedupeStatus,
    DEDUPE_ARG_LEN, DEDUPE_CANCEL, DEDUPE_DRY_RUN, DEDUPE_NO_EXIT, DEDUPE_PAIRS, DEDUPE_START, DEDUPE_STATUS,
    DEDUPE_ZEROS, IOC_DEDUPE,
};
pub use defrag::{
    decode_defrag_report, encode_defrag_request, DEFRAG_ARG_LEN, DEFRAG_DRY_RUN, DEFRAG_UNSHARE, IOC_DEFRAG,
};
pub use remount::{RemountArg, IOC_REMOUNT};
use serve::log;
pub use serve::{block_signals, mount, Mounted};

use std::time::Duration;
use tux3::types::Attr;

/// How long the kernel may keep attributes and directory entries (positive
/// and negative): a day. This process is the only writer of the volume, and
/// every change of a name or an attribute that the kernel did not make
/// itself is invalidated through a FUSE notification (`Tux3Fuse::
/// attrs_changed`), so the kernel's copy is never stale; the timeout only
/// bounds how long a missed invalidation could last. Each expiry costs a
/// GETATTR or LOOKUP round trip, which with a short timeout dominated the
/// request counts.
pub const TTL: Duration = Duration::from_secs(24 * 3600);

/// Largest write request the kernel sends: 1 MiB (256 pages). A write of up
/// to this size arrives as one request, so it is atomic (DESIGN.md 3.3).
pub const MAX_WRITE: u32 = 1 << 20;

/// Read-ahead the kernel may do on sequential reads.
pub const MAX_READAHEAD: u32 = 1 << 20;

/// Background requests (read-ahead, mostly) the kernel may have in flight.
pub const MAX_BACKGROUND: u16 = 64;

/// The ioctl that commits everything written so far through the mount
/// (`_IO(0xE3, 1)`, no argument), on any file or directory of it: `sync`
/// and `syncfs` do not reach a FUSE server, so `tux3 sync` sends this.
/// Parallel ones are served by one commit.
pub const IOC_SYNC: u32 = 0xE301;

/// The ioctl that takes a snapshot of the mounted volume
/// (`_IOW(0xE3, 2, [u8; 256])`): the argument is the name, NUL-padded to
/// [`SNAPSHOT_NAME_ARG`] bytes. The server commits everything before it as
/// part of the snapshot; `tux3 snapshot create` first has the kernel write
/// back the pages it holds (`syncfs`), so the snapshot holds them too.
/// Errors: EEXIST, EINVAL (a bad name), EROFS, ENOSPC, EPERM (the caller is
/// neither root nor the user the server runs as).
pub const IOC_SNAPSHOT_CREATE: u32 = libc::_IOW::<[u8; SNAPSHOT_NAME_ARG]>(0xE3, 2) as u32;

/// The ioctl that deletes a snapshot (`_IOW(0xE3, 3, [u8; 256])`, the name
/// as for [`IOC_SNAPSHOT_CREATE`]). The name is gone, durably, when it
/// returns; the server gives its space back in the background. Errors:
/// ENOENT, EROFS, EPERM.
pub const IOC_SNAPSHOT_DELETE: u32 = libc::_IOW::<[u8; SNAPSHOT_NAME_ARG]>(0xE3, 3) as u32;

/// The ioctl that reports one snapshot per call
/// (`_IOWR(0xE3, 4, [u8; 336])`): in, the lowest snapshot id wanted (0
/// for the oldest); out, the first snapshot with an id at or above it, or
/// the end marker when there is none (layout at [`SNAPSHOT_RECORD_LEN`]). Any process
/// that may open a file of the mount may send it.
pub const IOC_SNAPSHOT_LIST: u32 = libc::_IOWR::<[u8; SNAPSHOT_RECORD_LEN]>(0xE3, 4) as u32;

/// Bytes [`IOC_MOUNT_INFO`] returns.
pub const MOUNT_INFO_LEN: usize = 4096;

/// The ioctl that reports how the volume was mounted (`_IOR(0xE3, 5,
/// [u8; 4096])`): the source (image or device path), a NUL, the `-o`
/// options as given, a NUL, zeros. For root and the mounter only (EPERM
/// otherwise). `tux3 snapshot rollback` on a path of a mount uses it to
/// unmount, roll back the image and mount it again the same way.
pub const IOC_MOUNT_INFO: u32 = libc::_IOR::<[u8; MOUNT_INFO_LEN]>(0xE3, 5) as u32;

/// The ioctl that starts, reports on and cancels a scrub of the mounted
/// volume (`_IOWR(0xE3, 6, [u8; 4096])`, layout in `scrub.rs`): the
/// server runs it in a thread. Status is for anyone who may open a file of
/// the mount; start and cancel for root and the mounter (EPERM). EBUSY: a
/// scrub is running already; ESRCH: none to cancel.
pub const IOC_SCRUB: u32 = libc::_IOWR::<[u8; SCRUB_ARG_LEN]>(0xE3, 6) as u32;

/// The ioctl that resizes the mounted volume (`_IOWR(0xE3, 9, [u8;
/// 16])`): in, the new size in bytes (u64, native order, rounded down to
/// whole blocks; 0: as large as the device is now); out, the old and the
/// new size in blocks. For root
/// and the mounter only (EPERM). Errors as `Fs::resize`'s: ENOSPC, EIO,
/// EROFS, EINVAL (a size the volume cannot take).
pub const IOC_RESIZE: u32 = libc::_IOWR::<[u8; RESIZE_ARG_LEN]>(0xE3, 9) as u32;
/// Size of [`IOC_RESIZE`]'s argument.
pub const RESIZE_ARG_LEN: usize = 16;
/// The ioctl that discards the free space of the mounted volume
/// (`_IOWR(0xE3, 7, [u8; 24])`, the argument fstrim(8)'s FITRIM takes,
/// layout in `trim.rs`; the server answers [`FITRIM`] the same way). For
/// root and the mounter only (EPERM). EROFS on a read-only mount, EINVAL
/// for a range past the volume, EOPNOTSUPP if the device cannot discard.
pub const IOC_FSTRIM: u32 = libc::_IOWR::<[u8; FSTRIM_ARG_LEN]>(0xE3, 7) as u32;

pub use trim::{decode_range, encode_range, FITRIM, FSTRIM_ARG_LEN, TRIM_STEP};

pub use scrub::{
    decode_status, encode_request, ScrubStatus, NO_EXIT, SCRUB_ARG_LEN, SCRUB_CANCEL, SCRUB_RESTART,
    SCRUB_START, SCRUB_STATUS,
};
pub use snapshot::{
    decode_name, decode_snapshot, encode_name, encode_snapshot, list_index, list_request, SNAPSHOT_NAME_ARG,
    SNAPSHOT_RECORD_LEN,
};

/// Default number of threads serving requests.
pub const DEFAULT_THREADS: usize = 4;

/// Options of one mount, as the FUSE frontend sees them.
///
/// [`FuseOptions::default`] gives the defaults for the calling process:
/// a mount by root behaves like any filesystem mount(8) makes (every user
/// gets in, under the kernel's permission checks; set-user-ID files and
/// device nodes work unless `nosuid`, `nodev` say otherwise); any other
/// mounter keeps FUSE's rules (only the mounter gets in; `nosuid,nodev`).
#[derive(Debug, Clone)]
pub struct FuseOptions {
    /// Mount read-only (the volume must be opened read-only too).
    pub read_only: bool,
    /// Let users other than the mounter in (the kernel's `allow_other`).
    /// Default: on for a mount by root, off otherwise (a mounter who is not
    /// root needs `user_allow_other` in /etc/fuse.conf for it). Implies
    /// `default_permissions`: nobody gets in unchecked.
    pub allow_other: bool,
    /// Let the kernel check permissions from mode, owner and group. On by
    /// default, and always with `allow_other`: the adapter makes no checks
    /// of its own.
    pub default_permissions: bool,
    /// Enable the kernel's FUSE writeback cache. Faster for small writes, but
    /// the kernel then splits, merges and reorders data writes against
    /// namespace operations, so a `write()` is no longer atomic and the
    /// ordering promise (DESIGN.md 3.4) no longer holds between data and
    /// renames, unlinks or other files' writes. Off by default.
    pub writeback_cache: bool,
    /// Keep idle CPUs awake this long after each request (`idle_poll.rs`);
    /// `None` (the default): no polling.
    pub idle_poll: Option<std::time::Duration>,
    /// The io_uring queue threads commit a lone reply at idle CPU
    /// priority while some CPU is idle, watched for starvation
    /// (`uring/priority.rs`), so that it wakes its caller on the queue's
    /// own CPU. On by default; no effect with `idle_poll`.
    pub idle_queues: bool,
    /// Threads serving requests (each with its own cloned `/dev/fuse` fd;
    /// with io_uring, spread over the per-CPU queues).
    pub threads: usize,
    /// Serve requests through io_uring queues: `None` when the kernel
    /// allows it, `Some(true)` always (the mount fails if the kernel does
    /// not allow it), `Some(false)` never.
    pub uring: Option<bool>,
    /// Source shown in `/proc/mounts` (the image path).
    pub fsname: String,
    /// Kernel mount flags passed through: `Some(true)` sets the flag's
    /// positive form (`exec`, `suid`, `dev`, `atime`, `sync`), `Some(false)`
    /// the negative one, `None` leaves the kernel's default (for `suid` and
    /// `dev`: off, as for every FUSE mount). The defaults of a mount by root
    /// set `suid` and `dev`, as mount(8) does for any filesystem (it passes
    /// only the negative forms on to a helper).
    pub exec: Option<bool>,
    pub suid: Option<bool>,
    pub dev: Option<bool>,
    pub atime: Option<bool>,
    /// When reads and listings move access times (`relatime`, the
    /// default; `noatime`; `strictatime`). The server moves them: the
    /// kernel leaves a FUSE file's access time to it.
    pub atime_rule: tux3::types::AtimeRule,
    /// Whether listings move directories' access times (`nodiratime`:
    /// not).
    pub diratime: bool,
    pub sync: Option<bool>,
    pub dirsync: bool,
    /// The `-o` options the mount was made with, as given: what
    /// [`IOC_MOUNT_INFO`] reports, so that `tux3 snapshot rollback` through
    /// the mount can mount the volume again the same way.
    pub mount_options: String,
}

impl FuseOptions {
    /// The defaults for a mount by root (`root`) or by another user; see
    /// the type's documentation.
    pub fn for_mounter(root: bool) -> FuseOptions {
        FuseOptions {
            read_only: false,
            allow_other: root,
            default_permissions: true,
            writeback_cache: false,
            idle_poll: None,
            idle_queues: true,
            threads: DEFAULT_THREADS,
            uring: None,
            fsname: "tux3".to_string(),
            mount_options: String::new(),
            exec: None,
            suid: root.then_some(true),
            dev: root.then_some(true),
            atime: None,
            atime_rule: tux3::types::AtimeRule::Relative,
            diratime: true,
            sync: None,
            dirsync: false,
        }
    }
}

impl Default for FuseOptions {
    /// The defaults for the calling process's effective user.
    fn default() -> Self {
        // SAFETY: geteuid has no preconditions.
        FuseOptions::for_mounter(unsafe { libc::geteuid() } == 0)
    }
}

/// The generation of an inode, which the kernel puts in its file handles
/// (`name_to_handle_at`, NFS) beside the inode number, so that a handle of
/// a deleted file whose number was given to a new one is stale: taken from
/// the birth time, which differs between the two (its nanoseconds since
/// the epoch, folded to the 32 bits a handle keeps). 0 for inodes of
/// volumes made before birth times were kept.
pub fn generation(a: &Attr) -> u64 {
    let nanos = (a.btime.sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(u64::from(a.btime.nsec));
    (nanos ^ (nanos >> 32)) & 0xffff_ffff
}
