//! A directory removed while a handle holds it (an open directory, or one
//! the kernel knows through the mount) is an orphan, as an unlinked open
//! file is: it keeps answering through the handle — attributes (link count
//! 0), setattr, extended attributes, an empty listing — and nothing can be
//! made or moved into it; its last handle frees it. Removed by rmdir, by a
//! rename over it (from its own directory and from another), and after an
//! exchange moved it. Held at a crash, it is on the durable orphan list:
//! fsck accepts it and the next writable open frees it.

use tux3::{Errno, Error, FileType, Fs, Ino, RenameFlags, SetAttr, Timespec, XattrMode, ROOT_INO};

mod volume;

use volume::{fsck, open, volume};

fn enoent<T: std::fmt::Debug>(what: &str, r: tux3::Result<T>) {
    assert!(
        matches!(r, Err(Error::Posix(Errno::ENOENT))),
        "{what}: {r:?}, want ENOENT"
    );
}

/// Make directory `parent/name` with the attribute `user.k` and a handle.
fn held_dir(fs: &Fs, parent: Ino, name: &[u8]) -> Ino {
    let d = fs.mkdir(parent, name, 0o755, 0, 0).unwrap();
    fs.setxattr(d.ino, b"user.k", b"v", XattrMode::Any).unwrap();
    fs.open_handle(d.ino).unwrap();
    d.ino
}

/// `ino`, removed while held, still answers through its handle; nothing
/// is made or moved into it.
fn answers_while_held(fs: &Fs, ino: Ino) {
    let a = fs.getattr(ino).unwrap();
    assert_eq!((a.kind, a.nlink), (FileType::Directory, 0), "{a:?}");
    let t = Timespec {
        sec: 1_000_000,
        nsec: 5,
    };
    let set = SetAttr {
        mode: Some(0o701),
        uid: Some(4321),
        gid: Some(8765),
        mtime: Some(t),
        ..SetAttr::default()
    };
    let a = fs.setattr(ino, &set).unwrap();
    assert_eq!(
        (a.mode & 0o7777, a.uid, a.gid, a.mtime, a.nlink),
        (0o701, 4321, 8765, t, 0)
    );
    assert_eq!(fs.getxattr(ino, b"user.k").unwrap(), b"v");
    fs.setxattr(ino, b"user.k", b"w", XattrMode::Replace).unwrap();
    assert_eq!(fs.getxattr(ino, b"user.k").unwrap(), b"w");
    fs.setxattr(ino, b"user.k", b"v", XattrMode::Replace).unwrap();
    assert!(fs.readdir(ino, 0, 100).unwrap().is_empty());
    enoent("mkdir in it", fs.mkdir(ino, b"sub", 0o755, 0, 0));
    enoent("create in it", fs.create(ino, b"f", 0o644, 0, 0));
    enoent("symlink in it", fs.symlink(ino, b"l", b"x", 0, 0));
    let f = fs.create(ROOT_INO, b"outside", 0o644, 0, 0).unwrap();
    enoent("link into it", fs.link(f.ino, ino, b"f"));
    enoent(
        "rename into it",
        fs.rename(ROOT_INO, b"outside", ino, b"f", RenameFlags::default()),
    );
    fs.unlink(ROOT_INO, b"outside").unwrap();
}

/// Each way a directory loses its last name; returns the held directories.
fn remove_every_way(fs: &Fs) -> Vec<Ino> {
    let by_rmdir = held_dir(fs, ROOT_INO, b"a");
    fs.rmdir(ROOT_INO, b"a").unwrap();

    let replaced = held_dir(fs, ROOT_INO, b"b");
    fs.mkdir(ROOT_INO, b"b2", 0o755, 0, 0).unwrap();
    fs.rename(ROOT_INO, b"b2", ROOT_INO, b"b", RenameFlags::default())
        .unwrap();

    let p = fs.mkdir(ROOT_INO, b"p", 0o755, 0, 0).unwrap();
    let replaced_from_afar = held_dir(fs, ROOT_INO, b"c");
    fs.mkdir(p.ino, b"c2", 0o755, 0, 0).unwrap();
    fs.rename(p.ino, b"c2", ROOT_INO, b"c", RenameFlags::default())
        .unwrap();

    // An exchange moves it (still named, link count 2); rmdir then
    // removes it under its new name.
    let exchanged = held_dir(fs, ROOT_INO, b"d");
    fs.mkdir(p.ino, b"e", 0o755, 0, 0).unwrap();
    let swap = RenameFlags {
        exchange: true,
        ..RenameFlags::default()
    };
    fs.rename(ROOT_INO, b"d", p.ino, b"e", swap).unwrap();
    assert_eq!(fs.getattr(exchanged).unwrap().nlink, 2);
    assert_eq!(fs.lookup(p.ino, b"e").unwrap().ino, exchanged);
    fs.rmdir(p.ino, b"e").unwrap();

    let held = vec![by_rmdir, replaced, replaced_from_afar, exchanged];
    // The names left: b and c (the directories renamed over them), d
    // (exchanged in) and p.
    let mut names: Vec<Vec<u8>> = fs
        .readdir(ROOT_INO, 0, 100)
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    names.sort();
    assert_eq!(names, [&b"b"[..], b"c", b"d", b"p"]);
    assert!(fs.readdir(p.ino, 0, 100).unwrap().is_empty());
    held
}

#[test]
fn a_removed_directory_answers_while_held_and_goes_with_its_last_handle() {
    let mem = volume();
    let fs = open(&mem);
    let held = remove_every_way(&fs);
    for &ino in &held {
        answers_while_held(&fs, ino);
    }
    // One nobody holds goes at once.
    let d = fs.mkdir(ROOT_INO, b"unheld", 0o755, 0, 0).unwrap();
    fs.rmdir(ROOT_INO, b"unheld").unwrap();
    enoent("getattr of a removed directory nobody held", fs.getattr(d.ino));
    fs.sync().unwrap();
    for &ino in &held {
        answers_while_held(&fs, ino);
        fs.release_handle(ino).unwrap();
        enoent("getattr after the last handle", fs.getattr(ino));
    }
    fs.close().unwrap();
    let r = fsck(&mem);
    assert!(r.problems.is_empty() && r.notes.is_empty(), "{r:?}");
}

#[test]
fn a_removed_directory_held_at_a_crash_is_freed_at_the_next_mount() {
    let mem = volume();
    let fs = open(&mem);
    let held = remove_every_way(&fs);
    fs.sync().unwrap();
    drop(fs); // a crash with the handles held
    let r = fsck(&mem);
    assert!(r.problems.is_empty(), "after the crash: {:?}", r.problems);
    for &ino in &held {
        let note = format!("inode {ino}: orphan (open and unlinked at the crash), freed at the next mount");
        assert!(r.notes.contains(&note), "no note for {ino}: {:?}", r.notes);
    }
    let fs = open(&mem);
    assert_eq!(fs.stats().replayed_orphans, held.len() as u64);
    for &ino in &held {
        enoent("getattr after the mount", fs.getattr(ino));
    }
    fs.close().unwrap();
    let r = fsck(&mem);
    assert!(r.problems.is_empty() && r.notes.is_empty(), "{r:?}");
}
