//! Tests of the allocator: pins (A1, A2), groups, runs of the right size.

use super::rooms::ROOM_DELTAS;
use super::*;

#[test]
fn freed_blocks_stay_pinned_until_durable() {
    let mut a = Allocator::new(100, 1024);
    a.apply_alloc(0, 2);
    let (s, n) = a.alloc(10, 5, true).unwrap();
    assert_eq!((s, n), (10, 5));
    a.free_range(10, 5);
    // Pinned: the next allocation must not reuse them.
    assert_eq!(a.alloc(10, 1, true).unwrap().0, 15);
    let (allocs, frees) = a.take_delta(1);
    assert_eq!(allocs, vec![(10, 6)]);
    assert_eq!(frees, vec![(10, 5)]);
    assert_eq!(a.alloc(10, 1, true).unwrap().0, 16);
    a.unpin_committed(Some(1), 0, |_| true);
    assert_eq!(a.alloc(10, 1, true).unwrap().0, 10);
}

#[test]
fn durable_frees_wait_for_the_reads_that_may_have_mapped_them() {
    let mut a = Allocator::new(100, 1024);
    a.apply_alloc(0, 2);
    assert_eq!(a.alloc(10, 4, true).unwrap(), (10, 4));
    a.free_range(10, 4);
    a.take_delta(1);
    // Durable, but a read of epoch 3 or before is in the device.
    a.unpin_committed(Some(1), 3, |e| e < 3);
    assert_eq!(a.alloc(10, 1, true).unwrap().0, 14, "held for the read");
    a.free_range(14, 1);
    a.take_delta(2);
    // The next commit's end: epoch 3's reads are done, epoch 4's not.
    a.unpin_committed(Some(2), 4, |e| e <= 3);
    assert_eq!(
        a.alloc(10, 4, true).unwrap(),
        (10, 4),
        "released once the read is done"
    );
    assert_eq!(
        a.alloc(14, 1, true).unwrap().0,
        15,
        "its own frees wait for epoch 4"
    );
    a.unpin_committed(Some(2), 5, |_| true);
    assert_eq!(a.alloc(14, 1, true).unwrap().0, 14);
}

#[test]
fn exhaustion_is_enospc() {
    let mut a = Allocator::new(10, 1024);
    a.apply_alloc(0, 2);
    for _ in 0..8 {
        a.alloc_one(0).unwrap();
    }
    assert_eq!(a.alloc_one(0).unwrap_err().errno(), Errno::ENOSPC);
    assert_eq!(a.available(), 0);
}

#[test]
#[cfg(debug_assertions)]
#[should_panic(expected = "A1: block 10 handed out while pinned")]
fn a_pinned_block_fails_a1() {
    let mut a = Allocator::new(100, 1024);
    a.apply_alloc(0, 2);
    a.alloc(10, 1, true).unwrap();
    a.free_range(10, 1);
    // The search skips it; the check itself must catch it too.
    a.check_fresh(10, 1);
}

#[test]
#[cfg(debug_assertions)]
#[should_panic(expected = "A2")]
fn unpinning_before_the_freeing_delta_is_durable_fails_a2() {
    let mut a = Allocator::new(100, 1024);
    a.apply_alloc(0, 2);
    a.alloc(10, 1, true).unwrap();
    a.free_range(10, 1);
    a.take_delta(7);
    // Only delta 6 is durable: delta 7's frees must stay pinned.
    a.unpin_committed(Some(6), 0, |_| true);
}

#[test]
#[cfg(debug_assertions)]
#[should_panic(expected = "A2")]
fn unpinning_before_the_final_flush_fails_a2() {
    let mut a = Allocator::new(100, 1024);
    a.apply_alloc(0, 2);
    a.alloc(10, 1, true).unwrap();
    a.free_range(10, 1);
    a.take_delta(7);
    a.unpin_committed(None, 0, |_| true);
}

#[test]
fn a_request_is_served_from_a_run_of_its_size() {
    let mut a = Allocator::new(1000, 1024);
    a.apply_alloc(0, 2);
    // Holes of 1, 2 and 3 blocks, then a long run from 20.
    a.apply_alloc(3, 1);
    a.apply_alloc(6, 1);
    a.apply_alloc(10, 10);
    assert_eq!(a.alloc(2, 8, true).unwrap(), (20, 8), "the holes are too short");
    assert_eq!(a.alloc(2, 2, true).unwrap(), (4, 2));
    assert_eq!(a.alloc(2, 1, true).unwrap(), (2, 1));
}

