//! A device that fails on purpose, for the device-fault loops
//! (`devfail.rs`): it fails the Nth read, write or flush that reaches it,
//! once (a transient error), for every later request of that kind (a disk
//! that can no longer write, or a thin pool out of space), or for every
//! later request of any kind (a dead disk). A failed write can leave
//! nothing, the first half of its blocks (a short write), those and the
//! first sector of the next block over its old contents (a torn write), or
//! nothing with ENOSPC (a thin-provisioned device out of space); a failed
//! flush can keep the writes since the last good flush or lose them (a
//! volatile cache that never reached the media).
//!
//! Calls the engine's device layer only; it sits where `faults.rs` puts
//! its faults, between the volume and the recording device.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use tux3::device::{CounterSnapshot, Device, Gather};

/// Which kind of request fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailOp {
    Read,
    Write,
    Flush,
}

/// For how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailMode {
    /// The Nth request of its kind only (a transient error).
    Once,
    /// The Nth and every later request of its kind (writes: a disk that
    /// cannot write any more; reads still work).
    Sticky,
    /// The Nth request of its kind and every later request of any kind
    /// (a dead disk).
    Dead,
}

/// What a failed request leaves on the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailEffect {
    /// EIO, nothing written (a read or write), or the writes since the last
    /// good flush kept (a flush).
    Eio,
    /// A write: the first half of its blocks written, then EIO.
    Short,
    /// A write: the first half of its blocks and the first sector of the
    /// next block written over its old contents, then EIO.
    Torn,
    /// A write: ENOSPC, nothing written (thin provisioning out of space).
    Enospc,
    /// A flush: every write since the last good flush lost (the blocks get
    /// their old contents back), then EIO.
    LoseCache,
}

/// Which request fails, how long, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FailPlan {
    pub op: FailOp,
    /// Counted from 0 among requests of `op`'s kind since the device was
    /// made (each request of a gathered write counts as one write).
    pub nth: u64,
    pub mode: FailMode,
    pub effect: FailEffect,
}

impl std::fmt::Display for FailPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?} #{} {:?} {:?}", self.op, self.nth, self.mode, self.effect)
    }
}

/// Sector size of torn writes.
const SECTOR: usize = 512;

/// The device: `inner` with one [`FailPlan`].
pub struct FailingDevice {
    inner: Arc<dyn Device>,
    plan: Mutex<FailPlan>,
    /// Requests seen, per kind (read, write, flush).
    seen: [AtomicU64; 3],
    /// Errors returned.
    errors: AtomicU64,
    /// Quiet sections open ([`FailingDevice::quiet`]): requests pass
    /// uncounted and never fail.
    quiet: AtomicU64,
    /// Whether the plan's request came; where the inner device's counters
    /// were then (blocks written + flushes: the recording's log position).
    fired: AtomicBool,
    fired_at: AtomicU64,
    /// Blocks written since the last good flush, with their old contents
    /// (kept only for [`FailEffect::LoseCache`]).
    unflushed: Mutex<Vec<(u64, Vec<u8>)>>,
}

impl FailingDevice {
    pub fn new(inner: Arc<dyn Device>, plan: FailPlan) -> FailingDevice {
        FailingDevice {
            inner,
            plan: Mutex::new(plan),
            seen: Default::default(),
            errors: AtomicU64::new(0),
            quiet: AtomicU64::new(0),
            fired: AtomicBool::new(false),
            fired_at: AtomicU64::new(0),
            unflushed: Default::default(),
        }
    }

