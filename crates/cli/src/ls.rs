//! `tux3 ls [-l] [-R] [--paths] TARGET [PATH]`: list a directory of a volume
//! like `ls -1` (names sorted by bytes), `ls -l` (long rows) or `ls -R`
//! (recursive, one `PATH:` section per directory). `--paths` prints each
//! entry as a path relative to PATH instead, which with `-R` is the form
//! `find` prints. The image is opened read-only; symlinks are not followed.
//!
//! Calls the engine API ([`tux3::Fs`]) through the helpers in `image`.

use super::format::{format_local_time, mode_string};
use super::image::{join, open_read_only, read_dir_sorted, resolve_arg};
use super::{stdout_error, CliError};
use clap::Args;
use std::collections::HashSet;
use std::ffi::OsString;
use std::io::{BufWriter, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use tux3::types::{Attr, DirEntry, FileType, Ino};
use tux3::Fs;

/// Arguments of `tux3 ls`.
#[derive(Args, Debug)]
pub struct LsArgs {
    /// Long listing: mode, links, uid, gid, size, modification time, name
    #[arg(short = 'l')]
    pub long: bool,
    /// List subdirectories recursively
    #[arg(short = 'R')]
    pub recursive: bool,
    /// Print entries as paths relative to PATH, one per line (with -R: the
    /// whole tree, as `find` prints it)
    #[arg(long)]
    pub paths: bool,
    /// Image file or block device holding the volume
    pub target: PathBuf,
    /// Directory (or file) inside the volume
    #[arg(default_value = "/")]
    pub path: OsString,
}

/// One row of a long listing, before column alignment.
struct Row {
    mode: String,
    nlink: String,
    uid: String,
    gid: String,
    size: String,
    time: String,
    name: Vec<u8>,
    link: Option<Vec<u8>>,
}

/// The long-listing row of `attr`, shown under `name`.
fn long_row(fs: &Fs, attr: &Attr, name: &[u8]) -> tux3::Result<Row> {
    let size = match attr.kind {
        FileType::CharDevice | FileType::BlockDevice => {
            let rdev = attr.rdev as libc::dev_t;
            format!("{}, {}", libc::major(rdev), libc::minor(rdev))
        }
        _ => attr.size.to_string(),
    };
    let link = match attr.kind {
        FileType::Symlink => Some(fs.readlink(attr.ino)?),
        _ => None,
    };
    Ok(Row {
        mode: mode_string(attr.mode),
        nlink: attr.nlink.to_string(),
        uid: attr.uid.to_string(),
        gid: attr.gid.to_string(),
        size,
        time: format_local_time(attr.mtime),
        name: name.to_vec(),
        link,
    })
}

/// Write rows with their columns aligned (counts right, ids left).
fn write_rows(out: &mut impl Write, rows: &[Row]) -> std::io::Result<()> {
    let w = |f: fn(&Row) -> &String| rows.iter().map(|r| f(r).len()).max().unwrap_or(0);
    let (wn, wu, wg, ws) = (w(|r| &r.nlink), w(|r| &r.uid), w(|r| &r.gid), w(|r| &r.size));
    for r in rows {
        write!(
            out,
            "{} {:>wn$} {:<wu$} {:<wg$} {:>ws$} {} ",
            r.mode, r.nlink, r.uid, r.gid, r.size, r.time
        )?;
        out.write_all(&r.name)?;
        if let Some(target) = &r.link {
            out.write_all(b" -> ")?;
            out.write_all(target)?;
        }
        out.write_all(b"\n")?;
    }
    Ok(())
}

/// The lister: the volume, the options and the output.
struct Lister<'a, W: Write> {
    fs: &'a Fs,
    long: bool,
    out: W,
}

