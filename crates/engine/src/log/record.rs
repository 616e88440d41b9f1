//! Log layer: the record types. Each record is a type byte followed by fixed
//! fields; the table below is the whole vocabulary (docs/FORMAT.md repeats
//! it).
//!
//! | type | record | fields | replay effect |
//! |------|--------|--------|---------------|
//! | 1 | Balloc    | start u64, count u32 | mark blocks in use |
//! | 2 | Bfree     | start u64, count u32 | mark blocks free |
//! | 3 | LeafMap   | tree u64, sep u64, addr u64 | leaf `sep` of `tree` is at `addr` |
//! | 4 | LeafUnmap | tree u64, sep u64 | leaf `sep` left `tree` |
//! | 5 | Drop      | tree u64 | forget `tree`'s changes so far: its inode was freed |
//! | 6 | InodeImage | ino u64, len u16, attributes | (fsync) the inode's whole record |
//! | 7 | DataInline | ino u64, lblock u64, offset u16, len u16, bytes | (fsync) bytes at `offset` of block `lblock` of the file; a block first named by a DataInline starts zeroed |
//! | 8 | DirentSet  | dir u64, key u64, len u16, entry | (fsync) a directory entry at position `key` |
//! | 9 | Orphan     | ino u64 | `ino` has link count 0 but an open handle: on the orphan list until a Drop of `ino` |
//! | 10 | BlockSum  | start u64, count u32, crc u32 | none: CRC32C of blocks `start..start+count` as this delta wrote them; a single-flush commit is valid only if they match (checked for the last full delta of the chain) |
//! | 11 | DirentRemove | dir u64, key u64 | (fsync) no entry at position `key` of `dir` |
//! | 12 | Dead      | start u64, count u32, birth u32 | blocks the live volume freed but a snapshot holds: they stay in use, on the dead list, died in the superblock's generation |
//! | 13 | Reclaim   | start u64, count u32 | the dead extent at `start` is held by no snapshot any more: off the dead list, blocks free |
//! | 14 | SnapDelete | id u64 | snapshot `id` is deleted: its name is gone, its space is being reclaimed |
//! | 15 | SnapGone  | id u64 | snapshot `id`'s space is all back: its record goes |
//! | 16 | Named     | ino u64 | `ino` left the orphan list with a name: a file made without one (`O_TMPFILE`) was linked |
//! | 17 | Share     | start u64, count u32, refs u32 | the shared-extent run at `start` is `count` blocks with `refs` (≥ 2) references each; refs 0 (count 0): no run starts at `start` any more |
//! | 18 | Sums      | start u64, mask u64, crc u32 per bit set | the checksum table's chunk at `start` (a multiple of 64) holds the checksums of blocks `start + k` for each bit `k` of `mask`, in order; mask 0: the chunk holds none |
//! | 19 | DropRun   | first u64, count u32 | a Drop of each tree `first..first+count` (count ≥ 2; Drops of distinct trees commute): a run of freed inodes in one record |
//!
//! Types 6-8 and 11 appear only in fsync commits (log blocks flagged FSYNC).
//! Replay applies them unless a later full commit in the chain carries a
//! delta number at least theirs: that delta holds everything they describe.
//! Orphan and Named records count in every committed delta, full or fsync,
//! in log order.
//!
//! Calls the base modules only (codec, error).

use crate::codec::{Bounds, Reader, Writer, INO_LIMIT, MAX_FILE_BLOCKS};
use crate::error::Result;
use std::sync::Arc;

/// Bitmap file's inode number: its tree is never logged.
const BITMAP_INO: u64 = 2;
/// Lowest inode number of an ordinary file (docs/FORMAT.md section 5).
const FIRST_INO: u64 = 16;

/// The bytes of a [`Record::DataInline`]: a range of a cached page, shared
/// (an fsync commit's plan copies no data under the delta guard: the
/// encoder copies it into the log block later, and a write to the page
/// meanwhile copies the page first, `Arc::make_mut`), or bytes of their
/// own (a decoded record).
#[derive(Clone)]
pub struct InlineBytes {
    buf: Arc<Vec<u8>>,
    start: usize,
    len: usize,
}

