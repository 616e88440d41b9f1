//! The durable orphan list: a file unlinked while a handle is open (an
//! orphan) is listed in the log (`Orphan` records, re-logged at the head of
//! the log by every unify), so after a crash fsck accepts it (a note, not a
//! problem) and the next writable mount frees it. Covers: full and fast
//! fsync commits, unify, read-only opens, a clean close, space coming back,
//! and damaged lists (fsck names the inode; bad records fail the mount with
//! a clear error).

use std::sync::Arc;
use tux3::device::{Device, MemDevice};
use tux3::log::Record;
use tux3::{Errno, Error, Fs, OpenOptions, ROOT_INO};
use tux3_tools::fsck::FsckReport;

mod volume;

use volume::{append_log, fsck, open, volume};

/// Create `/name` with `len` bytes, open it and unlink it; returns its ino.
fn make_orphan(fs: &Fs, name: &[u8], len: usize) -> u64 {
    let a = fs.create(ROOT_INO, name, 0o644, 0, 0).unwrap();
    fs.write(a.ino, 0, &vec![0x5a; len]).unwrap();
    fs.open_handle(a.ino).unwrap();
    fs.unlink(ROOT_INO, name).unwrap();
    a.ino
}

fn orphan_note(r: &FsckReport, ino: u64) -> bool {
    let note = format!("inode {ino}: orphan (open and unlinked at the crash), freed at the next mount");
    r.notes.contains(&note)
}

/// After a crash that left `inos` as orphans: fsck is clean and notes each;
/// a writable mount frees them (its open writes nothing), and after its
/// close fsck is clean without notes.
fn freed_at_mount(mem: &Arc<MemDevice>, inos: &[u64]) {
    let r = fsck(mem);
    assert!(r.problems.is_empty(), "after the crash: {:?}", r.problems);
    for &ino in inos {
        assert!(orphan_note(&r, ino), "no note for orphan {ino}: {:?}", r.notes);
    }
    let c0 = mem.counters();
    let fs = open(mem);
    let c1 = mem.counters();
    assert_eq!(c1.blocks_written, c0.blocks_written, "the open wrote");
    assert_eq!(fs.stats().replayed_orphans, inos.len() as u64);
    for &ino in inos {
        assert!(
            matches!(fs.getattr(ino), Err(Error::Posix(Errno::ENOENT))),
            "orphan {ino} not freed"
        );
    }
    fs.close().unwrap();
    let r = fsck(mem);
    assert!(r.problems.is_empty(), "after the freeing mount: {:?}", r.problems);
    assert!(r.notes.is_empty(), "after the freeing mount: {:?}", r.notes);
    let fs = open(mem);
    assert_eq!(fs.stats().replayed_orphans, 0, "the list is empty now");
    drop(fs);
}

#[test]
fn orphan_committed_by_a_delta_is_freed_at_mount() {
    let mem = volume();
    let fs = open(&mem);
    let ino = make_orphan(&fs, b"f", 20_000);
    fs.sync().unwrap();
    // Still usable through its handle.
    assert_eq!(fs.read(ino, 0, 4).unwrap(), vec![0x5a; 4]);
    drop(fs); // crash with the handle open
    freed_at_mount(&mem, &[ino]);
}

#[test]
fn orphan_survives_unify_and_is_freed_at_mount() {
    let mem = volume();
    let fs = open(&mem);
    // Orphaned in a delta that a unify ends (no log record of its own).
    let a = make_orphan(&fs, b"a", 9000);
    fs.unify().unwrap();
    // Orphaned in a logged delta, then unified twice, with work between.
    let b = make_orphan(&fs, b"b", 5000);
    fs.sync().unwrap();
    fs.unify().unwrap();
    let keep = fs.create(ROOT_INO, b"keep", 0o644, 0, 0).unwrap();
    fs.write(keep.ino, 0, b"kept").unwrap();
    fs.unify().unwrap();
    // An orphan released after a unify leaves the list.
    let c = make_orphan(&fs, b"c", 100);
    fs.sync().unwrap();
    fs.unify().unwrap();
    fs.release_handle(c).unwrap();
    fs.sync().unwrap();
    drop(fs);
    freed_at_mount(&mem, &[a, b]);
    let fs = open(&mem);
    let k = fs.lookup(ROOT_INO, b"keep").unwrap();
    assert_eq!(fs.read(k.ino, 0, 10).unwrap(), b"kept");
}

