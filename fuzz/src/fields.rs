//! The fields of one metadata block, found by parsing it the way the
//! engine's decoders do (docs/FORMAT.md): superblock fields, a btree node's
//! header and entries (extent, attribute and directory entry values field by
//! field), a bitmap block's header and bits, a log block's header and each
//! record's fields. `resealed_image` mutates these fields and reseals the
//! block, so the damage reaches the decoders behind the checksum.
//!
//! Calls nothing in the engine: the layout is parsed here, tolerantly (a
//! block that does not parse yields the fields found so far).

/// One field: byte offset in the block, width in bytes (1, 2, 4 or 8),
/// and what it is (`structure: field`, as the repair matrix groups them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    pub at: usize,
    pub width: usize,
    pub what: &'static str,
}

/// What a block is, by its magic (or its address for the superblocks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Super,
    Leaf,
    Branch,
    Bitmap,
    Log,
    Other,
}

pub fn kind(block: &[u8], addr: usize) -> Kind {
    if addr < 2 {
        return Kind::Super;
    }
    match block.get(..4) {
        Some(b"T3LF") => Kind::Leaf,
        Some(b"T3BR") => Kind::Branch,
        Some(b"T3BM") => Kind::Bitmap,
        Some(b"T3LG") => Kind::Log,
        _ => Kind::Other,
    }
}

fn u16_at(b: &[u8], at: usize) -> Option<usize> {
    let s = b.get(at..at.checked_add(2)?)?;
    Some(u16::from_le_bytes([s[0], s[1]]) as usize)
}

struct Out {
    fields: Vec<Field>,
}

impl Out {
    fn push(&mut self, at: usize, width: usize, what: &'static str) {
        self.fields.push(Field { at, width, what });
    }
}

/// Every field of `block` (read from address `addr`).
pub fn fields(block: &[u8], addr: usize) -> Vec<Field> {
    let mut o = Out { fields: Vec::new() };
    match kind(block, addr) {
        Kind::Super => {
            o.push(12, 4, "superblock: version");
            o.push(16, 4, "superblock: block size");
            o.push(20, 4, "superblock: flags");
            for (i, what) in SUPER_U64S.iter().enumerate() {
                o.push(24 + 8 * i, 8, what);
            }
            if u32_at(block, 20).is_some_and(|f| f & 1 != 0) {
                o.push(136, 8, "superblock: snapshot root");
                o.push(144, 8, "superblock: snapshot depth");
                o.push(152, 8, "superblock: generation");
            }
        }
        Kind::Leaf => {
            node_header(&mut o);
            leaf_entries(&mut o, block);
        }
        Kind::Branch => {
            node_header(&mut o);
            let count = u16_at(block, 26).unwrap_or(0);
            let n = count.min(block.len().saturating_sub(32) / 16);
            for i in 0..n {
                o.push(32 + 16 * i, 8, "branch: key");
                o.push(40 + 16 * i, 8, "branch: child");
            }
        }
        Kind::Bitmap => {
            o.push(16, 8, "bitmap: index");
            o.push(24, 8, "bitmap: reserved");
            for at in (32..block.len()).step_by(8) {
                o.push(at, 8, "bitmap: bits");
            }
        }
        Kind::Log => {
            o.push(16, 8, "log block: sequence");
            o.push(24, 8, "log block: next");
            o.push(32, 8, "log block: delta");
            o.push(40, 4, "log block: prev crc");
            o.push(44, 2, "log block: flags");
            o.push(46, 2, "log block: used");
            let used = u16_at(block, 46).unwrap_or(0);
            log_records(&mut o, block, 56, (56 + used).min(block.len()));
        }
        Kind::Other => {}
    }
    o.fields
}

/// The superblock's u64 fields from offset 24 on, in order.
const SUPER_U64S: [&str; 14] = [
    "superblock: block count",
    "superblock: sequence",
    "superblock: volume id",
    "superblock: itable root",
    "superblock: itable depth",
    "superblock: bitmap root",
    "superblock: bitmap depth",
    "superblock: bitmap blocks",
    "superblock: log head",
    "superblock: log sequence",
    "superblock: next delta",
    "superblock: created",
    "superblock: unifies",
    "superblock: log prev crc",
];

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

