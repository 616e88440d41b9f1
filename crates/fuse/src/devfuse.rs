//! The `/dev/fuse` transport: threads that each read requests from their
//! own descriptor of the connection (the first is fuser's, the others
//! clones made with `FUSE_DEV_IOC_CLONE`, so the kernel hands requests to
//! whichever thread waits), one request per read, and answer them through
//! the decoder both transports share (`uring/dispatch.rs`), writing each
//! reply with its request's id to the descriptor it came from — also a
//! reply given later from another thread (fsync). FORGET and BATCH_FORGET
//! (no reply) and DESTROY are handled here; fuser mounts and answers INIT
//! (`serve.rs`, `ops.rs`), and with FUSE over io_uring the queues take
//! every request but those and INTERRUPT once they are registered.
//!
//! As fuser did, a mount without `allow_other` answers EACCES to a request
//! from another user, but for those the kernel makes on its own (reads,
//! writes, fsyncs, releases, listings).
//!
//! Calls the decoder ([`Tux3Fuse::serve`]), the adapter's `forget` and
//! `forgets.rs`.

use crate::uring::abi::{self, op, read, InHeader, OP_IN_LEN};
use crate::uring::args::{BatchForgetIn, ForgetIn, ForgetOne};
use crate::uring::dispatch::{Deferred, Outcome, Reply};
use crate::{log, Tux3Fuse, MAX_READAHEAD, MAX_WRITE};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::thread::{self, JoinHandle};

/// `FUSE_DEV_IOC_CLONE` (`_IOR(229, 0, uint32_t)`): attach a fresh
/// `/dev/fuse` descriptor to the connection of another.
const FUSE_DEV_IOC_CLONE: libc::Ioctl = libc::_IOR::<u32>(229, 0);

const PAGE: usize = 4096;

/// Where a READ's reply starts in a request as read: after the header and
/// `fuse_read_in`. Requests are read so that it falls on a page boundary,
/// so a read can come straight from an `O_DIRECT` device read.
const READ_REPLY_AT: usize = abi::DEV_ARGS_AT + 40;

/// Opcodes the kernel sends on its own, with no caller's credentials to
/// check (as fuser let them through).
const ANY_CALLER: [u32; 11] = [
    op::READ,
    op::READDIR,
    op::READDIRPLUS,
    op::WRITE,
    op::FSYNC,
    op::FSYNCDIR,
    op::RELEASE,
    op::RELEASEDIR,
    op::FORGET,
    op::BATCH_FORGET,
    op::DESTROY,
];

/// The threads serving `/dev/fuse`.
pub(crate) struct DevThreads {
    threads: Vec<JoinHandle<io::Result<()>>>,
}

impl DevThreads {
    /// Start `n` threads serving `fuse` on the connection `dev`.
    pub(crate) fn start(fuse: &Tux3Fuse, dev: BorrowedFd, n: usize) -> io::Result<DevThreads> {
        let mut threads = Vec::with_capacity(n.max(1));
        for i in 0..n.max(1) {
            let fd = if i == 0 {
                dev.try_clone_to_owned()?
            } else {
                clone_fd(dev)?
            };
            let fuse = fuse.clone();
            threads.push(
                thread::Builder::new()
                    .name(format!("tux3-dev{i}"))
                    .spawn(move || serve_dev(&fuse, Arc::new(fd)))?,
            );
        }
        Ok(DevThreads { threads })
    }

    /// Wait for every thread: they end when the connection does (unmount,
    /// abort) or at DESTROY. The first error, if any.
    pub(crate) fn join(self) -> io::Result<()> {
        let mut r = Ok(());
        for t in self.threads {
            let e = match t.join() {
                Ok(Ok(())) => continue,
                Ok(Err(e)) => e,
                Err(_) => io::Error::other("a /dev/fuse thread panicked"),
            };
            if r.is_ok() {
                r = Err(e);
            }
        }
        r
    }
}

/// A new descriptor of the connection `dev`.
fn clone_fd(dev: BorrowedFd) -> io::Result<OwnedFd> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")?;
    let mut src = dev.as_raw_fd() as u32;
    // SAFETY: both descriptors are open; the argument is a valid u32.
    if unsafe { libc::ioctl(f.as_raw_fd(), FUSE_DEV_IOC_CLONE, &mut src) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(f.into())
}