#[test]
fn unify_with_orphans_after_an_empty_log() {
    // Two unifies in a row: the second starts from a log holding only the
    // orphan list; a crash before or after either must keep the list.
    let mem = volume();
    let fs = open(&mem);
    fs.unify().unwrap();
    let ino = make_orphan(&fs, b"f", 3000);
    fs.unify().unwrap();
    fs.unify().unwrap();
    drop(fs);
    freed_at_mount(&mem, &[ino]);
}

#[test]
fn orphan_committed_by_fast_fsync() {
    let mem = volume();
    let fs = open(&mem);
    let ino = make_orphan(&fs, b"f", 3000);
    // The unlink is in the open delta: the fast fsync commit logs the
    // orphan's image (link count 0) with its Orphan record.
    let (deltas, fsyncs) = (fs.stats().deltas, fs.stats().fsyncs);
    fs.fsync(ino, false).unwrap();
    assert_eq!(fs.stats().deltas, deltas, "no full commit");
    assert_eq!(fs.stats().fsyncs, fsyncs + 1, "a fast fsync commit");
    // Later writes to it go by fast fsync too.
    fs.write(ino, 3000, &[7u8; 2000]).unwrap();
    let fsyncs = fs.stats().fsyncs;
    fs.fsync(ino, false).unwrap();
    assert_eq!(fs.stats().fsyncs, fsyncs + 1, "a fast fsync commit");
    drop(fs);
    freed_at_mount(&mem, &[ino]);
}

#[test]
fn fast_fsync_of_a_durable_file_unlinked_while_open() {
    // The file's name is durable; the fast fsync commit logs the entry's
    // removal with the orphan, so replay finds no name for a link count 0.
    let mem = volume();
    let fs = open(&mem);
    let a = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap();
    fs.write(a.ino, 0, &[3u8; 5000]).unwrap();
    let keep = fs.create(ROOT_INO, b"keep", 0o644, 0, 0).unwrap();
    fs.sync().unwrap();
    fs.open_handle(a.ino).unwrap();
    fs.unlink(ROOT_INO, b"f").unwrap();
    let (deltas, fsyncs) = (fs.stats().deltas, fs.stats().fsyncs);
    fs.fsync(a.ino, false).unwrap();
    assert_eq!((fs.stats().deltas, fs.stats().fsyncs), (deltas, fsyncs + 1));
    drop(fs);
    let r = fsck(&mem);
    assert!(orphan_note(&r, a.ino), "{r:?}");
    freed_at_mount(&mem, &[a.ino]);
    let fs = open(&mem);
    assert!(matches!(
        fs.lookup(ROOT_INO, b"f"),
        Err(Error::Posix(Errno::ENOENT))
    ));
    assert_eq!(fs.lookup(ROOT_INO, b"keep").unwrap().ino, keep.ino);
}

#[test]
fn fast_fsync_of_an_orphan_after_a_unify() {
    let mem = volume();
    let fs = open(&mem);
    let ino = make_orphan(&fs, b"f", 1000);
    fs.unify().unwrap();
    fs.write(ino, 0, &[1u8; 500]).unwrap();
    let fsyncs = fs.stats().fsyncs;
    fs.fsync(ino, false).unwrap();
    assert_eq!(fs.stats().fsyncs, fsyncs + 1);
    drop(fs);
    freed_at_mount(&mem, &[ino]);
}

#[test]
fn read_only_open_leaves_orphans() {
    let mem = volume();
    let fs = open(&mem);
    let ino = make_orphan(&fs, b"f", 8000);
    fs.sync().unwrap();
    drop(fs);
    let image = mem.image();
    let ro = OpenOptions {
        read_only: true,
        ..OpenOptions::default()
    };
    let fs = Fs::open(mem.clone(), ro).unwrap();
    assert_eq!(fs.stats().replayed_orphans, 1);
    assert_eq!(fs.getattr(ino).unwrap().nlink, 0, "left alone");
    fs.close().unwrap();
    assert!(mem.image() == image, "a read-only open changed the image");
    let r = fsck(&mem);
    assert!(r.problems.is_empty(), "{:?}", r.problems);
    assert!(orphan_note(&r, ino), "{:?}", r.notes);
    freed_at_mount(&mem, &[ino]);
}

