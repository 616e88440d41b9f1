//! FUSE over io_uring: the kernel (6.14 and later, with the `fuse` module's
//! `enable_uring` parameter on) places requests in ring entries of a queue
//! per CPU instead of behind `/dev/fuse` reads, and takes each reply
//! together with the fetch of the next request in one ring command. That
//! halves the cost of a request round trip; a small fsync is two of them
//! (WRITE and FSYNC).
//!
//! fuser still mounts and answers INIT (where we ask for
//! `FUSE_OVER_IO_URING`); the `/dev/fuse` threads (`devfuse.rs`) serve what
//! the kernel keeps sending there (FORGET, INTERRUPT, and every request
//! until all queues are registered). If registration fails, the kernel
//! falls back to `/dev/fuse` for good.
//!
//! - `abi.rs`: the wire format (opcodes, buffer layouts, how a request
//!   splits into its argument struct and payload), of both transports;
//! - `out.rs`: the reply structs both transports send;
//! - `args.rs`: the per-opcode argument structs requests are read through
//!   (`decode_tests.rs` tests them, and EINVAL for short requests);
//! - `dispatch.rs`: request → engine call → reply, for both transports
//!   (the `/dev/fuse` threads call it too), over `adapter.rs`;
//! - `ring.rs`: one queue thread and its ring entries;
//! - `priority.rs`: a lone reply committed at idle CPU priority, so that
//!   it wakes its caller on the same CPU (`-o idle_queues`), and a run of
//!   short requests served so;
//! - `idle_cpus.rs`: the sampler of the CPUs' idle time that says when
//!   that pays, and puts a starved queue thread back at normal priority;
//! - this file: starting the queue threads, and the threads that take
//!   requests which may block off them: one set for writes waiting for a
//!   commit, syncs and snapshot ioctls, another for large reads (so a read
//!   never waits behind a write held for a commit).
//!
//! A queue thread that panics leaks its buffers (`ring.rs` argues why);
//! its ring closes as it unwinds, so the kernel cancels its idle entries,
//! but the requests it held stay unanswered, and its CPU's queue may have
//! no entry left to take new ones: callers there would wait forever. So the
//! thread catches its panic at the top and ends the mount through `Stop`
//! (given by `serve.rs`: it aborts the FUSE connection, which fails every
//! request in flight, then unmounts). The other queue threads see their
//! entries end and return, the `/dev/fuse` threads end, and the volume is closed
//! as after an unmount, committing what was written; `Mounted::serve`
//! then reports the panic.
//!
//! Calls [`tux3::Fs`] through [`Tux3Fuse`].

pub(crate) mod abi;
pub(crate) mod args;
#[cfg(test)]
mod decode_tests;
pub(crate) mod dispatch;
mod idle_cpus;
pub(crate) mod out;
mod priority;
mod ring;

use super::{log, Tux3Fuse, MAX_READAHEAD, MAX_WRITE};
use crossbeam_channel::{unbounded, Sender};
use dispatch::{Job, Offload};
use idle_cpus::{CpuState, IdleCpus};
use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};

/// Where the kernel says whether FUSE may use io_uring.
const ENABLE: &str = "/sys/module/fuse/parameters/enable_uring";

/// Ring entries per queue thread: requests one thread may hold at once
/// (fsyncs waiting for a group commit hold theirs).
const ENTRIES: usize = 16;

/// Whether the running kernel lets FUSE servers use io_uring.
pub fn kernel_enabled() -> bool {
    std::fs::read_to_string(ENABLE).is_ok_and(|v| v.trim() == "Y")
}

/// The kernel's queue count: one per possible CPU
/// (`/sys/devices/system/cpu/possible`, e.g. `0-3`).
pub fn queue_count() -> usize {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/possible").unwrap_or_default();
    let last = text
        .trim()
        .split([',', '-'])
        .filter_map(|n| n.parse::<usize>().ok())
        .max();
    last.map_or_else(
        || thread::available_parallelism().map_or(1, |n| n.get()),
        |n| n + 1,
    )
}

pub use ring::leaked_slots;

/// Ends the mount after a queue thread panicked (see the header).
pub type Stop = Arc<dyn Fn() + Send + Sync>;

/// Threads taking requests that may block off the queue threads.
const BLOCKING_THREADS: usize = 4;

/// Threads taking large reads off the queue threads (see
/// `dispatch::READ_HANDOFF`): the mount's read-ahead keeps up to four
/// 1 MiB reads of one reader in flight.
const READ_THREADS: usize = 4;

