//! Scrub: a volume with files (one hard-linked), a snapshot sharing their
//! blocks and a file overwritten since (so the snapshot alone holds its
//! old blocks). Data and metadata blocks are damaged behind the volume's
//! back; the scrub names every damaged file by all its paths with the
//! snapshots holding the blocks, and every damaged structure — and
//! nothing intact. Each referenced block is read once (shared ones too).
//! Then resume: a scrub cancelled, or stopped dead and dropped like a
//! crash, goes on from within 1% of where it stopped.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use tux3::device::{Device, MemDevice};
use tux3::structures::inode::InodeAttrs;
use tux3::structures::scrub_state::ScrubPhase;
use tux3::{FormatOptions, Fs, OpenOptions, ROOT_INO};
use tux3_tools::scrub::plan::{self, What};
use tux3_tools::scrub::{run, Control, Ended, Hook, Options};

const BS: u32 = 4096;

/// The volume; returns the device and (path -> inode).
fn build(files: u32, blocks_each: usize) -> (Arc<MemDevice>, BTreeMap<String, u64>) {
    let mem = Arc::new(MemDevice::new(BS, 16384));
    let dev: Arc<dyn Device> = mem.clone();
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    let fs = Fs::open(dev, OpenOptions::default()).unwrap();
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap().ino;
    let mut names = BTreeMap::new();
    for i in 0..files {
        let f = fs.create(d, format!("f{i}").as_bytes(), 0o644, 0, 0).unwrap().ino;
        let data: Vec<u8> = (0..blocks_each * BS as usize)
            .map(|x| (x as u32 * 7 + i) as u8)
            .collect();
        fs.write(f, 0, &data).unwrap();
        names.insert(format!("/d/f{i}"), f);
    }
    fs.link(names["/d/f1"], ROOT_INO, b"h1").unwrap();
    fs.sync().unwrap();
    fs.snapshot_create(b"s1").unwrap();
    // f2 rewritten: the snapshot alone holds its old blocks.
    let data = vec![0x5au8; blocks_each * BS as usize];
    fs.write(names["/d/f2"], 0, &data).unwrap();
    fs.close().unwrap();
    (mem, names)
}

fn open(mem: &Arc<MemDevice>) -> Fs {
    Fs::open(mem.clone(), OpenOptions::default()).unwrap()
}

fn flip(mem: &MemDevice, block: u64) {
    let mut buf = vec![0u8; BS as usize];
    mem.read(block, &mut buf).unwrap();
    buf[100] ^= 0x40;
    mem.write(block, &buf).unwrap();
}

