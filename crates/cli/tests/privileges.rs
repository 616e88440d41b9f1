//! Taking privileges away on write, truncate and chown (`StripPrivs`), as
//! Linux does: in the engine, where a file server asks for it, and through
//! the mount, where the kernel leaves it to the server
//! (`FUSE_HANDLE_KILLPRIV_V2`) instead of asking for `security.capability`
//! before every write.
//!
//! The mount test needs root and /dev/fuse; without them it prints a note
//! and passes.

use std::ffi::CString;
use std::fs;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use tux3::device::{Device, MemDevice};
use tux3::{FormatOptions, Fs, OpenOptions, SetAttr, StripPrivs, ROOT_INO, XATTR_CAPS};

mod mount_util;

/// `CAP_FSETID` (linux/capability.h).
const CAP_FSETID: libc::c_ulong = 4;

/// A version 2 file capability set granting `cap_net_raw`, effective.
const CAPS: [u8; 20] = [1, 0, 0, 2, 0, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];

fn fresh() -> (Arc<dyn Device>, Fs) {
    let dev: Arc<dyn Device> = Arc::new(MemDevice::new(4096, 4096));
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    (dev, fs)
}

fn privileged(fs: &Fs, ino: u64, mode: u32) {
    fs.setattr(
        ino,
        &SetAttr {
            mode: Some(mode),
            ..Default::default()
        },
    )
    .unwrap();
    fs.setxattr(ino, XATTR_CAPS, &CAPS, tux3::XattrMode::Any).unwrap();
}

fn has_caps(fs: &Fs, ino: u64) -> bool {
    fs.getxattr(ino, XATTR_CAPS).is_ok()
}

