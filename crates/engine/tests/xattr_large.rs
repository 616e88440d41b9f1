//! Scenario: xattrs of any size Linux allows — values up to 64 KiB, names
//! up to 255 bytes, names up to the 64 KiB of a listxattr answer. Those the
//! inode record cannot hold live in the inode's xattr file (FORMAT.md 7.5):
//! they survive remounts, replace and remove atomically with the record,
//! go with their owner (unlinked, or open-unlinked and freed at the next
//! mount), stay in a snapshot as they were, and fsck finds every image
//! clean; a damaged xattr file is reported naming it and repaired.

use std::sync::Arc;
use tux3::device::{Device, MemDevice};
use tux3::{Errno, FormatOptions, Fs, Ino, OpenOptions, XattrMode, ROOT_INO};
use tux3_tools::fsck;

const BS: u32 = 4096;

fn fresh() -> Arc<dyn Device> {
    let dev: Arc<dyn Device> = Arc::new(MemDevice::new(BS, 8192));
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    dev
}

fn open(dev: &Arc<dyn Device>) -> Fs {
    Fs::open(dev.clone(), OpenOptions::default()).unwrap()
}

fn assert_clean(dev: &Arc<dyn Device>) {
    let r = fsck::check(dev.clone(), &Default::default()).unwrap();
    assert!(r.problems.is_empty(), "fsck: {:?}", r.problems);
}

