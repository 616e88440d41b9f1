//! Log layer, below structures and above the device: the records a delta
//! commit writes instead of rewriting parents and
//! bitmaps, the log blocks that carry them, and the chain reader that finds
//! every committed delta since the last unify.
//!
//! The log is a forward chain. Each block names the address reserved for
//! the block after it, carries a sequence number one above its predecessor
//! and the checksum of its predecessor, and the last block of a delta has
//! the COMMIT flag. Recovery follows the chain from the head named in the
//! superblock until a block fails any check: that is the end of the log, and
//! a delta counts only if its COMMIT block was reached. No superblock write
//! is needed per delta.
//!
//! May call the device layer (the chain reader reads blocks) and the base
//! modules (codec, error); the backend's log writer encodes into it.

#![deny(clippy::arithmetic_side_effects, clippy::indexing_slicing)]

pub mod block;
pub mod chain;
pub mod drop_run;
pub mod record;

pub use block::LogBlock;
pub use chain::{read_chain, read_chain_with, Chain, Tail};
pub use drop_run::push_drop;
pub use record::Record;
