//! Through the real mount: a volume filled to ENOSPC. `df` (statvfs)
//! reports the volume's size, free blocks as the allocator counts them and
//! available blocks less the reserve; writes and creates then fail with
//! ENOSPC, while `tux3 sync`, fsync, a truncate, unlinks, rmdir and
//! `tux3 snapshot delete` all succeed on the full volume and give the space
//! back; what was written before is intact after a remount, and fsck is
//! clean.
//!
//! Needs root and /dev/fuse; without them the test prints a note and
//! passes.

mod mount_util;

use mount_util::*;
use std::fs;
use std::io::{ErrorKind, Write};
use std::process::Command;

/// statvfs of the mount, in 4 KiB blocks: (blocks, free, available).
fn df(mnt: &std::path::Path) -> (u64, u64, u64) {
    // SAFETY: plain data, filled by statvfs.
    let mut sv: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: valid C string and out pointer.
    assert_eq!(unsafe { libc::statvfs(cstr(mnt).as_ptr(), &mut sv) }, 0);
    let k = sv.f_frsize / 4096;
    (sv.f_blocks * k, sv.f_bfree * k, sv.f_bavail * k)
}

fn tux3_ok(args: &[&dyn AsRef<std::ffi::OsStr>]) {
    let out = Command::new(TUX3)
        .args(args.iter().map(|a| a.as_ref()))
        .output()
        .expect("run tux3");
    assert!(
        out.status.success(),
        "tux3 failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn is_enospc(e: &std::io::Error) -> bool {
    e.raw_os_error() == Some(libc::ENOSPC) || e.kind() == ErrorKind::StorageFull
}

#[test]
fn a_full_mount_reports_df_and_empties() {
    if !can_mount() {
        return;
    }
    let fx = Fixture::new("16M");
    let m = fx.mount(&[]);
    let (blocks, free0, avail0) = df(&fx.mnt);
    assert_eq!(blocks, 4096, "f_blocks is the volume's size");
    assert!(avail0 < free0 && free0 < blocks, "df: {blocks} {free0} {avail0}");

    let precious: Vec<u8> = (0..200_000u32).map(|i| (i * 13 % 251) as u8).collect();
    fs::write(fx.path("precious"), &precious).unwrap();
    assert!(free_blocks(&fx.mnt) <= free0 - precious.len() as u64 / 4096);
    tux3_ok(&[&"snapshot", &"create", &fx.mnt, &"early"]);
    fs::create_dir(fx.path("d")).unwrap();

    // Fill: 256 KiB chunks into files in /d until ENOSPC, then 4 KiB ones
    // into the last file until ENOSPC again.
    let chunk = vec![0x6bu8; 256 << 10];
    let mut full = false;
    let mut made = Vec::new();
    while !full {
        assert!(made.len() < 200, "a 16 MiB volume never filled");
        let path = fx.path(&format!("d/f{}", made.len()));
        let mut f = match fs::File::create(&path) {
            Ok(f) => f,
            Err(e) if is_enospc(&e) => break,
            Err(e) => panic!("create {}: {e}", path.display()),
        };
        made.push(path);
        for _ in 0..8 {
            if let Err(e) = f.write_all(&chunk) {
                assert!(is_enospc(&e), "write: {e}");
                full = true;
                break;
            }
        }
    }
    let mut last = fs::OpenOptions::new()
        .append(true)
        .open(made.last().unwrap())
        .unwrap();
    let mut small = 0;
    loop {
        assert!(small < 200, "4 KiB writes never filled the volume");
        match last.write_all(&chunk[..4096]) {
            Ok(()) => small += 1,
            Err(e) if is_enospc(&e) => break,
            Err(e) => panic!("write: {e}"),
        }
    }
    drop(last);
    let (_, free, avail) = df(&fx.mnt);
    assert!(
        avail < 16,
        "full, yet df shows {avail} blocks available ({free} free)"
    );
    assert!(free >= avail);
    let e = fs::create_dir(fx.path("late")).unwrap_err();
    assert!(is_enospc(&e), "mkdir on a full volume: {e}");

    // On the full volume: sync, fsync, truncate, unlink, rmdir, snapshot
    // delete.
    tux3_ok(&[&"sync", &fx.mnt]);
    let first = fs::OpenOptions::new().write(true).open(fx.path("d/f0")).unwrap();
    first.sync_all().unwrap();
    first.set_len(4096).unwrap();
    first.sync_all().unwrap();
    drop(first);
    tux3_ok(&[&"snapshot", &"delete", &fx.mnt, &"early"]);
    for path in &made {
        fs::remove_file(path).unwrap();
    }
    fs::remove_dir(fx.path("d")).unwrap();
    let back = free_blocks(&fx.mnt);
    assert!(
        back > free + 1000,
        "space not given back: {back} free, {free} when full"
    );
    let (_, _, avail) = df(&fx.mnt);
    assert!(avail > 1000, "df after the deletes: {avail} available");
    fs::write(fx.path("again"), vec![1u8; 1 << 20]).unwrap();
    m.unmount();
    fx.fsck();

    let m = fx.mount(&[]);
    assert_eq!(fs::read(fx.path("precious")).unwrap(), precious);
    assert_eq!(fs::read(fx.path("again")).unwrap(), vec![1u8; 1 << 20]);
    m.unmount();
    fx.fsck();
}
