//! The recording side of the crash harness: a workload runs through the
//! `Fs` API on a [`RecordingDevice`] over a [`MemDevice`] holding a freshly
//! formatted image. For every API call the [`Recorder`] keeps where it
//! started and ended in the device op log, whether it was a durability point
//! (sync, fsync, unify, close, or a remount), and the canonical snapshot of
//! the namespace after it returned.
//!
//! Positions are counted from the device's counters (each logged write is
//! one block, each flush one entry), so no copy of the log is needed per call.
//!
//! Volume snapshots: after every call the recorder also keeps the names of
//! the snapshots the volume lists (those being deleted left out), and for
//! each snapshot, when it first appears, the namespace of the live volume
//! right after the call that took it — what the snapshot must hold ever
//! after. It reads the snapshot back then and fails the workload if it
//! differs. A workload may take snapshots before the recording starts
//! ([`Recorder::with_setup`]): the crash states then all have them.
//!
//! Calls with a commit in flight are recorded by `record/in_flight.rs`,
//! and the recorder after a device fault by `record/after_fault.rs`.

use super::snapshot::Snapshot;

mod after_fault;
mod in_flight;
use crate::faults::{Fault, FaultyDevice};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use tux3::api::Fs;
use tux3::device::{Device, MemDevice, RecordedOp, RecordingDevice};
use tux3::error::{Error, Result};
use tux3::types::{FormatOptions, Ino, OpenOptions};

/// One API call of a workload.
#[derive(Debug, Clone)]
pub struct OpRecord {
    /// What was called, with its arguments and result.
    pub desc: String,
    /// Device op log length when the call started and when it returned.
    pub start: usize,
    pub end: usize,
    /// Everything before this call returned is promised durable.
    pub durable: bool,
    /// The inodes an fsync call covers (several: a group commit).
    pub fsynced: Vec<Ino>,
    /// Flushes the call issued.
    pub flushes: u64,
    /// A delta commit ended during the call (an fsync that committed the
    /// whole delta, a sync).
    pub full: bool,
}

impl OpRecord {
    /// An fsync that did not commit the whole delta: only its inodes (and
    /// the name changes connected to them) are promised durable, and they
    /// may be durable ahead of earlier changes.
    pub fn is_fast_fsync(&self) -> bool {
        !self.fsynced.is_empty() && !self.full
    }
}

/// What a finished workload left behind.
pub struct Recording {
    pub block_size: u32,
    /// The formatted image every crash image starts from.
    pub base: Vec<u8>,
    /// Every block write and flush, in the order the device saw them.
    pub log: Vec<RecordedOp>,
    pub ops: Vec<OpRecord>,
    /// `snaps[0]` before the first call; `snaps[i + 1]` after call `i`.
    pub snaps: Vec<Snapshot>,
    pub fingerprints: Vec<u128>,
    pub open: OpenOptions,
    /// `snapsets[i]`: the volume's snapshots (names, those being deleted
    /// left out) at `snaps[i]`. Empty for a recording that never had one.
    pub snapsets: Vec<SnapNames>,
    /// What each snapshot holds: the live namespace when it was taken.
    pub snap_contents: BTreeMap<Vec<u8>, Snapshot>,
}

impl Recording {
    /// The snapshots listed at `snaps[j]`.
    pub fn snapset(&self, j: usize) -> &BTreeSet<Vec<u8>> {
        static NONE: BTreeSet<Vec<u8>> = BTreeSet::new();
        self.snapsets.get(j).map_or(&NONE, |s| s.as_ref())
    }
}

/// Names of a volume's snapshots (those being deleted left out).
pub type SnapNames = Arc<BTreeSet<Vec<u8>>>;

/// The snapshots `fs` lists, oldest first, those being deleted left out.
pub fn snapshot_names(fs: &Fs) -> Result<Vec<Vec<u8>>> {
    Ok(fs
        .snapshot_list()?
        .into_iter()
        .filter(|s| !s.deleting)
        .map(|s| s.name)
        .collect())
}

/// The namespace snapshot `name` of the volume on `dev` holds, read
/// through a read-only mount of it (which writes nothing).
pub fn read_snapshot(dev: &Arc<dyn Device>, name: &[u8]) -> Result<Snapshot> {
    let opts = OpenOptions {
        read_only: true,
        snapshot: Some(name.to_vec()),
        commit_interval: None,
        ..OpenOptions::default()
    };
    let fs = Fs::open(dev.clone(), opts)?;
    let snap = Snapshot::take(&fs)?;
    fs.close()?;
    Ok(snap)
}

