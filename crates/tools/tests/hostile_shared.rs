//! Scenario: hostile shared-extent tables. A volume with clones, unified
//! (the table's runs in the snapshot table's tree) and closed, has a run
//! rewritten in place, resealed: one past the end of the volume, two that
//! overlap, one with a single reference — a mount refuses each with an
//! error naming the run, and fsck reports it, no panic; a run whose count
//! disagrees with the files, or one missing — the volume mounts, fsck names
//! the blocks and both counts, `--repair` sets the count the files show,
//! and fsck is clean after. And a volume with Share records in its log gets
//! a committed log block appended with a bad one (outside the volume, one
//! reference, overlapping a run): the mount refuses, naming the record.
//!
//! Calls the engine's public API (Fs, MemDevice, btree node codec,
//! superblock, log block codec) and tux3_tools::fsck.

mod image_util;

use std::sync::Arc;
use tux3::backend::snapshot::{encode_shared, SHARED_KEY, SNAP_INO};
use tux3::backend::Backend;
use tux3::device::{Device, MemDevice};
use tux3::log::Record;
use tux3::structures::btree::node::{decode, Leaf, Node};
use tux3::structures::btree::{Tree, TreeKind};
use tux3::structures::superblock::Superblock;
use tux3::{FormatOptions, Fs, OpenOptions, ROOT_INO};
use tux3_tools::fsck::{check, FsckOptions, FsckReport};

const BS: u64 = 4096;
const BLOCKS: u64 = 1024;

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8 ^ (i >> 12) as u8).collect()
}

/// A volume where `/a` (8 blocks) is cloned whole to `/b`, so blocks of
/// `/a` have two references; synced, and unified when `unify` (else the
/// runs are only in the log's Share records). Returns the device.
fn volume(unify: bool) -> Arc<MemDevice> {
    let mem = Arc::new(MemDevice::new(BS as u32, BLOCKS));
    let dev: Arc<dyn Device> = mem.clone();
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    let fs = Fs::open(dev, OpenOptions::default()).unwrap();
    let a = fs.create(ROOT_INO, b"a", 0o644, 0, 0).unwrap().ino;
    fs.write(a, 0, &pattern(8 * BS as usize)).unwrap();
    fs.sync().unwrap();
    fs.unify().unwrap();
    let b = fs.create(ROOT_INO, b"b", 0o644, 0, 0).unwrap().ino;
    fs.clone_range(a, 0, b, 0, u64::MAX).unwrap();
    fs.sync().unwrap();
    assert_eq!(fs.sharing().saved_blocks, 8);
    if unify {
        fs.unify().unwrap();
        fs.close().unwrap();
    } else {
        drop(fs); // a crash: the runs are in the log
    }
    mem
}

fn fsck(mem: &Arc<MemDevice>, repair: bool) -> FsckReport {
    let opts = FsckOptions {
        repair,
        progress: false,
        data: true,
    };
    check(mem.clone(), &opts).unwrap()
}

fn mount_error(mem: &Arc<MemDevice>) -> String {
    match Fs::open(mem.clone(), OpenOptions::default()) {
        Ok(_) => panic!("the hostile volume mounted"),
        Err(e) => e.to_string(),
    }
}

/// The snapshot table's leaf holding the shared runs: its address and node.
fn table_leaf(mem: &Arc<MemDevice>) -> (u64, Leaf) {
    let dev: &dyn Device = mem.as_ref();
    let sb = Superblock::load(dev).unwrap();
    let mut t = Tree::open(SNAP_INO, TreeKind::Snapshots, sb.snapshots);
    let mut home = None;
    t.visit(dev, &mut |addr, _, _, n| {
        if let Node::Leaf(l) = n {
            if l.entries.iter().any(|e| e.0 >= SHARED_KEY) {
                home = Some(addr);
            }
        }
        Ok(())
    })
    .unwrap();
    let addr = home.expect("a leaf with shared runs");
    let mut buf = vec![0u8; BS as usize];
    dev.read(addr, &mut buf).unwrap();
    let Node::Leaf(leaf) = decode(&buf, addr, SNAP_INO, TreeKind::Snapshots, 0, BLOCKS).unwrap() else {
        panic!("not a leaf")
    };
    (addr, leaf)
}

