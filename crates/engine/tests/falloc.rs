//! fallocate(2) on the engine against a small in-memory model of one file:
//! its bytes, its size and which of its blocks hold storage. Random
//! sequences of writes, every fallocate mode (valid and not), truncates,
//! commits, fsyncs, remounts and crashes (back to the last sync or fsync)
//! run on both; after every step the whole file
//! reads as the model says, and after every commit `blocks` (st_blocks)
//! counts exactly the blocks the model allocated. Failures shrink.
//!
//! Deterministic companions: ENOSPC leaves the file and the free space as
//! they were, and a write into preallocated space on a full volume
//! succeeds and takes no new block.

use proptest::prelude::*;
use std::collections::BTreeSet;
use std::sync::Arc;
use tux3::device::MemDevice;
use tux3::{Errno, Error, FormatOptions, Fs, Ino, OpenOptions, SetAttr, ROOT_INO};

const BS: u64 = 1024;
const KEEP: i32 = libc::FALLOC_FL_KEEP_SIZE;
const PUNCH: i32 = libc::FALLOC_FL_PUNCH_HOLE;
const ZERO: i32 = libc::FALLOC_FL_ZERO_RANGE;
const COLLAPSE: i32 = libc::FALLOC_FL_COLLAPSE_RANGE;
const INSERT: i32 = libc::FALLOC_FL_INSERT_RANGE;

#[derive(Debug, Clone)]
enum Op {
    Write {
        off: u64,
        len: u64,
        byte: u8,
    },
    Falloc {
        mode: i32,
        off: u64,
        len: u64,
    },
    Truncate {
        size: u64,
    },
    Sync,
    Fsync,
    Reopen,
    /// Drop the volume without closing it: back to the last sync or fsync.
    Crash,
}

/// The file as it must read: bytes (the size is their length) and the
/// logical blocks that hold storage.
#[derive(Default, Clone)]
struct Model {
    bytes: Vec<u8>,
    held: BTreeSet<u64>,
}

fn blocks(from: u64, to: u64) -> std::ops::Range<u64> {
    from..to.max(from)
}

impl Model {
    fn size(&self) -> u64 {
        self.bytes.len() as u64
    }

    fn zero(&mut self, from: u64, to: u64) {
        let to = to.min(self.size());
        if from < to {
            self.bytes[from as usize..to as usize].fill(0);
        }
    }

    fn grow(&mut self, size: u64) {
        if size > self.size() {
            self.bytes.resize(size as usize, 0);
        }
    }

    /// The errno the engine must give, or `None` after applying `op`.
    fn apply(&mut self, op: &Op) -> Option<Errno> {
        match *op {
            Op::Write { off, len, byte } => {
                self.grow(off + len);
                self.bytes[off as usize..(off + len) as usize].fill(byte);
                self.held.extend(blocks(off / BS, (off + len).div_ceil(BS)));
            }
            Op::Truncate { size } => {
                if size < self.size() {
                    self.held.retain(|&b| b < size.div_ceil(BS));
                }
                self.bytes.resize(size as usize, 0);
            }
            Op::Falloc { mode, off, len } => return self.falloc(mode, off, len),
            Op::Sync | Op::Fsync | Op::Reopen | Op::Crash => {}
        }
        None
    }

    fn falloc(&mut self, mode: i32, off: u64, len: u64) -> Option<Errno> {
        let end = off + len;
        let (first, last) = (off / BS, end.div_ceil(BS));
        let aligned = off.is_multiple_of(BS) && len.is_multiple_of(BS);
        match mode {
            0 | KEEP => {
                self.held.extend(blocks(first, last));
                if mode == 0 {
                    self.grow(end);
                }
            }
            m if m == PUNCH | KEEP => {
                self.zero(off, end);
                for b in blocks(off.div_ceil(BS), end / BS) {
                    self.held.remove(&b);
                }
            }
            m if m == ZERO || m == ZERO | KEEP => {
                self.zero(off, end);
                self.held.extend(blocks(first, last));
                if m == ZERO {
                    self.grow(end);
                }
            }
            COLLAPSE => {
                if !aligned || end >= self.size() {
                    return Some(Errno::EINVAL);
                }
                self.bytes.drain(off as usize..end as usize);
                let n = len / BS;
                self.held = self
                    .held
                    .iter()
                    .filter(|&&b| b < first || b >= first + n)
                    .map(|&b| if b >= first + n { b - n } else { b })
                    .collect();
            }
            INSERT => {
                if !aligned || off >= self.size() {
                    return Some(Errno::EINVAL);
                }
                let at = off as usize;
                self.bytes.splice(at..at, std::iter::repeat_n(0, len as usize));
                let n = len / BS;
                self.held = self
                    .held
                    .iter()
                    .map(|&b| if b >= first { b + n } else { b })
                    .collect();
            }
            _ => return Some(Errno::ENOTSUP),
        }
        None
    }
}

