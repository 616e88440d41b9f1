//! The fields of one metadata block, found by parsing it the way the
//! engine's decoders do (docs/FORMAT.md): superblock fields, a btree node's
//! header and entries (extent, attribute and directory entry values field by
//! field), a bitmap block's header and bits, a log block's header and each
//! record's fields. `resealed_image` mutates these fields and reseals the
//! block, so the damage reaches the decoders behind the checksum.
//!
//! Calls nothing in the engine: the layout is parsed here, tolerantly (a
//! block that does not parse yields the fields found so far).

/// One field: byte offset in the block and width in bytes (1, 2, 4 or 8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    pub at: usize,
    pub width: usize,
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
    fn push(&mut self, at: usize, width: usize) {
        self.fields.push(Field { at, width });
    }
    /// A run of u64 fields.
    fn u64s(&mut self, at: usize, n: usize) {
        for i in 0..n {
            self.push(at + 8 * i, 8);
        }
    }
}

/// Every field of `block` (read from address `addr`).
pub fn fields(block: &[u8], addr: usize) -> Vec<Field> {
    let mut o = Out { fields: Vec::new() };
    match kind(block, addr) {
        Kind::Super => {
            o.push(12, 4); // version
            o.push(16, 4); // block size
            o.push(20, 4); // flags
            o.u64s(24, 14); // block count .. log prev crc
        }
        Kind::Leaf => {
            node_header(&mut o);
            leaf_entries(&mut o, block);
        }
        Kind::Branch => {
            node_header(&mut o);
            let count = u16_at(block, 26).unwrap_or(0);
            o.u64s(32, (count * 2).min(block.len().saturating_sub(32) / 8));
        }
        Kind::Bitmap => {
            o.u64s(16, 2);
            for at in (32..block.len()).step_by(8) {
                o.push(at, 8);
            }
        }
        Kind::Log => {
            o.u64s(16, 3); // seq, next, delta
            o.push(40, 4); // prev crc
            o.push(44, 2); // flags
            o.push(46, 2); // used
            let used = u16_at(block, 46).unwrap_or(0);
            log_records(&mut o, block, 56, (56 + used).min(block.len()));
        }
        Kind::Other => {}
    }
    o.fields
}

fn node_header(o: &mut Out) {
    o.push(16, 8); // owner
    o.push(24, 1); // kind
    o.push(25, 1); // level
    o.push(26, 2); // count
}

fn leaf_entries(o: &mut Out, b: &[u8]) {
    let tree_kind = b.get(24).copied().unwrap_or(0);
    let count = u16_at(b, 26).unwrap_or(0);
    let mut at = 32;
    for _ in 0..count {
        let Some(len) = u16_at(b, at + 8) else { return };
        o.push(at, 8); // key
        o.push(at + 8, 2); // value length
        let v = at + 10;
        if v + len > b.len() {
            return;
        }
        match tree_kind {
            1 => attributes(o, b, v, v + len),
            2 => {
                o.push(v, 8); // physical start
                o.push(v + 8, 4); // count
            }
            3 => {
                o.push(v, 8); // inode
                o.push(v + 8, 1); // type
                for i in v + 9..v + len {
                    o.push(i, 1); // name bytes
                }
            }
            _ => {}
        }
        at = v + len;
    }
}

/// Inode attributes: `tag u8, len u16, body`; bodies as their fields.
fn attributes(o: &mut Out, b: &[u8], mut at: usize, end: usize) {
    while at + 3 <= end {
        let tag = b[at];
        let Some(len) = u16_at(b, at + 1) else { return };
        o.push(at, 1);
        o.push(at + 1, 2);
        let body = at + 3;
        if body + len > end {
            return;
        }
        match tag {
            1 => (0..4).for_each(|i| o.push(body + 4 * i, 4)),
            3 => (0..4).for_each(|i| {
                o.push(body + 12 * i, 8);
                o.push(body + 12 * i + 8, 4);
            }),
            6 => {
                o.push(body, 8);
                o.push(body + 8, 1);
            }
            7 => o.push(body, 1), // xattr name length
            _ if len == 8 => o.push(body, 8),
            _ => {}
        }
        at = body + len;
    }
}

/// Log records from `at` to `end`, each field by its type's layout.
fn log_records(o: &mut Out, b: &[u8], mut at: usize, end: usize) {
    while at < end {
        let t = b[at];
        o.push(at, 1);
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
            _ => return,
        };
        let mut p = f;
        for &w in widths {
            o.push(p, w);
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
