//! `tux3 clone --image IMAGE SRC DST` on an unmounted image: the clone
//! reads back byte for byte (`tux3 cat`), gets the source's permission
//! bits, is silent on success; a destination that exists is refused
//! (exit 16) unless `--force`, which overwrites a longer file; a missing
//! source is an operational error (8), a directory or symlink source a
//! usage error (16); fsck finds the volume clean after each. Without
//! `--image`, a path that is not on a tux3 mount is a usage error.

use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;
use std::process::{Command, Output};

fn tux3(args: &[&dyn AsRef<std::ffi::OsStr>]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tux3"))
        .args(args.iter().map(|a| a.as_ref()))
        .env("TZ", "UTC")
        .output()
        .expect("run tux3")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Bytes that differ at every offset mod 251 and 256 alike.
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| ((i % 251) as u8).wrapping_mul(7) ^ (i >> 8) as u8 ^ seed)
        .collect()
}

fn cat(img: &Path, path: &str) -> Vec<u8> {
    let o = tux3(&[&"cat", &img, &path]);
    assert!(o.status.success(), "cat {path}: {}", stderr(&o));
    o.stdout
}

fn fsck_clean(img: &Path) {
    let o = tux3(&[&"fsck", &img]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "fsck: {}{}",
        String::from_utf8_lossy(&o.stdout),
        stderr(&o)
    );
}

#[test]
fn clone_on_an_image() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tree = dir.path().join("tree");
    fs::create_dir_all(tree.join("sub")).unwrap();
    // Whole blocks, a partial tail, and a sparse file with a hole.
    let big = pattern(3 * 1024 * 1024 + 1234, 1);
    fs::write(tree.join("big"), &big).unwrap();
    fs::set_permissions(tree.join("big"), fs::Permissions::from_mode(0o640)).unwrap();
    let small = pattern(777, 2);
    fs::write(tree.join("sub/small"), &small).unwrap();
    let sparse = fs::File::create(tree.join("sparse")).unwrap();
    sparse.set_len(1 << 20).unwrap();
    drop(sparse);
    symlink("big", tree.join("link")).unwrap();
    let img = dir.path().join("img");
    let o = tux3(&[&"mkfs", &"-q", &"--size", &"64M", &"--from", &tree, &img]);
    assert!(o.status.success(), "mkfs: {}", stderr(&o));

    let o = tux3(&[&"clone", &"--image", &img, &"/big", &"/sub/big2"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        o.stdout.is_empty() && o.stderr.is_empty(),
        "silent on success: {}",
        stderr(&o)
    );
    assert!(cat(&img, "/sub/big2") == big, "the clone reads as its source");
    assert!(cat(&img, "/big") == big, "the source is unchanged");
    let ls = tux3(&[&"ls", &"-l", &img, &"/sub"]);
    let listing = String::from_utf8_lossy(&ls.stdout).into_owned();
    let line = listing.lines().find(|l| l.ends_with("big2")).unwrap_or_default();
    assert!(line.starts_with("-rw-r-----"), "mode bits copied: {listing}");
    fsck_clean(&img);

    let o = tux3(&[&"clone", &"--image", &img, &"sparse", &"sparse2"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(cat(&img, "/sparse2") == vec![0u8; 1 << 20]);

    // The destination exists: refused, unchanged; --force overwrites a
    // longer file, which ends up the source's length.
    let o = tux3(&[&"clone", &"--image", &img, &"/sub/small", &"/big"]);
    assert_eq!(o.status.code(), Some(16), "{}", stderr(&o));
    assert!(stderr(&o).contains("exists"), "{}", stderr(&o));
    assert!(cat(&img, "/big") == big);
    let o = tux3(&[
        &"clone",
        &"--image",
        &img,
        &"--force",
        &"/sub/small",
        &"/sub/big2",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(cat(&img, "/sub/big2") == small, "overwritten and truncated");
    assert!(cat(&img, "/big") == big, "the old source of big2 is untouched");
    let o = tux3(&[&"clone", &"--image", &img, &"--force", &"/big", &"/big"]);
    assert_eq!(o.status.code(), Some(16), "same file: {}", stderr(&o));
    assert!(cat(&img, "/big") == big);

    // Errors.
    let o = tux3(&[&"clone", &"--image", &img, &"/missing", &"/x"]);
    assert_eq!(o.status.code(), Some(8), "{}", stderr(&o));
    assert!(stderr(&o).starts_with("tux3 clone: /missing: "), "{}", stderr(&o));
    let o = tux3(&[&"clone", &"--image", &img, &"/sub", &"/x"]);
    assert_eq!(o.status.code(), Some(16), "{}", stderr(&o));
    assert!(stderr(&o).contains("is a directory"), "{}", stderr(&o));
    let o = tux3(&[&"clone", &"--image", &img, &"/link", &"/x"]);
    assert_eq!(o.status.code(), Some(16), "{}", stderr(&o));
    assert!(stderr(&o).contains("not a regular file"), "{}", stderr(&o));
    let o = tux3(&[&"clone", &"--image", &img, &"/big", &"/nodir/x"]);
    assert_eq!(o.status.code(), Some(8), "{}", stderr(&o));
    let o = tux3(&[&"ls", &img, &"/"]);
    let root = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(!root.contains('x'), "nothing left behind: {root}");
    fsck_clean(&img);

    // Not an image, not a tux3 mount.
    let host = dir.path().join("host");
    fs::write(&host, b"data").unwrap();
    let o = tux3(&[&"clone", &host, &dir.path().join("host2")]);
    assert_eq!(o.status.code(), Some(16), "{}", stderr(&o));
    assert!(stderr(&o).contains("not on a tux3 mount"), "{}", stderr(&o));
    assert!(!dir.path().join("host2").exists());
    let o = tux3(&[&"clone", &dir.path().join("nothing"), &dir.path().join("host2")]);
    assert_eq!(o.status.code(), Some(8), "{}", stderr(&o));
}
