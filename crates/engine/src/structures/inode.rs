//! Structures layer: inode attributes as stored in the inode table, a list of
//! optional, variable-length attributes, each `tag u8, length u16, body`.
//! Absent attributes take their default (zero); unknown tags are corruption.
//!
//! | tag | attribute | body |
//! |-----|-----------|------|
//! | 1 | mode     | mode u32, uid u32, gid u32, nlink u32 |
//! | 2 | size     | bytes u64 |
//! | 3 | times    | atime, mtime, ctime, btime: each sec i64 + nsec u32 |
//! | 4 | rdev     | u64 |
//! | 5 | parent   | directory's parent inode u64; other files: a hint, the directory it was made or last renamed in |
//! | 6 | root     | data tree's unified root: address u64, depth u8 |
//! | 7 | xattr    | name length u8, name, value (the rest) |
//! | 8 | blocks   | data blocks held u64 |
//! | 9 | extents  | a small file's whole data map, in place of a tree: 1..=4 of lblock u64, pblock u64, count u32, birth u32 |
//! | 10 | xattr file | the inode holding the xattrs the record does not (`xattr_file.rs`): ino u64 |
//! | 11 | flags   | inode flags u32 (`types::flags`: immutable, append-only, ...) |
//! | 13 | scrub state | inode 4 only: how far a scrub got, what it found (`scrub_state.rs`) |
//! | 14 | known damage | inode 4 only: data blocks a repair recorded as damaged (`scrub_state.rs`) |

use super::extent::Extent;
use super::scrub_state::{self, KnownDamage, ScrubState};
use super::superblock::Root;
use super::xattr_file::S_IFXATTR;
use crate::codec::{Bounds, Reader, Writer, INO_LIMIT, MAX_DEPTH};
use crate::error::{Error, Result};
use crate::types::Timespec;
use std::collections::BTreeMap;

const TAG_MODE: u8 = 1;
const TAG_SIZE: u8 = 2;
const TAG_TIMES: u8 = 3;
const TAG_RDEV: u8 = 4;
const TAG_PARENT: u8 = 5;
const TAG_ROOT: u8 = 6;
const TAG_XATTR: u8 = 7;
const TAG_BLOCKS: u8 = 8;
const TAG_EXTENTS: u8 = 9;
const TAG_XATTR_FILE: u8 = 10;
const TAG_FLAGS: u8 = 11;
const TAG_SUMS: u8 = 12;
const TAG_SCRUB: u8 = 13;
const TAG_DAMAGE: u8 = 14;
const TAG_TABLE_SUMS: u8 = 15;

/// The first number an ordinary inode may have (the backend's `FIRST_INO`).
const FIRST_FILE_INO: u64 = 16;

/// Most extents a data map held in the inode record may have; a file that
/// needs more gets an extent tree.
pub const INLINE_EXTENTS: usize = 4;
/// Bytes of one extent held in the inode record.
const INLINE_EXTENT_BYTES: usize = 24;

/// Bytes the `extents` attribute takes for `n` extents (0 when empty).
pub fn inline_cost(n: usize) -> usize {
    if n == 0 {
        0
    } else {
        n.saturating_mul(INLINE_EXTENT_BYTES).saturating_add(3)
    }
}

/// Most data blocks a map held in the record may cover when its extents
/// carry checksums (attribute 12 takes 4 bytes a block); a larger file
/// gets an extent tree.
pub const INLINE_SUMMED_BLOCKS: u64 = 16;

/// Bytes the `table sums` attribute (15) takes: its extents keep their
/// checksums in the checksum table.
pub const INLINE_TABLE_SUMS_COST: usize = 4;

/// Bytes the `sums` attribute takes for extents covering `blocks` blocks
/// with checksums (0 when none).
pub fn inline_sums_cost(blocks: u64) -> usize {
    if blocks == 0 {
        0
    } else {
        (blocks as usize).saturating_mul(4).saturating_add(3)
    }
}