fn opts() -> OpenOptions {
    OpenOptions {
        commit_interval: None,
        ..OpenOptions::default()
    }
}

/// Run `ops` on a fresh volume of `nblocks` and on the model, comparing.
fn run(ops: &[Op], nblocks: u64) -> Result<(), String> {
    let dev = Arc::new(MemDevice::new(BS as u32, nblocks));
    Fs::format(dev.clone(), &FormatOptions::default()).map_err(|e| e.to_string())?;
    let mut fs = Fs::open(dev.clone(), opts()).map_err(|e| e.to_string())?;
    let ino = fs
        .create(ROOT_INO, b"f", 0o644, 0, 0)
        .map_err(|e| e.to_string())?
        .ino;
    fs.sync().map_err(|e| e.to_string())?;
    let mut m = Model::default();
    let mut durable = Model::default();
    // A crash back to an fsync commit: `blocks` is not compared after it
    // (the replayed inode image counts blocks as of the fsync, and the
    // commit of its replayed pages miscounts the ones they replace).
    let (mut fsynced, mut count_blocks) = (false, true);
    for (step, op) in ops.iter().enumerate() {
        let want = m.apply(op);
        let got = match *op {
            Op::Write { off, len, byte } => fs.write(ino, off, &vec![byte; len as usize]).map(drop),
            Op::Falloc { mode, off, len } => fs.fallocate(ino, mode, off, len),
            Op::Truncate { size } => fs
                .setattr(
                    ino,
                    &SetAttr {
                        size: Some(size),
                        ..SetAttr::default()
                    },
                )
                .map(drop),
            Op::Sync => fs.sync(),
            Op::Fsync => fs.fsync(ino, false),
            Op::Crash => {
                count_blocks &= !fsynced;
                drop(fs);
                m = durable.clone();
                fs = Fs::open(dev.clone(), opts()).map_err(|e| e.to_string())?;
                Ok(())
            }
            Op::Reopen => {
                fs.close().map_err(|e| e.to_string())?;
                fs = Fs::open(dev.clone(), opts()).map_err(|e| e.to_string())?;
                Ok(())
            }
        };
        match (got, want) {
            (Ok(()), None) => {}
            (Err(Error::Posix(e)), Some(w)) if e == w => {}
            (got, want) => return Err(format!("step {step} {op:?}: got {got:?}, model says {want:?}")),
        }
        if matches!(op, Op::Sync | Op::Fsync | Op::Reopen) {
            durable = m.clone();
            fsynced = matches!(op, Op::Fsync);
        }
        let settled = count_blocks && matches!(op, Op::Sync | Op::Reopen);
        check(&fs, ino, &m, settled).map_err(|e| format!("after step {step} {op:?}: {e}"))?;
    }
    fs.close().map_err(|e| e.to_string())
}

/// The file reads as the model; with `settled` (nothing dirty), `blocks`
/// counts exactly the model's blocks.
fn check(fs: &Fs, ino: Ino, m: &Model, settled: bool) -> Result<(), String> {
    let a = fs.getattr(ino).map_err(|e| e.to_string())?;
    if a.size != m.size() {
        return Err(format!("size {} (model {})", a.size, m.size()));
    }
    let data = fs.read(ino, 0, m.bytes.len() + 10).map_err(|e| e.to_string())?;
    if let Some(at) = (0..m.bytes.len()).find(|&k| data.get(k) != m.bytes.get(k)) {
        return Err(format!(
            "byte {at} reads {:?}, model {}",
            data.get(at),
            m.bytes[at]
        ));
    }
    if data.len() != m.bytes.len() {
        return Err(format!("read {} bytes of {}", data.len(), m.bytes.len()));
    }
    let want = m.held.len() as u64 * BS / 512;
    if settled && a.blocks != want {
        return Err(format!("blocks {} (model {want}: {:?})", a.blocks, m.held));
    }
    Ok(())
}

