//! Scenario: a dedupe compares its two ranges without the guard and shares
//! them under it; a change to either range between the compare and the
//! share (a write left in cache, a write committed, a write to the source)
//! must never be lost: the share happens only if neither range changed,
//! else the ranges are read again and shared only if still equal.

use std::sync::Arc;
use tux3::device::{Device, MemDevice};
use tux3::{FormatOptions, Fs, Ino, OpenOptions, ROOT_INO};

const BS: u64 = 4096;
const LEN: u64 = 8 * BS;

fn fsck(mem: &Arc<MemDevice>) {
    let r = tux3_tools::fsck::check(mem.clone(), &Default::default()).unwrap();
    assert!(r.problems.is_empty(), "fsck: {:?}", r.problems);
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(29).wrapping_add(seed) ^ (i >> 12) as u8)
        .collect()
}

/// A volume with files `a` and `b` holding the same `LEN` bytes, committed.
fn two_equal() -> (Arc<MemDevice>, Fs, Ino, Ino, Vec<u8>) {
    let mem = Arc::new(MemDevice::new(BS as u32, 8192));
    let dev: Arc<dyn Device> = mem.clone();
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    let fs = Fs::open(dev, OpenOptions::default()).unwrap();
    let data = pattern(3, LEN as usize);
    let a = fs.create(ROOT_INO, b"a", 0o644, 0, 0).unwrap().ino;
    let b = fs.create(ROOT_INO, b"b", 0o644, 0, 0).unwrap().ino;
    fs.write(a, 0, &data).unwrap();
    fs.write(b, 0, &data).unwrap();
    fs.sync().unwrap();
    (mem, fs, a, b, data)
}

/// Dedupe `a` into `b` whole, running `change` once between the first
/// compare and the share; the answer and the times `between` ran.
fn dedupe_with(fs: &Fs, a: Ino, b: Ino, mut change: impl FnMut(&Fs)) -> (Option<u64>, u32) {
    let mut ran = 0;
    let r = fs
        .dedupe_range_between(a, 0, b, 0, LEN, &mut || {
            if ran == 0 {
                change(fs);
            }
            ran += 1;
        })
        .unwrap();
    (r, ran)
}

/// The change made after the first compare was seen: the ranges were
/// compared again. (A commit the engine starts on its own in between, as
/// one may under load, costs a further try; that is no loss.)
fn read_again(ran: u32) {
    assert!(ran >= 2, "not read again after the change ({ran} compare)");
}

fn finish(mem: &Arc<MemDevice>, fs: Fs, expect: &[(Ino, &[u8])]) {
    for (ino, want) in expect {
        assert_eq!(fs.read(*ino, 0, LEN as usize).unwrap(), *want);
    }
    fs.close().unwrap();
    fsck(mem);
    let fs = Fs::open(mem.clone(), OpenOptions::default()).unwrap();
    for (ino, want) in expect {
        assert_eq!(fs.read(*ino, 0, LEN as usize).unwrap(), *want, "after reopening");
    }
    fs.close().unwrap();
}

#[test]
fn without_a_race_the_ranges_are_shared_at_the_first_try() {
    let (mem, fs, a, b, data) = two_equal();
    assert_eq!(dedupe_with(&fs, a, b, |_| ()), (Some(LEN), 1));
    assert_eq!(fs.sharing().saved_blocks, LEN / BS);
    finish(&mem, fs, &[(a, &data), (b, &data)]);
}

#[test]
fn a_write_to_the_destination_in_cache_between_is_kept() {
    let (mem, fs, a, b, data) = two_equal();
    let mut changed = data.clone();
    changed[(3 * BS + 7) as usize] ^= 0x5a;
    let (r, ran) = dedupe_with(&fs, a, b, |fs| {
        fs.write(b, 3 * BS + 7, &changed[(3 * BS + 7) as usize..][..1])
            .unwrap();
    });
    assert_eq!(r, None, "shared over a write made after the compare");
    read_again(ran);
    assert_eq!(fs.sharing().saved_blocks, 0);
    finish(&mem, fs, &[(a, &data), (b, &changed)]);
}

#[test]
fn a_write_to_the_destination_committed_between_is_kept() {
    let (mem, fs, a, b, data) = two_equal();
    let mut changed = data.clone();
    changed[BS as usize..2 * BS as usize].fill(9);
    let (r, ran) = dedupe_with(&fs, a, b, |fs| {
        fs.write(b, BS, &changed[BS as usize..2 * BS as usize]).unwrap();
        fs.sync().unwrap();
    });
    assert_eq!(r, None);
    read_again(ran);
    assert_eq!(fs.sharing().saved_blocks, 0);
    finish(&mem, fs, &[(a, &data), (b, &changed)]);
}

#[test]
fn a_write_to_the_source_between_is_kept() {
    let (mem, fs, a, b, data) = two_equal();
    let mut changed = data.clone();
    changed[(LEN - 1) as usize] ^= 1;
    let (r, ran) = dedupe_with(&fs, a, b, |fs| {
        fs.write(a, LEN - 1, &changed[(LEN - 1) as usize..]).unwrap();
    });
    assert_eq!(r, None);
    read_again(ran);
    finish(&mem, fs, &[(a, &changed), (b, &data)]);
}

#[test]
fn a_change_that_leaves_the_bytes_equal_is_read_again_and_shared() {
    let (mem, fs, a, b, data) = two_equal();
    let (r, ran) = dedupe_with(&fs, a, b, |fs| {
        fs.write(b, 2 * BS, &data[2 * BS as usize..3 * BS as usize])
            .unwrap();
    });
    assert_eq!(r, Some(LEN));
    read_again(ran);
    assert_eq!(fs.sharing().saved_blocks, LEN / BS);
    finish(&mem, fs, &[(a, &data), (b, &data)]);
}

#[test]
fn a_range_changed_at_every_try_is_compared_under_the_guard() {
    let (mem, fs, a, b, data) = two_equal();
    let mut n = 0u8;
    let mut last = data.clone();
    let r = fs
        .dedupe_range_between(a, 0, b, 0, LEN, &mut || {
            n += 1;
            last[0] = data[0].wrapping_add(n);
            fs.write(b, 0, &last[..1]).unwrap();
        })
        .unwrap();
    assert_eq!(r, None);
    assert!(n >= 2, "tried {n} times");
    finish(&mem, fs, &[(a, &data), (b, &last)]);
}