/// The attributes of record value `raw`, each whole (tag, length, body),
/// with its tag; `None` if they do not parse as `tag u8, len u16,
/// body[len]` to the end.
fn attributes(raw: &[u8]) -> Option<Vec<(u8, &[u8])>> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while at < raw.len() {
        let tag = *raw.get(at)?;
        let len = u16::from_le_bytes([*raw.get(at.checked_add(1)?)?, *raw.get(at.checked_add(2)?)?]);
        let end = at.checked_add(3)?.checked_add(usize::from(len))?;
        out.push((tag, raw.get(at..end)?));
        at = end;
    }
    Some(out)
}

/// A record's value `raw` without its sums attribute (tag 12), for a
/// repair that computes the checksums anew from the data; `None` if the
/// attributes do not parse as `tag u8, len u16, body[len]` to the end.
pub fn without_sums(raw: &[u8]) -> Option<Vec<u8>> {
    let attrs = attributes(raw)?;
    Some(
        attrs
            .into_iter()
            .filter(|a| a.0 != TAG_SUMS)
            .flat_map(|a| a.1.iter().copied())
            .collect(),
    )
}

/// Record value `raw` without its attribute number `k` (from 0), and that
/// attribute's tag, for a repair that keeps the rest of a record one
/// attribute of which does not decode; `None` if the attributes do not
/// parse or there is no such attribute.
pub fn without_attr(raw: &[u8], k: usize) -> Option<(Vec<u8>, u8)> {
    let attrs = attributes(raw)?;
    let tag = attrs.get(k)?.0;
    let rest = attrs
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != k)
        .flat_map(|(_, a)| a.1.iter().copied())
        .collect();
    Some((rest, tag))
}

/// Bytes the fixed attributes can take at most (all present).
pub const FIXED_ATTRS_MAX: usize =
    (3 + 16) + (3 + 8) + (3 + 48) + (3 + 8) + (3 + 8) + (3 + 9) + (3 + 8) + (3 + 8) + (3 + 4);

/// Cost of one xattr in the inode record: tag, length, name length, name, value.
pub fn xattr_cost(name: &[u8], value: &[u8]) -> usize {
    name.len().saturating_add(value.len()).saturating_add(4)
}

/// Attributes of one inode.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct InodeAttrs {
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u32,
    pub size: u64,
    pub atime: Timespec,
    pub mtime: Timespec,
    pub ctime: Timespec,
    pub btime: Timespec,
    pub rdev: u64,
    /// Parent directory (directories only).
    pub parent: u64,
    /// Unified root of the data tree (extents or directory entries).
    pub root: Root,
    /// Data blocks held.
    pub blocks: u64,
    /// A small file's whole data map, held in the record instead of an
    /// extent tree (then `root` is empty). Written at every delta commit.
    pub inline: Vec<Extent>,
    /// Inode flags (`types::flags`), as `chattr` sets them.
    pub flags: u32,
    /// The xattrs the record holds (attribute 7).
    pub xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
    /// The inode holding the other xattrs (attribute 10; 0: none).
    pub xattr_file: u64,
    /// The scrub state (attribute 13; inode 4 only).
    pub scrub: Option<ScrubState>,
    /// The data blocks a repair recorded as damaged (attribute 14; inode 4
    /// only; empty: none).
    pub damage: Vec<KnownDamage>,
}

impl InodeAttrs {
    /// Total cost of the xattrs, as counted against the per-inode limit.
    pub fn xattr_bytes(&self) -> usize {
        self.xattrs.iter().map(|(n, v)| xattr_cost(n, v)).sum()
    }

