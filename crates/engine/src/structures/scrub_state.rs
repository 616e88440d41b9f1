//! Structures layer: the scrub state record (format attribute 13, held by
//! the record of reserved inode 4, `SCRUB_INO`, in the inode table; see
//! `docs/FORMAT.md` section 16). It says how far a scrub of the volume got
//! (so that one interrupted by an unmount or a crash resumes near where it
//! stopped), what it found, and how many data checksum mismatches reads of
//! the volume have met in its lifetime.
//!
//! Fixed layout, 68 bytes: version u8 (1), state u8, then u64 position,
//! total, done, data damage, metadata damage, started (seconds, signed),
//! updated (seconds, signed), data errors; u16 reserved (0).
//!
//! Beside it, in the same record, attribute 14: the known damage, the data
//! blocks whose checksum mismatch a repair recorded (`KnownDamage`), so
//! that fsck names them without counting them as problems again.
//!
//! Calls only the codec and errors.

use crate::codec::{Reader, Writer};
use crate::error::{Error, Result};

/// The reserved inode whose record holds the scrub state.
pub const SCRUB_INO: u64 = 4;
/// Bytes of the attribute's body.
pub const SCRUB_STATE_LEN: usize = 68;
const VERSION: u8 = 1;

/// Where a scrub is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ScrubPhase {
    /// Never run.
    #[default]
    None = 0,
    /// Running, or stopped by an unmount or a crash: `start` resumes it.
    Running = 1,
    /// Cancelled: `start` resumes it.
    Cancelled = 2,
    /// Finished: `start` begins again.
    Finished = 3,
}

impl ScrubPhase {
    pub fn name(self) -> &'static str {
        match self {
            ScrubPhase::None => "never run",
            ScrubPhase::Running => "running or interrupted",
            ScrubPhase::Cancelled => "cancelled",
            ScrubPhase::Finished => "finished",
        }
    }
}

/// The scrub state record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ScrubState {
    pub phase: ScrubPhase,
    /// Every block below this address has been scrubbed.
    pub position: u64,
    /// Bytes the scrub reads in all, as planned when it began.
    pub total: u64,
    /// Bytes read so far.
    pub done: u64,
    /// Damaged data blocks found (confirmed).
    pub data_damage: u64,
    /// Damaged metadata blocks found (confirmed).
    pub meta_damage: u64,
    /// When the scrub began, seconds since the epoch.
    pub started: i64,
    /// When the record was last written, seconds since the epoch.
    pub updated: i64,
    /// Data checksum mismatches reads of the volume have met, ever.
    pub data_errors: u64,
}

impl ScrubState {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(SCRUB_STATE_LEN);
        w.u8(VERSION);
        w.u8(self.phase as u8);
        for v in [
            self.position,
            self.total,
            self.done,
            self.data_damage,
            self.meta_damage,
        ] {
            w.u64(v);
        }
        w.i64(self.started);
        w.i64(self.updated);
        w.u64(self.data_errors);
        w.u16(0);
        w.buf
    }

    /// Decode the body of attribute 13 found in the record of inode `ino`
    /// in block `block` of a volume of `block_count` blocks.
    pub fn decode(b: &[u8], ino: u64, block: u64, block_count: u64) -> Result<ScrubState> {
        let bad = |what: String| Error::corrupt(block, format!("inode {ino}: scrub state: {what}"));
        if ino != SCRUB_INO {
            return Err(bad(format!("held by inode {ino}, not {SCRUB_INO}")));
        }
        if b.len() != SCRUB_STATE_LEN {
            return Err(bad(format!("length {}, expected {SCRUB_STATE_LEN}", b.len())));
        }
        let mut r = Reader::new(b, block);
        let version = r.u8("scrub state version")?;
        if version != VERSION {
            return Err(bad(format!("version {version}, expected {VERSION}")));
        }
        let phase = match r.u8("scrub phase")? {
            0 => ScrubPhase::None,
            1 => ScrubPhase::Running,
            2 => ScrubPhase::Cancelled,
            3 => ScrubPhase::Finished,
            p => return Err(bad(format!("unknown phase {p}"))),
        };
        let mut counts = [0u64; 5];
        for (v, what) in
            counts
                .iter_mut()
                .zip(["position", "total", "done", "data damage", "metadata damage"])
        {
            *v = r.u64(what)?;
        }
        let [position, total, done, data_damage, meta_damage] = counts;
        let (started, updated) = (r.i64("start time")?, r.i64("update time")?);
        let s = ScrubState {
            phase,
            position,
            total,
            done,
            data_damage,
            meta_damage,
            started,
            updated,
            data_errors: r.u64("data errors")?,
        };
        if r.u16("reserved")? != 0 {
            return Err(bad("reserved bytes are not zero".into()));
        }
        if s.position > block_count {
            return Err(bad(format!(
                "position {} past the volume's {block_count} blocks",
                s.position
            )));
        }
        if s.done > s.total {
            return Err(bad(format!("{} bytes done of {}", s.done, s.total)));
        }
        Ok(s)
    }
}

/// Most entries of the known-damage list (attribute 14): 2,048 bytes.
pub const MAX_KNOWN_DAMAGE: usize = 128;
/// Bytes of one entry.
pub const KNOWN_DAMAGE_ENTRY: usize = 16;

