//! Unit tests of the crash harness's parts: epoch cutting, state generation
//! and deduplication, image building, budget selection, and the promise
//! checks (a lost sync must be reported as a durability violation, a state
//! from the middle of a call as an atomicity/ordering one, a snapshot
//! there that should be gone or one changed as a snapshot one, a volume
//! that refers to a discarded block as a discard one).

use super::check::{self, Ordering, Promise};
use super::states::{self, Generator};
use super::{workloads, Fault, Rng};
use std::collections::BTreeSet;
use tux3::device::RecordedOp;

fn none() -> BTreeSet<u64> {
    BTreeSet::new()
}

fn w(block: u64, fill: u8, bs: usize) -> RecordedOp {
    // Different halves, so a torn write differs from the whole one.
    let mut data = vec![fill; bs];
    data[bs / 2..].fill(fill.wrapping_add(100));
    RecordedOp::Write { block, data }
}

#[test]
fn epochs_are_cut_at_flushes() {
    let bs = 1024;
    let log = vec![
        w(2, 1, bs),
        w(3, 2, bs),
        RecordedOp::Flush,
        w(4, 3, bs),
        RecordedOp::Flush,
    ];
    let e = states::epochs(&log);
    assert_eq!(e.len(), 3);
    assert_eq!((e[0].start, e[0].end, e[0].writes.clone()), (0, 2, vec![0, 1]));
    assert_eq!((e[1].start, e[1].end, e[1].writes.clone()), (3, 4, vec![3]));
    assert_eq!((e[2].start, e[2].end, e[2].writes.len()), (5, 5, 0));
}

#[test]
fn small_epochs_get_every_subset_and_torn_write() {
    let bs = 1024; // two sectors: one torn prefix per write
    let log = vec![w(2, 1, bs), w(3, 2, bs), w(4, 3, bs), RecordedOp::Flush];
    let base = vec![0u8; 8 * bs];
    let eps = states::epochs(&log);
    let mut g = Generator::new(&base, &log, bs);
    let mut rng = Rng::new(1);
    for (i, e) in eps.iter().enumerate() {
        g.epoch(i, e, i + 1 == eps.len(), &mut rng);
    }
    // 8 subsets + 3 torn writes x 4 subsets of the others; the last
    // epoch's only state (all writes) duplicates the full subset.
    assert_eq!(g.states.len(), 8 + 12);
    assert!(g.generated > g.states.len());
    let last = g
        .states
        .iter()
        .find(|s| s.must)
        .expect("the final image is a must");
    assert_eq!(last.landed, vec![0b111]);
    // Building an image and matching it agree; other images do not match.
    for st in &g.states {
        let e = &eps[st.epoch];
        let img = states::build(&base, &log, e, st, bs);
        assert!(states::matches(&img, &base, &log, e, st, bs));
        let mut other = img.clone();
        other[bs * 7] ^= 1;
        assert!(!states::matches(&other, &base, &log, e, st, bs));
    }
    // Selection keeps the budget and the must.
    let chosen = states::select(g.states.clone(), 5, &mut rng);
    assert_eq!(chosen.len(), 5);
    assert!(chosen.iter().any(|s| s.must));
    assert!(chosen.windows(2).all(|p| p[0].epoch <= p[1].epoch));
}

#[test]
fn rewrites_of_one_block_dedup_by_content() {
    let bs = 1024;
    // Writing the same contents twice gives the same image.
    let log = vec![w(2, 9, bs), RecordedOp::Flush, w(2, 9, bs), RecordedOp::Flush];
    let base = vec![0u8; 4 * bs];
    let eps = states::epochs(&log);
    let mut g = Generator::new(&base, &log, bs);
    let mut rng = Rng::new(1);
    for (i, e) in eps.iter().enumerate() {
        g.epoch(i, e, i + 1 == eps.len(), &mut rng);
    }
    // Base, the block written, and the torn block.
    assert_eq!(g.states.len(), 3);
}

