//! Engine side of the model-based tests: runs each [`Action`] on a real `Fs`
//! over a `MemDevice` and on the reference [`Model`], and compares results,
//! attributes of every inode the step touched, and entries of every directory
//! it changed. Reopen (close + open: replay) and Crash (drop + open: the
//! uncommitted delta is lost) are followed by a full comparison of the tree.
//!
//! Volumes are opened with `dirty_limit: u64::MAX`, so the engine commits only
//! at sync, fsync, unify and close: the model's durable state is exactly the
//! state after the last of those.

use super::gen::{resolve, Op};
use super::ops::{model_apply, pattern, Action, Outcome, N};
use super::reference::{Entry, Model, View, CHUNK, R};
use std::collections::BTreeSet;
use std::sync::Arc;
use tux3::device::{Device, MemDevice};
use tux3::{FormatOptions, Fs, Ino, OpenOptions, ROOT_INO};

/// Open options that keep every commit explicit.
pub fn open_opts(unify_log_blocks: u64) -> OpenOptions {
    OpenOptions {
        dirty_limit: u64::MAX,
        unify_log_blocks,
        // The crash model reverts to the last durability point as a whole,
        // which is what strict fsync gives; fast fsync has its own tests.
        fsync_strict: true,
        ..OpenOptions::default()
    }
}

fn errno<T>(r: tux3::Result<T>) -> R<T> {
    r.map_err(|e| e.errno())
}

/// All entries of `ino` through `readdir` batches of `batch`, sorted by name.
/// Panics if the scan does not end or a batch is oversized.
pub fn engine_readdir(fs: &Fs, ino: Ino, batch: usize, expect: usize) -> R<Vec<Entry>> {
    let mut out = Vec::new();
    let mut pos = 0;
    loop {
        let got = errno(fs.readdir(ino, pos, batch))?;
        if got.is_empty() {
            break;
        }
        assert!(
            got.len() <= batch,
            "readdir({ino}, {pos}, {batch}) returned {} entries",
            got.len()
        );
        pos = got.last().unwrap().next;
        out.extend(got.into_iter().map(|e| (e.name, e.ino, e.kind)));
        assert!(
            out.len() <= 2 * expect + 1000,
            "readdir of {ino} does not terminate (pos {pos})"
        );
    }
    out.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
    Ok(out)
}

/// Execute `a` on the engine. Problems that are not a different result
/// (e.g. times not set as asked) go to `notes`.
pub fn engine_apply(fs: &Fs, a: &Action, notes: &mut Vec<String>) -> R<Outcome> {
    use Outcome as O;
    let attr = |r: tux3::Result<tux3::Attr>| errno(r).map(|a| O::Attr(View::of(&a)));
    match a {
        Action::Lookup { dir, name } => attr(fs.lookup(*dir, &name.0)),
        Action::Getattr { ino } => attr(fs.getattr(*ino)),
        Action::Create {
            dir,
            name,
            perm,
            uid,
            gid,
        } => attr(fs.create(*dir, &name.0, *perm, *uid, *gid)),
        Action::Mkdir {
            dir,
            name,
            perm,
            uid,
            gid,
        } => attr(fs.mkdir(*dir, &name.0, *perm, *uid, *gid)),
        Action::Mknod {
            dir,
            name,
            mode,
            rdev,
            uid,
            gid,
        } => attr(fs.mknod(*dir, &name.0, *mode, *rdev, *uid, *gid)),
        Action::Symlink {
            dir,
            name,
            target,
            uid,
            gid,
        } => attr(fs.symlink(*dir, &name.0, &target.0, *uid, *gid)),
        Action::Readlink { ino } => errno(fs.readlink(*ino)).map(|b| O::Bytes(N(b))),
        Action::Link { ino, dir, name } => attr(fs.link(*ino, *dir, &name.0)),
        Action::Unlink { dir, name } => errno(fs.unlink(*dir, &name.0)).map(|_| O::Unit),
        Action::Rmdir { dir, name } => errno(fs.rmdir(*dir, &name.0)).map(|_| O::Unit),
        Action::Rename {
            dir,
            name,
            newdir,
            newname,
            flags,
        } => errno(fs.rename(*dir, &name.0, *newdir, &newname.0, *flags)).map(|_| O::Unit),
        Action::Write {
            ino,
            offset,
            len,
            seed,
        } => errno(fs.write(*ino, *offset, &pattern(*seed, *offset, *len))).map(O::Count),
        Action::Read { ino, offset, len } => errno(fs.read(*ino, *offset, *len)).map(|b| O::Bytes(N(b))),
        Action::SetAttr { ino, set } => {
            let r = errno(fs.setattr(*ino, set))?;
            if set.atime.is_some_and(|t| t != r.atime) || set.mtime.is_some_and(|t| t != r.mtime) {
                notes.push(format!(
                    "setattr set atime/mtime {:?}/{:?}, got {:?}/{:?}",
                    set.atime, set.mtime, r.atime, r.mtime
                ));
            }
            Ok(O::Attr(View::of(&r)))
        }
        Action::SetXattr {
            ino,
            name,
            len,
            seed,
            mode,
        } => errno(fs.setxattr(*ino, &name.0, &pattern(*seed, 0, *len), *mode)).map(|_| O::Unit),
        Action::GetXattr { ino, name } => errno(fs.getxattr(*ino, &name.0)).map(|b| O::Bytes(N(b))),
        Action::ListXattr { ino } => {
            errno(fs.listxattr(*ino)).map(|v| O::Names(v.into_iter().map(N).collect()))
        }
        Action::RemoveXattr { ino, name } => errno(fs.removexattr(*ino, &name.0)).map(|_| O::Unit),
        Action::Readdir { ino } => engine_readdir(fs, *ino, 3, 1000).map(O::Entries),
        Action::Statfs => {
            let s = errno(fs.statfs())?;
            if s.blocks_free > s.blocks {
                notes.push(format!("statfs: {} free of {} blocks", s.blocks_free, s.blocks));
            }
            Ok(O::Statfs {
                block_size: s.block_size,
                name_max: s.name_max,
            })
        }
        Action::Fsync { ino, datasync } => errno(fs.fsync(*ino, *datasync)).map(|_| O::Unit),
        Action::Sync => errno(fs.sync()).map(|_| O::Unit),
        Action::Unify => errno(fs.unify()).map(|_| O::Unit),
        Action::Reopen | Action::Crash => unreachable!("handled by the harness"),
    }
}

