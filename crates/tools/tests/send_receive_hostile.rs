//! Send streams from a hostile sender: records changed behind a re-sealed
//! checksum (so that they pass it) — numbers, names, offsets, lengths,
//! kinds — are refused or applied, never a panic, and the receiving
//! volume stays one that fsck finds clean, with no snapshot taken from a
//! stream that failed.

mod stream_util;
use stream_util::*;
use tux3_tools::stream::{HEAD_LEN, PREAMBLE_LEN};

/// Where each record starts and how long it is, head and crc included.
fn records(bytes: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut at = PREAMBLE_LEN;
    while at + HEAD_LEN <= bytes.len() {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        out.push((at, HEAD_LEN + len + 4));
        at += HEAD_LEN + len + 4;
    }
    out
}

/// Seal record `r` again after a change to it.
fn reseal(bytes: &mut [u8], (at, n): (usize, usize)) {
    let crc = crc32c::crc32c(&bytes[at..at + n - 4]);
    bytes[at + n - 4..at + n].copy_from_slice(&crc.to_le_bytes());
}

#[test]
fn changed_records_behind_a_good_checksum_do_no_harm() {
    let src = device(8192);
    let fs = open(&src);
    populate(&fs);
    fs.snapshot_create(b"s1").unwrap();
    let d = fs.lookup(ROOT_INO, b"dir").unwrap().ino;
    fs.rename(ROOT_INO, b"sparse", d, b"moved", RenameFlags::default())
        .unwrap();
    fs.unlink(ROOT_INO, b"fifo").unwrap();
    fs.snapshot_create(b"s2").unwrap();
    let full = stream(&src, "s1", None, None).0;
    let incr = stream(&src, "s2", Some("s1"), None).0;
    let mut rng = Rng(0x5851_f42d_4c95_7f2d);
    for round in 0..200 {
        let incremental = round % 2 == 1;
        let mut bad = if incremental { incr.clone() } else { full.clone() };
        let recs = records(&bad);
        // Skip Begin: a changed identity is simply another stream.
        let r = recs[1 + rng.below(recs.len() as u64 - 1) as usize];
        // Change one to four bytes of the head's kind or the body.
        for _ in 0..1 + rng.below(4) {
            let span = (r.1 - 4 - 4) as u64;
            let off = r.0 + 4 + rng.below(span) as usize;
            if (5..8).contains(&(off - r.0)) || (8..16).contains(&(off - r.0)) {
                continue; // reserved bytes and the number: caught by the reader
            }
            bad[off] ^= 1 << rng.below(8);
        }
        reseal(&mut bad, r);
        let dst = device(8192);
        let rfs = open(&dst);
        if incremental {
            apply(&rfs, &full).unwrap();
        }
        let got = apply(&rfs, &bad);
        let want = if incremental { "s2" } else { "s1" };
        let taken = rfs
            .snapshot_list()
            .unwrap()
            .iter()
            .any(|s| s.name == want.as_bytes());
        assert_eq!(got.is_ok(), taken, "round {round}: {got:?}");
        rfs.close().unwrap();
        let report = tux3_tools::fsck::check(dst.clone(), &Default::default()).unwrap();
        assert!(report.problems.is_empty(), "round {round}: {:?}", report.problems);
    }
}

mod image_util;

/// A volume (no data checksums) with `orig` (64 KiB) and three files
/// that map its blocks on disk (records edited on the closed volume:
/// clones, as the sharing core makes them), snapshot `s1`: its stream has
/// `Clone` records.
fn with_clones() -> Arc<dyn Device> {
    let dev: Arc<dyn Device> = Arc::new(MemDevice::new(4096, 4096));
    let opts = FormatOptions {
        data_sums: false,
        ..FormatOptions::default()
    };
    Fs::format(dev.clone(), &opts).unwrap();
    let fs = open(&dev);
    let data: Vec<u8> = (0..65536u32).map(|i| (i * 13 % 253) as u8).collect();
    let a = file(&fs, ROOT_INO, "orig", &data);
    let inos: Vec<u64> = ["c1", "c2", "c3"]
        .iter()
        .map(|n| fs.create(ROOT_INO, n.as_bytes(), 0o644, 0, 0).unwrap().ino)
        .collect();
    fs.sync().unwrap();
    fs.unify().unwrap();
    fs.close().unwrap();
    let ext = image_util::extents_of(&dev, a);
    for (k, &c) in inos.iter().enumerate() {
        let mut map = ext.clone();
        for e in &mut map {
            e.lblock += k as u64; // c2, c3: at other offsets
        }
        image_util::edit_inode(&dev, c, |r| {
            r.inline = map;
            r.size = 65536 + k as u64 * 4096 - k as u64 * 100;
        });
    }
    let fs = open(&dev);
    fs.snapshot_create(b"s1").unwrap();
    fs.close().unwrap();
    dev
}