#[test]
fn the_checks_catch_lost_and_partial_states() {
    let rec = workloads::record("rename_over", 3, Fault::None).unwrap();
    let eps = states::epochs(&rec.log);
    let last = eps.last().unwrap();
    let w_end = check::window(&rec, last.start, last.end);
    assert_eq!(w_end.hi, rec.ops.len(), "the last state is allowed");
    assert_eq!(w_end.lo, rec.ops.len(), "after close everything is durable");
    // The image after every write is fine.
    let mut full = rec.base.clone();
    tux3::device::recording::apply(&rec.log, &mut full, rec.block_size);
    let same = |img: &[u8]| img == &full[..];
    assert!(check::check(full.clone(), same, &rec, w_end, Ordering::Strict, &none()).is_empty());
    // The freshly formatted image claims nothing was ever synced.
    let base = rec.base.clone();
    let broken = check::check(
        base.clone(),
        |i: &[u8]| i == &base[..],
        &rec,
        w_end,
        Ordering::Strict,
        &none(),
    );
    assert_eq!(broken.len(), 1, "{broken:?}");
    assert_eq!(broken[0].0, Promise::Durability, "{broken:?}");
    // A state no call left (the file half written) breaks atomicity.
    let mut snap = rec.snaps[rec.ops.len()].clone();
    let node = snap.entries.get_mut(b"/foo".as_slice()).expect("/foo exists");
    node.chunks.truncate(1);
    node.size = 4096;
    let fp = snap.fingerprint();
    assert!(!rec.fingerprints.contains(&fp));
    let w_all = check::Window { lo: 0, ..w_end };
    let why = check::compare(&snap, &rec, w_all, Ordering::Strict).expect("rejected");
    assert_eq!(why.0, Promise::AtomicityOrdering, "{why:?}");
    assert!(why.1.contains("/foo"), "{why:?}");
    // Any state of a completed call in the window is accepted.
    for j in 0..=rec.ops.len() {
        assert!(check::compare(&rec.snaps[j], &rec, w_all, Ordering::Strict).is_none());
    }
}

#[test]
fn a_lost_fast_fsync_is_a_durability_violation() {
    let rec = workloads::record("append_fsync", 1, Fault::None).unwrap();
    // A fast fsync (no delta commit during it) that made a change durable.
    let Some(k) = (1..=rec.ops.len()).find(|&k| {
        let op = &rec.ops[k - 1];
        op.is_fast_fsync() && op.flushes == 1 && rec.fingerprints[k - 1] != rec.fingerprints[k - 2]
    }) else {
        return; // every fsync is a full commit: nothing to check here
    };
    let op = &rec.ops[k - 1];
    // A crash in the next epoch: the fsync had returned.
    let eps = states::epochs(&rec.log);
    let e = eps
        .iter()
        .find(|e| e.start >= op.end)
        .expect("an epoch after the fsync");
    let w = check::window(&rec, e.start, e.end);
    assert!(w.lo >= k && w.lo_full < k, "{w:?}");
    // The state just before the fsync's call lost what it made durable...
    let before = &rec.snaps[k - 2];
    let why = check::compare(before, &rec, w, Ordering::FsyncMayLead).expect("rejected");
    assert_eq!(why.0, Promise::Durability, "{why:?}");
    // ...while the state right after it is fine.
    assert!(check::compare(&rec.snaps[k], &rec, w, Ordering::FsyncMayLead).is_none());
}

#[test]
fn the_checks_catch_a_lost_or_changed_snapshot() {
    let mut rec = workloads::record("many_snapshots", 1, Fault::None).unwrap();
    let eps = states::epochs(&rec.log);
    let last = eps.last().unwrap();
    let w = check::window(&rec, last.start, last.end);
    let mut full = rec.base.clone();
    tux3::device::recording::apply(&rec.log, &mut full, rec.block_size);
    let run = |rec: &super::record::Recording| {
        let image = full.clone();
        check::check(
            image,
            |i: &[u8]| i == &full[..],
            rec,
            w,
            Ordering::Strict,
            &none(),
        )
    };
    assert!(run(&rec).is_empty(), "{:?}", run(&rec));
    let names: Vec<Vec<u8>> = rec.snapset(w.hi).iter().cloned().collect();
    assert!(names.len() >= 100, "{} snapshots at the end", names.len());
    // A snapshot the recording says was deleted is still there.
    let mut fewer = (*rec.snapsets[w.hi]).clone();
    fewer.remove(&names[0]);
    let kept = std::mem::replace(&mut rec.snapsets[w.hi], std::sync::Arc::new(fewer));
    let broken = run(&rec);
    assert_eq!(broken.len(), 1, "{broken:?}");
    assert_eq!(broken[0].0, Promise::Snapshots, "{broken:?}");
    rec.snapsets[w.hi] = kept;
    // Every snapshot holds other than the volume did when it was taken
    // (only its root): whichever the check reads, it says so.
    for held in rec.snap_contents.values_mut() {
        held.entries.retain(|p, _| p == b"/");
    }
    let broken = run(&rec);
    assert_eq!(broken.len(), 1, "{broken:?}");
    assert_eq!(broken[0].0, Promise::Snapshots, "{broken:?}");
    assert!(broken[0].1.contains("holds other than"), "{broken:?}");
}