impl InlineBytes {
    /// `len` bytes of `page` from `start` (clamped to the page).
    pub fn share(page: &Arc<Vec<u8>>, start: usize, len: usize) -> InlineBytes {
        let start = start.min(page.len());
        InlineBytes {
            buf: page.clone(),
            start,
            len: len.min(page.len().saturating_sub(start)),
        }
    }
}

impl From<Vec<u8>> for InlineBytes {
    fn from(v: Vec<u8>) -> InlineBytes {
        let len = v.len();
        InlineBytes {
            buf: Arc::new(v),
            start: 0,
            len,
        }
    }
}

impl std::ops::Deref for InlineBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // `share` and `from` keep the range inside the buffer.
        self.buf
            .get(self.start..self.start.saturating_add(self.len))
            .unwrap_or_default()
    }
}

impl PartialEq for InlineBytes {
    fn eq(&self, other: &InlineBytes) -> bool {
        **self == **other
    }
}

impl Eq for InlineBytes {}

impl std::fmt::Debug for InlineBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&**self, f)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    Balloc {
        start: u64,
        count: u32,
    },
    Bfree {
        start: u64,
        count: u32,
    },
    LeafMap {
        tree: u64,
        sep: u64,
        addr: u64,
    },
    LeafUnmap {
        tree: u64,
        sep: u64,
    },
    Drop {
        tree: u64,
    },
    /// A [`Record::Drop`] of each of `count` consecutive trees from
    /// `first` ([`push_drop`] makes them).
    DropRun {
        first: u64,
        count: u32,
    },
    InodeImage {
        ino: u64,
        attrs: Vec<u8>,
    },
    DataInline {
        ino: u64,
        lblock: u64,
        offset: u16,
        data: InlineBytes,
    },
    DirentSet {
        dir: u64,
        key: u64,
        entry: Vec<u8>,
    },
    DirentRemove {
        dir: u64,
        key: u64,
    },
    Orphan {
        ino: u64,
    },
    /// `ino`, on the orphan list, got a name (a linked `O_TMPFILE`).
    Named {
        ino: u64,
    },
    BlockSum {
        start: u64,
        count: u32,
        crc: u32,
    },
    Dead {
        start: u64,
        count: u32,
        birth: u32,
    },
    Reclaim {
        start: u64,
        count: u32,
    },
    SnapDelete {
        id: u64,
    },
    SnapGone {
        id: u64,
    },
    /// The shared-extent table's run at `start` (refs 0: none).
    Share {
        start: u64,
        count: u32,
        refs: u32,
    },
    /// The checksum table's chunk at `start` (mask 0: empty).
    Sums {
        start: u64,
        mask: u64,
        sums: Vec<u32>,
    },
}

/// Names of the record types, indexed by [`Record::kind`].
pub const KINDS: [&str; 19] = [
    "balloc",
    "bfree",
    "leafmap",
    "leafunmap",
    "drop",
    "inode",
    "inline",
    "dirent",
    "orphan",
    "blocksum",
    "unentry",
    "dead",
    "reclaim",
    "snapdelete",
    "snapgone",
    "named",
    "share",
    "sums",
    "droprun",
];

impl Record {
    /// Encoded size in bytes, by type (the self-describing size table).
    pub fn size(&self) -> usize {
        match self {
            Record::Balloc { .. }
            | Record::Bfree { .. }
            | Record::Reclaim { .. }
            | Record::DropRun { .. } => 13,
            Record::Dead { .. } | Record::Share { .. } => 17,
            Record::SnapDelete { .. } | Record::SnapGone { .. } => 9,
            Record::LeafMap { .. } => 25,
            Record::LeafUnmap { .. } | Record::DirentRemove { .. } => 17,
            Record::Drop { .. } | Record::Orphan { .. } | Record::Named { .. } => 9,
            Record::BlockSum { .. } => 17,
            Record::InodeImage { attrs, .. } => attrs.len().saturating_add(11),
            Record::DataInline { data, .. } => data.len().saturating_add(21),
            Record::DirentSet { entry, .. } => entry.len().saturating_add(19),
            Record::Sums { sums, .. } => sums.len().saturating_mul(4).saturating_add(17),
        }
    }

