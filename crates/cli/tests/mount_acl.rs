//! POSIX ACLs through a mount, as ext4 keeps them: the kernel enforces an
//! access ACL's named entries beside the mode bits, `chmod` rewrites its
//! mask, a directory's default ACL is inherited by what is made in it
//! (masked by the mode asked for, without the umask), a directory inherits
//! the default ACL itself, and all of it survives a remount and fsck.
//!
//! Another user is uid/gid 65534 running `sh -c`. Needs root, /dev/fuse and
//! setfacl/getfacl (the `acl` package); without root and /dev/fuse every
//! test prints a note and passes. The guard unmounts on every path.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;

mod mount_util;

use mount_util::*;

fn root(script: &str) -> String {
    let (ok, out) = sh(script, false);
    assert!(ok, "{script}: {out}");
    out
}

#[test]
fn access_and_default_acls_are_enforced_inherited_and_kept() {
    if !can_mount() {
        return;
    }
    let fx = Fixture::new("64M");
    fs::set_permissions(fx.dir.path(), fs::Permissions::from_mode(0o755)).expect("chmod tempdir");
    let m = fx.mount(&[]);
    let at = |name: &str| fx.path(name).display().to_string();
    fs::write(fx.path("file"), "secret").expect("write");
    fs::set_permissions(fx.path("file"), fs::Permissions::from_mode(0o600)).expect("chmod");

    // Without an ACL entry the other user is refused; with one it reads.
    let (ok, out) = sh(&format!("cat {}", at("file")), true);
    assert!(!ok && out.contains("Permission denied"), "{out}");
    root(&format!("setfacl -m u:{NOBODY}:r {}", at("file")));
    let (ok, out) = sh(&format!("cat {}", at("file")), true);
    assert!(ok && out == "secret", "a named user entry grants read: {out}");
    // The mask shows as the mode's group bits; chmod narrows it again.
    let mode = fs::metadata(fx.path("file")).expect("stat").permissions().mode();
    assert_eq!(mode & 0o777, 0o640, "mask r-- as group bits");
    root(&format!("chmod 600 {}", at("file")));
    let acl = root(&format!("getfacl -cpn {}", at("file")));
    assert!(acl.contains("mask::---"), "chmod rewrote the mask: {acl}");
    let (ok, _) = sh(&format!("cat {}", at("file")), true);
    assert!(!ok, "the mask now denies the named user");
    // An ACL that says no more than the mode is folded into it.
    root(&format!(
        "setfacl -b {0} && setfacl -m u::rw,g::r,o::r {0}",
        at("file")
    ));
    let mode = fs::metadata(fx.path("file")).expect("stat").permissions().mode();
    assert_eq!(mode & 0o777, 0o644);
    assert!(!root(&format!("getfattr -m - -d {}", at("file"))).contains("posix_acl"));

    // A default ACL: files and directories made inside inherit it.
    fs::create_dir(fx.path("shared")).expect("mkdir");
    root(&format!("setfacl -d -m u:{NOBODY}:rwx {}", at("shared")));
    root(&format!(
        "umask 077 && echo made > {0}/new && mkdir {0}/sub",
        at("shared")
    ));
    let acl = root(&format!("getfacl -cpn {}", at("shared/new")));
    assert!(acl.contains(&format!("user:{NOBODY}:rwx")), "{acl}");
    let mode = fs::metadata(fx.path("shared/new"))
        .expect("stat")
        .permissions()
        .mode();
    assert_eq!(
        mode & 0o777,
        0o664,
        "the default ACL, not the umask, masks the mode"
    );
    let (ok, out) = sh(&format!("echo more >> {}", at("shared/new")), true);
    assert!(ok, "the inherited entry grants write: {out}");
    let sub = root(&format!("getfacl -cpn {}", at("shared/sub")));
    assert!(sub.contains(&format!("default:user:{NOBODY}:rwx")), "{sub}");
    // Outside it, the umask applies as usual.
    root(&format!("umask 077 && echo plain > {}", at("plain")));
    let mode = fs::metadata(fx.path("plain")).expect("stat").permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    // A default ACL on a file is refused, as on ext4.
    let (ok, _) = sh(&format!("setfacl -d -m u:{NOBODY}:r {}", at("plain")), false);
    assert!(!ok);

    let before = root(&format!("cd {} && getfacl -R -cpn .", fx.mnt.display()));
    m.unmount();
    fx.fsck();
    let m = fx.mount(&[]);
    let after = root(&format!("cd {} && getfacl -R -cpn .", fx.mnt.display()));
    assert_eq!(before, after, "ACLs survive a remount");
    m.unmount();
}

/// `mkfs --from` copies a tree's ACLs as they are: a file made in a
/// directory before its default ACL was set keeps having none, and one
/// made after keeps the one it inherited (tmpfs holds the host tree).
#[test]
fn mkfs_from_keeps_acls_exactly() {
    if !can_mount() {
        return;
    }
    let fx = Fixture::new("64M");
    let host = fx.dir.path().join("host");
    fs::create_dir(&host).expect("mkdir host");
    root(&format!("mount -t tmpfs tmpfs {}", host.display()));
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let _host_guard = Unmount(host.clone());
    let h = host.display();
    root(&format!(
        "cd {h} && mkdir d && echo old > d/before && chmod 644 d/before && echo p > d/plain && \
         setfacl -d -m u:{NOBODY}:rwx,o::- d && echo new > d/after && mkdir d/sub && \
         setfacl -m u:{NOBODY}:r,m::r d/before"
    ));
    let want = root(&format!(
        "cd {h} && find . | sort | xargs getfacl -pn && stat -c '%n %a' d/* d"
    ));
    fs::remove_file(&fx.img).expect("remove image");
    let tux3 = env!("CARGO_BIN_EXE_tux3");
    let out = Command::new(tux3)
        .args(["mkfs", "--size", "64M", "--from"])
        .arg(&host)
        .arg(&fx.img)
        .output()
        .expect("mkfs --from");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let m = fx.mount(&[]);
    let got = root(&format!(
        "cd {} && find . | sort | xargs getfacl -pn && stat -c '%n %a' d/* d",
        fx.mnt.display()
    ));
    assert_eq!(got, want, "the copy's ACLs and modes");
    m.unmount();
    fx.fsck();
}
