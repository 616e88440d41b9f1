//! The arguments of the snapshot ioctls ([`crate::IOC_SNAPSHOT_CREATE`],
//! [`crate::IOC_SNAPSHOT_DELETE`], [`crate::IOC_SNAPSHOT_LIST`]), encoded
//! and decoded. FUSE passes a server only ioctls whose argument size is in
//! the command number (the kernel copies that many bytes in and out), so
//! each argument has a fixed size: a name NUL-padded to 256 bytes, and a
//! snapshot record of 336 bytes. Both sides are on one machine: numbers are
//! in native byte order.
//!
//! Calls nothing but the engine's value type [`SnapshotInfo`].

use tux3::types::{SnapOrigin, SnapshotInfo};

/// Size of the name argument of create and delete: a name of at most 255
/// bytes, NUL-padded.
pub const SNAPSHOT_NAME_ARG: usize = 256;

/// Size of the record [`crate::IOC_SNAPSHOT_LIST`] carries in and out.
/// Layout, native byte order:
///
/// | offset | size | field |
/// |---|---|---|
/// | 0 | 8 | from: in, the lowest snapshot id wanted (0: the oldest snapshot); out, the same |
/// | 8 | 4 | flags: 1 a snapshot follows (the first with an id at or above `from`), 2 it is being deleted; 0 the end marker (none) |
/// | 12 | 4 | length of the name |
/// | 16 | 8 | id |
/// | 24 | 8 | created: seconds since the epoch (signed) |
/// | 32 | 8 | extents left to reclaim |
/// | 40 | 8 | unique bytes |
/// | 48 | 8 | referenced bytes |
/// | 56 | 256 | name, NUL-padded |
/// | 312 | 8 | origin: the volume id it was first taken on |
/// | 320 | 8 | origin: its id on that volume |
/// | 328 | 8 | zero |
pub const SNAPSHOT_RECORD_LEN: usize = 336;

const PRESENT: u32 = 1;
const DELETING: u32 = 2;
const NAME_AT: usize = 56;
const ORIGIN_AT: usize = 312;

/// `name` as the argument of create or delete; `None` if it cannot be one
/// (longer than 255 bytes, or holding a NUL).
pub fn encode_name(name: &[u8]) -> Option<[u8; SNAPSHOT_NAME_ARG]> {
    if name.len() >= SNAPSHOT_NAME_ARG || name.contains(&0) {
        return None;
    }
    let mut arg = [0; SNAPSHOT_NAME_ARG];
    arg[..name.len()].copy_from_slice(name);
    Some(arg)
}

/// The name in a create or delete argument: the bytes before the first NUL
/// of its first 256. `None` if there is no NUL there (a name too long).
pub fn decode_name(arg: &[u8]) -> Option<&[u8]> {
    let arg = &arg[..arg.len().min(SNAPSHOT_NAME_ARG)];
    let end = arg.iter().position(|&b| b == 0)?;
    Some(&arg[..end])
}

/// The list argument that asks for the first snapshot with an id of `index` or more.
pub fn list_request(index: u64) -> [u8; SNAPSHOT_RECORD_LEN] {
    let mut rec = [0; SNAPSHOT_RECORD_LEN];
    rec[..8].copy_from_slice(&index.to_ne_bytes());
    rec
}

/// The lowest id a list argument asks for; `None` if it is too short.
pub fn list_index(arg: &[u8]) -> Option<u64> {
    Some(u64::from_ne_bytes(arg.get(..8)?.try_into().ok()?))
}

