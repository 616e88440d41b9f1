//! `tux3_tools::dedupe` on memory volumes: what it finds (whole files,
//! shared prefixes and suffixes, a file repeating itself, sparse files,
//! unaligned sizes, zero blocks), how it cuts calls, its index bound, that
//! a dry run changes nothing, and that after a real run every file reads
//! back as before (and, once the core shares extents, that the duplicate
//! blocks come back as free space).

use std::collections::BTreeMap;
use std::sync::Arc;
use tux3::device::{Device, MemDevice};
use tux3::{FormatOptions, Fs, OpenOptions, ROOT_INO};
use tux3_tools::dedupe::{self, Control, Options, Outcome, Report};

const BS: u64 = 4096;

fn volume() -> (Arc<dyn Device>, Fs) {
    let dev: Arc<dyn Device> = Arc::new(MemDevice::new(BS as u32, 16384));
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    (dev, fs)
}

/// A block of bytes that only `seed` makes.
fn blk(seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..BS)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Blocks made from `seeds`, concatenated.
fn blocks(seeds: impl IntoIterator<Item = u64>) -> Vec<u8> {
    seeds.into_iter().flat_map(blk).collect()
}

fn put(fs: &Fs, dir: u64, name: &str, data: &[u8]) -> u64 {
    let a = fs.create(dir, name.as_bytes(), 0o644, 0, 0).unwrap();
    fs.write(a.ino, 0, data).unwrap();
    a.ino
}

/// Every file's contents, by path, from the root (the model to compare with).
fn contents(fs: &Fs) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![(ROOT_INO, String::new())];
    while let Some((dir, path)) = stack.pop() {
        for e in fs.readdir(dir, 0, 10_000).unwrap() {
            let p = format!("{path}/{}", String::from_utf8_lossy(&e.name));
            let a = fs.getattr(e.ino).unwrap();
            match e.kind {
                tux3::FileType::Directory => stack.push((e.ino, p)),
                _ => {
                    out.insert(p, fs.read(e.ino, 0, a.size as usize + 1).unwrap());
                }
            }
        }
    }
    out
}

/// Run with `opts` over `paths`; the report and the pairs as text.
fn run_with(fs: &Fs, paths: &[&str], opts: &Options) -> (Report, Vec<String>) {
    let mut pairs = Vec::new();
    let paths: Vec<Vec<u8>> = paths.iter().map(|p| p.as_bytes().to_vec()).collect();
    let r = dedupe::run(fs, ROOT_INO, &paths, opts, &Control::default(), &mut |p| {
        pairs.push(format!(
            "{}@{} {}@{} {} {:?}",
            p.src,
            p.src_off / BS,
            p.dst,
            p.dst_off / BS,
            p.len / BS,
            p.outcome
        ))
    })
    .unwrap();
    assert!(r.failures.is_empty(), "{:?}", r.failures);
    (r, pairs)
}

fn run(fs: &Fs) -> (Report, Vec<String>) {
    run_with(fs, &[], &Options::default())
}

#[test]
fn identical_files_share_in_one_call() {
    let (_, fs) = volume();
    let data = blocks(0..40);
    put(&fs, ROOT_INO, "a", &data);
    put(&fs, ROOT_INO, "b", &data);
    let before = contents(&fs);
    let (r, pairs) = run(&fs);
    assert_eq!(r.files, 2);
    assert_eq!(r.bytes_scanned, 80 * BS);
    assert_eq!(r.dup_bytes, 40 * BS);
    assert_eq!(r.shared_bytes, 40 * BS);
    assert_eq!((r.calls, r.differing, r.zero_bytes), (1, 0, 0));
    assert_eq!(pairs, ["/a@0 /b@0 40 Shared"]);
    assert_eq!(contents(&fs), before);
}

#[test]
fn a_shared_prefix_and_suffix_are_two_calls() {
    let (_, fs) = volume();
    put(&fs, ROOT_INO, "a", &blocks((0..10).chain(100..105).chain(20..30)));
    put(&fs, ROOT_INO, "b", &blocks((0..10).chain(200..207).chain(20..30)));
    let before = contents(&fs);
    let (r, pairs) = run(&fs);
    assert_eq!(r.dup_bytes, 20 * BS);
    assert_eq!(r.shared_bytes, 20 * BS);
    assert_eq!(pairs, ["/a@0 /b@0 10 Shared", "/a@15 /b@17 10 Shared"]);
    assert_eq!(contents(&fs), before);
}