/// Rewrite the table's shared runs as `runs` (start, count, refs), the
/// leaf resealed; returns the leaf's address and the run the volume had.
fn set_runs(mem: &Arc<MemDevice>, runs: impl FnOnce(u64, u64) -> Vec<(u64, u64, u64)>) -> (u64, (u64, u64)) {
    let (addr, mut leaf) = table_leaf(mem);
    let old: Vec<(u64, u64)> = leaf
        .entries
        .iter()
        .filter(|e| e.0 >= SHARED_KEY)
        .map(|e| (e.0 - SHARED_KEY, e.1[0] as u64))
        .collect();
    assert_eq!(old.len(), 1, "one run: {old:?}");
    let (start, count) = old[0];
    assert_eq!(count, 8);
    leaf.entries.retain(|e| e.0 < SHARED_KEY);
    for (s, c, r) in runs(start, count) {
        let mut v = Vec::new();
        for x in [c, r] {
            // varints, as the table writes them (7 bits a byte)
            let mut x = x;
            loop {
                let b = (x & 0x7f) as u8;
                x >>= 7;
                if x == 0 {
                    v.push(b);
                    break;
                }
                v.push(b | 0x80);
            }
        }
        if r >= 2 && c > 0 && c < 128 && r < 128 {
            assert_eq!(v, encode_shared(c, r as u32));
        }
        leaf.entries.push((SHARED_KEY + s, v));
    }
    leaf.entries.sort_by_key(|e| e.0);
    mem.write(
        addr,
        &leaf.encode(addr, SNAP_INO, TreeKind::Snapshots, BS as usize),
    )
    .unwrap();
    (addr, (start, count))
}

#[test]
fn the_clean_volume_has_its_run_on_disk_and_fsck_is_clean() {
    let mem = volume(true);
    let r = fsck(&mem, false);
    assert!(r.problems.is_empty(), "{:?}", r.problems);
    let (_, leaf) = table_leaf(&mem);
    assert_eq!(leaf.entries.iter().filter(|e| e.0 >= SHARED_KEY).count(), 1);
}

#[test]
fn a_run_outside_the_volume_is_refused() {
    let mem = volume(true);
    let (leaf, _) = set_runs(&mem, |_, _| vec![(BLOCKS - 4, 8, 2)]);
    let e = mount_error(&mem);
    let want = format!("shared run {}+8 outside the volume", BLOCKS - 4);
    assert!(e.contains(&want) && e.contains(&leaf.to_string()), "{e}");
    let r = fsck(&mem, false);
    assert!(r.problems.iter().any(|p| p.contains(&want)), "{:?}", r.problems);
}

#[test]
fn overlapping_runs_are_refused() {
    let mem = volume(true);
    let (leaf, _) = set_runs(&mem, |s, c| vec![(s, c, 2), (s + 3, 2, 3)]);
    let e = mount_error(&mem);
    assert!(
        e.contains("overlaps the one before") && e.contains(&leaf.to_string()),
        "{e}"
    );
    let r = fsck(&mem, false);
    assert!(
        r.problems.iter().any(|p| p.contains("overlaps the one before")),
        "{:?}",
        r.problems
    );
}

#[test]
fn a_run_of_one_reference_is_refused() {
    let mem = volume(true);
    let (_, (start, _)) = set_runs(&mem, |s, c| vec![(s, c, 1)]);
    let e = mount_error(&mem);
    let want = format!("shared run at block {start}: bad value");
    assert!(e.contains(&want), "{e}");
    let r = fsck(&mem, false);
    assert!(r.problems.iter().any(|p| p.contains(&want)), "{:?}", r.problems);
}

/// A count the files do not show, fixed by repair: the problem line names
/// the blocks and both counts.
fn repaired(runs: impl FnOnce(u64, u64) -> Vec<(u64, u64, u64)>, line: impl Fn(u64, u64) -> String) {
    let mem = volume(true);
    let (_, (start, count)) = set_runs(&mem, runs);
    // The volume mounts: the count is wrong, not the table's shape.
    Fs::open(mem.clone(), OpenOptions::default())
        .unwrap()
        .close()
        .unwrap();
    let want = line(start, count);
    let r = fsck(&mem, false);
    assert!(
        r.problems.iter().any(|p| p.contains(&want)),
        "want {want:?}: {:?}",
        r.problems
    );
    let r = fsck(&mem, true);
    assert!(!r.repaired.is_empty(), "nothing repaired: {:?}", r.problems);
    let r = fsck(&mem, false);
    assert!(r.problems.is_empty(), "after repair: {:?}", r.problems);
    let fs = Fs::open(mem.clone(), OpenOptions::default()).unwrap();
    assert_eq!(fs.sharing().saved_blocks, count, "the repaired table");
    // The blocks come free with their last reference.
    fs.unlink(ROOT_INO, b"a").unwrap();
    fs.unlink(ROOT_INO, b"b").unwrap();
    fs.unify().unwrap();
    assert_eq!(fs.sharing().blocks, 0);
    fs.close().unwrap();
    let r = fsck(&mem, false);
    assert!(r.problems.is_empty(), "after the deletes: {:?}", r.problems);
}

