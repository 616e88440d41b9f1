//! Tests of request decoding on the io_uring path: each opcode's struct is
//! read at the kernel's offsets, and a request whose lengths do not hold
//! what its opcode reads is answered EINVAL (never read as zeros). Serves
//! hand-built header buffers through `serve` on an in-memory volume.
//!
//! Calls `abi`, `args` and `Tux3Fuse::serve`.

use super::abi::{self, op, read, InHeader, Short, HEADER_LEN};
use super::args::*;
use super::dispatch::{Deferred, Job, Offload, Outcome};
use crate::{FuseOptions, Tux3Fuse};
use std::sync::Arc;
use tux3::device::MemDevice;
use tux3::types::{FormatOptions, OpenOptions, ROOT_INO};
use tux3::Fs;

fn fuse() -> Tux3Fuse {
    let dev = Arc::new(MemDevice::new(4096, 4096));
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    let opts = OpenOptions {
        commit_interval: None,
        ..OpenOptions::default()
    };
    Tux3Fuse::new(Arc::new(Fs::open(dev, opts).unwrap()), FuseOptions::default())
}

/// A ring entry's header buffer for a request: `fuse_in_header` with
/// `len` covering `op_in` and `payload`, the argument struct, and the
/// payload length in `fuse_uring_ent_in_out`. `op_in`'s room past its
/// bytes is filled with 0xAA: never read.
fn header(opcode: u32, nodeid: u64, op_in: &[u8], payload_len: usize) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    let len = (40 + op_in.len() + payload_len) as u32;
    h[0..4].copy_from_slice(&len.to_ne_bytes());
    h[4..8].copy_from_slice(&opcode.to_ne_bytes());
    h[8..16].copy_from_slice(&77u64.to_ne_bytes());
    h[16..24].copy_from_slice(&nodeid.to_ne_bytes());
    h[128..256].fill(0xAA);
    h[128..128 + op_in.len()].copy_from_slice(op_in);
    h[256 + 16..256 + 20].copy_from_slice(&(payload_len as u32).to_ne_bytes());
    h
}

/// Serve a header buffer with `payload`; (error, reply) of an immediate
/// answer, `None` for one answered later.
fn serve(f: &Tux3Fuse, h: &[u8; HEADER_LEN], payload: &[u8]) -> Option<(i32, Vec<u8>)> {
    let hdr = InHeader::parse(h).unwrap();
    let mut buf = vec![0u8; 1 << 16];
    buf[..payload.len()].copy_from_slice(payload);
    let (tx, _rx) = crossbeam_channel::unbounded::<Job>();
    let offload = Offload {
        blocking: tx.clone(),
        reads: tx,
    };
    let defer = || -> Deferred { Box::new(|_, _| {}) };
    match f.serve(&hdr, abi::op_in(h), &mut buf, defer, Some(&offload)) {
        Outcome::Reply { error, len } => Some((error, buf[..len].to_vec())),
        Outcome::Later => None,
    }
}

