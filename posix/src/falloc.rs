//! fallocate(2): preallocation (with and without KEEP_SIZE) reads as zeros,
//! counts in st_blocks and takes later writes; PUNCH_HOLE | KEEP_SIZE frees
//! and zeroes; ZERO_RANGE zeroes; COLLAPSE_RANGE and INSERT_RANGE move the
//! data after them (EINVAL unless block-aligned); the errors the VFS gives
//! for bad modes and arguments.
//!
//! Where the references differ the cases accept each: tmpfs takes only
//! preallocation and PUNCH_HOLE, and the kernel's FUSE module passes on no
//! COLLAPSE_RANGE nor INSERT_RANGE (EOPNOTSUPP for those); ranges are
//! multiples of 64 KiB where they must be aligned, a multiple of every
//! block size.

use crate::flags::{get_flags, set_flags, APPEND, IMMUTABLE};
use crate::sys;
use crate::util::*;

pub const CASES: &[Case] = &[
    Case::new("falloc/extends_size", extends_size),
    Case::new("falloc/keep_size", keep_size),
    Case::new("falloc/write_into_preallocated", write_into_preallocated),
    Case::new("falloc/punch_hole", punch_hole),
    Case::new("falloc/zero_range", zero_range),
    Case::new("falloc/collapse_insert", collapse_insert),
    Case::new("falloc/bad_arguments", bad_arguments),
    Case::new("falloc/append_only_immutable", append_only_immutable),
];

const KIB: i64 = 1024;
const KEEP: i32 = libc::FALLOC_FL_KEEP_SIZE;

fn file(c: &Ctx, name: &str) -> Result<sys::Fd, Fail> {
    ok(
        "create",
        sys::open(&c.p(name), libc::O_RDWR | libc::O_CREAT, 0o644),
    )
}

/// The bytes `len` at `off` are all `v`.
fn reads(fd: &sys::Fd, off: i64, len: usize, v: u8) -> Res {
    let got = ok("pread", sys::pread(fd, len, off))?;
    check_eq!(got.len(), len, format!("bytes read at {off}"));
    if let Some(k) = got.iter().position(|&b| b != v) {
        check!(false, "byte {} reads {:#x}, want {v:#x}", off + k as i64, got[k]);
    }
    Ok(())
}

/// `fallocate`, or `None` when this filesystem does not take `mode`
/// (EOPNOTSUPP).
fn try_falloc(fd: &sys::Fd, mode: i32, off: i64, len: i64) -> Result<Option<()>, Fail> {
    match sys::fallocate(fd, mode, off, len) {
        Ok(()) => Ok(Some(())),
        Err(e) if e.0 == libc::EOPNOTSUPP => Ok(None),
        Err(e) => Err(Fail::Fail(format!("fallocate mode {mode:#x} {off}+{len}: unexpected {e}"))),
    }
}

/// Mode 0 on an empty file: the size grows to the range's end, the blocks
/// are counted, every byte reads as zero.
fn extends_size(c: &Ctx) -> Res {
    let fd = file(c, "f")?;
    ok("fallocate", sys::fallocate(&fd, 0, 0, 1024 * KIB))?;
    let s = ok("fstat", sys::fstat(&fd))?;
    check_eq!(s.st_size, 1024 * KIB, "size");
    check!(s.st_blocks >= 2048, "st_blocks {} after 1 MiB", s.st_blocks);
    reads(&fd, 0, 1024 * KIB as usize, 0)?;
    // A range inside the file changes nothing.
    ok("fallocate inside", sys::fallocate(&fd, 0, 4 * KIB, 8 * KIB))?;
    check_eq!(ok("fstat", sys::fstat(&fd))?.st_size, 1024 * KIB, "size");
    Ok(())
}

/// KEEP_SIZE past the end: the size stays, the blocks are counted, and a
/// later extension reads zeros there.
fn keep_size(c: &Ctx) -> Res {
    let fd = file(c, "f")?;
    ok("pwrite", sys::pwrite(&fd, &[7; 100], 0))?;
    ok("fallocate", sys::fallocate(&fd, KEEP, 0, 1024 * KIB))?;
    let s = ok("fstat", sys::fstat(&fd))?;
    check_eq!(s.st_size, 100, "size");
    check!(s.st_blocks >= 2048, "st_blocks {} after 1 MiB", s.st_blocks);
    check_eq!(ok("pread", sys::pread(&fd, 200, 0))?, vec![7u8; 100], "data");
    ok("ftruncate", sys::ftruncate(&fd, 512 * KIB))?;
    reads(&fd, 0, 100, 7)?;
    reads(&fd, 100, 512 * KIB as usize - 100, 0)
}

