//! Structures layer: the superblock, two alternating copies in blocks 0
//! and 1. Each unify writes the copy `seq % 2` with a higher sequence
//! number; open picks the valid copy with the highest sequence, so a torn
//! superblock write leaves the other, older copy in charge.
//!
//! Layout (little-endian, rest of the block zero; see docs/FORMAT.md):
//!
//! ```text
//! 0   [8] magic "TUX3SUPR"       64  u64 bitmap root address
//! 8   u32 crc32c (field zeroed)  72  u8  bitmap root depth (+7 pad)
//! 12  u32 format version (1)     80  u64 bitmap file size in blocks
//! 16  u32 block size             88  u64 log head address
//! 20  u32 flags (0)              96  u64 log head sequence
//! 24  u64 block count            104 u64 next delta number
//! 32  u64 superblock sequence    112 i64 creation time (seconds)
//! 40  [8] volume id              120 u64 unify count
//! 48  u64 itable root address    128 u64 log head prev crc (u32, high 32 bits 0)
//! 56  u8  itable root depth (+7 pad)
//! 136 u64 snapshot table root    144 u8 its depth (+7 pad)
//! 152 u64 generation
//! ```
//!
//! A volume that has had a snapshot sets flag bit 0 (`SNAPSHOTS`) and
//! format version 2, so a reader of version 1 refuses it instead of
//! ignoring its snapshots; without the flag, bytes 136.. stay zero and the
//! version stays 1. A volume whose small files may keep their extents in
//! the inode record (made so by mkfs) sets flag bit 1 (`INLINE_MAPS`) and
//! version 3, whatever its other flag. A volume whose written extents carry
//! a CRC32C per data block (made so by mkfs, the default) sets flag bit 2
//! (`DATA_SUMS`) and version 4, whatever its other flags. A volume whose
//! bitmap file may leave out bitmap blocks of free blocks only (made so by
//! mkfs, and by a resize) sets flag bit 3 (`SPARSE_BITMAP`) and version 5.
//! A volume where a clone or a dedupe has shared blocks between files (the
//! snapshot table may hold shared-extent runs, the log `Share` records)
//! sets flag bit 4 (`SHARED_EXTENTS`) and version 6, and keeps it. A
//! volume whose checksum table holds checksums (extents may say theirs are
//! there, the log may hold `Sums` records) sets flag bit 5 (`TABLE_SUMS`)
//! and version 7, and keeps it.

use crate::codec::{Reader, Writer};
use crate::device::Device;
use crate::error::{Error, Result};

/// Magic at byte 0 of each superblock copy.
pub const MAGIC: &[u8; 8] = b"TUX3SUPR";
/// Format version of a volume that never had a snapshot.
pub const VERSION: u32 = 1;
/// Format version of a volume with the `SNAPSHOTS` flag.
pub const VERSION_SNAPSHOTS: u32 = 2;
/// Flag bit: the volume has a snapshot table (fields at 136..160).
pub const FLAG_SNAPSHOTS: u32 = 1;
/// Format version of a volume with the `INLINE_MAPS` flag.
pub const VERSION_INLINE_MAPS: u32 = 3;
/// Flag bit: inode records may hold a small file's extents (attribute 9).
pub const FLAG_INLINE_MAPS: u32 = 2;
/// Format version of a volume with the `DATA_SUMS` flag.
pub const VERSION_DATA_SUMS: u32 = 4;
/// Flag bit: every written extent of a file carries its blocks' checksums.
pub const FLAG_DATA_SUMS: u32 = 4;
/// Format version of a volume with the `SPARSE_BITMAP` flag.
pub const VERSION_SPARSE_BITMAP: u32 = 5;
/// Flag bit: the bitmap file may have holes, each a bitmap block of
/// blocks all free.
pub const FLAG_SPARSE_BITMAP: u32 = 8;
/// Format version of a volume with the `SHARED_EXTENTS` flag.
pub const VERSION_SHARED_EXTENTS: u32 = 6;
/// Flag bit: blocks may be shared between files (the shared-extent table).
pub const FLAG_SHARED_EXTENTS: u32 = 16;
/// Format version of a volume with the `TABLE_SUMS` flag.
pub const VERSION_TABLE_SUMS: u32 = 7;
/// Flag bit: extents may keep their blocks' checksums in the checksum table.
pub const FLAG_TABLE_SUMS: u32 = 32;
/// Smallest and largest supported block sizes.
pub const MIN_BLOCK_SIZE: u32 = 1024;
pub const MAX_BLOCK_SIZE: u32 = 65536;