#[test]
fn a_file_repeating_itself_shares_with_itself() {
    let (_, fs) = volume();
    put(&fs, ROOT_INO, "f", &blocks((0..8).chain(50..54).chain(0..8)));
    let before = contents(&fs);
    let (r, pairs) = run(&fs);
    assert_eq!(r.dup_bytes, 8 * BS);
    assert_eq!(pairs, ["/f@0 /f@12 8 Shared"]);
    assert_eq!(contents(&fs), before);
}

#[test]
fn a_block_repeated_within_a_run_breaks_it_but_never_overlaps() {
    let (_, fs) = volume();
    // A B A B A B: the second A B is the first's, the third A B too.
    put(&fs, ROOT_INO, "f", &blocks([1, 2, 1, 2, 1, 2]));
    let before = contents(&fs);
    let (r, pairs) = run(&fs);
    assert_eq!(r.dup_bytes, 4 * BS);
    assert_eq!(pairs, ["/f@0 /f@2 2 Shared", "/f@0 /f@4 2 Shared"]);
    assert_eq!(contents(&fs), before);
}

#[test]
fn holes_are_skipped_and_data_around_them_shared() {
    let (_, fs) = volume();
    for name in ["a", "b"] {
        let a = fs.create(ROOT_INO, name.as_bytes(), 0o644, 0, 0).unwrap();
        fs.write(a.ino, 0, &blocks(0..3)).unwrap();
        fs.write(a.ino, 100 * BS, &blocks(10..14)).unwrap();
    }
    let before = contents(&fs);
    let (r, pairs) = run(&fs);
    assert_eq!(r.bytes_scanned, 14 * BS, "holes are not read");
    assert_eq!(r.zero_bytes, 0);
    assert_eq!(r.dup_bytes, 7 * BS);
    assert_eq!(pairs, ["/a@0 /b@0 3 Shared", "/a@100 /b@100 4 Shared"]);
    assert_eq!(contents(&fs), before);
}

#[test]
fn only_full_blocks_count() {
    let (_, fs) = volume();
    let mut data = blocks(0..3);
    data.extend_from_slice(&blk(9)[..100]);
    put(&fs, ROOT_INO, "a", &data);
    put(&fs, ROOT_INO, "b", &data);
    put(&fs, ROOT_INO, "small", &data[..1000]);
    let before = contents(&fs);
    let (r, pairs) = run(&fs);
    assert_eq!(r.files, 3);
    assert_eq!(r.bytes_scanned, 6 * BS, "tails are not read");
    assert_eq!(pairs, ["/a@0 /b@0 3 Shared"]);
    assert_eq!(contents(&fs), before);
}

#[test]
fn zero_blocks_are_counted_not_shared_unless_asked() {
    let (_, fs) = volume();
    let zeros = vec![0u8; 6 * BS as usize];
    put(&fs, ROOT_INO, "a", &zeros);
    put(&fs, ROOT_INO, "b", &zeros);
    let (r, pairs) = run(&fs);
    assert_eq!(r.zero_bytes, 12 * BS);
    assert_eq!((r.dup_bytes, r.calls), (0, 0));
    assert!(pairs.is_empty());
    let opts = Options {
        zeros: true,
        ..Options::default()
    };
    let (r, pairs) = run_with(&fs, &[], &opts);
    assert_eq!(r.zero_bytes, 12 * BS);
    // Every zero block after the first is the first's.
    assert_eq!(r.dup_bytes, 11 * BS);
    assert_eq!(pairs[0], "/a@0 /a@1 1 Shared");
    assert_eq!(pairs.last().unwrap(), "/a@0 /b@5 1 Shared");
}

#[test]
fn calls_are_cut_at_the_cap() {
    let (_, fs) = volume();
    let data = blocks(0..20);
    put(&fs, ROOT_INO, "a", &data);
    put(&fs, ROOT_INO, "b", &data);
    let opts = Options {
        max_call: 8 * BS,
        ..Options::default()
    };
    let (r, pairs) = run_with(&fs, &[], &opts);
    assert_eq!(r.shared_bytes, 20 * BS);
    assert_eq!(
        pairs,
        ["/a@0 /b@0 8 Shared", "/a@8 /b@8 8 Shared", "/a@16 /b@16 4 Shared"]
    );
}