/// Writes into preallocated space read back, with zeros around them, and
/// take no more blocks.
fn write_into_preallocated(c: &Ctx) -> Res {
    let fd = file(c, "f")?;
    ok("fallocate", sys::fallocate(&fd, KEEP, 0, 256 * KIB))?;
    let before = ok("fstat", sys::fstat(&fd))?.st_blocks;
    ok("pwrite", sys::pwrite(&fd, &[0x5a; 8192], 64 * KIB + 100))?;
    ok("fsync", sys::fsync(&fd))?;
    check_eq!(ok("fstat", sys::fstat(&fd))?.st_size, 72 * KIB + 100, "size");
    reads(&fd, 0, 64 * KIB as usize + 100, 0)?;
    reads(&fd, 64 * KIB + 100, 8192, 0x5a)?;
    let after = ok("fstat", sys::fstat(&fd))?.st_blocks;
    check_eq!(after, before, "st_blocks after writing into preallocated space");
    Ok(())
}

/// PUNCH_HOLE | KEEP_SIZE: whole blocks and partial ones read as zeros,
/// the size stays, whole blocks are given back. (The data is written into
/// preallocated space, so that st_blocks counts it at once everywhere.)
fn punch_hole(c: &Ctx) -> Res {
    let fd = file(c, "f")?;
    ok("fallocate", sys::fallocate(&fd, 0, 0, 256 * KIB))?;
    ok("pwrite", sys::pwrite(&fd, &[0x77; 256 * 1024], 0))?;
    ok("fsync", sys::fsync(&fd))?;
    let before = ok("fstat", sys::fstat(&fd))?.st_blocks;
    check!(before >= 512, "st_blocks {before} for 256 KiB preallocated");
    let mode = libc::FALLOC_FL_PUNCH_HOLE | KEEP;
    ok("punch", sys::fallocate(&fd, mode, 64 * KIB, 64 * KIB))?;
    let s = ok("fstat", sys::fstat(&fd))?;
    check!(
        s.st_blocks <= before - 128,
        "st_blocks {} after punching 64 KiB of {before}",
        s.st_blocks
    );
    ok("punch partial", sys::fallocate(&fd, mode, 200 * KIB + 10, 1000))?;
    check_eq!(ok("fstat", sys::fstat(&fd))?.st_size, 256 * KIB, "size");
    reads(&fd, 0, 64 * 1024, 0x77)?;
    reads(&fd, 64 * KIB, 64 * 1024, 0)?;
    reads(&fd, 128 * KIB, 72 * 1024 + 10, 0x77)?;
    reads(&fd, 200 * KIB + 10, 1000, 0)?;
    reads(&fd, 200 * KIB + 1010, 56 * 1024 - 1010, 0x77)?;
    // Past the end: nothing to punch, no size change.
    ok("punch past the end", sys::fallocate(&fd, mode, 1024 * KIB, 4 * KIB))?;
    check_eq!(ok("fstat", sys::fstat(&fd))?.st_size, 256 * KIB, "size");
    Ok(())
}

/// ZERO_RANGE: the range reads as zeros; with KEEP_SIZE the size stays,
/// without it the size grows to the range's end.
fn zero_range(c: &Ctx) -> Res {
    let fd = file(c, "f")?;
    ok("pwrite", sys::pwrite(&fd, &[0x33; 128 * 1024], 0))?;
    let mode = libc::FALLOC_FL_ZERO_RANGE | KEEP;
    if try_falloc(&fd, mode, 10 * KIB + 5, 70 * KIB)?.is_none() {
        return Ok(());
    }
    check_eq!(ok("fstat", sys::fstat(&fd))?.st_size, 128 * KIB, "size");
    reads(&fd, 0, 10 * 1024 + 5, 0x33)?;
    reads(&fd, 10 * KIB + 5, 70 * 1024, 0)?;
    reads(&fd, 80 * KIB + 5, 48 * 1024 - 5, 0x33)?;
    ok("zero to past the end", sys::fallocate(&fd, libc::FALLOC_FL_ZERO_RANGE, 120 * KIB, 16 * KIB))?;
    check_eq!(ok("fstat", sys::fstat(&fd))?.st_size, 136 * KIB, "size");
    reads(&fd, 120 * KIB, 16 * 1024, 0)
}