/// Note the snapshots `fs` lists after a call that left the namespace
/// `after`: a name not seen before was taken by that call, so it must read
/// as `after` (read back on `dev`, which must see no write) and does ever
/// after. Returns the names, `last` again when they did not change.
fn note_snapshots(
    fs: &Fs,
    dev: &Arc<dyn Device>,
    counted: &RecordingDevice,
    contents: &mut BTreeMap<Vec<u8>, Snapshot>,
    after: &Snapshot,
    last: Option<&SnapNames>,
) -> Result<SnapNames> {
    let names: BTreeSet<Vec<u8>> = snapshot_names(fs)?.into_iter().collect();
    for name in &names {
        if contents.contains_key(name) {
            continue;
        }
        let at = log_pos(counted);
        let got = read_snapshot(dev, name)?;
        if log_pos(counted) != at {
            return Err(Error::BadImage(format!(
                "reading snapshot {} wrote to the device",
                String::from_utf8_lossy(name)
            )));
        }
        if got != *after {
            return Err(Error::BadImage(format!(
                "snapshot {} does not read as the volume when it was taken: {}",
                String::from_utf8_lossy(name),
                got.diff(after, 6).join("; ")
            )));
        }
        contents.insert(name.clone(), after.clone());
    }
    Ok(match last {
        Some(l) if **l == names => l.clone(),
        _ => Arc::new(names),
    })
}

/// The volume before recording starts ([`Recorder::with_setup`]): its
/// calls are not recorded, no crash falls among them.
pub struct Setup<'a> {
    fs: &'a Fs,
    dev: Arc<dyn Device>,
    counted: Arc<RecordingDevice>,
    contents: BTreeMap<Vec<u8>, Snapshot>,
}

impl Setup<'_> {
    pub fn fs(&self) -> &Fs {
        self.fs
    }

    /// Take snapshot `name` and note what it holds.
    pub fn snapshot_create(&mut self, name: &str) -> Result<()> {
        self.fs.snapshot_create(name.as_bytes())?;
        let after = Snapshot::take(self.fs)?;
        note_snapshots(
            self.fs,
            &self.dev,
            &self.counted,
            &mut self.contents,
            &after,
            None,
        )?;
        Ok(())
    }
}

/// Runs a workload and records it.
pub struct Recorder {
    mem: Arc<MemDevice>,
    dev: Arc<RecordingDevice>,
    /// What the volume is opened on: `dev` behind the harness's device
    /// (a fault, if any, and the flush gate).
    fs_dev: Arc<dyn Device>,
    /// That device: it holds a flush while a workload puts a second fsync
    /// commit in flight.
    hold: Arc<FaultyDevice>,
    fs: Option<Fs>,
    base: Vec<u8>,
    open: OpenOptions,
    ops: Vec<OpRecord>,
    snaps: Vec<Snapshot>,
    snapsets: Vec<SnapNames>,
    snap_contents: BTreeMap<Vec<u8>, Snapshot>,
}

impl Recorder {
    /// Format a `blocks`-block volume and open it with `open`.
    /// `fault` sits between the volume and the recording (test-only
    /// breakage the harness must catch; [`Fault::None`] for real runs).
    pub fn new(block_size: u32, blocks: u64, open: OpenOptions, fault: Fault) -> Result<Recorder> {
        Recorder::with_setup(block_size, blocks, open, fault, |_| Ok(()))
    }