#[test]
fn names_every_damaged_file_and_structure_and_nothing_else() {
    let (mem, names) = build(8, 40);
    let p = plan::collect(mem.clone()).unwrap();
    // Shared blocks once: the plan is disjoint; it covers every block in
    // use but the one reserved for the next log block, and no free one.
    assert!(p.items.windows(2).all(|w| w[0].end() <= w[1].start));
    let (be, _) = tux3::backend::Backend::open(mem.clone(), true).unwrap();
    let unplanned: Vec<u64> = (0..mem.block_count())
        .filter(|&b| be.alloc.is_used(b) && p.find(b).is_none())
        .collect();
    assert!(unplanned.len() <= 1, "{unplanned:?}");
    assert!(p
        .items
        .iter()
        .all(|it| (it.start..it.end()).all(|b| be.alloc.is_used(b))));
    drop(be);
    let fs = open(&mem);
    let f2 = names["/d/f2"];
    let snap_only: Vec<u64> = p
        .items
        .iter()
        .filter(|it| matches!(it.what, What::Data { ino, .. } if ino == f2) && !p.is_live(it.start))
        .map(|it| it.start)
        .collect();
    assert!(!snap_only.is_empty(), "the snapshot holds f2's old blocks");
    drop(fs);

    // Damage: data of f1 (hard-linked, shared with the snapshot), f5, an
    // old block of f2 only the snapshot holds; extent leaves of f6 and
    // f7 and the superblock copy not in use. (A damaged bitmap block stops
    // the volume from opening: checked on its own at the end.)
    let data_of = |ino: u64, nth: u64| {
        let it = p
            .items
            .iter()
            .find(|it| matches!(it.what, What::Data { ino: i, .. } if i == ino) && p.is_live(it.start))
            .unwrap();
        it.start + nth
    };
    let bad_data = [
        data_of(names["/d/f1"], 3),
        data_of(names["/d/f5"], 0),
        snap_only[0] + 1,
    ];
    let leaf_of = |ino: u64| {
        p.items
            .iter()
            .find(|it| matches!(it.what, What::Node { tree, .. } if tree == ino))
            .unwrap()
            .start
    };
    let (leaf6, leaf7) = (leaf_of(names["/d/f6"]), leaf_of(names["/d/f7"]));
    let bitmap = p
        .items
        .iter()
        .find(|it| matches!(it.what, What::Bitmap { .. }))
        .unwrap()
        .clone();
    let sb = tux3::structures::superblock::Superblock::load(mem.as_ref()).unwrap();
    let old_copy = 1 - sb.home();
    for b in bad_data.iter().chain(&[leaf6, leaf7, old_copy]) {
        flip(&mem, *b);
    }

    let fs = open(&mem);
    let ctl = Control::default();
    let (ended, r) = run(&fs, Options::default(), &ctl, &mut |_, _, _| Hook::Go).unwrap();
    assert_eq!(ended, Ended::Finished);
    let lines = r.lines().join("\n");
    let files: BTreeMap<u64, _> = r.files.iter().map(|f| (f.ino, f.clone())).collect();
    assert_eq!(
        files.keys().copied().collect::<BTreeSet<_>>(),
        [names["/d/f1"], names["/d/f5"], f2].into(),
        "{lines}"
    );
    assert_eq!(
        files[&names["/d/f1"]].paths,
        vec!["/h1".to_string(), "/d/f1".to_string()],
        "{lines}"
    );
    assert_eq!(
        files[&names["/d/f1"]].snapshots,
        vec!["s1".to_string()],
        "{lines}"
    );
    assert!(files[&names["/d/f1"]].live);
    assert_eq!(files[&f2].paths, vec!["/d/f2".to_string()]);
    assert_eq!(files[&f2].snapshots, vec!["s1".to_string()]);
    assert!(!files[&f2].live, "{lines}");
    let blocks: BTreeSet<u64> = r
        .files
        .iter()
        .flat_map(|f| f.blocks.iter().map(|b| b.1))
        .collect();
    assert_eq!(blocks, bad_data.into(), "{lines}");
    let meta: BTreeSet<u64> = r.metadata.iter().map(|m| m.0).collect();
    assert_eq!(meta, [leaf6, leaf7, old_copy].into(), "{lines}");
    assert!(
        lines.contains(&format!(
            "extent leaf of inode {} (/d/f6), block {leaf6}",
            names["/d/f6"]
        )),
        "{lines}"
    );
    assert!(lines.contains(&format!("superblock copy {old_copy}")), "{lines}");
    // f6's data below the damaged leaf cannot be reached: the report says
    // which node, nothing more.
    assert!(r.unwalked.is_empty(), "{lines}");
    // Every planned block read once, the damaged leaf's subtree aside.
    assert_eq!(
        ctl.done.load(std::sync::atomic::Ordering::Relaxed),
        ctl.total.load(std::sync::atomic::Ordering::Relaxed)
    );
    let st = fs.scrub_state().unwrap().unwrap();
    assert_eq!(st.phase, ScrubPhase::Finished);
    assert_eq!((st.data_damage, st.meta_damage), (3, 3));
    fs.close().unwrap();
    // A bitmap block's header is checked like a tree node's.
    let mut buf = vec![0u8; BS as usize];
    mem.read(bitmap.start, &mut buf).unwrap();
    assert!(tux3_tools::scrub::read::check(mem.block_count(), &bitmap, bitmap.start, &buf).is_none());
    buf[100] ^= 1;
    let why = tux3_tools::scrub::read::check(mem.block_count(), &bitmap, bitmap.start, &buf).unwrap();
    assert!(why.contains("bitmap block"), "{why}");
}

