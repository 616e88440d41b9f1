//! Log record types. Each record is a type byte followed by fixed fields;
//! the table below is the whole vocabulary (docs/FORMAT.md repeats it).
//!
//! | type | record | fields | replay effect |
//! |------|--------|--------|---------------|
//! | 1 | Balloc    | start u64, count u32 | mark blocks in use |
//! | 2 | Bfree     | start u64, count u32 | mark blocks free |
//! | 3 | LeafMap   | tree u64, sep u64, addr u64 | leaf `sep` of `tree` is at `addr` |
//! | 4 | LeafUnmap | tree u64, sep u64 | leaf `sep` left `tree` |
//! | 5 | Drop      | tree u64 | forget `tree`'s changes so far: its inode was freed |

use crate::error::Result;
use crate::structures::codec::{Reader, Writer};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record {
    Balloc { start: u64, count: u32 },
    Bfree { start: u64, count: u32 },
    LeafMap { tree: u64, sep: u64, addr: u64 },
    LeafUnmap { tree: u64, sep: u64 },
    Drop { tree: u64 },
}

impl Record {
    /// Encoded size in bytes, by type (the self-describing size table).
    pub fn size(&self) -> usize {
        match self {
            Record::Balloc { .. } | Record::Bfree { .. } => 13,
            Record::LeafMap { .. } => 25,
            Record::LeafUnmap { .. } => 17,
            Record::Drop { .. } => 9,
        }
    }

    pub fn encode(&self, w: &mut Writer) {
        match *self {
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
        }
    }

    /// Decode one record; `r` is positioned at its type byte.
    pub fn decode(r: &mut Reader) -> Result<Record> {
        let t = r.u8("record type")?;
        Ok(match t {
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
                addr: r.u64("leafmap address")?,
            },
            4 => Record::LeafUnmap {
                tree: r.u64("leafunmap tree")?,
                sep: r.u64("leafunmap sep")?,
            },
            5 => Record::Drop {
                tree: r.u64("drop tree")?,
            },
            _ => return Err(r.bad(format!("unknown log record type {t}"))),
        })
    }
}
