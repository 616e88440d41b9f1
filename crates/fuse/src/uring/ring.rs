//! One io_uring queue thread: registers its ring entries (a header and a
//! payload buffer each) with the kernel's FUSE queue of one CPU, then
//! serves each request the kernel places in an entry and commits the reply
//! while fetching the next request in the same command
//! (`COMMIT_AND_FETCH`). Requests answered later (fsync) come back through
//! a channel and an eventfd the ring also waits on; so do writes handed to
//! a thread that may block.
//!
//! Soundness under panic. Every command in flight names buffers of this
//! thread (an entry's header and payload, the eventfd read's 8 bytes) that
//! the kernel writes into whenever it likes until the command completes,
//! and a request may arrive in a registered entry at any time. The buffers
//! are therefore owned by [`Buffers`], whose `Drop` frees the entries only
//! when the ring is known quiesced (every command naming them has
//! completed: `run` saw the last one end) and leaks them otherwise — on an
//! error return with entries still registered, and on unwinding, since a
//! panic anywhere in the thread (the dispatcher, the engine, this file)
//! unwinds through `run` with the kernel still holding the entries. A leak
//! is bounded (one queue's entries, about 16 MiB) and counted
//! ([`leaked_slots`]); freeing memory the kernel may still copy a request
//! into would be a use-after-free in safe code's heap. Aborting the process
//! instead would be sound too, but would drop every request in flight and
//! the volume's last writes with it. The eventfd read's buffer is always
//! leaked: the read stays armed until the kernel tears the ring down, on
//! its own time. What happens to the mount after a ring thread panicked
//! is decided in `mod.rs`.
//!
//! A held request's payload buffer may be lent to the thread that answers
//! it (a large READ reads straight into it): between serving a request and
//! delivering its answer this thread never touches that entry's buffers,
//! and the entry stays live (so its buffers stay allocated) until the
//! answer is committed; after a panic they leak, so a late writer still
//! writes into memory nobody else owns.
//!
//! Calls the dispatcher (`dispatch.rs`) and `priority.rs`.

use super::abi::{self, InHeader, HEADER_LEN};
use super::dispatch::{Offload, Outcome, Reply};
use super::idle_cpus::CpuState;
use super::priority::IdlePriority;
use crate::{log, Tux3Fuse};
use crossbeam_channel::{unbounded, Receiver, Sender};
use io_uring::{opcode, squeue, types, IoUring};
use std::io;
use std::mem::ManuallyDrop;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// `user_data` of the eventfd read (entries use their index).
const WAKE: u64 = u64::MAX;

/// One ring entry: the buffers the kernel fills with a request and reads
/// the reply from. Boxed so their addresses stay put.
struct Slot {
    header: Box<[u8; HEADER_LEN]>,
    /// The payload buffer: `payload_len` bytes of `buf` from `start`,
    /// page-aligned so that a read reply can come straight from an
    /// `O_DIRECT` device read.
    buf: Box<[u8]>,
    start: usize,
    payload_len: usize,
    iov: Box<[libc::iovec; 2]>,
    /// The request it holds while being served.
    unique: u64,
    commit_id: u64,
    /// Its last command was a registration (not a commit).
    registering: bool,
}

// SAFETY: the iovecs point into the slot's own boxes; a slot is used by
// one thread only.
unsafe impl Send for Slot {}

/// Alignment of payload buffers.
const PAGE: usize = 4096;

impl Slot {
    fn payload(&mut self) -> &mut [u8] {
        &mut self.buf[self.start..self.start + self.payload_len]
    }

    fn new(payload_len: usize) -> Slot {
        let mut header = Box::new([0u8; HEADER_LEN]);
        let mut buf = vec![0u8; payload_len + PAGE].into_boxed_slice();
        let start = buf.as_ptr().align_offset(PAGE).min(PAGE);
        let payload = &mut buf[start..start + payload_len];
        let iov = Box::new([
            libc::iovec {
                iov_base: header.as_mut_ptr().cast(),
                iov_len: HEADER_LEN,
            },
            libc::iovec {
                iov_base: payload.as_mut_ptr().cast(),
                iov_len: payload_len,
            },
        ]);
        Slot {
            header,
            buf,
            start,
            payload_len,
            iov,
            unique: 0,
            commit_id: 0,
            registering: true,
        }
    }
}

