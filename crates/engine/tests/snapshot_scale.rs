//! Snapshots at scale: the long case of the snapshot model test
//! (tests/snapshots.rs), as deterministic runs from a seeded generator.
//!
//! One run is 1,000 rounds. A round writes (whole files and ranges inside
//! them), renames (within and across two directories) and unlinks, then
//! takes a snapshot, and now and then deletes one chosen at random among
//! the live ones (about a third of all stay alive until the end), rolls
//! back to one, syncs, or closes and opens the volume again (a remount
//! replays the log). A model (path -> contents) follows every step; each
//! snapshot keeps the model's copy from when it was taken. Every engine
//! result (ENOENT from a rename or a range write of a missing file) must be
//! the one the model predicts.
//!
//! Checked every `CHECK_EVERY` rounds and after every remount: the live
//! volume equals the model; the snapshot list names exactly the live
//! snapshots; the newest, the oldest and `SAMPLE` chosen at random each
//! read exactly the model's copy. After every rollback: the live volume
//! equals the model. At every remount fsck is clean (the volume closed,
//! never unified by the test).
//!
//! At the end every snapshot left is deleted in random order (a few writes
//! between) and its space reclaimed; the volume is closed and, before any
//! explicit unify, fsck must be clean. The space checks then unify the
//! volume (so log blocks do not count) and take fsck's count of blocks in
//! use:
//!
//! * Against a fresh volume (every run): the blocks in use, less the
//!   blocks the live image references (a walk of its inode table, file
//!   trees and extents), equal the same difference on a freshly formatted
//!   volume of the same size. That difference is the fixed cost
//!   (superblocks, the bitmap file and its tree, the log's reserved block,
//!   no snapshot table once it is empty): a block a deleted snapshot or a
//!   rollback left behind shows as more.
//! * Against a reference volume (`without_rollbacks`,
//!   `ten_thousand_snapshots`): a second volume runs the same sequence
//!   minus the snapshots — where the first takes a snapshot (a unify that
//!   records it) the reference unifies, where it deletes one (a commit)
//!   the reference syncs — so both make the same changes with the same
//!   commits and unifies, and must end using exactly the same number of
//!   blocks. One thing may differ without any leak: where free space
//!   lies (snapshots hold old blocks, so files are placed elsewhere), and
//!   with it how many extents a file gets; a file of more extents than its
//!   inode record holds (`INLINE_EXTENTS`) moves to an extent tree and
//!   keeps that tree's block even when it shrinks again. So the runs
//!   compared this way keep every file within `INLINE_EXTENTS` blocks,
//!   and leave the bitmap's blocks out (a sparse bitmap maps one per group
//!   in use, and where the log and the metadata lie decides the groups).
//!   A rollback has no counterpart on a volume without snapshots, so
//!   `with_rollbacks` (files up to 64 KiB) has the first check only.
//!
//! `ten_thousand_snapshots`: 10,000 snapshots, each after a write, all
//! alive at once, then deleted in random order with writes between the
//! deletes; fsck clean before any unify, and both space checks.
//!
//! `TUX3_SNAP_SEED` replaces the fixed seeds.

use std::collections::BTreeMap;
use std::sync::Arc;
use tux3::device::{Device, MemDevice};
use tux3::{Errno, FormatOptions, Fs, Ino, OpenOptions, RenameFlags, ROOT_INO};

const BS: u32 = 4096;
/// 256 MiB (zero pages cost nothing until written): room for a thousand
/// snapshots' old blocks.
const BLOCKS: u64 = 65536;
/// Snapshots taken in one run.
const SNAPSHOTS: usize = 1000;
/// Rounds between full checks.
const CHECK_EVERY: usize = 50;
/// Snapshots read at each check besides the newest and the oldest.
const SAMPLE: usize = 12;
/// File names per directory.
const NAMES: u64 = 12;
const DIRS: [&str; 2] = ["", "d"];
/// Largest file of the runs compared with a reference volume: its extents
/// always fit its inode record (`INLINE_EXTENTS`, a block each at most).
const SMALL_FILE: u64 = tux3::structures::inode::INLINE_EXTENTS as u64 * BS as u64;

