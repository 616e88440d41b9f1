//! `tux3 dedupe` through a real mount: the server walks and shares while
//! the command follows it; silent on success, `-v` lists the pairs (sent
//! back through the ioctl in turn, more of them than one reply holds) and
//! a summary, `-n` changes nothing; PATHs are relative to the directory
//! given; the files read back as before through the mount and after a
//! remount, and fsck is clean. A file on the mount as TARGET dedupes that
//! file alone.
//!
//! Needs root and /dev/fuse; without them the test prints a note and
//! passes (fails under TUX3_REQUIRE_MOUNT=1).

use std::fs;
use std::process::{Command, Output};

mod mount_util;

use mount_util::*;

fn dedupe(args: &[&str]) -> Output {
    Command::new(TUX3)
        .arg("dedupe")
        .args(args)
        .output()
        .expect("run tux3 dedupe")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `n` blocks of bytes that only `seed` makes.
fn data(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n * 4096)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[test]
fn dedupe_through_the_mount() {
    if !can_mount() {
        return;
    }
    let fx = Fixture::new("128M");
    let mnt = fx.mnt.to_str().unwrap().to_string();
    let mut want = Vec::new();
    {
        let m = fx.mount(&[]);
        fs::create_dir(fx.path("d")).unwrap();
        let a = data(1, 256);
        fs::write(fx.path("a"), &a).unwrap();
        fs::write(fx.path("d/b"), &a).unwrap();
        // 100 files each with a block of a, one pair line each.
        fs::create_dir(fx.path("many")).unwrap();
        for i in 0..100 {
            let mut f = data(1000 + i, 1);
            f.extend_from_slice(&a[4096 * i as usize..4096 * (i as usize + 1)]);
            fs::write(fx.path(&format!("many/{i:03}")), &f).unwrap();
        }
        for p in ["a", "d/b", "many/000", "many/099"] {
            want.push((p, fs::read(fx.path(p)).unwrap()));
        }

        let o = dedupe(&["-n", &mnt]);
        let out = text(&o);
        assert_eq!(o.status.code(), Some(0), "{out}");
        assert!(out.contains("102 files"), "{out}");
        assert!(out.contains("1.4 MiB duplicate, dry run"), "{out}");

        // A file as TARGET: that file alone, nothing in it twice.
        let o = dedupe(&["-v", &format!("{mnt}/d/b")]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        assert!(text(&o).contains("1 files, 1.0 MiB read"), "{}", text(&o));

        // Verbose, with more pairs than one reply holds; blocks are read
        // in device order, so a (written first) is every pair's source.
        let o = dedupe(&["-v", &mnt]);
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        let pairs = out.lines().filter(|l| l.contains(" = ")).count();
        assert_eq!(pairs, 101, "{out}");
        assert!(out.contains("/d/b @0 = /a @0: 1048576 bytes shared"), "{out}");
        assert!(
            out.contains("/many/099 @4096 = /a @405504: 4096 bytes shared"),
            "{out}"
        );
        assert!(out.contains("102 files"), "{out}");

        // PATHs relative to the directory given; what they hold is shared
        // already (the same blocks), so no call. Silent without -v.
        let o = dedupe(&["-v", &mnt, "d", "a"]);
        let out = text(&o);
        assert_eq!(o.status.code(), Some(0), "{out}");
        assert!(out.contains("2 files") && out.contains(" 0 calls"), "{out}");
        let o = dedupe(&[&mnt]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        assert!(o.stdout.is_empty() && o.stderr.is_empty(), "{}", text(&o));

        for (p, d) in &want {
            assert!(&fs::read(fx.path(p)).unwrap() == d, "{p} through the mount");
        }
        // Not a usage the server knows: a path going up.
        let o = dedupe(&[&mnt, "../x"]);
        assert_eq!(o.status.code(), Some(16), "{}", text(&o));
        let o = dedupe(&[&mnt, "no-such"]);
        assert_eq!(o.status.code(), Some(8), "{}", text(&o));
        m.unmount();
    }
    fx.fsck();
    let m = fx.mount(&[]);
    for (p, d) in &want {
        assert!(&fs::read(fx.path(p)).unwrap() == d, "{p} after a remount");
    }
    m.unmount();
}
