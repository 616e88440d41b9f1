//! The repair matrix: every field of every metadata block of a populated
//! image (files, directories, links, xattr files, preallocation, two
//! snapshots and a deleted one, a log after the last unify) mutated by
//! each verb — zeroes, ones, its first, middle or last bit flipped, one
//! added, one taken away, a random value — with the block resealed (and
//! the log chain re-linked) so that only the decoders and the checks can
//! see it. For each mutation: does `fsck` find it (exit 4), does `fsck
//! --repair` repair it in one pass (exit 1, then a second fsck exits 0),
//! does the volume then mount and take a write and an fsync, and how many
//! of the base image's files are lost. And: a repair killed at each of its
//! writes, run again, converges on a clean volume.
//!
//! Calls the engine's public API, `tux3_tools::fsck`, and `fields`.

use crate::fields::{fields, Field};
use crate::{device, live_blocks, reseal_changed};
use std::collections::{BTreeMap, BTreeSet};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tux3::device::{CounterSnapshot, Device, Gather};
use tux3::{FileType, Fs, OpenOptions, ROOT_INO};
use tux3_tools::fsck::{check, FsckOptions, FsckReport};

/// How a field is changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verb {
    Zeroes,
    Ones,
    FirstBit,
    MiddleBit,
    LastBit,
    Add,
    Subtract,
    Random,
}

pub const VERBS: [Verb; 8] = [
    Verb::Zeroes,
    Verb::Ones,
    Verb::FirstBit,
    Verb::MiddleBit,
    Verb::LastBit,
    Verb::Add,
    Verb::Subtract,
    Verb::Random,
];