    pub fn encode(&self) -> Vec<u8> {
        // The usual record (mode, size, times, parent), its inline extents
        // and their checksums in one allocation.
        let sums = self
            .inline
            .iter()
            .map(|e| e.sums.len())
            .fold(0usize, usize::saturating_add);
        let extents = self.inline.len().saturating_mul(INLINE_EXTENT_BYTES);
        let mut w = Writer::with_capacity(sums.saturating_mul(4).saturating_add(extents).saturating_add(112));
        w.u8(TAG_MODE);
        w.u16(16);
        w.u32(self.mode);
        w.u32(self.uid);
        w.u32(self.gid);
        w.u32(self.nlink);
        if self.size != 0 {
            w.u8(TAG_SIZE);
            w.u16(8);
            w.u64(self.size);
        }
        w.u8(TAG_TIMES);
        w.u16(48);
        for t in [self.atime, self.mtime, self.ctime, self.btime] {
            w.i64(t.sec);
            w.u32(t.nsec);
        }
        if self.rdev != 0 {
            w.u8(TAG_RDEV);
            w.u16(8);
            w.u64(self.rdev);
        }
        if self.parent != 0 {
            w.u8(TAG_PARENT);
            w.u16(8);
            w.u64(self.parent);
        }
        if self.root.addr != 0 {
            w.u8(TAG_ROOT);
            w.u16(9);
            w.u64(self.root.addr);
            w.u8(self.root.depth);
        }
        if self.blocks != 0 {
            w.u8(TAG_BLOCKS);
            w.u16(8);
            w.u64(self.blocks);
        }
        if !self.inline.is_empty() {
            w.u8(TAG_EXTENTS);
            w.u16(u16::try_from(self.inline.len().saturating_mul(INLINE_EXTENT_BYTES)).unwrap_or(u16::MAX));
            for e in &self.inline {
                w.u64(e.lblock);
                w.u64(e.pblock);
                w.u32(u32::try_from(e.count).unwrap_or(u32::MAX));
                w.u32(e.birth);
            }
            if sums != 0 {
                w.u8(TAG_SUMS);
                w.u16(u16::try_from(sums.saturating_mul(4)).unwrap_or(u16::MAX));
                for s in self.inline.iter().flat_map(|e| e.sums.iter()) {
                    w.u32(*s);
                }
            }
            let table = self
                .inline
                .iter()
                .enumerate()
                .filter(|(_, e)| e.table_sums)
                .fold(0u8, |m, (k, _)| m | (1u8 << (k & 7)));
            if table != 0 {
                w.u8(TAG_TABLE_SUMS);
                w.u16(1);
                w.u8(table);
            }
        }
        if self.xattr_file != 0 {
            w.u8(TAG_XATTR_FILE);
            w.u16(8);
            w.u64(self.xattr_file);
        }
        if self.flags != 0 {
            w.u8(TAG_FLAGS);
            w.u16(4);
            w.u32(self.flags);
        }
        if let Some(st) = &self.scrub {
            let body = st.encode();
            w.u8(TAG_SCRUB);
            w.u16(u16::try_from(body.len()).unwrap_or(u16::MAX));
            w.bytes(&body);
        }
        if !self.damage.is_empty() {
            let body = scrub_state::encode_damage(&self.damage);
            w.u8(TAG_DAMAGE);
            w.u16(u16::try_from(body.len()).unwrap_or(u16::MAX));
            w.bytes(&body);
        }
        for (name, value) in &self.xattrs {
            w.u8(TAG_XATTR);
            let len = name.len().saturating_add(value.len()).saturating_add(1);
            w.u16(u16::try_from(len).unwrap_or(u16::MAX));
            w.u8(u8::try_from(name.len()).unwrap_or(u8::MAX));
            w.bytes(name);
            w.bytes(value);
        }
        w.buf
    }