/// The format version that goes with `flags`.
fn flags_version(flags: u32) -> u32 {
    if flags & FLAG_TABLE_SUMS != 0 {
        VERSION_TABLE_SUMS
    } else if flags & FLAG_SHARED_EXTENTS != 0 {
        VERSION_SHARED_EXTENTS
    } else if flags & FLAG_SPARSE_BITMAP != 0 {
        VERSION_SPARSE_BITMAP
    } else if flags & FLAG_DATA_SUMS != 0 {
        VERSION_DATA_SUMS
    } else if flags & FLAG_INLINE_MAPS != 0 {
        VERSION_INLINE_MAPS
    } else if flags & FLAG_SNAPSHOTS != 0 {
        VERSION_SNAPSHOTS
    } else {
        VERSION
    }
}

/// Root of a btree: address of its top node and the number of branch levels
/// above the leaves (0: the root is a leaf). Address 0 means "empty tree".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Root {
    pub addr: u64,
    pub depth: u8,
}

/// In-memory form of the superblock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Superblock {
    pub block_size: u32,
    pub block_count: u64,
    pub seq: u64,
    pub volume_id: u64,
    pub itable: Root,
    pub bitmap: Root,
    pub bitmap_blocks: u64,
    pub log_head: u64,
    pub log_seq: u64,
    /// The `prev_crc` the head block carries: 0 for a fresh head, or the
    /// checksum of the block before it when the log goes on across a unify.
    pub log_prev_crc: u32,
    pub next_delta: u64,
    pub created: i64,
    pub unifies: u64,
    /// The snapshot table (the `SNAPSHOTS` flag is set when it is not
    /// empty or `generation` is not 0).
    pub snapshots: Root,
    /// Generation of blocks written now; each snapshot closes one.
    pub generation: u64,
    /// Inode records may hold a small file's extents (flag `INLINE_MAPS`).
    pub inline_maps: bool,
    /// Written extents carry a CRC32C per data block (flag `DATA_SUMS`).
    pub data_sums: bool,
    /// The bitmap file may have holes: bitmap blocks whose bits are all
    /// clear (flag `SPARSE_BITMAP`).
    pub sparse_bitmap: bool,
    /// Blocks may be shared between files (flag `SHARED_EXTENTS`).
    pub shared_extents: bool,
    /// Extents may keep their checksums in the checksum table (flag
    /// `TABLE_SUMS`).
    pub table_sums: bool,
}

