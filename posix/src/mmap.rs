//! Shared mappings: stores through a MAP_SHARED mapping are seen by read(2)
//! (after msync and without), and write(2) is seen through the mapping.

use crate::sys;
use crate::util::*;

pub const CASES: &[Case] = &[
    Case::new("mmap/shared_write_then_read", shared_write_then_read),
    Case::new("mmap/write_then_mapping_sees", write_then_mapping_sees),
    Case::new("mmap/persists_after_munmap", persists_after_munmap),
];

const LEN: usize = 3 * 4096 + 100;

/// A MAP_SHARED read-write mapping of `len` bytes, unmapped on drop.
struct Map {
    ptr: *mut u8,
    len: usize,
}

impl Map {
    fn new(fd: &sys::Fd, len: usize) -> Result<Map, Fail> {
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.0,
                0,
            )
        };
        check!(p != libc::MAP_FAILED, "mmap: {}", sys::Errno::last());
        Ok(Map { ptr: p.cast(), len })
    }

    fn slice(&mut self) -> &mut [u8] {
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    fn msync(&self) -> Res {
        let r = unsafe { libc::msync(self.ptr.cast(), self.len, libc::MS_SYNC) };
        check!(r == 0, "msync: {}", sys::Errno::last());
        Ok(())
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

fn file(c: &Ctx) -> Result<sys::Fd, Fail> {
    let fd = ok(
        "create",
        sys::open(&c.p("f"), libc::O_RDWR | libc::O_CREAT, 0o644),
    )?;
    ok("ftruncate", sys::ftruncate(&fd, LEN as i64))?;
    Ok(fd)
}

fn pattern(seed: u8) -> Vec<u8> {
    (0..LEN)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn shared_write_then_read(c: &Ctx) -> Res {
    let fd = file(c)?;
    let mut m = Map::new(&fd, LEN)?;
    let want = pattern(1);
    m.slice().copy_from_slice(&want);
    // Same page cache: visible to read(2) even before msync.
    check_eq!(ok("pread", sys::pread(&fd, LEN, 0))?, want, "read before msync");
    m.msync()?;
    check_eq!(ok("pread", sys::pread(&fd, LEN, 0))?, want, "read after msync");
    let other = ok("open", sys::open(&c.p("f"), libc::O_RDONLY, 0))?;
    check_eq!(
        ok("pread", sys::pread(&other, LEN, 0))?,
        want,
        "read via another fd"
    );
    check_eq!(
        ok("fstat", sys::fstat(&fd))?.st_size as usize,
        LEN,
        "size unchanged by stores"
    );
    Ok(())
}

fn write_then_mapping_sees(c: &Ctx) -> Res {
    let fd = file(c)?;
    let mut m = Map::new(&fd, LEN)?;
    check!(m.slice().iter().all(|&b| b == 0), "fresh mapping not zeros");
    let want = pattern(7);
    let other = ok("open", sys::open(&c.p("f"), libc::O_WRONLY, 0))?;
    ok("pwrite", sys::pwrite(&other, &want, 0))?;
    check!(m.slice() == &want[..], "mapping does not show write(2) data");
    ok("pwrite middle", sys::pwrite(&other, b"XYZ", 5000))?;
    check_eq!(&m.slice()[5000..5003], b"XYZ", "mapping after a small write");
    ok(
        "ftruncate shrink+grow",
        sys::ftruncate(&fd, 4096).and(sys::ftruncate(&fd, LEN as i64)),
    )?;
    check!(
        m.slice()[4096..].iter().all(|&b| b == 0),
        "mapping shows stale data after truncate"
    );
    Ok(())
}

fn persists_after_munmap(c: &Ctx) -> Res {
    let want = pattern(42);
    {
        let fd = file(c)?;
        let mut m = Map::new(&fd, LEN)?;
        m.slice().copy_from_slice(&want);
        m.msync()?;
    }
    check_eq!(get(&c.p("f"))?, want, "content after munmap and close");
    Ok(())
}
