//! Crashes during `tux3 receive`. A source volume gets a tree of every
//! kind of file (data with holes, xattrs, hard links, symlinks, special
//! files) and two snapshots, the second after renames, a directory
//! replaced by a file, unlinks and rewrites; a target receives the first
//! whole, then the second as an incremental stream, on a recording device
//! with checkpoints every few records, so the receive commits its
//! progress (and its resume token) many times: by a sync at each
//! checkpoint, or (as `tux3 receive` does) by a commit thread the
//! checkpoint only wakes, while the receive goes on.
//!
//! Each crash state of that recording (`states.rs`, as for the
//! workloads) must:
//! 1. mount, and pass fsck;
//! 2. show no partial snapshot: the received snapshot is either absent or
//!    reads exactly as the source's;
//! 3. resume: with the token the state holds, `send --resume` from the
//!    source and a receive of that finish the snapshot, and it reads
//!    exactly as the source's (inode numbers, kinds, modes, owners, sizes,
//!    contents, link counts, symlink targets, xattrs).
//!
//! Calls the engine API, the stream's send and receive
//! (`tux3_tools::stream`), `states.rs` and `snapshot.rs`.

use super::record::read_snapshot;
use super::snapshot::Snapshot;
use super::states::{self, Epoch};
use super::Rng;
use std::sync::Arc;
use tux3::device::{Device, MemDevice, RecordedOp, RecordingDevice};
use tux3::error::Result;
use tux3::types::{FileType, FormatOptions, Ino, OpenOptions, RenameFlags, XattrMode, ROOT_INO};
use tux3::Fs;
use tux3_tools::stream::receive::{receive, ReceiveOptions};
use tux3_tools::stream::resume::{self, Token};
use tux3_tools::stream::send::{send, SendOptions};

const BS: u32 = 4096;
const BLOCKS: u64 = 4096;

/// What a run of the receive crash check found.
#[derive(Debug, Default)]
pub struct ReceiveReport {
    /// Device writes and flushes recorded during the incremental receive.
    pub writes: usize,
    pub flushes: usize,
    /// Crash states checked, and how many of them held a resume token,
    /// and how many the received snapshot already.
    pub states: usize,
    pub with_token: usize,
    pub complete: usize,
    /// One line per broken promise: the state and what was wrong.
    pub violations: Vec<String>,
}

fn opts() -> OpenOptions {
    OpenOptions {
        commit_interval: None,
        ..OpenOptions::default()
    }
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len).map(|i| (seed as usize * 31 + i / 13) as u8).collect()
}

/// Fill the source with `n` entries of each kind under a few directories.
fn populate(fs: &Fs, rng: &mut Rng, n: u64) -> Result<Vec<Ino>> {
    let mut dirs = vec![ROOT_INO];
    for d in 0..3u64 {
        let a = fs.mkdir(ROOT_INO, format!("d{d}").as_bytes(), 0o750, 10 + d as u32, 20)?;
        dirs.push(a.ino);
    }
    let mut files = Vec::new();
    for i in 0..n {
        let dir = dirs[rng.below(dirs.len() as u64) as usize];
        let name = format!("f{i}");
        let a = fs.create(dir, name.as_bytes(), 0o640, 1000 + i as u32 % 3, 100)?;
        let len = 1 + rng.below(40_000) as usize;
        fs.write(a.ino, 0, &pattern(i, len))?;
        if i % 3 == 0 {
            // A hole, then more data past it.
            fs.write(a.ino, 200_000 + rng.below(50_000), &pattern(i + 7, 3000))?;
        }
        if i % 4 == 0 {
            fs.setxattr(a.ino, b"user.tag", &pattern(i, 40), XattrMode::Any)?;
        }
        if i % 5 == 0 {
            fs.link(a.ino, dirs[(i % 4) as usize], format!("h{i}").as_bytes())?;
        }
        files.push(a.ino);
    }
    fs.symlink(dirs[1], b"link", b"../d0/f0", 0, 0)?;
    fs.mknod(dirs[2], b"fifo", libc::S_IFIFO | 0o600, 0, 0, 0)?;
    fs.mknod(dirs[2], b"chr", libc::S_IFCHR | 0o600, 0x0105, 0, 0)?;
    Ok(files)
}