fn value(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn file(fs: &Fs, name: &str) -> Ino {
    fs.create(ROOT_INO, name.as_bytes(), 0o644, 0, 0).unwrap().ino
}

fn used(fs: &Fs) -> u64 {
    let s = fs.statfs().unwrap();
    s.blocks - s.blocks_free
}

/// Once a unify has let go of the old log and nodes, no more blocks are
/// in use than `before` (give or take the log's head); then fsck is clean.
fn space_came_back(dev: &Arc<dyn Device>, fs: Fs, before: u64) {
    fs.unify().unwrap();
    fs.sync().unwrap();
    let now = used(&fs);
    assert!(now <= before + 2, "used {now} after, {before} before");
    fs.close().unwrap();
    assert_clean(dev);
}

#[test]
fn a_64k_value_and_a_255_byte_name_survive_remounts() {
    let dev = fresh();
    let fs = open(&dev);
    let ino = file(&fs, "f");
    let big = value(65536, 1);
    let long: Vec<u8> = [b"user.".as_slice(), &[b'n'; 250]].concat();
    fs.setxattr(ino, b"user.big", &big, XattrMode::Create).unwrap();
    fs.setxattr(ino, &long, &value(3000, 2), XattrMode::Create)
        .unwrap();
    fs.setxattr(ino, b"user.small", b"s", XattrMode::Create).unwrap();
    assert_eq!(fs.getxattr(ino, b"user.big").unwrap(), big);
    assert_eq!(
        fs.setxattr(ino, b"user.x", &value(65537, 0), XattrMode::Any)
            .unwrap_err()
            .errno(),
        Errno::E2BIG
    );
    let too_long = [long.as_slice(), b"x"].concat();
    assert_eq!(
        fs.setxattr(ino, &too_long, b"v", XattrMode::Any)
            .unwrap_err()
            .errno(),
        Errno::ERANGE
    );
    fs.close().unwrap();
    assert_clean(&dev);
    let fs = open(&dev);
    assert_eq!(fs.getxattr(ino, b"user.big").unwrap(), big);
    assert_eq!(fs.getxattr(ino, &long).unwrap(), value(3000, 2));
    assert_eq!(fs.getxattr(ino, b"user.small").unwrap(), b"s");
    let mut want = vec![b"user.big".to_vec(), long.clone(), b"user.small".to_vec()];
    want.sort();
    assert_eq!(fs.listxattr(ino).unwrap(), want);
    fs.close().unwrap();
}

#[test]
fn names_fill_the_listxattr_answer_and_no_more() {
    let dev = fresh();
    let fs = open(&dev);
    let ino = file(&fs, "f");
    let name = |k: usize| format!("user.{k:05}").into_bytes();
    let mut k = 0;
    let mut list = 0;
    loop {
        match fs.setxattr(ino, &name(k), &k.to_le_bytes(), XattrMode::Create) {
            Ok(()) => {
                list += name(k).len() + 1;
                k += 1;
            }
            Err(e) => {
                assert_eq!(e.errno(), Errno::ENOSPC);
                break;
            }
        }
    }
    assert!(list <= 65536 && list + 11 > 65536, "{k} names, {list} bytes");
    fs.sync().unwrap();
    drop(fs);
    assert_clean(&dev);
    let fs = open(&dev);
    let names = fs.listxattr(ino).unwrap();
    assert_eq!(names.len(), k);
    for j in (0..k).step_by(97) {
        assert_eq!(fs.getxattr(ino, &name(j)).unwrap(), j.to_le_bytes());
    }
    fs.close().unwrap();
}

#[test]
fn replacing_and_removing_give_the_space_back() {
    let dev = fresh();
    let fs = open(&dev);
    let ino = file(&fs, "f");
    fs.sync().unwrap();
    let before = used(&fs);
    fs.setxattr(ino, b"user.a", b"small", XattrMode::Create).unwrap();
    fs.setxattr(ino, b"user.a", &value(40000, 3), XattrMode::Replace)
        .unwrap();
    fs.sync().unwrap();
    assert!(used(&fs) >= before + 10, "the value takes blocks");
    assert_eq!(fs.getxattr(ino, b"user.a").unwrap(), value(40000, 3));
    fs.setxattr(ino, b"user.a", b"small again", XattrMode::Replace)
        .unwrap();
    fs.sync().unwrap();
    assert_eq!(fs.getxattr(ino, b"user.a").unwrap(), b"small again");
    fs.setxattr(ino, b"user.b", &value(65536, 4), XattrMode::Create)
        .unwrap();
    fs.removexattr(ino, b"user.b").unwrap();
    assert_eq!(fs.getxattr(ino, b"user.b").unwrap_err().errno(), Errno::ENODATA);
    fs.removexattr(ino, b"user.a").unwrap();
    space_came_back(&dev, fs, before);
}

#[test]
fn an_owner_takes_its_xattr_file_with_it() {
    let dev = fresh();
    let fs = open(&dev);
    fs.sync().unwrap();
    let before = used(&fs);
    let a = file(&fs, "a");
    let b = file(&fs, "b");
    for ino in [a, b] {
        fs.setxattr(ino, b"user.big", &value(65536, 5), XattrMode::Create)
            .unwrap();
    }
    fs.sync().unwrap();
    fs.unlink(ROOT_INO, b"a").unwrap();
    // b open and unlinked: kept to the end of this mount, freed by the next.
    fs.open_handle(b).unwrap();
    fs.unlink(ROOT_INO, b"b").unwrap();
    assert_eq!(fs.getxattr(b, b"user.big").unwrap(), value(65536, 5));
    fs.sync().unwrap();
    drop(fs);
    assert_clean(&dev);
    let fs = open(&dev);
    space_came_back(&dev, fs, before);
}

#[test]
fn a_snapshot_keeps_the_value_it_saw() {
    let dev = fresh();
    let fs = open(&dev);
    let ino = file(&fs, "f");
    fs.setxattr(ino, b"user.big", &value(20000, 6), XattrMode::Create)
        .unwrap();
    fs.snapshot_create(b"s").unwrap();
    fs.setxattr(ino, b"user.big", &value(30000, 7), XattrMode::Replace)
        .unwrap();
    fs.close().unwrap();
    assert_clean(&dev);
    let opts = OpenOptions {
        read_only: true,
        snapshot: Some(b"s".to_vec()),
        ..OpenOptions::default()
    };
    let snap = Fs::open(dev.clone(), opts).unwrap();
    assert_eq!(snap.getxattr(ino, b"user.big").unwrap(), value(20000, 6));
    drop(snap);
    let fs = open(&dev);
    assert_eq!(fs.getxattr(ino, b"user.big").unwrap(), value(30000, 7));
    fs.snapshot_delete(b"s").unwrap();
    fs.close().unwrap();
    assert_clean(&dev);
}

/// A damaged xattr file (one byte of its contents flipped on the device)
/// is an error naming it, for getxattr and fsck alike; a repair drops it
/// and the volume is clean again.
#[test]
fn a_damaged_xattr_file_is_reported_and_repaired() {
    let dev = fresh();
    let fs = open(&dev);
    let ino = file(&fs, "f");
    fs.setxattr(ino, b"user.big", &vec![0xa5; 10000], XattrMode::Create)
        .unwrap();
    // Past a unify: replay does not check its blocks against sums in the log.
    fs.unify().unwrap();
    fs.close().unwrap();
    // Its blocks are the only ones full of 0xa5.
    let mut buf = vec![0u8; BS as usize];
    let hit = (2..dev.block_count())
        .find(|&b| {
            dev.read(b, &mut buf).unwrap();
            buf[100..200].iter().all(|&x| x == 0xa5)
        })
        .unwrap();
    buf[150] ^= 1;
    dev.write(hit, &buf).unwrap();
    let fs = open(&dev);
    let e = fs.getxattr(ino, b"user.big").unwrap_err();
    let e = e.to_string();
    assert!(
        e.contains("xattr file") && e.contains(&format!("of inode {ino}")),
        "{e}"
    );
    drop(fs);
    let r = fsck::check(dev.clone(), &Default::default()).unwrap();
    assert!(
        r.problems.iter().any(|p| p.contains("xattr file")),
        "{:?}",
        r.problems
    );
    let opts = fsck::FsckOptions {
        repair: true,
        ..Default::default()
    };
    let r = fsck::check(dev.clone(), &opts).unwrap();
    assert!(r.problems.is_empty(), "after repair: {:?}", r.problems);
    let fs = open(&dev);
    assert_eq!(fs.getxattr(ino, b"user.big").unwrap_err().errno(), Errno::ENODATA);
    fs.close().unwrap();
    assert_clean(&dev);
}

/// An xattr file is reached by no handle: a lookup of it by number (as the
/// kernel makes for a file handle, `.` in that inode) gives ESTALE, and
/// takes no handle.
#[test]
fn no_handle_reaches_an_xattr_file() {
    let dev = fresh();
    let fs = open(&dev);
    let ino = file(&fs, "f");
    fs.setxattr(ino, b"user.big", &value(10000, 8), XattrMode::Create)
        .unwrap();
    let stale: Vec<Ino> = (ino + 1..ino + 8)
        .filter(|&x| fs.getattr_held(x).is_err_and(|e| e.errno() == Errno::ESTALE))
        .collect();
    assert_eq!(stale.len(), 1, "{stale:?}");
    fs.close().unwrap();
    assert_clean(&dev);
}

/// POSIX ACLs stay in the record (their rules read them there): one that
/// no longer fits is ENOSPC, as `security.capability` is, while a user
/// xattr of the same size goes to the xattr file.
#[test]
fn acls_and_capabilities_stay_in_the_record() {
    let dev = fresh();
    let fs = open(&dev);
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap().ino;
    // owner, 20 named users, group, mask, other: 8 bytes each.
    let mut acl = 2u32.to_le_bytes().to_vec();
    let mut entry = |tag: u16, perm: u16, id: u32| {
        acl.extend_from_slice(&tag.to_le_bytes());
        acl.extend_from_slice(&perm.to_le_bytes());
        acl.extend_from_slice(&id.to_le_bytes());
    };
    entry(0x01, 7, u32::MAX);
    for id in 0..20 {
        entry(0x02, 5, 1000 + id);
    }
    entry(0x04, 5, u32::MAX);
    entry(0x10, 7, u32::MAX);
    entry(0x20, 5, u32::MAX);
    let room = fs.xattr_space() - 4 - b"user.fill".len() - acl.len();
    fs.setxattr(d, b"user.fill", &vec![1u8; room], XattrMode::Create)
        .unwrap();
    for name in [b"system.posix_acl_default".as_slice(), b"security.capability"] {
        assert_eq!(
            fs.setxattr(d, name, &acl, XattrMode::Any).unwrap_err().errno(),
            Errno::ENOSPC
        );
    }
    fs.setxattr(d, b"user.same-size", &acl, XattrMode::Create)
        .unwrap();
    fs.removexattr(d, b"user.fill").unwrap();
    fs.setxattr(d, b"system.posix_acl_default", &acl, XattrMode::Any)
        .unwrap();
    let f = fs.create(d, b"f", 0o644, 0, 0).unwrap().ino;
    assert!(fs.getxattr(f, b"system.posix_acl_access").is_ok(), "inherited");
    fs.close().unwrap();
    assert_clean(&dev);
}