impl Superblock {
    /// Encode into one block image.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(self.block_size as usize);
        let snapshots = self.has_snapshots();
        w.bytes(MAGIC);
        w.u32(0);
        let (version, flags) = self.version_and_flags();
        w.u32(version);
        w.u32(self.block_size);
        w.u32(flags);
        w.u64(self.block_count);
        w.u64(self.seq);
        w.u64(self.volume_id);
        w.u64(self.itable.addr);
        w.u64(self.itable.depth as u64);
        w.u64(self.bitmap.addr);
        w.u64(self.bitmap.depth as u64);
        w.u64(self.bitmap_blocks);
        w.u64(self.log_head);
        w.u64(self.log_seq);
        w.u64(self.next_delta);
        w.i64(self.created);
        w.u64(self.unifies);
        w.u64(self.log_prev_crc as u64);
        if snapshots {
            w.u64(self.snapshots.addr);
            w.u64(self.snapshots.depth as u64);
            w.u64(self.generation);
        }
        let mut b = w.buf;
        b.resize(self.block_size as usize, 0);
        let crc = crc_superblock(&b);
        if let Some(field) = b.get_mut(8..12) {
            field.copy_from_slice(&crc.to_le_bytes());
        }
        b
    }

    /// Decode and validate one copy read from block `addr`.
    pub fn decode(b: &[u8], addr: u64) -> Result<Superblock> {
        let mut r = Reader::new(b, addr);
        if r.bytes(8, "magic")? != MAGIC {
            return Err(Error::corrupt(addr, "superblock: bad magic (not a tux3 volume)"));
        }
        let stored = r.u32("crc")?;
        let mut copy = b.to_vec();
        if let Some(field) = copy.get_mut(8..12) {
            field.fill(0);
        }
        // The checksum helper zeroes bytes 4..8; the superblock keeps its crc at 8..12.
        let actual = crc_superblock(&copy);
        if stored != actual {
            return Err(Error::corrupt(
                addr,
                format!("superblock: checksum mismatch (stored {stored:#010x}, computed {actual:#010x})"),
            ));
        }
        let version = r.u32("version")?;
        if !(VERSION..=VERSION_TABLE_SUMS).contains(&version) {
            return Err(Error::corrupt(
                addr,
                format!("superblock: format version {version}, this program reads {VERSION} to {VERSION_TABLE_SUMS}"),
            ));
        }
        let block_size = r.u32("block size")?;
        if !block_size.is_power_of_two() || !(MIN_BLOCK_SIZE..=MAX_BLOCK_SIZE).contains(&block_size) {
            return Err(Error::corrupt(
                addr,
                format!("superblock: invalid block size {block_size}"),
            ));
        }
        if b.len() != block_size as usize {
            return Err(Error::corrupt(
                addr,
                format!(
                    "superblock: block size {block_size} differs from the device's {}",
                    b.len()
                ),
            ));
        }
        let flags = r.u32("flags")?;
        let known = FLAG_SNAPSHOTS
            | FLAG_INLINE_MAPS
            | FLAG_DATA_SUMS
            | FLAG_SPARSE_BITMAP
            | FLAG_SHARED_EXTENTS
            | FLAG_TABLE_SUMS;
        if flags & !known != 0 || flags_version(flags) != version {
            return Err(Error::corrupt(
                addr,
                format!("superblock: flags {flags:#x} do not go with format version {version}"),
            ));
        }
        let block_count = r.u64("block count")?;
        let seq = r.u64("sequence")?;
        let volume_id = r.u64("volume id")?;
        let itable = Root {
            addr: r.u64("itable root")?,
            depth: depth(&mut r, addr, "itable depth")?,
        };
        let bitmap = Root {
            addr: r.u64("bitmap root")?,
            depth: depth(&mut r, addr, "bitmap depth")?,
        };
        let sb = Superblock {
            block_size,
            block_count,
            seq,
            volume_id,
            itable,
            bitmap,
            bitmap_blocks: r.u64("bitmap blocks")?,
            log_head: r.u64("log head")?,
            log_seq: r.u64("log sequence")?,
            next_delta: r.u64("next delta")?,
            created: r.i64("created")?,
            unifies: r.u64("unify count")?,
            log_prev_crc: {
                let v = r.u64("log head prev crc")?;
                u32::try_from(v).map_err(|_| {
                    Error::corrupt(
                        addr,
                        format!("superblock: log head prev crc {v:#x} is wider than 32 bits"),
                    )
                })?
            },
            snapshots: Root::default(),
            generation: 0,
            inline_maps: flags & FLAG_INLINE_MAPS != 0,
            data_sums: flags & FLAG_DATA_SUMS != 0,
            sparse_bitmap: flags & FLAG_SPARSE_BITMAP != 0,
            shared_extents: flags & FLAG_SHARED_EXTENTS != 0,
            table_sums: flags & FLAG_TABLE_SUMS != 0,
        };
        let mut sb = sb;
        if flags & FLAG_SNAPSHOTS != 0 {
            sb.snapshots = Root {
                addr: r.u64("snapshot table root")?,
                depth: depth(&mut r, addr, "snapshot table depth")?,
            };
            sb.generation = r.u64("generation")?;
            if sb.generation > u64::from(u32::MAX) {
                return Err(Error::corrupt(
                    addr,
                    format!("superblock: generation {} is implausible", sb.generation),
                ));
            }
            if sb.snapshots.addr != 0 && (sb.snapshots.addr < 2 || sb.snapshots.addr >= block_count) {
                return Err(Error::corrupt(
                    addr,
                    format!(
                        "superblock: snapshot table root {} outside the volume (2..{block_count})",
                        sb.snapshots.addr
                    ),
                ));
            }
        }
        // The volume's size in bytes fits a u64, and the bitmap file covers
        // exactly its blocks.
        if block_count.checked_mul(u64::from(block_size)).is_none() {
            return Err(Error::corrupt(
                addr,
                format!("superblock: block count {block_count} is implausible"),
            ));
        }
        let need = super::bitmap::blocks_needed(block_size as usize, block_count);
        if sb.bitmap_blocks != need {
            return Err(Error::corrupt(
                addr,
                format!(
                    "superblock: bitmap has {} blocks, the volume needs {need}",
                    sb.bitmap_blocks
                ),
            ));
        }
        // Counters that commits and unifies increment: far from overflow.
        if sb.next_delta >= 1 << 62 || sb.log_seq >= 1 << 62 || sb.seq >= 1 << 62 || sb.unifies >= 1 << 62 {
            return Err(Error::corrupt(
                addr,
                format!(
                    "superblock: next delta {} / log sequence {} / sequence {} / unify count {} implausible",
                    sb.next_delta, sb.log_seq, sb.seq, sb.unifies
                ),
            ));
        }
        for (what, a) in [
            ("itable root", sb.itable.addr),
            ("bitmap root", sb.bitmap.addr),
            ("log head", sb.log_head),
        ] {
            if a < 2 || a >= block_count {
                return Err(Error::corrupt(
                    addr,
                    format!("superblock: {what} {a} outside the volume (2..{block_count})"),
                ));
            }
        }
        Ok(sb)
    }

    /// The format version and flags this superblock is written with.
    pub fn version_and_flags(&self) -> (u32, u32) {
        let mut flags = 0;
        if self.has_snapshots() {
            flags |= FLAG_SNAPSHOTS;
        }
        if self.inline_maps {
            flags |= FLAG_INLINE_MAPS;
        }
        if self.data_sums {
            flags |= FLAG_DATA_SUMS;
        }
        if self.sparse_bitmap {
            flags |= FLAG_SPARSE_BITMAP;
        }
        if self.shared_extents {
            flags |= FLAG_SHARED_EXTENTS;
        }
        if self.table_sums {
            flags |= FLAG_TABLE_SUMS;
        }
        (flags_version(flags), flags)
    }

    /// Whether the volume has the snapshot fields (flag `SNAPSHOTS`).
    pub fn has_snapshots(&self) -> bool {
        self.snapshots.addr != 0 || self.generation != 0
    }

    /// Read both copies from `dev` and return the valid one with the highest
    /// sequence, or a one-line error saying why neither is usable.
    pub fn load(dev: &dyn Device) -> Result<Superblock> {
        let bs = dev.block_size() as usize;
        if dev.block_count() < 2 {
            return Err(Error::BadImage(format!(
                "image is truncated: {} blocks, a volume needs at least 2",
                dev.block_count()
            )));
        }
        let mut best: Option<Superblock> = None;
        let mut errors = Vec::new();
        for addr in 0..2u64 {
            let mut b = vec![0u8; bs];
            crate::device::read_named(dev, addr, &mut b)?;
            match Superblock::decode(&b, addr) {
                Ok(sb) => {
                    if best.as_ref().is_none_or(|x| sb.seq > x.seq) {
                        best = Some(sb);
                    }
                }
                Err(e) => errors.push(e.to_string()),
            }
        }
        let sb = best.ok_or_else(|| {
            Error::BadImage(format!(
                "not a tux3 volume: no valid superblock ({})",
                errors.join("; ")
            ))
        })?;
        if sb.block_count > dev.block_count() {
            return Err(Error::BadImage(format!(
                "image is truncated: the superblock says {} blocks, the device has {}",
                sb.block_count,
                dev.block_count()
            )));
        }
        Ok(sb)
    }

    /// Where this superblock is written: copy `seq % 2`.
    /// Where the log starts: its head, the seq and the `prev_crc` the head
    /// block must carry.
    pub fn log_start(&self) -> crate::log::Tail {
        crate::log::Tail {
            next: self.log_head,
            seq: self.log_seq,
            prev_crc: self.log_prev_crc,
        }
    }

    pub fn home(&self) -> u64 {
        self.seq % 2
    }
}

