//! Send streams end to end on memory devices: a snapshot sent (whole or
//! against a base) and received is the same tree — names, inode numbers,
//! data, holes, modes, owners, times, xattrs, hard links, symlinks and
//! special files; an incremental stream carries only what changed; a
//! missing base, a damaged record and a taken name are refused with what
//! was wrong; a stream cut anywhere (and the receiver crashed or not)
//! leaves no snapshot and is finished by a resumed one; and thousands of
//! random namespace changes (renames over names, moves across parents,
//! directories replaced by files and the reverse, exchanges) arrive
//! exactly.

use std::collections::BTreeMap;
use std::sync::Arc;
use tux3::device::{Device, MemDevice};
use tux3::types::{SetAttr, Timespec, XattrMode};
use tux3::{FileType, FormatOptions, Fs, OpenOptions, RenameFlags, ROOT_INO};
use tux3_tools::stream::receive::{receive, ReceiveOptions};
use tux3_tools::stream::resume::{self, Token};
use tux3_tools::stream::send::{send, SendOptions, Sent};
use tux3_tools::stream::StreamError;

fn device(blocks: u64) -> Arc<dyn Device> {
    let dev: Arc<dyn Device> = Arc::new(MemDevice::new(4096, blocks));
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    dev
}

fn open(dev: &Arc<dyn Device>) -> Fs {
    Fs::open(dev.clone(), OpenOptions::default()).unwrap()
}

fn open_snapshot(dev: &Arc<dyn Device>, name: &str) -> Fs {
    let opts = OpenOptions {
        read_only: true,
        snapshot: Some(name.as_bytes().to_vec()),
        ..OpenOptions::default()
    };
    Fs::open(dev.clone(), opts).unwrap()
}

fn stream(dev: &Arc<dyn Device>, snap: &str, base: Option<&str>, resume: Option<Token>) -> (Vec<u8>, Sent) {
    let opts = SendOptions {
        snapshot: Some(snap.as_bytes()),
        base: base.map(str::as_bytes),
        resume,
    };
    let mut out = Vec::new();
    let sent = send(dev.clone(), &opts, &mut out, &mut |_| {}).unwrap();
    (out, sent)
}

fn apply(fs: &Fs, bytes: &[u8]) -> Result<(), StreamError> {
    apply_with(fs, bytes, &ReceiveOptions::default())
}

fn apply_with(fs: &Fs, bytes: &[u8], opts: &ReceiveOptions) -> Result<(), StreamError> {
    receive(fs, bytes, opts, &mut |_| {}).map(|_| ())
}

