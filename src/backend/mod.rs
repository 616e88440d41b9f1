//! Backend: everything that changes media. Delta commit, unify, the block
//! allocator, and mkfs. Calls structures, log and device.
pub mod mkfs;