#[test]
fn clean_volume_reports_nothing_and_reads_each_block_once() {
    let (mem, _) = build(4, 30);
    let fs = open(&mem);
    let before = mem.counters();
    let ctl = Control::default();
    let (ended, r) = run(&fs, Options::default(), &ctl, &mut |_, _, _| Hook::Go).unwrap();
    let after = mem.counters();
    assert_eq!(ended, Ended::Finished);
    assert!(r.is_clean(), "{:?}", r.lines());
    let p = plan::collect(mem.clone()).unwrap();
    let total = ctl.total.load(std::sync::atomic::Ordering::Relaxed) / u64::from(BS);
    assert_eq!(
        ctl.read.load(std::sync::atomic::Ordering::Relaxed),
        total * u64::from(BS)
    );
    // The read pass reads each planned block once; the walk reads the
    // metadata (a small part) once more.
    let meta = p
        .items
        .iter()
        .filter(|i| !matches!(i.what, What::Data { .. }))
        .map(|i| i.count)
        .sum::<u64>();
    let reads = after.blocks_read - before.blocks_read;
    assert!(
        reads >= total && reads <= total + 3 * meta + 16,
        "{reads} reads for {total} blocks ({meta} metadata)"
    );
    fs.close().unwrap();
}

/// Stop a scrub at about 40% by `hook`; returns the position it stopped at.
fn stop_at_40(fs: &Fs, hook: Hook) -> (u64, u64) {
    let ctl = Control::default();
    let mut stop = Some(hook);
    let mut at = (0, 0);
    let (ended, _) = run(fs, Options::default(), &ctl, &mut |pos, done, total| {
        if done * 10 >= total * 4 {
            if let Some(h) = stop.take() {
                at = (pos, done);
                return h;
            }
        }
        Hook::Go
    })
    .unwrap();
    assert_ne!(ended, Ended::Finished);
    at
}

#[test]
fn resumes_after_cancel_and_after_a_crash() {
    for crash in [false, true] {
        let (mem, _) = build(12, 200);
        let fs = open(&mem);
        let (pos, done) = stop_at_40(&fs, if crash { Hook::Abandon } else { Hook::Cancel });
        // A crash: the Fs dropped without close (the open delta is lost).
        if crash {
            drop(fs);
        } else {
            fs.close().unwrap();
        }
        let fs = open(&mem);
        let st = fs.scrub_state().unwrap().unwrap();
        let want = if crash {
            ScrubPhase::Running
        } else {
            ScrubPhase::Cancelled
        };
        assert_eq!(st.phase, want);
        assert!(st.position <= pos, "saved {} past the stop {pos}", st.position);
        // Within 1% of the total of where it stopped.
        assert!(
            done - st.done <= st.total / 100,
            "saved {} of {}, stopped at {done}",
            st.done,
            st.total
        );
        let ctl = Control::default();
        let mut first = None;
        let (ended, r) = run(&fs, Options::default(), &ctl, &mut |_, d, _| {
            first.get_or_insert(d);
            Hook::Go
        })
        .unwrap();
        assert_eq!(ended, Ended::Finished);
        assert!(r.is_clean());
        // It went on from the saved position: this run read the rest.
        let total = ctl.total.load(std::sync::atomic::Ordering::Relaxed);
        let read = ctl.read.load(std::sync::atomic::Ordering::Relaxed);
        assert!(
            read + st.done <= total + total / 100 && read + st.done + total / 100 >= total,
            "{read} + {} vs {total}",
            st.done
        );
        assert_eq!(fs.scrub_state().unwrap().unwrap().phase, ScrubPhase::Finished);
        fs.close().unwrap();
        // fsck accepts the state record.
        let r = tux3_tools::fsck::check(mem.clone(), &Default::default()).unwrap();
        assert!(r.problems.is_empty(), "{:?}", r.problems);
    }
}

