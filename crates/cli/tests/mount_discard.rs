//! Discard through a real mount: with `-o discard`, deleting a file (cut
//! to nothing first, so that its blocks are freed in the commit a sync
//! makes, not when the kernel forgets its inode) gives
//! its space back to the host within one commit (the image's allocated
//! size drops by at least 90% of the file); without it nothing is given
//! back until `tux3 fstrim` on the mount (or fstrim(8), whose FITRIM the
//! server answers), or on the unmounted image. `tux3 fstrim` is silent on
//! success, says "MNT: N MiB (B bytes) trimmed" with -v, and exits 8 on a
//! read-only mount and 16 on a usage error. (The target is 1 GiB;
//! 64 MiB keeps the test short with the same ratio.)
//!
//! Needs root and /dev/fuse; without them the test prints a note and
//! passes (fails under TUX3_REQUIRE_MOUNT=1).

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Output};

mod mount_util;

use mount_util::*;

const MIB: u64 = 1 << 20;
/// The file deleted, and 90% of it: what must come back.
const FILE: u64 = 64 * MIB;
const WANT: u64 = FILE * 9 / 10;

fn tux3(args: &[&str]) -> Output {
    Command::new(TUX3).args(args).output().expect("run tux3")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Bytes the host holds for the image (`du -B1`).
fn allocated(img: &Path) -> u64 {
    std::fs::metadata(img).expect("stat image").blocks() * 512
}

/// Write the file, commit; delete it, commit. Returns the allocated size
/// after the write and after the delete.
fn write_then_delete(fx: &Fixture, mnt: &str) -> (u64, u64) {
    let data: Vec<u8> = (0..FILE as usize).map(|i| (i % 251) as u8 + 1).collect();
    std::fs::write(fx.path("big"), &data).expect("write");
    assert!(tux3(&["sync", mnt]).status.success());
    let full = allocated(&fx.img);
    assert!(full >= FILE, "the file is on the image: {full}");
    // Cut, then removed: a removed file's blocks are freed when the
    // kernel forgets its inode, which it tells the server whenever it
    // likes (after the sync below, on a busy machine); a cut frees them
    // in the commit the sync makes.
    std::fs::File::create(fx.path("big")).expect("cut");
    std::fs::remove_file(fx.path("big")).expect("rm");
    assert!(tux3(&["sync", mnt]).status.success());
    (full, allocated(&fx.img))
}

#[test]
fn discard_gives_a_deleted_file_back_within_one_commit() {
    if !can_mount() {
        return;
    }
    let fx = Fixture::new("256M");
    let mnt = fx.mnt.to_str().unwrap().to_string();
    let m = fx.mount(&["-o", "discard"]);
    let (full, after) = write_then_delete(&fx, &mnt);
    assert!(full - after >= WANT, "allocated {full} -> {after}");
    m.unmount();
    fx.fsck();
}

#[test]
fn fstrim_gives_the_free_space_back_through_the_mount_and_offline() {
    if !can_mount() {
        return;
    }
    let fx = Fixture::new("256M");
    let mnt = fx.mnt.to_str().unwrap().to_string();
    let img = fx.img.to_str().unwrap().to_string();
    let m = fx.mount(&[]);
    // nodiscard, the default: the deleted file stays allocated.
    let (full, kept) = write_then_delete(&fx, &mnt);
    assert!(
        full - kept.min(full) < MIB,
        "nothing discarded yet: {full} -> {kept}"
    );
    let o = tux3(&["fstrim", "-v", &mnt]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let line = String::from_utf8_lossy(&o.stdout).into_owned();
    let bytes: u64 = line
        .strip_prefix(&format!("{mnt}: "))
        .and_then(|r| r.split_once(" ("))
        .and_then(|(_, r)| r.strip_suffix(" bytes) trimmed\n"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("fstrim -v said {line:?}"));
    assert!((WANT..=256 * MIB).contains(&bytes), "{line}");
    let after = allocated(&fx.img);
    assert!(kept - after >= WANT, "allocated {kept} -> {after}");
    // Silent on success; fstrim(8)'s FITRIM reaches the server too.
    let o = tux3(&["fstrim", &mnt]);
    assert_eq!((o.status.code(), text(&o)), (Some(0), String::new()));
    if Path::new("/usr/sbin/fstrim").exists() || Path::new("/sbin/fstrim").exists() {
        let o = Command::new("fstrim").arg(&mnt).output().expect("run fstrim");
        assert!(o.status.success(), "fstrim(8): {}", text(&o));
    }
    // Usage errors.
    let o = tux3(&["fstrim", "--minimum", "lots", &mnt]);
    assert_eq!(o.status.code(), Some(16), "{}", text(&o));
    m.unmount();

    // A read-only mount refuses.
    let m = fx.mount(&["-o", "ro"]);
    let o = tux3(&["fstrim", &mnt]);
    assert_eq!(o.status.code(), Some(8), "{}", text(&o));
    assert!(text(&o).contains("read-only"), "{}", text(&o));
    m.unmount();

    // Offline: a file deleted on a mount without discard, trimmed on the image.
    let m = fx.mount(&[]);
    let (_, kept) = write_then_delete(&fx, &mnt);
    m.unmount();
    let o = tux3(&["fstrim", &img]);
    assert_eq!((o.status.code(), text(&o)), (Some(0), String::new()));
    let after = allocated(&fx.img);
    assert!(kept - after >= WANT, "offline: allocated {kept} -> {after}");
    fx.fsck();
}
