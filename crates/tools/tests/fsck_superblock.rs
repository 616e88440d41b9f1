//! `fsck --repair` of a superblock copy damaged in a field of its own
//! (roots, depths, log head, sequence numbers, flags): the copy decodes,
//! or the older one mounts an older state, so only the values the volume
//! itself offers can put it back. Each field of the copy in use is set
//! wrong with a valid checksum; the repair must give back the copy as it
//! was, byte for byte, in one run, with every file there and the next
//! check clean.

mod image_util;

use std::sync::Arc;
use tux3::device::{Device, MemDevice};
use tux3::structures::superblock::Superblock;
use tux3::{FormatOptions, Fs, OpenOptions, ROOT_INO};
use tux3_tools::fsck::FsckReport;

const FILES: usize = 40;

/// A volume with a snapshot, then files written and some deleted after
/// it, unified, then more written (so the log is not empty) and closed.
fn volume() -> Arc<dyn Device> {
    let dev: Arc<dyn Device> = Arc::new(MemDevice::new(4096, 4096));
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap().ino;
    for i in 0..FILES {
        let f = fs.create(d, format!("f{i}").as_bytes(), 0o644, 0, 0).unwrap().ino;
        fs.write(f, 0, &vec![i as u8; 5000 + i * 100]).unwrap();
    }
    fs.snapshot_create(b"s1").unwrap();
    for i in 0..FILES / 4 {
        fs.unlink(d, format!("f{i}").as_bytes()).unwrap();
    }
    fs.unify().unwrap();
    for i in 0..FILES / 4 {
        let f = fs.create(d, format!("g{i}").as_bytes(), 0o644, 0, 0).unwrap().ino;
        fs.write(f, 0, b"after the unify").unwrap();
    }
    fs.sync().unwrap();
    fs.close().unwrap();
    dev
}

fn fsck(dev: &Arc<dyn Device>, repair: bool) -> FsckReport {
    image_util::fsck(dev, repair, true)
}

/// The names under /d with their contents, and the snapshots' names.
type State = (Vec<(Vec<u8>, Vec<u8>)>, Vec<Vec<u8>>);

fn state(dev: &Arc<dyn Device>) -> State {
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    let d = fs.lookup(ROOT_INO, b"d").unwrap().ino;
    let mut files = Vec::new();
    for e in fs.readdir(d, 0, usize::MAX).unwrap() {
        if e.name == b"." || e.name == b".." {
            continue;
        }
        let ino = e.ino;
        let size = fs.getattr(ino).unwrap().size;
        files.push((e.name.clone(), fs.read(ino, 0, size as usize).unwrap()));
    }
    files.sort();
    let snaps = fs.snapshot_list().unwrap().into_iter().map(|s| s.name).collect();
    fs.close().unwrap();
    (files, snaps)
}

/// The copy in use (the higher sequence).
fn in_use(dev: &Arc<dyn Device>) -> (u64, Vec<u8>) {
    let mut bufs = [vec![0u8; 4096], vec![0u8; 4096]];
    for (k, b) in bufs.iter_mut().enumerate() {
        dev.read(k as u64, b).unwrap();
    }
    let seq = |k: usize| Superblock::decode(&bufs[k], k as u64).unwrap().seq;
    let k = usize::from(seq(1) > seq(0));
    (k as u64, bufs[k].clone())
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// Set the 8 bytes at `at` of the copy in use to `value`, resealed.
fn damage(dev: &Arc<dyn Device>, at: usize, value: u64) {
    let (k, mut b) = in_use(dev);
    b[at..at + 8].copy_from_slice(&value.to_le_bytes());
    b[8..12].fill(0);
    let crc = crc32c::crc32c(&b);
    b[8..12].copy_from_slice(&crc.to_le_bytes());
    dev.write(k, &b).unwrap();
}

#[test]
fn each_own_field_of_the_copy_in_use_is_found_again() {
    let base = volume();
    let before = state(&base);
    let (copy, original) = in_use(&base);
    assert!(fsck(&base, false).problems.is_empty());
    let fields: &[(usize, &str)] = &[
        (48, "itable root"),
        (56, "itable depth"),
        (64, "bitmap root"),
        (72, "bitmap depth"),
        (88, "log head"),
        (96, "log sequence"),
        (136, "snapshot root"),
        (144, "snapshot depth"),
        (32, "sequence"),
        (104, "next delta"),
        (120, "unifies"),
        (152, "generation"),
    ];
    for &(at, name) in fields {
        let was = u64_at(&original, at);
        for wrong in [0, was + 1, was.wrapping_sub(1), u64::MAX] {
            if wrong == was {
                continue;
            }
            let dev: Arc<dyn Device> = Arc::new(MemDevice::new(4096, 4096));
            let mut buf = vec![0u8; 4096 * 4096];
            base.read(0, &mut buf).unwrap();
            dev.write(0, &buf).unwrap();
            damage(&dev, at, wrong);
            let first = fsck(&dev, false);
            if first.problems.is_empty() {
                // A value that changes nothing a check or a reader sees
                // (a sequence number that keeps the copy in use).
                assert_eq!(state(&dev), before, "{name} {wrong}");
                continue;
            }
            let r = fsck(&dev, true);
            assert!(r.problems.is_empty(), "{name} {wrong}: left {:?}", r.problems);
            // A next delta above the log's first commit reads as that
            // commit's number gone low: the log's repair renumbers it.
            assert!(
                r.repaired.iter().any(|l| l.contains(name))
                    || (name == "next delta" && r.repaired.iter().any(|l| l.contains("replays it as delta"))),
                "{name} {wrong}: {:?}",
                r.repaired
            );
            let again = fsck(&dev, false);
            assert!(again.problems.is_empty(), "{name} {wrong}: {:?}", again.problems);
            assert_eq!(state(&dev), before, "{name} {wrong}");
            let mut now = vec![0u8; 4096];
            dev.read(copy, &mut now).unwrap();
            // A repair whose rounds end with a unify writes the other copy
            // next; the one repaired is the original unless it was unified
            // over. (Of next delta, any value up to the log's first delta
            // checks clean and mounts the same: replay takes the larger.)
            let (k, newest) = in_use(&dev);
            if k == copy && name != "next delta" {
                assert_eq!(newest, original, "{name} {wrong}");
            }
        }
    }
}