#[test]
fn a_full_index_stops_growing_but_still_matches() {
    let (_, fs) = volume();
    put(&fs, ROOT_INO, "a", &blocks(0..4));
    put(&fs, ROOT_INO, "b", &blocks(0..4));
    let opts = Options {
        max_index: 2,
        ..Options::default()
    };
    let (r, pairs) = run_with(&fs, &[], &opts);
    // a@2, a@3, and b@2, b@3 (which match nothing indexed).
    assert_eq!(r.unindexed_bytes, 4 * BS);
    assert_eq!(pairs, ["/a@0 /b@0 2 Shared"]);
}

#[test]
fn only_the_paths_given_are_walked() {
    let (_, fs) = volume();
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap().ino;
    let e = fs.mkdir(d, b"e", 0o755, 0, 0).unwrap().ino;
    let data = blocks(0..5);
    put(&fs, ROOT_INO, "top", &data);
    put(&fs, d, "x", &data);
    put(&fs, e, "y", &data);
    let (r, pairs) = run_with(&fs, &["d"], &Options::default());
    assert_eq!(r.files, 2);
    // Blocks are read in device order: x, written first, is the source.
    assert_eq!(pairs, ["/d/x@0 /d/e/y@0 5 Shared"]);
    let (r, pairs) = run_with(&fs, &["/top", "d/x", "top"], &Options::default());
    assert_eq!(r.files, 2, "each file once");
    assert_eq!(pairs, ["/top@0 /d/x@0 5 Shared"]);
}

#[test]
fn a_dry_run_changes_nothing() {
    let (_, fs) = volume();
    let data = blocks(0..64);
    put(&fs, ROOT_INO, "a", &data);
    put(&fs, ROOT_INO, "b", &data);
    fs.sync().unwrap();
    let before = (contents(&fs), fs.statfs().unwrap());
    let opts = Options {
        dry_run: true,
        ..Options::default()
    };
    let (r, pairs) = run_with(&fs, &[], &opts);
    assert_eq!((r.dup_bytes, r.shared_bytes, r.calls), (64 * BS, 0, 0));
    assert_eq!(pairs, ["/a@0 /b@0 64 Found"]);
    fs.sync().unwrap();
    assert_eq!((contents(&fs), fs.statfs().unwrap()), before);
}

/// A mix of everything above, as a model.
fn mixed(fs: &Fs) -> u64 {
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap().ino;
    let big = blocks(0..300);
    put(fs, ROOT_INO, "big", &big);
    put(fs, d, "big2", &big);
    let mut tail = blocks(300..310);
    tail.extend_from_slice(&[7; 999]);
    put(fs, d, "tail", &tail);
    put(fs, d, "tail2", &tail);
    put(fs, ROOT_INO, "half", &blocks((0..50).chain(1000..1050)));
    // Duplicate blocks: 300 + 10 + 50.
    360
}

#[test]
fn after_a_run_every_file_reads_as_before() {
    let (dev, fs) = volume();
    let dups = mixed(&fs);
    fs.sync().unwrap();
    let before = contents(&fs);
    let (r, _) = run(&fs);
    assert_eq!(r.dup_bytes, dups * BS);
    assert_eq!(r.shared_bytes, dups * BS);
    assert_eq!(contents(&fs), before);
    fs.close().unwrap();
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    assert_eq!(contents(&fs), before, "after a remount");
    fs.close().unwrap();
    let report = tux3_tools::fsck::check(dev, &Default::default()).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}

#[test]
fn the_duplicate_blocks_come_back_as_free_space() {
    let (_, fs) = volume();
    let dups = mixed(&fs);
    fs.sync().unwrap();
    let free = fs.statfs().unwrap().blocks_free;
    let (r, _) = run(&fs);
    assert_eq!(r.shared_bytes, dups * BS);
    fs.sync().unwrap();
    let now = fs.statfs().unwrap().blocks_free;
    // Metadata (the shared-extent table, tree leaves) may take a few.
    assert!(
        now >= free + dups - 16,
        "free {free} -> {now}, {dups} duplicate blocks"
    );
    assert!(fs.sharing().saved_blocks >= dups);
    // A second run finds them shared already (the same device blocks):
    // no call, nothing more comes back.
    let (r, _) = run(&fs);
    assert_eq!((r.calls, r.shared_bytes, r.dup_bytes), (0, 0, 0));
    fs.sync().unwrap();
    assert!(fs.statfs().unwrap().blocks_free + 16 >= now);
}