    /// Decode the record of inode `ino` found in itable leaf `block` (or a
    /// log block) of a volume with `bounds`: the size fits a file, the data
    /// tree's root lies in the volume with a depth of at most 16, the block
    /// count fits the volume, the parent is an inode number, a data map in
    /// the record (regular files, symlinks and xattr files only, never with
    /// a root) has 1 ..= 4 sorted, disjoint extents inside the volume, an
    /// xattr file is an ordinary inode number other than its owner's, and
    /// an xattr file has none of its own.
    pub fn decode(b: &[u8], ino: u64, block: u64, bounds: &Bounds) -> Result<InodeAttrs> {
        let mut a = InodeAttrs::default();
        let mut r = Reader::new(b, block);
        let mut seen_mode = false;
        let mut sums: Vec<u32> = Vec::new();
        let mut table_mask = 0u8;
        let bad = |what: String| Error::corrupt(block, format!("inode {ino}: {what}"));
        while r.remaining() > 0 {
            let tag = r.u8("attribute tag")?;
            let len = r.u16("attribute length")? as usize;
            let body = r.bytes(len, "attribute body")?;
            let mut br = Reader::new(body, block);
            let need = |n: usize| {
                if len == n {
                    Ok(())
                } else {
                    Err(bad(format!("attribute {tag} has length {len}, expected {n}")))
                }
            };
            match tag {
                TAG_MODE => {
                    need(16)?;
                    a.mode = br.u32("mode")?;
                    // Type and permission bits only (FORMAT.md 7.1).
                    if a.mode & !0o177_777 != 0 {
                        return Err(bad(format!("mode {:#o} has bits above the file type", a.mode)));
                    }
                    a.uid = br.u32("uid")?;
                    a.gid = br.u32("gid")?;
                    a.nlink = br.u32("nlink")?;
                    seen_mode = true;
                }
                TAG_SIZE => {
                    need(8)?;
                    a.size = br.u64("size")?;
                    if a.size > bounds.max_file_size() {
                        return Err(bad(format!("size {} is past the largest file", a.size)));
                    }
                }
                TAG_TIMES => {
                    need(48)?;
                    let mut t = [Timespec::default(); 4];
                    for x in t.iter_mut() {
                        x.sec = br.i64("time seconds")?;
                        x.nsec = br.u32("time nanoseconds")?;
                        if x.nsec >= 1_000_000_000 {
                            return Err(bad(format!("time nanoseconds {}", x.nsec)));
                        }
                    }
                    [a.atime, a.mtime, a.ctime, a.btime] = t;
                }
                TAG_RDEV => {
                    need(8)?;
                    a.rdev = br.u64("rdev")?;
                }
                TAG_PARENT => {
                    need(8)?;
                    a.parent = br.u64("parent")?;
                    if a.parent >= INO_LIMIT {
                        return Err(bad(format!("parent {} is not an inode number", a.parent)));
                    }
                }
                TAG_ROOT => {
                    need(9)?;
                    a.root = Root {
                        addr: br.u64("root address")?,
                        depth: br.u8("root depth")?,
                    };
                    if a.root.depth > MAX_DEPTH {
                        return Err(bad(format!("data tree depth {}", a.root.depth)));
                    }
                    if !bounds.holds(a.root.addr) {
                        return Err(bad(format!(
                            "data tree root {} outside the volume (2..{})",
                            a.root.addr, bounds.block_count
                        )));
                    }
                }
                TAG_BLOCKS => {
                    need(8)?;
                    a.blocks = br.u64("blocks")?;
                    if a.blocks > bounds.block_count {
                        return Err(bad(format!(
                            "holds {} blocks, the volume has {}",
                            a.blocks, bounds.block_count
                        )));
                    }
                }
                TAG_FLAGS => {
                    need(4)?;
                    a.flags = br.u32("flags")?;
                    if a.flags & !crate::types::flags::KNOWN != 0 {
                        return Err(bad(format!(
                            "unknown inode flags {:#x}",
                            a.flags & !crate::types::flags::KNOWN
                        )));
                    }
                }
                TAG_XATTR => {
                    let n = br.u8("xattr name length")? as usize;
                    let name = br.bytes(n, "xattr name")?.to_vec();
                    let value = br.bytes(br.remaining(), "xattr value")?.to_vec();
                    if name.is_empty() {
                        return Err(bad("empty xattr name".into()));
                    }
                    a.xattrs.insert(name, value);
                }
                TAG_XATTR_FILE => {
                    need(8)?;
                    a.xattr_file = br.u64("xattr file")?;
                    if a.xattr_file < FIRST_FILE_INO || a.xattr_file >= INO_LIMIT || a.xattr_file == ino {
                        return Err(bad(format!(
                            "xattr file {} is not an inode it may name",
                            a.xattr_file
                        )));
                    }
                }
                TAG_EXTENTS => {
                    if len == 0
                        || !len.is_multiple_of(INLINE_EXTENT_BYTES)
                        || len / INLINE_EXTENT_BYTES > INLINE_EXTENTS
                    {
                        return Err(bad(format!(
                            "extents attribute has length {len}, expected 1 to {INLINE_EXTENTS} times {INLINE_EXTENT_BYTES}"
                        )));
                    }
                    a.inline.clear();
                    while br.remaining() > 0 {
                        let lblock = br.u64("extent logical block")?;
                        let pblock = br.u64("extent start")?;
                        let count = u64::from(br.u32("extent length")?);
                        let birth = br.u32("extent birth")?;
                        if count == 0 {
                            return Err(bad(format!("extent at logical block {lblock} has length 0")));
                        }
                        super::extent::check(lblock, pblock, count, bounds).map_err(bad)?;
                        let e = Extent::written(lblock, pblock, count, birth);
                        if a.inline.last().is_some_and(|p| p.end() > e.lblock) {
                            return Err(bad(format!(
                                "its extents overlap or are out of order at logical block {lblock}"
                            )));
                        }
                        a.inline.push(e);
                    }
                }
                TAG_SUMS => {
                    let n = u64::try_from(len / 4).unwrap_or(u64::MAX);
                    if len == 0 || !len.is_multiple_of(4) || n > INLINE_SUMMED_BLOCKS {
                        return Err(bad(format!(
                            "sums attribute has length {len}, expected 1 to {INLINE_SUMMED_BLOCKS} times 4"
                        )));
                    }
                    sums.clear();
                    while br.remaining() > 0 {
                        sums.push(br.u32("block checksum")?);
                    }
                }
                TAG_TABLE_SUMS => {
                    let m = match body {
                        [m] if *m != 0 && *m < 1 << INLINE_EXTENTS => *m,
                        _ => {
                            return Err(bad(format!(
                                "table sums attribute has length {len} or a bad mask"
                            )))
                        }
                    };
                    table_mask = m;
                }
                TAG_SCRUB => {
                    a.scrub = Some(ScrubState::decode(body, ino, block, bounds.block_count)?);
                }
                TAG_DAMAGE => {
                    a.damage = scrub_state::decode_damage(body, ino, block, bounds.block_count)?;
                }
                _ => return Err(bad(format!("unknown attribute tag {tag}"))),
            }
        }
        if table_mask != 0 {
            if 8usize.saturating_sub(table_mask.leading_zeros() as usize) > a.inline.len() {
                return Err(bad(format!(
                    "table sums mask {table_mask:#x} names extents the record does not hold"
                )));
            }
            for (k, e) in a.inline.iter_mut().enumerate() {
                e.table_sums = table_mask & (1 << k) != 0;
            }
        }
        if !sums.is_empty() {
            let blocks: u64 = a.inline.iter().filter(|e| !e.table_sums).map(|e| e.count).sum();
            if blocks != sums.len() as u64 {
                return Err(bad(format!(
                    "{} block checksums for {blocks} blocks of extents in the record",
                    sums.len()
                )));
            }
            let mut rest = sums.as_slice();
            for e in a.inline.iter_mut().filter(|e| !e.table_sums) {
                let (mine, more) = rest.split_at(e.count as usize);
                e.sums = mine.to_vec();
                rest = more;
            }
        }
        if !seen_mode {
            return Err(bad("no mode attribute".into()));
        }
        if !a.inline.is_empty() {
            let kind = a.mode & libc::S_IFMT;
            if kind != libc::S_IFREG && kind != libc::S_IFLNK && kind != S_IFXATTR {
                return Err(bad(format!(
                    "extents in the record of a file of mode {:#o}",
                    a.mode
                )));
            }
            if a.root.addr != 0 {
                return Err(bad("both an extent tree and extents in the record".into()));
            }
        }
        if a.xattr_file != 0 && a.mode & libc::S_IFMT == S_IFXATTR {
            return Err(bad(format!("an xattr file names xattr file {}", a.xattr_file)));
        }
        Ok(a)
    }
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects, clippy::indexing_slicing)]
mod tests {
    use super::*;