/// xorshift64* (as in tests/concurrent_model.rs).
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn seed(default: u64) -> u64 {
    std::env::var("TUX3_SNAP_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn volume(blocks: u64) -> Arc<dyn Device> {
    let dev: Arc<dyn Device> = Arc::new(MemDevice::new(BS, blocks));
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    dev
}

/// A unify only at each snapshot and past 1,024 log blocks: the final
/// deletes (hundreds) go by between unifies, each its own commit.
fn opts() -> OpenOptions {
    OpenOptions {
        dirty_limit: 64 << 20,
        unify_log_blocks: 1024,
        commit_interval: None,
        ..OpenOptions::default()
    }
}

fn open(dev: &Arc<dyn Device>) -> Fs {
    Fs::open(dev.clone(), opts()).unwrap()
}

fn open_snapshot(dev: &Arc<dyn Device>, name: &str) -> Fs {
    Fs::open(
        dev.clone(),
        OpenOptions {
            read_only: true,
            snapshot: Some(name.as_bytes().to_vec()),
            ..OpenOptions::default()
        },
    )
    .unwrap_or_else(|e| panic!("snapshot {name}: {e}"))
}

/// `len` bytes of a pattern that depends on `seed` and the offset.
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut r = Rng::new(seed);
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        out.extend_from_slice(&r.next().to_le_bytes());
    }
    out.truncate(len);
    out
}

/// Path -> contents; contents shared between the copies snapshots keep.
type Model = BTreeMap<String, Arc<Vec<u8>>>;

#[derive(Debug, Clone)]
enum Op {
    /// Create if absent, truncate to 0, write `len` bytes.
    Write(String, u64, usize),
    /// Write `len` bytes at `at` (extends with a hole if past the end).
    WriteAt(String, u64, u64, usize),
    Rename(String, String),
    Unlink(String),
    Snapshot(String),
    Delete(String),
    Rollback(String),
    Sync,
    Remount,
    /// Compare the live volume and a sample of snapshots with the model.
    Check,
}

/// Split "d/f3" into (the directory's path, "f3").
fn split(path: &str) -> (&str, &str) {
    path.rsplit_once('/').unwrap_or(("", path))
}

fn dir_ino(fs: &Fs, dir: &str) -> Ino {
    if dir.is_empty() {
        ROOT_INO
    } else {
        fs.lookup(ROOT_INO, dir.as_bytes()).unwrap().ino
    }
}

/// Every regular file in the directories of `DIRS`: path -> contents.
fn files(fs: &Fs) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    for dir in DIRS {
        let d = dir_ino(fs, dir);
        let mut pos = 0;
        loop {
            let got = fs.readdir(d, pos, 64).unwrap();
            let Some(last) = got.last() else { break };
            pos = last.next;
            for e in got {
                let a = fs.getattr(e.ino).unwrap();
                if a.kind != tux3::FileType::Regular {
                    continue;
                }
                let data = fs.read(e.ino, 0, a.size as usize).unwrap();
                let name = String::from_utf8(e.name).unwrap();
                let path = if dir.is_empty() {
                    name
                } else {
                    format!("{dir}/{name}")
                };
                out.insert(path, data);
            }
        }
    }
    out
}

/// The first difference between what `fs` holds and `model`, if any.
fn differs(fs: &Fs, model: &Model) -> Option<String> {
    let got = files(fs);
    for (p, want) in model {
        match got.get(p) {
            None => return Some(format!("{p}: missing")),
            Some(g) if g.len() != want.len() => {
                return Some(format!("{p}: {} bytes, expected {}", g.len(), want.len()))
            }
            Some(g) if g[..] != want[..] => {
                let at = g.iter().zip(want.iter()).position(|(a, b)| a != b).unwrap();
                return Some(format!("{p}: differs from byte {at}"));
            }
            _ => {}
        }
    }
    got.keys()
        .find(|p| !model.contains_key(*p))
        .map(|p| format!("{p}: present, expected absent"))
}

