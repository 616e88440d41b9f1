//! The `names_fsync` workload: fast fsyncs next to name changes, in the
//! root and in `/p` and `/q` (made durable first). Over five names per
//! directory, each step picks one of: create, write and (mostly) fsync a
//! file; rename a file over another one or onto a free name, in its
//! directory or across `/p` and `/q`, often followed by an fsync of the
//! renamed file, of a new file taking its old name (the cycle of
//! `rename_over`) or of a directory; unlink a file, then fsync its
//! directory or create the name again and fsync it; link a file into
//! another directory and fsync it; write to a file and fsync it, or not;
//! make a directory (maybe two levels deep, maybe an empty sibling too) in
//! `/p` or `/q` and fsync a new file in it, or the directory; open or release a handle (files open
//! across an unlink or a rename over them become orphans). One step in
//! fifteen starts with a sync. Every call must succeed: the workload picks
//! valid ones.

use super::{fill, resolve, size_of};
use crate::record::Recorder;
use crate::Rng;
use tux3::error::{Error, Result};
use tux3::types::{Ino, RenameFlags};

/// Directories (relative to the root) and names per directory.
const DIRS: [&str; 3] = ["", "p", "q"];
const NAMES: u64 = 5;
/// Recorded calls, about.
const CALLS: usize = 120;

/// Record the workload.
pub(super) fn names_fsync(rec: &mut Recorder, rng: &mut Rng) -> Result<()> {
    let mut w = Run {
        rec,
        rng,
        calls: 0,
        open: Vec::new(),
    };
    for d in ["p", "q"] {
        let root = w.dir("")?;
        w.op(format!("mkdir /{d}"), |fs| {
            fs.mkdir(root, d.as_bytes(), 0o755, 0, 0)
        })?;
    }
    w.sync()?;
    while w.calls < CALLS {
        if w.rng.below(15) == 0 {
            w.sync()?;
        }
        match w.rng.below(22) {
            0..=4 => w.create_fsync()?,
            5..=8 => w.rename()?,
            9..=11 => w.recreate()?,
            12 | 13 => w.link()?,
            14..=16 => w.write(true)?,
            17 => w.write(false)?,
            18 | 19 => w.nest()?,
            20 => {
                if let Some((d, n, ino)) = w.pick_file() {
                    w.hold(ino, &path(d, n))?;
                }
            }
            _ => w.release_one()?,
        }
    }
    while !w.open.is_empty() {
        w.release_one()?;
    }
    Ok(())
}

/// `/dir/name`.
fn path(d: &str, n: u64) -> String {
    if d.is_empty() {
        format!("/f{n}")
    } else {
        format!("/{d}/f{n}")
    }
}

/// The workload's state: the recorder, the random numbers, the calls made
/// and the handles held open.
struct Run<'a> {
    rec: &'a mut Recorder,
    rng: &'a mut Rng,
    calls: usize,
    open: Vec<Ino>,
}

