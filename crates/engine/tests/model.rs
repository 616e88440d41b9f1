//! Model-based tests of the engine API (`tux3::Fs`).
//!
//! Random sequences of every API operation run on the engine and on an
//! in-memory reference model (tests/model/reference.rs); results, attributes
//! and directory contents are compared after every step, and the whole tree
//! after every close/reopen and crash/reopen (so replay and unify run on
//! states the model knows). Failures shrink to a minimal sequence.
//!
//! Deterministic companions: one directory of 100,000 entries (lookup,
//! readdir completeness and stability, cold-cache cost of lookup, create and
//! unlink), and files written at 5 GiB and 2^40.
//!
//! Not compared: times (except those setattr returns right after setting
//! them), directory sizes, `blocks` (only bounded for sparse files).
//!
//! Run: `cargo test --release --test model`. The model checks itself without
//! the engine: `cargo test --test model self_check`.

#[path = "model/gen.rs"]
mod gen;
#[path = "model/harness.rs"]
mod harness;
#[path = "model/invariants.rs"]
mod invariants;
#[path = "model/ops.rs"]
mod ops;
#[path = "model/reference.rs"]
mod reference;
#[path = "model/self_check.rs"]
mod self_check;
#[path = "model/seq.rs"]
mod seq;

use gen::op;
use harness::{engine_readdir, open_opts, Harness};
use ops::{Action, GIB, N};
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use tux3::{SetAttr, ROOT_INO};

/// 64 MiB: far more than a few hundred operations of at most 20 KiB need, so
/// ENOSPC never happens in the random test.
const BLOCKS: u64 = 16384;
const CASES: u32 = 64;
const MIN_OPS: usize = 160;
const MAX_OPS: usize = 240;
const _: () = assert!(CASES as usize * MIN_OPS >= 10_000);

proptest! {
    #![proptest_config(ProptestConfig {
        cases: CASES,
        max_shrink_iters: 8192,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// At least CASES * MIN_OPS = 10,240 random operations per run.
    #[test]
    fn model_random_ops(
        unify_log_blocks in prop_oneof![Just(4u64), Just(32), Just(256)],
        // 1: every commit lets go of every inode it may (see
        // frontend/evict.rs), and of every directory leaf it may, so later
        // steps load them again.
        inode_limit in prop_oneof![Just(1usize), Just(usize::MAX)],
        ops in seq::seq(op(), MIN_OPS, MAX_OPS),
    ) {
        // (A directory's leaves have a bound of the same size.)
        let opts = tux3::OpenOptions { inode_limit, dir_leaf_limit: inode_limit, ..open_opts(unify_log_blocks) };
        let mut h = Harness::new(BLOCKS, opts).map_err(TestCaseError::fail)?;
        h.run(&ops).map_err(TestCaseError::fail)?;
    }
}

fn go(h: &mut Harness, a: Action) {
    if let Err(e) = h.step(&a) {
        panic!("{e}");
    }
}

fn name(s: &str) -> N {
    N(s.as_bytes().to_vec())
}

fn ino_of(h: &Harness, dir: u64, s: &str) -> u64 {
    h.model.inodes[&dir].entries[s.as_bytes()]
}

fn truncate(ino: u64, size: u64) -> Action {
    Action::SetAttr {
        ino,
        set: SetAttr {
            size: Some(size),
            ..SetAttr::default()
        },
    }
}

