//! Files made without a name (`Fs::tmpfile`, for `O_TMPFILE`) and renames
//! that leave a whiteout (`RenameFlags::whiteout`, for RENAME_WHITEOUT).
//!
//! A tmpfile is an orphan from its start: link count 0, in no directory,
//! held by its maker; it goes at its last handle, and after a crash the
//! next writable open frees it (fsck notes it, as an unlinked open file).
//! A link names it once; from then on it is an ordinary file, which a
//! crash keeps once the link is committed — by a delta or by an fsync of
//! the file — and fsck finds nothing wrong (the orphan list lets go of it
//! durably). A file unlinked while open cannot be linked again.
//!
//! A rename with a whiteout moves the file and puts a character device 0/0
//! owned by the caller at the old name, in one step.

use std::sync::Arc;
use tux3::device::MemDevice;
use tux3::{Errno, Error, FileType, Fs, RenameFlags, ROOT_INO};

mod volume;

use volume::{fsck, open, volume};

fn clean(mem: &Arc<MemDevice>, when: &str) {
    let r = fsck(mem);
    assert!(r.problems.is_empty() && r.notes.is_empty(), "{when}: {r:?}");
}

fn errno<T: std::fmt::Debug>(r: tux3::Result<T>) -> Errno {
    match r {
        Err(Error::Posix(e)) => e,
        other => panic!("{other:?}: want an errno"),
    }
}

/// The names in the root directory, in its order.
fn names(fs: &Fs) -> Vec<Vec<u8>> {
    let entries = fs.readdir(ROOT_INO, 0, 100).unwrap();
    entries.into_iter().map(|e| e.name).collect()
}

#[test]
fn a_tmpfile_is_unnamed_and_goes_at_its_last_handle() {
    let mem = volume();
    let fs = open(&mem);
    let t = fs.tmpfile(ROOT_INO, 0o640, 5, 6).unwrap();
    assert_eq!(
        (t.kind, t.nlink, t.mode & 0o7777, t.uid, t.gid),
        (FileType::Regular, 0, 0o640, 5, 6)
    );
    assert_ne!(t.btime, tux3::Timespec::default(), "born now");
    fs.write(t.ino, 0, b"scratch").unwrap();
    assert_eq!(fs.read(t.ino, 0, 100).unwrap(), b"scratch");
    assert!(names(&fs).is_empty(), "no name");
    fs.sync().unwrap();
    assert_eq!(fs.getattr(t.ino).unwrap().nlink, 0);
    fs.release_handle(t.ino).unwrap();
    assert_eq!(errno(fs.getattr(t.ino)), Errno::ENOENT);
    fs.close().unwrap();
    clean(&mem, "after the close");
}

#[test]
fn a_tmpfile_never_linked_is_gone_after_a_crash() {
    for fsync in [false, true] {
        let mem = volume();
        let fs = open(&mem);
        let t = fs.tmpfile(ROOT_INO, 0o600, 0, 0).unwrap();
        fs.write(t.ino, 0, &[7; 10_000]).unwrap();
        if fsync {
            fs.fsync(t.ino, false).unwrap();
        } else {
            fs.sync().unwrap();
        }
        drop(fs); // a crash with the handle held
        let r = fsck(&mem);
        assert!(r.problems.is_empty(), "after the crash: {:?}", r.problems);
        let note = format!(
            "inode {}: orphan (open and unlinked at the crash), freed at the next mount",
            t.ino
        );
        assert!(r.notes.contains(&note), "fsync {fsync}: {:?}", r.notes);
        let fs = open(&mem);
        assert_eq!(fs.stats().replayed_orphans, 1);
        assert_eq!(errno(fs.getattr(t.ino)), Errno::ENOENT);
        assert!(names(&fs).is_empty());
        fs.close().unwrap();
        clean(&mem, "after the mount that freed it");
    }
}

