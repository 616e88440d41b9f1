//! `tux3 dedupe` on an image file (no root needed): silent on success with
//! exit 0; `-v` lists each pair and a summary; `-n` prints the summary and
//! changes nothing; PATHs limit the walk; the files read back as before
//! and fsck is clean; usage and operational errors give fsck's codes.

use std::fs;
use std::path::Path;
use std::process::{Command, Output};

fn tux3(args: &[&dyn AsRef<std::ffi::OsStr>]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tux3"))
        .args(args.iter().map(|a| a.as_ref()))
        .output()
        .expect("run tux3")
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

/// An image made from a tree with duplicates: /a and /d/b equal (16
/// blocks), /d/c the first 8 of them and 8 of its own.
fn image(dir: &Path) -> std::path::PathBuf {
    let src = dir.join("src");
    fs::create_dir_all(src.join("d")).unwrap();
    let a = data(1, 16);
    fs::write(src.join("a"), &a).unwrap();
    fs::write(src.join("d/b"), &a).unwrap();
    let mut c = a[..8 * 4096].to_vec();
    c.extend(data(2, 8));
    fs::write(src.join("d/c"), &c).unwrap();
    let img = dir.join("img");
    let o = tux3(&[&"mkfs", &"--size", &"64M", &"--from", &src, &img]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    img
}

fn cat(img: &Path, path: &str) -> Vec<u8> {
    let o = tux3(&[&"cat", &img, &path]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    o.stdout
}

#[test]
fn dedupe_an_image() {
    let dir = tempfile::tempdir().unwrap();
    let img = image(dir.path());
    let before: Vec<Vec<u8>> = ["/a", "/d/b", "/d/c"].iter().map(|p| cat(&img, p)).collect();

    // A dry run: the summary, nothing changed.
    let bytes = fs::read(&img).unwrap();
    let o = tux3(&[&"dedupe", &"-n", &img]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("3 files, 0.2 MiB read"), "{out}");
    assert!(out.contains("0.1 MiB duplicate, dry run"), "{out}");
    assert!(fs::read(&img).unwrap() == bytes, "a dry run writes nothing");

    // Verbose: the pairs and the summary.
    let o = tux3(&[&"dedupe", &"-v", &img]);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(o.stderr.is_empty(), "{}", text(&o));
    let pairs: Vec<&str> = out.lines().filter(|l| l.contains(" = ")).collect();
    assert_eq!(
        pairs,
        [
            "/d/b @0 = /a @0: 65536 bytes shared",
            "/d/c @0 = /a @0: 32768 bytes shared"
        ],
        "{out}"
    );
    assert!(
        out.contains("0.1 MiB shared; 0.0 MiB in zero blocks; 2 calls, 0 found"),
        "{out}"
    );

    // Silent otherwise; PATHs limit the walk.
    let o = tux3(&[&"dedupe", &img, &"d"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(o.stdout.is_empty() && o.stderr.is_empty(), "{}", text(&o));
    // Both map /a's blocks now: shared already, so no call.
    let o = tux3(&[&"dedupe", &"-v", &img, &"/d/c", &"d/b"]);
    assert!(text(&o).contains("2 files"), "{}", text(&o));
    assert!(text(&o).contains(" 0 calls"), "{}", text(&o));
    assert!(!text(&o).contains(" = "), "{}", text(&o));

    let after: Vec<Vec<u8>> = ["/a", "/d/b", "/d/c"].iter().map(|p| cat(&img, p)).collect();
    assert!(after == before, "the files read back as before");
    let o = tux3(&[&"fsck", &img]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

#[test]
fn dedupe_errors_have_fsck_codes() {
    let dir = tempfile::tempdir().unwrap();
    let img = image(dir.path());
    let o = tux3(&[&"dedupe"]);
    assert_eq!(o.status.code(), Some(16), "{}", text(&o));
    let o = tux3(&[&"dedupe", &dir.path().join("missing")]);
    assert_eq!(o.status.code(), Some(8), "{}", text(&o));
    let o = tux3(&[&"dedupe", &img, &"no-such"]);
    assert_eq!(o.status.code(), Some(8), "{}", text(&o));
    assert!(text(&o).starts_with("tux3 dedupe: "), "{}", text(&o));
    let o = tux3(&[&"dedupe", &img, &"../x"]);
    assert_eq!(o.status.code(), Some(16), "{}", text(&o));
}
