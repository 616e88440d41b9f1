//! Helpers shared by the send stream tests (tests/send_receive*.rs): memory
//! volumes, a stream sent into a buffer and received from one, and a
//! description of a snapshot's whole tree (names, inode numbers, types,
//! modes, owners, sizes, links, times, xattrs, symlink targets, data and
//! holes) to compare a received snapshot with its source by.
#![allow(dead_code, unused_imports)]

pub use std::collections::BTreeMap;
pub use std::sync::Arc;
pub use tux3::device::{Device, MemDevice};
pub use tux3::types::{SetAttr, Timespec, XattrMode};
pub use tux3::{FileType, FormatOptions, Fs, OpenOptions, RenameFlags, ROOT_INO};
pub use tux3_tools::stream::receive::{receive, ReceiveOptions};
pub use tux3_tools::stream::resume::{self, Token};
pub use tux3_tools::stream::send::{send, SendOptions, Sent};
pub use tux3_tools::stream::StreamError;

pub fn device(blocks: u64) -> Arc<dyn Device> {
    device_of(4096, blocks)
}

/// A volume of `blocks` blocks of `bs` bytes.
pub fn device_of(bs: u32, blocks: u64) -> Arc<dyn Device> {
    let dev: Arc<dyn Device> = Arc::new(MemDevice::new(bs, blocks));
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    dev
}

pub fn open(dev: &Arc<dyn Device>) -> Fs {
    Fs::open(dev.clone(), OpenOptions::default()).unwrap()
}

pub fn open_snapshot(dev: &Arc<dyn Device>, name: &str) -> Fs {
    let opts = OpenOptions {
        read_only: true,
        snapshot: Some(name.as_bytes().to_vec()),
        ..OpenOptions::default()
    };
    Fs::open(dev.clone(), opts).unwrap()
}

pub fn stream(
    dev: &Arc<dyn Device>,
    snap: &str,
    base: Option<&str>,
    resume: Option<Token>,
) -> (Vec<u8>, Sent) {
    let opts = SendOptions {
        snapshot: Some(snap.as_bytes()),
        base: base.map(str::as_bytes),
        resume,
        ..SendOptions::default()
    };
    let mut out = Vec::new();
    let sent = send(dev.clone(), &opts, &mut out, &mut |_| {}).unwrap();
    (out, sent)
}

pub fn apply(fs: &Fs, bytes: &[u8]) -> Result<(), StreamError> {
    apply_with(fs, bytes, &ReceiveOptions::default())
}

pub fn apply_with(fs: &Fs, bytes: &[u8], opts: &ReceiveOptions) -> Result<(), StreamError> {
    receive(fs, bytes, opts, &mut |_| {}).map(|_| ())
}

/// Everything a snapshot's tree shows, by path: the inode's number, type,
/// mode, owner, size, rdev, links, times, xattrs, symlink target, data and
/// where its data and holes are.
pub fn describe(fs: &Fs) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![(ROOT_INO, String::from("/"))];
    while let Some((dir, path)) = stack.pop() {
        let a = fs.getattr(dir).unwrap();
        out.insert(path.clone(), inode(fs, &a));
        let mut pos = 0;
        loop {
            let batch = fs.readdir(dir, pos, 64).unwrap();
            let Some(last) = batch.last() else { break };
            pos = last.next;
            for e in batch {
                let p = format!("{path}{}", String::from_utf8_lossy(&e.name));
                if e.kind == FileType::Directory {
                    stack.push((e.ino, format!("{p}/")));
                } else {
                    let a = fs.getattr(e.ino).unwrap();
                    out.insert(p, inode(fs, &a));
                }
            }
        }
    }
    out
}