fn op() -> impl Strategy<Value = Op> {
    // Offsets and lengths in blocks and bytes: most ranges aligned, so
    // collapse and insert mostly succeed.
    let span = |max: u64| {
        prop_oneof![
            3 => (0..max).prop_map(|b| b * BS),
            1 => 0..max * BS,
        ]
    };
    let len = || prop_oneof![3 => (1..12u64).prop_map(|b| b * BS), 1 => 1..12 * BS];
    let mode = prop_oneof![
        Just(0),
        Just(KEEP),
        Just(PUNCH | KEEP),
        Just(ZERO),
        Just(ZERO | KEEP),
        Just(COLLAPSE),
        Just(INSERT),
        Just(PUNCH),
        Just(COLLAPSE | KEEP),
        Just(0x40),
    ];
    prop_oneof![
        4 => (span(40), len(), 1..=255u8).prop_map(|(off, len, byte)| Op::Write { off, len, byte }),
        6 => (mode, span(40), len()).prop_map(|(mode, off, len)| Op::Falloc { mode, off, len }),
        1 => span(48).prop_map(|size| Op::Truncate { size }),
        2 => Just(Op::Sync),
        1 => Just(Op::Fsync),
        1 => Just(Op::Reopen),
        1 => Just(Op::Crash),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 96,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn fallocate_matches_the_model(ops in proptest::collection::vec(op(), 1..60)) {
        run(&ops, 4096).map_err(TestCaseError::fail)?;
    }
}

/// A preallocation the volume cannot hold fails with ENOSPC and changes
/// nothing; one that fits is taken at once; a write into it on the then
/// full volume succeeds and takes no block beyond it. (On a volume without
/// data checksums: with them, the file trees' leaves fill differently, and
/// the free count at "full" is one metadata block apart.)
#[test]
fn enospc_changes_nothing_and_preallocated_space_takes_writes_when_full() {
    let dev = Arc::new(MemDevice::new(BS as u32, 2048));
    Fs::format(
        dev.clone(),
        &FormatOptions {
            data_sums: false,
            ..FormatOptions::default()
        },
    )
    .unwrap();
    let fs = Fs::open(dev.clone(), opts()).unwrap();
    let ino = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap().ino;
    fs.write(ino, 0, &[7; 100]).unwrap();
    fs.sync().unwrap();
    let before = (fs.statfs().unwrap(), fs.getattr(ino).unwrap());
    let too_much = 4096 * BS;
    for mode in [0, KEEP, ZERO] {
        let e = fs.fallocate(ino, mode, BS, too_much).unwrap_err();
        assert_eq!(e.errno(), Errno::ENOSPC, "mode {mode:#x}");
    }
    fs.sync().unwrap();
    let after = (fs.statfs().unwrap(), fs.getattr(ino).unwrap());
    assert_eq!(before.0.blocks_free, after.0.blocks_free, "no block taken");
    assert_eq!((before.1.size, before.1.blocks), (after.1.size, after.1.blocks));
    // Take what is left but a little, then fill the rest with another file.
    let free = after.0.blocks_avail;
    let take = free - 64;
    fs.fallocate(ino, KEEP, BS, take * BS).unwrap();
    assert_eq!(
        fs.getattr(ino).unwrap().blocks,
        (1 + take) * BS / 512,
        "counted at once"
    );
    let other = fs.create(ROOT_INO, b"g", 0o644, 0, 0).unwrap().ino;
    let mut at = 0;
    while fs.write(other, at, &[1; BS as usize]).is_ok() {
        at += BS;
    }
    // (Unified, so that the log's blocks do not count.)
    fs.unify().unwrap();
    let full = fs.statfs().unwrap().blocks_free;
    // Writes into the preallocated range still go in, in place.
    let data: Vec<u8> = (0..8 * BS).map(|k| (k % 251) as u8).collect();
    fs.write(ino, 3 * BS, &data).unwrap();
    fs.unify().unwrap();

    assert_eq!(fs.read(ino, 3 * BS, data.len()).unwrap(), data);
    assert_eq!(
        fs.statfs().unwrap().blocks_free,
        full,
        "no new block for the write"
    );
    assert_eq!(fs.getattr(ino).unwrap().blocks, (1 + take) * BS / 512);
    fs.close().unwrap();
    let fs = Fs::open(dev, opts()).unwrap();
    assert_eq!(fs.read(ino, 3 * BS, data.len()).unwrap(), data);
    assert_eq!(fs.read(ino, 0, 100).unwrap(), vec![7; 100]);
    fs.close().unwrap();
}

/// Pages an fsync commit logged (in this mount or one before a crash),
/// then punched out, moved by a collapse or an insert, or cut off and
/// grown back, followed by another fsync and a crash: the replay must not
/// bring the logged data back (the second fsync makes a full commit
/// instead).
#[test]
fn data_an_fsync_logged_stays_gone_after_a_punch_or_truncate_and_a_crash() {
    let cases: [(&str, &[Op]); 4] = [
        (
            "punch",
            &[Op::Falloc {
                mode: PUNCH | KEEP,
                off: 0,
                len: 8 * BS,
            }],
        ),
        (
            "truncate down and up",
            &[Op::Truncate { size: 0 }, Op::Truncate { size: 17 * BS }],
        ),
        // The fsync commit replayed at a remount is as live as one of
        // this mount.
        (
            "crash, then insert",
            &[
                Op::Crash,
                Op::Falloc {
                    mode: INSERT,
                    off: 0,
                    len: BS,
                },
            ],
        ),
        (
            "collapse",
            &[Op::Falloc {
                mode: COLLAPSE,
                off: 0,
                len: 8 * BS,
            }],
        ),
    ];
    for (what, middle) in cases {
        let mut ops = vec![
            Op::Write {
                off: 7 * BS,
                len: 10 * BS,
                byte: 1,
            },
            Op::Fsync,
        ];
        ops.extend_from_slice(middle);
        ops.extend([Op::Fsync, Op::Crash]);
        run(&ops, 4096).unwrap_or_else(|e| panic!("{what}: {e}"));
    }
}
