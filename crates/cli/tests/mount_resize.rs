//! `tux3 resize` through a real mount and on an unmounted image: grow
//! through the mount and use the new space at once; a shrink that does not
//! fit fails with exit 8 and changes nothing; a shrink moves the files and
//! directories lying past the new end while the mount is in use and cuts
//! the image file; a snapshot holding blocks there refuses it, the server
//! naming the snapshot; fsck is clean after each.
//!
//! Needs root and /dev/fuse; without them the test prints a note and
//! passes (fails under TUX3_REQUIRE_MOUNT=1).

use std::fs;
use std::process::{Command, Output};

mod mount_util;

use mount_util::*;

fn resize(args: &[&str]) -> Output {
    Command::new(TUX3)
        .arg("resize")
        .args(args)
        .output()
        .expect("run tux3 resize")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Blocks and free blocks of the mount, as df sees them.
fn statvfs(path: &std::path::Path) -> (u64, u64) {
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: the path is NUL-terminated and st is valid for writes.
    assert_eq!(unsafe { libc::statvfs(cstr(path).as_ptr(), &mut st) }, 0);
    (
        st.f_blocks as u64 * st.f_frsize as u64,
        st.f_bfree as u64 * st.f_frsize as u64,
    )
}

#[test]
fn grow_through_the_mount_then_shrink_once_the_tail_is_free() {
    if !can_mount() {
        return;
    }
    let fx = Fixture::new("32M");
    let mnt = fx.mnt.to_str().unwrap().to_string();
    let img = fx.img.to_str().unwrap().to_string();
    let data: Vec<u8> = (0..48u32 << 20).map(|i| (i / 4096 * 7) as u8).collect();
    {
        let _m = fx.mount(&[]);
        fs::write(fx.path("keep"), b"kept through every resize").unwrap();
        // 48 MiB does not fit in 32 MiB.
        assert!(fs::write(fx.path("big"), &data).is_err());
        fs::remove_file(fx.path("big")).unwrap();
        let o = resize(&["-v", &mnt, "+96M"]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        assert!(text(&o).contains("-> 32768 blocks"), "{}", text(&o));
        assert_eq!(statvfs(&fx.mnt).0, 128 << 20);
        fs::write(fx.path("big"), &data).unwrap();
        assert_eq!(fs::metadata(&fx.img).unwrap().len(), 128 << 20);
        // Cutting to 32 MiB would cut the data: refused, nothing changed.
        let o = resize(&[&mnt, "32M"]);
        assert_eq!(o.status.code(), Some(8), "{}", text(&o));
        assert!(text(&o).contains("does not fit"), "{}", text(&o));
        assert_eq!(statvfs(&fx.mnt).0, 128 << 20);
        assert_eq!(fs::read(fx.path("big")).unwrap(), data);
        fs::remove_file(fx.path("big")).unwrap();
        let o = resize(&[&mnt, "40M"]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        assert!(o.stdout.is_empty() && o.stderr.is_empty(), "silent: {}", text(&o));
        assert_eq!(statvfs(&fx.mnt).0, 40 << 20);
        assert_eq!(fs::metadata(&fx.img).unwrap().len(), 40 << 20);
        assert_eq!(fs::read(fx.path("keep")).unwrap(), b"kept through every resize");
    }
    fx.fsck();
    // Unmounted: to the image file's size, then back.
    let o = resize(&[&img, "max"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = resize(&["-v", &img, "64M"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(fs::metadata(&fx.img).unwrap().len(), 64 << 20);
    let o = resize(&[&img, "-200M"]);
    assert_eq!(o.status.code(), Some(16), "{}", text(&o));
    fx.fsck();
    let _m = fx.mount(&[]);
    assert_eq!(statvfs(&fx.mnt).0, 64 << 20);
    assert_eq!(fs::read(fx.path("keep")).unwrap(), b"kept through every resize");
}

fn pattern(seed: u32, len: usize) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i / 4096 * 13 + seed * 7 + i % 251) as u8)
        .collect()
}

#[test]
fn shrink_moves_files_past_the_end_through_the_mount() {
    if !can_mount() {
        return;
    }
    let fx = Fixture::new("64M");
    let mnt = fx.mnt.to_str().unwrap().to_string();
    let m = fx.mount(&[]);
    // The filler lies low; what follows lies past 32 MiB.
    fs::write(fx.path("filler"), pattern(0, 36 << 20)).unwrap();
    fs::create_dir(fx.path("dir")).unwrap();
    for i in 0..400u32 {
        fs::write(fx.path(&format!("dir/small-file-number-{i:04}")), pattern(i, 700)).unwrap();
    }
    for i in 1..=4u32 {
        fs::write(fx.path(&format!("big{i}")), pattern(i, 2 << 20)).unwrap();
    }
    let sync = fs::File::open(&fx.mnt).unwrap();
    // Cut, not removed: the kernel may hold a removed file's inode (and
    // its blocks) until it forgets it.
    let cut = || fs::File::create(fx.path("filler")).unwrap().sync_all().unwrap();
    cut();
    sync.sync_all().unwrap();
    let o = resize(&["-v", &mnt, "32M"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("-> 8192 blocks"), "{}", text(&o));
    assert_eq!(statvfs(&fx.mnt).0, 32 << 20);
    assert_eq!(fs::metadata(&fx.img).unwrap().len(), 32 << 20);
    for i in 0..400u32 {
        let got = fs::read(fx.path(&format!("dir/small-file-number-{i:04}"))).unwrap();
        assert_eq!(got, pattern(i, 700), "dir/small-file-number-{i:04}");
    }
    for i in 1..=4u32 {
        assert_eq!(
            fs::read(fx.path(&format!("big{i}"))).unwrap(),
            pattern(i, 2 << 20),
            "big{i}"
        );
    }
    // Grown again, a file past 32 MiB that a snapshot holds: refused,
    // the snapshot named in the server's log, nothing changed.
    let o = resize(&[&mnt, "64M"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // The filler is made durable before `late` is written, so its
    // blocks take the free space below 32 MiB first and `late` can only
    // go past it, wherever the allocator would rather put a new file.
    fs::write(fx.path("filler"), pattern(0, 40 << 20)).unwrap();
    fs::File::open(fx.path("filler")).unwrap().sync_all().unwrap();
    fs::write(fx.path("late"), pattern(9, 4 << 20)).unwrap();
    cut();
    sync.sync_all().unwrap();
    let snap = |args: &[&str]| {
        let o = Command::new(TUX3).arg("snapshot").args(args).output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    };
    snap(&["create", &mnt, "holds-late"]);
    let o = resize(&[&mnt, "32M"]);
    assert_eq!(o.status.code(), Some(8), "{}", text(&o));
    assert!(text(&o).contains("by snapshots"), "{}", text(&o));
    assert!(fx.log_text().contains("holds-late"), "{}", fx.log_text());
    assert_eq!(statvfs(&fx.mnt).0, 64 << 20);
    snap(&["delete", &mnt, "holds-late"]);
    let o = resize(&[&mnt, "32M"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(fs::read(fx.path("late")).unwrap(), pattern(9, 4 << 20));
    drop(sync);
    m.unmount();
    fx.fsck();
}
