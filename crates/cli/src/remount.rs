//! `tux3 mount -o remount,OPTIONS [IMAGE] DIR`, and `mount -o remount` of a
//! tux3 mount through mount.tux3: change a live mount's options.
//!
//! What may change: `ro`/`rw`, the access-time options (`relatime`,
//! `strictatime`, `noatime`, `diratime`, `nodiratime`) and the kernel's
//! per-mount flags (`nosuid`, `nodev`, `noexec`, `sync`, `dirsync` and
//! their positive forms). The kernel's side changes through mount(2)
//! (`MS_REMOUNT`), the server's through the `IOC_REMOUNT` ioctl. Going
//! read-only remounts first (the kernel refuses it while files are open for
//! writing) and then has the server commit everything; going read-write asks
//! the server first (it refuses when the volume itself was opened
//! read-only). Any other option is refused with a message naming it: it
//! cannot change while the volume is mounted.
//!
//! Calls the fuse crate's ioctl and argument encoding only.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use tux3::types::AtimeRule;
use tux3_fuse::{RemountArg, IOC_REMOUNT};

/// Whether option lists `lists` ask for a remount.
pub fn is_remount<S: AsRef<str>>(lists: &[S]) -> bool {
    lists
        .iter()
        .any(|l| l.as_ref().split(',').any(|o| o == "remount"))
}

/// Options mount(8) may pass along that describe the mount as it is (or
/// mean nothing here): accepted and left alone.
const KEPT: &[&str] = &[
    "remount",
    "defaults",
    "auto",
    "noauto",
    "nofail",
    "_netdev",
    "user",
    "nouser",
    "users",
    "lazytime",
    "nolazytime",
    "loop",
    "default_permissions",
    "allow_other",
];
const KEPT_PREFIXES: &[&str] = &[
    "x-",
    "comment=",
    "user_id=",
    "group_id=",
    "rootmode=",
    "fd=",
    "helper=",
    "uhelper=",
];

/// The kernel's per-mount flags, by name: (flag, set when given).
const FLAGS: &[(&str, libc::c_ulong, bool)] = &[
    ("nosuid", libc::MS_NOSUID, true),
    ("suid", libc::MS_NOSUID, false),
    ("nodev", libc::MS_NODEV, true),
    ("dev", libc::MS_NODEV, false),
    ("noexec", libc::MS_NOEXEC, true),
    ("exec", libc::MS_NOEXEC, false),
    ("sync", libc::MS_SYNCHRONOUS, true),
    ("async", libc::MS_SYNCHRONOUS, false),
    ("dirsync", libc::MS_DIRSYNC, true),
];

/// What the options ask: the server's part and the mount(2) flags.
fn parse<S: AsRef<str>>(lists: &[S], current: libc::c_ulong) -> Result<(RemountArg, libc::c_ulong), String> {
    let mut arg = RemountArg::default();
    // Flags not named keep their present value.
    let mut flags = current
        & (libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC | libc::MS_SYNCHRONOUS | libc::MS_DIRSYNC);
    for opt in lists
        .iter()
        .flat_map(|l| l.as_ref().split(','))
        .filter(|o| !o.is_empty())
    {
        if KEPT.contains(&opt) || KEPT_PREFIXES.iter().any(|p| opt.starts_with(p)) {
            continue;
        }
        if let Some(&(_, f, set)) = FLAGS.iter().find(|(n, _, _)| *n == opt) {
            flags = if set { flags | f } else { flags & !f };
            continue;
        }
        match opt {
            "ro" => arg.read_only = Some(true),
            "rw" => arg.read_only = Some(false),
            "noatime" => arg.atime = Some(AtimeRule::Never),
            "relatime" | "nostrictatime" | "atime" => arg.atime = Some(AtimeRule::Relative),
            "strictatime" | "norelatime" => arg.atime = Some(AtimeRule::Strict),
            "diratime" => arg.diratime = Some(true),
            "nodiratime" => {
                arg.diratime = Some(false);
                flags |= libc::MS_NODIRATIME;
            }
            _ => {
                let name = opt.split('=').next().unwrap_or(opt);
                return Err(format!(
                    "mount option '{name}' cannot change on a live mount: unmount, then mount with it"
                ));
            }
        }
    }
    // The kernel shows the access-time rule too (/proc/mounts).
    flags |= match arg.atime {
        Some(AtimeRule::Never) => libc::MS_NOATIME,
        Some(AtimeRule::Strict) => libc::MS_STRICTATIME,
        Some(AtimeRule::Relative) => libc::MS_RELATIME,
        None => 0,
    };
    Ok((arg, flags))
}

