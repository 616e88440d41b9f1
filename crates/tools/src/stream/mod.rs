//! Send streams (`tux3 send`, `tux3 receive`): the byte format a snapshot
//! travels in, from one volume to another, as a plain byte stream (a pipe,
//! a file, ssh) read and written front to back with no seeking.
//!
//! A stream is a 16-byte preamble (magic `TUX3SEND`, version, checksum)
//! and numbered records, each with its own CRC32C: `Begin` (which
//! snapshot, from which base, where a resumed stream starts), the
//! operations that turn the base into the snapshot (namespace operations
//! on inodes named by number, then each changed inode's xattrs, data and
//! attributes), and `End`. docs/FORMAT.md section 15 gives every byte.
//!
//! This file owns the format's constants and the errors of sending and
//! receiving; `record.rs` the record kinds and their encoding, `frame.rs`
//! the preamble, the framing and its checks. `plan.rs` works out what an
//! incremental stream holds, `full.rs` reads a full one off the snapshot,
//! `send.rs` writes either (through `ahead.rs`, which reads ahead on the
//! device; `contents.rs` writes a changed inode's records,
//! `sent_blocks.rs` finds its clones), `receive.rs` applies it,
//! `resume.rs` keeps a cut receive's place. The format's files call only
//! the engine's value types and `crc32c`.

pub mod ahead;
mod contents;
mod frame;
pub mod full;
pub mod plan;
pub mod receive;
mod record;
pub mod resume;
pub mod send;
mod sent_blocks;

pub use frame::{preamble, Reader, Writer};
pub use record::{kind, Attrs, Begin, Record};

use std::fmt;
use std::io;

/// The first 8 bytes of every stream.
pub const MAGIC: &[u8; 8] = b"TUX3SEND";
/// The version this code writes and reads.
pub const VERSION: u32 = 1;
/// Bytes before the first record.
pub const PREAMBLE_LEN: usize = 16;
/// A record's bytes before its body.
pub const HEAD_LEN: usize = 16;
/// Largest body a record may have.
pub const MAX_BODY: usize = 1 << 20;
/// Most file bytes one `Write` record carries (a writer's choice: any
/// length from 1 to `MAX_BODY - 16` is valid).
pub const DATA_CHUNK: usize = 256 << 10;

/// Why a send or a receive stopped.
#[derive(Debug)]
pub enum StreamError {
    /// Reading or writing the stream itself failed.
    Io(io::Error),
    /// The stream does not start with the magic.
    NotAStream,
    /// The preamble's checksum is wrong.
    BadPreamble,
    /// A version this code does not read.
    Version(u32),
    /// The stream ended inside record `record`, which starts at byte `offset`.
    Cut { record: u64, offset: u64 },
    /// Record `record` (at byte `offset`) fails its checksum.
    Checksum { record: u64, offset: u64 },
    /// Record `record` (at byte `offset`) breaks the format.
    Malformed { record: u64, offset: u64, why: String },
    /// The stream or the target is not what the other side needs (base
    /// missing, name taken, another receive in progress...).
    Refused(String),
    /// The engine refused or failed an operation.
    Engine { what: String, err: tux3::Error },
}

impl fmt::Display for StreamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StreamError::Io(e) => write!(f, "{e}"),
            StreamError::NotAStream => write!(f, "not a tux3 send stream (no TUX3SEND magic)"),
            StreamError::BadPreamble => write!(f, "bad checksum in the stream's first 16 bytes"),
            StreamError::Version(v) => write!(
                f,
                "stream version {v} is not supported (this tux3 reads version {VERSION})"
            ),
            StreamError::Cut { record, offset } => {
                write!(f, "the stream ends inside record {record} (byte offset {offset})")
            }
            StreamError::Checksum { record, offset } => {
                write!(f, "bad checksum at record {record} (byte offset {offset})")
            }
            StreamError::Malformed { record, offset, why } => {
                write!(f, "bad record {record} (byte offset {offset}): {why}")
            }
            StreamError::Refused(why) => write!(f, "{why}"),
            StreamError::Engine { what, err } => write!(f, "{what}: {err}"),
        }
    }
}

impl std::error::Error for StreamError {}

impl StreamError {
    /// An engine error while doing `what`.
    pub fn engine(what: impl Into<String>) -> impl FnOnce(tux3::Error) -> StreamError {
        let what = what.into();
        move |err| StreamError::Engine { what, err }
    }

    /// Whether the stream's bytes are at fault (damaged, cut, not a
    /// stream), rather than the target or the engine.
    pub fn is_damage(&self) -> bool {
        matches!(
            self,
            StreamError::NotAStream
                | StreamError::BadPreamble
                | StreamError::Cut { .. }
                | StreamError::Checksum { .. }
                | StreamError::Malformed { .. }
        )
    }
}

pub type Result<T> = std::result::Result<T, StreamError>;
