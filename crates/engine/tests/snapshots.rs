//! Snapshots through the engine: a snapshot keeps exactly what the volume
//! held when it was taken, while the live volume changes, across remounts;
//! deleting it gives back exactly the blocks only it held (fsck finds no
//! leak and nothing missing at every step), and a model-based run checks
//! every snapshot against the model's copy after each step.

use proptest::prelude::*;
use std::collections::BTreeMap;
use std::sync::Arc;
use tux3::device::{Device, MemDevice};
use tux3::{Errno, FormatOptions, Fs, OpenOptions, ROOT_INO};

const BS: u32 = 4096;

fn volume(blocks: u64) -> Arc<dyn Device> {
    let dev: Arc<dyn Device> = Arc::new(MemDevice::new(BS, blocks));
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    dev
}

fn opts() -> OpenOptions {
    OpenOptions {
        dirty_limit: u64::MAX,
        unify_log_blocks: 8,
        ..OpenOptions::default()
    }
}

fn open_snapshot(dev: &Arc<dyn Device>, name: &str) -> tux3::Result<Fs> {
    Fs::open(
        dev.clone(),
        OpenOptions {
            read_only: true,
            snapshot: Some(name.as_bytes().to_vec()),
            ..OpenOptions::default()
        },
    )
}

/// Bytes of the blocks snapshot `name` references, by a walk of it.
fn walked_bytes(dev: &Arc<dyn Device>, name: &str) -> u64 {
    use tux3::backend::snapshot::{image_blocks, merged};
    let (be, _) = tux3::backend::Backend::open(dev.clone(), true).unwrap();
    let root = be.snaps.find(name.as_bytes()).unwrap().itable;
    let (blocks, _) = image_blocks(dev.as_ref(), root).unwrap();
    merged(&blocks).iter().map(|(s, e)| e - s).sum::<u64>() * BS as u64
}

fn snap_err(dev: &Arc<dyn Device>, name: &str) -> Errno {
    match open_snapshot(dev, name) {
        Ok(_) => panic!("snapshot {name} opened"),
        Err(e) => e.errno(),
    }
}

/// Every regular file in the root directory: name -> contents.
fn files(fs: &Fs) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut pos = 0;
    loop {
        let got = fs.readdir(ROOT_INO, pos, 64).unwrap();
        if got.is_empty() {
            break;
        }
        pos = got.last().unwrap().next;
        for e in got {
            let a = fs.getattr(e.ino).unwrap();
            let data = fs.read(e.ino, 0, a.size as usize).unwrap();
            out.insert(String::from_utf8(e.name).unwrap(), data);
        }
    }
    out
}

fn write_file(fs: &Fs, name: &str, data: &[u8]) {
    let ino = match fs.lookup(ROOT_INO, name.as_bytes()) {
        Ok(a) => a.ino,
        Err(_) => fs.create(ROOT_INO, name.as_bytes(), 0o644, 0, 0).unwrap().ino,
    };
    fs.setattr(
        ino,
        &tux3::SetAttr {
            size: Some(0),
            ..Default::default()
        },
    )
    .unwrap();
    fs.write(ino, 0, data).unwrap();
}

/// fsck of the whole device: no problem (snapshots' blocks are all live
/// or on the dead list, nothing leaked).
fn fsck_clean(dev: &Arc<dyn Device>) {
    let report = tux3_tools::fsck::check(dev.clone(), &Default::default()).unwrap();
    assert!(report.problems.is_empty(), "fsck: {:#?}", report.problems);
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| seed.wrapping_add((i / 7) as u8)).collect()
}