impl Run<'_> {
    /// One recorded call, which must succeed.
    fn op<T: std::fmt::Debug>(
        &mut self,
        desc: String,
        f: impl FnOnce(&tux3::api::Fs) -> Result<T>,
    ) -> Result<T> {
        self.calls += 1;
        self.rec.op(desc, false, f)
    }

    fn fsync(&mut self, ino: Ino) -> Result<()> {
        self.calls += 1;
        self.rec.fsync(ino)
    }

    fn sync(&mut self) -> Result<()> {
        self.calls += 1;
        self.rec.op("sync", true, |fs| fs.sync())
    }

    /// Mostly true: whether to fsync after a change.
    fn mostly(&mut self) -> bool {
        self.rng.below(5) != 0
    }

    fn dir(&self, d: &str) -> Result<Ino> {
        resolve(self.rec, d).ok_or_else(|| Error::BadImage(format!("no directory /{d}")))
    }

    fn at(&self, d: &str, n: u64) -> Option<Ino> {
        resolve(self.rec, &path(d, n))
    }

    /// A random existing file: (directory, name, inode).
    fn pick_file(&mut self) -> Option<(&'static str, u64, Ino)> {
        let files: Vec<_> = DIRS
            .iter()
            .flat_map(|d| (0..NAMES).map(move |n| (*d, n)))
            .filter_map(|(d, n)| self.at(d, n).map(|ino| (d, n, ino)))
            .collect();
        (!files.is_empty()).then(|| files[self.rng.below(files.len() as u64) as usize])
    }

    /// A random free name in `d`.
    fn pick_free(&mut self, d: &str) -> Option<u64> {
        let free: Vec<u64> = (0..NAMES).filter(|&n| self.at(d, n).is_none()).collect();
        (!free.is_empty()).then(|| free[self.rng.below(free.len() as u64) as usize])
    }

    /// Create `d/fn` and write 1 to 9000 bytes to it.
    fn create_write(&mut self, d: &str, n: u64) -> Result<Ino> {
        let parent = self.dir(d)?;
        self.create_write_in(parent, &path(d, n), &format!("f{n}"), 9000)
    }

    /// Create `name` in directory `parent` (whose path is that of `p`, the
    /// new file's) and write 1 to `max` bytes to it.
    fn create_write_in(&mut self, parent: Ino, p: &str, name: &str, max: u64) -> Result<Ino> {
        let ino = self
            .op(format!("create {p}"), |fs| {
                fs.create(parent, name.as_bytes(), 0o644, 0, 0)
            })?
            .ino;
        let data = fill(self.rng.next(), 1 + self.rng.below(max) as usize);
        self.op(format!("write {p} 0+{}", data.len()), |fs| {
            fs.write(ino, 0, &data)
        })?;
        Ok(ino)
    }

    /// Create and write a file at a free name, and mostly fsync it.
    fn create_fsync(&mut self) -> Result<()> {
        let d = DIRS[self.rng.below(3) as usize];
        let Some(n) = self.pick_free(d) else {
            return self.write(true);
        };
        let ino = self.create_write(d, n)?;
        if self.mostly() {
            self.fsync(ino)?;
        }
        Ok(())
    }

    /// Rename a file over another one or onto a free name, in its directory
    /// or across `/p` and `/q`; then fsync the renamed file, or create a new
    /// file at the old name and fsync that, or fsync one of the directories,
    /// or none.
    fn rename(&mut self) -> Result<()> {
        let Some((d, n, ino)) = self.pick_file() else {
            return self.create_fsync();
        };
        let to_dir = match d {
            "p" if self.rng.below(3) == 0 => "q",
            "q" if self.rng.below(3) == 0 => "p",
            _ => d,
        };
        let to = self.rng.below(NAMES);
        let over = self.at(to_dir, to);
        if (to_dir, to) == (d, n) || over == Some(ino) {
            // The same name, or another name of the same file.
            return self.write(true);
        }
        if let Some(old) = over {
            if self.rng.below(4) == 0 {
                self.hold(old, &path(to_dir, to))?;
            }
        }
        let (parent, new_parent) = (self.dir(d)?, self.dir(to_dir)?);
        let (name, new_name) = (format!("f{n}"), format!("f{to}"));
        self.op(format!("rename {} -> {}", path(d, n), path(to_dir, to)), |fs| {
            fs.rename(
                parent,
                name.as_bytes(),
                new_parent,
                new_name.as_bytes(),
                RenameFlags::default(),
            )
        })?;
        match self.rng.below(6) {
            0 => self.fsync(ino),
            1 | 2 => {
                let new = self.create_write(d, n)?;
                self.fsync(new)
            }
            // The directory the file went to (or came from): its changed
            // entries go with it.
            3 => self.fsync(new_parent),
            4 => self.fsync(parent),
            _ => Ok(()),
        }
    }

    /// Unlink a file (sometimes held open), then either fsync its
    /// directory, or create the name again and mostly fsync the new file.
    fn recreate(&mut self) -> Result<()> {
        let Some((d, n, ino)) = self.pick_file() else {
            return self.create_fsync();
        };
        let p = path(d, n);
        if self.rng.below(3) == 0 {
            self.hold(ino, &p)?;
        }
        let (parent, name) = (self.dir(d)?, format!("f{n}"));
        self.op(format!("unlink {p}"), |fs| fs.unlink(parent, name.as_bytes()))?;
        if self.rng.below(4) == 0 {
            return self.fsync(parent);
        }
        let new = self.create_write(d, n)?;
        if self.mostly() {
            self.fsync(new)?;
        }
        Ok(())
    }

    /// Link a file into another directory at a free name; mostly fsync it.
    fn link(&mut self) -> Result<()> {
        let Some((d, n, ino)) = self.pick_file() else {
            return self.create_fsync();
        };
        let to_dir = match d {
            "p" => "q",
            "q" => "p",
            _ => DIRS[1 + self.rng.below(2) as usize],
        };
        let Some(to) = self.pick_free(to_dir) else {
            return self.write(true);
        };
        let (new_parent, new_name) = (self.dir(to_dir)?, format!("f{to}"));
        self.op(format!("link {} -> {}", path(d, n), path(to_dir, to)), |fs| {
            fs.link(ino, new_parent, new_name.as_bytes())
        })?;
        if self.mostly() {
            self.fsync(ino)?;
        }
        Ok(())
    }

    /// Write 1 to 9000 bytes into a file (within or at its end), then
    /// fsync it if `fsync` (mostly).
    fn write(&mut self, fsync: bool) -> Result<()> {
        let Some((d, n, ino)) = self.pick_file() else {
            return self.create_fsync();
        };
        let at = self.rng.below(size_of(self.rec, ino) + 1);
        let data = fill(self.rng.next(), 1 + self.rng.below(9000) as usize);
        let p = path(d, n);
        self.op(format!("write {p} {at}+{}", data.len()), |fs| {
            fs.write(ino, at, &data)
        })?;
        if fsync && self.mostly() {
            self.fsync(ino)?;
        }
        Ok(())
    }

    /// Open a handle on `ino` (at `p`), kept until released.
    /// Make a directory in `/p` or `/q` (nested one level more at times)
    /// unless it exists, create a file in it and fsync the file (or the
    /// directory): new directories go with it.
    fn nest(&mut self) -> Result<()> {
        let d = DIRS[1 + self.rng.below(2) as usize];
        let mut dir = format!("/{d}/s{}", self.rng.below(3));
        if self.rng.below(3) == 0 {
            self.ensure_dir(&dir)?;
            dir = format!("{dir}/t");
        }
        let ino = self.ensure_dir(&dir)?;
        let name = format!("g{}", self.rng.next() % 1000);
        let p = format!("{dir}/{name}");
        if resolve(self.rec, &p).is_some() {
            return self.fsync(ino);
        }
        let file = self.create_write_in(ino, &p, &name, 5000)?;
        if self.rng.below(2) == 0 {
            // An empty sibling: its parent's link count counts it too.
            let sibling = format!("/{d}/u{}", self.rng.below(3));
            self.ensure_dir(&sibling)?;
        }
        match self.rng.below(4) {
            0 => self.fsync(ino),
            _ => self.fsync(file),
        }
    }

    /// The directory at absolute `path`, made (in an existing parent) if
    /// absent.
    fn ensure_dir(&mut self, path: &str) -> Result<Ino> {
        if let Some(ino) = resolve(self.rec, path) {
            return Ok(ino);
        }
        let cut = path.rfind('/').unwrap_or(0);
        let parent = resolve(self.rec, &path[..cut])
            .ok_or_else(|| Error::BadImage(format!("no directory {}", &path[..cut])))?;
        let name = path[cut + 1..].to_string();
        Ok(self
            .op(format!("mkdir {path}"), |fs| {
                fs.mkdir(parent, name.as_bytes(), 0o755, 0, 0)
            })?
            .ino)
    }

    fn hold(&mut self, ino: Ino, p: &str) -> Result<()> {
        self.op(format!("open {p}"), |fs| fs.open_handle(ino))?;
        self.open.push(ino);
        Ok(())
    }

    /// Release the oldest handle held, if any.
    fn release_one(&mut self) -> Result<()> {
        if self.open.is_empty() {
            return Ok(());
        }
        let ino = self.open.remove(0);
        self.op(format!("release ino {ino}"), |fs| fs.release_handle(ino))
    }
}