#[test]
fn with_no_run_long_enough_the_longest_is_taken() {
    let mut a = Allocator::new(100, 1024);
    a.apply_alloc(0, 100);
    a.apply_free(10, 3);
    a.apply_free(50, 5);
    a.apply_free(80, 2);
    assert_eq!(a.alloc(2, 20, true).unwrap(), (50, 5));
    assert_eq!(
        a.alloc(60, 20, true).unwrap(),
        (10, 3),
        "wraps to the longest left"
    );
}

#[test]
fn runs_cross_group_boundaries() {
    // 1 KiB blocks: 7936 blocks per group.
    let mut a = Allocator::new(30_000, 1024);
    a.apply_alloc(0, 7900);
    // The run starting in group 0's last 36 blocks goes on into the groups
    // after it: it is served there, where a stream that follows its last
    // allocation goes on, not at the next group's start (a hole of 36).
    let (s, n) = a.alloc(2, 20_000, true).unwrap();
    assert_eq!((s, n), (7900, 20_000));
    assert_eq!(a.dirty.iter().copied().collect::<Vec<_>>(), vec![0, 1, 2, 3]);
    // A run cut by a used block at the next group's start is not one.
    let mut a = Allocator::new(30_000, 1024);
    a.apply_alloc(0, 7900);
    a.apply_alloc(7936, 1);
    assert_eq!(a.alloc(2, 100, true).unwrap(), (7937, 100));
}

#[test]
fn an_empty_huge_volume_costs_little_memory_and_grows_in_place() {
    // 16 TiB of 4 KiB blocks.
    let blocks = 1u64 << 32;
    let mut a = Allocator::new(blocks, 4096);
    a.apply_alloc(0, 8);
    assert!(a.memory() < 4 << 20, "{} bytes", a.memory());
    assert_eq!(a.groups_loaded(), 1);
    assert_eq!(a.alloc(blocks - 10, 10, true).unwrap(), (blocks - 10, 10));
    a.grow(blocks + 1000);
    assert_eq!(a.available(), blocks + 1000 - 18);
    assert_eq!(a.alloc(blocks, 100, true).unwrap(), (blocks, 100));
    assert!(a.is_used(blocks + 99) && !a.is_used(blocks + 100));
}

#[test]
fn a_group_freed_whole_drops_its_bits() {
    let mut a = Allocator::new(20_000, 1024);
    a.apply_alloc(0, 2);
    let (s, n) = a.alloc(9000, 100, true).unwrap();
    assert_eq!(a.groups_loaded(), 2);
    a.free_range(s, n);
    assert!(!a.is_clear(1) || a.is_pinned(s), "pinned until durable");
    a.take_delta(1);
    a.unpin_committed(Some(1), 0, |_| true);
    assert!(a.is_clear(1));
    assert_eq!(a.groups_loaded(), 1);
    assert_eq!(a.available(), 20_000 - 2);
}

#[test]
fn released_ranges_are_taken_once_each() {
    let mut a = Allocator::new(1000, 1024);
    a.apply_alloc(0, 2);
    a.alloc(10, 10, true).unwrap();
    a.free_range(10, 4);
    a.take_delta(1);
    a.unpin_committed(Some(1), 0, |_| true);
    assert_eq!(a.take_released(), vec![(10, 4)]);
    a.free_range(14, 6);
    a.take_delta(2);
    assert!(a.take_released().is_empty(), "pinned still");
    a.unpin_committed(Some(2), 0, |_| true);
    assert_eq!(a.take_released(), vec![(14, 6)]);
    assert_eq!(a.free_runs(0, 1000, 10), vec![(2, 998)]);
}

#[test]
fn bits_round_trip_through_a_bitmap_block() {
    let mut a = Allocator::new(10_000, 1024);
    a.apply_alloc(0, 2);
    a.apply_alloc(100, 37);
    a.apply_alloc(7930, 20);
    let mut b = Allocator::new(10_000, 1024);
    for index in 0..2 {
        b.load_bits(index, &a.bits(index, 1024));
    }
    assert_eq!((b.free(), b.available()), (a.free(), a.available()));
    assert_eq!(b.free_runs(0, 10_000, 10), a.free_runs(0, 10_000, 10));
}