/// Ring entries whose buffers were leaked because the kernel might still
/// hold them when their queue thread ended (a panic, an error).
static LEAKED: AtomicUsize = AtomicUsize::new(0);

/// How many ring entries' buffers were leaked so far (see the header).
pub fn leaked_slots() -> usize {
    LEAKED.load(Ordering::SeqCst)
}

/// The buffers the kernel may write into: leaked unless known quiesced.
struct Buffers {
    slots: ManuallyDrop<Vec<Slot>>,
    wake_buf: ManuallyDrop<Box<[u8; 8]>>,
    /// No command naming a slot is in flight any more.
    quiesced: bool,
}

impl Drop for Buffers {
    fn drop(&mut self) {
        if self.quiesced {
            // SAFETY: `slots` is dropped here only, once; the kernel has
            // completed every command that named its buffers.
            unsafe { ManuallyDrop::drop(&mut self.slots) }
        } else {
            LEAKED.fetch_add(self.slots.len(), Ordering::SeqCst);
        }
        // `wake_buf` is never dropped: the eventfd read stays armed until
        // the ring is torn down.
    }
}

/// A deferred reply as it crosses to the queue thread: [`Reply`], owned.
enum Answered {
    Bytes(Vec<u8>),
    InPayload(usize),
}

/// A deferred reply: slot index, outcome (0 or a negative errno), reply.
type Done = (usize, i32, Answered);

/// The state of one queue thread.
pub struct Queue {
    fuse: Tux3Fuse,
    /// This thread's duplicate of the `/dev/fuse` descriptor.
    dev: Arc<OwnedFd>,
    qid: u16,
    ring: IoUring<squeue::Entry128>,
    /// The entries' buffers and the eventfd read's.
    bufs: Buffers,
    /// Shared with the callbacks of deferred requests, so it stays open
    /// until the last of them is gone.
    wake: Arc<OwnedFd>,
    done_tx: Sender<Done>,
    done_rx: Receiver<Done>,
    /// Threads for requests that may block (see `Tux3Fuse::serve`).
    offload: Offload,
    /// Entries the kernel still holds (registered or committed).
    live: usize,
    /// Replies committed at idle priority (`priority.rs`), if so mounted.
    priority: Option<IdlePriority>,
}

impl Queue {
    /// Called on the queue thread itself (its ring is single-issuer, and
    /// idle-priority commits set the calling thread's policy);
    /// `idle_cpus`: commit lone replies at idle priority (`priority.rs`).
    pub fn new(
        fuse: Tux3Fuse,
        dev: Arc<OwnedFd>,
        qid: u16,
        entries: usize,
        payload_len: usize,
        offload: Offload,
        idle_cpus: Option<CpuState>,
    ) -> io::Result<Queue> {
        let ring = IoUring::<squeue::Entry128>::builder()
            .setup_single_issuer()
            .setup_coop_taskrun()
            .setup_taskrun_flag()
            .setup_defer_taskrun()
            .build((entries as u32 + 1).next_power_of_two())?;
        // SAFETY: plain syscall; the descriptor is owned below.
        let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if efd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor nobody else owns.
        let wake = Arc::new(unsafe { OwnedFd::from_raw_fd(efd) });
        let (done_tx, done_rx) = unbounded();
        Ok(Queue {
            fuse,
            dev,
            qid,
            ring,
            bufs: Buffers {
                slots: ManuallyDrop::new((0..entries).map(|_| Slot::new(payload_len)).collect()),
                wake_buf: ManuallyDrop::new(Box::new([0; 8])),
                quiesced: false,
            },
            wake,
            done_tx,
            done_rx,
            offload,
            live: 0,
            // On the queue thread: the policy is the calling thread's.
            priority: idle_cpus.and_then(IdlePriority::start),
        })
    }

