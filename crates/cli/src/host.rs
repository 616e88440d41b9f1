//! Reading the host side for `mkfs --from`: extended attributes through
//! libc (`llistxattr`, `lgetxattr`, never following symlinks), whole-chunk
//! reads and a quick count of a tree's entries for the progress bar.
//!
//! Calls only std and libc; nothing in the engine.

use std::ffi::CString;
use std::fs::{self, File};
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Number of entries under `dir` (not counting `dir`), for the progress bar.
pub fn count_entries(dir: &Path) -> u64 {
    let mut n = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = fs::read_dir(&d) else { continue };
        for entry in rd.flatten() {
            n += 1;
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(entry.path());
            }
        }
    }
    n
}

/// The extended attributes of `path` (not following a symlink), as
/// (name, value) pairs. A filesystem without xattrs gives none.
pub fn host_xattrs(path: &Path) -> io::Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path holds a NUL byte"))?;
    let names = loop {
        // SAFETY: `c` is a valid C string; a null buffer of size 0 asks for the size.
        let n = unsafe { libc::llistxattr(c.as_ptr(), std::ptr::null_mut(), 0) };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::ENOTSUP) => Ok(Vec::new()),
                _ => Err(e),
            };
        }
        if n == 0 {
            return Ok(Vec::new());
        }
        let mut buf = vec![0u8; n as usize];
        // SAFETY: `buf` is valid for `buf.len()` bytes.
        let m = unsafe { libc::llistxattr(c.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        if m >= 0 {
            buf.truncate(m as usize);
            break buf;
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ERANGE) {
            return Err(e);
        }
        // The list grew between the two calls: ask again.
    };
    let mut out = Vec::new();
    for name in names.split(|&b| b == 0).filter(|n| !n.is_empty()) {
        let cname = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidData))?;
        if let Some(value) = host_xattr(&c, &cname)? {
            out.push((name.to_vec(), value));
        }
    }
    Ok(out)
}

/// One attribute's value; `None` when it vanished meanwhile.
fn host_xattr(path: &CString, name: &CString) -> io::Result<Option<Vec<u8>>> {
    loop {
        // SAFETY: valid C strings; a null buffer of size 0 asks for the size.
        let n = unsafe { libc::lgetxattr(path.as_ptr(), name.as_ptr(), std::ptr::null_mut(), 0) };
        if n < 0 {
            let e = io::Error::last_os_error();
            return if e.raw_os_error() == Some(libc::ENODATA) {
                Ok(None)
            } else {
                Err(e)
            };
        }
        let mut buf = vec![0u8; n as usize];
        // SAFETY: `buf` is valid for `buf.len()` bytes.
        let m = unsafe { libc::lgetxattr(path.as_ptr(), name.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        if m >= 0 {
            buf.truncate(m as usize);
            return Ok(Some(buf));
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::ERANGE) => continue,
            Some(libc::ENODATA) => return Ok(None),
            _ => return Err(e),
        }
    }
}

/// Read until `buf` is full or the file ends; returns the bytes read.
pub fn read_full(file: &mut File, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match file.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}
