//! `mkfs --from DIR`: copy a host directory tree into an open volume —
//! regular files (streamed in 1 MiB chunks, all-zero chunks left as holes),
//! directories, symlinks, fifos, devices and sockets, hard links, modes,
//! owners, times and extended attributes. Directory times are set after
//! their contents. Every error names the host path that failed.
//!
//! Calls the engine API ([`tux3::Fs`]); reads the host through `host`.

use super::host::{count_entries, host_xattrs, read_full};
use super::CliError;
use indicatif::{ProgressBar, ProgressStyle};
use std::collections::HashMap;
use std::ffi::OsString;
use std::fs::{self, File, Metadata};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use tux3::error::{Errno, Error};
use tux3::frontend::acl::{ACL_ACCESS, ACL_DEFAULT};
use tux3::types::{Ino, SetAttr, Timespec, XattrMode, ROOT_INO};
use tux3::Fs;

/// Bytes copied per engine write.
const CHUNK: usize = 1 << 20;

/// What was copied.
#[derive(Debug, Clone, Default)]
pub struct ImportStats {
    pub files: u64,
    pub bytes: u64,
    pub dirs: u64,
    pub symlinks: u64,
    pub special: u64,
    pub hard_links: u64,
    pub xattrs_skipped: u64,
}

/// Work still to do: copy a host entry, or finish a directory whose
/// contents are all copied.
enum Work {
    Visit {
        host: PathBuf,
        parent: Ino,
        name: OsString,
    },
    Finish {
        host: PathBuf,
        ino: Ino,
        meta: Metadata,
    },
}

/// Progress bar (only on a terminal) and warnings that do not garble it.
struct Reporter {
    bar: Option<ProgressBar>,
}

impl Reporter {
    fn warn(&self, msg: String) {
        let msg = super::strip_os_error(msg);
        let print = || eprintln!("tux3 mkfs: warning: {msg}");
        match &self.bar {
            Some(bar) => bar.suspend(print),
            None => print(),
        }
    }
    fn tick(&self) {
        if let Some(bar) = &self.bar {
            bar.inc(1);
        }
    }
}

fn host_err(host: &Path, e: impl std::fmt::Display) -> CliError {
    CliError::at(host.display(), e)
}

fn engine_err(host: &Path, what: &str, e: Error) -> CliError {
    CliError::new(format!("{}: {what}: {e}", host.display()))
}

fn time(sec: i64, nsec: i64) -> Timespec {
    Timespec {
        sec,
        nsec: nsec.clamp(0, 999_999_999) as u32,
    }
}

/// The host's atime, mtime and ctime of `meta`, as a setattr.
fn times_of(meta: &Metadata) -> SetAttr {
    SetAttr {
        // A directory's default ACL narrows the mode a file is made with:
        // the host's is put back (a symlink's is always 0777).
        mode: (!meta.file_type().is_symlink()).then_some(meta.mode() & 0o7777),
        atime: Some(time(meta.atime(), meta.atime_nsec())),
        mtime: Some(time(meta.mtime(), meta.mtime_nsec())),
        ctime: Some(time(meta.ctime(), meta.ctime_nsec())),
        ..Default::default()
    }
}

/// The copier's state.
struct Importer<'a> {
    fs: &'a Fs,
    /// (host dev, host ino) of the image itself, never copied.
    skip: Option<(u64, u64)>,
    /// First copy of each host inode with several links.
    links: HashMap<(u64, u64), Ino>,
    buf: Vec<u8>,
    stats: ImportStats,
    report: Reporter,
}

