//! tux3: a write-anywhere filesystem engine in the Tux3 design, in user
//! space. An image file or block device in, POSIX-like operations out
//! ([`Fs`]); the FUSE adapter, the `tux3` command and the crash harness are
//! crates of their own that build on this one.
//!
//! Layers, top to bottom. Each module imports only from the rows below it
//! (`scripts/check-layers.sh` checks every `crate::` path, in `make test`):
//!
//! ```text
//! api          Fs: lookup, create, read, write, rename, fsync, ...; open_path   (api/)
//! frontend     namespace ops and file I/O in cache, delta tagging, forking        (frontend/)
//! backend      delta commit, fsync commit, unify, allocator, log writer, mkfs     (backend/)
//! cache        data pages and inodes, dirty per delta                             (cache/)
//! structures   btree, inode table, extent trees, directories, bitmaps, superblock (structures/)
//! log          log blocks and records, replay reader                              (log/)
//! device       image file / block device, memory, recording; I/O counters         (device/)
//! base         value types, block codec, errors, memory budget
//!              (types.rs, codec.rs, error.rs, memory_budget.rs)
//! ```
//!
//! See `docs/ARCHITECTURE.md` for the vocabulary and `docs/FORMAT.md` for the
//! on-disk format.

// Library code returns errors; it never unwraps (tests may).
#![deny(clippy::unwrap_used, clippy::expect_used)]

pub mod api;
pub mod backend;
pub mod cache;
pub mod codec;
pub mod device;
pub mod error;
pub mod frontend;
pub mod log;
pub mod memory_budget;
pub mod structures;
pub mod types;

/// The loom models' one setting (`make loom`): every interleaving with up
/// to three preemptions (loom's usual bound: most concurrency bugs need
/// two or fewer).
#[cfg(all(test, feature = "loom"))]
pub(crate) fn loom_model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(f);
}

pub use api::{
    default_clean_limit, default_dir_leaf_limit, default_dirty_limit, default_inode_limit, open_path,
    usable_memory, DedupeRange, DefragOptions, DefragReport, Fs, ReadRange, Resized,
};
pub use error::{Errno, Error, Result};
pub use types::*;