/// The queue threads of a mount, and the threads they hand requests that
/// may block to.
pub struct Rings {
    threads: Vec<JoinHandle<()>>,
    blocking: Vec<JoinHandle<()>>,
    /// A queue thread panicked.
    panicked: Arc<AtomicBool>,
    /// The CPUs' idle sampler (`-o idle_queues`); ends at `join`.
    idle_cpus: Option<IdleCpus>,
}

impl Rings {
    /// Start `per_queue` threads for each CPU's queue, serving `fuse` on
    /// the FUSE connection `dev` (after INIT agreed to io_uring); `stop`
    /// ends the mount if one of them panics.
    pub fn start(fuse: &Tux3Fuse, dev: BorrowedFd, per_queue: usize, stop: Stop) -> io::Result<Rings> {
        let dev = Arc::new(dev.try_clone_to_owned()?);
        let payload = MAX_WRITE.max(MAX_READAHEAD) as usize;
        // The idle pollers would share the CPU with an idle-priority commit.
        let opts = &fuse.opts;
        let idle_cpus = if opts.idle_queues && opts.idle_poll.is_none() {
            Some(IdleCpus::start()?)
        } else {
            None
        };
        let mut rings = Rings {
            threads: Vec::new(),
            blocking: Vec::new(),
            panicked: Arc::new(AtomicBool::new(false)),
            idle_cpus,
        };
        let offload = Offload {
            blocking: rings.pool("tux3-blocking", BLOCKING_THREADS)?,
            reads: rings.pool("tux3-read", READ_THREADS)?,
        };
        for qid in 0..queue_count() {
            for t in 0..per_queue.max(1) {
                let (fuse, dev, offload) = (fuse.clone(), dev.clone(), offload.clone());
                let cpus = rings.idle_cpus.as_ref().map(IdleCpus::state);
                let (stop, panicked) = (stop.clone(), rings.panicked.clone());
                let name = format!("tux3-ring{qid}.{t}");
                rings
                    .threads
                    .push(thread::Builder::new().name(name).spawn(move || {
                        let served = panic::catch_unwind(AssertUnwindSafe(|| {
                            serve_queue(fuse, dev, qid, payload, offload, cpus)
                        }));
                        if served.is_err() {
                            log(&format!(
                                "io_uring queue {qid}: a queue thread panicked; {} ring entries \
                                 leaked so far; ending the mount",
                                leaked_slots()
                            ));
                            panicked.store(true, Ordering::SeqCst);
                            stop();
                        }
                    })?);
            }
        }
        Ok(rings)
    }

    /// Start `n` threads named `name`N that run the jobs sent on the
    /// returned channel, until every sender is gone.
    fn pool(&mut self, name: &str, n: usize) -> io::Result<Sender<Job>> {
        let (jobs, job_rx) = unbounded::<Job>();
        for t in 0..n {
            let job_rx = job_rx.clone();
            self.blocking
                .push(thread::Builder::new().name(format!("{name}{t}")).spawn(move || {
                    // Ends once every queue thread (each holds a sender) is gone.
                    for job in job_rx {
                        job();
                    }
                })?);
        }
        Ok(jobs)
    }

    /// Wait for every queue thread (they end when the kernel ends the
    /// connection), then for the requests they handed off. True if a queue
    /// thread panicked.
    pub fn join(self) -> bool {
        for t in self.threads.into_iter().chain(self.blocking) {
            let _ = t.join();
        }
        drop(self.idle_cpus);
        self.panicked.load(Ordering::SeqCst)
    }
}

fn serve_queue(
    fuse: Tux3Fuse,
    dev: Arc<OwnedFd>,
    qid: usize,
    payload: usize,
    offload: Offload,
    cpus: Option<CpuState>,
) {
    pin_to_cpu(qid);
    let r = u16::try_from(qid)
        .map_err(|_| io::Error::other("too many CPUs"))
        .and_then(|q| ring::Queue::new(fuse, dev, q, ENTRIES, payload, offload, cpus))
        .and_then(ring::Queue::run);
    if let Err(e) = r {
        log(&format!(
            "io_uring queue {qid}: {e}; requests go through /dev/fuse"
        ));
    }
}

/// Run the calling thread on `cpu` only: the kernel queues a request on
/// the queue of the CPU its caller runs on, so its server is close by.
fn pin_to_cpu(cpu: usize) {
    // SAFETY: cpu_set_t is plain data, set through the libc macros.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set);
    }
}
