//! File handles through a mount (`name_to_handle_at`, `open_by_handle_at`,
//! what an NFS export and fanotify rely on): a handle of a file or a
//! directory opens it again after the kernel forgot its inode, after a
//! remount, and gives ESTALE once the file is gone, even when a new file
//! got its inode number.
//!
//! Needs root (open_by_handle_at wants CAP_DAC_READ_SEARCH) and /dev/fuse;
//! without them every test prints a note and passes. The guard unmounts on
//! every path.

use std::fs::{self, File};
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

mod mount_util;

use mount_util::*;

/// Bytes of a handle's opaque part we make room for (MAX_HANDLE_SZ).
const MAX_HANDLE: usize = 128;

/// `struct file_handle` with room for its opaque bytes.
#[repr(C)]
struct Handle {
    bytes: u32,
    kind: i32,
    data: [u8; MAX_HANDLE],
}

fn handle_of(p: &Path) -> Handle {
    let mut h = Handle {
        bytes: MAX_HANDLE as u32,
        kind: 0,
        data: [0; MAX_HANDLE],
    };
    let mut mount_id: libc::c_int = 0;
    let c = cstr(p);
    // SAFETY: valid path, handle buffer of the size it says, out pointer.
    let r = unsafe {
        libc::syscall(
            libc::SYS_name_to_handle_at,
            libc::AT_FDCWD,
            c.as_ptr(),
            &mut h as *mut Handle,
            &mut mount_id as *mut libc::c_int,
            0,
        )
    };
    assert_eq!(
        r,
        0,
        "name_to_handle_at {}: {}",
        p.display(),
        std::io::Error::last_os_error()
    );
    h
}

/// Open `h` on the mount at `mnt`: the file, or the errno.
fn open_handle(mnt: &Path, h: &Handle, flags: libc::c_int) -> Result<File, i32> {
    let dir = File::open(mnt).expect("open mount point");
    // SAFETY: a valid directory descriptor and handle.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_open_by_handle_at,
            dir.as_raw_fd(),
            h as *const Handle,
            flags,
        )
    };
    if fd < 0 {
        return Err(errno());
    }
    // SAFETY: a descriptor we own now.
    Ok(unsafe { File::from_raw_fd(fd as i32) })
}

/// Make the kernel forget the inodes and names it caches.
fn forget_inodes() {
    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };
    fs::write("/proc/sys/vm/drop_caches", "2").expect("drop caches");
}

fn read_all(mut f: File) -> String {
    let mut s = String::new();
    f.read_to_string(&mut s).expect("read");
    s
}

#[test]
fn file_handles_outlive_the_kernels_inode_and_a_remount_and_go_stale() {
    if !can_mount() {
        return;
    }
    let fx = Fixture::new("64M");
    let m = fx.mount(&[]);
    fs::create_dir(fx.path("d")).expect("mkdir");
    fs::write(fx.path("d/f"), "hello").expect("write");
    let (hf, hd) = (handle_of(&fx.path("d/f")), handle_of(&fx.path("d")));
    forget_inodes();
    let f = open_handle(&fx.mnt, &hf, libc::O_RDONLY).expect("open file by handle");
    assert_eq!(read_all(f), "hello");
    let d = open_handle(&fx.mnt, &hd, libc::O_RDONLY | libc::O_DIRECTORY).expect("open dir by handle");
    assert!(d.metadata().expect("fstat").is_dir());
    drop(d);
    m.unmount();

    let m = fx.mount(&[]);
    let f = open_handle(&fx.mnt, &hf, libc::O_RDONLY).expect("open by handle after a remount");
    assert_eq!(read_all(f), "hello");
    let old_ino = fs::metadata(fx.path("d/f")).expect("stat").ino();
    fs::remove_file(fx.path("d/f")).expect("unlink");
    // New files, one of which may take the old inode number.
    let mut reused = false;
    for i in 0..64 {
        let p = fx.path(&format!("d/new{i}"));
        fs::write(&p, "new").expect("write");
        reused |= fs::metadata(&p).expect("stat").ino() == old_ino;
    }
    forget_inodes();
    assert_eq!(
        open_handle(&fx.mnt, &hf, libc::O_RDONLY).err(),
        Some(libc::ESTALE),
        "a handle of a deleted file (inode number reused: {reused})"
    );
    m.unmount();
    fx.fsck();
}
