//! `tux3 defrag` through a real mount and on the unmounted image: files
//! written 4 KiB at a time in random order (a commit every few blocks, so
//! that they land in many extents) come down to a handful of extents with
//! the same contents; a directory needs -r, which walks it; extents a
//! snapshot shares stay unless --unshare, with a line saying what they
//! would cost; a path not on a mount is a usage error naming --image.
//! fsck is clean after each part.
//!
//! Needs root and /dev/fuse; without them the test prints a note and
//! passes (fails under TUX3_REQUIRE_MOUNT=1).

use std::fs;
use std::io::{Seek, SeekFrom, Write};
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::process::{Command, Output};

mod mount_util;

use mount_util::*;

const BLOCKS: u64 = 512;

fn defrag(args: &[&str]) -> Output {
    Command::new(TUX3)
        .arg("defrag")
        .args(args)
        .output()
        .expect("run tux3 defrag")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Block `b` of file `seed`, version `v`.
fn block(seed: u64, b: u64, v: u8) -> Vec<u8> {
    let mut d = format!("defrag-{seed}-{b:06}-{v}").into_bytes();
    d.resize(4096, (b as u8) ^ v ^ (seed as u8));
    d
}

fn contents(seed: u64, v: impl Fn(u64) -> u8) -> Vec<u8> {
    (0..BLOCKS).flat_map(|b| block(seed, b, v(b))).collect()
}

/// Write `path` block by block in random order, committing the volume
/// (`tux3 sync`'s ioctl) every 8 blocks.
fn write_scattered(path: &Path, seed: u64, v: u8) {
    let mut f = fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(false)
        .open(path)
        .unwrap();
    let mut order: Vec<u64> = (0..BLOCKS).collect();
    let mut rng = Rng::new(seed);
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i as u64 + 1) as usize);
    }
    for (k, b) in order.into_iter().enumerate() {
        f.seek(SeekFrom::Start(b * 4096)).unwrap();
        f.write_all(&block(seed, b, v)).unwrap();
        if k % 8 == 7 {
            // SAFETY: IOC_SYNC takes no argument; the descriptor is open.
            let r = unsafe { libc::ioctl(f.as_raw_fd(), tux3_fuse::IOC_SYNC as _) };
            assert_eq!(r, 0, "sync ioctl: {}", std::io::Error::last_os_error());
        }
    }
}

/// The "N extents -> M" of `path`'s line in -v output.
fn extents(out: &str, path: &str) -> (u64, u64) {
    let line = out
        .lines()
        .find(|l| l.starts_with(&format!("{path}: ")))
        .unwrap_or_else(|| panic!("no line for {path}: {out}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    let before = words[1].parse().unwrap();
    let after = if words.get(3) == Some(&"->") {
        words[4].trim_end_matches(',').parse().unwrap()
    } else {
        before
    };
    (before, after)
}

#[test]
fn defrag_through_the_mount_and_on_the_image() {
    if !can_mount() {
        return;
    }
    let fx = Fixture::new("64M");
    let mnt = fx.mnt.to_str().unwrap().to_string();
    let a = format!("{mnt}/a");
    let c = format!("{mnt}/d/c");
    {
        let m = fx.mount(&[]);
        write_scattered(&fx.path("a"), 1, 0);
        fs::create_dir(fx.path("d")).unwrap();
        write_scattered(&fx.path("d/c"), 2, 0);
        fs::hard_link(fx.path("d/c"), fx.path("d/c2")).unwrap();
        // A directory needs -r; an image is named with --image.
        let o = defrag(&[&mnt]);
        assert_eq!(o.status.code(), Some(16), "{}", text(&o));
        assert!(text(&o).contains("-r"), "{}", text(&o));
        let o = defrag(&[fx.img.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(16), "{}", text(&o));
        assert!(text(&o).contains("--image"), "{}", text(&o));
        // One file, silent.
        let o = defrag(&[&a]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        assert!(o.stdout.is_empty() && o.stderr.is_empty(), "{}", text(&o));
        assert!(fs::read(fx.path("a")).unwrap() == contents(1, |_| 0));
        // A dry run changes nothing.
        let o = defrag(&["-n", &c]);
        let out = text(&o);
        assert_eq!(o.status.code(), Some(0), "{out}");
        assert!(
            out.contains(&format!("{c}: ")) && out.contains("2.0 MiB to rewrite"),
            "{out}"
        );
        // The tree, verbose: the file done already needs nothing, the
        // other is rewritten once for both its names.
        let o = defrag(&["-r", "-v", &mnt]);
        let out = text(&o);
        assert_eq!(o.status.code(), Some(0), "{out}");
        let (before, after) = extents(&out, &a);
        assert!(before <= 4 && after == before, "{out}");
        let (before, after) = extents(&out, &c);
        assert!(before > 50 && after <= 4, "{out}");
        assert!(!out.contains("c2"), "a file once for all its names: {out}");
        assert!(out.contains("2 files, 1 rewritten"), "{out}");
        m.unmount();
    }
    fx.fsck();
    {
        let m = fx.mount(&[]);
        assert!(
            fs::read(fx.path("a")).unwrap() == contents(1, |_| 0),
            "after a remount"
        );
        assert!(fs::read(fx.path("d/c")).unwrap() == contents(2, |_| 0));
        // Shared with a snapshot: left alone, and said so.
        let f = format!("{mnt}/f");
        write_scattered(&fx.path("f"), 4, 0);
        let o = Command::new(TUX3)
            .args(["snapshot", "create", &mnt, "s"])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o));
        // Written anew after the snapshot: nothing of it is shared.
        write_scattered(&fx.path("a"), 1, 1);
        let o = defrag(&["-v", &a]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        let (before, after) = extents(&text(&o), &a);
        assert!(before > 50 && after <= 4, "{}", text(&o));
        let o = defrag(&["-v", &f]);
        let out = text(&o);
        assert_eq!(o.status.code(), Some(0), "{out}");
        assert!(
            out.contains("left as it is; 2.0 MiB shared with snapshots"),
            "{out}"
        );
        assert!(String::from_utf8_lossy(&o.stderr).contains("--unshare"), "{out}");
        let o = defrag(&["--unshare", "-v", &f]);
        let out = text(&o);
        assert_eq!(o.status.code(), Some(0), "{out}");
        let (before, after) = extents(&out, &f);
        assert!(before > 50 && after <= 4, "{out}");
        assert!(o.stderr.is_empty(), "{out}");
        assert!(fs::read(fx.path("a")).unwrap() == contents(1, |_| 1));
        assert!(fs::read(fx.path("f")).unwrap() == contents(4, |_| 0));
        m.unmount();
    }
    fx.fsck();
    // The same on the unmounted image: a fragmented file written there.
    {
        let m = fx.mount(&[]);
        write_scattered(&fx.path("e"), 3, 0);
        m.unmount();
    }
    let img = fx.img.to_str().unwrap();
    let o = defrag(&["--image", img, "-v", "/e", "d/c"]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    let (before, after) = extents(&out, "/e");
    assert!(before > 50 && after <= 4, "{out}");
    let o = defrag(&["--image", img, "/nothing"]);
    assert_eq!(o.status.code(), Some(8), "{}", text(&o));
    fx.fsck();
    let _m = fx.mount(&[]);
    assert!(fs::read(fx.path("e")).unwrap() == contents(3, |_| 0));
}