/// A readable account of two different results.
fn differ(e: &R<Outcome>, m: &R<Outcome>) -> String {
    if let (Ok(Outcome::Bytes(x)), Ok(Outcome::Bytes(y))) = (e, m) {
        let first = x.0.iter().zip(&y.0).position(|(a, b)| a != b);
        return match first {
            Some(i) => format!("bytes differ first at {i}: engine {} model {}", x.0[i], y.0[i]),
            None => format!("engine returned {} bytes, model {}", x.0.len(), y.0.len()),
        };
    }
    format!("engine {e:?}\n  model  {m:?}")
}

/// The inodes an action names directly, or through a (dir, name) pair.
fn touched(m: &Model, a: &Action) -> Vec<Ino> {
    let mut v = a.dirs_touched();
    let mut at = |dir: Ino, name: &N| {
        if let Some(&i) = m.inodes.get(&dir).and_then(|d| d.entries.get(&name.0)) {
            v.push(i);
        }
    };
    match a {
        Action::Lookup { dir, name }
        | Action::Create { dir, name, .. }
        | Action::Mkdir { dir, name, .. }
        | Action::Mknod { dir, name, .. }
        | Action::Symlink { dir, name, .. }
        | Action::Unlink { dir, name }
        | Action::Rmdir { dir, name } => at(*dir, name),
        Action::Link { dir, name, .. } => at(*dir, name),
        Action::Rename {
            dir,
            name,
            newdir,
            newname,
            ..
        } => {
            at(*dir, name);
            at(*newdir, newname);
        }
        _ => {}
    }
    match a {
        Action::Getattr { ino }
        | Action::Readlink { ino }
        | Action::Link { ino, .. }
        | Action::Write { ino, .. }
        | Action::Read { ino, .. }
        | Action::SetAttr { ino, .. }
        | Action::SetXattr { ino, .. }
        | Action::RemoveXattr { ino, .. }
        | Action::Fsync { ino, .. } => v.push(*ino),
        _ => {}
    }
    v
}

pub struct Harness {
    pub dev: Arc<MemDevice>,
    fs: Option<Fs>,
    pub model: Model,
    /// The model as of the last commit point: what a crash comes back to.
    pub durable: Model,
    opts: OpenOptions,
    /// Actions executed, for failure messages.
    pub trace: Vec<Action>,
    /// Skip per-step directory listings and attribute sweeps (huge trees).
    pub light: bool,
}

impl Harness {
    /// Format a volume of `blocks` 4 KiB blocks and open it.
    pub fn new(blocks: u64, opts: OpenOptions) -> Result<Harness, String> {
        let dev = Arc::new(MemDevice::new(4096, blocks));
        let d: Arc<dyn Device> = dev.clone();
        let fo = FormatOptions::default();
        Fs::format(d.clone(), &fo).map_err(|e| format!("format: {e}"))?;
        let fs = Fs::open(d, opts.clone()).map_err(|e| format!("open: {e}"))?;
        let model = Model::new(fo.root_mode, fo.root_uid, fo.root_gid, fs.xattr_space());
        let h = Harness {
            dev,
            fs: Some(fs),
            durable: model.clone(),
            model,
            opts,
            trace: Vec::new(),
            light: false,
        };
        h.check_attrs(&[ROOT_INO])?;
        Ok(h)
    }

