//! The `clone` and `dedupe` workloads: shared extents under crashes.
//!
//! `clone`: four files written, cloned onto one another (whole, partial,
//! block-aligned and not, onto existing bytes, onto another range of the
//! same file), overwritten, punched (PUNCH_HOLE | KEEP_SIZE), truncated up
//! and down, unlinked and created again, defragmented (the clones of a
//! rewritten file pointed at its new copy), with snapshots taken and deleted
//! (a snapshot holds shared blocks the live files let go of), fsyncs,
//! syncs, unifies, and a sync then a crash and remount every 16 steps.
//! `dedupe`: a few block patterns written in several places of four files
//! (some with a byte changed), then block-aligned ranges deduped — equal
//! ones shared, differing ones left alone — among overwrites, unlinks,
//! snapshots, syncs and crashes.
//!
//! Both keep a byte model of every file: a clone copies the model's bytes,
//! a dedupe changes none and must share exactly when the model's ranges
//! are equal. After every call the files touched are read back and
//! compared with the model (the workload fails on a difference), so the
//! namespace the recorder keeps after each call — what every crash state
//! must match — is the model's. fsck at every crash state then counts each
//! block's references against the shared-extent table.
//!
//! Calls the recorder and the workloads' helpers.

use super::{create_files, fill, snapshot_drop, snapshot_take};
use crate::record::Recorder;
use crate::Rng;
use tux3::error::{Errno, Error, Result};
use tux3::types::{Ino, SetAttr, ROOT_INO};
use tux3::DefragOptions;

const BS: u64 = 4096;
/// Files stay within about this many blocks.
const SPAN: u64 = 40;
const PUNCH: i32 = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;

/// The workload's files and what each must read as.
struct Model {
    prefix: &'static str,
    files: Vec<(Ino, Vec<u8>)>,
    /// The most blocks sharing saved after any clone or dedupe.
    most_saved: u64,
}

/// `m[at..at + len]`, clipped at its end.
fn slice(m: &[u8], at: u64, len: u64) -> Vec<u8> {
    let end = at.saturating_add(len).min(m.len() as u64);
    m.get(at as usize..end as usize).unwrap_or(&[]).to_vec()
}

fn put(m: &mut Vec<u8>, at: u64, data: &[u8]) {
    if data.is_empty() {
        return;
    }
    let end = at as usize + data.len();
    if m.len() < end {
        m.resize(end, 0);
    }
    m[at as usize..end].copy_from_slice(data);
}

impl Model {
    fn new(rec: &mut Recorder, prefix: &'static str, n: usize) -> Result<Model> {
        let inos = create_files(rec, prefix, n)?;
        Ok(Model {
            prefix,
            files: inos.into_iter().map(|i| (i, Vec::new())).collect(),
            most_saved: 0,
        })
    }

    fn ino(&self, f: usize) -> Ino {
        self.files[f].0
    }

    fn size(&self, f: usize) -> u64 {
        self.files[f].1.len() as u64
    }

    /// File `f` reads as the model, size and bytes; a clear error if not.
    fn verify(&self, rec: &Recorder, f: usize) -> Result<()> {
        let (ino, m) = &self.files[f];
        let fs = rec.fs()?;
        let size = fs.getattr(*ino)?.size;
        let got = fs.read(*ino, 0, m.len() + BS as usize)?;
        let bad =
            |what: String| Error::BadImage(format!("{} workload: /{}{f} {what}", self.prefix, self.prefix));
        if size != m.len() as u64 || got.len() != m.len() {
            return Err(bad(format!(
                "has size {size} (reads {}), the model {}",
                got.len(),
                m.len()
            )));
        }
        match got.iter().zip(m).position(|(a, b)| a != b) {
            Some(at) => Err(bad(format!(
                "byte {at} reads {:#x}, the model {:#x}",
                got[at], m[at]
            ))),
            None => Ok(()),
        }
    }

    fn verify_all(&self, rec: &Recorder) -> Result<()> {
        (0..self.files.len()).try_for_each(|f| self.verify(rec, f))
    }

    fn write(&mut self, rec: &mut Recorder, f: usize, at: u64, data: &[u8]) -> Result<()> {
        let ino = self.ino(f);
        let p = self.prefix;
        rec.op(format!("write /{p}{f} {at}+{}", data.len()), false, |fs| {
            fs.write(ino, at, data)
        })?;
        put(&mut self.files[f].1, at, data);
        self.verify(rec, f)
    }