/// The generated sequence: `snapshots` rounds, each ending in a snapshot;
/// no file grows past `max_file` bytes.
fn generate(seed: u64, snapshots: usize, rollbacks: bool, max_file: u64) -> Vec<Op> {
    let mut rng = Rng::new(seed);
    let mut ops = Vec::new();
    let mut live: Vec<String> = Vec::new();
    let path = |rng: &mut Rng| {
        let dir = DIRS[rng.below(DIRS.len() as u64) as usize];
        let f = rng.below(NAMES);
        if dir.is_empty() {
            format!("f{f}")
        } else {
            format!("{dir}/f{f}")
        }
    };
    for round in 0..snapshots {
        for _ in 0..1 + rng.below(4) {
            let p = path(&mut rng);
            match rng.below(10) {
                0..=3 => {
                    let len = if rng.below(8) == 0 {
                        rng.below(max_file + 1)
                    } else {
                        rng.below(12_000.min(max_file) + 1)
                    };
                    ops.push(Op::Write(p, rng.next(), len as usize))
                }
                4..=6 => {
                    let at = rng.below(max_file);
                    let len = 1 + rng.below(9000.min(max_file - at));
                    ops.push(Op::WriteAt(p, at, rng.next(), len as usize));
                }
                7 => ops.push(Op::Rename(p, path(&mut rng))),
                _ => ops.push(Op::Unlink(p)),
            }
        }
        let name = format!("s{round}");
        ops.push(Op::Snapshot(name.clone()));
        live.push(name);
        // About two deletes for every three snapshots: the live ones grow
        // to a third of the run.
        if rng.below(3) < 2 && !live.is_empty() {
            let i = rng.below(live.len() as u64) as usize;
            ops.push(Op::Delete(live.remove(i)));
        }
        if rollbacks && rng.below(40) == 0 {
            let i = rng.below(live.len() as u64) as usize;
            ops.push(Op::Rollback(live[i].clone()));
        }
        match rng.below(snapshots as u64 / 10) {
            0 => ops.push(Op::Remount),
            1 | 2 => ops.push(Op::Sync),
            _ => {}
        }
        if round % CHECK_EVERY == CHECK_EVERY - 1 {
            ops.push(Op::Check);
        }
    }
    while !live.is_empty() {
        let i = rng.below(live.len() as u64) as usize;
        ops.push(Op::Delete(live.remove(i)));
        if rng.below(8) == 0 {
            let p = path(&mut rng);
            let len = rng.below(12_000.min(max_file) + 1);
            ops.push(Op::Write(p, rng.next(), len as usize));
        }
    }
    ops
}

/// A volume running a sequence, with its model.
struct Run {
    dev: Arc<dyn Device>,
    fs: Option<Fs>,
    model: Model,
    /// Live snapshots, oldest first, with the model's copy of each.
    snaps: Vec<(String, Model)>,
    /// With `false`, snapshots are left out (the reference volume):
    /// Snapshot unifies, Delete syncs.
    snapshots: bool,
    rng: Rng,
    checks: usize,
    read: usize,
}

impl Run {
    fn new(snapshots: bool, seed: u64, blocks: u64) -> Run {
        let dev = volume(blocks);
        let fs = open(&dev);
        for dir in DIRS.iter().filter(|d| !d.is_empty()) {
            fs.mkdir(ROOT_INO, dir.as_bytes(), 0o755, 0, 0).unwrap();
        }
        let fs = Some(fs);
        Run {
            dev,
            fs,
            model: Model::new(),
            snaps: Vec::new(),
            snapshots,
            rng: Rng::new(seed ^ 0x5ca1e),
            checks: 0,
            read: 0,
        }
    }

    fn fs(&self) -> &Fs {
        self.fs.as_ref().unwrap()
    }