#[test]
fn engine_strips_what_it_is_told() {
    let (dev, fs) = fresh();
    let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap().ino;

    // A plain write or setattr takes nothing.
    privileged(&fs, f, 0o6755);
    fs.write(f, 0, b"plain").unwrap();
    fs.setattr(
        f,
        &SetAttr {
            size: Some(2),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(fs.getattr(f).unwrap().mode & 0o7777, 0o6755);
    assert!(has_caps(&fs, f));

    // A privileged caller's write takes the capabilities only.
    fs.write_stripping(f, 0, b"root", StripPrivs::Caps).unwrap();
    assert_eq!(fs.getattr(f).unwrap().mode & 0o7777, 0o6755);
    assert!(!has_caps(&fs, f));

    // An unprivileged write takes both IDs (group execute is set) too.
    privileged(&fs, f, 0o6755);
    fs.write_stripping(f, 0, b"user", StripPrivs::CapsAndIds).unwrap();
    assert_eq!(fs.getattr(f).unwrap().mode & 0o7777, 0o0755);
    assert!(!has_caps(&fs, f));

    // Without group execute, set-group-ID is a locking mark and stays.
    privileged(&fs, f, 0o6745);
    let set = SetAttr {
        size: Some(1),
        ..Default::default()
    };
    let attr = fs.setattr_stripping(f, &set, StripPrivs::CapsAndIds).unwrap();
    assert_eq!(
        attr.mode & 0o7777,
        0o2745,
        "the returned attributes show the change"
    );
    assert_eq!(attr.size, 1);

    // An empty write changes nothing, so it takes nothing.
    privileged(&fs, f, 0o6755);
    fs.write_stripping(f, 0, b"", StripPrivs::CapsAndIds).unwrap();
    assert_eq!(fs.getattr(f).unwrap().mode & 0o7777, 0o6755);

    // Directories keep their bits (set-group-ID there is inheritance).
    let d = fs.mkdir(ROOT_INO, b"d", 0o2755, 0, 0).unwrap().ino;
    let set = SetAttr {
        uid: Some(7),
        ..Default::default()
    };
    let attr = fs.setattr_stripping(d, &set, StripPrivs::CapsAndIds).unwrap();
    assert_eq!(attr.mode & 0o7777, 0o2755);

    // The change is part of the write: an fsync makes it durable.
    fs.write_stripping(f, 0, b"again", StripPrivs::CapsAndIds)
        .unwrap();
    fs.fsync(f, false).unwrap();
    drop(fs); // crash
    let fs = Fs::open(dev, OpenOptions::default()).unwrap();
    assert_eq!(fs.getattr(f).unwrap().mode & 0o7777, 0o0755);
    assert!(!has_caps(&fs, f));
    assert_eq!(fs.read(f, 0, 16).unwrap(), b"again");
}

fn set_caps(p: &Path) {
    let (p, n) = (
        CString::new(p.as_os_str().as_bytes()).unwrap(),
        CString::new(XATTR_CAPS).unwrap(),
    );
    // SAFETY: valid C strings and buffer.
    let r = unsafe { libc::setxattr(p.as_ptr(), n.as_ptr(), CAPS.as_ptr().cast(), CAPS.len(), 0) };
    assert_eq!(r, 0, "setxattr: {}", std::io::Error::last_os_error());
}

fn caps_of(p: &Path) -> bool {
    xattr_present(p, XATTR_CAPS)
}

fn xattr_present(p: &Path, name: &[u8]) -> bool {
    let (p, n) = (
        CString::new(p.as_os_str().as_bytes()).unwrap(),
        CString::new(name).unwrap(),
    );
    // SAFETY: valid C strings; size 0 asks only for the length.
    unsafe { libc::getxattr(p.as_ptr(), n.as_ptr(), std::ptr::null_mut(), 0) >= 0 }
}

fn mode_of(p: &Path) -> u32 {
    fs::metadata(p).unwrap().mode() & 0o7777
}

/// The mode as the kernel holds it for permission checks: `statx` asking
/// for the mode alone is answered from the kernel's copy unless that copy
/// was dropped (a write drops only size and times), so it shows whether the
/// server told the kernel that a write took the set-user-ID bits away.
fn cached_mode_of(p: &Path) -> u32 {
    let c = mount_util::cstr(p);
    // SAFETY: plain data, filled by statx.
    let mut st: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: valid C string and out pointer.
    let r = unsafe { libc::statx(libc::AT_FDCWD, c.as_ptr(), 0, libc::STATX_MODE, &mut st) };
    assert_eq!(r, 0, "statx {}", p.display());
    u32::from(st.stx_mode) & 0o7777
}

/// Run `sh -c script` with `file` open (for writing, appending) on fd 3,
/// without `CAP_FSETID` (dropped from the bounding set, so root's exec does
/// not get it back), or as `uid` if given.
fn run_unprivileged(file: &Path, script: &str, uid: Option<u32>) {
    let f = fs::OpenOptions::new().append(true).open(file).unwrap();
    let fd = f.as_raw_fd();
    let mut cmd = Command::new("sh");
    cmd.args(["-c", script]).stdin(Stdio::null());
    if let Some(uid) = uid {
        cmd.uid(uid);
    }
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            // dup2 onto itself would keep close-on-exec.
            let onto3 = if fd == 3 {
                libc::fcntl(3, libc::F_SETFD, 0)
            } else {
                libc::dup2(fd, 3)
            };
            // Another user (set before this runs) has no capabilities.
            let keep_id = uid.is_some();
            if onto3 < 0 || (!keep_id && libc::prctl(libc::PR_CAPBSET_DROP, CAP_FSETID, 0, 0, 0) != 0) {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = cmd.output().expect("run sh");
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn mount_strips_privileges_on_write_truncate_and_chown() {
    use mount_util::*;
    if !can_mount() {
        return;
    }
    let fx = Fixture::new("64M");
    let m = fx.mount(&["-o", "allow_other"]);
    let f = fx.path("f");
    fs::write(&f, b"0123456789").unwrap();
    let privileged = |mode: u32| {
        fs::set_permissions(&f, fs::Permissions::from_mode(mode)).unwrap();
        set_caps(&f);
        assert!(caps_of(&f));
    };

    // Root (with CAP_FSETID) appends: the capabilities go, the IDs stay.
    privileged(0o6777);
    fs::OpenOptions::new()
        .append(true)
        .open(&f)
        .unwrap()
        .write_all(b"a")
        .unwrap();
    assert_eq!(mode_of(&f), 0o6777);
    assert!(!caps_of(&f));

    // A writer without CAP_FSETID: both IDs go (group execute is set).
    privileged(0o6777);
    assert_eq!(cached_mode_of(&f), 0o6777);
    run_unprivileged(&f, "printf b >&3", None);
    assert_eq!(cached_mode_of(&f), 0o0777, "the kernel's copy of the mode");
    assert_eq!(mode_of(&f), 0o0777);
    assert!(!caps_of(&f));

    // Without group execute, set-group-ID stays.
    privileged(0o6767);
    run_unprivileged(&f, "printf c >&3", None);
    assert_eq!(mode_of(&f), 0o2767);

    // Root truncates: the IDs stay; root without CAP_FSETID, or another
    // user, truncates: they go.
    privileged(0o6777);
    fs::OpenOptions::new()
        .write(true)
        .open(&f)
        .unwrap()
        .set_len(5)
        .unwrap();
    assert_eq!(mode_of(&f), 0o6777);
    assert!(!caps_of(&f));
    privileged(0o6777);
    run_unprivileged(&f, "truncate -s 4 /proc/self/fd/3", None);
    assert_eq!(mode_of(&f), 0o0777);
    assert!(!caps_of(&f));
    privileged(0o6777);
    run_unprivileged(&f, "truncate -s 3 /proc/self/fd/3", Some(65534));
    assert_eq!(mode_of(&f), 0o0777);
    assert!(!caps_of(&f));
    assert_eq!(fs::metadata(&f).unwrap().len(), 3);

    // Chown takes the IDs, even root's.
    privileged(0o6777);
    std::os::unix::fs::chown(&f, Some(1), Some(1)).unwrap();
    assert_eq!(mode_of(&f), 0o0777);
    assert!(!caps_of(&f));

    // Data written by every step is there, and it is all durable.
    assert_eq!(fs::read(&f).unwrap(), b"012");
    m.unmount();
    fx.fsck();
    let m = fx.mount(&[]);
    assert_eq!(mode_of(&f), 0o0777);
    assert_eq!(fs::metadata(&f).unwrap().uid(), 1);
    m.unmount();
}