#[test]
fn changed_clone_records_behind_a_good_checksum_do_no_harm() {
    let src = with_clones();
    let (full, sent) = stream(&src, "s1", None, None);
    assert!(sent.cloned_bytes > 0, "{sent:?}");
    let recs = records(&full);
    let clones: Vec<(usize, usize)> = recs
        .iter()
        .copied()
        .filter(|r| full[r.0 + 4] == tux3_tools::stream::kind::CLONE)
        .collect();
    assert!(clones.len() >= 3);
    let mut rng = Rng(0x6a09_e667_f3bc_c908);
    for round in 0..60 {
        let mut bad = full.clone();
        let r = clones[rng.below(clones.len() as u64) as usize];
        // One to four bytes of the body, or the kind byte.
        for _ in 0..1 + rng.below(4) {
            let off = if rng.below(8) == 0 {
                r.0 + 4
            } else {
                r.0 + HEAD_LEN + rng.below((r.1 - HEAD_LEN - 4) as u64) as usize
            };
            bad[off] ^= 1 << rng.below(8);
        }
        reseal(&mut bad, r);
        let dst = device(8192);
        let rfs = open(&dst);
        let got = apply(&rfs, &bad);
        let taken = rfs.snapshot_list().unwrap().iter().any(|s| s.name == b"s1");
        assert_eq!(got.is_ok(), taken, "round {round}: {got:?}");
        rfs.close().unwrap();
        let report = tux3_tools::fsck::check(dst.clone(), &Default::default()).unwrap();
        assert!(report.problems.is_empty(), "round {round}: {:?}", report.problems);
    }
}

/// `full` with `rec` put before its `End` (renumbered).
fn with_record(full: &[u8], rec: &tux3_tools::stream::Record) -> Vec<u8> {
    let recs = records(full);
    let end = *recs.last().unwrap();
    let seq = u64::from_le_bytes(full[end.0 + 8..end.0 + 16].try_into().unwrap());
    let mut out = full[..end.0].to_vec();
    out.extend_from_slice(&rec.frame(seq));
    let mut last = full[end.0..].to_vec();
    last[8..16].copy_from_slice(&(seq + 1).to_le_bytes());
    let n = last.len();
    let crc = crc32c::crc32c(&last[..n - 4]);
    last[n - 4..].copy_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&last);
    out
}

#[test]
fn a_forged_clone_record_is_refused_by_name() {
    use tux3_tools::stream::Record;
    let src = device(8192);
    let fs = open(&src);
    populate(&fs);
    fs.snapshot_create(b"s1").unwrap();
    let d = fs.lookup(ROOT_INO, b"dir").unwrap().ino;
    let f = fs.lookup(d, b"file").unwrap().ino; // 13 bytes
    let s = fs.lookup(ROOT_INO, b"sparse").unwrap().ino;
    let (full, sent) = stream(&src, "s1", None, None);
    let clone = |dst, dst_offset, src, src_offset, len| Record::Clone {
        dst,
        dst_offset,
        src,
        src_offset,
        len,
    };
    let cases = [
        (clone(s, 0, 9999, 0, 4096), "source inode 9999 does not exist"),
        (
            clone(9999, 0, s, 0, 4096),
            "destination inode 9999 does not exist",
        ),
        (clone(d, 0, s, 0, 4096), "destination inode"),
        (clone(s, 0, d, 0, 4096), "not a regular file"),
        (clone(s, 0, f, 0, 14), "run past its size 13"),
        (clone(s, 0, f, u64::MAX - 5, 5), "run past its size"),
        (clone(f, u64::MAX - 5, s, 0, 5), "past the largest file"),
        (clone(s, 4096, s, 0, 8192), "overlap"),
    ];
    for (rec, want) in cases {
        let bad = with_record(&full, &rec);
        let dst = device(8192);
        let rfs = open(&dst);
        let e = apply(&rfs, &bad).unwrap_err().to_string();
        let n = sent.records - 1;
        assert!(e.contains(&format!("record {n} (clone")), "{e}");
        assert!(e.contains(want), "{want}: {e}");
        assert!(rfs.snapshot_list().unwrap().iter().all(|s| s.name != b"s1"));
        rfs.close().unwrap();
        let report = tux3_tools::fsck::check(dst.clone(), &Default::default()).unwrap();
        assert!(report.problems.is_empty(), "{:?}", report.problems);
    }
    // A good one applies.
    let good = with_record(&full, &clone(s, 100, f, 0, 13));
    let dst = device(8192);
    let rfs = open(&dst);
    apply(&rfs, &good).unwrap();
    assert_eq!(rfs.read(s, 100, 13).unwrap(), b"hello, world\n");
}
