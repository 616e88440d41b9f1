//! `mkfs.tux3` and `fsck.tux3` as mkfs(8) and fsck(8) run them: their
//! argument conventions and exit codes, on image files (no root needed).
//! fsck.tux3 on a clean volume, a volume with a repairable problem (a
//! damaged older superblock copy) and one with a problem it cannot repair
//! (a flipped bit in a tree block); usage errors; a missing image; and a
//! cancelled check (SIGINT pending, blocked, when the program starts: it
//! unblocks it after installing its handler, so no timing is involved).

use clap::Parser;
use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use tux3::structures::superblock::Superblock;
use tux3_cli::fsck_helper::FsckHelperArgs;
use tux3_cli::mkfs_helper::{size_argument, MkfsHelperArgs};

const MKFS: &str = env!("CARGO_BIN_EXE_mkfs-tux3");
const FSCK: &str = env!("CARGO_BIN_EXE_fsck-tux3");

fn run(program: &str, args: &[&str], img: Option<&Path>) -> Output {
    let mut cmd = Command::new(program);
    cmd.args(args).stdin(Stdio::null());
    if let Some(img) = img {
        cmd.arg(img);
    }
    cmd.output().expect("run the helper")
}

fn code(o: &Output) -> Option<i32> {
    o.status.code()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A fresh 16 MiB volume made by `mkfs.tux3 -q IMG SIZE`.
fn volume(dir: &Path) -> PathBuf {
    let img = dir.join("img");
    let o = run(MKFS, &["-q"], Some(&img));
    assert_eq!(code(&o), Some(1), "no size for a new image: {}", text(&o));
    let o = Command::new(MKFS)
        .args(["-q"])
        .arg(&img)
        .arg("16M")
        .output()
        .expect("run mkfs.tux3");
    assert_eq!(code(&o), Some(0), "{}", text(&o));
    assert!(o.stdout.is_empty(), "-q prints nothing: {}", text(&o));
    img
}

/// Flip one bit of block `block` (of 4096 bytes) of `img`.
fn flip(img: &Path, block: u64, offset: usize) {
    let mut bytes = fs::read(img).expect("read image");
    bytes[block as usize * 4096 + offset] ^= 0x10;
    fs::write(img, bytes).expect("write image");
}

/// The superblock copy not in use.
fn older_superblock(img: &Path) -> u64 {
    let dev = tux3::open_path(img, false).expect("open image");
    1 - Superblock::load(dev.as_ref()).expect("superblock").home()
}

#[test]
fn fsck_exit_codes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let img = volume(dir.path());
    for flags in [
        &[][..],
        &["-n"],
        &["-p"],
        &["-a"],
        &["-y"],
        &["-f", "-y"],
        &["-fp", "-C0"],
        &["-C", "3", "-a"],
    ] {
        let o = run(FSCK, flags, Some(&img));
        assert_eq!(code(&o), Some(0), "clean, {flags:?}: {}", text(&o));
        assert!(text(&o).contains("clean"), "{}", text(&o));
    }

    // A repairable problem: -n and no option change nothing (4), -p
    // repairs it (1), and then the volume is clean (0).
    let sb = older_superblock(&img);
    flip(&img, sb, 40);
    let damaged = fs::read(&img).expect("read image");
    for flags in [&[][..], &["-n"], &["-n", "-f"]] {
        let o = run(FSCK, flags, Some(&img));
        assert_eq!(code(&o), Some(4), "{flags:?}: {}", text(&o));
        assert!(text(&o).contains(&format!("block {sb}")), "{}", text(&o));
    }
    assert!(
        fs::read(&img).expect("read image") == damaged,
        "nothing written without -p, -a or -y"
    );
    let o = run(FSCK, &["-p"], Some(&img));
    assert_eq!(code(&o), Some(1), "{}", text(&o));
    assert_eq!(code(&run(FSCK, &["-n"], Some(&img))), Some(0));
    flip(&img, sb, 40);
    assert_eq!(code(&run(FSCK, &["-y"], Some(&img))), Some(1));
    assert_eq!(code(&run(FSCK, &["-a"], Some(&img))), Some(0));

    // A problem no repair can fix: a flipped bit in a tree block.
    let dev = tux3::open_path(&img, false).expect("open image");
    let meta = tux3_tools::fsck::metadata_blocks(dev).expect("metadata blocks");
    let tree_block = *meta
        .iter()
        .find(|&&b| b > 1)
        .expect("a block past the superblocks");
    flip(&img, tree_block, 100);
    let o = run(FSCK, &["-y"], Some(&img));
    assert_eq!(code(&o), Some(4), "{}", text(&o));
    assert!(text(&o).contains("problems left"), "{}", text(&o));

    // Operational errors: no such image, not a tux3 volume.
    let o = run(FSCK, &["-n"], Some(&dir.path().join("missing")));
    assert_eq!(code(&o), Some(8), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).starts_with("fsck.tux3: "),
        "{}",
        text(&o)
    );
    let zeros = dir.path().join("zeros");
    fs::write(&zeros, vec![0u8; 1 << 16]).expect("write");
    assert_eq!(code(&run(FSCK, &["-p"], Some(&zeros))), Some(8));
}

