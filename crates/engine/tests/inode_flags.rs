//! Inode flags through the engine API: kept across a remount (inode
//! attribute 11), unknown ones refused, immutable and append-only inodes
//! refuse what Linux refuses on both the shared and the exclusive paths,
//! noatime keeps reads from moving the access time, clearing them lets
//! changes through again, and fsck is clean.

use std::sync::Arc;
use tux3::device::MemDevice;
use tux3::types::flags;
use tux3::{
    AtimeRule, Errno, Error, FormatOptions, Fs, OpenOptions, RenameFlags, SetAttr, Timespec, XattrMode,
    ROOT_INO,
};

fn eperm<T: std::fmt::Debug>(what: &str, r: tux3::Result<T>) {
    assert!(
        matches!(r, Err(Error::Posix(Errno::EPERM))),
        "{what}: {r:?}, want EPERM"
    );
}

#[test]
fn flags_are_kept_and_immutable_and_append_only_refuse_changes() {
    let mem = Arc::new(MemDevice::new(4096, 1024));
    Fs::format(mem.clone(), &FormatOptions::default()).unwrap();
    let fs = Fs::open(mem.clone(), OpenOptions::default()).unwrap();
    let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap().ino;
    let a = fs.create(ROOT_INO, b"a", 0o644, 0, 0).unwrap().ino;
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap().ino;
    fs.write(f, 0, b"fixed").unwrap();
    fs.write(a, 0, b"one").unwrap();
    fs.create(d, b"in", 0o644, 0, 0).unwrap();
    assert!(matches!(
        fs.set_flags(f, 0x4000_0000),
        Err(Error::Posix(Errno::ENOTSUP))
    ));
    fs.set_flags(f, flags::IMMUTABLE | flags::NODUMP).unwrap();
    fs.set_flags(a, flags::APPEND | flags::NOATIME).unwrap();
    fs.set_flags(d, flags::IMMUTABLE).unwrap();
    fs.close().unwrap();

    let fs = Fs::open(mem.clone(), OpenOptions::default()).unwrap();
    assert_eq!(fs.flags(f).unwrap(), flags::IMMUTABLE | flags::NODUMP);
    assert_eq!(fs.flags(a).unwrap(), flags::APPEND | flags::NOATIME);
    eperm("write immutable", fs.write(f, 5, b"x"));
    eperm(
        "chmod immutable",
        fs.setattr(
            f,
            &SetAttr {
                mode: Some(0o600),
                ..Default::default()
            },
        ),
    );
    eperm(
        "truncate immutable",
        fs.setattr(
            f,
            &SetAttr {
                size: Some(0),
                ..Default::default()
            },
        ),
    );
    eperm(
        "setxattr immutable",
        fs.setxattr(f, b"user.x", b"1", XattrMode::Any),
    );
    eperm("unlink immutable", fs.unlink(ROOT_INO, b"f"));
    eperm(
        "rename immutable",
        fs.rename(ROOT_INO, b"f", ROOT_INO, b"g", RenameFlags::default()),
    );
    eperm("link immutable", fs.link(f, ROOT_INO, b"f2"));
    eperm("create in immutable dir", fs.create(d, b"new", 0o644, 0, 0));
    eperm("unlink in immutable dir", fs.unlink(d, b"in"));
    eperm(
        "rename over an immutable file",
        fs.rename(ROOT_INO, b"a", ROOT_INO, b"f", RenameFlags::default()),
    );
    eperm("write inside append-only", fs.write(a, 0, b"x"));
    fs.write(a, 3, b"two").unwrap();
    eperm("unlink append-only", fs.unlink(ROOT_INO, b"a"));
    // noatime: a read leaves the access time.
    let old = Timespec { sec: 1000, nsec: 0 };
    fs.set_flags(a, flags::NOATIME).unwrap();
    fs.setattr(
        a,
        &SetAttr {
            atime: Some(old),
            mtime: Some(Timespec { sec: 2000, nsec: 0 }),
            ..Default::default()
        },
    )
    .unwrap();
    assert!(!fs.accessed(a, AtimeRule::Strict).unwrap());
    assert_eq!(fs.getattr(a).unwrap().atime, old);
    fs.set_flags(a, 0).unwrap();
    assert!(fs.accessed(a, AtimeRule::Relative).unwrap());
    // Cleared, changes go through.
    fs.set_flags(f, 0).unwrap();
    fs.set_flags(d, 0).unwrap();
    fs.unlink(d, b"in").unwrap();
    fs.unlink(ROOT_INO, b"f").unwrap();
    let mut buf = [0u8; 6];
    assert_eq!(fs.read_into(a, 0, &mut buf).unwrap(), 6);
    assert_eq!(&buf, b"onetwo");
    fs.close().unwrap();
    let report = tux3_tools::fsck::check(mem.clone(), &Default::default()).unwrap();
    assert!(report.problems.is_empty(), "{report:?}");
}

/// The sync flag makes a file's writes and attribute changes durable
/// before they return, and dirsync (or sync on a directory) its entry
/// changes: each survives a crash right after it; without the flags the
/// same changes are lost (no commit ran).
#[test]
fn sync_and_dirsync_make_changes_durable_before_they_return() {
    for flagged in [true, false] {
        let mem = Arc::new(MemDevice::new(4096, 1024));
        Fs::format(mem.clone(), &FormatOptions::default()).unwrap();
        let fs = Fs::open(mem.clone(), OpenOptions::default()).unwrap();
        let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap().ino;
        let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap().ino;
        let s = fs.mkdir(ROOT_INO, b"s", 0o755, 0, 0).unwrap().ino;
        fs.create(ROOT_INO, b"moving", 0o644, 0, 0).unwrap();
        if flagged {
            fs.set_flags(f, flags::SYNC).unwrap();
            fs.set_flags(d, flags::DIRSYNC).unwrap();
            fs.set_flags(s, flags::SYNC).unwrap();
        }
        fs.sync().unwrap();
        fs.write(f, 0, b"synchronous").unwrap();
        fs.setattr(
            f,
            &SetAttr {
                mode: Some(0o600),
                ..Default::default()
            },
        )
        .unwrap();
        fs.create(d, b"new", 0o644, 0, 0).unwrap();
        fs.rename(ROOT_INO, b"moving", s, b"moved", RenameFlags::default())
            .unwrap();
        drop(fs); // a crash: no commit after these
        let fs = Fs::open(mem.clone(), OpenOptions::default()).unwrap();
        let data = fs.read(f, 0, 100).unwrap();
        let mode = fs.getattr(f).unwrap().mode & 0o777;
        let made = fs.lookup(d, b"new").is_ok();
        let moved = fs.lookup(s, b"moved").is_ok() && fs.lookup(ROOT_INO, b"moving").is_err();
        if flagged {
            assert_eq!(data, b"synchronous");
            assert_eq!(mode, 0o600);
            assert!(made && moved, "made {made}, moved {moved}");
        } else {
            assert!(data.is_empty() && mode == 0o644 && !made && !moved);
        }
        fs.close().unwrap();
    }
}