#[test]
fn a_count_above_the_files_is_named_and_repaired() {
    repaired(
        |s, c| vec![(s, c, 3)],
        |s, c| {
            format!(
                "blocks {s}-{}: mapped 2 times by files, the shared-extent table counts 3 references",
                s + c - 1
            )
        },
    );
}

#[test]
fn a_run_cut_short_is_named_and_repaired() {
    repaired(
        |s, c| vec![(s, c - 3, 2)],
        |s, c| {
            format!(
                "blocks {}-{}: mapped 2 times by files, not in the shared-extent table",
                s + c - 3,
                s + c - 1
            )
        },
    );
}

#[test]
fn a_missing_table_is_named_and_repaired() {
    repaired(
        |_, _| Vec::new(),
        |s, c| {
            format!(
                "blocks {s}-{}: mapped 2 times by files, not in the shared-extent table",
                s + c - 1
            )
        },
    );
}

/// Append one committed log block holding `records` after the log's
/// last, and after it another commit (so the bad one is not the end of
/// the log, which a torn write could explain). Returns the first's address.
fn append_log(mem: &Arc<MemDevice>, records: Vec<Record>) -> u64 {
    let dev: Arc<dyn Device> = mem.clone();
    image_util::append_commits(&dev, vec![records, Vec::new()])
}

/// The run the replayed table holds (the log's Share records applied).
fn logged_run(mem: &Arc<MemDevice>) -> (u64, u64) {
    let dev: Arc<dyn Device> = mem.clone();
    let (be, _) = Backend::open(dev, true).unwrap();
    let runs: Vec<(u64, u64)> = be.alloc.shared.iter().map(|(s, r)| (s, r.count)).collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
    runs[0]
}

#[test]
fn the_log_holds_the_runs_and_replays_them() {
    let mem = volume(false);
    assert_eq!(logged_run(&mem).1, 8);
    let r = fsck(&mem, false);
    assert!(r.problems.is_empty(), "{:?}", r.problems);
    let fs = Fs::open(mem.clone(), OpenOptions::default()).unwrap();
    assert_eq!(fs.sharing().saved_blocks, 8);
}

/// A Share record whose fields do not decode (outside the volume, one
/// reference, refs 0 with a count) makes its block no log block of the
/// chain: the log ends before it, as after a torn write, and nothing of it
/// is applied (the run stays as the last good commit left it).
#[test]
fn an_undecodable_share_record_ends_the_log_before_it() {
    let (start, _) = logged_run(&volume(false));
    for rec in [
        Record::Share {
            start: BLOCKS - 2,
            count: 5,
            refs: 2,
        },
        Record::Share {
            start,
            count: 3,
            refs: 1,
        },
        Record::Share {
            start,
            count: 2,
            refs: 0,
        },
    ] {
        let mem = volume(false);
        append_log(&mem, vec![rec.clone()]);
        let fs = Fs::open(mem.clone(), OpenOptions::default()).unwrap();
        assert_eq!(fs.stats().replayed_deltas, 1, "{rec:?}");
        assert_eq!(fs.sharing().saved_blocks, 8, "{rec:?}");
    }
}

/// A well-formed Share record whose run overlaps another run once its
/// commit is replayed: the mount refuses, naming the record and its block.
#[test]
fn an_overlapping_share_record_fails_the_mount_clearly() {
    let (start, count) = logged_run(&volume(false));
    let cases: Vec<(Record, String)> = vec![
        (
            Record::Share {
                start: start + 2,
                count: count as u32 + 4,
                refs: 3,
            },
            format!(
                "Share record: run {}+{} overlaps the run at {start}",
                start + 2,
                count + 4
            ),
        ),
        (
            Record::Share {
                start: start - 1,
                count: 2,
                refs: 2,
            },
            format!("Share record: run {}+2 overlaps the run at {start}", start - 1),
        ),
    ];
    for (rec, want) in cases {
        let mem = volume(false);
        let at = append_log(&mem, vec![rec.clone()]);
        let e = match Fs::open(mem.clone(), OpenOptions::default()) {
            Ok(_) => panic!("{rec:?} accepted"),
            Err(e) => e.to_string(),
        };
        assert!(
            e.contains(&want) && e.contains(&format!("block {at}")),
            "{rec:?}: {e}"
        );
        let r = fsck(&mem, false);
        assert!(!r.problems.is_empty(), "{rec:?}: fsck found nothing");
    }
}
