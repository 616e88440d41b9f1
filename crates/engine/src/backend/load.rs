//! Backend layer: reading the bitmap at mount — the bitmap file's blocks
//! into the allocator. Part of the backend's open (`mod.rs`).
//!
//! Calls the structures (bitmap, extent tree, superblock) and the device.

use super::alloc::Allocator;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::structures::btree::Tree;
use crate::structures::superblock::Superblock;
use crate::structures::{bitmap, extent};

/// Read the bitmap blocks the bitmap file maps into `alloc`: every one
/// of `sb.bitmap_blocks`, or on a sparse bitmap those that are not holes
/// (the rest are all clear), so a mount reads what is in use, not the
/// volume's size.
pub(super) fn load_bitmap(
    dev: &dyn Device,
    sb: &Superblock,
    tree: &mut Tree,
    alloc: &mut Allocator,
) -> Result<()> {
    let bs = dev.block_size() as usize;
    let mut buf = vec![0u8; bs];
    let mut next = 0u64;
    for e in extent::all(tree, dev)? {
        if e.lblock < next || e.lblock.saturating_add(e.count) > sb.bitmap_blocks {
            return Err(Error::corrupt(
                sb.bitmap.addr,
                format!(
                    "bitmap file maps blocks {}+{} (overlapping, or past its {} blocks)",
                    e.lblock, e.count, sb.bitmap_blocks
                ),
            ));
        }
        if e.lblock > next && !sb.sparse_bitmap {
            break;
        }
        for index in e.lblock..e.end() {
            let addr = e.pblock + (index - e.lblock);
            if addr >= sb.block_count {
                return Err(Error::corrupt(
                    sb.bitmap.addr,
                    format!("bitmap block {index} maps outside the volume"),
                ));
            }
            crate::device::read_named(dev, addr, &mut buf)?;
            alloc.load_bits(index, bitmap::decode(&buf, addr, index)?);
        }
        next = e.end();
    }
    if next < sb.bitmap_blocks && !sb.sparse_bitmap {
        return Err(Error::corrupt(
            sb.bitmap.addr,
            format!("bitmap file has a hole at block {next}"),
        ));
    }
    Ok(())
}
