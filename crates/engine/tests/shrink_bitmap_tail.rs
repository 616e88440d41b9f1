//! Scenario: a shrink whose tail holds nothing but bitmap blocks. A full
//! volume has the files of one group past the new end deleted and
//! committed, then one file in each group above it: the unify that
//! follows moves the changed bitmap blocks to the only room there is,
//! that group, so it holds its own bitmap block and those of the groups
//! above it. The shrink moves them all below the new end in one unify:
//! the group's own block first (it is still in use then), then the others,
//! whose old copies were the group's last blocks in use — the group is
//! empty once the unify is done, but its bitmap block was written before.
//! The bitmap file must map nothing past its new end after the shrink
//! (debug builds assert it at every unify): the volume opens again, reads
//! as written, and fsck is clean.

use std::sync::Arc;
use tux3::device::{Device, MemDevice};
use tux3::{Errno, FormatOptions, Fs, OpenOptions, ROOT_INO};

const BS: u32 = 1024;
const BLOCKS: u64 = 65_536;
const KIB: usize = 32;
/// Bits a 1 KiB bitmap block holds (its 32-byte header aside).
const PER_GROUP: u64 = (BS as u64 - 32) * 8;

fn content(i: usize) -> Vec<u8> {
    (0..KIB * 1024)
        .map(|b| (b / 1024) as u8 ^ (i as u8).wrapping_mul(29))
        .collect()
}

#[test]
fn a_group_emptied_by_moving_bitmap_blocks_out_of_it_is_left_unmapped() {
    let dev: Arc<dyn Device> = Arc::new(MemDevice::new(BS, BLOCKS));
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    // Full: files until ENOSPC, each committed.
    let mut files = Vec::new();
    loop {
        let i = files.len();
        let name = format!("f{i}");
        let ino = fs.create(ROOT_INO, name.as_bytes(), 0o644, 0, 0).unwrap().ino;
        match fs.write(ino, 0, &content(i)).and_then(|_| fs.sync()) {
            Ok(()) => files.push(ino),
            Err(e) if e.errno() == Errno::ENOSPC => {
                fs.unlink(ROOT_INO, name.as_bytes()).unwrap();
                fs.sync().unwrap();
                break;
            }
            Err(e) => panic!("{e}"),
        }
    }
    let new_end = BLOCKS / 2;
    // The first group wholly past the new end.
    let tail = new_end.div_ceil(PER_GROUP);
    let group_of = |ino| {
        let runs = fs.data_runs(ino, 0, (KIB * 1024 / BS as usize) as u64).unwrap();
        runs.first().map(|r| r.pblock / PER_GROUP)
    };
    let mut gone = vec![false; files.len()];
    for (i, &ino) in files.iter().enumerate() {
        if group_of(ino) == Some(tail) {
            fs.unlink(ROOT_INO, format!("f{i}").as_bytes()).unwrap();
            gone[i] = true;
        }
    }
    assert!(gone.iter().any(|&g| g), "no file lies in group {tail}");
    fs.sync().unwrap();
    // One file in each group above: their bitmap blocks change too, and
    // their frees stay pinned through the unify.
    let mut above = std::collections::BTreeSet::new();
    for (i, &ino) in files.iter().enumerate() {
        if gone[i] {
            continue;
        }
        if let Some(g) = group_of(ino).filter(|&g| g > tail) {
            if above.insert(g) {
                fs.unlink(ROOT_INO, format!("f{i}").as_bytes()).unwrap();
                gone[i] = true;
            }
        }
    }
    fs.unify().unwrap();
    // Room below the new end for what lies above it.
    for (i, &ino) in files.iter().enumerate() {
        if !gone[i] && i % 4 != 0 && group_of(ino).is_some_and(|g| g < tail) {
            fs.unlink(ROOT_INO, format!("f{i}").as_bytes()).unwrap();
            gone[i] = true;
        }
    }
    fs.sync().unwrap();
    let kept: Vec<usize> = (0..files.len()).filter(|&i| !gone[i]).collect();
    let live_blocks = kept.len() as u64 * (KIB * 1024 / BS as usize) as u64;
    let to = new_end.max(live_blocks * 12 / 10);
    fs.resize(to).unwrap();
    fs.close().unwrap();
    let fs = Fs::open(dev.clone(), OpenOptions::default()).expect("the volume opens after the shrink");
    for &i in &kept {
        assert_eq!(fs.read(files[i], 0, KIB * 1024).unwrap(), content(i), "file {i}");
    }
    fs.close().unwrap();
    let r = tux3_tools::fsck::check(dev, &Default::default()).unwrap();
    assert!(r.problems.is_empty(), "fsck: {:?}", r.problems);
}