/// Everything a snapshot's tree shows, by path: the inode's number, type,
/// mode, owner, size, rdev, links, times, xattrs, symlink target, data and
/// where its data and holes are.
fn describe(fs: &Fs) -> BTreeMap<String, String> {
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

fn inode(fs: &Fs, a: &tux3::Attr) -> String {
    let mut xattrs = Vec::new();
    for n in fs.listxattr(a.ino).unwrap() {
        let v = fs.getxattr(a.ino, &n).unwrap();
        xattrs.push(format!("{}={:?}", String::from_utf8_lossy(&n), v));
    }
    let mut data = String::new();
    match a.kind {
        FileType::Regular => {
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
fn same_snapshot(a: &Arc<dyn Device>, b: &Arc<dyn Device>, name: &str) {
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

fn t(sec: i64, nsec: u32) -> Timespec {
    Timespec { sec, nsec }
}

fn file(fs: &Fs, dir: u64, name: &str, data: &[u8]) -> u64 {
    let a = fs.create(dir, name.as_bytes(), 0o640, 1000, 100).unwrap();
    fs.write(a.ino, 0, data).unwrap();
    a.ino
}

/// A tree with one of everything.
fn populate(fs: &Fs) {
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

#[test]
fn a_full_stream_makes_the_same_tree() {
    let src = device(16384);
    let fs = open(&src);
    populate(&fs);
    // An open file without a name is in no snapshot's tree.
    let orphan = file(&fs, ROOT_INO, "orphan", b"gone");
    fs.open_handle(orphan).unwrap();
    fs.unlink(ROOT_INO, b"orphan").unwrap();
    let snap = fs.snapshot_create(b"s1").unwrap();
    let (bytes, sent) = stream(&src, "s1", None, None);
    assert_eq!(sent.bytes, bytes.len() as u64);
    let dst = device(16384);
    let rfs = open(&dst);
    receive(&rfs, &bytes[..], &ReceiveOptions::default(), &mut |_| {}).unwrap();
    let got = rfs.snapshot_list().unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].name, b"s1");
    // The received snapshot keeps the sent one's identity.
    assert_eq!(got[0].origin, snap.origin);
    assert_eq!(snap.origin.volume, fs.volume_id());
    // No trace of the receive's own state in the snapshot or the volume.
    assert!(rfs
        .listxattr(ROOT_INO)
        .unwrap()
        .iter()
        .all(|n| n != resume::TOKEN_XATTR));
    same_snapshot(&src, &dst, "s1");
    // Sparse files stay sparse: the hole costs nothing in the stream.
    assert!(bytes.len() < 400_000, "{} bytes", bytes.len());
    rfs.close().unwrap();
    fs.close().unwrap();
    // The received volume is clean.
    let report = tux3_tools::fsck::check(dst.clone(), &Default::default()).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}

#[test]
fn an_incremental_stream_carries_only_the_change() {
    let src = device(16384);
    let fs = open(&src);
    populate(&fs);
    let big: Vec<u8> = vec![3u8; 4 << 20];
    let f = file(&fs, ROOT_INO, "four-mib", &big);
    file(&fs, ROOT_INO, "untouched", &big);
    fs.snapshot_create(b"s1").unwrap();
    // One block changed in the middle of a 4 MiB file.
    fs.write(f, 2 << 20, &[8u8; 4096]).unwrap();
    fs.snapshot_create(b"s2").unwrap();
    // Nothing changed at all.
    fs.snapshot_create(b"s3").unwrap();

    let dst = device(16384);
    let rfs = open(&dst);
    apply(&rfs, &stream(&src, "s1", None, None).0).unwrap();
    let (bytes, sent) = stream(&src, "s2", Some("s1"), None);
    assert_eq!(sent.data_bytes, 4096, "one block's data");
    assert!(bytes.len() < 8192, "{} bytes for one changed block", bytes.len());
    apply(&rfs, &bytes).unwrap();
    same_snapshot(&src, &dst, "s2");
    let (bytes, sent) = stream(&src, "s3", Some("s2"), None);
    assert_eq!(sent.data_bytes, 0);
    assert!(sent.records <= 4, "{} records for no change", sent.records);
    apply(&rfs, &bytes).unwrap();
    same_snapshot(&src, &dst, "s3");
    same_snapshot(&src, &dst, "s1");
    // Changes made on the receiver's live volume since are dropped by the
    // next incremental receive (the volume is made its base first).
    file(&rfs, ROOT_INO, "local", b"x");
    fs.unlink(ROOT_INO, b"untouched").unwrap();
    fs.snapshot_create(b"s4").unwrap();
    apply(&rfs, &stream(&src, "s4", Some("s3"), None).0).unwrap();
    same_snapshot(&src, &dst, "s4");
    // A replica sends on: its snapshots keep their origin, so a third
    // volume that has s1 from the source takes s2 from the replica.
    rfs.close().unwrap();
    let third = device(16384);
    let tfs = open(&third);
    apply(&tfs, &stream(&src, "s1", None, None).0).unwrap();
    apply(&tfs, &stream(&dst, "s2", Some("s1"), None).0).unwrap();
    same_snapshot(&src, &third, "s2");
}

#[test]
fn an_abandoned_receive_leaves_the_volume_as_it_was() {
    let src = device(8192);
    let fs = open(&src);
    populate(&fs);
    fs.snapshot_create(b"s1").unwrap();
    file(&fs, ROOT_INO, "more", &[5u8; 50_000]);
    fs.unlink(ROOT_INO, b"fifo").unwrap();
    fs.snapshot_create(b"s2").unwrap();
    let dst = device(8192);
    let rfs = open(&dst);
    // A full receive cut off, abandoned: an empty root again.
    let full = stream(&src, "s1", None, None).0;
    apply(&rfs, &full[..full.len() / 2]).unwrap_err();
    assert!(resume::stored(&rfs).unwrap().is_some());
    assert!(tux3_tools::stream::receive::abort(&rfs).unwrap().is_some());
    assert!(rfs.readdir(ROOT_INO, 0, 10).unwrap().is_empty());
    assert!(rfs.listxattr(ROOT_INO).unwrap().is_empty());
    assert!(tux3_tools::stream::receive::abort(&rfs).unwrap().is_none());
    // An incremental one: the base's tree again.
    apply(&rfs, &full).unwrap();
    let incr = stream(&src, "s2", Some("s1"), None).0;
    apply(&rfs, &incr[..incr.len() / 2]).unwrap_err();
    tux3_tools::stream::receive::abort(&rfs).unwrap();
    assert_eq!(describe(&rfs), describe(&open_snapshot(&dst, "s1")));
    // And the stream is taken whole afterwards.
    apply(&rfs, &incr).unwrap();
    same_snapshot(&src, &dst, "s2");
}

#[test]
fn holes_punched_and_files_cut_arrive() {
    let src = device(16384);
    let fs = open(&src);
    let data: Vec<u8> = (0..(64 * 4096u32)).map(|i| (i % 253) as u8).collect();
    let a = file(&fs, ROOT_INO, "a", &data);
    let b = file(&fs, ROOT_INO, "b", &data);
    let c = file(&fs, ROOT_INO, "c", &data);
    fs.snapshot_create(b"s1").unwrap();
    // a: cut in the middle of a block, then extended with a hole.
    let cut = SetAttr {
        size: Some(10_000),
        ..SetAttr::default()
    };
    fs.setattr(a, &cut).unwrap();
    let grow = SetAttr {
        size: Some(1 << 20),
        ..SetAttr::default()
    };
    fs.setattr(a, &grow).unwrap();
    fs.write(a, 500_000, b"tail").unwrap();
    // b: a hole where data was (cut and written back past it).
    let cut = SetAttr {
        size: Some(8 * 4096),
        ..SetAttr::default()
    };
    fs.setattr(b, &cut).unwrap();
    fs.write(b, 40 * 4096, &data[40 * 4096..]).unwrap();
    // c: shorter.
    let cut = SetAttr {
        size: Some(3),
        ..SetAttr::default()
    };
    fs.setattr(c, &cut).unwrap();
    fs.snapshot_create(b"s2").unwrap();
    let dst = device(16384);
    let rfs = open(&dst);
    apply(&rfs, &stream(&src, "s1", None, None).0).unwrap();
    apply(&rfs, &stream(&src, "s2", Some("s1"), None).0).unwrap();
    same_snapshot(&src, &dst, "s2");
}

#[test]
fn a_missing_base_a_taken_name_and_a_bad_record_are_refused() {
    let src = device(8192);
    let fs = open(&src);
    populate(&fs);
    fs.snapshot_create(b"s1").unwrap();
    file(&fs, ROOT_INO, "more", b"more");
    fs.snapshot_create(b"s2").unwrap();
    let incremental = stream(&src, "s2", Some("s1"), None).0;

    // No base.
    let dst = device(8192);
    let rfs = open(&dst);
    let e = apply(&rfs, &incremental).unwrap_err();
    assert!(matches!(e, StreamError::Refused(_)), "{e}");
    assert!(e.to_string().contains("does not have"), "{e}");
    assert!(rfs.snapshot_list().unwrap().is_empty());

    // A damaged record: named by number and offset, and no snapshot.
    let mut bad = stream(&src, "s1", None, None).0;
    let at = bad.len() / 2;
    bad[at] ^= 0x40;
    let e = apply(&rfs, &bad).unwrap_err();
    match &e {
        StreamError::Checksum { record, offset } => {
            assert!(*record > 0 && *offset as usize <= at && at - (*offset as usize) < (1 << 20) + 64);
        }
        other => panic!("{other}"),
    }
    assert!(e.to_string().contains("bad checksum at record"), "{e}");
    assert!(rfs.snapshot_list().unwrap().is_empty());
    // The whole stream again finishes it (what was applied is skipped).
    apply(&rfs, &stream(&src, "s1", None, None).0).unwrap();
    same_snapshot(&src, &dst, "s1");

    // The same snapshot again, and a name taken by another.
    let e = apply(&rfs, &stream(&src, "s1", None, None).0).unwrap_err();
    assert!(e.to_string().contains("taken"), "{e}");
    rfs.snapshot_create(b"s2").unwrap();
    let e = apply(&rfs, &incremental).unwrap_err();
    assert!(e.to_string().contains("\"s2\" is taken"), "{e}");
    // A full stream needs an empty volume.
    let dst2 = device(8192);
    let rfs2 = open(&dst2);
    file(&rfs2, ROOT_INO, "x", b"x");
    let e = apply(&rfs2, &stream(&src, "s1", None, None).0).unwrap_err();
    assert!(e.to_string().contains("empty volume"), "{e}");
}

/// A cheap deterministic generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Cut `bytes` at `cut`, receive that much (which fails), maybe crash the
/// receiver, then finish with a stream resumed from its token.
fn cut_and_resume(
    src: &Arc<dyn Device>,
    dst: &Arc<dyn Device>,
    snap: &str,
    base: Option<&str>,
    cut: usize,
    crash: bool,
) {
    let whole = stream(src, snap, base, None).0;
    let opts = ReceiveOptions {
        checkpoint_bytes: 1 << 40,
        checkpoint_records: 5,
        ..ReceiveOptions::default()
    };
    let rfs = open(dst);
    let e = apply_with(&rfs, &whole[..cut], &opts).unwrap_err();
    assert!(
        matches!(e, StreamError::Cut { .. }),
        "cut at {cut} of {}: {e}",
        whole.len()
    );
    let rfs = if crash {
        drop(rfs); // as a crash would: the last commit stays
        open(dst)
    } else {
        rfs
    };
    assert!(
        rfs.snapshot_list()
            .unwrap()
            .iter()
            .all(|s| s.name != snap.as_bytes()),
        "a cut receive left snapshot {snap}"
    );
    let token = resume::stored(&rfs).unwrap();
    let Some(token) = token else {
        // Cut before the receive started: nothing to resume.
        apply(&rfs, &whole).unwrap();
        rfs.close().unwrap();
        return;
    };
    let (rest, _) = stream(src, snap, base, Some(token));
    if token.next > 1 {
        assert!(rest.len() < whole.len(), "a resumed stream starts over");
    }
    apply_with(&rfs, &rest, &opts).unwrap();
    rfs.close().unwrap();
}

#[test]
fn a_stream_cut_anywhere_resumes_to_the_same_tree() {
    let src = device(8192);
    let fs = open(&src);
    populate(&fs);
    fs.snapshot_create(b"s1").unwrap();
    let d = fs.lookup(ROOT_INO, b"dir").unwrap().ino;
    fs.rename(ROOT_INO, b"sparse", d, b"moved", RenameFlags::default())
        .unwrap();
    fs.rmdir(d, b"sub").unwrap_err(); // not empty
    file(&fs, ROOT_INO, "new", &[1u8; 20000]);
    fs.write(fs.lookup(d, b"file").unwrap().ino, 3, b"HELLO").unwrap();
    fs.snapshot_create(b"s2").unwrap();
    let full = stream(&src, "s1", None, None).0.len();
    let incr = stream(&src, "s2", Some("s1"), None).0.len();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for round in 0..24 {
        let crash = round % 2 == 1;
        let dst = device(8192);
        cut_and_resume(&src, &dst, "s1", None, rng.below(full as u64) as usize, crash);
        same_snapshot(&src, &dst, "s1");
        cut_and_resume(
            &src,
            &dst,
            "s2",
            Some("s1"),
            rng.below(incr as u64) as usize,
            crash,
        );
        same_snapshot(&src, &dst, "s2");
    }
}

/// How many of each kind of interesting change happened.
#[derive(Default, Debug)]
struct Seen {
    over: u32,
    across: u32,
    exchanges: u32,
    dir_file_swaps: u32,
}

/// One random namespace or data change; whether it happened.
fn random_change(fs: &Fs, rng: &mut Rng, dirs: &mut Vec<u64>, seen: &mut Seen) -> bool {
    const NAMES: [&[u8]; 6] = [b"a", b"b", b"c", b"d", b"e", b"f"];
    let dir = dirs[rng.below(dirs.len() as u64) as usize];
    let name = NAMES[rng.below(NAMES.len() as u64) as usize];
    let r = match rng.below(20) {
        0..=2 => fs.create(dir, name, 0o644, 0, 0).map(|a| {
            let _ = fs.write(a.ino, rng.below(3) * 5000, &[rng.below(256) as u8; 100]);
        }),
        3..=4 => fs.mkdir(dir, name, 0o755, 0, 0).map(|a| dirs.push(a.ino)),
        5..=9 => {
            let to = dirs[rng.below(dirs.len() as u64) as usize];
            let newname = NAMES[rng.below(NAMES.len() as u64) as usize];
            let flags = RenameFlags {
                noreplace: false,
                exchange: rng.below(4) == 0,
            };
            let (from, over) = (fs.lookup(dir, name), fs.lookup(to, newname));
            let r = fs.rename(dir, name, to, newname, flags);
            if r.is_ok() {
                if let (Ok(a), Ok(b)) = (&from, &over) {
                    seen.over += 1;
                    let dirs = [a.kind, b.kind]
                        .iter()
                        .filter(|k| **k == FileType::Directory)
                        .count();
                    seen.exchanges += flags.exchange as u32;
                    seen.dir_file_swaps += (flags.exchange && dirs == 1) as u32;
                }
                seen.across += (dir != to) as u32;
            }
            r
        }
        10..=11 => fs.unlink(dir, name),
        12..=13 => fs.rmdir(dir, name),
        14 => fs.lookup(dir, name).and_then(|a| {
            let to = dirs[rng.below(dirs.len() as u64) as usize];
            fs.link(a.ino, to, NAMES[rng.below(6) as usize]).map(|_| ())
        }),
        15 => fs.symlink(dir, name, b"target", 0, 0).map(|_| ()),
        16 => fs.mknod(dir, name, libc::S_IFIFO | 0o600, 0, 0, 0).map(|_| ()),
        17 => fs.lookup(dir, name).and_then(|a| {
            let v = [rng.below(256) as u8; 3];
            fs.setxattr(a.ino, b"user.x", &v, XattrMode::Any)
        }),
        _ => fs.lookup(dir, name).and_then(|a| {
            if a.kind != FileType::Regular {
                return Ok(());
            }
            let set = SetAttr {
                size: Some(rng.below(20_000)),
                ..SetAttr::default()
            };
            fs.setattr(a.ino, &set)
                .and_then(|_| fs.write(a.ino, rng.below(12_000), b"changed").map(|_| ()))
        }),
    };
    r.is_ok()
}

#[test]
fn ten_thousand_random_namespace_changes_arrive_exactly() {
    let src = device(32768);
    let fs = open(&src);
    let dst = device(32768);
    let rfs = open(&dst);
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut dirs = vec![ROOT_INO];
    let mut done = 0;
    let mut base: Option<String> = None;
    let mut seen = Seen::default();
    for round in 0..12 {
        let mut n = 0;
        while n < 1000 {
            if random_change(&fs, &mut rng, &mut dirs, &mut seen) {
                n += 1;
            }
        }
        done += n;
        let name = format!("r{round}");
        fs.snapshot_create(name.as_bytes()).unwrap();
        let (bytes, _) = stream(&src, &name, base.as_deref(), None);
        // Cut off, with more committed than its token says (as a commit
        // between checkpoints and then a crash leave it): the resumed
        // receive applies records again over some of their own work.
        let ahead = ReceiveOptions {
            checkpoint_bytes: 1 << 40,
            checkpoint_records: 1 + rng.below(50),
            checkpoint_at_error: false,
        };
        let cut = rng.below(bytes.len() as u64) as usize;
        if apply_with(&rfs, &bytes[..cut], &ahead).is_ok() {
            panic!("round {round}: a cut stream was taken");
        }
        rfs.sync().unwrap();
        apply(&rfs, &bytes).unwrap_or_else(|e| panic!("round {round}: {e}"));
        same_snapshot(&src, &dst, &name);
        base = Some(name);
    }
    assert!(done >= 10_000);
    // The mix the stream has to get right happened, many times over.
    assert!(
        seen.over > 300 && seen.across > 1000 && seen.exchanges > 100 && seen.dir_file_swaps > 20,
        "{seen:?}"
    );
    rfs.close().unwrap();
    let report = tux3_tools::fsck::check(dst.clone(), &Default::default()).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}

#[test]
fn numbers_given_out_again_to_files_of_the_same_kind_arrive() {
    let src = device(8192);
    let fs = open(&src);
    let l = fs.symlink(ROOT_INO, b"l", b"first", 0, 0).unwrap().ino;
    let c = fs
        .mknod(ROOT_INO, b"c", libc::S_IFCHR | 0o600, 0x0101, 0, 0)
        .unwrap()
        .ino;
    let f = file(&fs, ROOT_INO, "f", &[1u8; 10_000]);
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap().ino;
    fs.snapshot_create(b"s1").unwrap();
    for n in [&b"l"[..], b"c", b"f"] {
        fs.unlink(ROOT_INO, n).unwrap();
    }
    fs.rmdir(ROOT_INO, b"d").unwrap();
    // A new session hands the freed numbers out again.
    fs.close().unwrap();
    let fs = open(&src);
    let l2 = fs.symlink(ROOT_INO, b"l", b"second, longer", 0, 0).unwrap().ino;
    let c2 = fs
        .mknod(ROOT_INO, b"c", libc::S_IFCHR | 0o600, 0x0202, 0, 0)
        .unwrap()
        .ino;
    let f2 = file(&fs, ROOT_INO, "f", &[2u8; 5_000]);
    // A number a directory had, now a file's (and the reverse).
    let d2 = fs.create(ROOT_INO, b"d", 0o644, 0, 0).unwrap().ino;
    assert_eq!((l2, c2, f2, d2), (l, c, f, d), "the numbers were given out again");
    fs.snapshot_create(b"s2").unwrap();
    let dst = device(8192);
    let rfs = open(&dst);
    apply(&rfs, &stream(&src, "s1", None, None).0).unwrap();
    apply(&rfs, &stream(&src, "s2", Some("s1"), None).0).unwrap();
    same_snapshot(&src, &dst, "s2");
    same_snapshot(&src, &dst, "s1");
}