mod model {
    use super::super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Alloc(u64, u64),
        Free(usize),
        Commit,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u64..20_000, 1u64..3000).prop_map(|(g, w)| Op::Alloc(g, w)),
            3 => any::<usize>().prop_map(Op::Free),
            1 => Just(Op::Commit),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Against a plain model of used and pinned blocks: no block is
        /// handed out twice or while pinned, the counts agree, and every
        /// request gets a run of its size when the model has one.
        #[test]
        fn the_allocator_agrees_with_a_plain_model(ops in proptest::collection::vec(op(), 1..120)) {
            const N: u64 = 20_000;
            let mut a = Allocator::new(N, 1024);
            a.apply_alloc(0, 2);
            let mut used = vec![false; N as usize];
            let mut pinned = vec![false; N as usize];
            used[0] = true;
            used[1] = true;
            let mut live: Vec<(u64, u64)> = Vec::new();
            let mut delta = 0;
            for op in ops {
                match op {
                    Op::Alloc(goal, want) => {
                        let longest = {
                            let (mut best, mut run) = (0u64, 0u64);
                            // Runs inside one group (7936 blocks of 1 KiB).
                            for b in 0..N as usize {
                                if b % 7936 == 0 {
                                    run = 0;
                                }
                                run = if used[b] || pinned[b] { 0 } else { run + 1 };
                                best = best.max(run);
                            }
                            best
                        };
                        match a.alloc(goal, want, true) {
                            Ok((s, n)) => {
                                prop_assert!(n >= 1 && n <= want);
                                prop_assert!(n == want || n >= longest,
                                    "asked {want}, got {n}, longest free run {longest}");
                                for b in s..s + n {
                                    prop_assert!(!used[b as usize] && !pinned[b as usize], "block {b}");
                                    used[b as usize] = true;
                                }
                                live.push((s, n));
                            }
                            Err(_) => prop_assert_eq!(longest, 0),
                        }
                    }
                    Op::Free(i) if !live.is_empty() => {
                        let (s, n) = live.swap_remove(i % live.len());
                        a.free_range(s, n);
                        for b in s..s + n {
                            used[b as usize] = false;
                            pinned[b as usize] = true;
                        }
                    }
                    Op::Free(_) => {}
                    Op::Commit => {
                        delta += 1;
                        a.take_delta(delta);
                        a.unpin_committed(Some(delta), 0, |_| true);
                        pinned.iter_mut().for_each(|p| *p = false);
                    }
                }
                let free = used.iter().filter(|u| !**u).count() as u64;
                let avail = (0..N as usize).filter(|&b| !used[b] && !pinned[b]).count() as u64;
                prop_assert_eq!((a.free(), a.available()), (free, avail));
            }
            for b in 0..N {
                prop_assert_eq!(a.is_used(b), used[b as usize]);
            }
        }
    }
}

#[test]
fn a_limit_keeps_allocation_below_it_and_truncate_cuts_a_free_tail() {
    let mut a = Allocator::new(20_000, 1024);
    a.apply_alloc(0, 2);
    let (s, n) = a.alloc(15_000, 100, true).unwrap();
    a.set_limit(10_000);
    assert_eq!(a.available(), 10_000 - 2, "nothing past the limit counts");
    assert_eq!(
        a.alloc(15_000, 50, true).unwrap(),
        (2, 50),
        "wraps below the limit"
    );
    assert_eq!(a.taken_past(10_000), 100);
    assert!(!a.truncate(10_000), "block {s} is in use");
    a.free_range(s, n);
    a.take_delta(1);
    assert!(!a.truncate(10_000), "pinned still");
    a.unpin_committed(Some(1), 0, |_| true);
    assert_eq!(a.available(), 10_000 - 52);
    assert!(a.truncate(10_000));
    assert_eq!(
        (a.blocks(), a.free(), a.available()),
        (10_000, 10_000 - 52, 10_000 - 52)
    );
    assert_eq!(a.free_runs(0, u64::MAX, 10), vec![(52, 10_000 - 52)]);
    a.grow(12_000);
    assert_eq!(a.available(), 12_000 - 52);
}