/// COLLAPSE_RANGE removes an aligned range and INSERT_RANGE opens one of
/// zeros; unaligned ranges, and ranges reaching the end, are EINVAL.
fn collapse_insert(c: &Ctx) -> Res {
    let fd = file(c, "f")?;
    let data: Vec<u8> = (0..512 * 1024).map(|k| (k / 65536) as u8 + 1).collect();
    ok("pwrite", sys::pwrite(&fd, &data, 0))?;
    let collapse = libc::FALLOC_FL_COLLAPSE_RANGE;
    if try_falloc(&fd, collapse, 64 * KIB, 128 * KIB)?.is_none() {
        return Ok(());
    }
    check_eq!(ok("fstat", sys::fstat(&fd))?.st_size, 384 * KIB, "size after collapse");
    reads(&fd, 0, 64 * 1024, 1)?;
    reads(&fd, 64 * KIB, 64 * 1024, 4)?;
    reads(&fd, 320 * KIB, 64 * 1024, 8)?;
    let insert = libc::FALLOC_FL_INSERT_RANGE;
    ok("insert", sys::fallocate(&fd, insert, 64 * KIB, 64 * KIB))?;
    check_eq!(ok("fstat", sys::fstat(&fd))?.st_size, 448 * KIB, "size after insert");
    reads(&fd, 0, 64 * 1024, 1)?;
    reads(&fd, 64 * KIB, 64 * 1024, 0)?;
    reads(&fd, 128 * KIB, 64 * 1024, 4)?;
    want_err("unaligned collapse", sys::fallocate(&fd, collapse, 100, 64 * KIB), libc::EINVAL)?;
    want_err("collapse to the end", sys::fallocate(&fd, collapse, 384 * KIB, 64 * KIB), libc::EINVAL)?;
    want_err("insert at the end", sys::fallocate(&fd, insert, 448 * KIB, 64 * KIB), libc::EINVAL)?;
    want_err(
        "collapse with KEEP_SIZE",
        sys::fallocate(&fd, collapse | KEEP, 0, 64 * KIB),
        libc::EOPNOTSUPP,
    )?;
    check_eq!(ok("fstat", sys::fstat(&fd))?.st_size, 448 * KIB, "size after the refusals");
    Ok(())
}

/// The VFS's errors: a zero or negative length or a negative offset is
/// EINVAL, PUNCH_HOLE without KEEP_SIZE and unknown modes EOPNOTSUPP, a
/// read-only descriptor EBADF.
fn bad_arguments(c: &Ctx) -> Res {
    let fd = file(c, "f")?;
    want_err("length 0", sys::fallocate(&fd, 0, 0, 0), libc::EINVAL)?;
    want_err("negative length", sys::fallocate(&fd, 0, 0, -1), libc::EINVAL)?;
    want_err("negative offset", sys::fallocate(&fd, 0, -4096, 4096), libc::EINVAL)?;
    want_err(
        "punch without KEEP_SIZE",
        sys::fallocate(&fd, libc::FALLOC_FL_PUNCH_HOLE, 0, 4096),
        libc::EOPNOTSUPP,
    )?;
    want_err("unknown mode bit", sys::fallocate(&fd, 0x100, 0, 4096), libc::EOPNOTSUPP)?;
    let ro = ok("open read-only", sys::open(&c.p("f"), libc::O_RDONLY, 0))?;
    want_err("read-only descriptor", sys::fallocate(&ro, 0, 0, 4096), libc::EBADF)?;
    check_eq!(ok("fstat", sys::fstat(&fd))?.st_size, 0, "size after the refusals");
    Ok(())
}

/// An append-only file takes preallocation (that may extend it) but no
/// punch, zero, collapse or insert; an immutable one takes none (EPERM).
/// Needs root (CAP_LINUX_IMMUTABLE); skipped where there are no flags.
fn append_only_immutable(c: &Ctx) -> Res {
    need_root()?;
    let p = c.p("f");
    let fd = file(c, "f")?;
    ok("pwrite", sys::pwrite(&fd, &[9; 8192], 0))?;
    let base = get_flags(&p)?;
    set_flags(&p, base | APPEND)?;
    let r = (|| -> Res {
        ok("keep size", sys::fallocate(&fd, KEEP, 0, 64 * KIB))?;
        ok("extend", sys::fallocate(&fd, 0, 0, 16 * KIB))?;
        check_eq!(ok("fstat", sys::fstat(&fd))?.st_size, 16 * KIB, "size");
        let punch = libc::FALLOC_FL_PUNCH_HOLE | KEEP;
        want_err("punch append-only", sys::fallocate(&fd, punch, 0, 4 * KIB), libc::EPERM)?;
        set_flags(&p, base | IMMUTABLE)?;
        want_err("extend immutable", sys::fallocate(&fd, 0, 0, 32 * KIB), libc::EPERM)?;
        want_err("keep size immutable", sys::fallocate(&fd, KEEP, 0, 4 * KIB), libc::EPERM)?;
        reads(&fd, 0, 8192, 9)
    })();
    set_flags(&p, base)?;
    r
}