pub fn inode(fs: &Fs, a: &tux3::Attr) -> String {
    let mut xattrs = Vec::new();
    for n in fs.listxattr(a.ino).unwrap() {
        let v = fs.getxattr(a.ino, &n).unwrap();
        xattrs.push(format!("{}={:?}", String::from_utf8_lossy(&n), v));
    }
    let mut data = String::new();
    match a.kind {
        FileType::Regular => {
            let all = fs.read(a.ino, 0, a.size as usize).unwrap();
            let sum = all
                .iter()
                .fold(0u64, |s, &b| s.wrapping_mul(31).wrapping_add(b as u64));
            data.push_str(&format!(" content {sum:x}"));
            // Data and holes, as SEEK_DATA/SEEK_HOLE give them.
            let mut at = 0;
            while at < a.size {
                let Ok(d) = fs.seek_data(a.ino, at, true) else {
                    break;
                };
                if d >= a.size {
                    break;
                }
                let h = fs.seek_data(a.ino, d, false).unwrap();
                let bytes = fs.read(a.ino, d, (h - d) as usize).unwrap();
                let sum = bytes
                    .iter()
                    .fold(0u64, |s, &b| s.wrapping_mul(31).wrapping_add(b as u64));
                data.push_str(&format!(" data {d}..{h} sum {sum:x}"));
                at = h;
            }
        }
        FileType::Symlink => data = format!(" -> {:?}", fs.readlink(a.ino).unwrap()),
        _ => {}
    }
    format!(
        "ino {} {:?} mode {:o} {}:{} size {} rdev {} nlink {} atime {:?} mtime {:?} ctime {:?} btime {:?} \
         xattrs [{}]{data}",
        a.ino,
        a.kind,
        a.mode,
        a.uid,
        a.gid,
        a.size,
        a.rdev,
        a.nlink,
        a.atime,
        a.mtime,
        a.ctime,
        a.btime,
        xattrs.join(" ")
    )
}

/// The tree of snapshot `name` on `a` and on `b` are the same.
pub fn same_snapshot(a: &Arc<dyn Device>, b: &Arc<dyn Device>, name: &str) {
    let (x, y) = (
        describe(&open_snapshot(a, name)),
        describe(&open_snapshot(b, name)),
    );
    if x != y {
        for (p, v) in &x {
            match y.get(p) {
                Some(w) if w == v => {}
                Some(w) => panic!("{name}: {p} differs:\n  sent     {v}\n  received {w}"),
                None => panic!("{name}: {p} was not received: {v}"),
            }
        }
        let extra: Vec<&String> = y.keys().filter(|p| !x.contains_key(*p)).collect();
        panic!("{name}: received paths the source does not have: {extra:?}");
    }
}

pub fn t(sec: i64, nsec: u32) -> Timespec {
    Timespec { sec, nsec }
}

pub fn file(fs: &Fs, dir: u64, name: &str, data: &[u8]) -> u64 {
    let a = fs.create(dir, name.as_bytes(), 0o640, 1000, 100).unwrap();
    fs.write(a.ino, 0, data).unwrap();
    a.ino
}

/// A tree with one of everything.
pub fn populate(fs: &Fs) {
    let d = fs.mkdir(ROOT_INO, b"dir", 0o750, 1000, 100).unwrap().ino;
    let sub = fs.mkdir(d, b"sub", 0o700, 0, 0).unwrap().ino;
    let f = file(fs, d, "file", b"hello, world\n");
    fs.link(f, sub, b"hard").unwrap();
    fs.link(f, ROOT_INO, b"hard2").unwrap();
    // Sparse: data at 0, at 1 MiB + 10, and a hole to 3 MiB.
    let s = file(fs, ROOT_INO, "sparse", &[7u8; 5000]);
    fs.write(s, (1 << 20) + 10, &[9u8; 9000]).unwrap();
    let set = SetAttr {
        size: Some(3 << 20),
        ..SetAttr::default()
    };
    fs.setattr(s, &set).unwrap();
    let big: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    file(fs, sub, "big", &big);
    fs.symlink(d, b"link", b"../sparse", 1000, 100).unwrap();
    fs.mknod(ROOT_INO, b"fifo", libc::S_IFIFO | 0o600, 0, 5, 6)
        .unwrap();
    fs.mknod(ROOT_INO, b"sock", libc::S_IFSOCK | 0o755, 0, 0, 0)
        .unwrap();
    fs.mknod(ROOT_INO, b"chr", libc::S_IFCHR | 0o620, 0x0501, 0, 5)
        .unwrap();
    fs.mknod(sub, b"blk", libc::S_IFBLK | 0o660, 0x0803, 0, 6)
        .unwrap();
    fs.setxattr(f, b"user.one", b"1", XattrMode::Any).unwrap();
    fs.setxattr(f, b"user.empty", b"", XattrMode::Any).unwrap();
    fs.setxattr(d, b"security.selinux", b"label\0", XattrMode::Any)
        .unwrap();
    fs.setxattr(ROOT_INO, b"user.root", b"r", XattrMode::Any).unwrap();
    fs.create(ROOT_INO, b"empty", 0o4755, 0, 0).unwrap();
    let times = SetAttr {
        atime: Some(t(1_000_000, 5)),
        mtime: Some(t(2_000_000, 999_999_999)),
        mode: Some(0o2755),
        uid: Some(42),
        ..SetAttr::default()
    };
    fs.setattr(sub, &times).unwrap();
}

/// A cheap deterministic generator.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}