/// The mount flags of the tux3 mount at `dir` (canonical), from
/// /proc/self/mountinfo; `None` if no tux3 mount is there.
fn mount_flags(dir: &Path) -> Option<libc::c_ulong> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let want = dir.to_str()?;
    let line = info.lines().rev().find(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        let dash = f.iter().position(|x| *x == "-");
        f.get(4).map(|d| super::sync::unescape(d)) == Some(want.to_string())
            && dash.and_then(|i| f.get(i + 1)) == Some(&"fuse.tux3")
    })?;
    let opts = line.split(' ').nth(5)?;
    let mut flags = 0;
    for o in opts.split(',') {
        flags |= match o {
            "ro" => libc::MS_RDONLY,
            "nosuid" => libc::MS_NOSUID,
            "nodev" => libc::MS_NODEV,
            "noexec" => libc::MS_NOEXEC,
            "sync" => libc::MS_SYNCHRONOUS,
            "dirsync" => libc::MS_DIRSYNC,
            _ => 0,
        };
    }
    Some(flags)
}

/// Remount the tux3 mount at `dir` with option lists `lists`.
pub fn remount<S: AsRef<str>>(dir: &Path, lists: &[S]) -> Result<(), String> {
    let shown = dir.display();
    let dir = dir.canonicalize().map_err(|e| format!("{shown}: {e}"))?;
    let current = mount_flags(&dir).ok_or_else(|| format!("{shown}: not a tux3 mount point"))?;
    let (arg, flags) = parse(lists, current)?;
    let read_only = arg.read_only.unwrap_or(current & libc::MS_RDONLY != 0);
    let root = File::open(&dir).map_err(|e| format!("{shown}: {e}"))?;
    let ask_server = |arg: RemountArg| -> Result<(), String> {
        let bytes = arg.encode();
        // SAFETY: the command's size is that of `bytes`, which outlives the call.
        if unsafe { libc::ioctl(root.as_raw_fd(), IOC_REMOUNT as _, bytes.as_ptr()) } == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        Err(match e.raw_os_error() {
            Some(libc::EROFS) => format!(
                "{shown}: the volume was mounted read-only (-o ro): unmount it, then mount it read-write"
            ),
            Some(libc::EPERM) => format!("{shown}: only root and the user who mounted it may remount it"),
            _ => format!("{shown}: remount: {e}"),
        })
    };
    if !read_only {
        // The server first: it refuses if it cannot write.
        ask_server(arg)?;
    }
    let c = CString::new(dir.as_os_str().as_bytes()).map_err(|_| format!("{shown}: a NUL in the path"))?;
    let ro = if read_only { libc::MS_RDONLY } else { 0 };
    // SAFETY: valid C strings; no data.
    let r = unsafe {
        libc::mount(
            std::ptr::null(),
            c.as_ptr(),
            std::ptr::null(),
            libc::MS_REMOUNT | ro | flags,
            std::ptr::null(),
        )
    };
    if r != 0 {
        let e = io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            Some(libc::EBUSY) => format!("{shown}: busy: files are open for writing on it"),
            Some(libc::EPERM) => format!("{shown}: remount: {e} (it takes root)"),
            _ => format!("{shown}: remount: {e}"),
        });
    }
    if read_only {
        // Nothing new can be written now: commit what was.
        ask_server(arg)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_a_live_mount_cannot_take_are_refused_by_name() {
        for bad in [
            "cache=64M",
            "threads=2",
            "fsync=strict",
            "writeback_cache",
            "snapshot=x",
            "private",
        ] {
            let e = parse(&[format!("remount,{bad}")], 0).unwrap_err();
            let name = bad.split('=').next().unwrap();
            assert!(e.contains(&format!("'{name}'")), "{e}");
        }
        let (a, f) = parse(
            &["remount,ro,noatime,nodev,suid", "x-systemd.foo,allow_other"],
            libc::MS_NOSUID,
        )
        .unwrap();
        assert_eq!(a.read_only, Some(true));
        assert_eq!(a.atime, Some(AtimeRule::Never));
        assert_eq!(f, libc::MS_NODEV | libc::MS_NOATIME);
        assert!(is_remount(&["rw,remount"]) && !is_remount(&["rw"]));
    }
}