    fn step(&mut self, i: usize, op: &Op) {
        let fs = self.fs.as_ref().unwrap();
        match op {
            Op::Write(p, seed, len) => {
                let (dir, name) = split(p);
                let d = dir_ino(fs, dir);
                let ino = match fs.lookup(d, name.as_bytes()) {
                    Ok(a) => a.ino,
                    Err(_) => fs.create(d, name.as_bytes(), 0o644, 0, 0).unwrap().ino,
                };
                let set = tux3::SetAttr {
                    size: Some(0),
                    ..Default::default()
                };
                fs.setattr(ino, &set).unwrap();
                let data = pattern(*seed, *len);
                fs.write(ino, 0, &data).unwrap();
                self.model.insert(p.clone(), Arc::new(data));
            }
            Op::WriteAt(p, at, seed, len) => {
                let (dir, name) = split(p);
                let d = dir_ino(fs, dir);
                let r = fs.lookup(d, name.as_bytes());
                let Some(old) = self.model.get(p) else {
                    assert_eq!(r.unwrap_err().errno(), Errno::ENOENT, "op {i} {op:?}");
                    return;
                };
                let data = pattern(*seed, *len);
                fs.write(r.unwrap().ino, *at, &data).unwrap();
                let mut new = old.as_ref().clone();
                let end = *at as usize + len;
                if new.len() < end {
                    new.resize(end, 0);
                }
                new[*at as usize..end].copy_from_slice(&data);
                self.model.insert(p.clone(), Arc::new(new));
            }
            Op::Rename(from, to) => {
                let ((fd, fname), (td, tname)) = (split(from), split(to));
                let r = fs.rename(
                    dir_ino(fs, fd),
                    fname.as_bytes(),
                    dir_ino(fs, td),
                    tname.as_bytes(),
                    RenameFlags::default(),
                );
                match self.model.remove(from) {
                    Some(data) => {
                        r.unwrap_or_else(|e| panic!("op {i} {op:?}: {e}"));
                        self.model.insert(to.clone(), data);
                    }
                    None => assert_eq!(r.unwrap_err().errno(), Errno::ENOENT, "op {i} {op:?}"),
                }
            }
            Op::Unlink(p) => {
                let (dir, name) = split(p);
                let r = fs.unlink(dir_ino(fs, dir), name.as_bytes());
                assert_eq!(r.is_ok(), self.model.remove(p).is_some(), "op {i} {op:?}: {r:?}");
            }
            Op::Snapshot(name) if self.snapshots => {
                let info = fs.snapshot_create(name.as_bytes()).unwrap();
                assert!(!info.deleting);
                self.snaps.push((name.clone(), self.model.clone()));
            }
            Op::Snapshot(_) => fs.unify().unwrap(),
            Op::Delete(name) if self.snapshots => {
                fs.snapshot_delete(name.as_bytes())
                    .unwrap_or_else(|e| panic!("op {i} {op:?}: {e}"));
                let k = self.snaps.iter().position(|(n, _)| n == name).unwrap();
                self.snaps.remove(k);
            }
            Op::Delete(_) => fs.sync().unwrap(),
            Op::Rollback(name) => {
                assert!(self.snapshots, "a reference volume cannot roll back");
                fs.snapshot_rollback(name.as_bytes())
                    .unwrap_or_else(|e| panic!("op {i} {op:?}: {e}"));
                let (_, copy) = self.snaps.iter().find(|(n, _)| n == name).unwrap();
                self.model = copy.clone();
                if let Some(d) = differs(fs, &self.model) {
                    panic!("op {i}: after the rollback to {name}: {d}");
                }
            }
            Op::Sync => fs.sync().unwrap(),
            Op::Remount => {
                self.fs.take().unwrap().close().unwrap();
                fsck_clean(&self.dev, &format!("at the remount of op {i}"));
                self.fs = Some(open(&self.dev));
                self.check(i);
            }
            Op::Check => self.check(i),
        }
    }