impl Verb {
    pub fn name(self) -> &'static str {
        match self {
            Verb::Zeroes => "zeroes",
            Verb::Ones => "ones",
            Verb::FirstBit => "first bit",
            Verb::MiddleBit => "middle bit",
            Verb::LastBit => "last bit",
            Verb::Add => "add",
            Verb::Subtract => "subtract",
            Verb::Random => "random",
        }
    }

    /// The new value of a field of `width` bytes holding `old`; `seed`
    /// picks the random one.
    fn apply(self, old: u64, width: usize, seed: u64) -> u64 {
        let bits = 8 * width as u32;
        let mask = if bits >= 64 { u64::MAX } else { (1u64 << bits) - 1 };
        let v = match self {
            Verb::Zeroes => 0,
            Verb::Ones => u64::MAX,
            Verb::FirstBit => old ^ 1,
            Verb::MiddleBit => old ^ (1u64 << (bits / 2)),
            Verb::LastBit => old ^ (1u64 << (bits - 1)),
            Verb::Add => old.wrapping_add(1),
            Verb::Subtract => old.wrapping_sub(1),
            Verb::Random => splitmix(seed),
        };
        v & mask
    }
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Fields whose every value is a valid volume (times, owners, a
/// snapshot's name and origin; a directory entry's name is checked
/// against its hash, so not that), or nearly: a file's size may be
/// anything but below a written extent (then fsck flags it): a change
/// there is not corruption, and fsck is right to pass it.
pub const FREE_FIELDS: &[&str] = &[
    "inode: times",
    "inode: uid",
    "inode: gid",
    "superblock: created",
    "snapshot record: created",
    "superblock: volume id",
    "snapshot record: name or origin",
    "inode: size",
    "scrub state: counts, times",
];

/// The image to mutate and what it holds.
pub struct Base {
    pub image: Vec<u8>,
    pub bs: usize,
    /// Live metadata blocks (superblocks, tree nodes, bitmap, log).
    pub meta: Vec<usize>,
    /// Committed log blocks in chain order, then the reserved next one.
    pub log: Vec<usize>,
    /// Every path below the root, and whether it is a directory, as the
    /// base reads.
    pub files: BTreeSet<(Vec<u8>, bool)>,
    /// What a reader of the base sees ([`state_of`]).
    pub state: Option<State>,
    /// What a reader sees after a crash that cut the log at each of its
    /// blocks: a change that reads as one of these is a torn commit to
    /// every reader (a leaf of a single-flush commit that fails its log
    /// checksum, a log block past which the chain ends).
    pub crash_states: Vec<State>,
}

impl Base {
    pub fn new(image: Vec<u8>, bs: usize) -> Base {
        let (meta, log) = live_blocks(&image);
        let dev = device(&image);
        let files = files_of(dev.clone()).expect("base mounts");
        let state = state_of(dev);
        let crash_states = log
            .iter()
            .filter_map(|&b| {
                let mut img = image.clone();
                img[b * bs + 4] ^= 0xff; // its checksum: the chain ends before it
                state_of(device(&img))
            })
            .collect();
        Base {
            image,
            bs,
            meta,
            log,
            files,
            state,
            crash_states,
        }
    }

    /// Every (block, field) the matrix mutates.
    pub fn fields(&self) -> Vec<(usize, Field)> {
        let mut out = Vec::new();
        for &b in &self.meta {
            let block = &self.image[b * self.bs..(b + 1) * self.bs];
            out.extend(fields(block, b).into_iter().map(|f| (b, f)));
        }
        out
    }
}

/// Every path below the root (bounded), with its type: what a repair may
/// lose.
pub fn files_of(dev: Arc<dyn Device>) -> Option<BTreeSet<(Vec<u8>, bool)>> {
    let fs = Fs::open(dev, read_only()).ok()?;
    let mut out = BTreeSet::new();
    let mut stack = vec![(ROOT_INO, Vec::new(), 0u32)];
    while let Some((dir, path, depth)) = stack.pop() {
        let mut pos = 0;
        while let Ok(batch) = fs.readdir(dir, pos, 64) {
            let Some(last) = batch.last() else { break };
            if last.next <= pos || out.len() > 10_000 {
                break;
            }
            pos = last.next;
            for e in batch {
                if e.name == b"." || e.name == b".." {
                    continue;
                }
                let mut p = path.clone();
                p.push(b'/');
                p.extend_from_slice(&e.name);
                if e.kind == FileType::Directory && depth < 64 {
                    stack.push((e.ino, p.clone(), depth + 1));
                }
                out.insert((p, e.kind == FileType::Directory));
            }
        }
    }
    Some(out)
}

/// What a reader sees of a volume, but for the fields any value of which
/// is valid (times, owners): per path, its type, mode, link count, size,
/// device number, a checksum of its data (or link target) and of its
/// xattrs; and the snapshots' names. Two volumes that fsck passes and
/// that read the same are the same to every program.
pub type State = (BTreeMap<Vec<u8>, String>, Vec<Vec<u8>>);

pub fn state_of(dev: Arc<dyn Device>) -> Option<State> {
    catch_unwind(AssertUnwindSafe(|| state_inner(dev))).ok().flatten()
}

fn state_inner(dev: Arc<dyn Device>) -> Option<State> {
    let files = files_of(dev.clone())?;
    let fs = Fs::open(dev, read_only()).ok()?;
    let mut out = BTreeMap::new();
    for (path, _) in files {
        let mut ino = ROOT_INO;
        for name in path.split(|&c| c == b'/').filter(|n| !n.is_empty()) {
            ino = match fs.lookup(ino, name) {
                Ok(a) => a.ino,
                Err(_) => break,
            };
        }
        let Ok(a) = fs.getattr(ino) else {
            out.insert(path, "unreadable".into());
            continue;
        };
        let data = match a.kind {
            FileType::Regular => fs
                .read(ino, 0, a.size.min(1 << 22) as usize)
                .map(|d| crc32c::crc32c(&d)),
            FileType::Symlink => fs.readlink(ino).map(|d| crc32c::crc32c(&d)),
            _ => Ok(0),
        };
        let mut xattrs = 0u32;
        for n in fs.listxattr(ino).unwrap_or_default() {
            let v = fs.getxattr(ino, &n).unwrap_or_default();
            xattrs = crc32c::crc32c_append(xattrs, &n);
            xattrs = crc32c::crc32c_append(xattrs, &v);
        }
        let line = format!(
            "{:?} {:o} {} {} {} {:?} {xattrs:08x}",
            a.kind, a.mode, a.nlink, a.size, a.rdev, data
        );
        out.insert(path, line);
    }
    let snaps = fs.snapshot_list().ok()?.into_iter().map(|s| s.name).collect();
    Some((out, snaps))
}

fn read_only() -> OpenOptions {
    OpenOptions {
        read_only: true,
        ..OpenOptions::default()
    }
}

/// fsck's exit code for a report: 4 problems left, 1 all repaired, 0 clean.
pub fn exit_code(r: &FsckReport) -> u8 {
    if !r.problems.is_empty() {
        4
    } else if !r.repaired.is_empty() {
        1
    } else {
        0
    }
}

/// What one mutation led to.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub what: &'static str,
    pub verb: Verb,
    pub block: usize,
    pub at: usize,
    /// fsck's exit code (8: it could not run; 101: it panicked).
    pub check: u8,
    /// `fsck --repair`'s exit code, and the second fsck's after it.
    pub repair: u8,
    pub recheck: u8,
    /// After the repair: mounts, takes a write and an fsync, closes.
    pub usable: bool,
    /// Files of the base the repaired volume no longer has.
    pub lost: usize,
    /// fsck passed it but a reader sees a difference ([`state_of`]): a
    /// miss. (A change fsck passes and no reader sees harms nothing: a
    /// block the log has replaced, a field a reader does not use.)
    pub visible: bool,
    /// fsck passed it and a reader sees the volume as a crash before one
    /// of its log blocks would leave it: damage to the last commit that is
    /// the same as a torn write of it (see `Base::crash_states`).
    pub torn: bool,
    /// The first problem fsck named, for the record.
    pub first_problem: String,
    /// The first problem the check after the repair named.
    pub left: String,
    /// A change any value of which is valid: a field in [`FREE_FIELDS`],
    /// or a mode's permission bits alone.
    pub free: bool,
}