/// A data block whose checksum mismatch `fsck --repair` recorded (FORMAT.md
/// section 16.1): reads of it still fail with EIO, but fsck names it as
/// known rather than as a problem, while a block at that address is mapped
/// with that expected checksum. A block rewritten (new data, new checksum)
/// or freed no longer matches its entry; the next repair that records
/// damage drops the entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct KnownDamage {
    /// Device block.
    pub block: u64,
    /// The checksum its extent holds.
    pub expected: u32,
    /// The checksum of what the device held when the repair read it.
    pub found: u32,
}

/// The body of attribute 14 for `list` (sorted by block, no two entries of
/// one block, at most [`MAX_KNOWN_DAMAGE`]).
pub fn encode_damage(list: &[KnownDamage]) -> Vec<u8> {
    let mut w = Writer::with_capacity(list.len().saturating_mul(KNOWN_DAMAGE_ENTRY));
    for d in list {
        w.u64(d.block);
        w.u32(d.expected);
        w.u32(d.found);
    }
    w.buf
}

/// Decode the body of attribute 14 found in the record of inode `ino` in
/// block `block` of a volume of `block_count` blocks: 1 ..= 128 entries of
/// 16 bytes, blocks inside the volume in strictly increasing order, each
/// with `found != expected`.
pub fn decode_damage(b: &[u8], ino: u64, block: u64, block_count: u64) -> Result<Vec<KnownDamage>> {
    let bad = |what: String| Error::corrupt(block, format!("inode {ino}: known damage: {what}"));
    if ino != SCRUB_INO {
        return Err(bad(format!("held by inode {ino}, not {SCRUB_INO}")));
    }
    let n = b.len() / KNOWN_DAMAGE_ENTRY;
    if b.is_empty() || !b.len().is_multiple_of(KNOWN_DAMAGE_ENTRY) || n > MAX_KNOWN_DAMAGE {
        return Err(bad(format!(
            "length {}, expected 1 to {MAX_KNOWN_DAMAGE} times {KNOWN_DAMAGE_ENTRY}",
            b.len()
        )));
    }
    let mut r = Reader::new(b, block);
    let mut out: Vec<KnownDamage> = Vec::with_capacity(n);
    for _ in 0..n {
        let d = KnownDamage {
            block: r.u64("damaged block")?,
            expected: r.u32("expected checksum")?,
            found: r.u32("found checksum")?,
        };
        if d.block >= block_count {
            return Err(bad(format!(
                "block {} past the volume's {block_count} blocks",
                d.block
            )));
        }
        if out.last().is_some_and(|l| l.block >= d.block) {
            return Err(bad(format!("block {} out of order", d.block)));
        }
        if d.found == d.expected {
            return Err(bad(format!(
                "block {}: found checksum {:#010x} is the expected one",
                d.block, d.found
            )));
        }
        out.push(d);
    }
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::indexing_slicing)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_hostile_bodies() {
        let s = ScrubState {
            phase: ScrubPhase::Cancelled,
            position: 77,
            total: 1 << 30,
            done: 1 << 20,
            data_damage: 2,
            meta_damage: 1,
            started: -5,
            updated: 9,
            data_errors: 3,
        };
        let b = s.encode();
        assert_eq!(b.len(), SCRUB_STATE_LEN);
        assert_eq!(ScrubState::decode(&b, SCRUB_INO, 9, 100).unwrap(), s);
        // Each damage is an error naming the block, never a panic.
        assert!(ScrubState::decode(&b, 17, 9, 100).is_err());
        assert!(ScrubState::decode(&b[..10], SCRUB_INO, 9, 100).is_err());
        assert!(ScrubState::decode(&b, SCRUB_INO, 9, 50).is_err());
        let mut p = b.clone();
        p[1] = 9;
        let e = ScrubState::decode(&p, SCRUB_INO, 9, 100).unwrap_err();
        assert!(e.to_string().contains("unknown phase"), "{e}");
        let mut d = b.clone();
        d[2 + 16] = 0xff; // done > total
        d[2 + 23] = 0xff;
        assert!(ScrubState::decode(&d, SCRUB_INO, 9, 100).is_err());
    }

    #[test]
    fn known_damage_round_trip_and_hostile_bodies() {
        let list = vec![
            KnownDamage {
                block: 3,
                expected: 1,
                found: 2,
            },
            KnownDamage {
                block: 99,
                expected: 7,
                found: 0,
            },
        ];
        let b = encode_damage(&list);
        assert_eq!(b.len(), 2 * KNOWN_DAMAGE_ENTRY);
        assert_eq!(decode_damage(&b, SCRUB_INO, 9, 100).unwrap(), list);
        // Each damage is an error naming what is wrong, never a panic.
        let err = |b: &[u8], count: u64| decode_damage(b, SCRUB_INO, 9, count).unwrap_err().to_string();
        assert!(decode_damage(&b, 17, 9, 100).is_err());
        assert!(err(&[], 100).contains("length 0"));
        assert!(err(&b[..20], 100).contains("length 20"));
        assert!(err(&b, 99).contains("past the volume"));
        let swapped = encode_damage(&[list[1], list[0]]);
        assert!(err(&swapped, 100).contains("out of order"));
        let same = encode_damage(&[KnownDamage {
            block: 3,
            expected: 5,
            found: 5,
        }]);
        assert!(err(&same, 100).contains("is the expected one"));
        let many: Vec<KnownDamage> = (0..=MAX_KNOWN_DAMAGE as u64)
            .map(|block| KnownDamage {
                block,
                expected: 0,
                found: 1,
            })
            .collect();
        assert!(err(&encode_damage(&many), 1000).contains("length"));
        assert!(decode_damage(&encode_damage(&many[1..]), SCRUB_INO, 9, 1000).is_ok());
    }
}
