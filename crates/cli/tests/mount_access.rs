//! Who gets into a mount, and the kernel flags it carries, read back from
//! /proc/self/mountinfo: a mount by root lets every user in under the
//! kernel's permission checks (`allow_other`, `default_permissions`) and
//! has the flags of any filesystem (no `nosuid`, `nodev`, `noexec` unless
//! asked for), `-o private` lets only the mounter in (and is `nosuid,nodev`,
//! as any FUSE mount), and `nosuid`, `nodev`,
//! `noexec` given as mount(8) passes them reach the kernel.
//!
//! Another user is uid/gid 65534 running `sh -c` (std drops the
//! supplementary groups). Needs root and /dev/fuse; without them every test
//! prints a note and passes. The guard unmounts on every path.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

mod mount_util;

use mount_util::*;

const HELPER: &str = env!("CARGO_BIN_EXE_mount-tux3");
const NOBODY: u32 = 65534;

/// The mount's own flags and the filesystem's options (`allow_other`,
/// `default_permissions`, ...) from /proc/self/mountinfo.
fn mount_flags(mnt: &Path) -> (Vec<String>, Vec<String>) {
    let info = fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let want = mnt.to_str().expect("utf-8 path");
    let line = info
        .lines()
        .rev()
        .find(|l| l.split(' ').nth(4) == Some(want))
        .unwrap_or_else(|| panic!("{want} not in mountinfo"));
    let fields: Vec<&str> = line.split(' ').collect();
    let split = |s: &str| s.split(',').map(str::to_string).collect::<Vec<_>>();
    let dash = fields.iter().position(|f| *f == "-").expect("separator");
    assert_eq!(fields[dash + 1], "fuse.tux3", "{line}");
    (split(fields[5]), split(fields[dash + 3]))
}

/// `sh -c script` as uid and gid 65534: whether it succeeded, and its
/// output and errors.
fn as_nobody(script: &str) -> (bool, String) {
    let out = Command::new("sh")
        .args(["-c", script])
        .uid(NOBODY)
        .gid(NOBODY)
        .current_dir("/")
        .stdin(Stdio::null())
        .output()
        .expect("run sh as nobody");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// A fixture whose directories another user may pass through, and a volume
/// with a public file, a secret one, a closed and an open directory.
fn fixture() -> Fixture {
    let fx = Fixture::new("64M");
    fs::set_permissions(fx.dir.path(), fs::Permissions::from_mode(0o755)).expect("chmod tempdir");
    let m = fx.mount(&["-o", "private"]);
    let file = |name: &str, mode: u32| {
        fs::write(fx.path(name), name).expect("write");
        fs::set_permissions(fx.path(name), fs::Permissions::from_mode(mode)).expect("chmod");
    };
    file("public", 0o644);
    file("secret", 0o600);
    file("run.sh", 0o755);
    fs::write(fx.path("run.sh"), "#!/bin/sh\necho ran\n").expect("write script");
    for (dir, mode) in [("closed", 0o755), ("open", 0o777)] {
        fs::create_dir(fx.path(dir)).expect("mkdir");
        fs::set_permissions(fx.path(dir), fs::Permissions::from_mode(mode)).expect("chmod");
    }
    m.unmount();
    fx
}

#[test]
fn a_mount_by_root_lets_every_user_in_under_the_kernels_checks() {
    if !can_mount() {
        return;
    }
    let fx = fixture();
    let m = fx.mount(&[]);
    let (flags, options) = mount_flags(&fx.mnt);
    for no in ["nosuid", "nodev", "noexec"] {
        assert!(!flags.contains(&no.to_string()), "{no} in {flags:?}");
    }
    for yes in ["allow_other", "default_permissions"] {
        assert!(options.contains(&yes.to_string()), "{yes} not in {options:?}");
    }
    let at = |name: &str| fx.path(name).display().to_string();

    let (ok, out) = as_nobody(&format!("cat {}", at("public")));
    assert!(ok && out == "public", "another user reads a 0644 file: {out}");
    let (ok, out) = as_nobody(&format!("cat {}", at("secret")));
    assert!(!ok && out.contains("Permission denied"), "a 0600 file: {out}");
    let (ok, out) = as_nobody(&format!(": > {}/new", at("closed")));
    assert!(!ok && out.contains("Permission denied"), "root's 0755 dir: {out}");
    let (ok, out) = as_nobody(&format!("echo mine > {}/mine", at("open")));
    assert!(ok, "a 0777 dir: {out}");
    let meta = fs::metadata(fx.path("open/mine")).expect("stat");
    assert_eq!(
        (meta.uid(), meta.gid()),
        (NOBODY, NOBODY),
        "owner of the new file"
    );
    let (ok, out) = as_nobody(&at("run.sh"));
    assert!(ok && out == "ran\n", "executes: {out}");
    m.unmount();
    fx.fsck();
}

#[test]
fn private_lets_only_the_mounter_in() {
    if !can_mount() {
        return;
    }
    let fx = fixture();
    // `noallow_other` is the spelling that goes through mount(8), which
    // keeps `private` to itself.
    for private in ["private", "noallow_other"] {
        let m = fx.mount(&["-o", private]);
        let (flags, options) = mount_flags(&fx.mnt);
        assert!(!options.contains(&"allow_other".to_string()), "{options:?}");
        for no in ["nosuid", "nodev"] {
            assert!(
                flags.contains(&no.to_string()),
                "{private}: {no} not in {flags:?}"
            );
        }
        let (ok, out) = as_nobody(&format!("cat {}", fx.path("public").display()));
        assert!(
            !ok && out.contains("Permission denied"),
            "{private}: another user: {out}"
        );
        assert_eq!(fs::read(fx.path("public")).expect("root reads"), b"public");
        m.unmount();
    }
    fx.fsck();
}

#[test]
fn nosuid_nodev_noexec_reach_the_kernel() {
    if !can_mount() {
        return;
    }
    let fx = fixture();
    let m = fx.mount(&["-o", "nosuid,nodev,noexec"]);
    let (flags, options) = mount_flags(&fx.mnt);
    for no in ["nosuid", "nodev", "noexec"] {
        assert!(flags.contains(&no.to_string()), "{no} not in {flags:?}");
    }
    assert!(options.contains(&"allow_other".to_string()), "{options:?}");
    let (ok, out) = as_nobody(&fx.path("run.sh").display().to_string());
    assert!(!ok && out.contains("Permission denied"), "noexec: {out}");
    m.unmount();

    // mount.tux3 as mount(8) runs it for `mount -t tux3 -o nosuid IMG DIR`.
    let st = Command::new(HELPER)
        .arg(&fx.img)
        .arg(&fx.mnt)
        .args(["-o", "rw,nosuid"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(fx.log_file())
        .status()
        .expect("run mount.tux3");
    assert!(st.success(), "mount.tux3 failed: {}", fx.log_text());
    let m = fx.mounted();
    let (flags, options) = mount_flags(&fx.mnt);
    assert!(flags.contains(&"nosuid".to_string()), "{flags:?}");
    assert!(!flags.contains(&"nodev".to_string()), "{flags:?}");
    assert!(options.contains(&"allow_other".to_string()), "{options:?}");
    m.unmount();
    fx.fsck();
}
