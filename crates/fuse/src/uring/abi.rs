//! The kernel's FUSE wire format (`include/uapi/linux/fuse.h`), for both
//! transports: opcodes, the layout of a ring entry's header buffer and of a
//! request read from `/dev/fuse` (`InHeader::parse_dev`), and how requests
//! are split into the opcode's argument struct and payload (the structs
//! are in `args.rs`, the replies in `out.rs`). Requests are read through
//! `#[repr(C)]` structs (zerocopy) with their lengths checked: a request
//! shorter than its struct is refused (EINVAL), never read as zeros.
//! Native endian, as the kernel lays them out.
//!
//! Calls nothing.

use zerocopy::{FromBytes, Immutable, KnownLayout};

/// Request opcodes. FORGET, BATCH_FORGET, INTERRUPT and INIT arrive only
/// through `/dev/fuse`.
pub mod op {
    pub const LOOKUP: u32 = 1;
    pub const FORGET: u32 = 2;
    pub const GETATTR: u32 = 3;
    pub const SETATTR: u32 = 4;
    pub const READLINK: u32 = 5;
    pub const SYMLINK: u32 = 6;
    pub const MKNOD: u32 = 8;
    pub const MKDIR: u32 = 9;
    pub const UNLINK: u32 = 10;
    pub const RMDIR: u32 = 11;
    pub const RENAME: u32 = 12;
    pub const LINK: u32 = 13;
    pub const OPEN: u32 = 14;
    pub const READ: u32 = 15;
    pub const WRITE: u32 = 16;
    pub const STATFS: u32 = 17;
    pub const RELEASE: u32 = 18;
    pub const FSYNC: u32 = 20;
    pub const SETXATTR: u32 = 21;
    pub const GETXATTR: u32 = 22;
    pub const LISTXATTR: u32 = 23;
    pub const REMOVEXATTR: u32 = 24;
    pub const FLUSH: u32 = 25;
    pub const INIT: u32 = 26;
    pub const OPENDIR: u32 = 27;
    pub const READDIR: u32 = 28;
    pub const READDIRPLUS: u32 = 44;
    pub const RELEASEDIR: u32 = 29;
    pub const FSYNCDIR: u32 = 30;
    pub const ACCESS: u32 = 34;
    pub const CREATE: u32 = 35;
    pub const INTERRUPT: u32 = 36;
    pub const DESTROY: u32 = 38;
    pub const IOCTL: u32 = 39;
    pub const BATCH_FORGET: u32 = 42;
    pub const FALLOCATE: u32 = 43;
    pub const RENAME2: u32 = 45;
    pub const LSEEK: u32 = 46;
    pub const TMPFILE: u32 = 51;
    pub const STATX: u32 = 52;
    pub const COPY_FILE_RANGE: u32 = 47;
    /// Protocol 7.45: the same request, its reply a 64-bit count
    /// (`fuse_copy_file_range_out`). A kernel that knows it asks with it
    /// first and falls back to [`COPY_FILE_RANGE`] on ENOSYS.
    pub const COPY_FILE_RANGE_64: u32 = 53;

    /// The size of an opcode's argument struct: what a request read from
    /// `/dev/fuse` holds between its header and its names or data (the
    /// ring gets the same split from the kernel). 0 for opcodes whose
    /// arguments are names only, and for those not served.
    pub fn arg_len(opcode: u32) -> usize {
        match opcode {
            FORGET | MKDIR | RENAME | LINK | OPEN | OPENDIR | ACCESS | INTERRUPT | BATCH_FORGET => 8,
            // `fuse_setxattr_in` without FUSE_SETXATTR_EXT, never asked for.
            SETXATTR | GETXATTR | LISTXATTR => 8,
            GETATTR | MKNOD | FSYNC | FSYNCDIR | CREATE | RENAME2 | TMPFILE => 16,
            RELEASE | RELEASEDIR | FLUSH | LSEEK | STATX => 24,
            IOCTL | FALLOCATE => 32,
            READ | WRITE | READDIR | READDIRPLUS => 40,
            COPY_FILE_RANGE | COPY_FILE_RANGE_64 => 56,
            INIT => 64,
            SETATTR => 88,
            _ => 0,
        }
    }
}

/// Which transport brought a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// An io_uring queue entry.
    Ring,
    /// A read of `/dev/fuse`.
    Dev,
}

/// `io_uring` command opcodes on `/dev/fuse`.
pub const CMD_REGISTER: u32 = 1;
pub const CMD_COMMIT_AND_FETCH: u32 = 2;