fn node_header(o: &mut Out) {
    o.push(16, 8, "node header: owner");
    o.push(24, 1, "node header: kind");
    o.push(25, 1, "node header: level");
    o.push(26, 2, "node header: count");
    o.push(28, 4, "node header: birth");
}

fn leaf_entries(o: &mut Out, b: &[u8]) {
    let tree_kind = b.get(24).copied().unwrap_or(0);
    let count = u16_at(b, 26).unwrap_or(0);
    let mut at = 32;
    for _ in 0..count {
        let Some(len) = u16_at(b, at + 8) else { return };
        let (key, vlen) = match tree_kind {
            1 => ("inode table: key", "inode table: value length"),
            2 => ("extent: key", "extent: value length"),
            3 => ("dirent: key", "dirent: value length"),
            _ => ("snapshot table: key", "snapshot table: value length"),
        };
        o.push(at, 8, key);
        o.push(at + 8, 2, vlen);
        let v = at + 10;
        if v + len > b.len() {
            return;
        }
        match tree_kind {
            1 => attributes(o, b, v, v + len),
            2 => extent(o, v, len),
            3 => {
                o.push(v, 8, "dirent: inode");
                o.push(v + 8, 1, "dirent: type");
                for i in v + 9..v + len {
                    o.push(i, 1, "dirent: name");
                }
            }
            4 => snapshot_value(o, b, at, v, len),
            _ => {}
        }
        at = v + len;
    }
}

/// An extent value (FORMAT.md 7.2): start, count, birth, flags, and a
/// checksum per block in the summed form.
fn extent(o: &mut Out, v: usize, len: usize) {
    o.push(v, 8, "extent: start");
    o.push(v + 8, 4, "extent: count");
    if len >= 16 {
        o.push(v + 12, 4, "extent: birth");
    }
    if len >= 17 {
        o.push(v + 16, 1, "extent: flags");
    }
    for at in (v + 17..v + len).step_by(4) {
        o.push(at, 4, "data checksum: in an extent");
    }
}

/// A snapshot table value (FORMAT.md 14): a snapshot record (key at or
/// above 2^62) field by field, or a dead extent's varint bytes.
fn snapshot_value(o: &mut Out, b: &[u8], key_at: usize, v: usize, len: usize) {
    let key = b
        .get(key_at..key_at + 8)
        .map_or(0, |k| u64::from_le_bytes(k.try_into().unwrap_or([0; 8])));
    if key < 1 << 62 {
        for i in v..v + len {
            o.push(i, 1, "dead list: extent");
        }
        return;
    }
    if len < 26 {
        return;
    }
    o.push(v, 1, "snapshot record: flags");
    o.push(v + 1, 8, "snapshot record: created");
    o.push(v + 9, 8, "snapshot record: itable root");
    o.push(v + 17, 1, "snapshot record: itable depth");
    o.push(v + 18, 8, "snapshot record: referenced");
    for i in v + 26..v + len {
        o.push(i, 1, "snapshot record: name or origin");
    }
}