impl Outcome {
    pub fn detected(&self) -> bool {
        self.check != 0
    }
    /// Detected, or seen by a reader: the mutation matters.
    pub fn matters(&self) -> bool {
        self.detected() || self.visible
    }
    /// Repaired in one pass: the repair says so (or finds nothing left to
    /// do after a first check that failed only to open), a second check
    /// is clean and the volume is usable.
    pub fn repaired(&self) -> bool {
        self.repair <= 1 && self.recheck == 0 && self.usable
    }
    pub fn free_field(&self) -> bool {
        self.free
    }
}

/// fsck of `dev`, its exit code (8 for an error, 101 for a panic) and the
/// first problem.
fn fsck(dev: Arc<dyn Device>, repair: bool) -> (u8, String) {
    // Data checksums too: a changed checksum is damage to find.
    let opts = FsckOptions {
        repair,
        progress: false,
        data: true,
    };
    match catch_unwind(AssertUnwindSafe(|| check(dev, &opts))) {
        Ok(Ok(r)) => (exit_code(&r), r.problems.first().cloned().unwrap_or_default()),
        Ok(Err(e)) => (8, e.to_string()),
        Err(_) => (101, "panic".into()),
    }
}

/// Mount, write a new file, fsync it, close.
fn usable(dev: Arc<dyn Device>) -> bool {
    catch_unwind(AssertUnwindSafe(|| {
        let Ok(fs) = Fs::open(dev, OpenOptions::default()) else {
            return false;
        };
        let ok = fs
            .create(ROOT_INO, b"after-repair", 0o644, 0, 0)
            .and_then(|a| fs.write(a.ino, 0, &[7u8; 3000]).map(|_| a.ino))
            .and_then(|ino| fs.fsync(ino, false))
            .is_ok();
        fs.close().is_ok() && ok
    }))
    .unwrap_or(false)
}

/// The image with field `f` of block `b` changed by `verb`; `None` when
/// the change is no change.
pub fn mutate(base: &Base, b: usize, f: Field, verb: Verb) -> Option<Vec<u8>> {
    mutate_free(base, b, f, verb).map(|(img, _)| img)
}

/// [`mutate`], and whether the change is a free one (see [`Outcome::free`]).
fn mutate_free(base: &Base, b: usize, f: Field, verb: Verb) -> Option<(Vec<u8>, bool)> {
    let mut img = base.image.clone();
    let block = &mut img[b * base.bs..(b + 1) * base.bs];
    let field = block.get_mut(f.at..f.at + f.width)?;
    let mut a = [0u8; 8];
    a[..f.width].copy_from_slice(field);
    let old = u64::from_le_bytes(a);
    let seed = (b as u64) << 32 | (f.at as u64) << 8 | verb as u64;
    let new = verb.apply(old, f.width, seed);
    if new == old {
        return None;
    }
    field.copy_from_slice(&new.to_le_bytes()[..f.width]);
    reseal_changed(&mut img, &base.log, [b]);
    let free = FREE_FIELDS.contains(&f.what) || f.what == "inode: mode" && (old ^ new) & !0o7777 == 0;
    Some((img, free))
}

/// Run one mutation through check, repair, check, mount.
pub fn run_one(base: &Base, b: usize, f: Field, verb: Verb) -> Option<Outcome> {
    let (img, free) = mutate_free(base, b, f, verb)?;
    let (check, first_problem) = fsck(device(&img), false);
    let seen = (check == 0).then(|| state_of(device(&img)));
    let torn = seen
        .as_ref()
        .is_some_and(|s| *s != base.state && s.as_ref().is_some_and(|s| base.crash_states.contains(s)));
    let visible = !torn && seen.is_some_and(|s| s != base.state);
    let dev = device(&img);
    let (repair, _) = fsck(dev.clone(), true);
    let (recheck, left) = fsck(dev.clone(), false);
    let usable = recheck != 101 && usable(dev.clone());
    let after = files_of(dev).unwrap_or_default();
    let lost = base.files.iter().filter(|x| !after.contains(x)).count();
    Some(Outcome {
        what: f.what,
        verb,
        block: b,
        at: f.at,
        check,
        repair,
        recheck,
        usable,
        lost,
        visible,
        torn,
        first_problem,
        left,
        free,
    })
}