#[test]
fn a_snapshot_keeps_what_was_there() {
    let dev = volume(4096);
    let fs = Fs::open(dev.clone(), opts()).unwrap();
    write_file(&fs, "a", &pattern(1, 50_000));
    write_file(&fs, "b", &pattern(2, 3000));
    let info = fs.snapshot_create(b"s1").unwrap();
    assert_eq!(info.name, b"s1");
    assert!(!info.deleting);
    let before = files(&fs);
    // Change everything: overwrite, delete, create.
    write_file(&fs, "a", &pattern(3, 20_000));
    fs.unlink(ROOT_INO, b"b").unwrap();
    write_file(&fs, "c", &pattern(4, 9000));
    fs.sync().unwrap();
    let after = files(&fs);
    assert_ne!(before, after);
    {
        let snap = open_snapshot(&dev, "s1").unwrap();
        assert_eq!(files(&snap), before);
        assert_eq!(
            snap.create(ROOT_INO, b"x", 0o644, 0, 0).unwrap_err().errno(),
            Errno::EROFS
        );
    }
    assert_eq!(fs.snapshot_create(b"s1").unwrap_err().errno(), Errno::EEXIST);
    assert_eq!(fs.snapshot_create(b"a/b").unwrap_err().errno(), Errno::EINVAL);
    assert_eq!(fs.snapshot_create(b"").unwrap_err().errno(), Errno::EINVAL);
    fs.unify().unwrap();
    fs.close().unwrap();
    fsck_clean(&dev);
    // Across a remount (replay), both views stay.
    let fs = Fs::open(dev.clone(), opts()).unwrap();
    assert_eq!(files(&fs), after);
    assert_eq!(files(&open_snapshot(&dev, "s1").unwrap()), before);
    let list = fs.snapshot_list().unwrap();
    assert_eq!(list.len(), 1);
    // What it refers to is counted exactly, without a walk.
    assert_eq!(list[0].referenced_bytes, walked_bytes(&dev, "s1"), "{list:?}");
    assert!(list[0].unique_bytes >= 50_000 / BS as u64 * BS as u64, "{list:?}");
    assert_eq!(snap_err(&dev, "nope"), Errno::ENOENT);
    fs.close().unwrap();
}

#[test]
fn deleting_gives_back_exactly_what_only_it_held() {
    let dev = volume(8192);
    let fs = Fs::open(dev.clone(), opts()).unwrap();
    for i in 0..20 {
        write_file(&fs, &format!("f{i}"), &pattern(i, 20_000 + i as usize * 1000));
    }
    fs.unify().unwrap();
    fs.snapshot_create(b"old").unwrap();
    // Rewrite half the files and delete a quarter: the snapshot holds the
    // old blocks.
    for i in 0..10 {
        write_file(&fs, &format!("f{i}"), &pattern(100 + i, 15_000));
    }
    for i in 10..15 {
        fs.unlink(ROOT_INO, format!("f{i}").as_bytes()).unwrap();
    }
    fs.snapshot_create(b"mid").unwrap();
    for i in 15..20 {
        fs.unlink(ROOT_INO, format!("f{i}").as_bytes()).unwrap();
    }
    fs.sync().unwrap();
    let list = fs.snapshot_list().unwrap();
    assert_eq!(
        list.iter().map(|s| &s.name[..]).collect::<Vec<_>>(),
        [&b"old"[..], b"mid"]
    );
    assert!(list[0].unique_bytes > 0 && list[1].unique_bytes > 0, "{list:?}");
    let mid_view = files(&open_snapshot(&dev, "mid").unwrap());
    fs.unify().unwrap();
    fsck_clean(&dev);

    // Deleting "old": its name goes at once; "mid" is untouched.
    let unique = list[0].unique_bytes;
    let free = fs.statfs().unwrap().blocks_free;
    fs.snapshot_delete(b"old").unwrap();
    assert_eq!(fs.snapshot_delete(b"old").unwrap_err().errno(), Errno::ENOENT);
    assert_eq!(snap_err(&dev, "old"), Errno::ENOENT);
    fs.snapshot_reclaim(&mut |_| {}).unwrap();
    fs.sync().unwrap();
    assert_eq!(fs.snapshot_list().unwrap().len(), 1);
    let gained = (fs.statfs().unwrap().blocks_free - free) * BS as u64;
    // The reclaiming commits themselves take a few blocks (log, table nodes).
    assert!(
        gained + 8 * BS as u64 >= unique,
        "reclaim gave back {gained} bytes, the snapshot held {unique} alone"
    );
    assert_eq!(files(&open_snapshot(&dev, "mid").unwrap()), mid_view);
    fs.unify().unwrap();
    fsck_clean(&dev);

    // Deleting the last one: the live volume holds only its own blocks.
    let unique = fs.snapshot_list().unwrap()[0].unique_bytes;
    let free = fs.statfs().unwrap().blocks_free;
    fs.snapshot_delete(b"mid").unwrap();
    fs.snapshot_reclaim(&mut |_| {}).unwrap();
    fs.unify().unwrap();
    assert!(fs.snapshot_list().unwrap().is_empty());
    let gained = (fs.statfs().unwrap().blocks_free - free) * BS as u64;
    // The reclaiming commits themselves take a few blocks (log, table nodes).
    assert!(
        gained + 8 * BS as u64 >= unique,
        "reclaim gave back {gained} bytes, the snapshot held {unique} alone"
    );
    fs.close().unwrap();
    fsck_clean(&dev);
}

