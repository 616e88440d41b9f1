//! Access times are lazy: a read that moves one makes no commit of its
//! own, not even the periodic one (`Fs::commit_by_time`), so a tree that
//! is only read costs no inode-table writes; a sync, an unmount or the
//! next real change writes them, and they survive a remount then.

use std::sync::Arc;
use tux3::device::MemDevice;
use tux3::{AtimeRule, Attr, FormatOptions, Fs, Ino, OpenOptions, SetAttr, Timespec, ROOT_INO};

const OLD: Timespec = Timespec { sec: 1000, nsec: 0 };

/// A volume with `n` files whose access times are old, durable.
fn volume(n: usize) -> (Arc<MemDevice>, Vec<Ino>) {
    let mem = Arc::new(MemDevice::new(4096, 4096));
    Fs::format(mem.clone(), &FormatOptions::default()).unwrap();
    let fs = Fs::open(mem.clone(), OpenOptions::default()).unwrap();
    let old = SetAttr {
        atime: Some(OLD),
        ..Default::default()
    };
    let inos = (0..n)
        .map(|k| {
            let ino = fs
                .create(ROOT_INO, format!("f{k}").as_bytes(), 0o644, 0, 0)
                .unwrap()
                .ino;
            fs.write(ino, 0, b"data").unwrap();
            fs.setattr(ino, &old).unwrap();
            ino
        })
        .collect();
    fs.close().unwrap();
    (mem, inos)
}

fn atime(a: Attr) -> Timespec {
    a.atime
}

/// The access times of `inos` on `mem` as it is (opened again, as after
/// a crash or an unmount).
fn times_on_device(mem: &Arc<MemDevice>, inos: &[Ino]) -> Vec<Timespec> {
    let fs = Fs::open(mem.clone(), OpenOptions::default()).unwrap();
    let times = inos.iter().map(|&i| atime(fs.getattr(i).unwrap())).collect();
    fs.close().unwrap();
    times
}

#[test]
fn access_times_alone_wait_for_a_sync_and_then_survive() {
    let (mem, inos) = volume(50);
    let fs = Fs::open(mem.clone(), OpenOptions::default()).unwrap();
    let deltas = fs.stats().deltas;
    for &ino in &inos {
        assert!(
            fs.accessed(ino, AtimeRule::Relative).unwrap(),
            "an old access time moves"
        );
        assert_ne!(atime(fs.getattr(ino).unwrap()), OLD);
    }
    // The periodic commit leaves them in the open delta.
    assert!(!fs.commit_by_time().unwrap(), "no commit for access times alone");
    assert_eq!(fs.stats().deltas, deltas);
    // A real change makes the periodic commit write them with it.
    fs.write(inos[0], 4, b"more").unwrap();
    assert!(fs.commit_by_time().unwrap());
    assert_eq!(fs.stats().deltas, deltas + 1);
    let moved: Vec<Timespec> = inos.iter().map(|&i| atime(fs.getattr(i).unwrap())).collect();
    drop(fs); // a crash: nothing more is written
    let fs = Fs::open(mem.clone(), OpenOptions::default()).unwrap();
    for (&ino, &t) in inos.iter().zip(&moved) {
        assert_eq!(
            atime(fs.getattr(ino).unwrap()),
            t,
            "inode {ino}: written with the change"
        );
    }
    fs.close().unwrap();
}

#[test]
fn a_sync_or_an_unmount_writes_lazy_access_times() {
    for by_sync in [true, false] {
        let (mem, inos) = volume(5);
        let fs = Fs::open(mem.clone(), OpenOptions::default()).unwrap();
        for &ino in &inos {
            fs.accessed(ino, AtimeRule::Relative).unwrap();
        }
        let moved: Vec<Timespec> = inos.iter().map(|&i| atime(fs.getattr(i).unwrap())).collect();
        if by_sync {
            fs.sync().unwrap();
            drop(fs); // a crash after the sync
        } else {
            fs.close().unwrap();
        }
        assert_eq!(times_on_device(&mem, &inos), moved, "sync {by_sync}");
    }
}

/// Without a sync, a crash loses lazy access times and nothing else: the
/// volume comes back as the last commit left it.
#[test]
fn a_crash_loses_only_lazy_access_times() {
    let (mem, inos) = volume(3);
    let fs = Fs::open(mem.clone(), OpenOptions::default()).unwrap();
    fs.accessed(inos[1], AtimeRule::Relative).unwrap();
    assert!(!fs.commit_by_time().unwrap());
    drop(fs);
    let fs = Fs::open(mem.clone(), OpenOptions::default()).unwrap();
    assert_eq!(atime(fs.getattr(inos[1]).unwrap()), OLD);
    assert_eq!(fs.read(inos[1], 0, 10).unwrap(), b"data");
    fs.close().unwrap();
}

