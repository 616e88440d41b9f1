//! Through the real mount: xattrs of any size Linux allows. A 64 KiB value
//! and a 255-byte name are set and read back through the kernel (size
//! query, exact buffer, ERANGE one byte short, E2BIG past 64 KiB); names
//! fill a whole 64 KiB listxattr answer; everything is there after a
//! remount, fsck is clean, and the space of the values comes back when
//! they are removed.
//!
//! Needs root and /dev/fuse; without them the test prints a note and
//! passes. The mount guard unmounts on every path.

mod mount_util;

use mount_util::*;
use std::ffi::CString;
use std::fs;
use std::path::Path;

fn set(p: &Path, name: &str, value: &[u8]) -> Result<(), i32> {
    let (p, n) = (cstr(p), CString::new(name).expect("name"));
    // SAFETY: valid C strings and a buffer of `value.len()` bytes.
    let r = unsafe { libc::setxattr(p.as_ptr(), n.as_ptr(), value.as_ptr().cast(), value.len(), 0) };
    if r == 0 {
        Ok(())
    } else {
        Err(errno())
    }
}

/// getxattr into a buffer of `cap` bytes (0: the size query).
fn get(p: &Path, name: &str, cap: usize) -> Result<(usize, Vec<u8>), i32> {
    let (p, n) = (cstr(p), CString::new(name).expect("name"));
    let mut buf = vec![0u8; cap];
    let ptr = if cap == 0 {
        std::ptr::null_mut()
    } else {
        buf.as_mut_ptr().cast()
    };
    // SAFETY: valid C strings; `ptr` is null or a buffer of `cap` bytes.
    let r = unsafe { libc::getxattr(p.as_ptr(), n.as_ptr(), ptr, cap) };
    if r < 0 {
        return Err(errno());
    }
    buf.truncate(r as usize);
    Ok((r as usize, buf))
}

fn list(p: &Path) -> Vec<String> {
    let p = cstr(p);
    let mut buf = vec![0u8; 65536];
    // SAFETY: valid C string and a buffer of its length.
    let r = unsafe { libc::listxattr(p.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    assert!(r >= 0, "listxattr: errno {}", errno());
    buf.truncate(r as usize);
    buf.split(|&b| b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect()
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13) ^ (i >> 9) as u8 ^ seed)
        .collect()
}

#[test]
fn large_values_long_names_and_many_names_through_the_mount() {
    if !can_mount() {
        return;
    }
    let fx = Fixture::new("128M");
    let long = format!("user.{}", "n".repeat(250));
    let big = pattern(65536, 1);
    let name = |k: usize| format!("user.{k:05}");
    let most = 65536 / 11;
    {
        let m = fx.mount(&[]);
        let f = fx.path("f");
        let g = fx.path("g");
        fs::write(&f, b"data").unwrap();
        fs::write(&g, b"").unwrap();
        let before = free_blocks(&fx.mnt);
        set(&f, "user.big", &big).unwrap();
        assert_eq!(get(&f, "user.big", 0).unwrap().0, 65536);
        assert_eq!(get(&f, "user.big", 65536).unwrap().1, big);
        assert_eq!(get(&f, "user.big", 65535), Err(libc::ERANGE));
        assert_eq!(set(&f, "user.bigger", &pattern(65537, 2)), Err(libc::E2BIG));
        set(&f, &long, &pattern(3000, 3)).unwrap();
        assert_eq!(set(&f, &format!("{long}n"), b"v"), Err(libc::ERANGE));
        assert!(free_blocks(&fx.mnt) + 16 <= before, "the values take blocks");
        // Names up to the listxattr answer's 64 KiB, and no more.
        for k in 0..most {
            set(&g, &name(k), k.to_string().as_bytes()).unwrap();
        }
        assert_eq!(set(&g, "user.one-more", b""), Err(libc::ENOSPC));
        assert_eq!(list(&g).len(), most);
        // Large replaced by small and back.
        set(&f, "user.big", b"small").unwrap();
        assert_eq!(get(&f, "user.big", 100).unwrap().1, b"small");
        set(&f, "user.big", &big).unwrap();
        m.unmount();
    }
    fx.fsck();
    let m = fx.mount(&[]);
    let (f, g) = (fx.path("f"), fx.path("g"));
    assert_eq!(get(&f, "user.big", 65536).unwrap().1, big);
    assert_eq!(get(&f, &long, 65536).unwrap().1, pattern(3000, 3));
    let want: Vec<String> = (0..most).map(name).collect();
    assert_eq!(list(&g), want);
    for k in (0..most).step_by(251) {
        assert_eq!(get(&g, &name(k), 16).unwrap().1, k.to_string().into_bytes());
    }
    // Removing them gives the space back.
    let full = free_blocks(&fx.mnt);
    for n in ["user.big", long.as_str()] {
        let (p, c) = (cstr(&f), CString::new(n).unwrap());
        // SAFETY: valid C strings.
        assert_eq!(unsafe { libc::removexattr(p.as_ptr(), c.as_ptr()) }, 0);
    }
    assert!(free_blocks(&fx.mnt) >= full + 16, "the values' blocks come back");
    m.unmount();
    fx.fsck();
}