    /// `clone_range`; EINVAL for overlapping ranges of one file, which the
    /// workload asks for now and then.
    fn clone(
        &mut self,
        rec: &mut Recorder,
        src: usize,
        sa: u64,
        dst: usize,
        da: u64,
        len: u64,
    ) -> Result<()> {
        let (s, d, p) = (self.ino(src), self.ino(dst), self.prefix);
        let have = self.files[src].1.clone();
        let n = len.min((have.len() as u64).saturating_sub(sa));
        let overlap = src == dst && n > 0 && sa < da + n && da < sa + n;
        let desc = format!("clone /{p}{src} {sa}+{len} -> /{p}{dst} at {da}");
        match rec.op(desc, false, |fs| fs.clone_range(s, sa, d, da, len)) {
            Err(Error::Posix(e)) if e == Errno::EINVAL && overlap => return Ok(()),
            Ok(got) if got == n && !overlap => {}
            r => {
                return Err(Error::BadImage(format!(
                    "{p} workload: clone /{p}{src} {sa}+{len} -> /{p}{dst} at {da} gave {r:?}, \
                     the model {n} bytes (overlap {overlap})"
                )))
            }
        }
        put(&mut self.files[dst].1, da, &slice(&have, sa, n));
        self.note_saved(rec)?;
        self.verify(rec, dst)
    }

    /// `dedupe_range` of whole blocks: shares exactly when the model's
    /// ranges are equal, and changes no byte either way.
    fn dedupe(
        &mut self,
        rec: &mut Recorder,
        src: usize,
        sb: u64,
        dst: usize,
        db: u64,
        blocks: u64,
    ) -> Result<()> {
        let (s, d, p) = (self.ino(src), self.ino(dst), self.prefix);
        let (sa, da, len) = (sb * BS, db * BS, blocks * BS);
        let fits = |f: usize, at: u64| at + len <= self.size(f).div_ceil(BS) * BS;
        let valid = fits(src, sa) && fits(dst, da) && (src != dst || sa + len <= da || da + len <= sa);
        let equal = slice(&self.files[src].1, sa, len) == slice(&self.files[dst].1, da, len);
        let desc = format!("dedupe /{p}{src} block {sb}+{blocks} -> /{p}{dst} block {db}");
        match rec.op(desc, false, |fs| fs.dedupe_range(s, sa, d, da, len)) {
            Err(Error::Posix(e)) if e == Errno::EINVAL && !valid => {}
            Ok(Some(n)) if valid && equal && n == len => {}
            Ok(None) if valid && !equal => {}
            r => {
                return Err(Error::BadImage(format!(
                    "{p} workload: dedupe /{p}{src} block {sb}+{blocks} -> /{p}{dst} block {db} \
                     gave {r:?}; the model: valid {valid}, equal {equal}"
                )))
            }
        }
        self.note_saved(rec)?;
        self.verify(rec, src)?;
        self.verify(rec, dst)
    }

    fn note_saved(&mut self, rec: &Recorder) -> Result<()> {
        self.most_saved = self.most_saved.max(rec.fs()?.sharing().saved_blocks);
        Ok(())
    }

    /// The end of a workload: synced, every file as the model says, and
    /// blocks shared at some point (the workload tested something).
    fn finish(&self, rec: &mut Recorder) -> Result<()> {
        rec.op("sync", true, |fs| fs.sync())?;
        self.verify_all(rec)?;
        if self.most_saved == 0 {
            return Err(Error::BadImage(format!(
                "{} workload shared no block",
                self.prefix
            )));
        }
        Ok(())
    }

    fn punch(&mut self, rec: &mut Recorder, f: usize, at: u64, len: u64) -> Result<()> {
        let (ino, p) = (self.ino(f), self.prefix);
        rec.op(format!("punch /{p}{f} {at}+{len}"), false, |fs| {
            fs.fallocate(ino, PUNCH, at, len)
        })?;
        let m = &mut self.files[f].1;
        let end = (at + len).min(m.len() as u64);
        if at < end {
            m[at as usize..end as usize].fill(0);
        }
        self.verify(rec, f)
    }