/// Changes between the two snapshots: rewrites, truncates, renames over
/// names, a directory replaced by a file, unlinks, new files.
fn change(fs: &Fs, rng: &mut Rng, files: &[Ino]) -> Result<()> {
    for (k, &ino) in files.iter().enumerate() {
        match rng.below(5) {
            0 => {
                fs.write(ino, rng.below(30_000), &pattern(k as u64 + 99, 5000))?;
            }
            1 => {
                let set = tux3::types::SetAttr {
                    size: Some(rng.below(10_000)),
                    ..Default::default()
                };
                fs.setattr(ino, &set)?;
            }
            _ => {}
        }
    }
    let d0 = fs.lookup(ROOT_INO, b"d0")?.ino;
    let d1 = fs.lookup(ROOT_INO, b"d1")?.ino;
    // A directory moved under another, and one replaced by a file.
    fs.rename(ROOT_INO, b"d2", d0, b"moved", RenameFlags::default())?;
    let sub = fs.mkdir(d1, b"sub", 0o700, 0, 0)?;
    fs.create(sub.ino, b"inner", 0o600, 0, 0)?;
    let f = fs.create(ROOT_INO, b"plain", 0o644, 0, 0)?;
    fs.write(f.ino, 0, b"was a directory")?;
    fs.unlink(sub.ino, b"inner")?;
    fs.rmdir(d1, b"sub")?;
    fs.rename(ROOT_INO, b"plain", d1, b"sub", RenameFlags::default())?;
    for i in 0..20u64 {
        let a = fs.create(d0, format!("new{i}").as_bytes(), 0o600, 0, 0)?;
        fs.write(a.ino, 0, &pattern(i + 500, 9000))?;
    }
    Ok(())
}

fn stream(dev: &Arc<dyn Device>, snap: &[u8], base: Option<&[u8]>, resume: Option<Token>) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    let o = SendOptions {
        snapshot: if resume.is_some() { None } else { Some(snap) },
        base: if resume.is_some() { None } else { base },
        resume,
        ..SendOptions::default()
    };
    send(dev.clone(), &o, &mut out, &mut |_| {}).map_err(to_err)?;
    Ok(out)
}

fn to_err(e: tux3_tools::stream::StreamError) -> tux3::error::Error {
    tux3::error::Error::BadImage(e.to_string())
}

/// Run the check with `seed`, looking at most at `budget` crash states.
/// With `background`, the target has a commit thread (as `tux3 receive`
/// opens it): a checkpoint only starts a commit and the receive goes on
/// meanwhile; without, each checkpoint is a sync.
pub fn run_receive(seed: u64, budget: usize, background: bool) -> Result<ReceiveReport> {
    let mut rng = Rng::new(seed ^ 0x5e4d_0e1e);
    // The source and its two snapshots.
    let src: Arc<dyn Device> = Arc::new(MemDevice::new(BS, BLOCKS));
    Fs::format(src.clone(), &FormatOptions::default())?;
    let fs = Fs::open(src.clone(), opts())?;
    let files = populate(&fs, &mut rng, 60)?;
    fs.snapshot_create(b"one")?;
    change(&fs, &mut rng, &files)?;
    fs.snapshot_create(b"two")?;
    fs.close()?;
    let full = stream(&src, b"one", None, None)?;
    let incr = stream(&src, b"two", Some(b"one"), None)?;
    let want = read_snapshot(&src, b"two")?;

    // The target holds "one"; the incremental receive is recorded.
    let mem = Arc::new(MemDevice::new(BS, BLOCKS));
    let dst: Arc<dyn Device> = mem.clone();
    Fs::format(dst.clone(), &FormatOptions::default())?;
    let fs = Fs::open(dst.clone(), opts())?;
    let checkpoints = ReceiveOptions {
        checkpoint_bytes: 64 << 10,
        checkpoint_records: 12,
        ..ReceiveOptions::default()
    };
    receive(&fs, &full[..], &ReceiveOptions::default(), &mut |_| {}).map_err(to_err)?;
    fs.close()?;
    let base = mem.image();
    let rec = Arc::new(RecordingDevice::new(Arc::new(MemDevice::from_image(
        BS,
        base.clone(),
    ))));
    let recv_opts = OpenOptions {
        // Only the checkpoints wake the commit thread.
        commit_interval: background.then(|| std::time::Duration::from_secs(3600)),
        ..opts()
    };
    let fs = Fs::open(rec.clone(), recv_opts)?;
    receive(&fs, &incr[..], &checkpoints, &mut |_| {}).map_err(to_err)?;
    fs.close()?;
    let log = rec.take_ops();

    let mut report = ReceiveReport {
        writes: log
            .iter()
            .filter(|o| matches!(o, RecordedOp::Write { .. }))
            .count(),
        flushes: log.iter().filter(|o| matches!(o, RecordedOp::Flush)).count(),
        ..ReceiveReport::default()
    };
    let eps = states::epochs(&log);
    let mut gen = states::Generator::new(&base, &log, BS as usize);
    for (i, e) in eps.iter().enumerate() {
        gen.epoch(i, e, i + 1 == eps.len(), &mut rng);
    }
    let chosen = states::select(std::mem::take(&mut gen.states), budget, &mut rng);
    drop(gen);
    report.states = chosen.len();
    let mut durable = base;
    let mut chosen = chosen.into_iter().peekable();
    for (i, e) in eps.iter().enumerate() {
        while let Some(st) = chosen.next_if(|s| s.epoch == i) {
            let image = states::build(&durable, &log, e, &st, BS as usize);
            let what = st.describe(e);
            if let Err(line) = check_state(image, &src, &want, &mut report) {
                report.violations.push(format!("epoch {i} ({what}): {line}"));
            }
        }
        apply_epoch(&log, e, &mut durable);
    }
    Ok(report)
}

