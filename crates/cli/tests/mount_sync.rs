//! Through the real mount: `tux3 sync` makes everything written so far
//! durable on a mount whose delta would otherwise never commit
//! (`commit=0`), through both transports. After the sync the server is
//! killed (no unmount, no commit): what was written before the sync is
//! there after a remount, what was written after it is not (which shows
//! the kill loses what no commit covered, so the sync is what kept the
//! rest). Paths that are not on a tux3 mount get a clear error.
//!
//! Needs root and /dev/fuse (and FUSE over io_uring for the ring
//! transport); without them the tests print a note and pass.

mod mount_util;

use mount_util::*;
use std::fs;
use std::process::Command;

/// `tux3 sync ARGS`: exit code and standard error.
fn sync(args: &[&std::ffi::OsStr]) -> (Option<i32>, String) {
    let out = Command::new(TUX3)
        .arg("sync")
        .args(args)
        .output()
        .expect("run tux3 sync");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn synced_data_survives_a_kill(transport: &str) {
    let fx = Fixture::new("64M");
    let opts = format!("commit=0,{transport}");
    let m = fx.mount_foreground(&["-o", &opts]);
    fs::create_dir(fx.path("dir")).unwrap();
    fs::write(fx.path("dir/kept"), b"written before the sync").unwrap();
    fs::write(fx.path("big"), vec![0x5a; 300_000]).unwrap();
    // On a file of the mount, then with no path (every tux3 mount).
    assert_eq!(sync(&[fx.path("dir/kept").as_os_str()]), (Some(0), String::new()));
    fs::write(fx.path("second"), b"before the second sync").unwrap();
    assert_eq!(sync(&[]), (Some(0), String::new()));
    fs::write(fx.path("lost"), b"written after the sync").unwrap();
    m.kill9();

    fx.fsck();
    let m = fx.mount(&[]);
    assert_eq!(fs::read(fx.path("dir/kept")).unwrap(), b"written before the sync");
    assert_eq!(fs::read(fx.path("big")).unwrap(), vec![0x5a; 300_000]);
    assert_eq!(fs::read(fx.path("second")).unwrap(), b"before the second sync");
    assert!(
        !fx.path("lost").exists(),
        "{transport}: a file written after the last sync survived the kill"
    );
    m.unmount();
    fx.fsck();
}

#[test]
fn sync_through_dev_fuse() {
    if !can_mount() {
        return;
    }
    // One mount at a time: a sync of every mount must not meet the other
    // test's killed one.
    let _one = PARAM.lock().unwrap_or_else(|e| e.into_inner());
    synced_data_survives_a_kill("nouring");
}

#[test]
fn sync_through_io_uring() {
    let Some(_switch) = uring_switch(true) else {
        return;
    };
    synced_data_survives_a_kill("uring");
}

#[test]
fn sync_names_paths_that_are_not_tux3_mounts() {
    let dir = tempfile::tempdir().unwrap();
    let (code, err) = sync(&[dir.path().as_os_str()]);
    assert_eq!(code, Some(1));
    assert!(err.contains("not on a tux3 mount"), "{err}");
    assert!(err.contains(&dir.path().display().to_string()), "{err}");
    let missing = dir.path().join("missing");
    let (code, err) = sync(&[missing.as_os_str()]);
    assert_eq!(code, Some(1));
    assert!(err.contains("missing: No such file or directory"), "{err}");
}