#[test]
fn a_linked_tmpfile_survives_a_crash_once_committed() {
    // The link committed by a delta, or by an fsync of the file; the
    // orphan record made durable before the link, or not.
    for (synced_before, fsync_after) in [(true, false), (true, true), (false, false), (false, true)] {
        let mem = volume();
        let fs = open(&mem);
        let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap();
        let t = fs.tmpfile(d.ino, 0o644, 0, 0).unwrap();
        fs.write(t.ino, 0, b"kept").unwrap();
        if synced_before {
            fs.sync().unwrap();
        }
        let a = fs.link(t.ino, ROOT_INO, b"named").unwrap();
        assert_eq!((a.ino, a.nlink), (t.ino, 1));
        if fsync_after {
            fs.fsync(t.ino, false).unwrap();
        } else {
            fs.sync().unwrap();
        }
        drop(fs); // a crash with the maker's handle still held
        let when = format!("crash (synced before {synced_before}, fsync after {fsync_after})");
        clean(&mem, &when);
        let fs = open(&mem);
        assert_eq!(fs.stats().replayed_orphans, 0, "{when}");
        let got = fs.lookup(ROOT_INO, b"named").unwrap();
        assert_eq!((got.ino, got.nlink, got.size), (t.ino, 1, 4), "{when}");
        assert_eq!(fs.read(t.ino, 0, 10).unwrap(), b"kept");
        fs.close().unwrap();
        clean(&mem, &when);
    }
}

#[test]
fn a_tmpfile_gets_a_name_once_and_an_unlinked_file_none() {
    let mem = volume();
    let fs = open(&mem);
    let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap();
    fs.open_handle(f.ino).unwrap();
    fs.unlink(ROOT_INO, b"f").unwrap();
    assert_eq!(errno(fs.link(f.ino, ROOT_INO, b"back")), Errno::ENOENT);

    let t = fs.tmpfile(ROOT_INO, 0o600, 0, 0).unwrap();
    fs.link(t.ino, ROOT_INO, b"first").unwrap();
    assert_eq!(errno(fs.link(t.ino, ROOT_INO, b"first")), Errno::EEXIST);
    fs.link(t.ino, ROOT_INO, b"second").unwrap();
    assert_eq!(fs.getattr(t.ino).unwrap().nlink, 2);
    fs.unlink(ROOT_INO, b"first").unwrap();
    fs.unlink(ROOT_INO, b"second").unwrap();
    assert_eq!(fs.getattr(t.ino).unwrap().nlink, 0, "held: an orphan");
    assert_eq!(errno(fs.link(t.ino, ROOT_INO, b"again")), Errno::ENOENT);
    fs.release_handle(t.ino).unwrap();
    fs.release_handle(f.ino).unwrap();
    assert_eq!(errno(fs.tmpfile(f.ino, 0o600, 0, 0)), Errno::ENOENT);
    let file = fs.create(ROOT_INO, b"plain", 0o644, 0, 0).unwrap();
    assert_eq!(errno(fs.tmpfile(file.ino, 0o600, 0, 0)), Errno::ENOTDIR);
    fs.close().unwrap();
    clean(&mem, "after the close");
}

#[test]
fn a_rename_with_a_whiteout_leaves_one_at_the_old_name() {
    let mem = volume();
    let fs = open(&mem);
    let up = fs.mkdir(ROOT_INO, b"up", 0o755, 0, 0).unwrap();
    let f = fs.create(up.ino, b"f", 0o644, 0, 0).unwrap();
    let d = fs.mkdir(up.ino, b"dir", 0o755, 0, 0).unwrap();
    let wh = RenameFlags::from_bits(4).unwrap().whiteout_owned_by(7, 8);
    fs.rename(up.ino, b"f", ROOT_INO, b"moved", wh).unwrap();
    fs.rename(up.ino, b"dir", up.ino, b"dir2", wh).unwrap();
    // Not with an exchange; over an existing name, as without it.
    let x = RenameFlags::from_bits(2 | 4).unwrap();
    assert_eq!(
        errno(fs.rename(ROOT_INO, b"moved", up.ino, b"dir2", x)),
        Errno::EINVAL
    );
    let check = |fs: &Fs| {
        for name in [&b"f"[..], b"dir"] {
            let w = fs.lookup(up.ino, name).unwrap();
            assert_eq!(
                (w.kind, w.rdev, w.mode & 0o7777, w.uid, w.gid, w.nlink),
                (FileType::CharDevice, 0, 0, 7, 8, 1),
                "whiteout at {}",
                String::from_utf8_lossy(name)
            );
        }
        assert_eq!(fs.lookup(ROOT_INO, b"moved").unwrap().ino, f.ino);
        assert_eq!(fs.lookup(up.ino, b"dir2").unwrap().ino, d.ino);
        assert_eq!(fs.getattr(up.ino).unwrap().nlink, 3, "one subdirectory");
    };
    check(&fs);
    fs.sync().unwrap();
    drop(fs); // a crash: the renames and their whiteouts are durable
    clean(&mem, "after the crash");
    let fs = open(&mem);
    check(&fs);
    fs.close().unwrap();
    clean(&mem, "after the close");
}