    /// Index of the record's type in [`KINDS`].
    pub fn kind(&self) -> usize {
        match self {
            Record::Balloc { .. } => 0,
            Record::Bfree { .. } => 1,
            Record::LeafMap { .. } => 2,
            Record::LeafUnmap { .. } => 3,
            Record::Drop { .. } => 4,
            Record::InodeImage { .. } => 5,
            Record::DataInline { .. } => 6,
            Record::DirentSet { .. } => 7,
            Record::Orphan { .. } => 8,
            Record::BlockSum { .. } => 9,
            Record::DirentRemove { .. } => 10,
            Record::Dead { .. } => 11,
            Record::Reclaim { .. } => 12,
            Record::SnapDelete { .. } => 13,
            Record::SnapGone { .. } => 14,
            Record::Named { .. } => 15,
            Record::Share { .. } => 16,
            Record::Sums { .. } => 17,
            Record::DropRun { .. } => 18,
        }
    }

    pub fn encode(&self, w: &mut Writer) {
        match *self {
            Record::InodeImage { ino, ref attrs } => {
                w.u8(6);
                w.u64(ino);
                w.u16(u16::try_from(attrs.len()).unwrap_or(u16::MAX));
                w.bytes(attrs);
            }
            Record::DataInline {
                ino,
                lblock,
                offset,
                ref data,
            } => {
                w.u8(7);
                w.u64(ino);
                w.u64(lblock);
                w.u16(offset);
                w.u16(u16::try_from(data.len()).unwrap_or(u16::MAX));
                w.bytes(data);
            }
            Record::DirentSet { dir, key, ref entry } => {
                w.u8(8);
                w.u64(dir);
                w.u64(key);
                w.u16(u16::try_from(entry.len()).unwrap_or(u16::MAX));
                w.bytes(entry);
            }
            Record::DirentRemove { dir, key } => {
                w.u8(11);
                w.u64(dir);
                w.u64(key);
            }
            Record::Balloc { start, count } => {
                w.u8(1);
                w.u64(start);
                w.u32(count);
            }
            Record::Bfree { start, count } => {
                w.u8(2);
                w.u64(start);
                w.u32(count);
            }
            Record::LeafMap { tree, sep, addr } => {
                w.u8(3);
                w.u64(tree);
                w.u64(sep);
                w.u64(addr);
            }
            Record::LeafUnmap { tree, sep } => {
                w.u8(4);
                w.u64(tree);
                w.u64(sep);
            }
            Record::Drop { tree } => {
                w.u8(5);
                w.u64(tree);
            }
            Record::DropRun { first, count } => {
                w.u8(19);
                w.u64(first);
                w.u32(count);
            }
            Record::Orphan { ino } => {
                w.u8(9);
                w.u64(ino);
            }
            Record::Named { ino } => {
                w.u8(16);
                w.u64(ino);
            }
            Record::BlockSum { start, count, crc } => {
                w.u8(10);
                w.u64(start);
                w.u32(count);
                w.u32(crc);
            }
            Record::Dead { start, count, birth } => {
                w.u8(12);
                w.u64(start);
                w.u32(count);
                w.u32(birth);
            }
            Record::Reclaim { start, count } => {
                w.u8(13);
                w.u64(start);
                w.u32(count);
            }
            Record::SnapDelete { id } => {
                w.u8(14);
                w.u64(id);
            }
            Record::SnapGone { id } => {
                w.u8(15);
                w.u64(id);
            }
            Record::Share { start, count, refs } => {
                w.u8(17);
                w.u64(start);
                w.u32(count);
                w.u32(refs);
            }
            Record::Sums {
                start,
                mask,
                ref sums,
            } => {
                w.u8(18);
                w.u64(start);
                w.u64(mask);
                for &s in sums {
                    w.u32(s);
                }
            }
        }
    }