#[test]
fn model_big_offsets() {
    let mut h = Harness::new(BLOCKS, open_opts(256)).unwrap();
    let create = |n: &str| Action::Create {
        dir: ROOT_INO,
        name: name(n),
        perm: 0o644,
        uid: 0,
        gid: 0,
    };
    go(&mut h, create("big"));
    go(&mut h, create("grow"));
    let big = ino_of(&h, ROOT_INO, "big");
    let grow = ino_of(&h, ROOT_INO, "grow");
    let write = |ino, offset, len, seed| Action::Write {
        ino,
        offset,
        len,
        seed,
    };
    let read = |ino, offset, len| Action::Read { ino, offset, len };
    for a in [
        write(big, 5 * GIB, 10_000, 7),
        write(big, 1 << 40, 5000, 9),
        write(big, 4 * GIB - 3000, 6000, 11),
        read(big, 5 * GIB - 100, 10_200),
        read(big, (1 << 40) - 10, 6000),
        read(big, 4 * GIB - 4096, 8192),
        read(big, 2 * GIB, 4096),
        read(big, (1 << 40) + 4990, 100),
        Action::Sync,
        truncate(big, 3 * GIB + 17),
        read(big, 5 * GIB, 100),
        read(big, 3 * GIB, 100),
        truncate(big, 6 * GIB),
        read(big, 5 * GIB, 10_000),
        read(big, 4 * GIB - 3000, 6000),
        write(big, 5 * GIB + 4000, 100, 13),
        write(grow, 0, 100, 3),
        truncate(grow, 5 * GIB),
        write(grow, 5 * GIB - 50, 100, 5),
        write(grow, 1 << 32, 4096, 6),
        truncate(grow, (1 << 32) + 100),
        truncate(grow, (1 << 32) + 8192),
        Action::Reopen,
        read(grow, (1 << 32) - 10, 8300),
        truncate(big, 4 * GIB + 1),
        write(big, 1 << 40, 10, 1),
        Action::Crash,
        read(big, 1 << 40, 10),
        Action::Unify,
        Action::Reopen,
    ] {
        go(&mut h, a);
    }
    for ino in [big, grow] {
        let attr = h.fs().getattr(ino).unwrap();
        assert!(
            attr.blocks <= 2048,
            "sparse file {ino} of {} bytes holds {} sectors",
            attr.size,
            attr.blocks
        );
    }
}

/// xorshift64: deterministic choices without a random-number crate.
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// Cold-cache cost bound of one lookup, create or unlink in a huge directory.
const COLD_BLOCKS: u64 = 8;

