//! Runs of freed inodes in the log (`DropRun`, docs/FORMAT.md 8.2): after
//! any order of unlinks (some of files a handle keeps open, released
//! before the sync), a crash and replay leave exactly the files not
//! unlinked, with fsck clean; and unlinks of consecutive inodes in a row
//! are logged as runs, not a record each.

mod volume;

use proptest::prelude::*;
use std::sync::Arc;
use tux3::device::{Device, MemDevice};
use tux3::log::{read_chain, Record};
use tux3::structures::superblock::Superblock;
use tux3::{Fs, ROOT_INO};
use volume::{append_log, fsck, open, volume};

const FILES: u32 = 48;

fn name(i: u32) -> Vec<u8> {
    format!("f{i}").into_bytes()
}

/// The log's records now (since the last unify).
fn logged(mem: &Arc<MemDevice>) -> Vec<Record> {
    let dev: Arc<dyn Device> = mem.clone();
    let sb = Superblock::load(dev.as_ref()).unwrap();
    let chain = read_chain(dev.as_ref(), sb.log_start()).unwrap();
    chain.deltas.into_iter().flat_map(|d| d.records).collect()
}

/// `FILES` files of one block each in the root, made in order and unified
/// (they are in the base, not the log).
fn made() -> (Arc<MemDevice>, Fs, Vec<u64>) {
    let mem = volume();
    let fs = open(&mem);
    let inos = (0..FILES)
        .map(|i| {
            let a = fs.create(ROOT_INO, &name(i), 0o644, 0, 0).unwrap();
            fs.write(a.ino, 0, &[i as u8; 100]).unwrap();
            a.ino
        })
        .collect();
    fs.sync().unwrap();
    fs.unify().unwrap();
    (mem, fs, inos)
}

/// Crash (no close after the sync), replay, and check what is left.
fn replayed_holds(mem: &Arc<MemDevice>, fs: Fs, gone: &[u32]) {
    fs.sync().unwrap();
    drop(fs);
    let fs = open(mem);
    for i in 0..FILES {
        let found = fs.lookup(ROOT_INO, &name(i));
        assert_eq!(found.is_ok(), !gone.contains(&i), "file {i} after replay");
        if let Ok(a) = found {
            assert_eq!(fs.read(a.ino, 0, 100).unwrap(), vec![i as u8; 100]);
        }
    }
    fs.close().unwrap();
    let r = fsck(mem);
    assert!(r.problems.is_empty(), "{:?}", r.problems);
}

#[test]
fn unlinks_in_a_row_are_one_record() {
    let (mem, fs, inos) = made();
    // Ascending, then descending below them: one run.
    let order: Vec<u32> = (20..40).chain((10..20).rev()).collect();
    for &i in &order {
        fs.unlink(ROOT_INO, &name(i)).unwrap();
    }
    fs.sync().unwrap();
    let runs: Vec<Record> = logged(&mem)
        .into_iter()
        .filter(|r| r.dropped().is_some())
        .collect();
    assert_eq!(
        runs,
        vec![Record::DropRun {
            first: inos[10],
            count: 30
        }],
        "the drops of 30 consecutive inodes"
    );
    replayed_holds(&mem, fs, &order);
}

/// A hostile run of four billion trees: replay keeps it as a range, so a
/// mount and fsck cost what a run of two does (one entry per tree would
/// not finish), and the files it names are left as the inode table has
/// them.
#[test]
fn a_hostile_run_is_a_range_not_an_entry_per_tree() {
    let (mem, fs, inos) = made();
    fs.close().unwrap();
    append_log(
        &mem,
        vec![Record::DropRun {
            first: inos[0],
            count: u32::MAX,
        }],
    );
    // (The appended block's reserved successor is the helper's own
    // business: it may land on a block the volume uses.)
    let r = fsck(&mem);
    let other: Vec<&String> = r
        .problems
        .iter()
        .filter(|p| !p.contains("reserved next log block"))
        .collect();
    assert!(other.is_empty(), "{other:?}");
    let fs = open(&mem);
    for i in 0..FILES {
        let a = fs.lookup(ROOT_INO, &name(i)).unwrap();
        assert_eq!(fs.read(a.ino, 0, 100).unwrap(), vec![i as u8; 100]);
    }
    fs.close().unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Any unlinks, in any order, some of open files released later.
    #[test]
    fn replay_forgets_exactly_the_unlinked(
        picks in proptest::collection::vec((0..FILES, any::<bool>()), 0..40)
    ) {
        let (mem, fs, inos) = made();
        let mut gone = Vec::new();
        let mut open_now = Vec::new();
        for (i, hold) in picks {
            if gone.contains(&i) {
                continue;
            }
            let ino = inos[i as usize];
            if hold {
                fs.open_handle(ino).unwrap();
                open_now.push(ino);
            }
            fs.unlink(ROOT_INO, &name(i)).unwrap();
            gone.push(i);
        }
        for ino in open_now {
            fs.release_handle(ino).unwrap();
        }
        replayed_holds(&mem, fs, &gone);
    }
}