impl Importer<'_> {
    /// Copy the contents of host file `host` into `ino`; returns its size.
    fn copy_data(&mut self, ino: Ino, host: &Path) -> Result<u64, CliError> {
        let mut file = File::open(host).map_err(|e| host_err(host, e))?;
        let mut offset = 0u64;
        let mut written_end = 0u64;
        loop {
            let n = read_full(&mut file, &mut self.buf).map_err(|e| host_err(host, e))?;
            if n == 0 {
                break;
            }
            let chunk = &self.buf[..n];
            if chunk.iter().any(|&b| b != 0) {
                self.fs
                    .write(ino, offset, chunk)
                    .map_err(|e| engine_err(host, &format!("write at offset {offset}"), e))?;
                written_end = offset + n as u64;
            }
            offset += n as u64;
            if n < self.buf.len() {
                break;
            }
        }
        if offset > written_end {
            // Trailing zeros were skipped as a hole: set the size.
            let set = SetAttr {
                size: Some(offset),
                ..Default::default()
            };
            self.fs
                .setattr(ino, &set)
                .map_err(|e| engine_err(host, "set size", e))?;
        }
        Ok(offset)
    }

    /// Copy the host's extended attributes of `host` to `ino`. Attributes
    /// the host will not read or the engine refuses are skipped with a warning.
    fn copy_xattrs(&mut self, ino: Ino, host: &Path) -> Result<(), CliError> {
        let attrs = match host_xattrs(host) {
            Ok(a) => a,
            Err(e) => {
                self.report
                    .warn(format!("{}: extended attributes not read: {e}", host.display()));
                self.stats.xattrs_skipped += 1;
                return Ok(());
            }
        };
        // What the directory's default ACL gave and the host file has not
        // is taken away again.
        for acl in [ACL_ACCESS, ACL_DEFAULT] {
            if !attrs.iter().any(|(n, _)| n == acl) {
                match self.fs.removexattr(ino, acl) {
                    Ok(()) | Err(Error::Posix(Errno::ENODATA)) => {}
                    Err(e) => return Err(engine_err(host, "remove an inherited ACL", e)),
                }
            }
        }
        for (name, value) in attrs {
            match self.fs.setxattr(ino, &name, &value, XattrMode::Any) {
                Ok(()) => {}
                Err(Error::Posix(errno)) => {
                    let shown = String::from_utf8_lossy(&name);
                    self.report.warn(format!(
                        "{}: extended attribute {shown} not copied: {errno}",
                        host.display()
                    ));
                    self.stats.xattrs_skipped += 1;
                }
                Err(e) => return Err(engine_err(host, "set extended attribute", e)),
            }
        }
        Ok(())
    }

    fn set_attr(&self, ino: Ino, host: &Path, set: &SetAttr) -> Result<(), CliError> {
        self.fs
            .setattr(ino, set)
            .map(|_| ())
            .map_err(|e| engine_err(host, "set attributes", e))
    }

    /// Push a `Visit` for each entry of host directory `host`, so that they
    /// pop in name order.
    fn push_children(&self, work: &mut Vec<Work>, host: &Path, ino: Ino) -> Result<(), CliError> {
        let mut names = Vec::new();
        for entry in fs::read_dir(host).map_err(|e| host_err(host, e))? {
            names.push(entry.map_err(|e| host_err(host, e))?.file_name());
        }
        names.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
        for name in names.into_iter().rev() {
            work.push(Work::Visit {
                host: host.join(&name),
                parent: ino,
                name,
            });
        }
        Ok(())
    }

    /// Copy one host entry (not a directory's contents).
    fn visit(
        &mut self,
        work: &mut Vec<Work>,
        host: PathBuf,
        parent: Ino,
        name: OsString,
    ) -> Result<(), CliError> {
        let meta = fs::symlink_metadata(&host).map_err(|e| host_err(&host, e))?;
        let key = (meta.dev(), meta.ino());
        if Some(key) == self.skip {
            self.report
                .warn(format!("{}: the target image itself; not copied", host.display()));
            return Ok(());
        }
        let fs = self.fs;
        let name = name.as_bytes();
        let (mode, uid, gid) = (meta.mode(), meta.uid(), meta.gid());
        let kind = meta.file_type();
        if kind.is_dir() {
            let attr = fs
                .mkdir(parent, name, mode & 0o7777, uid, gid)
                .map_err(|e| engine_err(&host, "mkdir", e))?;
            self.copy_xattrs(attr.ino, &host)?;
            self.stats.dirs += 1;
            self.report.tick();
            // Finish is pushed first so that it pops after all the children.
            work.push(Work::Finish {
                host: host.clone(),
                ino: attr.ino,
                meta,
            });
            self.push_children(work, &host, attr.ino)?;
            return Ok(());
        }
        if meta.nlink() > 1 {
            if let Some(&first) = self.links.get(&key) {
                fs.link(first, parent, name)
                    .map_err(|e| engine_err(&host, "link", e))?;
                // A new link changes ctime: put the host's back.
                self.set_attr(first, &host, &times_of(&meta))?;
                self.stats.hard_links += 1;
                self.report.tick();
                return Ok(());
            }
        }
        let ino = if kind.is_file() {
            let attr = fs
                .create(parent, name, mode & 0o7777, uid, gid)
                .map_err(|e| engine_err(&host, "create", e))?;
            self.stats.bytes += self.copy_data(attr.ino, &host)?;
            self.stats.files += 1;
            attr.ino
        } else if kind.is_symlink() {
            let target = fs::read_link(&host).map_err(|e| host_err(&host, e))?;
            let attr = fs
                .symlink(parent, name, target.as_os_str().as_bytes(), uid, gid)
                .map_err(|e| engine_err(&host, "symlink", e))?;
            self.stats.symlinks += 1;
            attr.ino
        } else {
            // Fifo, character or block device, socket.
            let attr = fs
                .mknod(parent, name, mode, meta.rdev(), uid, gid)
                .map_err(|e| engine_err(&host, "mknod", e))?;
            self.stats.special += 1;
            attr.ino
        };
        self.copy_xattrs(ino, &host)?;
        self.set_attr(ino, &host, &times_of(&meta))?;
        if meta.nlink() > 1 {
            self.links.insert(key, ino);
        }
        self.report.tick();
        Ok(())
    }
}