/// Released ranges are the unpinned, still free blocks, coalesced,
/// once each; blocks still held for a read wait for it.
#[test]
fn released_ranges_are_unpinned_free_blocks() {
    let mut a = Allocator::new(100, 1024);
    a.apply_alloc(0, 2);
    assert_eq!(a.alloc(10, 20, true).unwrap(), (10, 20));
    a.free_range(10, 4);
    a.free_range(20, 2);
    a.free_range(14, 2);
    assert!(a.take_released().is_empty(), "pinned");
    a.take_delta(1);
    a.unpin_committed(Some(1), 0, |_| true);
    assert_eq!(a.take_released(), vec![(10, 6), (20, 2)]);
    assert!(a.take_released().is_empty(), "once");
    a.free_range(25, 2);
    a.take_delta(2);
    a.unpin_committed(Some(2), 1, |e| e < 1);
    assert!(a.take_released().is_empty(), "held for a read");
    a.take_delta(3);
    a.unpin_committed(Some(3), 2, |_| true);
    // Handed out again before the caller took it: left out.
    assert_eq!(a.alloc(26, 1, true).unwrap(), (26, 1));
    assert_eq!(a.take_released(), vec![(25, 1)]);
}

#[test]
fn free_runs_walked_in_batches_are_the_runs_there_are() {
    // 2,999 runs of one free block, across groups, then a long tail.
    let mut a = Allocator::new(20_000, 1024);
    a.apply_alloc(0, 2);
    for b in (3..6001).step_by(2) {
        a.apply_alloc(b, 1);
    }
    let all = a.free_runs(0, 20_000, usize::MAX);
    let mut walked = Vec::new();
    a.for_free_runs(0, 20_000, |s, n| {
        walked.push((s, n));
        true
    });
    assert_eq!(walked, all);
    assert_eq!(walked.len(), 3000);
    let mut first = None;
    a.for_free_runs(0, 20_000, |s, n| {
        first = Some((s, n));
        false
    });
    assert_eq!(first, Some((2, 1)));
}

#[test]
fn metadata_and_new_files_keep_out_of_a_streams_room() {
    // 16,384 blocks: a room is at most 1,024 (a sixteenth).
    let mut a = Allocator::new(16384, 4096);
    a.apply_alloc(0, 2);
    assert_eq!(a.alloc(100, 64, true).unwrap(), (100, 64));
    a.keep_room(164);
    // Metadata aimed at the stream's end goes past its room.
    assert_eq!(a.alloc_meta(164, true).unwrap(), 164 + 1024);
    // Aimed before the stream, it takes the first free block there.
    assert_eq!(a.alloc_meta(50, true).unwrap(), 50);
    // In the delta that kept it, other files' data may take it: the
    // stream may be done, and a file written after it then follows it.
    assert_eq!(a.alloc_outside_rooms(164, 4, true, None).unwrap(), (164, 4));
    a.apply_free(164, 4);
    // The next delta, while the stream writes in it: other files' data
    // keeps out, new or not; the stream's own data does not.
    a.age_rooms();
    a.streams_writing(vec![164]);
    assert_eq!(a.alloc_outside_rooms(164, 8, true, Some(100)).unwrap(), (1189, 8));
    assert_eq!(a.alloc_outside_rooms(164, 8, true, None).unwrap(), (1197, 8));
    assert_eq!(
        a.alloc_outside_rooms(164, 64, true, Some(164)).unwrap(),
        (164, 64)
    );
    // The room moves on with the stream, and the old end is filled.
    a.keep_room(228);
    a.age_rooms();
    assert_eq!(a.rooms.len(), 1, "a filled room goes at the next delta");
    // A delta the stream writes nothing in: a new file's data may take
    // its room, a file written before keeps out; metadata too.
    a.streams_writing(Vec::new());
    assert_eq!(
        a.alloc_outside_rooms(228, 8, true, Some(1189)).unwrap(),
        (1205, 8)
    );
    assert_eq!(a.alloc_meta(228, true).unwrap(), 1213);
    assert_eq!(a.alloc_outside_rooms(228, 8, true, None).unwrap(), (228, 8));
    // Rooms last ROOM_DELTAS deltas without their stream's data.
    for _ in 0..ROOM_DELTAS {
        a.age_rooms();
    }
    assert!(a.rooms.is_empty());
    assert_eq!(a.alloc_meta(236, true).unwrap(), 236);
}

#[test]
fn a_room_gives_way_when_nothing_else_is_free() {
    let mut a = Allocator::new(1024, 4096);
    a.apply_alloc(0, 1000);
    a.keep_room(1000);
    // All that is free lies in the room: metadata takes it.
    assert_eq!(a.alloc_meta(0, true).unwrap(), 1000);
    assert_eq!(a.alloc_outside_rooms(0, 4, true, None).unwrap(), (1001, 4));
}