#[test]
fn model_large_directory() {
    const ENTRIES: usize = 100_000;
    let mut h = Harness::new(65536, open_opts(256)).unwrap();
    h.light = true;
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    go(
        &mut h,
        Action::Mkdir {
            dir: ROOT_INO,
            name: name("big"),
            perm: 0o755,
            uid: 0,
            gid: 0,
        },
    );
    let dir = ino_of(&h, ROOT_INO, "big");
    // Names of the non-directory entries, for random unlinks and renames.
    let mut files: Vec<String> = Vec::new();
    let (mut i, mut synced, mut reopened) = (0usize, false, false);
    let live = |h: &Harness| h.model.inodes[&dir].entries.len();
    while live(&h) < ENTRIES {
        i += 1;
        let n = format!("entry-{i:07}");
        if i % 1000 == 500 {
            go(
                &mut h,
                Action::Mkdir {
                    dir,
                    name: name(&n),
                    perm: 0o755,
                    uid: 0,
                    gid: 0,
                },
            );
        } else {
            go(
                &mut h,
                Action::Create {
                    dir,
                    name: name(&n),
                    perm: 0o644,
                    uid: 1,
                    gid: 1,
                },
            );
            files.push(n);
        }
        if i % 7 == 0 {
            let victim = files.swap_remove(rng.below(files.len()));
            go(
                &mut h,
                Action::Unlink {
                    dir,
                    name: name(&victim),
                },
            );
        }
        if i % 13 == 0 {
            // Half of the renames land on an existing file, replacing it.
            let from = files.swap_remove(rng.below(files.len()));
            let to = if i % 26 == 0 {
                files[rng.below(files.len())].clone()
            } else {
                files.push(format!("renamed-{i:07}"));
                files.last().unwrap().clone()
            };
            let flags = tux3::RenameFlags::default();
            go(
                &mut h,
                Action::Rename {
                    dir,
                    name: name(&from),
                    newdir: dir,
                    newname: name(&to),
                    flags,
                },
            );
        }
        if !synced && live(&h) >= ENTRIES / 2 {
            synced = true;
            go(&mut h, Action::Sync);
        }
        if !reopened && live(&h) >= ENTRIES * 3 / 4 {
            reopened = true;
            go(&mut h, Action::Reopen);
        }
    }
    assert!(synced && reopened);
    // Every entry by lookup and by readdir, each exactly once.
    h.check_tree().unwrap();

    // Readdir positions stay valid while entries come and go.
    let initial: BTreeSet<Vec<u8>> = h.model.inodes[&dir].entries.keys().cloned().collect();
    let (mut removed, mut added) = (BTreeSet::new(), BTreeSet::new());
    let mut seen: BTreeMap<Vec<u8>, u32> = BTreeMap::new();
    let mut pos = 0;
    let mut batches = 0;
    loop {
        let batch = h.fs().readdir(dir, pos, 1000).unwrap();
        let Some(last) = batch.last() else { break };
        pos = last.next;
        batches += 1;
        assert!(batches < 1000, "readdir does not terminate");
        for e in &batch {
            *seen.entry(e.name.clone()).or_default() += 1;
        }
        for k in 0..40 {
            let victim = files.swap_remove(rng.below(files.len()));
            go(
                &mut h,
                Action::Unlink {
                    dir,
                    name: name(&victim),
                },
            );
            removed.insert(victim.into_bytes());
            if k % 2 == 0 {
                let n = format!("added-{batches:04}-{k:02}");
                go(
                    &mut h,
                    Action::Create {
                        dir,
                        name: name(&n),
                        perm: 0o600,
                        uid: 0,
                        gid: 0,
                    },
                );
                added.insert(n.clone().into_bytes());
                files.push(n);
            }
        }
    }
    for (n, &count) in &seen {
        assert_eq!(count, 1, "readdir returned {:?} {count} times", N(n.clone()));
        assert!(
            initial.contains(n) || added.contains(n),
            "readdir returned unknown {:?}",
            N(n.clone())
        );
    }
    for n in initial.difference(&removed) {
        assert!(
            seen.contains_key(n),
            "entry {:?} present throughout was not returned",
            N(n.clone())
        );
    }
    let all = engine_readdir(h.fs(), dir, 1000, ENTRIES).unwrap();
    assert_eq!(
        all,
        h.model.readdir(dir).unwrap(),
        "readdir after the concurrent scan"
    );

    // Cold-cache cost: O(log n) blocks for one lookup, one create, one unlink.
    h.reopen_unchecked(false).unwrap();
    let existing = files[rng.below(files.len())].clone();
    let before = h.fs().counters().blocks_read;
    h.fs().lookup(dir, existing.as_bytes()).unwrap();
    let cost = h.fs().counters().blocks_read - before;
    assert!(
        cost <= COLD_BLOCKS,
        "cold lookup in a {ENTRIES}-entry directory read {cost} blocks"
    );
    h.reopen_unchecked(false).unwrap();
    let cost = h.step_counted(&Action::Create {
        dir,
        name: name("cold-create"),
        perm: 0o644,
        uid: 0,
        gid: 0,
    });
    let cost = cost.unwrap();
    assert!(
        cost <= COLD_BLOCKS,
        "cold create in a {ENTRIES}-entry directory read {cost} blocks"
    );
    h.reopen_unchecked(false).unwrap();
    let victim = files.swap_remove(rng.below(files.len()));
    let cost = h
        .step_counted(&Action::Unlink {
            dir,
            name: name(&victim),
        })
        .unwrap();
    assert!(
        cost <= COLD_BLOCKS,
        "cold unlink in a {ENTRIES}-entry directory read {cost} blocks"
    );
    h.reopen(false).unwrap();
}