/// Every mutation of `base` (every `stride`-th field, for a quick run).
pub fn run_all(
    base: &Base,
    stride: usize,
    only: &[String],
    mut progress: impl FnMut(usize, usize),
) -> Vec<Outcome> {
    let fields: Vec<(usize, Field)> = base
        .fields()
        .into_iter()
        .filter(|(_, f)| only.is_empty() || only.iter().any(|o| f.what.starts_with(o.as_str())))
        .step_by(stride.max(1))
        .collect();
    let mut out = Vec::new();
    for (k, &(b, f)) in fields.iter().enumerate() {
        progress(k, fields.len());
        for verb in VERBS {
            out.extend(run_one(base, b, f, verb));
        }
    }
    out
}

/// Counts for one row (structure) and column (verb) of the matrix.
#[derive(Debug, Clone, Copy, Default)]
pub struct Cell {
    pub mutations: u64,
    pub detected: u64,
    pub repaired: u64,
}

/// The matrix: structure (the part of `what` before the colon) × verb.
pub fn tabulate(outcomes: &[Outcome]) -> BTreeMap<&'static str, BTreeMap<Verb, Cell>> {
    let mut m: BTreeMap<&'static str, BTreeMap<Verb, Cell>> = BTreeMap::new();
    for o in outcomes.iter().filter(|o| !o.free_field() && o.matters()) {
        let row = o.what.split(':').next().unwrap_or(o.what);
        let c = m.entry(row).or_default().entry(o.verb).or_default();
        c.mutations += 1;
        c.detected += u64::from(o.detected());
        c.repaired += u64::from(o.detected() && o.repaired());
    }
    m
}

/// A device that takes the first `limit` writes of a repair and loses
/// every one after (the repair killed at its `limit`-th write): later
/// writes and flushes fail.
pub struct CutDevice {
    inner: Arc<dyn Device>,
    limit: u64,
    writes: AtomicU64,
}

impl CutDevice {
    pub fn new(inner: Arc<dyn Device>, limit: u64) -> Arc<CutDevice> {
        Arc::new(CutDevice {
            inner,
            limit,
            writes: AtomicU64::new(0),
        })
    }

    /// Writes the repair asked for (taken or not).
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::SeqCst)
    }

    fn take(&self) -> std::io::Result<()> {
        if self.writes.fetch_add(1, Ordering::SeqCst) < self.limit {
            Ok(())
        } else {
            Err(std::io::Error::other("cut: the repair was killed here"))
        }
    }
}

impl Device for CutDevice {
    fn block_size(&self) -> u32 {
        self.inner.block_size()
    }
    fn block_count(&self) -> u64 {
        self.inner.block_count()
    }
    fn read(&self, block: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.inner.read(block, buf)
    }
    fn write(&self, block: u64, buf: &[u8]) -> std::io::Result<()> {
        self.take()?;
        self.inner.write(block, buf)
    }
    fn write_gather(&self, reqs: &[Gather]) -> std::io::Result<()> {
        // One write per block run, each through the cut.
        tux3::device::write_one_by_one(self, reqs)
    }
    fn flush(&self) -> std::io::Result<()> {
        if self.writes() > self.limit {
            return Err(std::io::Error::other("cut: the repair was killed"));
        }
        self.inner.flush()
    }
    fn counters(&self) -> CounterSnapshot {
        self.inner.counters()
    }
}

/// A repair of `img` killed at each of its writes in turn, then run again
/// on what it left: for each cut, whether the second repair left a clean
/// volume (a third fsck exits 0). Returns the writes a whole repair makes
/// and the cuts that did not converge.
pub fn cut_repairs(img: &[u8]) -> (u64, Vec<u64>) {
    let whole = {
        let dev = CutDevice::new(device(img), u64::MAX);
        let _ = fsck(dev.clone(), true);
        dev.writes()
    };
    let mut failed = Vec::new();
    for limit in 0..whole {
        let mem = device(img);
        let cut = CutDevice::new(mem.clone(), limit);
        let _ = fsck(cut, true);
        let (again, _) = fsck(mem.clone(), true);
        let (last, _) = fsck(mem, false);
        if again > 1 || last != 0 {
            failed.push(limit);
        }
    }
    (whole, failed)
}
