//! Base (bottom layer): error values for every layer — POSIX errors that the
//! API returns to callers, and structural errors (corruption, I/O) that carry
//! the block they concern.
//!
//! Bad input never panics: decoders return `Error::Corrupt` naming the block
//! and field, and the API maps it to `EIO` for callers that only speak errno.
//!
//! Calls nothing else in the crate.

use std::fmt;

/// A POSIX error number, as the kernel would return it.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Errno(pub i32);

impl Errno {
    pub const EPERM: Errno = Errno(libc::EPERM);
    pub const EACCES: Errno = Errno(libc::EACCES);
    pub const ENOENT: Errno = Errno(libc::ENOENT);
    pub const EIO: Errno = Errno(libc::EIO);
    pub const EEXIST: Errno = Errno(libc::EEXIST);
    pub const EXDEV: Errno = Errno(libc::EXDEV);
    pub const ENOTDIR: Errno = Errno(libc::ENOTDIR);
    pub const EISDIR: Errno = Errno(libc::EISDIR);
    pub const EINVAL: Errno = Errno(libc::EINVAL);
    pub const EFBIG: Errno = Errno(libc::EFBIG);
    pub const ENOSPC: Errno = Errno(libc::ENOSPC);
    pub const EMLINK: Errno = Errno(libc::EMLINK);
    pub const ERANGE: Errno = Errno(libc::ERANGE);
    pub const E2BIG: Errno = Errno(libc::E2BIG);
    pub const ESTALE: Errno = Errno(libc::ESTALE);
    pub const ENAMETOOLONG: Errno = Errno(libc::ENAMETOOLONG);
    pub const ENOTEMPTY: Errno = Errno(libc::ENOTEMPTY);
    pub const ENODATA: Errno = Errno(libc::ENODATA);
    pub const EROFS: Errno = Errno(libc::EROFS);
    pub const ENOTSUP: Errno = Errno(libc::ENOTSUP);
    pub const EBUSY: Errno = Errno(libc::EBUSY);
    pub const ENXIO: Errno = Errno(libc::ENXIO);
    pub const ENOSYS: Errno = Errno(libc::ENOSYS);
    pub const EOVERFLOW: Errno = Errno(libc::EOVERFLOW);
    pub const ENODEV: Errno = Errno(libc::ENODEV);

    /// The symbolic name (`ENOENT`), for messages and test output.
    pub fn name(self) -> &'static str {
        match self.0 {
            libc::EPERM => "EPERM",
            libc::ENOENT => "ENOENT",
            libc::EIO => "EIO",
            libc::EEXIST => "EEXIST",
            libc::EXDEV => "EXDEV",
            libc::ENOTDIR => "ENOTDIR",
            libc::EISDIR => "EISDIR",
            libc::EINVAL => "EINVAL",
            libc::EFBIG => "EFBIG",
            libc::ENOSPC => "ENOSPC",
            libc::EMLINK => "EMLINK",
            libc::ERANGE => "ERANGE",
            libc::E2BIG => "E2BIG",
            libc::ESTALE => "ESTALE",
            libc::ENAMETOOLONG => "ENAMETOOLONG",
            libc::ENOTEMPTY => "ENOTEMPTY",
            libc::ENODATA => "ENODATA",
            libc::EROFS => "EROFS",
            libc::ENOTSUP => "ENOTSUP",
            libc::EBUSY => "EBUSY",
            libc::ENXIO => "ENXIO",
            libc::ENODEV => "ENODEV",
            _ => "E?",
        }
    }
}

impl fmt::Debug for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.name())
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let msg = std::io::Error::from_raw_os_error(self.0).to_string();
        // io::Error appends " (os error N)"; the name already says which.
        let msg = msg.split(" (os error").next().unwrap_or("");
        write!(f, "{} ({})", self.name(), msg)
    }
}

/// Every failure the engine can report.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A POSIX error for the operation (ENOENT, EEXIST, ...).
    #[error("{0}")]
    Posix(Errno),
    /// A metadata or log block failed validation. `block` is its address.
    #[error("corrupt block {block}: {what}")]
    Corrupt { block: u64, what: String },
    /// The image is not a tux3 volume or cannot be used at all.
    #[error("{0}")]
    BadImage(String),
    /// What was asked for is not there (a snapshot by name); ENOENT.
    #[error("{0}")]
    NotFound(String),
    /// The operation is refused while something named holds what it needs
    /// (a shrink: the snapshots holding blocks past the new end); EBUSY.
    #[error("{0}")]
    Busy(String),
    /// The device failed.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// A data block read from the device does not match its checksum: the
    /// data is never returned (EIO).
    #[error("{0}")]
    BadData(Box<BadData>),
}

/// Where a data checksum mismatch was found: enough for one log line that
/// names the file, the offset, the block and both checksums.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadData {
    /// The file (0 when the reader did not know it).
    pub ino: u64,
    /// Logical block of the file.
    pub lblock: u64,
    /// Device block.
    pub pblock: u64,
    /// Generation the block was written in (snapshots from it on share it).
    pub birth: u32,
    pub expected: u32,
    pub found: u32,
}

impl fmt::Display for BadData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "data checksum mismatch: inode {} logical block {} device block {}: expected {:#010x}, found {:#010x}",
            self.ino, self.lblock, self.pblock, self.expected, self.found
        )
    }
}

impl Error {
    /// The errno a POSIX caller should see for this error.
    pub fn errno(&self) -> Errno {
        match self {
            Error::Posix(e) => *e,
            Error::NotFound(_) => Errno::ENOENT,
            Error::Busy(_) => Errno::EBUSY,
            Error::Corrupt { .. } | Error::BadImage(_) | Error::Io(_) | Error::BadData(_) => Errno::EIO,
        }
    }

    /// A corruption error for `block`.
    pub fn corrupt(block: u64, what: impl Into<String>) -> Error {
        Error::Corrupt {
            block,
            what: what.into(),
        }
    }
}

impl From<Errno> for Error {
    fn from(e: Errno) -> Error {
        Error::Posix(e)
    }
}

/// Result type of the whole crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Shorthand: `Err(Error::Posix(errno))`.
pub fn err<T>(e: Errno) -> Result<T> {
    Err(Error::Posix(e))
}