    pub fn plan(&self) -> FailPlan {
        *self.plan.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A device that works until [`FailingDevice::arm`]ed.
    pub fn healthy(inner: Arc<dyn Device>) -> FailingDevice {
        let never = FailPlan {
            op: FailOp::Read,
            nth: u64::MAX,
            mode: FailMode::Once,
            effect: FailEffect::Eio,
        };
        FailingDevice::new(inner, never)
    }

    /// Fail the next request of kind `op` (and as `mode` says, later ones).
    pub fn arm(&self, op: FailOp, mode: FailMode, effect: FailEffect) {
        let nth = self.seen[op as usize].load(Ordering::SeqCst);
        *self.plan.lock().unwrap_or_else(|p| p.into_inner()) = FailPlan {
            op,
            nth,
            mode,
            effect,
        };
        self.fired.store(false, Ordering::SeqCst);
    }

    /// Requests of each kind seen so far: (reads, writes, flushes).
    pub fn seen(&self) -> (u64, u64, u64) {
        let n = |i: usize| self.seen[i].load(Ordering::SeqCst);
        (n(0), n(1), n(2))
    }

    /// The recording's log position when the plan's request came, if it did.
    pub fn fired_at(&self) -> Option<u64> {
        self.fired
            .load(Ordering::SeqCst)
            .then(|| self.fired_at.load(Ordering::SeqCst))
    }

    /// Until the guard goes, requests pass uncounted and never fail: the
    /// crash harness's own walks of the namespace (what it observes, not
    /// what the workload does).
    pub fn quiet(self: &Arc<Self>) -> Quiet {
        self.quiet.fetch_add(1, Ordering::SeqCst);
        Quiet(self.clone())
    }

    /// Errors returned so far.
    pub fn errors(&self) -> u64 {
        self.errors.load(Ordering::SeqCst)
    }

    fn unflushed(&self) -> MutexGuard<'_, Vec<(u64, Vec<u8>)>> {
        self.unflushed.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether this request (of kind `op`) fails.
    fn fails(&self, op: FailOp) -> bool {
        if self.quiet.load(Ordering::SeqCst) > 0 {
            return false;
        }
        let plan = self.plan();
        let dead = plan.mode == FailMode::Dead && self.fired.load(Ordering::SeqCst);
        let i = self.seen[op as usize].fetch_add(1, Ordering::SeqCst);
        let hit = op == plan.op && (i == plan.nth || (i > plan.nth && plan.mode != FailMode::Once));
        if hit && !self.fired.load(Ordering::SeqCst) {
            let c = self.inner.counters();
            self.fired_at
                .store(c.blocks_written + c.flushes + c.discards, Ordering::SeqCst);
            self.fired.store(true, Ordering::SeqCst);
        }
        let fails = hit || dead;
        if fails {
            self.errors.fetch_add(1, Ordering::SeqCst);
        }
        fails
    }

    /// A dead disk (the plan fired in [`FailMode::Dead`]): every request
    /// fails, discards too (counted as errors).
    fn is_dead(&self) -> bool {
        let dead = self.quiet.load(Ordering::SeqCst) == 0
            && self.plan().mode == FailMode::Dead
            && self.fired.load(Ordering::SeqCst);
        if dead {
            self.errors.fetch_add(1, Ordering::SeqCst);
        }
        dead
    }

    /// The effect of the plan on a request of kind `op` (a dead disk's other
    /// requests just fail).
    fn effect(&self, op: FailOp) -> FailEffect {
        let plan = self.plan();
        if op == plan.op {
            plan.effect
        } else {
            FailEffect::Eio
        }
    }

    /// Note the old contents of the blocks a write will cover.
    fn remember(&self, block: u64, len: usize) -> io::Result<()> {
        if self.plan().effect != FailEffect::LoseCache {
            return Ok(());
        }
        let mut old = vec![0u8; len];
        self.inner.read(block, &mut old)?;
        self.unflushed().push((block, old));
        Ok(())
    }

    fn write_one(&self, block: u64, buf: &[u8]) -> io::Result<()> {
        if !self.fails(FailOp::Write) {
            self.remember(block, buf.len())?;
            return self.inner.write(block, buf);
        }
        let bs = self.block_size() as usize;
        let blocks = buf.len() / bs;
        let effect = self.effect(FailOp::Write);
        match effect {
            FailEffect::Enospc => return Err(io::Error::from_raw_os_error(libc::ENOSPC)),
            FailEffect::Short | FailEffect::Torn => {
                let half = blocks / 2;
                if half > 0 {
                    self.remember(block, half * bs)?;
                    self.inner.write(block, &buf[..half * bs])?;
                }
                if effect == FailEffect::Torn && half < blocks {
                    let at = block + half as u64;
                    let mut b = vec![0u8; bs];
                    self.inner.read(at, &mut b)?;
                    let n = SECTOR.min(bs);
                    b[..n].copy_from_slice(&buf[half * bs..half * bs + n]);
                    self.remember(at, bs)?;
                    self.inner.write(at, &b)?;
                }
            }
            _ => {}
        }
        Err(injected("write", block))
    }
}

/// A quiet section of a [`FailingDevice`] ([`FailingDevice::quiet`]).
pub struct Quiet(Arc<FailingDevice>);

impl Drop for Quiet {
    fn drop(&mut self) {
        self.0.quiet.fetch_sub(1, Ordering::SeqCst);
    }
}

fn injected(what: &str, block: u64) -> io::Error {
    io::Error::other(format!("injected {what} error at block {block}"))
}

impl Device for FailingDevice {
    fn block_size(&self) -> u32 {
        self.inner.block_size()
    }
    fn block_count(&self) -> u64 {
        self.inner.block_count()
    }
    fn read(&self, block: u64, buf: &mut [u8]) -> io::Result<()> {
        if self.fails(FailOp::Read) {
            return Err(injected("read", block));
        }
        self.inner.read(block, buf)
    }
    fn write(&self, block: u64, buf: &[u8]) -> io::Result<()> {
        self.write_one(block, buf)
    }
    fn write_gather(&self, reqs: &[Gather]) -> io::Result<()> {
        // One request at a time: a failed one leaves those before it
        // written and those after it not (writes between flushes land in
        // any order).
        let mut buf = Vec::new();
        for (block, parts) in reqs {
            buf.clear();
            for p in parts {
                buf.extend_from_slice(p);
            }
            self.write_one(*block, &buf)?;
        }
        Ok(())
    }
    fn flush(&self) -> io::Result<()> {
        if !self.fails(FailOp::Flush) {
            self.inner.flush()?;
            self.unflushed().clear();
            return Ok(());
        }
        if self.effect(FailOp::Flush) == FailEffect::LoseCache {
            let lost = std::mem::take(&mut *self.unflushed());
            for (block, old) in lost.iter().rev() {
                self.inner.write(*block, old)?;
            }
        }
        Err(io::Error::other("injected flush error"))
    }
    /// Passed on, except on a dead disk.
    fn discard(&self, start: u64, count: u64) -> io::Result<()> {
        if self.is_dead() {
            return Err(injected("discard", start));
        }
        self.inner.discard(start, count)
    }
    fn urgent_begin(&self) {
        self.inner.urgent_begin()
    }
    fn urgent_end(&self) {
        self.inner.urgent_end()
    }
    fn counters(&self) -> CounterSnapshot {
        self.inner.counters()
    }
    fn name(&self) -> String {
        format!("failing device over {}", self.inner.name())
    }
}