fn call(f: &Tux3Fuse, opcode: u32, nodeid: u64, op_in: &[u8], payload: &[u8]) -> Option<(i32, Vec<u8>)> {
    serve(f, &header(opcode, nodeid, op_in, payload.len()), payload)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(b[at..at + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_ne_bytes(b[at..at + 8].try_into().unwrap())
}

fn ne32(v: u32) -> Vec<u8> {
    v.to_ne_bytes().to_vec()
}

fn ne64(v: u64) -> Vec<u8> {
    v.to_ne_bytes().to_vec()
}

/// The inode of an entry reply (`fuse_entry_out.nodeid`).
fn ino_of(reply: &[u8]) -> u64 {
    u64_at(reply, 0)
}

#[test]
fn structs_read_the_fields_at_the_old_offsets() {
    let b: Vec<u8> = (0..128u32).map(|i| (i * 37 + 11) as u8).collect();
    let s: SetattrIn = read(&b).unwrap();
    assert_eq!(s.valid, u32_at(&b, 0));
    assert_eq!(s.size, u64_at(&b, 16));
    assert_eq!(
        (s.atime, s.mtime, s.ctime),
        (u64_at(&b, 32), u64_at(&b, 40), u64_at(&b, 48))
    );
    assert_eq!(
        (s.atimensec, s.mtimensec, s.ctimensec),
        (u32_at(&b, 56), u32_at(&b, 60), u32_at(&b, 64))
    );
    assert_eq!(
        (s.mode, s.uid, s.gid),
        (u32_at(&b, 68), u32_at(&b, 76), u32_at(&b, 80))
    );
    let w: WriteIn = read(&b).unwrap();
    assert_eq!(
        (w.offset, w.size, w.write_flags),
        (u64_at(&b, 8), u32_at(&b, 16), u32_at(&b, 20))
    );
    let r: ReadIn = read(&b).unwrap();
    assert_eq!((r.offset, r.size), (u64_at(&b, 8), u32_at(&b, 16)));
    assert_eq!(read::<FsyncIn>(&b).unwrap().fsync_flags, u32_at(&b, 8));
    assert_eq!(read::<IoctlIn>(&b).unwrap().cmd, u32_at(&b, 12));
    let r2: Rename2In = read(&b).unwrap();
    assert_eq!((r2.newdir, r2.flags), (u64_at(&b, 0), u32_at(&b, 8)));
    assert_eq!(read::<RenameIn>(&b).unwrap().newdir, u64_at(&b, 0));
    assert_eq!(read::<LinkIn>(&b).unwrap().oldnodeid, u64_at(&b, 0));
    let l: LseekIn = read(&b).unwrap();
    assert_eq!((l.offset, l.whence), (u64_at(&b, 8), u32_at(&b, 16)));
    let fa: FallocateIn = read(&b).unwrap();
    assert_eq!(
        (fa.offset, fa.length, fa.mode),
        (u64_at(&b, 8), u64_at(&b, 16), u32_at(&b, 24))
    );
    let m: MknodIn = read(&b).unwrap();
    assert_eq!((m.mode, m.rdev), (u32_at(&b, 0), u32_at(&b, 4)));
    assert_eq!(read::<MkdirIn>(&b).unwrap().mode, u32_at(&b, 0));
    let x: SetxattrIn = read(&b).unwrap();
    assert_eq!((x.size, x.flags), (u32_at(&b, 0), u32_at(&b, 4)));
    assert_eq!(read::<GetxattrIn>(&b).unwrap().size, u32_at(&b, 0));
}

#[test]
fn well_formed_requests_are_served() {
    let f = fuse();
    let mkdir = [ne32(0o750), ne32(0)].concat();
    let (e, reply) = call(&f, op::MKDIR, ROOT_INO, &mkdir, b"d\0").unwrap();
    assert_eq!(e, 0);
    assert_eq!(reply.len(), 128, "fuse_entry_out");
    assert_eq!(u32_at(&reply, 40 + 60), libc::S_IFDIR | 0o750);
    let dir = ino_of(&reply);

    let create = [
        ne32(libc::O_RDWR as u32),
        ne32(libc::S_IFREG | 0o644),
        ne32(0),
        ne32(0),
    ]
    .concat();
    // CREATE, OPEN and FLUSH are refused once, so that the kernel stops
    // sending them: it makes files with MKNOD and opens them itself.
    for (opcode, op_in, name) in [
        (op::CREATE, &create[..], &b"f\0"[..]),
        (op::OPEN, &[0u8; 8][..], &b""[..]),
        (op::FLUSH, &[0u8; 24][..], &b""[..]),
    ] {
        let (e, _) = call(&f, opcode, dir, op_in, name).unwrap();
        assert_eq!(e, -libc::ENOSYS, "opcode {opcode}");
    }
    let mknod = [ne32(libc::S_IFREG | 0o644), ne32(0), ne32(0), ne32(0)].concat();
    let (e, reply) = call(&f, op::MKNOD, dir, &mknod, b"f\0").unwrap();
    assert_eq!(e, 0);
    let file = ino_of(&reply);

    let write = [ne64(0), ne64(3), ne32(5), ne32(0), ne64(0), ne32(0), ne32(0)].concat();
    assert_eq!(write.len(), 40);
    let (e, reply) = call(&f, op::WRITE, file, &write, b"hello").unwrap();
    assert_eq!((e, u32_at(&reply, 0)), (0, 5), "fuse_write_out.size");

    let read_in = [ne64(0), ne64(1), ne32(6), ne32(0), ne64(0), ne32(0), ne32(0)].concat();
    let (e, reply) = call(&f, op::READ, file, &read_in, b"").unwrap();
    assert_eq!((e, &reply[..]), (0, &b"\0\0hell"[..]), "offset 1, size 6");

    let mut setattr = [0u8; 88];
    setattr[0..4].copy_from_slice(&ne32(abi::fattr::MODE | abi::fattr::SIZE));
    setattr[16..24].copy_from_slice(&ne64(2));
    setattr[68..72].copy_from_slice(&ne32(0o600));
    let (e, reply) = call(&f, op::SETATTR, file, &setattr, b"").unwrap();
    assert_eq!(e, 0);
    assert_eq!(u64_at(&reply, 16 + 8), 2, "fuse_attr.size");
    assert_eq!(u32_at(&reply, 16 + 60), libc::S_IFREG | 0o600);

    let (e, reply) = call(&f, op::GETATTR, file, &[0u8; 16], b"").unwrap();
    assert_eq!((e, reply.len()), (0, 104), "fuse_attr_out");

    let (e, _) = call(&f, op::LOOKUP, dir, b"", b"f\0").unwrap();
    assert_eq!(e, 0, "a name only: no argument struct");
    let rename2 = [ne64(ROOT_INO), ne32(0), ne32(0)].concat();
    let (e, _) = call(&f, op::RENAME2, dir, &rename2, b"f\0g\0").unwrap();
    assert_eq!(e, 0);
    let (e, _) = call(&f, op::LOOKUP, ROOT_INO, b"", b"g\0").unwrap();
    assert_eq!(e, 0, "renamed into the root");
    let fsync = [ne64(0), ne32(1), ne32(0)].concat();
    assert!(call(&f, op::FSYNC, file, &fsync, b"").is_none(), "answered later");

    // The kernel holds the file by its lookups (MKNOD, two LOOKUPs): unlinked,
    // it stays an orphan until the kernel forgets all three.
    let (e, _) = call(&f, op::UNLINK, ROOT_INO, b"", b"g\0").unwrap();
    assert_eq!(e, 0);
    f.forget(file, 2);
    let (e, _) = call(&f, op::GETATTR, file, &[0u8; 16], b"").unwrap();
    assert_eq!(e, 0, "still held by one lookup");
    f.forget(file, 1);
    let (e, _) = call(&f, op::GETATTR, file, &[0u8; 16], b"").unwrap();
    assert_eq!(e, -libc::ENOENT, "freed with the last lookup");
}

/// FALLOCATE (`fuse_fallocate_in`: fh, offset at 8, length at 16, mode at
/// 24): a preallocation extends the size; a mode ext4 does not take is
/// EOPNOTSUPP.
#[test]
fn fallocate_is_served() {
    let f = fuse();
    let mknod = [ne32(libc::S_IFREG | 0o644), ne32(0), ne32(0), ne32(0)].concat();
    let (e, reply) = call(&f, op::MKNOD, ROOT_INO, &mknod, b"p\0").unwrap();
    assert_eq!(e, 0);
    let file = ino_of(&reply);
    let falloc = |offset: u64, length: u64, mode: u32| {
        [ne64(0), ne64(offset), ne64(length), ne32(mode), ne32(0)].concat()
    };
    let (e, _) = call(&f, op::FALLOCATE, file, &falloc(4096, 8192, 0), b"").unwrap();
    assert_eq!(e, 0);
    let (e, reply) = call(&f, op::GETATTR, file, &[0u8; 16], b"").unwrap();
    assert_eq!((e, u64_at(&reply, 16 + 8)), (0, 12288), "fuse_attr.size");
    let (e, _) = call(&f, op::FALLOCATE, file, &falloc(0, 4096, 0x40), b"").unwrap();
    assert_eq!(e, -libc::EOPNOTSUPP);
}

/// COPY_FILE_RANGE and COPY_FILE_RANGE_64 (`fuse_copy_file_range_in`:
/// fh_in, off_in at 8, nodeid_out at 16, fh_out, off_out at 32, len at 40,
/// flags at 48; the source is the request's node): the range is cloned,
/// the reply counts it in 32 bits (`fuse_write_out`) or 64
/// (`fuse_copy_file_range_out`), a flag is EINVAL.
#[test]
fn copy_file_range_is_served() {
    let f = fuse();
    let mknod = [ne32(libc::S_IFREG | 0o644), ne32(0), ne32(0), ne32(0)].concat();
    let (e, reply) = call(&f, op::MKNOD, ROOT_INO, &mknod, b"src\0").unwrap();
    assert_eq!(e, 0);
    let src = ino_of(&reply);
    let (_, reply) = call(&f, op::MKNOD, ROOT_INO, &mknod, b"dst\0").unwrap();
    let dst = ino_of(&reply);
    let data: Vec<u8> = (0..20000u32).map(|i| (i * 7 + 3) as u8).collect();
    f.fs.write(src, 0, &data).unwrap();
    let cfr = |off_in: u64, off_out: u64, len: u64, flags: u64| {
        [
            ne64(0),
            ne64(off_in),
            ne64(dst),
            ne64(0),
            ne64(off_out),
            ne64(len),
            ne64(flags),
        ]
        .concat()
    };
    // On a thread that may block: answered later on a ring thread.
    assert_eq!(call(&f, op::COPY_FILE_RANGE, src, &cfr(0, 0, 10, 0), b""), None);
    let dev = |opcode, op_in: &[u8]| {
        let h = header(opcode, src, op_in, 0);
        let hdr = InHeader::parse(&h).unwrap();
        let mut buf = vec![0u8; 4096];
        let defer = || -> Deferred { Box::new(|_, _| {}) };
        match f.serve(&hdr, abi::op_in(&h), &mut buf, defer, None) {
            Outcome::Reply { error, len } => (error, buf[..len].to_vec()),
            Outcome::Later => panic!("a /dev/fuse thread answers it itself"),
        }
    };
    let (e, reply) = dev(op::COPY_FILE_RANGE, &cfr(100, 5, 9000, 0));
    assert_eq!(
        (e, reply.len(), u32_at(&reply, 0)),
        (0, 8, 9000),
        "fuse_write_out"
    );
    let (e, reply) = dev(op::COPY_FILE_RANGE_64, &cfr(15000, 9005, 1 << 40, 0));
    assert_eq!(
        (e, u64_at(&reply, 0)),
        (0, 5000),
        "fuse_copy_file_range_out, clipped at EOF"
    );
    let mut want = vec![0u8; 5];
    want.extend_from_slice(&data[100..9100]);
    want.extend_from_slice(&data[15000..]);
    assert_eq!(f.fs.read(dst, 0, 1 << 20).unwrap(), want);
    let (e, reply) = dev(op::COPY_FILE_RANGE, &cfr(1 << 20, 0, 4096, 0));
    assert_eq!((e, u32_at(&reply, 0)), (0, 0), "past the source's end");
    assert_eq!(
        dev(op::COPY_FILE_RANGE, &cfr(0, 0, 10, 1)).0,
        -libc::EINVAL,
        "a flag"
    );
    let (e, _) = dev(op::COPY_FILE_RANGE_64, &[0u8; 55]);
    assert_eq!(e, -libc::EINVAL, "short");
}

#[test]
fn short_requests_get_einval() {
    let f = fuse();
    let einval = Some((-libc::EINVAL, Vec::new()));
    // Each opcode with its argument struct one byte short (or more).
    let cases: [(u32, usize, &[u8]); 15] = [
        (op::MKDIR, 7, b"d\0"),
        (op::MKNOD, 15, b"n\0"),
        (op::WRITE, 39, b"data"),
        (op::READ, 39, b""),
        (op::READDIR, 16, b""),
        (op::SETATTR, 87, b""),
        (op::FSYNC, 15, b""),
        (op::FSYNCDIR, 0, b""),
        (op::RENAME, 7, b"a\0b\0"),
        (op::RENAME2, 15, b"a\0b\0"),
        (op::LINK, 4, b"l\0"),
        (op::SETXATTR, 7, b"user.a\0v"),
        (op::GETXATTR, 3, b"user.a\0"),
        (op::LSEEK, 23, b""),
        (op::FALLOCATE, 31, b""),
    ];
    for (opcode, len, payload) in cases {
        let op_in = vec![0x11u8; len];
        assert_eq!(
            call(&f, opcode, ROOT_INO, &op_in, payload),
            einval,
            "opcode {opcode}, {len} bytes"
        );
    }
    assert_eq!(call(&f, op::IOCTL, ROOT_INO, &[0u8; 31], b""), einval, "ioctl");
    assert_eq!(
        call(&f, op::LISTXATTR, ROOT_INO, &[0u8; 7], b""),
        einval,
        "listxattr"
    );

    // Lengths that contradict each other.
    let mut h = header(op::GETATTR, ROOT_INO, &[0u8; 16], 0);
    h[0..4].copy_from_slice(&ne32(39));
    assert_eq!(serve(&f, &h, b""), einval, "len shorter than fuse_in_header");
    let h = header(op::LOOKUP, ROOT_INO, b"", 0);
    let mut h2 = h;
    h2[256 + 16..256 + 20].copy_from_slice(&ne32(2));
    assert_eq!(serve(&f, &h2, b"x\0"), einval, "payload longer than len says");
    h2[0..4].copy_from_slice(&ne32(40 + 2));
    h2[256 + 16..256 + 20].copy_from_slice(&ne32(1 << 20));
    assert_eq!(serve(&f, &h2, b"x\0"), einval, "payload longer than its buffer");
    let mut h3 = header(op::GETATTR, ROOT_INO, &[0u8; 16], 0);
    h3[0..4].copy_from_slice(&ne32(40 + 129));
    assert_eq!(
        serve(&f, &h3, b""),
        einval,
        "argument struct longer than its room"
    );

    // A header buffer too short for a request cannot be parsed at all.
    assert_eq!(InHeader::parse(&[0u8; 39]).err(), Some(Short));
    assert_eq!(InHeader::parse(&[0u8; HEADER_LEN - 1]).err(), Some(Short));
    assert!(InHeader::parse(&[0u8; HEADER_LEN]).is_ok());
}

/// The entries of a READDIRPLUS reply: each `fuse_direntplus` is a
/// `fuse_entry_out` (128 bytes, nodeid first, the attributes' mode at
/// 40 + 60), then a `fuse_dirent` (ino, off, namelen, type, name padded to
/// 8). Gives (name, nodeid, d_ino, mode).
fn direntplus(reply: &[u8]) -> Vec<(Vec<u8>, u64, u64, u32)> {
    let mut at = 0;
    let mut seen = Vec::new();
    while at < reply.len() {
        let namelen = u32_at(reply, at + 128 + 16) as usize;
        let name = reply[at + 128 + 24..at + 128 + 24 + namelen].to_vec();
        seen.push((
            name,
            u64_at(reply, at),
            u64_at(reply, at + 128),
            u32_at(reply, at + 40 + 60),
        ));
        at += 128 + (24 + namelen).next_multiple_of(8);
    }
    assert_eq!(at, reply.len());
    seen
}

#[test]
fn readdirplus_gives_names_first_then_attributes_counting_each_entry_as_a_lookup() {
    let f = fuse();
    let mknod = [ne32(libc::S_IFREG | 0o600), ne32(0), ne32(0), ne32(0)].concat();
    let (e, reply) = call(&f, op::MKNOD, ROOT_INO, &mknod, b"file\0").unwrap();
    assert_eq!(e, 0);
    let file = ino_of(&reply);

    // fuse_read_in: fh, offset 0, size 4096, flags, lock_owner, padding.
    let read_in = [ne64(0), ne64(0), ne32(4096), ne32(0), ne64(0), ne32(0), ne32(0)].concat();
    // A first listing: names (and inode numbers) only, node 0 everywhere.
    let (e, reply) = call(&f, op::READDIRPLUS, ROOT_INO, &read_in, b"").unwrap();
    assert_eq!(e, 0);
    assert_eq!(
        direntplus(&reply),
        vec![
            (b".".to_vec(), 0, ROOT_INO, 0),
            (b"..".to_vec(), 0, ROOT_INO, 0),
            (b"file".to_vec(), 0, file, 0),
        ]
    );
    // Its entries looked up (a stat-each walker): listings carry attributes.
    for _ in 0..2 {
        let (e, reply) = call(&f, op::LOOKUP, ROOT_INO, b"", b"file\0").unwrap();
        assert_eq!((e, ino_of(&reply)), (0, file));
    }
    let (e, reply) = call(&f, op::READDIRPLUS, ROOT_INO, &read_in, b"").unwrap();
    assert_eq!(e, 0);
    assert_eq!(
        direntplus(&reply),
        vec![
            (b".".to_vec(), ROOT_INO, ROOT_INO, libc::S_IFDIR | 0o755),
            (b"..".to_vec(), ROOT_INO, ROOT_INO, libc::S_IFDIR | 0o755),
            (b"file".to_vec(), file, file, libc::S_IFREG | 0o600),
        ]
    );

    // MKNOD, two LOOKUPs and the second listing hold the unlinked file;
    // the first listing did not.
    let (e, _) = call(&f, op::UNLINK, ROOT_INO, b"", b"file\0").unwrap();
    assert_eq!(e, 0);
    f.forget(file, 3);
    let (e, _) = call(&f, op::GETATTR, file, &[0u8; 16], b"").unwrap();
    assert_eq!(e, 0, "still held by the listing's lookup");
    f.forget(file, 1);
    let (e, _) = call(&f, op::GETATTR, file, &[0u8; 16], b"").unwrap();
    assert_eq!(e, -libc::ENOENT, "freed with the last lookup");
}

/// A request as read from `/dev/fuse`: `fuse_in_header`, the argument
/// struct, the payload.
fn dev_request(opcode: u32, nodeid: u64, op_in: &[u8], payload: &[u8]) -> Vec<u8> {
    let len = (40 + op_in.len() + payload.len()) as u32;
    let mut b = [ne32(len), ne32(opcode), ne64(78), ne64(nodeid), vec![0; 16]].concat();
    b.extend_from_slice(op_in);
    b.extend_from_slice(payload);
    b
}

/// Serve a `/dev/fuse` request as its threads do (no offload, the reply
/// in the room after the arguments).
fn serve_dev(f: &Tux3Fuse, req: &[u8]) -> Option<(i32, Vec<u8>)> {
    let h = InHeader::parse_dev(req).unwrap();
    let arg_len = h.len - abi::DEV_ARGS_AT - h.payload_len;
    let op_in = &req[abi::DEV_ARGS_AT..abi::DEV_ARGS_AT + arg_len];
    let mut buf = vec![0u8; 1 << 16];
    buf[..h.payload_len].copy_from_slice(&req[abi::DEV_ARGS_AT + arg_len..]);
    let defer = || -> Deferred { Box::new(|_, _| {}) };
    match f.serve(&h, op_in, &mut buf, defer, None) {
        Outcome::Reply { error, len } => Some((error, buf[..len].to_vec())),
        Outcome::Later => None,
    }
}

#[test]
fn dev_fuse_requests_split_at_the_argument_struct() {
    let f = fuse();
    let mkdir = [ne32(0o700), ne32(0)].concat();
    let (e, reply) = serve_dev(&f, &dev_request(op::MKDIR, ROOT_INO, &mkdir, b"d\0")).unwrap();
    assert_eq!(e, 0);
    assert_eq!(u32_at(&reply, 40 + 60), libc::S_IFDIR | 0o700);
    let (e, reply) = serve_dev(&f, &dev_request(op::LOOKUP, ROOT_INO, &[], b"d\0")).unwrap();
    assert_eq!(e, 0);
    assert_eq!(
        u32_at(&reply, 40 + 60),
        libc::S_IFDIR | 0o700,
        "LOOKUP: names only"
    );
    // A MKDIR cut inside its struct is refused, never read as zeros.
    let short = dev_request(op::MKDIR, ROOT_INO, &mkdir[..4], b"");
    assert_eq!(serve_dev(&f, &short).unwrap().0, -libc::EINVAL);
    // A header whose length disagrees with what was read is no request.
    let mut bad = dev_request(op::LOOKUP, ROOT_INO, &[], b"d\0");
    bad.push(0);
    assert!(InHeader::parse_dev(&bad).is_err());
    assert!(InHeader::parse_dev(&bad[..39]).is_err());
}