/// Copy the tree under host directory `src` into the root of `fs`. The root
/// takes `src`'s mode, owner, times and xattrs. `skip` names a host file
/// (dev, ino) never to copy (the image itself).
pub fn import_tree(
    fs: &Fs,
    src: &Path,
    skip: Option<(u64, u64)>,
    progress: bool,
) -> Result<ImportStats, CliError> {
    let bar = progress.then(|| {
        let bar = ProgressBar::new(count_entries(src));
        let style = ProgressStyle::with_template("{elapsed_precise} [{wide_bar}] {pos}/{len} files")
            .unwrap_or_else(|_| ProgressStyle::default_bar());
        bar.set_style(style);
        bar
    });
    let mut imp = Importer {
        fs,
        skip,
        links: HashMap::new(),
        buf: vec![0u8; CHUNK],
        stats: ImportStats::default(),
        report: Reporter { bar },
    };
    let meta = fs::metadata(src).map_err(|e| host_err(src, e))?;
    imp.copy_xattrs(ROOT_INO, src)?;
    let mut work = vec![Work::Finish {
        host: src.to_path_buf(),
        ino: ROOT_INO,
        meta,
    }];
    imp.push_children(&mut work, src, ROOT_INO)?;
    while let Some(item) = work.pop() {
        match item {
            Work::Visit { host, parent, name } => imp.visit(&mut work, host, parent, name)?,
            Work::Finish { host, ino, meta } => {
                let mut set = times_of(&meta);
                if ino == ROOT_INO {
                    set.mode = Some(meta.mode() & 0o7777);
                    set.uid = Some(meta.uid());
                    set.gid = Some(meta.gid());
                }
                imp.set_attr(ino, &host, &set)?;
            }
        }
    }
    if let Some(bar) = &imp.report.bar {
        bar.finish_and_clear();
    }
    Ok(imp.stats)
}
