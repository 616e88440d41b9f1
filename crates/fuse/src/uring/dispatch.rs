//! Requests of both transports — an io_uring queue entry (`ring.rs`) or a
//! read of `/dev/fuse` (`devfuse.rs`): decode the opcode's arguments (its
//! struct, then names and data in the payload), make the engine calls
//! (through the shared helpers of `adapter.rs`), and encode the reply into
//! the payload buffer. Every opcode the kernel sends but FORGET,
//! BATCH_FORGET, DESTROY (`devfuse.rs`) and INIT (fuser, `ops.rs`) is
//! answered here; one not known is answered ENOSYS.
//!
//! Calls [`tux3::Fs`] through [`Tux3Fuse`].

use super::abi::{self, fattr, op, read, InHeader, Short, Via};
use super::args::{
    CopyFileRangeIn, CreateIn, FallocateIn, FsyncIn, GetxattrIn, IoctlIn, LinkIn, LseekIn, MkdirIn, MknodIn,
    ReadIn, Rename2In, RenameIn, SetattrIn, SetxattrIn, WriteIn,
};
use super::out::Out;
use crate::adapter::{einval, negative_attr, xattr_answer, XattrAnswer};
use crate::ioctls::{is_flags_ioctl, is_snapshot_ioctl};
use crate::{Tux3Fuse, IOC_SYNC, TTL};
use crossbeam_channel::{SendError, Sender};
use tux3::error::{Errno, Error, Result};
use tux3::types::{Attr, FileType, Ino, RenameFlags, SetAttr, StatFs, Timespec};

/// How a request ends.
pub enum Outcome {
    /// Answered: 0 or a negative errno, and the reply's length in the
    /// payload buffer.
    Reply { error: i32, len: usize },
    /// Answered later through the callback the dispatcher took (fsync).
    Later,
}

