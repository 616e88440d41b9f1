//! Offline tools that read a volume through the engine's layers: the
//! checker (`fsck`) and the structure report (`dump`).

pub mod dump;
pub mod fsck;
pub mod graph;
