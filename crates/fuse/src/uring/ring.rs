//! One io_uring queue thread: registers its ring entries (a header and a
//! payload buffer each) with the kernel's FUSE queue of one CPU, then
//! serves each request the kernel places in an entry and commits the reply
//! while fetching the next request in the same command
//! (`COMMIT_AND_FETCH`). Requests answered later (fsync) come back through
//! a channel and an eventfd the ring also waits on; so do writes handed to
//! a thread that may block.
//!
//! Calls the dispatcher (`dispatch.rs`).

use super::abi::{self, InHeader, HEADER_LEN};
use super::dispatch::{Job, Outcome};
use crate::{log, Tux3Fuse};
use crossbeam_channel::{unbounded, Receiver, Sender};
use io_uring::{opcode, squeue, types, IoUring};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;

/// `user_data` of the eventfd read (entries use their index).
const WAKE: u64 = u64::MAX;

/// One ring entry: the buffers the kernel fills with a request and reads
/// the reply from. Boxed so their addresses stay put.
struct Slot {
    header: Box<[u8; HEADER_LEN]>,
    payload: Box<[u8]>,
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

impl Slot {
    fn new(payload_len: usize) -> Slot {
        let mut header = Box::new([0u8; HEADER_LEN]);
        let mut payload = vec![0u8; payload_len].into_boxed_slice();
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
            payload,
            iov,
            unique: 0,
            commit_id: 0,
            registering: true,
        }
    }
}

/// A deferred reply: slot index, outcome (0 or a negative errno), reply.
type Done = (usize, i32, Vec<u8>);

/// The state of one queue thread.
pub struct Queue {
    fuse: Tux3Fuse,
    /// This thread's duplicate of the `/dev/fuse` descriptor.
    dev: Arc<OwnedFd>,
    qid: u16,
    ring: IoUring<squeue::Entry128>,
    slots: Vec<Slot>,
    /// Shared with the callbacks of deferred requests, so it stays open
    /// until the last of them is gone.
    wake: Arc<OwnedFd>,
    wake_buf: Box<[u8; 8]>,
    done_tx: Sender<Done>,
    done_rx: Receiver<Done>,
    /// Threads for requests that may block (see `serve_ring`).
    blocking: Sender<Job>,
    /// Entries the kernel still holds (registered or committed).
    live: usize,
}

impl Queue {
    pub fn new(
        fuse: Tux3Fuse,
        dev: Arc<OwnedFd>,
        qid: u16,
        entries: usize,
        payload_len: usize,
        blocking: Sender<Job>,
    ) -> io::Result<Queue> {
        let ring = IoUring::<squeue::Entry128>::builder()
            .setup_single_issuer()
            .setup_coop_taskrun()
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
            slots: (0..entries).map(|_| Slot::new(payload_len)).collect(),
            wake,
            wake_buf: Box::new([0; 8]),
            done_tx,
            done_rx,
            blocking,
            live: 0,
        })
    }

    /// A FUSE ring command for slot `i`.
    fn command(&mut self, cmd_op: u32, i: usize) -> squeue::Entry128 {
        let mut cmd = [0u8; 80];
        // struct fuse_uring_cmd_req: flags, commit_id, qid.
        cmd[8..16].copy_from_slice(&self.slots[i].commit_id.to_ne_bytes());
        cmd[16..18].copy_from_slice(&self.qid.to_ne_bytes());
        let iov = self.slots[i].iov.as_mut_ptr() as u64;
        let e = opcode::UringCmd80::new(types::Fd(self.dev.as_raw_fd()), cmd_op)
            .cmd(cmd)
            .addr(Some(iov))
            .build()
            .user_data(i as u64);
        with_len(e, 2)
    }

    fn push(&mut self, e: squeue::Entry128) -> io::Result<()> {
        // SAFETY: every buffer an entry names lives in `self` until the
        // kernel completes it (the kernel ends all of them at unmount).
        while unsafe { self.ring.submission().push(&e) }.is_err() {
            self.ring.submit()?;
        }
        Ok(())
    }

    fn arm_wake(&mut self) -> io::Result<()> {
        let e = opcode::Read::new(types::Fd(self.wake.as_raw_fd()), self.wake_buf.as_mut_ptr(), 8)
            .build()
            .user_data(WAKE);
        self.push(e.into())
    }

    /// Register every slot, then serve until the kernel ends the queue
    /// (unmount): it completes each entry with an error then.
    pub fn run(mut self) -> io::Result<()> {
        let r = self.serve_all();
        if r.is_err() && self.live > 0 {
            // The kernel may still hold entries (until the ring closes and
            // cancels them) and copy into their buffers: never free them.
            std::mem::forget(std::mem::take(&mut self.slots));
        }
        // The eventfd read stays armed until the ring is torn down, which
        // the kernel finishes on its own time: its 8 bytes are never freed.
        std::mem::forget(std::mem::replace(&mut self.wake_buf, Box::new([0; 8])));
        r
    }

    fn serve_all(&mut self) -> io::Result<()> {
        for i in 0..self.slots.len() {
            let e = self.command(abi::CMD_REGISTER, i);
            self.push(e)?;
            self.live += 1;
        }
        self.arm_wake()?;
        let mut done: Vec<(u64, i32)> = Vec::with_capacity(self.slots.len() + 1);
        while self.live > 0 {
            match self.ring.submit_and_wait(1) {
                Ok(_) => {}
                // Interrupted, or completions to reap first: go round.
                Err(e) if [Some(libc::EINTR), Some(libc::EBUSY)].contains(&e.raw_os_error()) => {}
                Err(e) => return Err(e),
            }
            done.clear();
            done.extend(self.ring.completion().map(|c| (c.user_data(), c.result())));
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
        if gone || self.slots[i].registering {
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
        self.slots[i].registering = true;
        let e = self.command(abi::CMD_REGISTER, i);
        self.push(e)
    }

    /// Serve the request in slot `i`.
    fn serve(&mut self, i: usize) -> io::Result<()> {
        let slot = &mut self.slots[i];
        let h = InHeader::parse(&slot.header[..]);
        slot.unique = h.unique;
        slot.commit_id = h.commit_id;
        let tx = self.done_tx.clone();
        let efd = self.wake.clone();
        let me = std::thread::current().id();
        let defer = move || -> super::dispatch::Deferred {
            Box::new(move |error, reply: &[u8]| {
                let _ = tx.send((i, error, reply.to_vec()));
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
            .serve_ring(&h, &op_in, &mut slot.payload, defer, &self.blocking)
        {
            Outcome::Reply { error, len } => self.commit(i, error, len),
            Outcome::Later => self.deliver(),
        }
    }

    /// Commit slot `i`'s reply and fetch its next request.
    fn commit(&mut self, i: usize, error: i32, len: usize) -> io::Result<()> {
        let slot = &mut self.slots[i];
        slot.registering = false;
        abi::set_out_header(&mut slot.header[..], slot.unique, error, len);
        let e = self.command(abi::CMD_COMMIT_AND_FETCH, i);
        self.push(e)
    }

    /// Commit the replies answered from other threads.
    fn deliver(&mut self) -> io::Result<()> {
        while let Ok((i, error, reply)) = self.done_rx.try_recv() {
            let len = reply.len().min(self.slots[i].payload.len());
            self.slots[i].payload[..len].copy_from_slice(&reply[..len]);
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