/// A ring entry's header buffer (`struct fuse_uring_req_header`): the
/// in/out header, the opcode's own argument struct, and the entry's
/// `fuse_uring_ent_in_out`.
pub const HEADER_LEN: usize = 288;
const OP_IN: usize = 128;
/// Room for the opcode's argument struct.
pub const OP_IN_LEN: usize = 128;
const ENT_IN_OUT: usize = 256;
/// `fuse_out_header` size.
pub const OUT_HEADER_LEN: u32 = 16;

/// `setattr` valid bits (`FATTR_*`).
pub mod fattr {
    pub const MODE: u32 = 1 << 0;
    pub const UID: u32 = 1 << 1;
    pub const GID: u32 = 1 << 2;
    pub const SIZE: u32 = 1 << 3;
    pub const ATIME: u32 = 1 << 4;
    pub const MTIME: u32 = 1 << 5;
    pub const ATIME_NOW: u32 = 1 << 7;
    pub const MTIME_NOW: u32 = 1 << 8;
    pub const CTIME: u32 = 1 << 10;
    pub const KILL_SUIDGID: u32 = 1 << 11;
}

/// `STATX_*` bits of a `fuse_statx` mask.
pub mod statx {
    pub const BASIC_STATS: u32 = 0x7ff;
    pub const BTIME: u32 = 0x800;
}

/// `FOPEN_KEEP_CACHE` in `fuse_open_out.open_flags`.
pub const FOPEN_KEEP_CACHE: u32 = 1 << 1;

/// `FUSE_WRITE_KILL_SUIDGID` in `fuse_write_in.write_flags`.
pub const WRITE_KILL_SUIDGID: u32 = 1 << 2;
/// `FUSE_FSYNC_FDATASYNC` in `fuse_fsync_in.fsync_flags`.
pub const FSYNC_FDATASYNC: u32 = 1;

/// `struct fuse_in_header`.
#[derive(FromBytes, KnownLayout, Immutable, Debug, Clone, Copy)]
#[repr(C)]
struct FuseInHeader {
    len: u32,
    opcode: u32,
    unique: u64,
    nodeid: u64,
    uid: u32,
    gid: u32,
    pid: u32,
    total_extlen: u16,
    padding: u16,
}

/// `struct fuse_uring_ent_in_out`.
#[derive(FromBytes, KnownLayout, Immutable, Debug, Clone, Copy)]
#[repr(C)]
struct EntInOut {
    flags: u64,
    commit_id: u64,
    payload_sz: u32,
    padding: u32,
    reserved: u64,
}

/// `fuse_in_header` size: the part of `len` that is not arguments.
const IN_HEADER_LEN: usize = std::mem::size_of::<FuseInHeader>();

/// The request in a ring entry's header buffer.
#[derive(Debug, Clone, Copy)]
pub struct InHeader {
    pub opcode: u32,
    pub unique: u64,
    pub nodeid: u64,
    pub uid: u32,
    pub gid: u32,
    /// The id to commit the reply with.
    pub commit_id: u64,
    /// Bytes of arguments in the payload buffer.
    pub payload_len: usize,
    /// Bytes of the request (`fuse_in_header.len`): header, the opcode's
    /// argument struct, and the payload.
    pub len: usize,
    /// The transport it came through.
    pub via: Via,
}

/// A request whose lengths do not hold what its opcode needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Short;

/// The `T` at the start of `b`, or [`Short`] if `b` is shorter than `T`.
pub fn read<T: FromBytes + KnownLayout + Immutable>(b: &[u8]) -> Result<T, Short> {
    T::read_from_prefix(b).map(|(t, _)| t).map_err(|_| Short)
}

impl InHeader {
    /// The request of a header buffer; [`Short`] if the buffer cannot hold
    /// one (a ring entry's always does).
    pub fn parse(header: &[u8]) -> Result<InHeader, Short> {
        let h: FuseInHeader = read(header)?;
        let ent: EntInOut = read(header.get(ENT_IN_OUT..).ok_or(Short)?)?;
        Ok(InHeader::of(
            &h,
            ent.commit_id,
            ent.payload_sz as usize,
            Via::Ring,
        ))
    }

    fn of(h: &FuseInHeader, commit_id: u64, payload_len: usize, via: Via) -> InHeader {
        InHeader {
            opcode: h.opcode,
            unique: h.unique,
            nodeid: h.nodeid,
            uid: h.uid,
            gid: h.gid,
            commit_id,
            payload_len,
            len: h.len as usize,
            via,
        }
    }