    pub fn fs(&self) -> &Fs {
        self.fs.as_ref().expect("volume is open")
    }

    /// The failure report: what went wrong and the last actions before it.
    fn fail(&self, what: String) -> String {
        let skip = self.trace.len().saturating_sub(80);
        let mut s = format!("{what}\nafter {} actions (last ones shown):\n", self.trace.len());
        for (i, a) in self.trace.iter().enumerate().skip(skip) {
            s += &format!("  {i:4}: {a:?}\n");
        }
        s
    }

    /// Run generated ops against a fresh model-checked volume.
    pub fn run(&mut self, ops: &[Op]) -> Result<(), String> {
        for (i, op) in ops.iter().enumerate() {
            let a = resolve(op, &self.model);
            self.step(&a)?;
            if i % 16 == 15 {
                self.check_attrs(&self.model.inos()).map_err(|e| self.fail(e))?;
            }
        }
        self.check_tree()
            .map_err(|e| self.fail(format!("final check: {e}")))
    }

    /// Apply one action to both sides and compare.
    pub fn step(&mut self, a: &Action) -> Result<(), String> {
        self.step_counted(a).map(|_| ())
    }

    /// [`Harness::step`], returning how many blocks the engine read for the
    /// operation itself (0 for reopen and crash).
    pub fn step_counted(&mut self, a: &Action) -> Result<u64, String> {
        self.trace.push(a.clone());
        if matches!(a, Action::Reopen | Action::Crash) {
            return self
                .reopen(matches!(a, Action::Crash))
                .map(|_| 0)
                .map_err(|e| self.fail(e));
        }
        let before = touched(&self.model, a);
        let mut notes = Vec::new();
        let reads = self.fs().counters().blocks_read;
        let e = engine_apply(self.fs(), a, &mut notes);
        let reads = self.fs().counters().blocks_read - reads;
        let new_ino = match (&e, a.creates()) {
            (Ok(Outcome::Attr(v)), true) => {
                if self.model.inodes.contains_key(&v.ino) {
                    return Err(self.fail(format!("engine gave new inode the live number {}", v.ino)));
                }
                v.ino
            }
            _ => u64::MAX - self.trace.len() as u64,
        };
        let m = model_apply(&mut self.model, a, new_ino);
        if e != m {
            return Err(self.fail(format!("result differs: {}", differ(&e, &m))));
        }
        if !notes.is_empty() {
            return Err(self.fail(notes.join("; ")));
        }
        if m.is_ok() && matches!(a, Action::Sync | Action::Fsync { .. } | Action::Unify) {
            self.durable = self.model.clone();
        }
        let mut inos = before;
        inos.extend(touched(&self.model, a));
        inos.retain(|i| self.model.inodes.contains_key(i));
        inos.sort_unstable();
        inos.dedup();
        self.check_attrs(&inos).map_err(|e| self.fail(e))?;
        if !self.light && m.is_ok() {
            for d in a.dirs_touched() {
                self.check_dir(d).map_err(|e| self.fail(e))?;
            }
        }
        Ok(reads)
    }

    /// Close and reopen (`crash`: drop without close, losing the delta),
    /// then compare the whole tree.
    pub fn reopen(&mut self, crash: bool) -> Result<(), String> {
        self.reopen_unchecked(crash)?;
        self.check_tree()
            .map_err(|e| format!("after {}: {e}", if crash { "crash" } else { "reopen" }))
    }

    /// Close (or crash) and open again, leaving the cache cold.
    pub fn reopen_unchecked(&mut self, crash: bool) -> Result<(), String> {
        let fs = self.fs.take().expect("volume is open");
        if crash {
            drop(fs);
            self.model = self.durable.clone();
        } else {
            fs.close().map_err(|e| format!("close: {e}"))?;
            self.durable = self.model.clone();
        }
        let d: Arc<dyn Device> = self.dev.clone();
        let fs = Fs::open(d, self.opts.clone()).map_err(|e| format!("reopen (crash {crash}): {e}"))?;
        if fs.xattr_space() != self.model.xattr_space {
            return Err(format!("xattr_space changed to {} on reopen", fs.xattr_space()));
        }
        self.fs = Some(fs);
        Ok(())
    }