    /// A FUSE ring command for slot `i`.
    fn command(&mut self, cmd_op: u32, i: usize) -> squeue::Entry128 {
        let mut cmd = [0u8; 80];
        // struct fuse_uring_cmd_req: flags, commit_id, qid.
        let slot = &mut self.bufs.slots[i];
        cmd[8..16].copy_from_slice(&slot.commit_id.to_ne_bytes());
        cmd[16..18].copy_from_slice(&self.qid.to_ne_bytes());
        let iov = slot.iov.as_mut_ptr() as u64;
        let e = opcode::UringCmd80::new(types::Fd(self.dev.as_raw_fd()), cmd_op)
            .cmd(cmd)
            .addr(Some(iov))
            .build()
            .user_data(i as u64);
        with_len(e, 2)
    }

    fn push(&mut self, e: squeue::Entry128) -> io::Result<()> {
        // SAFETY: every buffer an entry names lives in `self.bufs`, which
        // frees them only once the kernel has completed every command
        // (never on unwinding).
        while unsafe { self.ring.submission().push(&e) }.is_err() {
            self.ring.submit()?;
        }
        Ok(())
    }

    fn arm_wake(&mut self) -> io::Result<()> {
        let e = opcode::Read::new(
            types::Fd(self.wake.as_raw_fd()),
            self.bufs.wake_buf.as_mut_ptr(),
            8,
        )
        .build()
        .user_data(WAKE);
        self.push(e.into())
    }

    /// Register every slot, then serve until the kernel ends the queue
    /// (unmount): it completes each entry with an error then.
    pub fn run(mut self) -> io::Result<()> {
        let r = self.serve_all();
        // With entries left, the kernel may still copy into their buffers
        // (until the ring closes and cancels them): `bufs` leaks them.
        self.bufs.quiesced = self.live == 0;
        r
    }

    fn serve_all(&mut self) -> io::Result<()> {
        for i in 0..self.bufs.slots.len() {
            let e = self.command(abi::CMD_REGISTER, i);
            self.push(e)?;
            self.live += 1;
        }
        self.arm_wake()?;
        let mut done: Vec<(u64, i32)> = Vec::with_capacity(self.bufs.slots.len() + 1);
        while self.live > 0 {
            // The replies queued go first, at idle priority if so mounted
            // (`priority.rs`); then the wait, at normal priority unless
            // the caller's next request is already there. Only a lone
            // reply after a lone request: with more at once the CPUs are
            // busy, no halted one is woken, and the priority changes
            // would be spent for nothing.
            let ring = &mut self.ring;
            if let Some(p) = &mut self.priority {
                if ring.submission().len() == 1 && done.len() <= 1 {
                    p.commit(|| ring.submit())?;
                    p.before_wait(ring.submission().taskrun());
                } else {
                    p.normal();
                }
            }
            match self.ring.submit_and_wait(1) {
                Ok(_) => {}
                // Interrupted, or completions to reap first: go round.
                Err(e) if [Some(libc::EINTR), Some(libc::EBUSY)].contains(&e.raw_os_error()) => {}
                Err(e) => return Err(e),
            }
            done.clear();
            done.extend(self.ring.completion().map(|c| (c.user_data(), c.result())));
            if done.iter().any(|&(data, res)| data != WAKE && res >= 0) {
                self.fuse.note_request();
            }
            for &(data, res) in &done {
                if data == WAKE {
                    self.deliver()?;
                    self.arm_wake()?;
                } else if res < 0 {
                    self.failed(data as usize, -res)?;
                } else {
                    self.serve(data as usize)?;
                }
            }
        }
        Ok(())
    }