#[test]
fn a_delete_resumes_after_a_crash() {
    let dev = volume(8192);
    let fs = Fs::open(dev.clone(), opts()).unwrap();
    for i in 0..8 {
        write_file(&fs, &format!("f{i}"), &pattern(i, 40_000));
    }
    fs.snapshot_create(b"s").unwrap();
    for i in 0..8 {
        fs.unlink(ROOT_INO, format!("f{i}").as_bytes()).unwrap();
    }
    fs.sync().unwrap();
    fs.snapshot_delete(b"s").unwrap();
    // Dropped without close: the deletion is durable, the reclaim not yet.
    drop(fs);
    let fs = Fs::open(dev.clone(), opts()).unwrap();
    let list = fs.snapshot_list().unwrap();
    assert!(list.iter().all(|s| s.deleting), "{list:?}");
    assert_eq!(snap_err(&dev, "s"), Errno::ENOENT);
    fs.snapshot_reclaim(&mut |_| {}).unwrap();
    assert!(fs.snapshot_list().unwrap().is_empty());
    fs.close().unwrap();
    fsck_clean(&dev);
}

#[derive(Debug, Clone)]
enum Step {
    Write(u8, u8, u16),
    Unlink(u8),
    Snapshot,
    Delete(u8),
    Rollback(u8),
    Sync,
    Unify,
    Remount,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0u8..6, any::<u8>(), 1u16..12_000).prop_map(|(f, s, l)| Step::Write(f, s, l)),
        1 => (0u8..6).prop_map(Step::Unlink),
        1 => Just(Step::Snapshot),
        1 => (0u8..8).prop_map(Step::Delete),
        1 => (0u8..8).prop_map(Step::Rollback),
        1 => Just(Step::Sync),
        1 => Just(Step::Unify),
        1 => Just(Step::Remount),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Each snapshot equals the model's copy taken with it, after every
    /// step; after deleting them all, fsck finds every block accounted for.
    #[test]
    fn snapshots_match_the_model(steps in proptest::collection::vec(step(), 1..40)) {
        let dev = volume(4096);
        let mut fs = Fs::open(dev.clone(), opts()).unwrap();
        let mut model: BTreeMap<String, Vec<u8>> = BTreeMap::new();
        let mut snaps: Vec<(String, BTreeMap<String, Vec<u8>>)> = Vec::new();
        let mut next = 0;
        for s in steps {
            match s {
                Step::Write(f, seed, len) => {
                    let name = format!("f{f}");
                    let data = pattern(seed, len as usize);
                    write_file(&fs, &name, &data);
                    model.insert(name, data);
                }
                Step::Unlink(f) => {
                    let name = format!("f{f}");
                    let r = fs.unlink(ROOT_INO, name.as_bytes());
                    prop_assert_eq!(r.is_ok(), model.remove(&name).is_some());
                }
                Step::Snapshot => {
                    let name = format!("s{next}");
                    next += 1;
                    let info = fs.snapshot_create(name.as_bytes()).unwrap();
                    prop_assert_eq!(info.referenced_bytes, walked_bytes(&dev, &name));
                    snaps.push((name, model.clone()));
                }
                Step::Delete(i) => {
                    if !snaps.is_empty() {
                        let (name, _) = snaps.remove(i as usize % snaps.len());
                        fs.snapshot_delete(name.as_bytes()).unwrap();
                    }
                }
                Step::Rollback(i) => {
                    if !snaps.is_empty() {
                        let (name, copy) = &snaps[i as usize % snaps.len()];
                        fs.snapshot_rollback(name.as_bytes()).unwrap();
                        model = copy.clone();
                    }
                }
                Step::Sync => fs.sync().unwrap(),
                Step::Unify => fs.unify().unwrap(),
                Step::Remount => {
                    fs.close().unwrap();
                    fsck_clean(&dev);
                    fs = Fs::open(dev.clone(), opts()).unwrap();
                }
            }
            prop_assert_eq!(&files(&fs), &model);
            if !matches!(s, Step::Write(..) | Step::Unlink(_)) {
                for (name, copy) in &snaps {
                    let snap = open_snapshot(&dev, name).unwrap();
                    prop_assert_eq!(&files(&snap), copy, "snapshot {}", name);
                }
            }
        }
        for (name, _) in snaps.drain(..) {
            fs.snapshot_delete(name.as_bytes()).unwrap();
        }
        fs.snapshot_reclaim(&mut |_| {}).unwrap();
        prop_assert!(fs.snapshot_list().unwrap().is_empty());
        fs.close().unwrap();
        fsck_clean(&dev);
    }
}