#[test]
fn freeing_the_orphan_returns_its_blocks() {
    let mem = volume();
    let fs = open(&mem);
    let keep = fs.create(ROOT_INO, b"keep", 0o644, 0, 0).unwrap();
    fs.write(keep.ino, 0, b"x").unwrap();
    fs.unify().unwrap();
    let before = fs.statfs().unwrap().blocks_free;
    let ino = make_orphan(&fs, b"big", 400 << 10);
    fs.sync().unwrap();
    let held = fs.statfs().unwrap().blocks_free;
    assert!(held + 100 <= before, "the orphan holds its 100 data blocks");
    drop(fs);
    let fs = open(&mem);
    fs.sync().unwrap();
    fs.unify().unwrap();
    assert!(matches!(fs.getattr(ino), Err(Error::Posix(Errno::ENOENT))));
    let after = fs.statfs().unwrap().blocks_free;
    assert_eq!(after, before, "the orphan's blocks are free again");
    fs.close().unwrap();
    let r = fsck(&mem);
    assert!(r.problems.is_empty() && r.notes.is_empty(), "{r:?}");
}

#[test]
fn clean_close_frees_orphans() {
    let mem = volume();
    let fs = open(&mem);
    let ino = make_orphan(&fs, b"f", 5000);
    fs.sync().unwrap();
    fs.close().unwrap(); // the handle ends with the mount
    let r = fsck(&mem);
    assert!(r.problems.is_empty() && r.notes.is_empty(), "{r:?}");
    let fs = open(&mem);
    assert_eq!(fs.stats().replayed_orphans, 0);
    assert!(fs.getattr(ino).is_err());
}

#[test]
fn released_orphan_leaves_the_list() {
    let mem = volume();
    let fs = open(&mem);
    let ino = make_orphan(&fs, b"f", 5000);
    fs.sync().unwrap();
    fs.release_handle(ino).unwrap();
    fs.sync().unwrap();
    drop(fs);
    let r = fsck(&mem);
    assert!(r.problems.is_empty() && r.notes.is_empty(), "{r:?}");
    assert_eq!(open(&mem).stats().replayed_orphans, 0);
}

#[test]
fn an_orphan_cannot_be_linked_again() {
    let mem = volume();
    let fs = open(&mem);
    let ino = make_orphan(&fs, b"f", 10);
    assert!(matches!(
        fs.link(ino, ROOT_INO, b"g"),
        Err(Error::Posix(Errno::ENOENT))
    ));
}

#[test]
fn listed_orphan_that_is_named_is_reported() {
    let mem = volume();
    let fs = open(&mem);
    let a = fs.create(ROOT_INO, b"named", 0o644, 0, 0).unwrap();
    fs.write(a.ino, 0, b"data").unwrap();
    fs.close().unwrap();
    append_log(&mem, vec![Record::Orphan { ino: a.ino }]);
    let r = fsck(&mem);
    let want = format!(
        "inode {}: on the orphan list in the log, but it has link count 1",
        a.ino
    );
    assert!(r.problems.contains(&want), "{:?}", r.problems);
    // A mount does not free a named inode the list names.
    let fs = open(&mem);
    assert_eq!(fs.read(a.ino, 0, 10).unwrap(), b"data");
}

#[test]
fn listed_orphan_that_does_not_exist_is_reported() {
    let mem = volume();
    append_log(&mem, vec![Record::Orphan { ino: 4242 }]);
    let r = fsck(&mem);
    let want = "inode 4242: on the orphan list in the log, but it is not in the inode table";
    assert!(r.problems.iter().any(|p| p == want), "{:?}", r.problems);
    let fs = open(&mem);
    fs.close().unwrap();
}

#[test]
fn unlisted_link_count_zero_is_still_an_error() {
    let mem = volume();
    let fs = open(&mem);
    let ino = make_orphan(&fs, b"f", 10);
    fs.sync().unwrap();
    drop(fs);
    // A Drop takes the inode off the list (its tree too): what is left is
    // an inode with link count 0 that nothing lists.
    append_log(&mem, vec![Record::Drop { tree: ino }]);
    let r = fsck(&mem);
    let want = format!("inode {ino}: link count 0 but still in the inode table");
    assert!(r.problems.contains(&want), "{:?}", r.problems);
    assert!(!orphan_note(&r, ino));
}