    /// Slot `i`'s command failed with `errno`. The kernel ends every entry
    /// so when the connection goes (unmount, abort): the slot is done. A
    /// commit refused for another reason (its request gone) registers the
    /// slot afresh, so the queue never runs out of entries while the mount
    /// lives; a refused registration gives the slot up.
    fn failed(&mut self, i: usize, errno: i32) -> io::Result<()> {
        let gone = [libc::ENOTCONN, libc::ECONNABORTED, libc::ECANCELED].contains(&errno);
        if gone || self.bufs.slots[i].registering {
            if !gone {
                log(&format!(
                    "io_uring queue {}: registering an entry: {}",
                    self.qid,
                    io::Error::from_raw_os_error(errno)
                ));
            }
            self.live -= 1;
            return Ok(());
        }
        log(&format!(
            "io_uring queue {}: a reply was refused: {}",
            self.qid,
            io::Error::from_raw_os_error(errno)
        ));
        self.bufs.slots[i].registering = true;
        let e = self.command(abi::CMD_REGISTER, i);
        self.push(e)
    }

    /// Serve the request in slot `i`.
    fn serve(&mut self, i: usize) -> io::Result<()> {
        let slot = &mut self.bufs.slots[i];
        let Ok(h) = InHeader::parse(&slot.header[..]) else {
            // A ring entry's header buffer always holds a request.
            return self.commit(i, -libc::EINVAL, 0);
        };
        slot.unique = h.unique;
        slot.commit_id = h.commit_id;
        #[cfg(feature = "test-hooks")]
        crate::test_hooks::ring_request();
        // Only a short request, or a small write right after one, is
        // served at idle priority (`priority.rs`).
        if let Some(p) = &mut self.priority {
            p.serving(h.opcode, h.payload_len);
        }
        let tx = self.done_tx.clone();
        let efd = self.wake.clone();
        let me = std::thread::current().id();
        let defer = move || -> super::dispatch::Deferred {
            Box::new(move |error, reply: Reply<'_>| {
                let reply = match reply {
                    Reply::Bytes(b) => Answered::Bytes(b.to_vec()),
                    Reply::InPayload(len) => Answered::InPayload(len),
                };
                let _ = tx.send((i, error, reply));
                // Answered on this thread (a lone fsync commits inline):
                // `serve` delivers it on return, no wake-up needed.
                if std::thread::current().id() != me {
                    wake(&efd);
                }
            })
        };
        let mut op_in = [0u8; abi::OP_IN_LEN];
        op_in.copy_from_slice(abi::op_in(&slot.header[..]));
        match self
            .fuse
            .serve(&h, &op_in, slot.payload(), defer, Some(&self.offload))
        {
            Outcome::Reply { error, len } => self.commit(i, error, len),
            Outcome::Later => self.deliver(),
        }
    }

    /// Commit slot `i`'s reply and fetch its next request.
    fn commit(&mut self, i: usize, error: i32, len: usize) -> io::Result<()> {
        let slot = &mut self.bufs.slots[i];
        slot.registering = false;
        abi::set_out_header(&mut slot.header[..], slot.unique, error, len);
        let e = self.command(abi::CMD_COMMIT_AND_FETCH, i);
        self.push(e)
    }

    /// Commit the replies answered from other threads.
    fn deliver(&mut self) -> io::Result<()> {
        while let Ok((i, error, reply)) = self.done_rx.try_recv() {
            let Some(slot) = self.bufs.slots.get_mut(i) else {
                continue;
            };
            let payload = slot.payload();
            let len = match reply {
                Answered::Bytes(bytes) => {
                    let len = bytes.len().min(payload.len());
                    payload[..len].copy_from_slice(&bytes[..len]);
                    len
                }
                Answered::InPayload(len) => len.min(payload.len()),
            };
            self.commit(i, error, len)?;
        }
        Ok(())
    }
}

/// Signal a queue's eventfd (a request answered after its queue ended
/// has nobody to answer: the write then only fills the counter).
fn wake(efd: &OwnedFd) {
    let one = 1u64.to_ne_bytes();
    // SAFETY: writes 8 bytes from a valid buffer to an open descriptor.
    unsafe {
        libc::write(efd.as_raw_fd(), one.as_ptr().cast(), 8);
    }
}