#[test]
fn rollback_makes_the_live_volume_the_snapshot_and_keeps_the_others() {
    let dev = volume(8192);
    let fs = Fs::open(dev.clone(), opts()).unwrap();
    for i in 0..6 {
        write_file(&fs, &format!("f{i}"), &pattern(i, 30_000));
    }
    fs.snapshot_create(b"base").unwrap();
    let base = files(&fs);
    write_file(&fs, "f0", &pattern(50, 70_000));
    fs.unlink(ROOT_INO, b"f1").unwrap();
    write_file(&fs, "new", &pattern(51, 5000));
    fs.snapshot_create(b"later").unwrap();
    let later = files(&fs);
    write_file(&fs, "f2", &pattern(52, 1000));
    fs.unlink(ROOT_INO, b"f3").unwrap();
    fs.sync().unwrap();

    fs.snapshot_rollback(b"base").unwrap();
    assert_eq!(files(&fs), base);
    assert_eq!(fs.snapshot_rollback(b"nope").unwrap_err().errno(), Errno::ENOENT);
    // Both snapshots stay, and the newer one still reads as it was.
    let names: Vec<Vec<u8>> = fs.snapshot_list().unwrap().into_iter().map(|s| s.name).collect();
    assert_eq!(names, [b"base".to_vec(), b"later".to_vec()]);
    assert_eq!(files(&open_snapshot(&dev, "later").unwrap()), later);
    // The rolled-back volume works on: change it, remount, check.
    write_file(&fs, "f4", &pattern(53, 12_000));
    let mut now = base.clone();
    now.insert("f4".into(), pattern(53, 12_000));
    fs.close().unwrap();
    fsck_clean(&dev);
    let fs = Fs::open(dev.clone(), opts()).unwrap();
    assert_eq!(files(&fs), now);
    // Deleting every snapshot leaves nothing behind.
    fs.snapshot_delete(b"base").unwrap();
    fs.snapshot_delete(b"later").unwrap();
    fs.snapshot_reclaim(&mut |_| {}).unwrap();
    assert_eq!(files(&fs), now);
    fs.close().unwrap();
    fsck_clean(&dev);
}