/// Called once with a deferred request's outcome (0 or a negative errno)
/// and its reply.
pub type Deferred = Box<dyn FnOnce(i32, Reply<'_>) + Send>;

/// The reply of a request answered later.
pub enum Reply<'a> {
    /// These bytes, which the ring copies into the request's payload buffer.
    Bytes(&'a [u8]),
    /// This many bytes, already written into the request's payload buffer
    /// (through [`Lent`]).
    InPayload(usize),
}

/// A READ at least this large goes to a thread that may block: the device
/// read then runs beside the ring thread's other requests, so a sequential
/// reader's read-ahead requests (1 MiB each) keep several device reads in
/// flight, where one ring thread would read them one after another (the
/// kernel queues a reader's requests on its own CPU's queue). Smaller reads
/// (random 4 KiB) stay on the ring thread: a hand-off costs two wake-ups.
pub const READ_HANDOFF: usize = 128 << 10;

/// A request's payload buffer, lent to the thread that writes its reply
/// there. The ring (`ring.rs`) neither reads nor reuses an entry's buffers
/// from the moment it hands the request to [`Tux3Fuse::serve_ring`] until
/// the reply is delivered, the kernel writes into them only once that reply
/// is committed (the commit fetches the entry's next request), and the
/// buffers are freed only after every entry has ended (a held request keeps
/// its entry live) or else leaked.
struct Lent {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the buffer is used by one thread at a time (see `Lent`).
unsafe impl Send for Lent {}

impl Lent {
    fn new(buf: &mut [u8]) -> Lent {
        Lent {
            ptr: buf.as_mut_ptr(),
            len: buf.len(),
        }
    }

    /// # Safety
    /// Called once, by the thread that then answers the request (see `Lent`).
    unsafe fn take<'a>(self) -> &'a mut [u8] {
        // SAFETY: `ptr` and `len` came from a live `&mut [u8]` nobody else
        // uses until the request is answered.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

/// The threads a ring thread hands requests that may block to: writes
/// held for a commit, syncs and snapshot ioctls to `blocking`; large reads
/// to `reads`, so that a read never waits behind writes held for a commit.
#[derive(Clone)]
pub struct Offload {
    pub blocking: Sender<Job>,
    pub reads: Sender<Job>,
}

/// Run `job` on one of `threads`; without one to take it (they are gone
/// only if one panicked), or without threads (`/dev/fuse`: its threads may
/// block), here.
fn hand_off(threads: Option<&Sender<Job>>, job: Job) {
    match threads {
        Some(t) => {
            if let Err(SendError(job)) = t.send(job) {
                job();
            }
        }
        None => job(),
    }
}

/// Work handed to a thread that may block (see [`Tux3Fuse::serve_ring`]).
pub type Job = Box<dyn FnOnce() + Send>;

/// An ioctl's work; it gives the reply's data after `fuse_ioctl_out`.
type IoctlJob = Box<dyn FnOnce() -> Result<Vec<u8>> + Send>;

/// What a request produced, before it is encoded.
enum Answer {
    Empty,
    /// A found or new entry, already held ([`Tux3Fuse::hold`]).
    Entry(Attr),
    Negative,
    Attr(Attr),
    Written(u32),
    Data(Vec<u8>),
    XattrSize(u32),
    Statfs(StatFs),
    Offset(i64),
    Statx(Attr),
    /// A file made and opened by one request (TMPFILE), already held.
    Created(Attr),
}

fn time(sec: u64, nsec: u32) -> Timespec {
    Timespec {
        sec: sec as i64,
        nsec,
    }
}

fn errno_of(e: &Error) -> i32 {
    -e.errno().0
}

/// A request shorter than its opcode's struct is refused with EINVAL.
impl From<Short> for Error {
    fn from(_: Short) -> Error {
        Error::Posix(Errno(libc::EINVAL))
    }
}

/// The outcome of a request that produced `len` bytes of reply, or failed.
fn replied(r: Result<usize>) -> Outcome {
    match r {
        Ok(len) => Outcome::Reply { error: 0, len },
        Err(e) => Outcome::Reply {
            error: errno_of(&e),
            len: 0,
        },
    }
}

fn refused(_: Short) -> Outcome {
    Outcome::Reply {
        error: -libc::EINVAL,
        len: 0,
    }
}

impl Tux3Fuse {
    /// Serve one request. `op_in` holds its argument struct (for a ring
    /// request, all the room for it in the header buffer), `payload` holds
    /// its `h.payload_len` bytes of arguments and receives the reply;
    /// `defer` gives the callback of a request answered later. A request
    /// whose lengths do not hold what its opcode reads is answered EINVAL.
    ///
    /// A `/dev/fuse` thread may block (its transport has one request per
    /// read, and other threads read the next ones): `offload` is `None`
    /// and everything but an fsync is answered on the calling thread.
    ///
    /// A ring thread must not block: the kernel places requests in any free
    /// entry of the caller's CPU queue, so requests behind a blocked one in
    /// its thread's ring would wait too — a small write and fsync behind a
    /// stream's write held for a commit. A write that would wait for dirty
    /// data to drain goes to `offload.blocking` instead, with a copy of its
    /// data, and so does a sync ([`IOC_SYNC`]) and a snapshot ioctl. A large
    /// READ ([`READ_HANDOFF`]) goes to `offload.reads`, and reads straight
    /// into `payload`.
    pub(crate) fn serve(
        &self,
        h: &InHeader,
        op_in: &[u8],
        payload: &mut [u8],
        defer: impl FnOnce() -> Deferred,
        offload: Option<&Offload>,
    ) -> Outcome {
        let op_in = match h.op_in_len(payload.len()) {
            Ok(n) => op_in.get(..n).unwrap_or(op_in),
            Err(short) => return refused(short),
        };
        let r = match h.opcode {
            op::READDIR => return self.ring_readdir(h, op_in, payload, false),
            op::READDIRPLUS => return self.ring_readdir(h, op_in, payload, true),
            // Straight into the reply: no buffer of our own, no copy.
            op::READ => {
                let a: ReadIn = match read(op_in) {
                    Ok(a) => a,
                    Err(short) => return refused(short),
                };
                let size = (a.size as usize).min(payload.len());
                let out = &mut payload[..size];
                if size < READ_HANDOFF || offload.is_none() {
                    return replied(self.read_into(h.nodeid, a.offset, out));
                }
                let (fuse, ino, offset, out, done) =
                    (self.clone(), h.nodeid, a.offset, Lent::new(out), defer());
                hand_off(
                    offload.map(|o| &o.reads),
                    Box::new(move || {
                        // SAFETY: this job answers the request, once.
                        let out = unsafe { out.take() };
                        match fuse.read_into(ino, offset, out) {
                            Ok(n) => done(0, Reply::InPayload(n)),
                            Err(e) => done(errno_of(&e), Reply::Bytes(&[])),
                        }
                    }),
                );
                return Outcome::Later;
            }
            op::FSYNC | op::FSYNCDIR => {
                let a: FsyncIn = match read(op_in) {
                    Ok(a) => a,
                    Err(short) => return refused(short),
                };
                let datasync = a.fsync_flags & abi::FSYNC_FDATASYNC != 0;
                let done = defer();
                self.fs.fsync_then(
                    h.nodeid,
                    datasync,
                    Box::new(move |r| done(r.err().map_or(0, |e| errno_of(&e)), Reply::Bytes(&[]))),
                );
                return Outcome::Later;
            }
            op::WRITE => {
                let a: WriteIn = match read(op_in) {
                    Ok(a) => a,
                    Err(short) => return refused(short),
                };
                let (ino, offset) = (h.nodeid, a.offset);
                let data = &payload[..write_len(h, &a, payload)];
                let kill = a.write_flags & abi::WRITE_KILL_SUIDGID != 0;
                if offload.is_none() || !self.fs.write_would_wait(ino, offset, data.len()) {
                    self.write(ino, offset, data, kill)
                        .map(|n| Answer::Written(n as u32))
                } else {
                    let (fuse, data, done) = (self.clone(), data.to_vec(), defer());
                    hand_off(
                        offload.map(|o| &o.blocking),
                        Box::new(move || match fuse.write(ino, offset, &data, kill) {
                            Ok(n) => done(0, Reply::Bytes(&written(n as u32))),
                            Err(e) => done(errno_of(&e), Reply::Bytes(&[])),
                        }),
                    );
                    return Outcome::Later;
                }
            }
            // A clone takes the volume's exclusive guard (and, while it
            // copies, reads and writes the whole range): on a thread that
            // may block.
            op::COPY_FILE_RANGE | op::COPY_FILE_RANGE_64 => {
                let a: CopyFileRangeIn = match read(op_in) {
                    Ok(a) => a,
                    Err(short) => return refused(short),
                };
                let wide = h.opcode == op::COPY_FILE_RANGE_64;
                let (fuse, src) = (self.clone(), h.nodeid);
                let job = move || fuse.copy_range(src, &a, wide).map(|n| copied(n, wide));
                if offload.is_none() {
                    return replied(job().map(|b| {
                        let mut out = Out::new(payload);
                        out.bytes(&b);
                        out.len
                    }));
                }
                let done = defer();
                hand_off(
                    offload.map(|o| &o.blocking),
                    Box::new(move || match job() {
                        Ok(b) => done(0, Reply::Bytes(&b)),
                        Err(e) => done(errno_of(&e), Reply::Bytes(&[])),
                    }),
                );
                return Outcome::Later;
            }
            op::IOCTL => {
                let a: IoctlIn = match read(op_in) {
                    Ok(a) => a,
                    Err(short) => return refused(short),
                };
                let len = (a.in_size as usize).min(h.payload_len).min(payload.len());
                return match self.ring_ioctl(h.nodeid, h.uid, a.cmd, &payload[..len]) {
                    Some(job) if offload.is_none() => replied(job().map(|data| {
                        let mut out = Out::new(payload);
                        out.bytes(&ioctl_out());
                        out.bytes(&data);
                        out.len
                    })),
                    Some(job) => {
                        let done = defer();
                        hand_off(
                            offload.map(|o| &o.blocking),
                            Box::new(move || match job() {
                                Ok(data) => done(0, Reply::Bytes(&[&ioctl_out()[..], &data].concat())),
                                Err(e) => done(errno_of(&e), Reply::Bytes(&[])),
                            }),
                        );
                        Outcome::Later
                    }
                    None => replied(Err(Error::Posix(Errno(libc::ENOTTY)))),
                };
            }
            _ => {
                let len = h.payload_len.min(payload.len());
                self.answer(h, op_in, &payload[..len])
            }
        };
        replied(r.map(|a| {
            let mut out = Out::new(payload);
            self.encode(a, &mut out);
            out.len
        }))
    }

    /// The engine calls of a request (all but READDIR, WRITE and the
    /// fsyncs).
    fn answer(&self, h: &InHeader, op_in: &[u8], payload: &[u8]) -> Result<Answer> {
        let ino = h.nodeid;
        let name = || abi::names(payload, 1).map(|n| n[0]).ok_or_else(einval);
        // Only the rings' listings may go without attributes (listing.rs).
        let ring = h.via == Via::Ring;
        Ok(match h.opcode {
            op::LOOKUP => match self.lookup_held(ino, name()?) {
                Ok(attr) => {
                    if ring && attr.kind != FileType::Directory {
                        self.listings.looked_up(ino);
                    }
                    Answer::Entry(attr)
                }
                // A negative entry: the kernel caches the absence for TTL.
                Err(e) if e.errno() == Errno::ENOENT => Answer::Negative,
                Err(e) => return Err(e),
            },
            // STATX: the kernel asks for it when a caller wants the birth
            // time (`statx` with STATX_BTIME), then keeps it with the rest.
            op::GETATTR | op::STATX => {
                let attr = self.fs.getattr(ino)?;
                if ring && attr.kind != FileType::Directory {
                    self.listings.attrs_asked();
                }
                match h.opcode {
                    op::STATX => Answer::Statx(attr),
                    _ => Answer::Attr(attr),
                }
            }
            op::SETATTR => Answer::Attr(self.ring_setattr(ino, &read(op_in)?)?),
            op::READLINK => Answer::Data(self.fs.readlink(ino)?),
            op::SYMLINK => {
                let n = abi::names(payload, 2).ok_or_else(einval)?;
                let (uid, gid, _) = self.owner(h.uid, h.gid, ino)?;
                Answer::Entry(self.found(ino, self.fs.symlink_held(ino, n[0], n[1], uid, gid)?))
            }
            op::MKNOD => {
                let a: MknodIn = read(op_in)?;
                let (uid, gid, _) = self.owner(h.uid, h.gid, ino)?;
                let mode = self.create_mode(ino, a.mode, a.umask);
                let attr = self
                    .fs
                    .mknod_held(ino, name()?, mode, u64::from(a.rdev), uid, gid)?;
                Answer::Entry(self.found(ino, attr))
            }
            op::MKDIR => {
                let a: MkdirIn = read(op_in)?;
                let (uid, gid, sgid) = self.owner(h.uid, h.gid, ino)?;
                let mode = self.create_mode(ino, a.mode, a.umask);
                Answer::Entry(self.found(ino, self.fs.mkdir_held(ino, name()?, mode | sgid, uid, gid)?))
            }
            op::UNLINK => self.fs.unlink(ino, name()?).map(|()| Answer::Empty)?,
            op::RMDIR => self.fs.rmdir(ino, name()?).map(|()| Answer::Empty)?,
            op::RENAME | op::RENAME2 => {
                let (newdir, flags) = if h.opcode == op::RENAME2 {
                    let a: Rename2In = read(op_in)?;
                    (a.newdir, a.flags)
                } else {
                    (read::<RenameIn>(op_in)?.newdir, 0)
                };
                let n = abi::names(payload, 2).ok_or_else(einval)?;
                let flags = RenameFlags::from_bits(flags).ok_or_else(einval)?;
                // A whiteout belongs to the caller (overlayfs: its mounter).
                let flags = flags.whiteout_owned_by(h.uid, h.gid);
                self.fs.rename(ino, n[0], newdir, n[1], flags)?;
                Answer::Empty
            }
            // An unnamed file (O_TMPFILE), opened by the same request: the
            // kernel holds it by its lookup (as every entry it learns), so
            // it is an orphan until linked, or freed after its last close.
            op::TMPFILE => {
                let a: CreateIn = read(op_in)?;
                let (uid, gid, _) = self.owner(h.uid, h.gid, ino)?;
                let mode = self.create_mode(ino, a.mode, a.umask);
                Answer::Created(self.fs.tmpfile(ino, mode, uid, gid)?)
            }
            op::LINK => {
                let attr = self
                    .fs
                    .link_held(read::<LinkIn>(op_in)?.oldnodeid, ino, name()?)?;
                Answer::Entry(self.found(ino, attr))
            }
            // A file or directory handle would hold nothing here (the
            // kernel's lookup count keeps an unlinked file alive, see
            // `Tux3Fuse::found`), and data reaches the engine at each
            // write. ENOSYS tells the kernel so, once: it stops sending
            // OPEN, OPENDIR (and their RELEASEs), CREATE (it makes files
            // with MKNOD, keeping open(O_CREAT)'s semantics) and FLUSH,
            // round trips saved on every open and close, and it may keep
            // pages and listings across opens (FOPEN_KEEP_CACHE,
            // FOPEN_CACHE_DIR), which is coherent: only we change the
            // volume.
            op::OPEN | op::CREATE | op::FLUSH | op::OPENDIR => return Err(Error::Posix(Errno::ENOSYS)),
            op::STATFS => Answer::Statfs(self.fs.statfs()?),
            op::SETXATTR => {
                let a: SetxattrIn = read(op_in)?;
                let value = abi::after_names(payload, 1);
                let size = (a.size as usize).min(value.len());
                self.setxattr(ino, name()?, &value[..size], a.flags as i32, 0)?;
                Answer::Empty
            }
            op::GETXATTR => {
                let a: GetxattrIn = read(op_in)?;
                xattr(&self.fs.getxattr(ino, name()?)?, a.size)?
            }
            op::LISTXATTR => xattr(&self.listxattr(ino)?, read::<GetxattrIn>(op_in)?.size)?,
            op::REMOVEXATTR => self.fs.removexattr(ino, name()?).map(|()| Answer::Empty)?,
            // A release holds nothing (see OPEN); with default_permissions
            // the kernel checks access itself.
            op::RELEASE | op::RELEASEDIR | op::ACCESS | op::DESTROY => Answer::Empty,
            op::LSEEK => {
                let a: LseekIn = read(op_in)?;
                Answer::Offset(self.lseek(ino, a.offset as i64, a.whence as i32)?)
            }
            op::FALLOCATE => {
                let a: FallocateIn = read(op_in)?;
                self.fallocate(ino, a.offset, a.length, a.mode as i32)?;
                Answer::Empty
            }
            _ => return Err(Error::Posix(Errno(libc::ENOSYS))),
        })
    }

    /// The work of an ioctl (`fuse_ioctl_in`: fh, flags, cmd at 12; its
    /// argument `arg` in the payload), to run on a thread that may block:
    /// `tux3 sync` (a whole commit), the snapshot ioctls (create and
    /// delete commit) and defrag (commits as it goes). It gives the data that follows `fuse_ioctl_out` in
    /// the reply. `None` for a command we do not know.
    fn ring_ioctl(&self, ino: Ino, uid: u32, cmd: u32, arg: &[u8]) -> Option<IoctlJob> {
        let fuse = self.clone();
        if is_flags_ioctl(cmd) {
            let arg = arg.to_vec();
            return Some(Box::new(move || {
                fuse.flags_ioctl(ino, cmd, &arg)
                    .unwrap_or(Err(Error::Posix(Errno(libc::ENOTTY))))
            }));
        }
        if cmd == IOC_SYNC {
            return Some(Box::new(move || fuse.fs.sync().map(|()| Vec::new())));
        }
        if is_snapshot_ioctl(cmd) {
            let arg = arg.to_vec();
            return Some(Box::new(move || fuse.snapshot_ioctl(uid, cmd, &arg)));
        }
        if cmd == crate::IOC_DEFRAG {
            let arg = arg.to_vec();
            return Some(Box::new(move || fuse.defrag_ioctl(ino, uid, &arg)));
        }
        if cmd == crate::IOC_DEDUPE {
            let arg = arg.to_vec();
            return Some(Box::new(move || fuse.dedupe_ioctl(ino, uid, &arg)));
        }
        None
    }

    fn ring_setattr(&self, ino: Ino, a: &SetattrIn) -> Result<Attr> {
        let has = |bit| a.valid & bit != 0;
        let when = |bit, now, sec, nsec| {
            if has(now) {
                Some(Timespec::now())
            } else if has(bit) {
                Some(time(sec, nsec))
            } else {
                None
            }
        };
        let set = SetAttr {
            mode: has(fattr::MODE).then_some(a.mode),
            uid: has(fattr::UID).then_some(a.uid),
            gid: has(fattr::GID).then_some(a.gid),
            size: has(fattr::SIZE).then_some(a.size),
            atime: when(fattr::ATIME, fattr::ATIME_NOW, a.atime, a.atimensec),
            mtime: when(fattr::MTIME, fattr::MTIME_NOW, a.mtime, a.mtimensec),
            ctime: has(fattr::CTIME).then(|| time(a.ctime, a.ctimensec)),
        };
        // The kernel flags a truncate by a caller without CAP_FSETID.
        let strips = self.setattr_strips(&set, || !has(fattr::KILL_SUIDGID));
        self.setattr(ino, &set, strips)
    }

    fn ring_readdir(&self, h: &InHeader, op_in: &[u8], payload: &mut [u8], plus: bool) -> Outcome {
        let a: ReadIn = match read(op_in) {
            Ok(a) => a,
            Err(short) => return refused(short),
        };
        let size = (a.size as usize).min(payload.len());
        let mut out = Out::new(&mut payload[..size]);
        // `/dev/fuse` listings always carry attributes (listing.rs).
        let r = if plus && (h.via == Via::Dev || self.listings.with_attrs(h.nodeid, a.offset)) {
            self.fill_dir_plus(h.nodeid, a.offset, |attr, next, name| {
                !out.direntplus(attr, next, name, TTL)
            })
        } else if plus {
            self.fill_dir(h.nodeid, a.offset, |ino, next, kind, name| {
                !out.direntplus_name(ino, next, kind, name)
            })
        } else {
            self.fill_dir(h.nodeid, a.offset, |ino, next, kind, name| {
                !out.dirent(ino, next, kind, name)
            })
        };
        replied(r.map(|()| out.len))
    }

    fn encode(&self, a: Answer, out: &mut Out) {
        match a {
            Answer::Empty => {}
            Answer::Entry(attr) => out.entry(&attr, TTL),
            Answer::Negative => out.entry(&negative_attr(), TTL),
            Answer::Attr(attr) => out.attr_out(&attr, TTL),
            Answer::Written(n) => out.bytes(&written(n)),
            Answer::Data(d) => out.bytes(&d),
            Answer::XattrSize(n) => {
                out.u32(n);
                out.u32(0);
            }
            Answer::Statfs(s) => out.statfs(&s),
            Answer::Offset(o) => out.u64(o as u64),
            Answer::Statx(attr) => out.statx_out(&attr, TTL),
            Answer::Created(attr) => {
                out.entry(&attr, TTL);
                out.open_out();
            }
        }
    }
}

/// The data length of a WRITE (`fuse_write_in.size`), within its payload.
fn write_len(h: &InHeader, a: &WriteIn, payload: &[u8]) -> usize {
    (a.size as usize).min(h.payload_len).min(payload.len())
}

/// A WRITE's reply (`fuse_write_out`): the bytes written, padding.
/// `fuse_ioctl_out` of an ioctl that returns 0 and no data.
fn ioctl_out() -> [u8; 16] {
    [0; 16]
}

/// The reply of a COPY_FILE_RANGE (`fuse_write_out`: the bytes copied,
/// padding) or, `wide`, of a COPY_FILE_RANGE_64
/// (`fuse_copy_file_range_out`: the bytes copied, 64 bits). The same 8
/// bytes on a little-endian machine while the count fits in 32 bits.
fn copied(n: u64, wide: bool) -> [u8; 8] {
    if wide {
        n.to_ne_bytes()
    } else {
        written(u32::try_from(n).unwrap_or(u32::MAX))
    }
}

fn written(n: u32) -> [u8; 8] {
    let mut b = [0; 8];
    b[..4].copy_from_slice(&n.to_ne_bytes());
    b
}

fn xattr(bytes: &[u8], size: u32) -> Result<Answer> {
    Ok(match xattr_answer(bytes, size)? {
        XattrAnswer::Size(n) => Answer::XattrSize(n),
        XattrAnswer::Data(d) => Answer::Data(d.to_vec()),
    })
}