/// Set an entry's `len` field (the iovec count), which the builder does not
/// expose for ring commands.
fn with_len(e: squeue::Entry128, len: u32) -> squeue::Entry128 {
    // SAFETY: `Entry128` is the kernel's 128-byte SQE (`repr(C)`); `len`
    // is the u32 at byte 24 of `struct io_uring_sqe`.
    unsafe {
        let mut raw: [u8; 128] = std::mem::transmute(e);
        raw[24..28].copy_from_slice(&len.to_ne_bytes());
        std::mem::transmute::<[u8; 128], squeue::Entry128>(raw)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(e: squeue::Entry128) -> [u8; 128] {
        // SAFETY: `Entry128` is 128 bytes of plain data (the size is checked
        // by transmute).
        unsafe { std::mem::transmute::<squeue::Entry128, [u8; 128]>(e) }
    }

    fn u32_at(b: &[u8], at: usize) -> u32 {
        u32::from_ne_bytes(b[at..at + 4].try_into().unwrap())
    }

    fn u64_at(b: &[u8], at: usize) -> u64 {
        u64::from_ne_bytes(b[at..at + 8].try_into().unwrap())
    }

    /// `struct io_uring_sqe` offsets (`include/uapi/linux/io_uring.h`).
    const OPCODE: usize = 0;
    const FD: usize = 4;
    const OFF: usize = 8; // also `cmd_op` (u32) of a ring command
    const ADDR: usize = 16;
    const LEN: usize = 24;
    const USER_DATA: usize = 32;
    const CMD: usize = 48; // the command bytes of an SQE128

    #[test]
    fn entries_have_the_kernel_sqe_layout() {
        // The io-uring version is pinned exactly (=0.7.15): this checks that
        // its entries are the kernel's bytes.
        let buf = [0u8; 16];
        let e = opcode::Read::new(types::Fd(7), buf.as_ptr().cast_mut(), 4096)
            .offset(0x1122_3344_5566)
            .build()
            .user_data(0xdead_beef_0bad_cafe);
        let b = bytes(e.into());
        assert_eq!(b[OPCODE], opcode::Read::CODE);
        assert_eq!(u32_at(&b, FD) as i32, 7);
        assert_eq!(u64_at(&b, OFF), 0x1122_3344_5566);
        assert_eq!(u64_at(&b, ADDR), buf.as_ptr() as u64);
        assert_eq!(u32_at(&b, LEN), 4096);
        assert_eq!(u64_at(&b, USER_DATA), 0xdead_beef_0bad_cafe);
        assert!(
            b[64..].iter().all(|&x| x == 0),
            "a 64-byte entry's second half is zero"
        );
    }

    #[test]
    fn with_len_sets_the_field_the_kernel_reads() {
        let mut cmd = [0u8; 80];
        for (k, c) in cmd.iter_mut().enumerate() {
            *c = k as u8 + 1;
        }
        let iov = 0x7f00_1234_5678u64;
        let e = opcode::UringCmd80::new(types::Fd(9), abi::CMD_COMMIT_AND_FETCH)
            .cmd(cmd)
            .addr(Some(iov))
            .build()
            .user_data(5);
        let before = bytes(e.clone());
        assert_eq!(before[OPCODE], opcode::UringCmd80::CODE);
        assert_eq!(u32_at(&before, FD) as i32, 9);
        assert_eq!(u32_at(&before, OFF), abi::CMD_COMMIT_AND_FETCH, "cmd_op");
        assert_eq!(u64_at(&before, ADDR), iov);
        assert_eq!(u32_at(&before, LEN), 0, "the builder leaves len alone");
        assert_eq!(u64_at(&before, USER_DATA), 5);
        assert_eq!(&before[CMD..CMD + 80], &cmd[..]);

        let after = bytes(with_len(e, 2));
        assert_eq!(
            u32_at(&after, LEN),
            2,
            "the iovec count where the kernel reads it"
        );
        let mut expect = before;
        expect[LEN..LEN + 4].copy_from_slice(&2u32.to_ne_bytes());
        assert_eq!(after, expect, "and nothing else changed");
    }
}