/// Serve requests read from `fd` until the connection ends.
fn serve_dev(fuse: &Tux3Fuse, fd: Arc<OwnedFd>) -> io::Result<()> {
    // Room for the largest write with its header and arguments (the kernel
    // refuses smaller reads), and for the largest read's reply.
    let room = MAX_WRITE.max(MAX_READAHEAD) as usize + PAGE;
    let mut buf = vec![0u8; room + 2 * PAGE].into_boxed_slice();
    let start = buf.as_ptr().align_offset(PAGE).min(PAGE) + PAGE - READ_REPLY_AT;
    // SAFETY: geteuid has no preconditions.
    let owner = (!fuse.opts.allow_other).then(|| unsafe { libc::geteuid() });
    loop {
        let n = match read_request(&fd, &mut buf[start..]) {
            Ok(n) => n,
            Err(e) => match e.raw_os_error() {
                // Interrupted, or a request gone before it was read.
                Some(libc::EINTR | libc::EAGAIN | libc::ENOENT) => continue,
                // Unmounted, or the connection aborted.
                Some(libc::ENODEV) => return Ok(()),
                _ => return Err(e),
            },
        };
        let h = InHeader::parse_dev(&buf[start..start + n])
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "a request shorter than its header"))?;
        let args = start + abi::DEV_ARGS_AT;
        match h.opcode {
            op::FORGET | op::BATCH_FORGET => {
                forget(fuse, &h, &buf[args..start + n]);
                continue;
            }
            op::DESTROY => {
                send(&fd, h.unique, 0, &[]);
                return Ok(());
            }
            _ => {}
        }
        if owner.is_some_and(|o| o != h.uid) && !ANY_CALLER.contains(&h.opcode) {
            send(&fd, h.unique, -libc::EACCES, &[]);
            continue;
        }
        let arg_len = h.len - abi::DEV_ARGS_AT - h.payload_len;
        let mut op_in = [0u8; OP_IN_LEN];
        let copied = arg_len.min(OP_IN_LEN);
        op_in[..copied].copy_from_slice(&buf[args..args + copied]);
        let at = args + arg_len;
        let unique = h.unique;
        let later = fd.clone();
        let defer = move || -> Deferred {
            Box::new(move |error, reply: Reply<'_>| match reply {
                Reply::Bytes(b) => send(&later, unique, error, b),
                // Only a READ handed to another thread answers in its
                // payload, and `/dev/fuse` threads hand nothing off.
                Reply::InPayload(_) => send(&later, unique, -libc::EIO, &[]),
            })
        };
        match fuse.serve(&h, &op_in, &mut buf[at..], defer, None) {
            Outcome::Reply { error, len } => send(&fd, unique, error, &buf[at..at + len]),
            Outcome::Later => {}
        }
    }
}

/// Read one request into `buf`.
fn read_request(fd: &OwnedFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: reads into a valid buffer of its length.
    let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// Write the reply to request `unique`: 0 or a negative errno, and its
/// bytes (none with an error). A request the kernel dropped meanwhile
/// (interrupted, the connection aborted) takes no reply: ignored.
fn send(fd: &OwnedFd, unique: u64, error: i32, bytes: &[u8]) {
    let header = abi::out_header(unique, error, bytes.len());
    let iov = [
        libc::iovec {
            iov_base: header.as_ptr() as *mut libc::c_void,
            iov_len: header.len(),
        },
        libc::iovec {
            iov_base: bytes.as_ptr() as *mut libc::c_void,
            iov_len: bytes.len(),
        },
    ];
    // SAFETY: both iovecs point to live buffers of their lengths.
    if unsafe { libc::writev(fd.as_raw_fd(), iov.as_ptr(), 2) } < 0 {
        let e = io::Error::last_os_error();
        if !matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENODEV)) {
            log(&format!("replying to FUSE request {unique}: {e}"));
        }
    }
}

/// A FORGET or BATCH_FORGET (`args`: what follows its header): the kernel
/// gives lookups back, and wants no reply.
fn forget(fuse: &Tux3Fuse, h: &InHeader, args: &[u8]) {
    let one = |ino, nlookup| {
        // Let more FORGETs gather in the kernel first (forgets.rs).
        fuse.forgets.linger(h.unique);
        #[cfg(feature = "test-hooks")]
        crate::test_hooks::forget(h.unique);
        fuse.forget(ino, nlookup);
    };
    if h.opcode == op::FORGET {
        if let Ok(a) = read::<ForgetIn>(args) {
            one(h.nodeid, a.nlookup);
        }
        return;
    }
    let Ok(batch) = read::<BatchForgetIn>(args) else {
        return;
    };
    let entries = args.get(8..).unwrap_or_default();
    for e in entries.chunks_exact(16).take(batch.count as usize) {
        if let Ok(f) = read::<ForgetOne>(e) {
            one(f.nodeid, f.nlookup);
        }
    }
}
