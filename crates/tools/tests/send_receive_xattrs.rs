//! Send streams carry xattrs of any size: values up to 64 KiB and names
//! by the thousand, held in the sender's xattr files (FORMAT.md 7.5), go
//! whole in `SetXattr` records and arrive the same, in a full stream and
//! in an incremental one that replaces, removes and adds them; a number
//! the stream gives a new file that the receiver's own xattr file holds
//! is handed over (the xattr file moves; without that the receive fails
//! with EEXIST).

mod stream_util;
use stream_util::*;

fn value(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed))
        .collect()
}

#[test]
fn large_xattrs_arrive_whole() {
    let src = device(16384);
    let fs = open(&src);
    let a = file(&fs, ROOT_INO, "a", b"data");
    let b = file(&fs, ROOT_INO, "b", b"");
    fs.setxattr(a, b"user.small", b"s", XattrMode::Create).unwrap();
    fs.setxattr(b, b"user.big", &value(65536, 1), XattrMode::Create)
        .unwrap();
    for k in 0..400 {
        let name = format!("user.name-{k:04}");
        fs.setxattr(a, name.as_bytes(), &value(k, 2), XattrMode::Create)
            .unwrap();
    }
    fs.snapshot_create(b"s1").unwrap();
    // Replace, remove and add; b's xattr file goes, and its number is
    // given out again to a new file.
    fs.setxattr(a, b"user.name-0007", &value(60000, 3), XattrMode::Replace)
        .unwrap();
    fs.removexattr(a, b"user.name-0100").unwrap();
    fs.removexattr(b, b"user.big").unwrap();
    // A symlink is made near its directory, in the lowest free number:
    // b's xattr file's, which the receiver gave a's xattr file (it sets
    // them in inode order): its xattr file must move for it.
    let s = fs.symlink(ROOT_INO, b"s", b"target", 0, 0).unwrap().ino;
    let c = file(&fs, ROOT_INO, "c", b"");
    fs.setxattr(c, b"user.big", &value(30000, 4), XattrMode::Create)
        .unwrap();
    fs.snapshot_create(b"s2").unwrap();

    let dst = device(16384);
    let rfs = open(&dst);
    let (full, _) = stream(&src, "s1", None, None);
    assert!(full.len() > 65536, "the 64 KiB value is in the stream");
    apply(&rfs, &full).unwrap();
    same_snapshot(&src, &dst, "s1");
    apply(&rfs, &stream(&src, "s2", Some("s1"), None).0).unwrap();
    same_snapshot(&src, &dst, "s2");
    assert_eq!(rfs.getxattr(c, b"user.big").unwrap(), value(30000, 4));
    assert_eq!(rfs.readlink(s).unwrap(), b"target");
    assert_eq!(rfs.getxattr(a, b"user.name-0007").unwrap(), value(60000, 3));
    assert_eq!(
        rfs.getxattr(b, b"user.big").unwrap_err().errno(),
        tux3::Errno::ENODATA
    );
    rfs.close().unwrap();
    fs.close().unwrap();
    for dev in [&src, &dst] {
        let report = tux3_tools::fsck::check(dev.clone(), &Default::default()).unwrap();
        assert!(report.problems.is_empty(), "{:?}", report.problems);
    }
}