    fn truncate(&mut self, rec: &mut Recorder, f: usize, size: u64) -> Result<()> {
        let (ino, p) = (self.ino(f), self.prefix);
        let set = SetAttr {
            size: Some(size),
            ..SetAttr::default()
        };
        rec.op(format!("truncate /{p}{f} to {size}"), false, |fs| {
            fs.setattr(ino, &set)
        })?;
        self.files[f].1.resize(size as usize, 0);
        self.verify(rec, f)
    }

    /// `defrag` of file `f`: its extents other files share are rewritten
    /// once and those files pointed at the new copy, so every file must
    /// still read as the model says.
    fn defrag(&mut self, rec: &mut Recorder, f: usize) -> Result<()> {
        let (ino, p) = (self.ino(f), self.prefix);
        let opts = DefragOptions::default();
        rec.op(format!("defrag /{p}{f}"), false, |fs| {
            fs.defrag(ino, &opts, &mut |_, _| ())
        })?;
        self.note_saved(rec)?;
        self.verify_all(rec)
    }

    /// Unlink `/<prefix>f` and create it again, empty.
    fn recreate(&mut self, rec: &mut Recorder, f: usize) -> Result<()> {
        let name = format!("{}{f}", self.prefix);
        rec.op(format!("unlink /{name}"), false, |fs| {
            fs.unlink(ROOT_INO, name.as_bytes())
        })?;
        let a = rec.op(format!("create /{name}"), false, |fs| {
            fs.create(ROOT_INO, name.as_bytes(), 0o644, 0, 0)
        })?;
        self.files[f] = (a.ino, Vec::new());
        self.verify(rec, f)
    }

    /// The calls both workloads share: fsync, sync, unify, snapshots (at
    /// most two alive), and every 16th step a sync then a crash and remount
    /// (the model is exact after the sync).
    fn durability(
        &mut self,
        rec: &mut Recorder,
        rng: &mut Rng,
        step: u64,
        snaps: &mut Vec<String>,
    ) -> Result<()> {
        match rng.below(8) {
            0 => rec.fsync(self.ino(rng.below(self.files.len() as u64) as usize))?,
            1 => rec.op("sync", true, |fs| fs.sync())?,
            2 => rec.op("unify", true, |fs| fs.unify())?,
            3 if snaps.len() < 2 => snapshot_take(rec, snaps, format!("{}snap{step}", self.prefix))?,
            4 if !snaps.is_empty() => snapshot_drop(rec, rng, snaps)?,
            _ => {}
        }
        if step % 16 == 15 {
            rec.op("sync", true, |fs| fs.sync())?;
            rec.crash_and_remount()?;
            self.verify_all(rec)?;
        }
        Ok(())
    }
}

/// An offset within about `span` bytes: mostly block-aligned.
fn offset(rng: &mut Rng, span: u64) -> u64 {
    let b = rng.below(span / BS + 1) * BS;
    if rng.below(3) == 0 {
        b + rng.below(BS)
    } else {
        b
    }
}