#[test]
fn a_change_after_hashing_is_caught_by_the_comparison() {
    let (_, fs) = volume();
    put(&fs, ROOT_INO, "a", &blocks((0..4).chain(100..101).chain(10..14)));
    let b = put(&fs, ROOT_INO, "b", &blocks((0..4).chain(200..201).chain(10..14)));
    let mut outcomes = Vec::new();
    // b is hashed before the first call: a write then (as one through a
    // mount might be) changes what the second call compares (made by the
    // matcher itself, after the first is reported).
    let opts = Options {
        callers: 0,
        ..Options::default()
    };
    let r = dedupe::run(&fs, ROOT_INO, &[], &opts, &Control::default(), &mut |p| {
        if outcomes.is_empty() {
            fs.write(b, 6 * BS, &blk(999)).unwrap();
        }
        outcomes.push(p.outcome);
    })
    .unwrap();
    assert_eq!(outcomes, [Outcome::Shared, Outcome::Differed]);
    assert_eq!((r.calls, r.differing, r.shared_bytes), (2, 1, 4 * BS));
    assert_eq!(fs.read(b, 6 * BS, BS as usize).unwrap(), blk(999));
}

#[test]
fn small_files_are_read_from_the_device_in_long_reads() {
    let (dev, fs) = volume();
    // Two copies of 300 files of two blocks each: 1,200 blocks in 600
    // files, written one after another.
    for copy in 0..2 {
        for k in 0..300u64 {
            put(
                &fs,
                ROOT_INO,
                &format!("c{copy}-{k}"),
                &blocks([2 * k, 2 * k + 1]),
            );
        }
    }
    fs.close().unwrap();
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    let reads = dev.counters().reads;
    let opts = Options {
        dry_run: true,
        ..Options::default()
    };
    let (r, pairs) = run_with(&fs, &[], &opts);
    let used = dev.counters().reads - reads;
    assert_eq!(r.dup_bytes, 600 * BS);
    assert_eq!(pairs.len(), 300, "one pair a file");
    // The data lies in one stretch of 1,200 blocks: two reads of 4 MiB
    // (one a file would be 600), plus the metadata's (the inode table and
    // the root directory's leaves).
    assert!(used < 60, "{used} device reads");
    fs.close().unwrap();
}

/// The calls compare the bytes the readers read (the volume idle, no
/// write between): the data is read from the device once, not again by
/// each call; with nothing kept, each call reads both sides again.
#[test]
fn the_calls_compare_what_was_read_without_reading_it_again() {
    let blocks_read = |keep_bytes: usize| {
        let (dev, fs) = volume();
        for copy in 0..2 {
            for k in 0..50u64 {
                put(
                    &fs,
                    ROOT_INO,
                    &format!("c{copy}-{k}"),
                    &blocks([4 * k, 4 * k + 1, 4 * k + 2, 4 * k + 3]),
                );
            }
        }
        fs.close().unwrap();
        let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
        let before = dev.counters().blocks_read;
        let opts = Options {
            keep_bytes,
            ..Options::default()
        };
        let (r, pairs) = run_with(&fs, &[], &opts);
        assert_eq!((r.shared_bytes, pairs.len()), (200 * BS, 50));
        let read = dev.counters().blocks_read - before;
        let after = contents(&fs);
        fs.close().unwrap();
        for k in 0..50 {
            assert_eq!(after[&format!("/c1-{k}")], after[&format!("/c0-{k}")]);
        }
        read
    };
    let (kept, not_kept) = (blocks_read(Options::default().keep_bytes), blocks_read(0));
    // 400 data blocks, read once, plus metadata; the calls' own reads
    // add 400 more (a few of them found in the cache).
    assert!(kept < 600, "{kept} blocks read with the bytes kept");
    assert!(
        not_kept >= kept + 350,
        "{not_kept} blocks read without, {kept} with"
    );
}
