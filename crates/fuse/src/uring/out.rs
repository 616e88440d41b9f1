//! Reply structs of the FUSE wire format (`include/uapi/linux/fuse.h`),
//! appended to a payload buffer: entries, attributes, `statx`, `statfs`,
//! directory entries, and the open of a file made by its request. Native
//! endian, as the kernel reads them; both transports send them.
//!
//! Calls nothing.

use super::abi::{statx, FOPEN_KEEP_CACHE};
use std::time::Duration;
use tux3::types::{Attr, FileType, StatFs, Timespec};

/// Appends reply structs to a payload buffer.
pub struct Out<'a> {
    buf: &'a mut [u8],
    pub len: usize,
}

impl<'a> Out<'a> {
    pub fn new(buf: &'a mut [u8]) -> Out<'a> {
        Out { buf, len: 0 }
    }

    /// Room left in the buffer.
    pub fn room(&self) -> usize {
        self.buf.len() - self.len
    }

    /// Append `b`, cut to the room left (replies are sized by their
    /// requests, which fit the buffer; a longer one must not panic the
    /// queue thread and leave the kernel waiting).
    pub fn bytes(&mut self, b: &[u8]) {
        let n = b.len().min(self.room());
        self.buf[self.len..self.len + n].copy_from_slice(&b[..n]);
        self.len += n;
    }

    pub fn u32(&mut self, v: u32) {
        self.bytes(&v.to_ne_bytes());
    }

    pub fn u64(&mut self, v: u64) {
        self.bytes(&v.to_ne_bytes());
    }

    fn time(&mut self, t: Timespec) {
        self.u64(t.sec as u64);
    }

    /// `struct fuse_attr` (88 bytes).
    pub fn attr(&mut self, a: &Attr) {
        for v in [a.ino, a.size, a.blocks] {
            self.u64(v);
        }
        for t in [a.atime, a.mtime, a.ctime] {
            self.time(t);
        }
        for t in [a.atime, a.mtime, a.ctime] {
            self.u32(t.nsec.min(999_999_999));
        }
        let mode = a.kind.mode_bits() | (a.mode & 0o7777);
        // The kernel's 32-bit device encoding equals glibc's for majors
        // below 4096.
        for v in [mode, a.nlink, a.uid, a.gid, a.rdev as u32, a.blksize, 0] {
            self.u32(v);
        }
    }

    fn valid(&mut self, ttl: Duration) {
        self.u64(ttl.as_secs());
    }

    /// `struct fuse_entry_out`: an entry (a negative one for ino 0).
    pub fn entry(&mut self, a: &Attr, ttl: Duration) {
        self.u64(a.ino);
        self.u64(crate::generation(a));
        self.valid(ttl);
        self.valid(ttl);
        self.u32(ttl.subsec_nanos());
        self.u32(ttl.subsec_nanos());
        self.attr(a);
    }

    /// `struct fuse_attr_out`.
    pub fn attr_out(&mut self, a: &Attr, ttl: Duration) {
        self.valid(ttl);
        self.u32(ttl.subsec_nanos());
        self.u32(0);
        self.attr(a);
    }

    /// `struct fuse_statx_out`: the basic statistics, and the birth time
    /// (`STATX_BTIME`) unless it is 0 (an inode made before the engine
    /// recorded birth times).
    pub fn statx_out(&mut self, a: &Attr, ttl: Duration) {
        self.valid(ttl);
        self.u32(ttl.subsec_nanos());
        self.u32(0); // flags
        self.bytes(&[0; 16]); // spare
        let has_btime = a.btime != Timespec::default();
        let mask = statx::BASIC_STATS | if has_btime { statx::BTIME } else { 0 };
        self.u32(mask);
        self.u32(a.blksize);
        self.u64(0); // attributes
        for v in [a.nlink, a.uid, a.gid] {
            self.u32(v);
        }
        let mode = a.kind.mode_bits() | (a.mode & 0o7777);
        self.bytes(&(mode as u16).to_ne_bytes());
        self.bytes(&[0; 2]);
        for v in [a.ino, a.size, a.blocks, 0] {
            self.u64(v); // ..., attributes_mask
        }
        let btime = if has_btime { a.btime } else { Timespec::default() };
        for t in [a.atime, btime, a.ctime, a.mtime] {
            self.u64(t.sec as u64);
            self.u32(t.nsec.min(999_999_999));
            self.u32(0);
        }
        // The kernel's device numbers: major and minor of glibc's encoding.
        let (major, minor) = (libc::major(a.rdev), libc::minor(a.rdev));
        for v in [major, minor, 0, 0] {
            self.u32(v);
        }
        self.bytes(&[0; 112]);
    }

    /// `struct fuse_open_out` of a file opened by the request that made it
    /// (TMPFILE): no handle of ours (a handle holds nothing here), and the
    /// page cache kept, as for the files the kernel opens without OPEN.
    pub fn open_out(&mut self) {
        self.u64(0); // fh
        self.u32(FOPEN_KEEP_CACHE);
        self.u32(0); // backing_id
    }

    /// `struct fuse_statfs_out`.
    pub fn statfs(&mut self, s: &StatFs) {
        for v in [s.blocks, s.blocks_free, s.blocks_avail, s.files, s.files_free] {
            self.u64(v);
        }
        for v in [s.block_size, s.name_max, s.block_size, 0] {
            self.u32(v);
        }
        self.bytes(&[0; 24]);
    }

    /// One `struct fuse_dirent`, padded to 8 bytes; false (and nothing
    /// written) if it does not fit.
    pub fn dirent(&mut self, ino: u64, next: u64, kind: FileType, name: &[u8]) -> bool {
        let len = (24 + name.len()).next_multiple_of(8);
        if len > self.room() {
            return false;
        }
        self.u64(ino);
        self.u64(next);
        self.u32(name.len() as u32);
        self.u32(u32::from(kind.dirent_code()));
        self.bytes(name);
        let pad = len - 24 - name.len();
        self.bytes(&[0; 8][..pad]);
        true
    }

    /// One `struct fuse_direntplus` without attributes: its
    /// `fuse_entry_out` all zero (node 0, which the kernel skips), then the
    /// padded `fuse_dirent`; false (and nothing written) if it does not fit.
    pub fn direntplus_name(&mut self, ino: u64, next: u64, kind: FileType, name: &[u8]) -> bool {
        if 128 + (24 + name.len()).next_multiple_of(8) > self.room() {
            return false;
        }
        self.bytes(&[0; 128]);
        self.dirent(ino, next, kind, name)
    }

    /// One `struct fuse_direntplus` (a `fuse_entry_out`, then the padded
    /// `fuse_dirent`); false (and nothing written) if it does not fit.
    pub fn direntplus(&mut self, a: &Attr, next: u64, name: &[u8], ttl: Duration) -> bool {
        if 128 + (24 + name.len()).next_multiple_of(8) > self.room() {
            return false;
        }
        self.entry(a, ttl);
        self.dirent(a.ino, next, a.kind, name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u32_at(b: &[u8], at: usize) -> u32 {
        u32::from_ne_bytes(b[at..at + 4].try_into().unwrap())
    }

    fn u64_at(b: &[u8], at: usize) -> u64 {
        u64::from_ne_bytes(b[at..at + 8].try_into().unwrap())
    }

    #[test]
    fn dirents_pad_to_eight_and_stop_when_full() {
        let mut buf = [0u8; 64];
        let mut out = Out::new(&mut buf);
        assert!(out.dirent(7, 1, FileType::Directory, b"."));
        assert_eq!(out.len, 32, "24 bytes of header, 1 of name, padded");
        assert!(!out.dirent(8, 2, FileType::Regular, b"a-longer-name"));
        assert_eq!(out.len, 32, "nothing written when it does not fit");
        assert!(out.dirent(8, 2, FileType::Regular, b"b"));
        assert_eq!(u32_at(&buf, 20), libc::DT_DIR as u32);
        assert_eq!(u32_at(&buf, 32 + 20), libc::DT_REG as u32);
    }

    #[test]
    fn reply_structs_have_the_kernel_sizes() {
        let a = Attr {
            ino: 5,
            kind: FileType::Symlink,
            mode: 0o777,
            nlink: 1,
            uid: 1,
            gid: 2,
            rdev: 0,
            size: 11,
            blocks: 0,
            atime: Timespec { sec: -1, nsec: 7 },
            mtime: Timespec::default(),
            ctime: Timespec::default(),
            btime: Timespec::default(),
            blksize: 4096,
        };
        let mut buf = [0u8; 512];
        let sizes: Vec<usize> = [0, 1, 2]
            .iter()
            .map(|k| {
                let mut out = Out::new(&mut buf);
                match k {
                    0 => out.entry(&a, Duration::from_secs(1)),
                    1 => out.attr_out(&a, Duration::from_secs(1)),
                    _ => out.statfs(&StatFs {
                        block_size: 4096,
                        blocks: 1,
                        blocks_free: 1,
                        blocks_avail: 1,
                        files: 1,
                        files_free: 1,
                        name_max: 255,
                    }),
                }
                out.len
            })
            .collect();
        // fuse_entry_out, fuse_attr_out, fuse_statfs_out.
        assert_eq!(sizes, vec![128, 104, 80]);
        let mut out = Out::new(&mut buf);
        out.statx_out(&a, Duration::from_secs(1));
        assert_eq!(out.len, 288, "fuse_statx_out");
        let mut out = Out::new(&mut buf);
        out.entry(&a, Duration::from_secs(1));
        // fuse_attr starts at 40: ino, then mode (type bits and permissions)
        // at 40 + 60, and a time before 1970 as its two's complement.
        assert_eq!(u64_at(&buf, 0), 5);
        assert_eq!(u64_at(&buf, 40), 5);
        assert_eq!(u32_at(&buf, 40 + 60), libc::S_IFLNK | 0o777);
        assert_eq!(u64_at(&buf, 40 + 24) as i64, -1);
        assert_eq!(u32_at(&buf, 40 + 48), 7);
    }

    #[test]
    fn statx_gives_the_birth_time_only_when_known() {
        let mut a = Attr {
            ino: 9,
            kind: FileType::CharDevice,
            mode: 0o640,
            nlink: 1,
            uid: 3,
            gid: 4,
            rdev: libc::makedev(8, 17),
            size: 0,
            blocks: 0,
            atime: Timespec { sec: 10, nsec: 1 },
            mtime: Timespec { sec: 30, nsec: 3 },
            ctime: Timespec { sec: 40, nsec: 4 },
            btime: Timespec { sec: 20, nsec: 2 },
            blksize: 4096,
        };
        let mut buf = [0u8; 512];
        let mut out = Out::new(&mut buf);
        out.statx_out(&a, Duration::from_secs(1));
        // fuse_statx at 32: mask, then mode at 28, ino at 32, the four
        // times from 64 (atime, btime, ctime, mtime), rdev at 128.
        assert_eq!(u32_at(&buf, 32), statx::BASIC_STATS | statx::BTIME);
        assert_eq!(
            u16::from_ne_bytes([buf[32 + 28], buf[32 + 29]]),
            (libc::S_IFCHR | 0o640) as u16
        );
        assert_eq!(u64_at(&buf, 32 + 32), 9);
        let times: Vec<(u64, u32)> = (0..4)
            .map(|k| (u64_at(&buf, 96 + 16 * k), u32_at(&buf, 104 + 16 * k)))
            .collect();
        assert_eq!(times, vec![(10, 1), (20, 2), (40, 4), (30, 3)]);
        assert_eq!((u32_at(&buf, 160), u32_at(&buf, 164)), (8, 17));
        // An inode made before birth times were kept: no STATX_BTIME.
        a.btime = Timespec::default();
        let mut out = Out::new(&mut buf);
        out.statx_out(&a, Duration::from_secs(1));
        assert_eq!(u32_at(&buf, 32), statx::BASIC_STATS);
        assert_eq!(u64_at(&buf, 112), 0);
    }
}