    /// Decode one record; `r` is positioned at its type byte. Every field
    /// is checked against the volume's `bounds` (docs/FORMAT.md 8.2): ranges
    /// and leaf addresses inside the volume, inode numbers below 2^48,
    /// inline data inside one block; errors name the reader's block.
    pub fn decode(r: &mut Reader, bounds: &Bounds) -> Result<Record> {
        let t = r.u8("record type")?;
        let rec = match t {
            1 => Record::Balloc {
                start: r.u64("balloc start")?,
                count: r.u32("balloc count")?,
            },
            2 => Record::Bfree {
                start: r.u64("bfree start")?,
                count: r.u32("bfree count")?,
            },
            3 => Record::LeafMap {
                tree: r.u64("leafmap tree")?,
                sep: r.u64("leafmap sep")?,
                addr: r.addr("leafmap address", bounds)?,
            },
            4 => Record::LeafUnmap {
                tree: r.u64("leafunmap tree")?,
                sep: r.u64("leafunmap sep")?,
            },
            5 => Record::Drop {
                tree: r.u64("drop tree")?,
            },
            6 => {
                let ino = r.u64("inode image ino")?;
                let n = usize::from(r.u16("inode image length")?);
                Record::InodeImage {
                    ino,
                    attrs: r.bytes(n, "inode image")?.to_vec(),
                }
            }
            7 => {
                let ino = r.u64("inline ino")?;
                let lblock = r.u64("inline block")?;
                let offset = r.u16("inline offset")?;
                let n = usize::from(r.u16("inline length")?);
                Record::DataInline {
                    ino,
                    lblock,
                    offset,
                    data: r.bytes(n, "inline data")?.to_vec().into(),
                }
            }
            8 => {
                let dir = r.u64("dirent dir")?;
                let key = r.u64("dirent key")?;
                let n = usize::from(r.u16("dirent length")?);
                Record::DirentSet {
                    dir,
                    key,
                    entry: r.bytes(n, "dirent entry")?.to_vec(),
                }
            }
            9 => Record::Orphan {
                ino: r.u64("orphan ino")?,
            },
            10 => Record::BlockSum {
                start: r.u64("blocksum start")?,
                count: r.u32("blocksum count")?,
                crc: r.u32("blocksum crc")?,
            },
            11 => Record::DirentRemove {
                dir: r.u64("unentry dir")?,
                key: r.u64("unentry key")?,
            },
            12 => Record::Dead {
                start: r.u64("dead start")?,
                count: r.u32("dead count")?,
                birth: r.u32("dead birth")?,
            },
            13 => Record::Reclaim {
                start: r.u64("reclaim start")?,
                count: r.u32("reclaim count")?,
            },
            14 => Record::SnapDelete {
                id: r.u64("snapdelete id")?,
            },
            15 => Record::SnapGone {
                id: r.u64("snapgone id")?,
            },
            16 => Record::Named {
                ino: r.u64("named ino")?,
            },
            17 => Record::Share {
                start: r.u64("share start")?,
                count: r.u32("share count")?,
                refs: r.u32("share refs")?,
            },
            18 => {
                let start = r.u64("sums start")?;
                let mask = r.u64("sums mask")?;
                let mut sums = Vec::with_capacity(mask.count_ones() as usize);
                for _ in 0..mask.count_ones() {
                    sums.push(r.u32("sums checksum")?);
                }
                Record::Sums { start, mask, sums }
            }
            19 => Record::DropRun {
                first: r.u64("droprun first")?,
                count: r.u32("droprun count")?,
            },
            _ => return Err(r.bad(format!("unknown log record type {t}"))),
        };
        rec.check(r, bounds)?;
        Ok(rec)
    }