/// Inode attributes: `tag u8, len u16, body`; bodies as their fields.
fn attributes(o: &mut Out, b: &[u8], mut at: usize, end: usize) {
    while at + 3 <= end {
        let tag = b[at];
        let Some(len) = u16_at(b, at + 1) else { return };
        o.push(at, 1, "inode: attribute tag");
        o.push(at + 1, 2, "inode: attribute length");
        let body = at + 3;
        if body + len > end {
            return;
        }
        match tag {
            1 => {
                o.push(body, 4, "inode: mode");
                o.push(body + 4, 4, "inode: uid");
                o.push(body + 8, 4, "inode: gid");
                o.push(body + 12, 4, "inode: nlink");
            }
            2 => o.push(body, 8, "inode: size"),
            3 => (0..4).for_each(|i| {
                o.push(body + 12 * i, 8, "inode: times");
                o.push(body + 12 * i + 8, 4, "inode: times nsec");
            }),
            4 => o.push(body, 8, "inode: rdev"),
            5 => o.push(body, 8, "inode: parent"),
            6 => {
                o.push(body, 8, "inode: tree root");
                o.push(body + 8, 1, "inode: tree depth");
            }
            7 => o.push(body, 1, "inode: xattr name length"),
            8 => o.push(body, 8, "inode: blocks"),
            9 => (0..len / 24).for_each(|i| {
                let e = body + 24 * i;
                o.push(e, 8, "inode: extent in record");
                o.push(e + 8, 8, "inode: extent in record");
                o.push(e + 16, 4, "inode: extent in record");
                o.push(e + 20, 4, "inode: extent in record");
            }),
            10 => o.push(body, 8, "inode: xattr file"),
            11 => o.push(body, 4, "inode: flags"),
            12 => (0..len / 4).for_each(|i| o.push(body + 4 * i, 4, "data checksum: in a record")),
            13 => {
                o.push(body, 1, "scrub state: version, phase");
                o.push(body + 1, 1, "scrub state: version, phase");
                (0..3).for_each(|i| o.push(body + 2 + 8 * i, 8, "scrub state: position, total, done"));
                (3..8).for_each(|i| o.push(body + 2 + 8 * i, 8, "scrub state: counts, times"));
                o.push(body + 66, 2, "scrub state: reserved");
            }
            14 => (0..len / 16).for_each(|i| {
                o.push(body + 16 * i, 8, "known damage: block");
                o.push(body + 16 * i + 8, 4, "known damage: checksums");
                o.push(body + 16 * i + 12, 4, "known damage: checksums");
            }),
            _ => {}
        }
        at = body + len;
    }
}

/// Log records from `at` to `end`, each field by its type's layout.
fn log_records(o: &mut Out, b: &[u8], mut at: usize, end: usize) {
    while at < end {
        let t = b[at];
        o.push(at, 1, "log record: type");
        let f = at + 1;
        // (fixed field widths, offset of a u16 length of trailing bytes)
        let (widths, var): (&[usize], Option<usize>) = match t {
            1 | 2 => (&[8, 4], None),
            3 => (&[8, 8, 8], None),
            4 | 11 => (&[8, 8], None),
            5 | 9 => (&[8], None),
            6 => (&[8, 2], Some(8)),
            7 => (&[8, 8, 2, 2], Some(18)),
            8 => (&[8, 8, 2], Some(16)),
            10 => (&[8, 4, 4], None),
            12 => (&[8, 4, 4], None),
            13 => (&[8, 4], None),
            14..=16 => (&[8], None),
            _ => return,
        };
        let what = match t {
            1 | 2 => "log record: balloc/bfree",
            3..=5 => "log record: leaf map",
            6 => "log record: inode image",
            7 => "log record: data inline",
            8 | 11 => "log record: dirent",
            10 => "log record: block sum",
            _ => "log record: snapshots, orphans",
        };
        let mut p = f;
        for &w in widths {
            o.push(p, w, what);
            p += w;
        }
        if let Some(len_at) = var {
            let Some(n) = u16_at(b, f + len_at) else { return };
            if t == 6 && p + n <= end {
                attributes(o, b, p, p + n);
            }
            p += n;
        }
        at = p;
    }
}

/// Interesting values for a field of `width` bytes in a volume of
/// `blocks` blocks, picked by `pick`.
pub fn interesting(pick: u8, width: usize, blocks: u64) -> u64 {
    let max = if width >= 8 {
        u64::MAX
    } else {
        (1u64 << (8 * width)) - 1
    };
    let v = match pick % 16 {
        0 => 0,
        1 => 1,
        2 => 2,
        3 => blocks.saturating_sub(1),
        4 => blocks,
        5 => blocks + 1,
        6 => max,
        7 => max - 1,
        8 => max / 2,
        9 => max / 2 + 1,
        10 => 1 << 40,
        11 => 1 << 48,
        12 => 255,
        13 => 256,
        14 => 65535,
        _ => u32::MAX as u64,
    };
    v & max
}