    const VOLUME: Bounds = Bounds {
        block_size: 4096,
        block_count: 1000,
    };

    #[test]
    fn round_trip() {
        let mut a = InodeAttrs {
            mode: 0o100644,
            uid: 1,
            gid: 2,
            nlink: 3,
            size: 1 << 40,
            rdev: 7,
            parent: 9,
            root: Root { addr: 77, depth: 2 },
            blocks: 12,
            ..Default::default()
        };
        a.mtime = Timespec {
            sec: -5,
            nsec: 999_999_999,
        };
        a.xattrs.insert(b"user.x".to_vec(), b"value".to_vec());
        a.xattrs.insert(b"user.empty".to_vec(), Vec::new());
        let b = a.encode();
        assert_eq!(InodeAttrs::decode(&b, 5, 100, &VOLUME).unwrap(), a);
        assert!(b.len() <= FIXED_ATTRS_MAX + a.xattr_bytes());
        for cut in 0..b.len() {
            let _ = InodeAttrs::decode(&b[..cut], 5, 100, &VOLUME);
        }
    }

    fn inline_file(extents: &[(u64, u64, u64)]) -> InodeAttrs {
        InodeAttrs {
            mode: 0o100644,
            nlink: 1,
            blocks: extents.iter().map(|e| e.2).sum(),
            inline: extents
                .iter()
                .map(|&(lblock, pblock, count)| Extent::written(lblock, pblock, count, (lblock % 3) as u32))
                .collect(),
            ..Default::default()
        }
    }