#[test]
fn a_received_snapshot_keeps_its_origin_across_remounts() {
    let dev = volume(4096);
    let fs = Fs::open(dev.clone(), opts()).unwrap();
    let here = fs.snapshot_create(b"local").unwrap();
    assert_eq!(
        here.origin,
        tux3::types::SnapOrigin {
            volume: fs.volume_id(),
            id: here.id
        }
    );
    let origin = tux3::types::SnapOrigin {
        volume: 0x1234_5678_9abc_def0,
        id: 77,
    };
    write_file(&fs, "a", &pattern(5, 10_000));
    let got = fs.snapshot_create_received(b"from-afar", origin).unwrap();
    assert_eq!(got.origin, origin);
    // One snapshot per origin: a second receive of it is refused.
    assert_eq!(
        fs.snapshot_create_received(b"again", origin).unwrap_err().errno(),
        Errno::EEXIST
    );
    fs.close().unwrap();
    let fs = Fs::open(dev.clone(), opts()).unwrap();
    assert_eq!(fs.snapshot_by_origin(origin).unwrap().unwrap().name, b"from-afar");
    assert_eq!(
        fs.snapshot_by_origin(here.origin).unwrap().unwrap().name,
        b"local"
    );
    fs.snapshot_delete(b"from-afar").unwrap();
    assert_eq!(fs.snapshot_by_origin(origin).unwrap(), None);
    fs.close().unwrap();
    fsck_clean(&dev);
}

#[test]
fn an_empty_table_holds_no_block() {
    // The same work with and without a snapshot taken and deleted in
    // between ends with the same blocks in use.
    let run = |snap: bool| {
        let dev = volume(4096);
        let fs = Fs::open(dev.clone(), opts()).unwrap();
        write_file(&fs, "a", &pattern(1, 30_000));
        if snap {
            fs.snapshot_create(b"s").unwrap();
        }
        write_file(&fs, "a", &pattern(2, 30_000));
        if snap {
            fs.snapshot_delete(b"s").unwrap();
            fs.snapshot_reclaim(&mut |_| {}).unwrap();
        }
        fs.unify().unwrap();
        fs.close().unwrap();
        let (be, _) = tux3::backend::Backend::open(dev.clone(), true).unwrap();
        assert_eq!(be.sb.snapshots.addr, 0);
        let report = tux3_tools::fsck::check(dev.clone(), &Default::default()).unwrap();
        assert!(report.problems.is_empty(), "{:#?}", report.problems);
        report.blocks_used
    };
    assert_eq!(run(true), run(false));
}

#[test]
fn a_rollback_to_an_unchanged_snapshot_reads_nothing() {
    let dev = volume(8192);
    let fs = Fs::open(dev.clone(), opts()).unwrap();
    for i in 0..300 {
        write_file(&fs, &format!("f{i}"), &pattern(i as u8, 9000));
    }
    fs.snapshot_create(b"s").unwrap();
    let before = files(&fs);
    fs.close().unwrap();
    let fs = Fs::open(dev.clone(), opts()).unwrap();
    let reads = dev.counters().blocks_read;
    fs.snapshot_rollback(b"s").unwrap();
    // No walk of either image: at most what a unify reads.
    let read = dev.counters().blocks_read - reads;
    assert!(read < 20, "{read} blocks read");
    assert_eq!(files(&fs), before);
    // A change since makes it a real rollback again.
    write_file(&fs, "f1", b"changed");
    fs.snapshot_rollback(b"s").unwrap();
    assert_eq!(files(&fs), before);
    fs.close().unwrap();
    fsck_clean(&dev);
}