fn apply_epoch(log: &[RecordedOp], e: &Epoch, image: &mut [u8]) {
    let writes: Vec<RecordedOp> = e.writes.iter().map(|&w| log[w].clone()).collect();
    tux3::device::recording::apply(&writes, image, BS);
}

/// The promises for one crash image; Err names the first one broken.
fn check_state(
    image: Vec<u8>,
    src: &Arc<dyn Device>,
    want: &Snapshot,
    report: &mut ReceiveReport,
) -> std::result::Result<(), String> {
    let dev: Arc<dyn Device> = Arc::new(MemDevice::from_image(BS, image));
    let fsck = tux3_tools::fsck::check(dev.clone(), &Default::default()).map_err(|e| format!("fsck: {e}"))?;
    if !fsck.problems.is_empty() {
        return Err(format!("fsck: {}", fsck.problems.join("; ")));
    }
    let fs = Fs::open(dev.clone(), opts()).map_err(|e| format!("mount: {e}"))?;
    let has = |fs: &Fs| -> std::result::Result<bool, String> {
        let list = fs.snapshot_list().map_err(|e| format!("snapshot list: {e}"))?;
        Ok(list.iter().any(|s| s.name == b"two" && !s.deleting))
    };
    let token = resume::stored(&fs).map_err(|e| format!("reading the token: {e}"))?;
    if has(&fs)? {
        report.complete += 1;
        if token.is_some() {
            return Err("the snapshot is there and so is a resume token".into());
        }
    } else {
        // Resume: from the token, or (a crash before the first
        // checkpoint) the whole incremental stream again.
        report.with_token += usize::from(token.is_some());
        let again = match token {
            Some(t) => stream(src, b"two", None, Some(t)),
            None => stream(src, b"two", Some(b"one"), None),
        }
        .map_err(|e| format!("send --resume: {e}"))?;
        receive(&fs, &again[..], &ReceiveOptions::default(), &mut |_| {})
            .map_err(|e| format!("resumed receive (token {token:?}): {e}"))?;
        if !has(&fs)? {
            return Err("the resumed receive took no snapshot".into());
        }
    }
    fs.close().map_err(|e| format!("close: {e}"))?;
    let got = read_snapshot(&dev, b"two").map_err(|e| format!("reading the snapshot: {e}"))?;
    if got != *want {
        return Err(format!(
            "received snapshot differs: {}",
            got.diff(want, 4).join("; ")
        ));
    }
    let kinds = got
        .entries
        .values()
        .filter(|n| n.kind == FileType::Symlink)
        .count();
    if kinds == 0 {
        return Err("the received snapshot lost its symlink".into());
    }
    Ok(())
}