#[test]
fn fsck_usage_errors_exit_16() {
    let dir = tempfile::tempdir().expect("tempdir");
    let img = volume(dir.path());
    let usage = |args: &[&str]| {
        let o = run(FSCK, args, None);
        assert_eq!(code(&o), Some(16), "{args:?}: {}", text(&o));
        assert!(!o.stderr.is_empty(), "{args:?}: says why");
    };
    let at = img.to_str().expect("utf-8 path");
    usage(&[]);
    usage(&["-n", "-y", at]);
    usage(&["-n", "-p", at]);
    usage(&["-a", "-y", at]);
    usage(&["-x", at]);
    usage(&["-C", at]);
    usage(&[at, at]);
    // Help and version succeed.
    for flag in ["-V", "--version", "--help"] {
        let o = run(FSCK, &[flag], None);
        assert_eq!(code(&o), Some(0), "{flag}: {}", text(&o));
        assert!(text(&o).contains("fsck.tux3"), "{}", text(&o));
    }
    assert!(
        text(&run(FSCK, &["--help"], None)).contains("32"),
        "--help lists the exit codes"
    );

    let a =
        FsckHelperArgs::try_parse_from(["fsck.tux3", "-a", "-f", "-C0", "/dev/sdb1"]).expect("fsck -a form");
    assert!(a.repair() && a.force && !a.no);
    assert_eq!(a.progress_fd, Some(0));
    assert_eq!(a.target, Path::new("/dev/sdb1"));
    let a = FsckHelperArgs::try_parse_from(["fsck.tux3", "-n", "img"]).expect("-n");
    assert!(!a.repair() && a.no);
    assert!(!FsckHelperArgs::try_parse_from(["fsck.tux3", "img"])
        .expect("no flags")
        .repair());
}

#[test]
fn fsck_cancelled_exits_32() {
    let dir = tempfile::tempdir().expect("tempdir");
    let img = volume(dir.path());
    let mut cmd = Command::new(FSCK);
    cmd.arg("-n").arg(&img).stdin(Stdio::null());
    // SAFETY: only async-signal-safe calls between fork and exec: block
    // SIGINT (the mask survives exec) and make it pending.
    unsafe {
        cmd.pre_exec(|| {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGINT);
            if libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) != 0
                || libc::raise(libc::SIGINT) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let o = cmd.output().expect("run fsck.tux3");
    assert_eq!(code(&o), Some(32), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("cancelled"),
        "{}",
        text(&o)
    );
    assert!(o.stdout.is_empty(), "no report: {}", text(&o));
}

#[test]
fn mkfs_conventions() {
    let dir = tempfile::tempdir().expect("tempdir");
    let img = volume(dir.path());
    // A volume is there: refused without -F, the image untouched.
    let before = fs::read(&img).expect("read image");
    let o = run(MKFS, &[], Some(&img));
    assert_eq!(code(&o), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("-F") && text(&o).contains("tux3 volume"),
        "{}",
        text(&o)
    );
    assert!(fs::read(&img).expect("read image") == before);
    // -F formats it; SIZE in blocks of -b bytes extends it.
    let o = Command::new(MKFS)
        .args(["-F", "-b", "1024"])
        .arg(&img)
        .arg("32768")
        .output()
        .expect("run mkfs.tux3");
    assert_eq!(code(&o), Some(0), "{}", text(&o));
    assert!(text(&o).contains("32768 blocks of 1024 bytes"), "{}", text(&o));
    assert_eq!(fs::metadata(&img).expect("stat").len(), 32 << 20);
    assert_eq!(code(&run(FSCK, &["-n"], Some(&img))), Some(0));

    // Usage errors and bad values exit 1, saying what was wrong.
    let at = img.to_str().expect("utf-8 path");
    for (args, says) in [
        (&[][..], "required"),
        (&["-x", at][..], "-x"),
        (&["-b", "3000", at][..], "power of two"),
        (&["-F", "-s", "1M", at, "256"][..], "cannot be used"),
        (&["-F", at, "lots"][..], "invalid size"),
        (&["-F", at, "1", "2"][..], "unexpected"),
    ] {
        let o = run(MKFS, args, None);
        assert_eq!(code(&o), Some(1), "{args:?}: {}", text(&o));
        assert!(text(&o).contains(says), "{args:?}: {}", text(&o));
    }
    let o = run(MKFS, &["-V"], None);
    assert_eq!(code(&o), Some(0));
    assert!(text(&o).starts_with("mkfs.tux3 "), "{}", text(&o));

    assert_eq!(size_argument("100", 4096), Ok(409_600));
    assert_eq!(size_argument("100M", 4096), Ok(100 << 20));
    assert!(size_argument("99999999999999999999", 4096).is_err());
    assert!(size_argument("18446744073709551615", 4096).is_err());
    let a = MkfsHelperArgs::try_parse_from(["mkfs.tux3", "-q", "-F", "-b", "2048", "/dev/sdb1", "1000"])
        .expect("mkfs(8) form");
    let (mkfs, force) = a.resolve().expect("resolve");
    assert!(force && mkfs.quiet);
    assert_eq!((mkfs.block_size, mkfs.size), (2048, Some(2048 * 1000)));
    assert_eq!(mkfs.target, Path::new("/dev/sdb1"));
}

#[test]
fn mkfs_refuses_another_filesystem_without_f() {
    let dir = tempfile::tempdir().expect("tempdir");
    let img = dir.path().join("ext4.img");
    fs::File::create(&img)
        .expect("create")
        .set_len(16 << 20)
        .expect("size");
    let made = Command::new("mkfs.ext4")
        .args(["-q", "-F"])
        .arg(&img)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let probes = Command::new("blkid")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    if !made || !probes {
        eprintln!("note: skipping: needs mkfs.ext4 and blkid");
        return;
    }
    let o = run(MKFS, &["-q"], Some(&img));
    assert_eq!(code(&o), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("ext4") && text(&o).contains("-F"),
        "{}",
        text(&o)
    );
    let o = run(MKFS, &["-q", "-F"], Some(&img));
    assert_eq!(code(&o), Some(0), "{}", text(&o));
    assert_eq!(code(&run(FSCK, &["-n"], Some(&img))), Some(0));
}
