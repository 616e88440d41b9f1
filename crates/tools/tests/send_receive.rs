//! Send streams end to end on memory devices: a snapshot sent (whole or
//! against a base) and received is the same tree — names, inode numbers,
//! data, holes, modes, owners, times, xattrs, hard links, symlinks and
//! special files; an incremental stream carries only what changed (one
//! block for one block, nothing for nothing); a received snapshot is sent
//! on with its origin; numbers the source gave out again arrive; a
//! missing base, a damaged record, a taken name and a volume not empty
//! are refused with what was wrong. Cut streams and resumes are
//! send_receive_resume.rs, random namespace changes send_receive_random.rs.

mod stream_util;
use stream_util::*;

#[test]
fn a_full_stream_makes_the_same_tree() {
    let src = device(16384);
    let fs = open(&src);
    populate(&fs);
    // An open file without a name is in no snapshot's tree.
    let orphan = file(&fs, ROOT_INO, "orphan", b"gone");
    fs.open_handle(orphan).unwrap();
    fs.unlink(ROOT_INO, b"orphan").unwrap();
    let snap = fs.snapshot_create(b"s1").unwrap();
    let (bytes, sent) = stream(&src, "s1", None, None);
    assert_eq!(sent.bytes, bytes.len() as u64);
    let dst = device(16384);
    let rfs = open(&dst);
    receive(&rfs, &bytes[..], &ReceiveOptions::default(), &mut |_| {}).unwrap();
    let got = rfs.snapshot_list().unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].name, b"s1");
    // The received snapshot keeps the sent one's identity.
    assert_eq!(got[0].origin, snap.origin);
    assert_eq!(snap.origin.volume, fs.volume_id());
    // No trace of the receive's own state in the snapshot or the volume.
    assert!(rfs
        .listxattr(ROOT_INO)
        .unwrap()
        .iter()
        .all(|n| n != resume::TOKEN_XATTR));
    same_snapshot(&src, &dst, "s1");
    // Sparse files stay sparse: the hole costs nothing in the stream.
    assert!(bytes.len() < 400_000, "{} bytes", bytes.len());
    rfs.close().unwrap();
    fs.close().unwrap();
    // The received volume is clean.
    let report = tux3_tools::fsck::check(dst.clone(), &Default::default()).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}

#[test]
fn an_incremental_stream_carries_only_the_change() {
    let src = device(16384);
    let fs = open(&src);
    populate(&fs);
    let big: Vec<u8> = vec![3u8; 4 << 20];
    let f = file(&fs, ROOT_INO, "four-mib", &big);
    file(&fs, ROOT_INO, "untouched", &big);
    fs.snapshot_create(b"s1").unwrap();
    // One block changed in the middle of a 4 MiB file.
    fs.write(f, 2 << 20, &[8u8; 4096]).unwrap();
    fs.snapshot_create(b"s2").unwrap();
    // Nothing changed at all.
    fs.snapshot_create(b"s3").unwrap();

    let dst = device(16384);
    let rfs = open(&dst);
    apply(&rfs, &stream(&src, "s1", None, None).0).unwrap();
    let (bytes, sent) = stream(&src, "s2", Some("s1"), None);
    assert_eq!(sent.data_bytes, 4096, "one block's data");
    assert!(bytes.len() < 8192, "{} bytes for one changed block", bytes.len());
    apply(&rfs, &bytes).unwrap();
    same_snapshot(&src, &dst, "s2");
    let (bytes, sent) = stream(&src, "s3", Some("s2"), None);
    assert_eq!(sent.data_bytes, 0);
    assert!(sent.records <= 4, "{} records for no change", sent.records);
    apply(&rfs, &bytes).unwrap();
    same_snapshot(&src, &dst, "s3");
    same_snapshot(&src, &dst, "s1");
    // Changes made on the receiver's live volume since are dropped by the
    // next incremental receive (the volume is made its base first).
    file(&rfs, ROOT_INO, "local", b"x");
    fs.unlink(ROOT_INO, b"untouched").unwrap();
    fs.snapshot_create(b"s4").unwrap();
    apply(&rfs, &stream(&src, "s4", Some("s3"), None).0).unwrap();
    same_snapshot(&src, &dst, "s4");
    // A replica sends on: its snapshots keep their origin, so a third
    // volume that has s1 from the source takes s2 from the replica.
    rfs.close().unwrap();
    let third = device(16384);
    let tfs = open(&third);
    apply(&tfs, &stream(&src, "s1", None, None).0).unwrap();
    apply(&tfs, &stream(&dst, "s2", Some("s1"), None).0).unwrap();
    same_snapshot(&src, &third, "s2");
}

