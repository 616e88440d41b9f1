//! Tests of the `tux3` binary on image files: error paths and exit codes,
//! and round trips through a real volume (`mkfs --from`, `fsck`, `ls`, `cat`,
//! `readlink`); with data checksums: `mkfs --from` sums every extent
//! (`dump`'s totals), `fsck --data` reads them clean and names a damaged
//! block by path, and `--repair` leaves it (exit 4).

use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{symlink, FileExt, MetadataExt, PermissionsExt};
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

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn mkfs_needs_a_size_for_a_new_image() {
    let dir = tempfile::tempdir().expect("tempdir");
    let img = dir.path().join("new.img");
    let o = tux3(&[&"mkfs", &img]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).starts_with("tux3 mkfs: "), "{}", stderr(&o));
    assert!(stderr(&o).contains("--size"), "{}", stderr(&o));
    assert!(!img.exists());
}

#[test]
fn mkfs_refuses_a_bad_block_size() {
    let dir = tempfile::tempdir().expect("tempdir");
    let img = dir.path().join("x.img");
    let o = tux3(&[&"mkfs", &"--size", &"64M", &"--block-size", &"3000", &img]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("power of two"), "{}", stderr(&o));
    assert!(!img.exists());
}

#[test]
fn mkfs_checks_the_source_before_creating_the_image() {
    let dir = tempfile::tempdir().expect("tempdir");
    let img = dir.path().join("x.img");
    let missing = dir.path().join("no-such-dir");
    let o = tux3(&[&"mkfs", &"--size", &"64M", &"--from", &missing, &img]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("no-such-dir"), "{}", stderr(&o));
    assert!(!img.exists());
}

#[test]
fn mkfs_removes_an_image_it_created_when_it_fails() {
    let dir = tempfile::tempdir().expect("tempdir");
    let img = dir.path().join("tiny.img");
    let o = tux3(&[&"mkfs", &"--size", &"8K", &img]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).starts_with("tux3 mkfs: "), "{}", stderr(&o));
    assert!(!img.exists());
    // An image that was there before stays.
    fs::write(&img, b"").expect("write");
    let o = tux3(&[&"mkfs", &"--size", &"8K", &img]);
    assert_eq!(o.status.code(), Some(1));
    assert!(img.exists());
}

#[test]
fn mkfs_refuses_a_directory_target() {
    let dir = tempfile::tempdir().expect("tempdir");
    let o = tux3(&[&"mkfs", &"--size", &"64M", &dir.path()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("not a regular file or block device"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn fsck_of_a_missing_or_foreign_image_is_an_operational_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("missing.img");
    let o = tux3(&[&"fsck", &missing]);
    assert_eq!(o.status.code(), Some(8));
    let garbage = dir.path().join("garbage.img");
    fs::write(&garbage, vec![0x5a; 256 * 1024]).expect("write");
    let o = tux3(&[&"fsck", &garbage]);
    assert_eq!(o.status.code(), Some(8), "{}", stderr(&o));
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("tux3 fsck: "), "{err}");
    assert!(o.stdout.is_empty());
    // Usage errors exit 16, as e2fsck's do.
    assert_eq!(tux3(&[&"fsck"]).status.code(), Some(16));
}

#[test]
fn readers_of_a_foreign_image_fail_cleanly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let garbage = dir.path().join("garbage.img");
    fs::write(&garbage, vec![0u8; 256 * 1024]).expect("write");
    for cmd in [&["ls"][..], &["dump"], &["cat", "/x"], &["readlink", "/x"]] {
        let mut args: Vec<&dyn AsRef<std::ffi::OsStr>> = vec![&cmd[0], &garbage];
        if cmd.len() > 1 {
            args.push(&cmd[1]);
        }
        let o = tux3(&args);
        assert_eq!(o.status.code(), Some(1), "{cmd:?}: {}", stderr(&o));
        assert!(
            stderr(&o).starts_with(&format!("tux3 {}: ", cmd[0])),
            "{}",
            stderr(&o)
        );
    }
}

/// A host tree with one of each kind of entry.
fn sample_tree(root: &Path) {
    fs::create_dir_all(root.join("dir/sub")).expect("mkdir");
    fs::create_dir(root.join("empty")).expect("mkdir");
    fs::write(root.join("small.txt"), b"hello, tux3\n").expect("write");
    fs::write(root.join("empty.txt"), b"").expect("write");
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 + i / 4096) as u8).collect();
    fs::write(root.join("dir/big.bin"), &big).expect("write");
    let sparse = fs::File::create(root.join("dir/sparse")).expect("create");
    sparse.set_len(5 << 20).expect("set_len");
    sparse.write_at(b"middle", 2 << 20).expect("write_at");
    fs::write(root.join("dir/sub/deep.h"), b"#define DEEP 1\n").expect("write");
    fs::hard_link(root.join("small.txt"), root.join("dir/hardlink.txt")).expect("link");
    symlink("../small.txt", root.join("dir/link")).expect("symlink");
    symlink("/nowhere/at/all", root.join("dangling")).expect("symlink");
    let fifo = std::ffi::CString::new(root.join("fifo").as_os_str().as_bytes()).expect("cstring");
    // SAFETY: a valid C string.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o640) }, 0);
    fs::set_permissions(root.join("dir/sub"), fs::Permissions::from_mode(0o751)).expect("chmod");
    set_mtime(&root.join("dir/sub/deep.h"), 981_173_100); // 2001-02-03 04:05 UTC
    set_mtime(&root.join("dir/sub"), 1_015_218_360); // 2002-03-04 05:06 UTC
}

