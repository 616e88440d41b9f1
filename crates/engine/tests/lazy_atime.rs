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
        let fs = Fs::open(mem.clone(), OpenOptions::default()).unwrap();
        for (&ino, &t) in inos.iter().zip(&moved) {
            assert_eq!(atime(fs.getattr(ino).unwrap()), t, "sync {by_sync}: inode {ino}");
        }
        fs.close().unwrap();
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
