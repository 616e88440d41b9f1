//! Shared by the commands that read a volume (`ls`, `cat`, `readlink`):
//! opening an image read-only, resolving a path inside it without following
//! symlinks, and reading a whole directory.
//!
//! Calls [`tux3::open_path`] and the engine API [`tux3::Fs`].

use super::CliError;
use std::path::Path;
use tux3::error::{Errno, Error};
use tux3::open_path;
use tux3::types::{Attr, DirEntry, FileType, Ino, OpenOptions, NAME_MAX, ROOT_INO};
use tux3::Fs;

/// A message for an error opening the image at `path`. `BadImage` messages
/// already name the path.
pub fn image_error(path: &Path, e: Error) -> CliError {
    match e {
        Error::BadImage(msg) => CliError::new(msg),
        other => CliError::at(path.display(), other),
    }
}

/// Open the volume at `path` read-only: nothing is ever written to it.
pub fn open_read_only(path: &Path) -> Result<Fs, CliError> {
    let dev = open_path(path, false).map_err(|e| image_error(path, e))?;
    let opts = OpenOptions {
        read_only: true,
        ..Default::default()
    };
    Fs::open(dev, opts).map_err(|e| image_error(path, e))
}

/// The components of a path inside a volume, without empty ones and `.`
/// (`..` is kept). `/a//b/./c/` gives `a`, `b`, `c`.
pub fn split_path(path: &[u8]) -> Vec<&[u8]> {
    path.split(|&b| b == b'/')
        .filter(|c| !c.is_empty() && *c != b".")
        .collect()
}

/// Resolve `path` (relative to the root; a leading `/` is optional) to its
/// attributes. No symlink is followed; `..` goes up lexically and never above
/// the root. A component after a non-directory gives ENOTDIR, as does a
/// trailing `/` after one.
pub fn resolve(fs: &Fs, path: &[u8]) -> tux3::Result<Attr> {
    let mut stack = vec![fs.getattr(ROOT_INO)?];
    for comp in split_path(path) {
        let top = stack.last().ok_or(Error::Posix(Errno::EIO))?;
        if top.kind != FileType::Directory {
            return Err(Error::Posix(Errno::ENOTDIR));
        }
        if comp == b".." {
            if stack.len() > 1 {
                stack.pop();
            }
            continue;
        }
        if comp.len() > NAME_MAX {
            return Err(Error::Posix(Errno::ENAMETOOLONG));
        }
        let attr = fs.lookup(top.ino, comp)?;
        stack.push(attr);
    }
    let attr = stack.pop().ok_or(Error::Posix(Errno::EIO))?;
    if path.ends_with(b"/") && attr.kind != FileType::Directory {
        return Err(Error::Posix(Errno::ENOTDIR));
    }
    Ok(attr)
}

/// Resolve a path given on the command line, with an error naming it.
pub fn resolve_arg(fs: &Fs, path: &[u8]) -> Result<Attr, CliError> {
    resolve(fs, path).map_err(|e| CliError::at(String::from_utf8_lossy(path), e))
}

/// Entries read per `readdir` call.
const READDIR_BATCH: usize = 512;

/// Every entry of directory `ino`, sorted by name bytes.
pub fn read_dir_sorted(fs: &Fs, ino: Ino) -> tux3::Result<Vec<DirEntry>> {
    let mut entries = Vec::new();
    let mut pos = 0u64;
    loop {
        let batch = fs.readdir(ino, pos, READDIR_BATCH)?;
        let Some(last) = batch.last() else { break };
        if last.next == pos {
            // The position did not move: a broken directory would loop forever.
            return Err(Error::corrupt(
                0,
                format!("readdir of inode {ino} makes no progress at position {pos}"),
            ));
        }
        pos = last.next;
        entries.extend(batch);
    }
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(entries)
}

/// `dir/name` as bytes, without doubling a `/`.
pub fn join(dir: &[u8], name: &[u8]) -> Vec<u8> {
    let mut p = dir.to_vec();
    if !p.is_empty() && !p.ends_with(b"/") {
        p.push(b'/');
    }
    p.extend_from_slice(name);
    p
}