/// Record the `clone` workload.
pub(super) fn clone_files(rec: &mut Recorder, rng: &mut Rng) -> Result<()> {
    let mut m = Model::new(rec, "c", 4)?;
    for f in 0..4 {
        let data = fill(
            rng.next(),
            (4 + rng.below(20)) as usize * BS as usize - rng.below(BS) as usize,
        );
        m.write(rec, f, 0, &data)?;
    }
    rec.op("sync", true, |fs| fs.sync())?;
    let mut snaps = Vec::new();
    for step in 0..96u64 {
        let f = rng.below(4) as usize;
        let g = rng.below(4) as usize;
        let len = (1 + rng.below(16)) * BS;
        match rng.below(12) {
            0 | 1 => {
                let at = offset(rng, m.size(f).min(SPAN * BS));
                let data = fill(rng.next(), (len - rng.below(BS)) as usize);
                m.write(rec, f, at, &data)?;
            }
            // The whole file over another (or onto itself past its end).
            2 => {
                let da = if f == g { m.size(f).div_ceil(BS) * BS } else { 0 };
                if da < SPAN * BS {
                    m.clone(rec, f, 0, g, da, u64::MAX)?;
                }
            }
            // Block-aligned ranges: shared whole.
            3 | 4 => {
                let (sa, da) = (
                    offset(rng, m.size(f)) / BS * BS,
                    offset(rng, SPAN * BS / 2) / BS * BS,
                );
                m.clone(rec, f, sa, g, da, len)?;
            }
            // Offsets that differ within a block (copied) or unaligned
            // edges around shared blocks.
            5 => {
                let (sa, da) = (offset(rng, m.size(f)), offset(rng, SPAN * BS / 2));
                m.clone(rec, f, sa, g, da, len - rng.below(BS))?;
            }
            // Another range of the same file (now and then overlapping).
            6 => {
                let sa = offset(rng, m.size(f)) / BS * BS;
                let da = (sa + len + rng.below(4) * BS).min(SPAN * BS) - rng.below(2) * len;
                m.clone(rec, f, sa, f, da, len)?;
            }
            7 => {
                let at = offset(rng, m.size(f));
                m.punch(rec, f, at, len - rng.below(BS))?;
            }
            8 => {
                let size = rng.below(m.size(f) + 4 * BS).min(SPAN * BS);
                m.truncate(rec, f, size)?;
            }
            9 if rng.below(2) == 0 => {
                m.recreate(rec, f)?;
                let data = fill(rng.next(), (1 + rng.below(12 * BS)) as usize);
                m.write(rec, f, 0, &data)?;
            }
            10 if rng.below(2) == 0 => m.defrag(rec, f)?,
            _ => m.durability(rec, rng, step, &mut snaps)?,
        }
    }
    m.finish(rec)
}

/// Record the `dedupe` workload.
pub(super) fn dedupe_files(rec: &mut Recorder, rng: &mut Rng) -> Result<()> {
    let mut m = Model::new(rec, "d", 4)?;
    // Four patterns of one to four blocks, placed at block offsets of the
    // files; one placement in four has a byte changed.
    let patterns: Vec<Vec<u8>> = (0..4)
        .map(|_| fill(rng.next(), (1 + rng.below(4)) as usize * BS as usize))
        .collect();
    let place = |m: &mut Model, rec: &mut Recorder, rng: &mut Rng| -> Result<()> {
        let f = rng.below(4) as usize;
        let mut data = patterns[rng.below(4) as usize].clone();
        if rng.below(4) == 0 {
            let k = rng.below(data.len() as u64) as usize;
            data[k] ^= 0x5a;
        }
        let at = rng.below(SPAN - 4) * BS;
        m.write(rec, f, at, &data)
    };
    for _ in 0..16 {
        place(&mut m, rec, rng)?;
    }
    rec.op("sync", true, |fs| fs.sync())?;
    let mut snaps = Vec::new();
    for step in 0..80u64 {
        let (f, g) = (rng.below(4) as usize, rng.below(4) as usize);
        match rng.below(10) {
            0 | 1 => place(&mut m, rec, rng)?,
            // A range dedupe: equal, differing, or past an end (EINVAL).
            2..=4 => {
                let blocks = 1 + rng.below(4);
                let (sb, db) = (rng.below(SPAN - 4), rng.below(SPAN - 4));
                m.dedupe(rec, f, sb, g, db, blocks)?;
            }
            // A copy of a range elsewhere, then the dedupe that finds it.
            5 => {
                let blocks = 1 + rng.below(4);
                let sb = rng.below(m.size(f).div_ceil(BS).max(1));
                let db = rng.below(SPAN - 4);
                let data = slice(&m.files[f].1, sb * BS, blocks * BS);
                if !data.is_empty() && (f != g || sb + blocks <= db || db + blocks <= sb) {
                    m.write(rec, g, db * BS, &data)?;
                    m.dedupe(rec, f, sb, g, db, data.len().div_ceil(BS as usize) as u64)?;
                }
            }
            6 => {
                let at = offset(rng, m.size(f));
                let data = fill(rng.next(), (1 + rng.below(3 * BS)) as usize);
                m.write(rec, f, at, &data)?;
            }
            7 if rng.below(3) == 0 => m.recreate(rec, f)?,
            7 => m.punch(rec, f, offset(rng, m.size(f)), (1 + rng.below(4)) * BS)?,
            _ => m.durability(rec, rng, step, &mut snaps)?,
        }
    }
    m.finish(rec)
}
