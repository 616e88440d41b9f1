//! tux3: a write-anywhere filesystem in the Tux3 design, in user space.
//!
//! Layers, top to bottom (each module calls only the ones below it):
//!
//! ```text
//! api         Fs: lookup, create, read, write, rename, fsync, ...   (api/)
//! frontend    namespace ops and file I/O in cache, delta tagging  (frontend/)
//! cache       data pages and inodes, dirty per delta               (cache/)
//! backend     delta commit, unify, allocator, mkfs                 (backend/)
//! structures  btree, inode table, extents, directories, bitmap     (structures/)
//! log         log blocks and records, replay reader                (log/)
//! device      image file / block device, memory, recording         (device/)
//! ```
//!
//! The offline tools (`fsck`, `dump`) read a volume through the same layers.
//! See `docs/ARCHITECTURE.md` for the vocabulary and `docs/FORMAT.md` for the
//! on-disk format.

pub mod api;
pub mod backend;
pub mod cache;
pub mod device;
pub mod error;
pub mod frontend;
pub mod log;
pub mod structures;

pub use api::types::*;
pub use api::{default_dirty_limit, usable_memory, Fs};
pub use error::{Errno, Error, Result};