    /// The bounds of a decoded record's fields (see [`Record::decode`]).
    fn check(&self, r: &Reader, bounds: &Bounds) -> Result<()> {
        let name = KINDS.get(self.kind()).copied().unwrap_or("record");
        let bad = |what: String| Err(r.bad(format!("log record {name}: {what}")));
        match *self {
            Record::Balloc { start, count }
            | Record::Bfree { start, count }
            | Record::Reclaim { start, count }
            | Record::Dead { start, count, .. } => {
                let empty = count == 0 && matches!(self, Record::Dead { .. } | Record::Reclaim { .. });
                if empty || !bounds.holds_range(start, u64::from(count)) {
                    return bad(format!(
                        "blocks {start}+{count} outside the volume (2..{})",
                        bounds.block_count
                    ));
                }
            }
            Record::Share { start, count, refs } => {
                let shape = if refs == 0 {
                    count == 0
                } else {
                    refs >= 2 && count > 0
                };
                if !shape || !bounds.holds_range(start, u64::from(count.max(1))) {
                    return bad(format!("run {start}+{count} with {refs} references"));
                }
            }
            Record::Sums { start, mask, .. } => {
                let last = 63u64.saturating_sub(u64::from(mask.leading_zeros()));
                let first = u64::from(mask.trailing_zeros().min(63));
                let inside = mask == 0
                    || bounds.holds_range(
                        start.saturating_add(first),
                        last.saturating_sub(first).saturating_add(1),
                    );
                if !start.is_multiple_of(64) || !inside {
                    return bad(format!("checksum chunk at block {start} (mask {mask:#x})"));
                }
            }
            Record::LeafMap { tree, .. } | Record::LeafUnmap { tree, .. } | Record::Drop { tree } => {
                if tree == BITMAP_INO || tree >= INO_LIMIT {
                    return bad(format!("tree {tree} is not a logged tree"));
                }
            }
            Record::DropRun { first, count } => {
                let end = first.saturating_add(u64::from(count));
                if count < 2 || first <= BITMAP_INO && BITMAP_INO < end || end > INO_LIMIT {
                    return bad(format!("trees {first}+{count} are not a run of logged trees"));
                }
            }
            Record::InodeImage { ino, .. } => {
                if ino == 0 || ino >= INO_LIMIT {
                    return bad(format!("inode {ino} out of range"));
                }
            }
            Record::DataInline {
                ino,
                lblock,
                offset,
                ref data,
            } => {
                let end = usize::from(offset).saturating_add(data.len());
                if !(FIRST_INO..INO_LIMIT).contains(&ino) || lblock >= MAX_FILE_BLOCKS {
                    return bad(format!("inode {ino} block {lblock} out of range"));
                }
                if end > bounds.block_size as usize {
                    return bad(format!(
                        "{} bytes at offset {offset} overflow a block",
                        data.len()
                    ));
                }
            }
            Record::DirentSet { dir, .. } | Record::DirentRemove { dir, .. } => {
                if dir == 0 || dir >= INO_LIMIT {
                    return bad(format!("directory {dir} out of range"));
                }
            }
            // Checked where they are used: an orphan number below 16 and a
            // block checksum range outside the volume are reported as
            // damage by replay and the chain reader.
            Record::Orphan { .. } | Record::Named { .. } | Record::BlockSum { .. } => {}
            // Checked against the snapshot table by replay.
            Record::SnapDelete { .. } | Record::SnapGone { .. } => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record that shares a page keeps the bytes of the plan: a write to
    /// the page afterwards (through `Arc::make_mut`, as the page cache
    /// writes) copies the page, and the encoded record is unchanged.
    #[test]
    fn shared_inline_bytes_keep_the_page_as_it_was() {
        let mut page = Arc::new(vec![7u8; 4096]);
        let rec = Record::DataInline {
            ino: 16,
            lblock: 3,
            offset: 896,
            data: InlineBytes::share(&page, 896, 896),
        };
        if let Some(b) = Arc::make_mut(&mut page).get_mut(1000) {
            *b = 9;
        }
        let mut w = Writer::default();
        rec.encode(&mut w);
        let own = Record::DataInline {
            ino: 16,
            lblock: 3,
            offset: 896,
            data: vec![7u8; 896].into(),
        };
        let mut w2 = Writer::default();
        own.encode(&mut w2);
        assert_eq!(w.buf, w2.buf);
        assert_eq!(rec, own);
        // Ranges past the page are clamped, never a panic.
        assert_eq!(InlineBytes::share(&page, 4000, 896).len(), 96);
        assert!(InlineBytes::share(&page, 5000, 10).is_empty());
    }
}