fn set_mtime(path: &Path, sec: u64) {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(sec);
    let f = fs::File::open(path).expect("open");
    f.set_modified(t).expect("set mtime");
}

/// Paths under `root`, relative and sorted, as `find | sort` gives them.
fn host_paths(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).expect("read_dir").flatten() {
            let p = e.path();
            out.push(
                p.strip_prefix(root)
                    .expect("prefix")
                    .to_string_lossy()
                    .into_owned(),
            );
            if e.file_type().expect("type").is_dir() {
                stack.push(p);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn mkfs_from_a_tree_round_trips() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path().join("src");
    sample_tree(&src);
    fs::set_permissions(&src, fs::Permissions::from_mode(0o700)).expect("chmod");
    let has_xattr = set_xattr(&src.join("small.txt"), "user.color", b"blue");
    let img = dir.path().join("vol.img");
    let o = tux3(&[&"mkfs", &"--size", &"256M", &"--from", &src, &img]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(fs::metadata(&img).expect("img").len(), 256 << 20);

    let o = tux3(&[&"fsck", &img]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("clean"));

    let o = tux3(&[&"ls", &"-R", &"--paths", &img]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let mut listed: Vec<String> = stdout(&o).lines().map(str::to_owned).collect();
    listed.sort();
    assert_eq!(listed, host_paths(&src));

    for file in [
        "small.txt",
        "empty.txt",
        "dir/big.bin",
        "dir/sparse",
        "dir/sub/deep.h",
        "dir/hardlink.txt",
    ] {
        let o = tux3(&[&"cat", &img, &format!("/{file}")]);
        assert_eq!(o.status.code(), Some(0), "{file}: {}", stderr(&o));
        assert!(
            o.stdout == fs::read(src.join(file)).expect("read"),
            "{file} differs"
        );
    }
    let o = tux3(&[&"readlink", &img, &"/dir/link"]);
    assert_eq!(stdout(&o), "../small.txt\n");
    let o = tux3(&[&"readlink", &img, &"dangling"]);
    assert_eq!(stdout(&o), "/nowhere/at/all\n");

    // Long listing: modes, link counts, owners, sizes, mtimes, link targets.
    let o = tux3(&[&"ls", &"-l", &img, &"/dir"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    let line = |name: &str| {
        text.lines()
            .find(|l| l.ends_with(&format!(" {name}")) || l.contains(&format!(" {name} -> ")))
            .unwrap_or_else(|| panic!("{name} not in\n{text}"))
            .to_owned()
    };
    let meta = fs::metadata(src.join("small.txt")).expect("meta");
    let hl = line("hardlink.txt");
    assert!(hl.starts_with("-rw"), "{hl}");
    let fields: Vec<&str> = hl.split_whitespace().collect();
    assert_eq!(fields[1], "2", "{hl}");
    assert_eq!(fields[2], meta.uid().to_string());
    assert_eq!(fields[3], meta.gid().to_string());
    assert_eq!(fields[4], "12");
    assert!(line("sub").starts_with("drwxr-x--x"), "{text}");
    // Directory times are set after their contents are copied.
    assert!(line("sub").contains(" 2002-03-04 05:06 sub"), "{text}");
    let o = tux3(&[&"ls", &"-l", &img, &"/dir/sub/deep.h"]);
    assert!(
        stdout(&o).contains(" 2001-02-03 04:05 /dir/sub/deep.h"),
        "{}",
        stdout(&o)
    );
    assert!(line("link").ends_with("link -> ../small.txt"), "{text}");
    let o = tux3(&[&"ls", &"-l", &img, &"/fifo"]);
    assert!(stdout(&o).starts_with("prw-r-----"), "{}", stdout(&o));

    // Through the library: the root's mode, times to the nanosecond, xattrs
    // (atime is not compared: reading the file for the copy may change it).
    let dev = tux3::open_path(&img, false).expect("open image");
    let opts = tux3::OpenOptions {
        read_only: true,
        ..Default::default()
    };
    let vol = tux3::Fs::open(dev, opts).expect("open volume");
    let root = vol.getattr(tux3::ROOT_INO).expect("root");
    assert_eq!(root.mode & 0o7777, 0o700);
    let small = vol.lookup(tux3::ROOT_INO, b"small.txt").expect("small.txt");
    let host = fs::symlink_metadata(src.join("small.txt")).expect("meta");
    let ts = |sec, nsec| tux3::Timespec {
        sec,
        nsec: nsec as u32,
    };
    assert_eq!(small.mtime, ts(host.mtime(), host.mtime_nsec()));
    assert_eq!(small.ctime, ts(host.ctime(), host.ctime_nsec()));
    assert_eq!(small.nlink, 2);
    if has_xattr {
        assert_eq!(vol.getxattr(small.ino, b"user.color").expect("xattr"), b"blue");
    }
}

/// Set an extended attribute on a host file; false where the host
/// filesystem has none.
fn set_xattr(path: &Path, name: &str, value: &[u8]) -> bool {
    let p = std::ffi::CString::new(path.as_os_str().as_bytes()).expect("path");
    let n = std::ffi::CString::new(name).expect("name");
    // SAFETY: valid C strings and a buffer of `value.len()` bytes.
    unsafe { libc::setxattr(p.as_ptr(), n.as_ptr(), value.as_ptr().cast(), value.len(), 0) == 0 }
}

#[test]
fn ls_sections_and_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path().join("src");
    sample_tree(&src);
    let img = dir.path().join("vol.img");
    assert_eq!(
        tux3(&[&"mkfs", &"-s", &"128M", &"--from", &src, &img])
            .status
            .code(),
        Some(0)
    );

    let o = tux3(&[&"ls", &img]);
    let names: Vec<String> = stdout(&o).lines().map(str::to_owned).collect();
    assert_eq!(
        names,
        ["dangling", "dir", "empty", "empty.txt", "fifo", "small.txt"]
    );

    let o = tux3(&[&"ls", &"-R", &img, &"/dir"]);
    let expect = "/dir:\nbig.bin\nhardlink.txt\nlink\nsparse\nsub\n\n/dir/sub:\ndeep.h\n";
    assert_eq!(stdout(&o), expect);

    let o = tux3(&[&"ls", &img, &"/nope"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).starts_with("tux3 ls: /nope: ENOENT (No such file or directory)\n"),
        "{}",
        stderr(&o)
    );
    let o = tux3(&[&"ls", &img, &"/small.txt/x"]);
    assert!(stderr(&o).contains("ENOTDIR"), "{}", stderr(&o));
    let o = tux3(&[&"cat", &img, &"/dir"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("Is a directory"), "{}", stderr(&o));
    let o = tux3(&[&"cat", &img, &"/dir/link"]);
    assert!(stderr(&o).contains("symbolic link"), "{}", stderr(&o));
    let o = tux3(&[&"cat", &img, &"/fifo"]);
    assert!(stderr(&o).contains("not a regular file"), "{}", stderr(&o));
}

#[test]
fn mkfs_formats_an_existing_image_and_extends_a_short_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let img = dir.path().join("vol.img");
    fs::write(&img, vec![0u8; 1 << 20]).expect("write");
    let o = tux3(&[&"mkfs", &"--size", &"32M", &"--block-size", &"1024", &img]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(fs::metadata(&img).expect("img").len(), 32 << 20);
    assert_eq!(tux3(&[&"fsck", &img]).status.code(), Some(0));
    let o = tux3(&[&"ls", &img]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(o.stdout.is_empty());
    // Without --size an existing image keeps its size.
    assert_eq!(tux3(&[&"mkfs", &img]).status.code(), Some(0));
    assert_eq!(fs::metadata(&img).expect("img").len(), 32 << 20);
    let o = tux3(&[&"dump", &img]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

/// `mkfs --from` copies xattrs larger than an inode record holds (they go
/// to the file's xattr file): 3000 bytes, and 64 KiB where the host holds
/// that much (tmpfs; ext4 only with `ea_inode`). Skipped where the host
/// refuses even the smaller one.
#[test]
fn mkfs_from_carries_large_xattrs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path().join("src");
    fs::create_dir(&src).expect("mkdir src");
    fs::write(src.join("f"), b"data").expect("write f");
    let value = |len: usize| -> Vec<u8> { (0..len).map(|i| (i % 251) as u8).collect() };
    if !set_xattr(&src.join("f"), "user.large", &value(3000)) {
        eprintln!("note: the host holds no 3000-byte xattr: skipped");
        return;
    }
    let huge = set_xattr(&src.join("f"), "user.huge", &value(65536));
    let img = dir.path().join("vol.img");
    let o = tux3(&[&"mkfs", &"-s", &"64M", &"--from", &src, &img]);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    let dev = tux3::open_path(&img, false).expect("open image");
    let opts = tux3::OpenOptions {
        read_only: true,
        ..Default::default()
    };
    let vol = tux3::Fs::open(dev, opts).expect("open volume");
    let f = vol.lookup(tux3::ROOT_INO, b"f").expect("f");
    assert_eq!(
        vol.getxattr(f.ino, b"user.large").expect("user.large"),
        value(3000)
    );
    if huge {
        assert_eq!(
            vol.getxattr(f.ino, b"user.huge").expect("user.huge"),
            value(65536)
        );
    }
    drop(vol);
    let o = tux3(&[&"fsck", &img]);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stdout));
}

/// A small tree: a text file, a 300 KiB file, a symlink.
fn sums_tree(root: &Path) {
    fs::create_dir_all(root.join("dir")).unwrap();
    fs::write(root.join("small.txt"), b"hello, sums\n").unwrap();
    let big: Vec<u8> = (0..300_000u32).map(|i| (i * 13 + i / 4096) as u8).collect();
    fs::write(root.join("dir/big.bin"), big).unwrap();
    std::os::unix::fs::symlink("../small.txt", root.join("dir/link")).unwrap();
}

/// `summed extents: S of W written, covering B blocks` from dump: (S, W, B).
fn totals(dump: &str) -> (u64, u64, u64) {
    let line = dump
        .lines()
        .find(|l| l.contains("summed extents: "))
        .unwrap_or_else(|| panic!("no totals in\n{dump}"));
    let n: Vec<u64> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|w| w.parse().ok())
        .collect();
    (n[0], n[1], n[2])
}

#[test]
fn mkfs_from_sums_every_extent_and_fsck_data_finds_damage() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    sums_tree(&src);
    let img = dir.path().join("vol.img");
    let o = tux3(&[&"mkfs", &"--size", &"64M", &"--from", &src, &img]);
    assert_eq!(o.status.code(), Some(0), "{}", (stdout(&o) + &stderr(&o)));

    let o = tux3(&[&"fsck", &"--data", &img]);
    assert_eq!(o.status.code(), Some(0), "{}", (stdout(&o) + &stderr(&o)));
    // 1 + 74 + 1 blocks of data (the symlink's target too).
    assert!(
        (stdout(&o) + &stderr(&o)).contains(", 76 data blocks read and checked"),
        "{}",
        (stdout(&o) + &stderr(&o))
    );

    let o = tux3(&[&"dump", &img]);
    assert_eq!(o.status.code(), Some(0), "{}", (stdout(&o) + &stderr(&o)));
    let dump = stdout(&o);
    let (summed, written, blocks) = totals(&dump);
    assert!(summed > 0 && summed == written && blocks == 76, "{dump}");
    // The file of 74 blocks: one entry per 64 blocks at most.
    assert!(summed >= 4, "{dump}");

    // Damage the first block of big.bin: its extent line in the dump.
    let line = dump
        .lines()
        .find(|l| l.contains("0..+64 -> "))
        .unwrap_or_else(|| panic!("no extent of big.bin in\n{dump}"));
    let pblock: u64 = line
        .split("0..+64 -> ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|p| p.parse().ok())
        .unwrap();
    assert!(line.contains(" summed 0x"), "{line}");
    let f = fs::OpenOptions::new().read(true).write(true).open(&img).unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, pblock * 4096 + 7).unwrap();
    f.write_all_at(&[b[0] ^ 1], pblock * 4096 + 7).unwrap();
    drop(f);

    let o = tux3(&[&"fsck", &img]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "without --data no block is read: {}",
        (stdout(&o) + &stderr(&o))
    );
    // Found (4), then recorded as known damage by the repair (1), then
    // named in a note by a clean check (0).
    for (args, code) in [
        (&[&"fsck" as &dyn AsRef<_>, &"--data", &img][..], 4),
        (&[&"fsck", &"--repair", &"--data", &img], 1),
        (&[&"fsck", &"--data", &img], 0),
    ] {
        let o = tux3(args);
        assert_eq!(o.status.code(), Some(code), "{}", (stdout(&o) + &stderr(&o)));
        let want = format!("block {pblock}: data checksum mismatch in /dir/big.bin");
        assert!(
            (stdout(&o) + &stderr(&o)).contains(&want) && (stdout(&o) + &stderr(&o)).contains("at offset 0"),
            "{}",
            (stdout(&o) + &stderr(&o))
        );
    }
    let f = fs::File::open(&img).unwrap();
    let mut after = [0u8; 1];
    f.read_exact_at(&mut after, pblock * 4096 + 7).unwrap();
    assert_eq!(after[0], b[0] ^ 1, "--repair changed the data");
}