fn depth(r: &mut Reader, addr: u64, what: &str) -> Result<u8> {
    let d = r.u64(what)?;
    if d > 16 {
        return Err(Error::corrupt(
            addr,
            format!("superblock: {what} {d} is implausible"),
        ));
    }
    Ok(d as u8)
}

fn crc_superblock(b: &[u8]) -> u32 {
    // Bytes 8..12 are already zero in `b`; 4..8 are part of the magic and
    // must be covered, so checksum the whole buffer directly.
    crc32c::crc32c(b)
}

/// Given the first bytes of an image (at least 128 KiB or the whole image),
/// find the volume's block size from whichever superblock copy is valid.
pub fn probe_block_size(head: &[u8]) -> Option<u32> {
    let sizes = std::iter::successors(Some(MIN_BLOCK_SIZE), |bs| bs.checked_mul(2));
    for bs in sizes.take_while(|&bs| bs <= MAX_BLOCK_SIZE) {
        let n = bs as usize;
        // Copy 0 at byte 0, copy 1 at byte `bs`.
        for (copy, b) in head.chunks_exact(n).take(2).enumerate() {
            if let Ok(sb) = Superblock::decode(b, copy as u64) {
                if sb.block_size == bs {
                    return Some(bs);
                }
            }
        }
    }
    None
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects, clippy::indexing_slicing)]
mod tests {
    use super::*;