    /// The live volume, the snapshot list and a sample of the snapshots
    /// against the model.
    fn check(&mut self, i: usize) {
        self.checks += 1;
        if let Some(d) = differs(self.fs(), &self.model) {
            panic!("op {i}: live volume: {d}");
        }
        if !self.snapshots {
            return;
        }
        let listed: Vec<String> = self
            .fs()
            .snapshot_list()
            .unwrap()
            .into_iter()
            .filter(|s| !s.deleting)
            .map(|s| String::from_utf8(s.name).unwrap())
            .collect();
        let names: Vec<&String> = self.snaps.iter().map(|(n, _)| n).collect();
        assert_eq!(listed.iter().collect::<Vec<_>>(), names, "op {i}: snapshot list");
        let n = self.snaps.len();
        if n == 0 {
            return;
        }
        let mut pick = vec![0, n - 1];
        pick.extend((0..SAMPLE).map(|_| self.rng.below(n as u64) as usize));
        pick.sort_unstable();
        pick.dedup();
        for k in pick {
            let (name, copy) = &self.snaps[k];
            let snap = open_snapshot(&self.dev, name);
            if let Some(d) = differs(&snap, copy) {
                panic!("op {i}: snapshot {name}: {d}");
            }
            self.read += 1;
        }
    }

    fn run(&mut self, ops: &[Op]) {
        for (i, op) in ops.iter().enumerate() {
            self.step(i, op);
        }
    }

    /// Reclaim everything deleted, check, close: the volume as the last
    /// delete left it, never unified after it.
    fn finish(&mut self) {
        let fs = self.fs();
        fs.snapshot_reclaim(&mut |_| {}).unwrap();
        assert!(fs.snapshot_list().unwrap().is_empty());
        if let Some(d) = differs(fs, &self.model) {
            panic!("at the end: live volume: {d}");
        }
        self.fs.take().unwrap().close().unwrap();
    }
}

/// fsck of the closed volume: no problem.
fn fsck_clean(dev: &Arc<dyn Device>, when: &str) -> tux3_tools::fsck::FsckReport {
    let report = tux3_tools::fsck::check(dev.clone(), &Default::default()).unwrap();
    assert!(report.problems.is_empty(), "fsck {when}: {:#?}", report.problems);
    report
}

/// Open, unify, close, fsck: the blocks in use with no log (fsck's count;
/// statfs keeps a reserve back from its free count).
fn unified_blocks(dev: &Arc<dyn Device>) -> u64 {
    let fs = open(dev);
    fs.unify().unwrap();
    fs.close().unwrap();
    fsck_clean(dev, "after a unify").blocks_used
}

/// Blocks the live image references (inode table, file trees, extents)
/// on a unified, closed volume.
fn image_blocks(dev: &Arc<dyn Device>) -> u64 {
    use tux3::backend::snapshot::{image_blocks, merged};
    let (be, _) = tux3::backend::Backend::open(dev.clone(), true).unwrap();
    let (blocks, _) = image_blocks(dev.as_ref(), be.sb.itable).unwrap();
    merged(&blocks).iter().map(|(s, e)| e - s).sum()
}

/// Bitmap blocks the bitmap file maps: a sparse bitmap maps those of the
/// groups in use, wherever the image lies.
fn bitmap_blocks(dev: &Arc<dyn Device>) -> u64 {
    let (mut be, _) = tux3::backend::Backend::open(dev.clone(), true).unwrap();
    let extents = tux3::structures::extent::all(&mut be.bitmap, dev.as_ref()).unwrap();
    extents.iter().map(|e| e.count).sum()
}

/// Blocks in use beyond the live image and the bitmap on a fresh volume:
/// the fixed cost.
fn fresh_overhead(blocks: u64) -> u64 {
    let dev = volume(blocks);
    unified_blocks(&dev) - image_blocks(&dev) - bitmap_blocks(&dev)
}

/// The space check of a finished run (see the top comment).
fn space_is_back(dev: &Arc<dyn Device>) -> u64 {
    let used = unified_blocks(dev);
    let image = image_blocks(dev);
    assert_eq!(
        used - image - bitmap_blocks(dev),
        fresh_overhead(dev.block_count()),
        "{used} blocks in use, {image} of them the live image: the rest is more than a fresh volume's"
    );
    used
}