#[test]
fn bad_orphan_record_fails_the_mount_clearly() {
    for bad in [0u64, 3, 15, 1 << 48, u64::MAX] {
        let mem = volume();
        let at = append_log(&mem, vec![Record::Orphan { ino: bad }]);
        let e = match Fs::open(mem.clone(), OpenOptions::default()) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("orphan record naming inode {bad} accepted"),
        };
        assert!(
            e.contains(&format!("block {at}")) && e.contains(&format!("orphan record names inode {bad}")),
            "{e}"
        );
        let r = fsck(&mem);
        assert!(
            r.problems.iter().any(|p| p.contains("orphan record names inode")),
            "{:?}",
            r.problems
        );
    }
}

#[test]
fn crash_before_the_unify_superblock_keeps_the_old_state() {
    // The old log is empty, so the old superblock's chain starts at the
    // block the old log reserved; the unify's orphan list must not be
    // written there, or the old superblock would read it as its own log.
    let mem = volume();
    let fs = open(&mem);
    let a = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap();
    fs.write(a.ino, 0, b"still here").unwrap();
    fs.unify().unwrap();
    let before = mem.image();
    fs.open_handle(a.ino).unwrap();
    fs.unlink(ROOT_INO, b"f").unwrap();
    fs.unify().unwrap();
    drop(fs);
    // Everything of the unify landed but its superblock.
    let mut image = mem.image();
    image[..2 * 4096].copy_from_slice(&before[..2 * 4096]);
    let crashed = Arc::new(MemDevice::from_image(4096, image));
    let r = fsck(&crashed);
    assert!(r.problems.is_empty() && r.notes.is_empty(), "{r:?}");
    let fs = open(&crashed);
    assert_eq!(fs.stats().replayed_orphans, 0);
    let f = fs.lookup(ROOT_INO, b"f").unwrap();
    assert_eq!(fs.read(f.ino, 0, 20).unwrap(), b"still here");
    drop(fs);
    // And with the superblock: the orphan is listed and freed at mount.
    freed_at_mount(&mem, &[a.ino]);
}

/// `lookup_held` takes a handle on a file it finds, as `open_handle`
/// does (the unlinked file stays, readable, until the handle goes), and
/// none on a directory; cold or cached, shared or exclusive alike.
#[test]
fn a_lookup_that_holds_keeps_an_unlinked_file_until_released() {
    let mem = volume();
    let fs = open(&mem);
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap().ino;
    for name in [&b"warm"[..], b"cold"] {
        let a = fs.create(d, name, 0o644, 0, 0).unwrap();
        fs.write(a.ino, 0, name).unwrap();
    }
    fs.close().unwrap();
    let fs = open(&mem);
    // "cold": loaded by the lookup itself; "warm": in cache before it.
    let warm = fs.lookup(d, b"warm").unwrap().ino;
    for (name, ino) in [(&b"cold"[..], None), (b"warm", Some(warm))] {
        let a = fs.lookup_held(d, name).unwrap();
        assert!(ino.is_none_or(|i| i == a.ino));
        fs.unlink(d, name).unwrap();
        assert_eq!(fs.read(a.ino, 0, 8).unwrap(), name, "unlinked and held");
        assert_eq!(fs.getattr(a.ino).unwrap().nlink, 0);
        fs.release_handle(a.ino).unwrap();
        assert!(
            matches!(fs.getattr(a.ino), Err(Error::Posix(Errno::ENOENT))),
            "freed at its last handle"
        );
    }
    // A directory too: removed, it stays until its handle goes.
    let sub = fs.mkdir(d, b"sub", 0o755, 0, 0).unwrap().ino;
    assert_eq!(fs.lookup_held(d, b"sub").unwrap().ino, sub);
    fs.rmdir(d, b"sub").unwrap();
    assert_eq!(fs.getattr(sub).unwrap().nlink, 0, "removed and held");
    fs.release_handle(sub).unwrap();
    assert!(matches!(fs.getattr(sub), Err(Error::Posix(Errno::ENOENT))));
    fs.close().unwrap();
    assert!(fsck(&mem).problems.is_empty());
}