#[test]
fn holes_punched_and_files_cut_arrive() {
    let src = device(16384);
    let fs = open(&src);
    let data: Vec<u8> = (0..(64 * 4096u32)).map(|i| (i % 253) as u8).collect();
    let a = file(&fs, ROOT_INO, "a", &data);
    let b = file(&fs, ROOT_INO, "b", &data);
    let c = file(&fs, ROOT_INO, "c", &data);
    fs.snapshot_create(b"s1").unwrap();
    // a: cut in the middle of a block, then extended with a hole.
    let cut = SetAttr {
        size: Some(10_000),
        ..SetAttr::default()
    };
    fs.setattr(a, &cut).unwrap();
    let grow = SetAttr {
        size: Some(1 << 20),
        ..SetAttr::default()
    };
    fs.setattr(a, &grow).unwrap();
    fs.write(a, 500_000, b"tail").unwrap();
    // b: a hole where data was (cut and written back past it).
    let cut = SetAttr {
        size: Some(8 * 4096),
        ..SetAttr::default()
    };
    fs.setattr(b, &cut).unwrap();
    fs.write(b, 40 * 4096, &data[40 * 4096..]).unwrap();
    // c: shorter.
    let cut = SetAttr {
        size: Some(3),
        ..SetAttr::default()
    };
    fs.setattr(c, &cut).unwrap();
    fs.snapshot_create(b"s2").unwrap();
    let dst = device(16384);
    let rfs = open(&dst);
    apply(&rfs, &stream(&src, "s1", None, None).0).unwrap();
    apply(&rfs, &stream(&src, "s2", Some("s1"), None).0).unwrap();
    same_snapshot(&src, &dst, "s2");
}

#[test]
fn a_missing_base_a_taken_name_and_a_bad_record_are_refused() {
    let src = device(8192);
    let fs = open(&src);
    populate(&fs);
    fs.snapshot_create(b"s1").unwrap();
    file(&fs, ROOT_INO, "more", b"more");
    fs.snapshot_create(b"s2").unwrap();
    let incremental = stream(&src, "s2", Some("s1"), None).0;

    // No base.
    let dst = device(8192);
    let rfs = open(&dst);
    let e = apply(&rfs, &incremental).unwrap_err();
    assert!(matches!(e, StreamError::Refused(_)), "{e}");
    assert!(e.to_string().contains("does not have"), "{e}");
    assert!(rfs.snapshot_list().unwrap().is_empty());

    // A damaged record: named by number and offset, and no snapshot.
    let mut bad = stream(&src, "s1", None, None).0;
    let at = bad.len() / 2;
    bad[at] ^= 0x40;
    let e = apply(&rfs, &bad).unwrap_err();
    match &e {
        StreamError::Checksum { record, offset } => {
            assert!(*record > 0 && *offset as usize <= at && at - (*offset as usize) < (1 << 20) + 64);
        }
        other => panic!("{other}"),
    }
    assert!(e.to_string().contains("bad checksum at record"), "{e}");
    assert!(rfs.snapshot_list().unwrap().is_empty());
    // The whole stream again finishes it (what was applied is skipped).
    apply(&rfs, &stream(&src, "s1", None, None).0).unwrap();
    same_snapshot(&src, &dst, "s1");

    // The same snapshot again, and a name taken by another.
    let e = apply(&rfs, &stream(&src, "s1", None, None).0).unwrap_err();
    assert!(e.to_string().contains("taken"), "{e}");
    rfs.snapshot_create(b"s2").unwrap();
    let e = apply(&rfs, &incremental).unwrap_err();
    assert!(e.to_string().contains("\"s2\" is taken"), "{e}");
    // A full stream needs an empty volume.
    let dst2 = device(8192);
    let rfs2 = open(&dst2);
    file(&rfs2, ROOT_INO, "x", b"x");
    let e = apply(&rfs2, &stream(&src, "s1", None, None).0).unwrap_err();
    assert!(e.to_string().contains("empty volume"), "{e}");
}