/// The list answer for `index` (the lowest id asked for): snapshot `s`, or the end marker.
pub fn encode_snapshot(index: u64, s: Option<&SnapshotInfo>) -> [u8; SNAPSHOT_RECORD_LEN] {
    let mut rec = list_request(index);
    let Some(s) = s else { return rec };
    let name = &s.name[..s.name.len().min(SNAPSHOT_NAME_ARG - 1)];
    let flags = PRESENT | if s.deleting { DELETING } else { 0 };
    rec[8..12].copy_from_slice(&flags.to_ne_bytes());
    rec[12..16].copy_from_slice(&(name.len() as u32).to_ne_bytes());
    let fields = [
        s.id,
        s.created as u64,
        s.reclaim_left,
        s.unique_bytes,
        s.referenced_bytes,
    ];
    for (i, v) in fields.iter().enumerate() {
        rec[16 + 8 * i..24 + 8 * i].copy_from_slice(&v.to_ne_bytes());
    }
    rec[NAME_AT..NAME_AT + name.len()].copy_from_slice(name);
    rec[ORIGIN_AT..ORIGIN_AT + 8].copy_from_slice(&s.origin.volume.to_ne_bytes());
    rec[ORIGIN_AT + 8..ORIGIN_AT + 16].copy_from_slice(&s.origin.id.to_ne_bytes());
    rec
}

/// The snapshot in a list answer, or `None` for the end marker.
pub fn decode_snapshot(rec: &[u8; SNAPSHOT_RECORD_LEN]) -> Option<SnapshotInfo> {
    let u32_at = |at: usize| u32::from_ne_bytes([rec[at], rec[at + 1], rec[at + 2], rec[at + 3]]);
    let u64_at = |at: usize| {
        let mut b = [0; 8];
        b.copy_from_slice(&rec[at..at + 8]);
        u64::from_ne_bytes(b)
    };
    let flags = u32_at(8);
    if flags & PRESENT == 0 {
        return None;
    }
    let len = (u32_at(12) as usize).min(SNAPSHOT_NAME_ARG - 1);
    Some(SnapshotInfo {
        id: u64_at(16),
        name: rec[NAME_AT..NAME_AT + len].to_vec(),
        created: u64_at(24) as i64,
        deleting: flags & DELETING != 0,
        reclaim_left: u64_at(32),
        unique_bytes: u64_at(40),
        referenced_bytes: u64_at(48),
        origin: SnapOrigin {
            volume: u64_at(ORIGIN_AT),
            id: u64_at(ORIGIN_AT + 8),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{IOC_SNAPSHOT_CREATE, IOC_SNAPSHOT_DELETE, IOC_SNAPSHOT_LIST, IOC_SYNC};

    #[test]
    fn names_round_trip_and_bad_ones_are_refused() {
        let arg = encode_name(b"daily").unwrap();
        assert_eq!(decode_name(&arg), Some(&b"daily"[..]));
        let longest = vec![b'x'; 255];
        assert_eq!(decode_name(&encode_name(&longest).unwrap()), Some(&longest[..]));
        assert!(encode_name(&[b'x'; 256]).is_none());
        assert!(encode_name(b"a\0b").is_none());
        assert_eq!(decode_name(&[b'x'; 256]), None);
        assert_eq!(decode_name(&[b'x'; 10]), None);
    }

    #[test]
    fn records_round_trip() {
        let s = SnapshotInfo {
            id: 42,
            name: b"before upgrade".to_vec(),
            created: -5,
            deleting: true,
            reclaim_left: 7,
            unique_bytes: 1 << 40,
            referenced_bytes: 3 << 30,
            origin: SnapOrigin {
                volume: 0xfeed_f00d,
                id: 41,
            },
        };
        let rec = encode_snapshot(9, Some(&s));
        assert_eq!(list_index(&rec), Some(9));
        assert_eq!(decode_snapshot(&rec), Some(s));
        let end = encode_snapshot(3, None);
        assert_eq!(list_index(&end), Some(3));
        assert_eq!(decode_snapshot(&end), None);
        assert_eq!(list_index(&[0; 4]), None);
    }

    #[test]
    fn ioctl_numbers_carry_their_sizes() {
        // asm-generic layout: direction in bits 30-31 (1 write, 2 read),
        // size in bits 16-29, type 0xE3, number.
        if cfg!(any(target_arch = "x86_64", target_arch = "aarch64")) {
            assert_eq!(IOC_SYNC, 0xE301);
            assert_eq!(IOC_SNAPSHOT_CREATE, 0x4100_E302);
            assert_eq!(IOC_SNAPSHOT_DELETE, 0x4100_E303);
            assert_eq!(IOC_SNAPSHOT_LIST, 0xC150_E304);
        }
    }
}