#[test]
fn without_rollbacks() {
    let seed = seed(1);
    let ops = generate(seed, SNAPSHOTS, false, SMALL_FILE);
    let mut run = Run::new(true, seed, BLOCKS);
    run.run(&ops);
    run.finish();
    fsck_clean(
        &run.dev,
        &format!("(seed {seed}) after the last delete, before any unify"),
    );
    let used = space_is_back(&run.dev);

    let mut reference = Run::new(false, seed, BLOCKS);
    reference.run(&ops);
    reference.finish();
    assert_eq!(reference.model, run.model);
    let want = unified_blocks(&reference.dev);
    // Less the bitmap blocks: how many groups the images touch depends
    // on where they lie.
    let (mine, theirs) = (bitmap_blocks(&run.dev), bitmap_blocks(&reference.dev));
    assert_eq!(
        used - mine,
        want - theirs,
        "seed {seed}: {used} blocks in use ({mine} of the bitmap) after {SNAPSHOTS} snapshots came and went, {want} ({theirs}) on a volume that never had one"
    );
    println!(
        "seed {seed}: {SNAPSHOTS} snapshots, {} ops, {} checks, {} snapshot reads; {used} blocks in use",
        ops.len(),
        run.checks,
        run.read
    );
}

#[test]
fn with_rollbacks() {
    let seed = seed(2);
    let ops = generate(seed, SNAPSHOTS, true, 64 << 10);
    let rollbacks = ops.iter().filter(|o| matches!(o, Op::Rollback(_))).count();
    assert!(rollbacks >= SNAPSHOTS / 80, "only {rollbacks} rollbacks");
    let mut run = Run::new(true, seed, BLOCKS);
    run.run(&ops);
    run.finish();
    fsck_clean(
        &run.dev,
        &format!("(seed {seed}) after the last delete, before any unify"),
    );
    let used = space_is_back(&run.dev);
    println!(
        "seed {seed}: {SNAPSHOTS} snapshots, {rollbacks} rollbacks, {} ops, {} checks, {} snapshot reads; {used} blocks in use",
        ops.len(),
        run.checks,
        run.read
    );
}

/// 10,000 snapshots, each after a write; all deleted in random order, a
/// write between deletes; fsck clean before any unify, and the blocks in
/// use those of a volume that made the same writes and unifies without
/// snapshots.
#[test]
fn ten_thousand_snapshots() {
    const N: usize = 10_000;
    let seed = seed(3);
    let mut rng = Rng::new(seed);
    let mut ops = Vec::new();
    for i in 0..N {
        let len = 1 + rng.below(9000) as usize;
        ops.push(Op::Write(format!("f{}", rng.below(16)), rng.next(), len));
        ops.push(Op::Snapshot(format!("s{i}")));
    }
    ops.push(Op::Check);
    let mut order: Vec<usize> = (0..N).collect();
    for i in (1..N).rev() {
        order.swap(i, rng.below(i as u64 + 1) as usize);
    }
    for (k, i) in order.into_iter().enumerate() {
        ops.push(Op::Delete(format!("s{i}")));
        if k % 2 == 0 {
            let len = 1 + rng.below(9000) as usize;
            ops.push(Op::Write(format!("f{}", rng.below(16)), rng.next(), len));
        }
    }
    let mut run = Run::new(true, seed, 1 << 18);
    run.run(&ops);
    run.check(ops.len());
    run.finish();
    fsck_clean(
        &run.dev,
        &format!("(seed {seed}) after the last delete, before any unify"),
    );
    let used = space_is_back(&run.dev);
    let mut reference = Run::new(false, seed, 1 << 18);
    reference.run(&ops);
    reference.finish();
    let want = unified_blocks(&reference.dev);
    // Less the bitmap blocks: how many groups the images touch depends
    // on where they lie.
    assert_eq!(
        used - bitmap_blocks(&run.dev),
        want - bitmap_blocks(&reference.dev),
        "seed {seed}: blocks in use after {N} snapshots, and without any (bitmap aside)"
    );
    println!(
        "seed {seed}: {N} snapshots, {} ops, {} snapshot reads; {used} blocks in use",
        ops.len(),
        run.read
    );
}