    fn sample() -> Superblock {
        Superblock {
            block_size: 4096,
            block_count: 1000,
            seq: 3,
            volume_id: 0xfeed,
            itable: Root { addr: 10, depth: 1 },
            bitmap: Root { addr: 11, depth: 0 },
            bitmap_blocks: 1,
            log_head: 12,
            log_seq: 5,
            log_prev_crc: 0xdead_beef,
            next_delta: 9,
            created: 1234,
            unifies: 2,
            snapshots: Root::default(),
            generation: 0,
            inline_maps: false,
            data_sums: false,
            sparse_bitmap: false,
            shared_extents: false,
            table_sums: false,
        }
    }

    /// Each set of flags goes with its version, both ways: a version-3
    /// volume (inline maps, with or without snapshots) round-trips, and a
    /// copy whose version or flags disagree is refused.
    #[test]
    fn versions_follow_flags() {
        for (sums, inline, snaps, version, flags) in [
            (false, false, false, VERSION, 0),
            (false, false, true, VERSION_SNAPSHOTS, FLAG_SNAPSHOTS),
            (false, true, false, VERSION_INLINE_MAPS, FLAG_INLINE_MAPS),
            (
                false,
                true,
                true,
                VERSION_INLINE_MAPS,
                FLAG_INLINE_MAPS | FLAG_SNAPSHOTS,
            ),
            (
                true,
                true,
                false,
                VERSION_DATA_SUMS,
                FLAG_INLINE_MAPS | FLAG_DATA_SUMS,
            ),
            (
                true,
                false,
                true,
                VERSION_DATA_SUMS,
                FLAG_DATA_SUMS | FLAG_SNAPSHOTS,
            ),
        ] {
            let mut sb = sample();
            sb.inline_maps = inline;
            sb.data_sums = sums;
            if snaps {
                sb.generation = 2;
            }
            let b = sb.encode();
            assert_eq!(u32::from_le_bytes(b[12..16].try_into().unwrap()), version);
            assert_eq!(u32::from_le_bytes(b[20..24].try_into().unwrap()), flags);
            assert_eq!(Superblock::decode(&b, 1).unwrap(), sb);
            for (at, bad) in [
                (12, version % 4 + 1),
                (20, flags ^ FLAG_DATA_SUMS),
                (20, flags | 8),
            ] {
                let mut c = b.clone();
                c[at..at + 4].copy_from_slice(&bad.to_le_bytes());
                c[8..12].copy_from_slice(&[0; 4]);
                let crc = crc_superblock(&c);
                c[8..12].copy_from_slice(&crc.to_le_bytes());
                let e = Superblock::decode(&c, 1).unwrap_err().to_string();
                assert!(e.contains("version") || e.contains("flags"), "{e}");
            }
        }
    }