    /// Extents held in the record round-trip (24 bytes each after the
    /// attribute header); a bad map is corruption naming the block.
    #[test]
    fn inline_extents_round_trip_and_are_checked() {
        let a = inline_file(&[(0, 10, 2), (5, 40, 1), (9, 100, 3)]);
        let b = a.encode();
        assert_eq!(InodeAttrs::decode(&b, 5, 100, &VOLUME).unwrap(), a);
        assert!(b.len() <= FIXED_ATTRS_MAX + inline_cost(3));
        assert_eq!(inline_cost(3), 3 + 72);
        let bad: [(&str, InodeAttrs); 6] = [
            ("overlap", inline_file(&[(0, 10, 2), (1, 40, 1)])),
            ("outside the volume", inline_file(&[(0, 999, 2)])),
            (
                "expected 1 to 4",
                inline_file(&[(0, 10, 1), (1, 20, 1), (2, 30, 1), (3, 40, 1), (4, 50, 1)]),
            ),
            ("length 0", inline_file(&[(0, 10, 0)])),
            ("both", {
                let mut a = inline_file(&[(0, 10, 1)]);
                a.root = Root { addr: 9, depth: 0 };
                a
            }),
            ("mode", {
                let mut a = inline_file(&[(0, 10, 1)]);
                a.mode = 0o40755;
                a
            }),
        ];
        for (what, a) in bad {
            let e = InodeAttrs::decode(&a.encode(), 5, 123, &VOLUME)
                .unwrap_err()
                .to_string();
            assert!(e.contains("block 123") && e.contains(what), "{what}: {e}");
        }
    }

    /// Values past the volume's bounds are corruption naming the block.
    #[test]
    fn out_of_bounds_values_name_the_block() {
        type Patch = fn(&mut InodeAttrs);
        let patches: [(&str, Patch); 4] = [
            ("root", |a| a.root.addr = 1000),
            ("size", |a| a.size = u64::MAX),
            ("blocks", |a| a.blocks = 1001),
            ("parent", |a| a.parent = 1 << 48),
        ];
        for (what, patch) in patches {
            let mut a = InodeAttrs {
                mode: 0o40755,
                nlink: 2,
                root: Root { addr: 9, depth: 0 },
                ..Default::default()
            };
            patch(&mut a);
            let e = InodeAttrs::decode(&a.encode(), 5, 123, &VOLUME)
                .unwrap_err()
                .to_string();
            assert!(e.contains("block 123") && e.contains(what), "{what}: {e}");
        }
    }
}
