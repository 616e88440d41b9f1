//! Superblock (stub).

/// Magic at byte 0 of each superblock copy.
pub const MAGIC: &[u8; 8] = b"TUX3SUPR";

/// Given the first bytes of an image (at least 128 KiB or the whole image),
/// find the volume's block size from whichever superblock copy is valid.
pub fn probe_block_size(head: &[u8]) -> Option<u32> {
    if head.len() >= 20 && &head[0..8] == MAGIC {
        let bs = u32::from_le_bytes([head[16], head[17], head[18], head[19]]);
        if bs.is_power_of_two() && (1024..=65536).contains(&bs) {
            return Some(bs);
        }
    }
    None
}