impl<W: Write> Lister<'_, W> {
    /// Print `entries`, each under its `name`.
    fn entries(&mut self, entries: &[DirEntry]) -> Result<(), CliError> {
        if self.long {
            let mut rows = Vec::with_capacity(entries.len());
            for e in entries {
                let row = self
                    .fs
                    .getattr(e.ino)
                    .and_then(|a| long_row(self.fs, &a, &e.name))
                    .map_err(|err| CliError::at(String::from_utf8_lossy(&e.name), err))?;
                rows.push(row);
            }
            write_rows(&mut self.out, &rows).map_err(stdout_error)
        } else {
            for e in entries {
                self.out.write_all(&e.name).map_err(stdout_error)?;
                self.out.write_all(b"\n").map_err(stdout_error)?;
            }
            Ok(())
        }
    }

    /// Entries of directory `ino`, whose path is `shown` in messages.
    fn read(&self, ino: Ino, shown: &[u8]) -> Result<Vec<DirEntry>, CliError> {
        read_dir_sorted(self.fs, ino).map_err(|e| CliError::at(String::from_utf8_lossy(shown), e))
    }

    /// `ls -R`: a `PATH:` header and the entries of each directory,
    /// depth first in name order, a blank line between sections.
    fn sections(&mut self, root: Ino, root_shown: &[u8]) -> Result<(), CliError> {
        let mut stack = vec![(root, root_shown.to_vec())];
        let mut seen = HashSet::new();
        let mut first = true;
        while let Some((ino, shown)) = stack.pop() {
            if !seen.insert(ino) {
                return Err(cycle(&shown));
            }
            if !first {
                self.out.write_all(b"\n").map_err(stdout_error)?;
            }
            first = false;
            self.out.write_all(&shown).map_err(stdout_error)?;
            self.out.write_all(b":\n").map_err(stdout_error)?;
            let entries = self.read(ino, &shown)?;
            self.entries(&entries)?;
            for e in entries.iter().rev().filter(|e| e.kind == FileType::Directory) {
                stack.push((e.ino, join(&shown, &e.name)));
            }
        }
        Ok(())
    }

    /// `ls -R --paths`: every entry under `root` as a relative path, each
    /// directory followed by its contents.
    fn tree_paths(&mut self, root: Ino, root_shown: &[u8]) -> Result<(), CliError> {
        let mut seen = HashSet::from([root]);
        // Each frame: a directory's relative path and its entries, reversed.
        let mut stack: Vec<(Vec<u8>, Vec<DirEntry>)> = Vec::new();
        let mut top = self.read(root, root_shown)?;
        top.reverse();
        stack.push((Vec::new(), top));
        while let Some((prefix, pending)) = stack.last_mut() {
            let Some(e) = pending.pop() else {
                stack.pop();
                continue;
            };
            let path = join(prefix, &e.name);
            let shown = DirEntry {
                name: path.clone(),
                ..e.clone()
            };
            self.entries(std::slice::from_ref(&shown))?;
            if e.kind == FileType::Directory {
                if !seen.insert(e.ino) {
                    return Err(cycle(&path));
                }
                let mut sub = self.read(e.ino, &path)?;
                sub.reverse();
                stack.push((path, sub));
            }
        }
        Ok(())
    }
}

fn cycle(shown: &[u8]) -> CliError {
    CliError::new(format!(
        "{}: directory already listed (a directory cycle: the volume is damaged)",
        String::from_utf8_lossy(shown)
    ))
}

/// `tux3 ls`.
pub fn run(args: &LsArgs) -> Result<u8, CliError> {
    let fs = open_read_only(&args.target)?;
    let path = args.path.as_bytes();
    let attr = resolve_arg(&fs, path)?;
    let stdout = std::io::stdout();
    let mut lister = Lister {
        fs: &fs,
        long: args.long,
        out: BufWriter::new(stdout.lock()),
    };
    if attr.kind != FileType::Directory {
        // Like ls: a non-directory lists itself under the name given.
        let entry = DirEntry {
            ino: attr.ino,
            kind: attr.kind,
            name: path.to_vec(),
            next: 0,
        };
        lister.entries(&[entry])?;
    } else if args.recursive && args.paths {
        lister.tree_paths(attr.ino, path)?;
    } else if args.recursive {
        lister.sections(attr.ino, path)?;
    } else {
        let entries = lister.read(attr.ino, path)?;
        lister.entries(&entries)?;
    }
    lister.out.flush().map_err(stdout_error)?;
    Ok(0)
}