#[test]
fn a_damaged_state_record_is_a_clear_error() {
    let (mem, _) = build(3, 4);
    let fs = open(&mem);
    run(&fs, Options::default(), &Control::default(), &mut |_, _, _| {
        Hook::Go
    })
    .unwrap();
    fs.close().unwrap();
    // The record as the inode table holds it, then every byte of it
    // changed: each decode is a value or an error, never a panic.
    let (be, _) = tux3::backend::Backend::open(mem.clone(), true).unwrap();
    let (raw, leaf) = be.itable.lock().get_at(mem.as_ref(), 4).unwrap().unwrap();
    let bounds = tux3::structures::bounds(mem.as_ref());
    let a = InodeAttrs::decode(&raw, 4, leaf, &bounds).unwrap();
    let body = a.scrub.unwrap().encode();
    let at = raw
        .windows(body.len())
        .position(|w| w == body.as_slice())
        .unwrap();
    for i in 0..raw.len() {
        for v in [0u8, 1, 9, 0x44, 0xff] {
            let mut r = raw.clone();
            r[i] = v;
            let _ = InodeAttrs::decode(&r, 4, leaf, &bounds);
        }
    }
    let mut r = raw.clone();
    r[at + 1] = 9; // the phase
    let e = InodeAttrs::decode(&r, 4, leaf, &bounds).unwrap_err();
    assert!(
        e.to_string().contains("inode 4: scrub state: unknown phase 9"),
        "{e}"
    );
    assert!(e.to_string().contains(&format!("block {leaf}")), "{e}");
    // Another inode may not hold one.
    let e = InodeAttrs::decode(&raw, 17, leaf, &bounds).unwrap_err();
    assert!(e.to_string().contains("held by inode 17"), "{e}");
}

/// A clone's blocks are read once, and a damaged one names every file
/// that maps it.
#[test]
fn a_damaged_shared_block_names_every_clone() {
    let mem = Arc::new(MemDevice::new(BS, 8192));
    let dev: Arc<dyn Device> = mem.clone();
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    let fs = Fs::open(dev, OpenOptions::default()).unwrap();
    let a = fs.create(ROOT_INO, b"a", 0o644, 0, 0).unwrap().ino;
    fs.write(a, 0, &vec![0x33u8; 16 * BS as usize]).unwrap();
    let b = fs.create(ROOT_INO, b"b", 0o644, 0, 0).unwrap().ino;
    fs.clone_range(a, 0, b, 4 * BS as u64, u64::MAX).unwrap();
    let c = fs.create(ROOT_INO, b"c", 0o644, 0, 0).unwrap().ino;
    fs.write(c, 0, &vec![0x44u8; 4 * BS as usize]).unwrap();
    fs.close().unwrap();
    let p = plan::collect(mem.clone()).unwrap();
    assert!(p.items.windows(2).all(|w| w[0].end() <= w[1].start));
    let first = p
        .items
        .iter()
        .find(|it| matches!(it.what, What::Data { ino, .. } if ino == a || ino == b))
        .unwrap()
        .start;
    flip(&mem, first + 2);
    let fs = open(&mem);
    let (_, r) = run(&fs, Options::default(), &Control::default(), &mut |_, _, _| {
        Hook::Go
    })
    .unwrap();
    let lines = r.lines().join("\n");
    let named: BTreeSet<u64> = r.files.iter().map(|f| f.ino).collect();
    assert_eq!(named, [a, b].into(), "{lines}");
    let blocks_of = |ino: u64| r.files.iter().find(|f| f.ino == ino).unwrap().blocks.clone();
    assert_eq!(blocks_of(a), vec![(2, first + 2)], "{lines}");
    assert_eq!(blocks_of(b), vec![(6, first + 2)], "{lines}");
}
