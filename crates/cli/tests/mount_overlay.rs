//! Through the real mount: tux3 as the upper layer of overlayfs, the way a
//! container runtime uses it. The lower, upper and work directories are on
//! one tux3 mount; the merged view is mounted with `index=off` (the
//! kernel's default; an index needs NFS-style file handles of the upper
//! layer) and `redirect_dir=on` (a lower directory can be renamed).
//! Through the merged view: a new file lands in upper only; a lower file
//! written to is copied up (upper has the new bytes, lower the old); a
//! lower file removed leaves a whiteout in upper (a character device 0/0,
//! made by RENAME_WHITEOUT or mknod); a lower directory renamed is copied
//! up with a redirect to its old name and a whiteout at that name; a lower
//! directory removed and made again is opaque. Overlayfs refuses an upper
//! layer without RENAME_WHITEOUT and O_TMPFILE, which tux3 has since the
//! server decodes every request itself. After both unmounts, fsck is
//! clean, and the merged view mounted again shows the same.
//!
//! Needs root, /dev/fuse and overlayfs; without them the test prints a note
//! and passes. Guards unmount the overlay and then tux3 on every path, and
//! every mount and unmount runs under a time limit.

mod mount_util;

use mount_util::*;
use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::Command;

/// A mounted overlay; unmounted (lazily as a last resort) when dropped.
struct Overlay {
    merged: PathBuf,
}

impl Overlay {
    /// Mount an overlay of `base/lower`, `base/upper`, `base/work` at
    /// `merged`.
    fn mount(base: &Path, merged: &Path) -> Overlay {
        let opts = format!(
            "lowerdir={},upperdir={},workdir={},index=off,redirect_dir=on",
            base.join("lower").display(),
            base.join("upper").display(),
            base.join("work").display()
        );
        let out = Command::new("timeout")
            .args(["60", "mount", "-t", "overlay", "overlay", "-o", &opts])
            .arg(merged)
            .output()
            .expect("run mount -t overlay");
        assert!(
            out.status.success(),
            "mount -t overlay: {}{}",
            String::from_utf8_lossy(&out.stderr),
            kernel_says()
        );
        Overlay {
            merged: merged.to_path_buf(),
        }
    }

    fn unmount(mut self) {
        let st = Command::new("timeout")
            .args(["60", "umount"])
            .arg(&self.merged)
            .status()
            .expect("run umount");
        assert!(st.success(), "umount of the overlay failed");
        self.merged = PathBuf::new();
    }
}

impl Drop for Overlay {
    fn drop(&mut self) {
        if self.merged.as_os_str().is_empty() || !is_mounted(&self.merged) {
            return;
        }
        let _ = Command::new("timeout")
            .args(["60", "umount"])
            .arg(&self.merged)
            .status();
        if is_mounted(&self.merged) {
            let _ = Command::new("umount").arg("-l").arg(&self.merged).status();
        }
    }
}

/// The kernel's last overlayfs messages, for a failed mount.
fn kernel_says() -> String {
    let out = Command::new("dmesg")
        .output()
        .map(|o| o.stdout)
        .unwrap_or_default();
    let text = String::from_utf8_lossy(&out);
    let lines: Vec<&str> = text.lines().filter(|l| l.contains("overlay")).collect();
    lines[lines.len().saturating_sub(5)..].join("\n")
}

fn has_overlay() -> bool {
    let listed = || fs::read_to_string("/proc/filesystems").is_ok_and(|f| f.contains("\toverlay\n"));
    if !listed() {
        let _ = Command::new("modprobe").arg("overlay").status();
    }
    listed() || skip("no overlayfs in this kernel")
}

