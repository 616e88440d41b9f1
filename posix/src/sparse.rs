//! Sparse files: a write far past EOF leaves a hole that reads as zeros and
//! takes no space; lseek SEEK_DATA/SEEK_HOLE around it.

use crate::sys;
use crate::util::*;

pub const CASES: &[Case] = &[
    Case::new("sparse/hole_reads_zeros", hole_reads_zeros),
    Case::new("sparse/seek_data_hole", seek_data_hole),
    Case::new("sparse/small_hole_in_block", small_hole_in_block),
];

const GIB: i64 = 1 << 30;

fn make(c: &Ctx) -> Result<sys::Fd, Fail> {
    let fd = ok(
        "create",
        sys::open(&c.p("sparse"), libc::O_RDWR | libc::O_CREAT, 0o644),
    )?;
    let n = ok("pwrite at 1 GiB", sys::pwrite(&fd, b"tail", GIB))?;
    check_eq!(n, 4, "pwrite length");
    Ok(fd)
}

fn hole_reads_zeros(c: &Ctx) -> Res {
    let fd = make(c)?;
    let s = ok("fstat", sys::fstat(&fd))?;
    check_eq!(s.st_size, GIB + 4, "size");
    // Well under 1 MiB allocated (st_blocks counts 512-byte units).
    check!(
        s.st_blocks < 2048,
        "st_blocks {} for a 1 GiB sparse file",
        s.st_blocks
    );
    for off in [0, 4096, 12345, GIB / 2, GIB - 65536] {
        let v = ok("pread hole", sys::pread(&fd, 65536, off))?;
        check_eq!(v.len(), 65536, "read length in hole");
        check!(v.iter().all(|&b| b == 0), "hole at {off} not zeros");
    }
    // A read straddling the end of the hole and the data.
    let v = ok("pread", sys::pread(&fd, 8, GIB - 2))?;
    check_eq!(v, b"\0\0tail".to_vec(), "bytes around the data");
    check_eq!(
        ok("pread at EOF", sys::pread(&fd, 8, GIB + 4))?.len(),
        0,
        "read at EOF"
    );
    // Reopened through the path, same picture.
    drop(fd);
    let fd = ok("reopen", sys::open(&c.p("sparse"), libc::O_RDONLY, 0))?;
    let v = ok("pread hole", sys::pread(&fd, 4096, 1 << 20))?;
    check!(v.iter().all(|&b| b == 0), "hole not zeros after reopen");
    Ok(())
}

/// SEEK_HOLE from 0 is 0 on tmpfs and ext4, but a filesystem may legally
/// report the whole file as data, so the file size is accepted too.
/// SEEK_DATA from 0 must not skip the data; beyond EOF both give ENXIO.
fn seek_data_hole(c: &Ctx) -> Res {
    let fd = make(c)?;
    let size = GIB + 4;
    let h = ok("SEEK_HOLE 0", sys::lseek(&fd, 0, libc::SEEK_HOLE))?;
    check!(h == 0 || h == size, "SEEK_HOLE from 0 = {h}, want 0 or {size}");
    let d = ok("SEEK_DATA 0", sys::lseek(&fd, 0, libc::SEEK_DATA))?;
    check!((0..=GIB).contains(&d), "SEEK_DATA from 0 = {d}, want <= {GIB}");
    check_eq!(
        ok("SEEK_CUR", sys::lseek(&fd, 0, libc::SEEK_CUR))?,
        d,
        "offset after SEEK_DATA"
    );
    let d2 = ok("SEEK_DATA in data", sys::lseek(&fd, GIB + 1, libc::SEEK_DATA))?;
    check_eq!(d2, GIB + 1, "SEEK_DATA inside data");
    let h2 = ok("SEEK_HOLE in data", sys::lseek(&fd, GIB + 1, libc::SEEK_HOLE))?;
    check_eq!(h2, size, "SEEK_HOLE inside the last data = EOF");
    want_err(
        "SEEK_DATA at EOF",
        sys::lseek(&fd, size, libc::SEEK_DATA),
        libc::ENXIO,
    )?;
    want_err(
        "SEEK_DATA beyond EOF",
        sys::lseek(&fd, size + 100, libc::SEEK_DATA),
        libc::ENXIO,
    )?;
    want_err(
        "SEEK_HOLE beyond EOF",
        sys::lseek(&fd, size + 100, libc::SEEK_HOLE),
        libc::ENXIO,
    )?;
    // A fully written file: data at 0, hole only at EOF.
    put(&c.p("dense"), &[7u8; 10000])?;
    let fd = ok("open dense", sys::open(&c.p("dense"), libc::O_RDONLY, 0))?;
    check_eq!(
        ok("SEEK_DATA", sys::lseek(&fd, 0, libc::SEEK_DATA))?,
        0,
        "SEEK_DATA on dense file"
    );
    check_eq!(
        ok("SEEK_HOLE", sys::lseek(&fd, 0, libc::SEEK_HOLE))?,
        10000,
        "SEEK_HOLE on dense file"
    );
    // An empty file has no data at all.
    put(&c.p("empty"), b"")?;
    let fd = ok("open empty", sys::open(&c.p("empty"), libc::O_RDONLY, 0))?;
    want_err(
        "SEEK_DATA on empty file",
        sys::lseek(&fd, 0, libc::SEEK_DATA),
        libc::ENXIO,
    )?;
    Ok(())
}

/// Writes with a gap smaller than a block: the gap reads back as zeros.
fn small_hole_in_block(c: &Ctx) -> Res {
    let fd = ok(
        "create",
        sys::open(&c.p("f"), libc::O_RDWR | libc::O_CREAT, 0o644),
    )?;
    ok("pwrite", sys::pwrite(&fd, b"AAAA", 0))?;
    ok("pwrite", sys::pwrite(&fd, b"BBBB", 100))?;
    ok("pwrite", sys::pwrite(&fd, b"CCCC", 70000))?;
    let v = ok("pread", sys::pread(&fd, 80000, 0))?;
    check_eq!(v.len(), 70004, "size");
    check_eq!(&v[..4], b"AAAA", "first write");
    check!(v[4..100].iter().all(|&b| b == 0), "gap 4..100 not zeros");
    check_eq!(&v[100..104], b"BBBB", "second write");
    check!(v[104..70000].iter().all(|&b| b == 0), "gap 104..70000 not zeros");
    check_eq!(&v[70000..], b"CCCC", "third write");
    Ok(())
}