    /// getattr of each of `inos` matches the model.
    pub fn check_attrs(&self, inos: &[Ino]) -> Result<(), String> {
        for &ino in inos {
            let e = errno(self.fs().getattr(ino)).map(|a| View::of(&a));
            let m = Ok(self.model.view(ino));
            if e != m {
                return Err(format!("getattr({ino}): engine {e:?}\n  model  {m:?}"));
            }
        }
        Ok(())
    }

    /// The entries of directory `dir`, by readdir and by lookup.
    pub fn check_dir(&self, dir: Ino) -> Result<(), String> {
        let Some(d) = self.model.inodes.get(&dir).filter(|d| d.is_dir()) else {
            return Ok(());
        };
        let want = self.model.readdir(dir).unwrap();
        let got =
            engine_readdir(self.fs(), dir, 1000, want.len()).map_err(|e| format!("readdir({dir}): {e:?}"))?;
        if got != want {
            let g: BTreeSet<_> = got
                .iter()
                .map(|(n, i, k)| (N(n.clone()), *i, k.dirent_code()))
                .collect();
            let w: BTreeSet<_> = want
                .iter()
                .map(|(n, i, k)| (N(n.clone()), *i, k.dirent_code()))
                .collect();
            let extra: Vec<_> = g.difference(&w).collect();
            let missing: Vec<_> = w.difference(&g).collect();
            let dups: Vec<_> = got
                .windows(2)
                .filter(|p| p[0].0 == p[1].0)
                .map(|p| N(p[0].0.clone()))
                .collect();
            return Err(format!(
                "readdir({dir}): {} entries vs {} in model; extra {extra:?}; missing {missing:?}; \
                 returned twice {dups:?}",
                got.len(),
                want.len()
            ));
        }
        for (name, &ino) in &d.entries {
            let e = errno(self.fs().lookup(dir, name)).map(|a| View::of(&a));
            if e != Ok(self.model.view(ino)) {
                return Err(format!(
                    "lookup({dir}, {:?}): engine {e:?}\n  model {:?}",
                    N(name.clone()),
                    self.model.view(ino)
                ));
            }
        }
        Ok(())
    }

    /// Contents of regular file `ino`: every written chunk, probes of the
    /// holes between them, and end of file.
    pub fn check_data(&self, ino: Ino) -> Result<(), String> {
        let n = &self.model.inodes[&ino];
        let mut probes: Vec<(u64, usize)> = Vec::new();
        let mut hole_start = 0;
        for &idx in n.data.keys() {
            let off = idx * CHUNK;
            if off > hole_start {
                probes.push((hole_start, 64));
                probes.push((off - 64.min(off - hole_start), 64));
            }
            probes.push((off, CHUNK as usize));
            hole_start = off + CHUNK;
        }
        if n.size > hole_start {
            probes.push((hole_start, 64));
            probes.push((n.size - 64.min(n.size - hole_start), 64));
        }
        probes.push((n.size, 100));
        probes.push((n.size.saturating_sub(1), 100));
        for (off, len) in probes {
            let e = errno(self.fs().read(ino, off, len)).map(|b| Outcome::Bytes(N(b)));
            let m = Ok(Outcome::Bytes(N(n.read_bytes(off, len))));
            if e != m {
                return Err(format!("read({ino}, {off}, {len}): {}", differ(&e, &m)));
            }
        }
        Ok(())
    }

    /// Everything: the namespace from the root, attributes, file contents,
    /// symlink targets and extended attributes of every inode.
    pub fn check_tree(&self) -> Result<(), String> {
        self.model
            .check_invariants()
            .map_err(|e| format!("model invariant: {e}"))?;
        for (&ino, n) in &self.model.inodes {
            self.check_attrs(&[ino])?;
            if n.is_dir() {
                self.check_dir(ino)?;
            }
            match n.kind {
                tux3::FileType::Regular => self.check_data(ino)?,
                tux3::FileType::Symlink => {
                    let e = errno(self.fs().readlink(ino));
                    if e.as_ref() != Ok(&n.target) {
                        return Err(format!(
                            "readlink({ino}): engine {:?} model {:?}",
                            e.map(N),
                            N(n.target.clone())
                        ));
                    }
                }
                _ => {}
            }
            let names = errno(self.fs().listxattr(ino));
            let want: Vec<Vec<u8>> = n.xattrs.keys().cloned().collect();
            if names.as_ref() != Ok(&want) {
                return Err(format!("listxattr({ino}): engine {names:?} model {want:?}"));
            }
            for (name, value) in &n.xattrs {
                let e: R<Vec<u8>> = errno(self.fs().getxattr(ino, name));
                if e.as_ref() != Ok(value) {
                    return Err(format!("getxattr({ino}, {:?}) differs", N(name.clone())));
                }
            }
        }
        Ok(())
    }
}