    /// The request of `bytes` read from `/dev/fuse`: its header, then the
    /// opcode's argument struct ([`op::arg_len`]), then its payload.
    /// Returns the request and where its argument struct starts;
    /// [`Short`] if the bytes are not a whole header or disagree with its
    /// length (a request too short for its argument struct is refused by
    /// the dispatcher, as a ring request is).
    pub fn parse_dev(bytes: &[u8]) -> Result<InHeader, Short> {
        let h: FuseInHeader = read(bytes)?;
        let len = h.len as usize;
        if len != bytes.len() || len < IN_HEADER_LEN {
            return Err(Short);
        }
        let args = len - IN_HEADER_LEN;
        let arg_len = op::arg_len(h.opcode).min(args);
        Ok(InHeader::of(&h, 0, args - arg_len, Via::Dev))
    }

    /// The bytes of the opcode's argument struct the kernel wrote: what
    /// `len` leaves after the header and the payload. [`Short`] if the
    /// lengths contradict each other or the buffers.
    pub fn op_in_len(&self, payload_room: usize) -> Result<usize, Short> {
        if self.payload_len > payload_room {
            return Err(Short);
        }
        let n = self
            .len
            .checked_sub(IN_HEADER_LEN)
            .and_then(|n| n.checked_sub(self.payload_len))
            .ok_or(Short)?;
        if n > OP_IN_LEN {
            return Err(Short);
        }
        Ok(n)
    }
}

/// `fuse_in_header` size: where a request read from `/dev/fuse` has its
/// argument struct.
pub const DEV_ARGS_AT: usize = IN_HEADER_LEN;

/// `struct fuse_out_header` of a reply written to `/dev/fuse`: `error` is
/// 0 or a negative errno, `len` the reply bytes after it.
pub fn out_header(unique: u64, error: i32, len: usize) -> [u8; 16] {
    let mut b = [0; 16];
    b[0..4].copy_from_slice(&(OUT_HEADER_LEN + len as u32).to_ne_bytes());
    b[4..8].copy_from_slice(&error.to_ne_bytes());
    b[8..16].copy_from_slice(&unique.to_ne_bytes());
    b
}

/// The opcode's argument struct in a header buffer (all its room).
pub fn op_in(header: &[u8]) -> &[u8] {
    header.get(OP_IN..ENT_IN_OUT).unwrap_or_default()
}

/// Write the reply's out header (and the payload length) into a header
/// buffer: `error` is 0 or a negative errno, `len` the reply bytes in the
/// payload buffer.
pub fn set_out_header(header: &mut [u8], unique: u64, error: i32, len: usize) {
    let total = OUT_HEADER_LEN + len as u32;
    header[0..4].copy_from_slice(&total.to_ne_bytes());
    header[4..8].copy_from_slice(&error.to_ne_bytes());
    header[8..16].copy_from_slice(&unique.to_ne_bytes());
    header[ENT_IN_OUT + 16..ENT_IN_OUT + 20].copy_from_slice(&(len as u32).to_ne_bytes());
}

/// Split the NUL-terminated strings at the start of a payload: the first
/// `n` of them, or `None` if fewer are there.
pub fn names(payload: &[u8], n: usize) -> Option<Vec<&[u8]>> {
    let mut out = Vec::with_capacity(n);
    let mut rest = payload;
    for _ in 0..n {
        let end = rest.iter().position(|&b| b == 0)?;
        out.push(&rest[..end]);
        rest = &rest[end + 1..];
    }
    Some(out)
}

/// The payload after the first `n` NUL-terminated strings.
pub fn after_names(payload: &[u8], n: usize) -> &[u8] {
    let mut rest = payload;
    for _ in 0..n {
        match rest.iter().position(|&b| b == 0) {
            Some(end) => rest = &rest[end + 1..],
            None => return &[],
        }
    }
    rest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_split_at_nuls() {
        let p = b"old\0new\0rest";
        assert_eq!(names(p, 2).unwrap(), vec![&b"old"[..], &b"new"[..]]);
        assert_eq!(after_names(p, 2), b"rest");
        assert!(names(b"unterminated", 1).is_none());
        assert_eq!(after_names(b"x", 1), b"");
    }

    #[test]
    fn out_header_records_length_and_error() {
        let mut h = [0u8; HEADER_LEN];
        h[ENT_IN_OUT + 8..ENT_IN_OUT + 16].copy_from_slice(&99u64.to_ne_bytes());
        set_out_header(&mut h, 42, -libc::ENOENT, 0);
        // The same `fuse_out_header` a `/dev/fuse` reply starts with.
        assert_eq!(h[..16], abi_out(42, -libc::ENOENT));
        assert_eq!(InHeader::parse(&h).unwrap().commit_id, 99);
    }

    fn abi_out(unique: u64, error: i32) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[..4].copy_from_slice(&OUT_HEADER_LEN.to_ne_bytes());
        b[4..8].copy_from_slice(&error.to_ne_bytes());
        b[8..].copy_from_slice(&unique.to_ne_bytes());
        assert_eq!(b, out_header(unique, error, 0));
        b
    }
}