/// A block counts as discarded from its discard on (issued in the crash's
/// epoch or before), until a write to it lands whole.
#[test]
fn discarded_blocks_are_those_not_written_since() {
    let bs = 1024;
    let d = |start, count| RecordedOp::Discard { start, count };
    let log = vec![
        d(10, 3),
        w(11, 1, bs),
        RecordedOp::Flush,
        w(10, 2, bs),
        d(20, 1),
        w(20, 3, bs),
        RecordedOp::Flush,
    ];
    let eps = states::epochs(&log);
    assert_eq!(eps[0].discards, vec![0]);
    let mut before = none();
    states::note_discards(&mut before, &log, &eps[0]);
    assert_eq!(before, BTreeSet::from([10, 12]));
    let state = |landed: u64| states::State {
        epoch: 1,
        landed: vec![landed],
        torn: None,
        tier: 0,
        must: false,
    };
    // Neither write of epoch 1 landed: its discard counts all the same.
    let got = states::discarded(&before, &log, &eps[1], &state(0));
    assert_eq!(got, BTreeSet::from([10, 12, 20]));
    // Both landed.
    let got = states::discarded(&before, &log, &eps[1], &state(0b11));
    assert_eq!(got, BTreeSet::from([12]));
}

/// A torn write to a discarded block takes it off the discarded set only
/// when the block reads back whole (its unlanded sectors held the write's
/// bytes already).
#[test]
fn a_torn_write_that_reads_back_whole_ends_a_discard() {
    let bs = 1024;
    let log = vec![
        RecordedOp::Discard { start: 3, count: 1 },
        w(3, 7, bs),
        RecordedOp::Flush,
    ];
    let eps = states::epochs(&log);
    let state = states::State {
        epoch: 0,
        landed: vec![0],
        torn: Some((0, 1)),
        tier: 1,
        must: false,
    };
    let RecordedOp::Write { data, .. } = &log[1] else {
        unreachable!()
    };
    let mut image = vec![0u8; 8 * bs];
    let none = BTreeSet::new();
    // The tail that did not land differs from the write's: still discarded.
    image[3 * bs..3 * bs + 512].copy_from_slice(&data[..512]);
    let got = states::discarded_in(&none, &log, &eps[0], &state, &image, bs);
    assert_eq!(got, BTreeSet::from([3]));
    // The same bytes there already: the block is the write's.
    image[3 * bs..4 * bs].copy_from_slice(data);
    let got = states::discarded_in(&none, &log, &eps[0], &state, &image, bs);
    assert!(got.is_empty(), "{got:?}");
    // Without the image's say, a torn write never ends a discard.
    assert_eq!(
        states::discarded(&none, &log, &eps[0], &state),
        BTreeSet::from([3])
    );
    // Nor does it when a discard of the block follows it.
    let mut later = log.clone();
    later.insert(2, RecordedOp::Discard { start: 3, count: 1 });
    let eps = states::epochs(&later);
    let got = states::discarded_in(&none, &later, &eps[0], &state, &image, bs);
    assert_eq!(got, BTreeSet::from([3]));
}

/// The discard check flags a recovered volume that refers to a block the
/// log discarded, and passes the same image when nothing it refers to was.
#[test]
fn the_checks_catch_a_discarded_block_in_use() {
    let rec = workloads::record("discard", 1, Fault::None).unwrap();
    assert!(
        rec.log.iter().any(|o| matches!(o, RecordedOp::Discard { .. })),
        "the workload discards"
    );
    let eps = states::epochs(&rec.log);
    let last = eps.last().unwrap();
    let w = check::window(&rec, last.start, last.end);
    let mut full = rec.base.clone();
    tux3::device::recording::apply(&rec.log, &mut full, rec.block_size);
    let dev: std::sync::Arc<dyn tux3::device::Device> =
        std::sync::Arc::new(tux3::device::MemDevice::from_image(rec.block_size, full.clone()));
    let refs = tux3_tools::fsck::referenced_blocks(dev).unwrap();
    let used = refs.iter().find(|r| r.0 > 1).unwrap().0;
    let run = |discarded: &BTreeSet<u64>| {
        check::check(
            full.clone(),
            |i: &[u8]| i == &full[..],
            &rec,
            w,
            Ordering::Strict,
            discarded,
        )
    };
    let mut free = none();
    free.extend(
        (0..rec.base.len() as u64 / rec.block_size as u64)
            .filter(|b| !refs.iter().any(|&(s, c)| (s..s + c).contains(b))),
    );
    assert!(run(&free).is_empty(), "{:?}", run(&free));
    let broken = run(&BTreeSet::from([used]));
    assert_eq!(broken.len(), 1, "{broken:?}");
    assert_eq!(broken[0].0, Promise::Discard, "{broken:?}");
    assert!(broken[0].1.contains(&format!("block {used}")), "{broken:?}");
}