    /// [`Recorder::new`], with `setup` run on the volume (and the volume
    /// closed) before the recording starts: the crash images start from
    /// what it left.
    pub fn with_setup(
        block_size: u32,
        blocks: u64,
        open: OpenOptions,
        fault: Fault,
        setup: impl FnOnce(&mut Setup<'_>) -> Result<()>,
    ) -> Result<Recorder> {
        let mem = Arc::new(MemDevice::new(block_size, blocks));
        Fs::format(mem.clone(), &FormatOptions::default())?;
        let snap_contents = {
            let counted = Arc::new(RecordingDevice::new(mem.clone()));
            let dev: Arc<dyn Device> = counted.clone();
            let fs = Fs::open(dev.clone(), open.clone())?;
            let mut s = Setup {
                fs: &fs,
                dev,
                counted: counted.clone(),
                contents: BTreeMap::new(),
            };
            setup(&mut s)?;
            let contents = s.contents;
            fs.close()?;
            contents
        };
        let base = mem.image();
        let dev = Arc::new(RecordingDevice::new(mem.clone()));
        let hold = fault.wrap(dev.clone());
        let fs_dev: Arc<dyn Device> = hold.clone();
        let fs = Fs::open(fs_dev.clone(), open.clone())?;
        let snap = Snapshot::take(&fs)?;
        let names: BTreeSet<Vec<u8>> = snapshot_names(&fs)?.into_iter().collect();
        if names.iter().ne(snap_contents.keys()) {
            return Err(Error::BadImage(
                "the snapshots listed after the setup are not those it took".into(),
            ));
        }
        Ok(Recorder {
            mem,
            dev,
            fs_dev,
            hold,
            fs: Some(fs),
            base,
            open,
            ops: Vec::new(),
            snaps: vec![snap],
            snapsets: vec![Arc::new(names)],
            snap_contents,
        })
    }

    /// The snapshots listed after the call that left `after` (see
    /// [`note_snapshots`]).
    fn note(&mut self, after: &Snapshot) -> Result<SnapNames> {
        let fs = self.fs.as_ref().ok_or_else(not_mounted)?;
        note_snapshots(
            fs,
            &self.fs_dev,
            &self.dev,
            &mut self.snap_contents,
            after,
            self.snapsets.last(),
        )
    }

    /// Snapshots the volume lists now (those being deleted left out).
    pub fn snapshots_alive(&self) -> usize {
        self.snapsets.last().map_or(0, |s| s.len())
    }

    /// The failing device's quiet section, if there is one: the
    /// recorder's own walks are never failed (`failing.rs`).
    fn quiet(&self) -> Option<crate::failing::Quiet> {
        self.hold.failing.as_ref().map(|f| f.quiet())
    }

    /// Length of the device op log so far.
    fn pos(&self) -> usize {
        log_pos(&self.dev)
    }

    fn flushes(&self) -> u64 {
        self.dev.counters().flushes
    }

    /// Delta commits since the volume was opened.
    fn deltas(&self) -> u64 {
        self.fs.as_ref().map_or(0, |fs| fs.stats().deltas)
    }

    /// The mounted volume (after a remount that failed there is none).
    pub fn fs(&self) -> Result<&Fs> {
        self.fs.as_ref().ok_or_else(not_mounted)
    }

    /// Run one API call `f`, record it, and return its result. POSIX errors
    /// are results like any other (recorded in the description); the caller
    /// decides whether one is expected.
    pub fn op<T: std::fmt::Debug>(
        &mut self,
        desc: impl Into<String>,
        durable: bool,
        f: impl FnOnce(&Fs) -> Result<T>,
    ) -> Result<T> {
        let (start, f0) = (self.pos(), self.flushes());
        let r = f(self.fs()?);
        let end = self.pos();
        let flushes = self.flushes() - f0;
        let shown = match &r {
            Ok(v) => format!("{} -> {}", desc.into(), short(&format!("{v:?}"))),
            Err(e) => format!("{} -> error {e}", desc.into()),
        };
        if let Err(e) = &r {
            if !matches!(e, Error::Posix(_)) {
                return Err(Error::BadImage(format!("workload call failed: {shown}")));
            }
        }
        let durable = durable && r.is_ok();
        self.push(shown, start, end, durable, Vec::new(), (flushes, durable))?;
        r
    }

    /// `fsync(ino)`: a durability point that names the file it covers.
    pub fn fsync(&mut self, ino: Ino) -> Result<()> {
        let (start, f0, d0) = (self.pos(), self.flushes(), self.deltas());
        let r = self.fs()?.fsync(ino, false);
        let end = self.pos();
        let (flushes, full) = (self.flushes() - f0, self.deltas() != d0);
        let ok = r.is_ok();
        let shown = format!("fsync(ino {ino}) -> {r:?}");
        self.push(
            shown,
            start,
            end,
            ok,
            if ok { vec![ino] } else { Vec::new() },
            (flushes, full),
        )?;
        r
    }

    /// Fsyncs of `inos` queued together: one group commit serves them
    /// all. A durability point for each of them.
    pub fn fsync_group(&mut self, inos: &[Ino]) -> Result<()> {
        let (start, f0, d0) = (self.pos(), self.flushes(), self.deltas());
        let r = self.fs()?.fsync_group(inos);
        let end = self.pos();
        let (flushes, full) = (self.flushes() - f0, self.deltas() != d0);
        let ok = r.is_ok();
        let shown = format!("fsync group {inos:?} -> {r:?}");
        self.push(
            shown,
            start,
            end,
            ok,
            if ok { inos.to_vec() } else { Vec::new() },
            (flushes, full),
        )?;
        r
    }

    fn push(
        &mut self,
        desc: String,
        start: usize,
        end: usize,
        durable: bool,
        fsynced: Vec<Ino>,
        (flushes, full): (u64, bool),
    ) -> Result<()> {
        let _quiet = self.quiet();
        let snap = snapshot_after(self.fs()?, &self.dev, end, &desc)?;
        let names = self.note(&snap)?;
        self.ops.push(OpRecord {
            desc,
            start,
            end,
            durable,
            fsynced,
            flushes,
            full,
        });
        self.snaps.push(snap);
        self.snapsets.push(names);
        Ok(())
    }

    /// Simulate a crash (drop the volume with its uncommitted delta) and
    /// mount again: replay must write nothing. The remount is recorded as a
    /// durability point whose snapshot is what replay recovered.
    pub fn crash_and_remount(&mut self) -> Result<()> {
        drop(self.fs.take());
        let start = self.pos();
        let fs = Fs::open(self.fs_dev.clone(), self.open.clone())?;
        if self.pos() != start {
            return Err(Error::BadImage(
                "replay during remount wrote to the device".into(),
            ));
        }
        self.fs = Some(fs);
        // What replay recovered must be a state after the last durability
        // point (later calls may have been committed by dirty pressure).
        // (After a fast fsync the state may lead; the crash states check it.)
        let lo = self.ops.iter().rposition(|o| o.durable).map_or(0, |i| i + 1);
        let fast = self.ops[..]
            .iter()
            .rev()
            .take_while(|o| !o.durable || o.is_fast_fsync())
            .any(|o| o.is_fast_fsync());
        let _quiet = self.quiet();
        let got = Snapshot::take(self.fs()?)?;
        if !fast && !self.snaps[lo..].contains(&got) {
            let diff = got.diff(&self.snaps[lo], 6).join("; ");
            return Err(Error::BadImage(format!(
                "remount after a crash recovered no state since the last durability point: {diff}"
            )));
        }
        let stats = self.fs()?.stats();
        self.push(
            format!("crash and remount (replayed {} deltas)", stats.replayed_deltas),
            start,
            start,
            true,
            Vec::new(),
            (0, true),
        )
    }

    /// `Fs::close` (commits everything), then mount again so the workload
    /// may go on. Recorded as one durability point.
    pub fn close_and_remount(&mut self) -> Result<()> {
        let (start, f0) = (self.pos(), self.flushes());
        self.fs.take().ok_or_else(not_mounted)?.close()?;
        let end = self.pos();
        let flushes = self.flushes() - f0;
        self.fs = Some(Fs::open(self.fs_dev.clone(), self.open.clone())?);
        if self.pos() != end {
            return Err(Error::BadImage("remount after close wrote to the device".into()));
        }
        self.push(
            "close and remount".into(),
            start,
            end,
            true,
            Vec::new(),
            (flushes, true),
        )
    }

    /// Close the volume (a durability point) and return the recording.
    pub fn finish(mut self) -> Result<Recording> {
        let (start, f0) = (self.pos(), self.flushes());
        let snap = Snapshot::take(self.fs()?)?;
        let names = self.note(&snap)?;
        let fs = self.fs.take().ok_or_else(not_mounted)?;
        fs.close()?;
        let end = self.pos();
        self.ops.push(OpRecord {
            desc: "close".into(),
            start,
            end,
            durable: true,
            fsynced: Vec::new(),
            flushes: self.flushes() - f0,
            full: true,
        });
        self.snaps.push(snap);
        self.snapsets.push(names);
        self.into_recording(Ok(())).map(|(rec, _)| rec)
    }
}

/// Length of `dev`'s op log so far (each logged write is one block, each
/// flush one entry).
fn log_pos(dev: &RecordingDevice) -> usize {
    let c = dev.counters();
    // One entry per block written, per flush and per discard.
    (c.blocks_written + c.flushes + c.discards) as usize
}

/// The snapshot after call `desc`, which ended at log position `end`;
/// taking it must not write.
fn snapshot_after(fs: &Fs, dev: &RecordingDevice, end: usize, desc: &str) -> Result<Snapshot> {
    let snap = Snapshot::take(fs)?;
    if log_pos(dev) != end {
        return Err(Error::BadImage(format!(
            "taking a snapshot wrote to the device after {desc}"
        )));
    }
    Ok(snap)
}

/// A result shown in at most 60 characters.
fn short(s: &str) -> String {
    if s.len() <= 60 {
        s.to_string()
    } else {
        let mut end = 57;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}...", &s[..end])
    }
}

/// The error of a call on a recorder whose volume a failed remount left
/// unmounted.
fn not_mounted() -> Error {
    Error::BadImage("the recorded volume is not mounted (a remount failed)".into())
}