    /// A volume with snapshots writes version 2 and its three fields; a
    /// reader of version 1 refuses it.
    #[test]
    fn snapshot_fields_round_trip() {
        let mut sb = sample();
        sb.snapshots = Root { addr: 13, depth: 1 };
        sb.generation = 4;
        let b = sb.encode();
        assert_eq!(
            u32::from_le_bytes(b[12..16].try_into().unwrap()),
            VERSION_SNAPSHOTS
        );
        assert_eq!(Superblock::decode(&b, 1).unwrap(), sb);
        let plain = sample().encode();
        assert_eq!(u32::from_le_bytes(plain[12..16].try_into().unwrap()), VERSION);
        assert!(plain[136..160].iter().all(|&x| x == 0));
    }

    #[test]
    fn round_trip_and_probe() {
        let sb = sample();
        let b = sb.encode();
        assert_eq!(Superblock::decode(&b, 1).unwrap(), sb);
        let mut head = vec![0u8; 4096];
        head.extend_from_slice(&b);
        assert_eq!(probe_block_size(&head), Some(4096));
    }

    #[test]
    fn every_bit_flip_is_caught() {
        let b = sample().encode();
        for i in (0..200).step_by(3) {
            let mut c = b.clone();
            c[i] ^= 0x10;
            assert!(Superblock::decode(&c, 0).is_err(), "flip at byte {i}");
        }
    }

    /// The head's prev crc lives in the u64 at byte 128: an image from
    /// before it (0 there) reads as a fresh head, and a value wider than 32
    /// bits is refused, naming the field.
    #[test]
    fn log_prev_crc_is_32_bits_at_128() {
        let mut sb = sample();
        sb.log_prev_crc = 0;
        let b = sb.encode();
        assert_eq!(&b[128..136], &[0u8; 8]);
        assert_eq!(Superblock::decode(&b, 1).unwrap().log_start().prev_crc, 0);
        let mut wide = sample().encode();
        wide[132] = 1;
        wide[8..12].copy_from_slice(&[0; 4]);
        let crc = crc_superblock(&wide);
        wide[8..12].copy_from_slice(&crc.to_le_bytes());
        let e = Superblock::decode(&wide, 1).unwrap_err().to_string();
        assert!(e.contains("log head prev crc"), "{e}");
    }
}
