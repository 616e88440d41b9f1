//! Preallocated (unwritten) extents through the offline tools: under
//! snapshots, writes fill preallocated blocks in place while each snapshot
//! still reads what it held; punched and zeroed blocks a snapshot holds go
//! to the dead list; fsck finds nothing wrong (unwritten extents past the
//! end of file included), `tux3 dump` marks unwritten extents, and a send
//! stream carries them as holes, so the received snapshots read the same.

mod stream_util;
use stream_util::*;

const BS: u64 = 4096;
const KEEP: i32 = libc::FALLOC_FL_KEEP_SIZE;
const PUNCH: i32 = libc::FALLOC_FL_PUNCH_HOLE;
const ZERO: i32 = libc::FALLOC_FL_ZERO_RANGE;

fn read_all(fs: &Fs, name: &str) -> Vec<u8> {
    let a = fs.lookup(ROOT_INO, name.as_bytes()).unwrap();
    fs.read(a.ino, 0, a.size as usize + 1).unwrap()
}

/// `bytes` as runs of equal bytes (`value x count`), short in a failure.
fn runs(bytes: &[u8]) -> Vec<(u8, usize)> {
    let mut out: Vec<(u8, usize)> = Vec::new();
    for &b in bytes {
        match out.last_mut() {
            Some((v, n)) if *v == b => *n += 1,
            _ => out.push((b, 1)),
        }
    }
    out
}

#[test]
fn preallocation_under_snapshots_checks_clean_and_sends_as_holes() {
    let src = device(16384);
    let fs = open(&src);
    let f = file(&fs, ROOT_INO, "f", &[5u8; 10000]);
    fs.fallocate(f, KEEP, 0, 64 * BS).unwrap();
    fs.fallocate(f, 0, 64 * BS, 16 * BS).unwrap();
    // Preallocated past the end, never written.
    fs.fallocate(f, KEEP, 100 * BS, 8 * BS).unwrap();
    let mut s1 = vec![0u8; 80 * BS as usize];
    s1[..10000].fill(5);
    assert_eq!(runs(&read_all(&fs, "f")), runs(&s1));
    fs.snapshot_create(b"s1").unwrap();

    let mut now = s1.clone();
    fs.write(f, 20 * BS, &[6; 8 * BS as usize]).unwrap();
    now[20 * BS as usize..28 * BS as usize].fill(6);
    fs.fallocate(f, PUNCH | KEEP, 0, BS).unwrap();
    now[..BS as usize].fill(0);
    fs.fallocate(f, ZERO, BS + 100, 2 * BS).unwrap();
    now[BS as usize + 100..10000].fill(0);
    fs.sync().unwrap();
    assert_eq!(runs(&read_all(&fs, "f")), runs(&now));
    fs.snapshot_create(b"s2").unwrap();
    fs.unify().unwrap();
    fs.close().unwrap();

    assert_eq!(
        runs(&read_all(&open_snapshot(&src, "s1"), "f")),
        runs(&s1),
        "s1 never changes"
    );
    assert_eq!(runs(&read_all(&open_snapshot(&src, "s2"), "f")), runs(&now));
    let report = tux3_tools::fsck::check(src.clone(), &Default::default()).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    let dump = tux3_tools::dump::report(src.clone()).unwrap();
    assert!(dump.contains("unwritten"), "{dump}");

    let (full, _) = stream(&src, "s1", None, None);
    let (incr, _) = stream(&src, "s2", Some("s1"), None);
    // Holes cost nothing: a few blocks of data, not 80.
    assert!(full.len() < 4 * BS as usize, "{} bytes", full.len());
    let dst = device(16384);
    let rfs = open(&dst);
    apply(&rfs, &full).unwrap();
    apply(&rfs, &incr).unwrap();
    rfs.close().unwrap();
    same_snapshot(&src, &dst, "s1");
    same_snapshot(&src, &dst, "s2");
    let report = tux3_tools::fsck::check(dst.clone(), &Default::default()).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}

/// A rollback to a snapshot taken before preallocated blocks were written
/// gives the live volume those blocks unwritten again, while a later
/// snapshot holds the data written there: a write now must not fill them
/// in place, or that snapshot would change.
#[test]
fn a_rollback_never_lets_a_write_change_a_snapshot() {
    let src = device(4096);
    let fs = open(&src);
    let f = file(&fs, ROOT_INO, "f", b"");
    fs.fallocate(f, 0, 0, 16 * BS).unwrap();
    fs.snapshot_create(b"before").unwrap();
    fs.write(f, 0, &[1; 16 * BS as usize]).unwrap();
    fs.snapshot_create(b"written").unwrap();
    fs.snapshot_rollback(b"before").unwrap();
    let n = 16 * BS as usize;
    assert_eq!(runs(&read_all(&fs, "f")), [(0, n)]);
    fs.write(f, 0, &[2; 16 * BS as usize]).unwrap();
    fs.sync().unwrap();
    assert_eq!(runs(&read_all(&fs, "f")), [(2, n)]);
    fs.close().unwrap();
    assert_eq!(runs(&read_all(&open_snapshot(&src, "written"), "f")), [(1, n)]);
    assert_eq!(runs(&read_all(&open_snapshot(&src, "before"), "f")), [(0, n)]);
    let report = tux3_tools::fsck::check(src.clone(), &Default::default()).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}