#[test]
fn numbers_given_out_again_to_files_of_the_same_kind_arrive() {
    let src = device(8192);
    let fs = open(&src);
    let l = fs.symlink(ROOT_INO, b"l", b"first", 0, 0).unwrap().ino;
    let c = fs
        .mknod(ROOT_INO, b"c", libc::S_IFCHR | 0o600, 0x0101, 0, 0)
        .unwrap()
        .ino;
    let f = file(&fs, ROOT_INO, "f", &[1u8; 10_000]);
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap().ino;
    fs.snapshot_create(b"s1").unwrap();
    for n in [&b"l"[..], b"c", b"f"] {
        fs.unlink(ROOT_INO, n).unwrap();
    }
    fs.rmdir(ROOT_INO, b"d").unwrap();
    // A new session hands the freed numbers out again.
    fs.close().unwrap();
    let fs = open(&src);
    let l2 = fs.symlink(ROOT_INO, b"l", b"second, longer", 0, 0).unwrap().ino;
    let c2 = fs
        .mknod(ROOT_INO, b"c", libc::S_IFCHR | 0o600, 0x0202, 0, 0)
        .unwrap()
        .ino;
    let f2 = file(&fs, ROOT_INO, "f", &[2u8; 5_000]);
    // A number a directory had, now a file's (and the reverse).
    let d2 = fs.create(ROOT_INO, b"d", 0o644, 0, 0).unwrap().ino;
    assert_eq!((l2, c2, f2, d2), (l, c, f, d), "the numbers were given out again");
    fs.snapshot_create(b"s2").unwrap();
    let dst = device(8192);
    let rfs = open(&dst);
    apply(&rfs, &stream(&src, "s1", None, None).0).unwrap();
    apply(&rfs, &stream(&src, "s2", Some("s1"), None).0).unwrap();
    same_snapshot(&src, &dst, "s2");
    same_snapshot(&src, &dst, "s1");
}

#[test]
fn a_volume_of_another_block_size_receives_the_same_tree() {
    let src = device(16384);
    let fs = open(&src);
    populate(&fs);
    fs.snapshot_create(b"s1").unwrap();
    let f = fs.lookup(ROOT_INO, b"sparse").unwrap().ino;
    fs.write(f, 70_000, b"in the hole").unwrap();
    fs.snapshot_create(b"s2").unwrap();
    for bs in [1024, 65536] {
        let dst = device_of(bs, (64 << 20) / bs as u64);
        let rfs = open(&dst);
        apply(&rfs, &stream(&src, "s1", None, None).0).unwrap();
        apply(&rfs, &stream(&src, "s2", Some("s1"), None).0).unwrap();
        // Holes are where the source has them, to the receiver's blocks.
        let (x, y) = (
            describe(&open_snapshot(&src, "s2")),
            describe(&open_snapshot(&dst, "s2")),
        );
        for (p, v) in &x {
            let w = y.get(p).unwrap_or_else(|| panic!("{bs}: {p} missing"));
            if bs == 1024 {
                assert_eq!(v, w, "{bs}: {p}");
            } else {
                // 64 KiB blocks hold a 4 KiB block's hole as data (zeros):
                // everything but the data map is the same.
                let cut = |s: &str| s.split(" data ").next().unwrap_or_default().to_string();
                assert_eq!(cut(v), cut(w), "{bs}: {p}");
            }
        }
        assert_eq!(x.len(), y.len());
    }
}

#[test]
fn one_changed_block_of_a_fragmented_file_reads_little() {
    let src = device(65536);
    let fs = open(&src);
    // 20,000 extents of one block each: every other block a hole.
    let f = fs.create(ROOT_INO, b"frag", 0o644, 0, 0).unwrap().ino;
    for i in 0..20_000u64 {
        fs.write(f, i * 2 * 4096, &[(i % 250) as u8 + 1; 4096]).unwrap();
    }
    fs.snapshot_create(b"s1").unwrap();
    fs.write(f, 10_000 * 2 * 4096, &[0xee; 4096]).unwrap();
    fs.snapshot_create(b"s2").unwrap();
    fs.close().unwrap();
    let read = |base: Option<&str>, snap: &str| {
        let before = src.counters().blocks_read;
        let (bytes, sent) = stream(&src, snap, base, None);
        (src.counters().blocks_read - before, bytes, sent)
    };
    let (full_reads, full, _) = read(None, "s1");
    let (reads, incr, sent) = read(Some("s1"), "s2");
    assert_eq!(sent.data_bytes, 4096);
    // The two extent trees (about 130 leaves each) are compared, not read:
    // the nodes on the changed path, and the opening of the volume and
    // the snapshots — about a hundred blocks here, where reading both
    // maps whole takes over a thousand.
    assert!(
        reads < 400 && reads * 50 < full_reads,
        "{reads} blocks read for one changed block, {full_reads} for the whole file"
    );
    let dst = device(65536);
    let rfs = open(&dst);
    apply(&rfs, &full).unwrap();
    apply(&rfs, &incr).unwrap();
    same_snapshot(&src, &dst, "s2");
}