/// A read through [`Fs::read_into_accessed`] moves the access time under
/// the read's own lock, as lazily as [`Fs::accessed`]: no commit of its
/// own, written by a sync, and a read under `Never` moves nothing.
#[test]
fn a_read_moves_its_access_time_in_the_same_visit() {
    let (mem, inos) = volume(20);
    let fs = Fs::open(mem.clone(), OpenOptions::default()).unwrap();
    let deltas = fs.stats().deltas;
    let mut buf = [0u8; 16];
    for &ino in &inos {
        let n = fs.read_into_accessed(ino, 0, &mut buf, AtimeRule::Never).unwrap();
        assert_eq!(&buf[..n], b"data");
        assert_eq!(atime(fs.getattr(ino).unwrap()), OLD, "noatime: inode {ino}");
    }
    for &ino in &inos {
        let n = fs
            .read_into_accessed(ino, 0, &mut buf, AtimeRule::Relative)
            .unwrap();
        assert_eq!(&buf[..n], b"data");
        assert_ne!(atime(fs.getattr(ino).unwrap()), OLD, "relatime: inode {ino}");
    }
    // Moved now, after the last change: a second relatime read leaves it.
    let moved: Vec<Timespec> = inos.iter().map(|&i| atime(fs.getattr(i).unwrap())).collect();
    fs.read_into_accessed(inos[0], 0, &mut buf, AtimeRule::Relative)
        .unwrap();
    assert_eq!(atime(fs.getattr(inos[0]).unwrap()), moved[0]);
    assert!(!fs.commit_by_time().unwrap(), "no commit for access times alone");
    assert_eq!(fs.stats().deltas, deltas);
    fs.sync().unwrap();
    drop(fs); // a crash after the sync
    assert_eq!(times_on_device(&mem, &inos), moved, "synced");
}

/// An access time promises space once per inode and delta: the first
/// moves it into the open delta (its record is written at the commit),
/// later ones, and one on an inode a real change put there, cost nothing
/// more.
#[test]
fn an_inode_in_the_open_delta_takes_no_more_space_for_its_access_time() {
    let (mem, inos) = volume(3);
    let fs = Fs::open(mem.clone(), OpenOptions::default()).unwrap();
    let free = || fs.statfs().unwrap().blocks_free;
    let mut buf = [0u8; 16];
    let before = free();
    fs.read_into_accessed(inos[0], 0, &mut buf, AtimeRule::Strict)
        .unwrap();
    let first = free();
    assert!(
        first < before,
        "the first access time of the delta promises space"
    );
    for _ in 0..5 {
        fs.read_into_accessed(inos[0], 0, &mut buf, AtimeRule::Strict)
            .unwrap();
        fs.accessed(inos[0], AtimeRule::Strict).unwrap();
    }
    assert_eq!(free(), first, "later ones in the same delta promise nothing");
    // A real change first: the access time after it adds nothing.
    fs.write(inos[1], 4, b"more").unwrap();
    let written = free();
    fs.read_into_accessed(inos[1], 0, &mut buf, AtimeRule::Strict)
        .unwrap();
    assert_eq!(free(), written);
    fs.close().unwrap();
}

/// Each inode's first access time in a delta promises a change's space:
/// once they have filled the room the open delta may take, the next ones
/// stay, and the periodic commit takes the delta (with the access times
/// it holds), after which they move again. Without that, a read-only load
/// would stop moving access times until the next sync or real change.
#[test]
fn access_times_that_fill_the_delta_go_with_the_periodic_commit() {
    let (mem, inos) = volume(600);
    let fs = Fs::open(mem.clone(), OpenOptions::default()).unwrap();
    let deltas = fs.stats().deltas;
    let first: Vec<bool> = inos
        .iter()
        .map(|&i| fs.accessed(i, AtimeRule::Relative).unwrap())
        .collect();
    let moved = first.iter().filter(|&&m| m).count();
    assert!(moved > 0 && moved < inos.len(), "{moved} of {} moved", inos.len());
    assert!(
        fs.commit_by_time().unwrap(),
        "the periodic commit takes a full delta"
    );
    assert_eq!(fs.stats().deltas, deltas + 1);
    let mut rounds = 0;
    while inos.iter().any(|&i| atime(fs.getattr(i).unwrap()) == OLD) {
        rounds += 1;
        assert!(
            rounds <= inos.len().div_ceil(moved),
            "access times stopped moving"
        );
        for &ino in &inos {
            fs.accessed(ino, AtimeRule::Relative).unwrap();
        }
        fs.commit_by_time().unwrap();
    }
    // Once all have moved and are written, nothing is left to commit.
    assert!(!fs.commit_by_time().unwrap());
    fs.close().unwrap();
}
