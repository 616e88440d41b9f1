//! Offline tools that read a volume through the engine's layers: the
//! checker (`fsck`) and the structure report (`dump`).

// Library code returns errors; it never unwraps (tests may).
#![deny(clippy::unwrap_used, clippy::expect_used)]

pub mod dump;
pub mod fsck;
pub mod graph;
