//! Backend layer: mkfs writes an empty volume — a unified image with no log.
//!
//! Layout of a new volume: blocks 0 and 1 superblocks, then bitmap block
//! 0 (the bitmap is sparse: the other bitmap blocks, all clear, are holes
//! of the bitmap file), then the bitmap file's extent leaf, the inode-table
//! leaf holding the root directory, and the reserved log head (zeroed).
//! Everything after that is free, so mkfs takes the same time at any size.
//!
//! Calls structures (superblock, bitmap, btree leaves) and the device.

use super::alloc::Allocator;
use super::BITMAP_INO;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::structures::btree::{Tree, TreeKind};
use crate::structures::inode::InodeAttrs;
use crate::structures::superblock::{Root, Superblock, MAX_BLOCK_SIZE, MIN_BLOCK_SIZE};
use crate::structures::{bitmap, extent};
use crate::types::{FormatOptions, Timespec, ROOT_INO};

/// Smallest volume mkfs accepts, in blocks.
pub const MIN_BLOCKS: u64 = 64;

/// Write a fresh volume to `dev`.
pub fn format(dev: &dyn Device, opts: &FormatOptions) -> Result<()> {
    let bs = dev.block_size() as usize;
    let blocks = dev.block_count();
    if !(MIN_BLOCK_SIZE..=MAX_BLOCK_SIZE).contains(&(bs as u32)) || !bs.is_power_of_two() {
        return Err(Error::BadImage(format!(
            "block size {bs} is not a power of two between {MIN_BLOCK_SIZE} and {MAX_BLOCK_SIZE}"
        )));
    }
    if blocks < MIN_BLOCKS {
        return Err(Error::BadImage(format!(
            "device too small: {blocks} blocks of {bs} bytes, at least {MIN_BLOCKS} needed"
        )));
    }
    let nbitmap = bitmap::blocks_needed(bs, blocks);
    let mut alloc = Allocator::new(blocks, bs);
    alloc.apply_alloc(0, 2);
    // Sparse, bitmap block 0 only: everything mkfs allocates lies in its
    // group. Otherwise all of them.
    let mapped = if opts.sparse_bitmap { 1 } else { nbitmap };
    alloc.apply_alloc(2, mapped);
    let mut writes: Vec<(u64, Vec<u8>)> = Vec::new();

    // The bitmap file: one extent over its blocks.
    let mut bitmap_tree = Tree::new_empty(BITMAP_INO, TreeKind::Extents);
    extent::map(&mut bitmap_tree, dev, 0, 2, mapped, 0)?;
    let mut maps = Vec::new();
    let mut freed = Vec::new();
    let bitmap_root = {
        let a = &mut alloc;
        let mut f = || a.alloc_one(2);
        bitmap_tree.redirect_leaves(bs, 0, &mut f, &mut writes, &mut maps)?;
        bitmap_tree.redirect_branches(bs, 0, &mut f, &mut writes, &mut freed)?
    };

    // The inode table with the root directory.
    let now = Timespec::now();
    let root = InodeAttrs {
        mode: libc::S_IFDIR | (opts.root_mode & 0o7777),
        uid: opts.root_uid,
        gid: opts.root_gid,
        nlink: 2,
        parent: ROOT_INO,
        atime: now,
        mtime: now,
        ctime: now,
        btime: now,
        ..InodeAttrs::default()
    };
    let mut itable = Tree::new_empty(0, TreeKind::Itable);
    itable.insert(dev, ROOT_INO, root.encode())?;
    let itable_root = {
        let a = &mut alloc;
        let mut f = || a.alloc_one(2);
        itable.redirect_leaves(bs, 0, &mut f, &mut writes, &mut maps)?;
        itable.redirect_branches(bs, 0, &mut f, &mut writes, &mut freed)?
    };

    // The log head: reserved and zeroed so no stale block can pass for it.
    let log_head = alloc.alloc_one(2)?;
    writes.push((log_head, vec![0u8; bs]));
    for index in 0..mapped {
        let addr = 2 + index;
        writes.push((addr, bitmap::encode(addr, index, &alloc.bits(index, bs), bs)));
    }
    debug_assert!((mapped..nbitmap).all(|i| alloc.is_clear(i)), "holes are clear");
    for (addr, image) in &writes {
        dev.write(*addr, image)?;
    }
    dev.flush()?;

    let seed = super::nonce();
    let sb = Superblock {
        block_size: bs as u32,
        block_count: blocks,
        seq: 0,
        volume_id: seed,
        itable: itable_root,
        bitmap: bitmap_root,
        bitmap_blocks: nbitmap,
        log_head,
        // Sequence numbers start at a random point so that log blocks left
        // by an older volume on the same device never match.
        log_seq: (seed >> 16) | 1,
        log_prev_crc: 0,
        next_delta: 1,
        created: now.sec,
        unifies: 0,
        snapshots: Root::default(),
        generation: 0,
        inline_maps: true,
        data_sums: opts.data_sums,
        sparse_bitmap: opts.sparse_bitmap,
        shared_extents: false,
        table_sums: false,
    };
    dev.write(0, &sb.encode())?;
    let mut sb1 = sb.clone();
    sb1.seq = 1;
    dev.write(1, &sb1.encode())?;
    dev.flush()?;
    Ok(())
}
