//! Offline tools that read a volume through the engine's layers: the
//! checker (`fsck`), the structure report (`dump`) and the structure graph
//! (`graph`), sharing the blocks files hold twice (`dedupe`), the difference between two snapshots (`snapdiff`) and the
//! send streams that replicate snapshots (`stream`: `tux3 send|receive`). A crate of its own (tux3-tools) above the engine: it opens a
//! volume through the backend, as a mount does (replay, writing nothing),
//! and reads it with the structures', log's and device's decoders; only
//! `fsck --repair` changes a volume, through the frontend's repair hooks.
//! `datamap` gives every tool a file's extents, whether its inode record
//! holds them or an extent tree does.

// Library code returns errors; it never unwraps (tests may).
#![deny(clippy::unwrap_used, clippy::expect_used)]

pub mod datamap;
pub mod dedupe;
pub mod dump;
pub mod fsck;
pub mod graph;
pub mod scrub;
pub mod snapdiff;
pub mod stream;