fn xattr(p: &Path, name: &str) -> Option<Vec<u8>> {
    let n = std::ffi::CString::new(name).expect("name");
    let mut buf = vec![0u8; 256];
    // SAFETY: valid C strings and buffer of the given length.
    let r = unsafe { libc::lgetxattr(cstr(p).as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    (r >= 0).then(|| buf[..r as usize].to_vec())
}

fn is_whiteout(p: &Path) -> bool {
    fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_char_device() && m.rdev() == 0)
}

/// What the merged view shows after the changes.
fn merged_after(merged: &Path) {
    assert_eq!(
        names(merged),
        ["app.conf", "created", "etc", "srv", "var"],
        "the merged view"
    );
    assert_eq!(
        fs::read(merged.join("app.conf")).unwrap(),
        b"lower conf\nedited\n"
    );
    assert_eq!(fs::read(merged.join("created")).unwrap(), b"new in the container");
    assert_eq!(fs::read(merged.join("srv/index.html")).unwrap(), b"hello");
    assert!(names(&merged.join("etc")).is_empty(), "etc made again: opaque");
    assert_eq!(names(&merged.join("var")), ["log"]);
}

#[test]
fn overlayfs_runs_with_tux3_as_its_upper_layer() {
    if !can_mount() || !has_overlay() {
        return;
    }
    let fx = Fixture::new("128M");
    let m = fx.mount(&[]);
    let base = fx.mnt.clone();
    for d in [
        "lower",
        "upper",
        "work",
        "lower/www",
        "lower/etc",
        "lower/var",
        "lower/var/log",
    ] {
        fs::create_dir(base.join(d)).unwrap();
    }
    fs::write(base.join("lower/app.conf"), b"lower conf\n").unwrap();
    fs::write(base.join("lower/www/index.html"), b"hello").unwrap();
    fs::write(base.join("lower/etc/passwd"), b"root").unwrap();
    fs::write(base.join("lower/secret"), b"to be removed").unwrap();
    let merged_dir = tempfile::tempdir().unwrap();
    let merged = merged_dir.path();
    let ov = Overlay::mount(&base, merged);

    // A new file: in upper only.
    fs::write(merged.join("created"), b"new in the container").unwrap();
    assert_eq!(
        fs::read(base.join("upper/created")).unwrap(),
        b"new in the container"
    );
    assert!(!base.join("lower/created").exists());
    // A lower file written to: copied up, lower unchanged.
    let mut conf = fs::OpenOptions::new()
        .append(true)
        .open(merged.join("app.conf"))
        .unwrap();
    std::io::Write::write_all(&mut conf, b"edited\n").unwrap();
    drop(conf);
    assert_eq!(
        fs::read(base.join("upper/app.conf")).unwrap(),
        b"lower conf\nedited\n"
    );
    assert_eq!(fs::read(base.join("lower/app.conf")).unwrap(), b"lower conf\n");
    // A lower file removed: a whiteout in upper.
    fs::remove_file(merged.join("secret")).unwrap();
    assert!(!merged.join("secret").exists());
    assert!(is_whiteout(&base.join("upper/secret")), "no whiteout for secret");
    assert_eq!(fs::read(base.join("lower/secret")).unwrap(), b"to be removed");
    // A lower directory renamed: copied up with a redirect to its old
    // name, which gets a whiteout.
    fs::rename(merged.join("www"), merged.join("srv")).unwrap();
    assert_eq!(
        xattr(&base.join("upper/srv"), "trusted.overlay.redirect").as_deref(),
        Some(&b"www"[..])
    );
    assert!(is_whiteout(&base.join("upper/www")), "no whiteout for www");
    // A lower directory removed and made again: opaque.
    fs::remove_dir_all(merged.join("etc")).unwrap();
    fs::create_dir(merged.join("etc")).unwrap();
    assert_eq!(
        xattr(&base.join("upper/etc"), "trusted.overlay.opaque").as_deref(),
        Some(&b"y"[..])
    );
    merged_after(merged);

    ov.unmount();
    m.unmount();
    fx.fsck();
    let _m = fx.mount(&[]);
    let _ov = Overlay::mount(&base, merged);
    merged_after(merged);
    assert_eq!(
        names(&base.join("lower")),
        ["app.conf", "etc", "secret", "var", "www"]
    );
}