/// Remove directory `ino`, named `e` in `d`, check it stays (held), then
/// release the handle and check it is freed.
fn held_until_released_dir(fs: &Fs, d: u64, ino: u64) {
    fs.rmdir(d, b"e").unwrap();
    assert_eq!(
        fs.getattr(ino).unwrap().nlink,
        0,
        "directory {ino}: removed and held"
    );
    fs.release_handle(ino).unwrap();
    assert!(
        matches!(fs.getattr(ino), Err(Error::Posix(Errno::ENOENT))),
        "directory {ino}: freed at its last handle, so it had exactly one"
    );
}

/// Unlink every name `names` of `ino` in `d`, check the file stays (held),
/// then release the handle and check it is freed.
fn held_until_released(fs: &Fs, d: u64, ino: u64, names: &[&[u8]]) {
    for name in names {
        fs.unlink(d, name).unwrap();
    }
    assert_eq!(
        fs.getattr(ino).unwrap().nlink,
        0,
        "inode {ino}: unlinked and held"
    );
    fs.release_handle(ino).unwrap();
    assert!(
        matches!(fs.getattr(ino), Err(Error::Posix(Errno::ENOENT))),
        "inode {ino}: freed at its last handle, so it had exactly one"
    );
}

/// The other operations whose reply the kernel counts as a lookup take one
/// handle in the same step as `lookup_held` does: `mknod_held`,
/// `symlink_held`, `link_held` and `getattr_held` (cold and cached); none
/// on a directory, and the plain operations none at all.
#[test]
fn operations_that_hold_take_one_handle_on_what_they_make_or_find() {
    let mem = volume();
    let fs = open(&mem);
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap().ino;
    let f = fs.mknod_held(d, b"f", libc::S_IFREG | 0o644, 0, 0, 0).unwrap();
    held_until_released(&fs, d, f.ino, &[b"f"]);
    let s = fs.symlink_held(d, b"s", b"target", 0, 0).unwrap();
    held_until_released(&fs, d, s.ino, &[b"s"]);
    let a = fs.create(d, b"a", 0o644, 0, 0).unwrap();
    assert_eq!(fs.link_held(a.ino, d, b"b").unwrap().nlink, 2);
    held_until_released(&fs, d, a.ino, &[b"a", b"b"]);

    // The plain operations take none: the last unlink frees at once.
    let p = fs.mknod(d, b"p", libc::S_IFREG | 0o644, 0, 0, 0).unwrap();
    fs.link(p.ino, d, b"q").unwrap();
    fs.getattr(p.ino).unwrap();
    fs.unlink(d, b"p").unwrap();
    fs.unlink(d, b"q").unwrap();
    assert!(matches!(fs.getattr(p.ino), Err(Error::Posix(Errno::ENOENT))));

    // A directory too: one handle from each operation that holds.
    let sub = fs.mknod_held(d, b"sub", libc::S_IFDIR | 0o755, 0, 0, 0).unwrap();
    fs.getattr_held(sub.ino).unwrap();
    fs.rmdir(d, b"sub").unwrap();
    fs.release_handle(sub.ino).unwrap();
    assert_eq!(fs.getattr(sub.ino).unwrap().nlink, 0, "removed, one handle left");
    fs.release_handle(sub.ino).unwrap();
    assert!(matches!(fs.getattr(sub.ino), Err(Error::Posix(Errno::ENOENT))));
    let e = fs.mkdir_held(d, b"e", 0o755, 0, 0).unwrap();
    held_until_released_dir(&fs, d, e.ino);

    // getattr_held, on a file loaded by it and on one already cached.
    for name in [&b"cold"[..], b"warm"] {
        fs.create(d, name, 0o644, 0, 0).unwrap();
    }
    fs.close().unwrap();
    let fs = open(&mem);
    let warm = fs.lookup(d, b"warm").unwrap().ino;
    let cold = fs
        .readdir(d, 0, 100)
        .unwrap()
        .into_iter()
        .find(|e| e.name == b"cold")
        .unwrap()
        .ino;
    for (ino, name) in [(cold, &b"cold"[..]), (warm, b"warm")] {
        assert_eq!(fs.getattr_held(ino).unwrap().ino, ino);
        held_until_released(&fs, d, ino, &[name]);
    }
    fs.close().unwrap();
    assert!(fsck(&mem).problems.is_empty());
}
