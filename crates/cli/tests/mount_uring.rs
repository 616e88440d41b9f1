//! Through the real mount: the io_uring transport (`-o uring`) answers
//! every kind of request as the `/dev/fuse` one (`-o nouring`) does — the
//! same workload gives the same observations through both — and the ring
//! threads, not the /dev/fuse ones, serve the requests. `-o uring` on a kernel that
//! does not allow it fails with a message saying how to allow it; a mount
//! without the option says so once, and nothing where the kernel allows it.
//! A write that must wait for a commit leaves the ring threads, and so does
//! a large read. With `-o idle_poll` the answers are the same, the pollers
//! (one per CPU, at idle priority) spin while requests come and end with
//! the mount.
//!
//! Needs root, /dev/fuse and a kernel with FUSE over io_uring (the `fuse`
//! module's `enable_uring` parameter); without them the tests print a note
//! and pass. The parameter is restored on every path.

use std::ffi::CString;
use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Stdio};

mod mount_util;

use mount_util::*;

fn cstr(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).expect("path")
}

/// Every observation of a workload that touches each kind of request the
/// rings serve, as text (errors by errno).
fn workload(mnt: &Path) -> Vec<String> {
    let mut seen = Vec::new();
    let mut note = |s: String| seen.push(s);
    let d = mnt.join("dir");
    fs::create_dir(&d).unwrap();
    // Create, write, read back, append, truncate.
    let f = d.join("file");
    let mut file = fs::File::create(&f).unwrap();
    file.write_all(b"hello, ring").unwrap();
    file.sync_all().unwrap();
    file.sync_data().unwrap();
    drop(file);
    note(format!("read {:?}", fs::read_to_string(&f).unwrap()));
    let mut file = fs::OpenOptions::new().append(true).open(&f).unwrap();
    file.write_all(&[7u8; 300_000]).unwrap();
    drop(file);
    let mut back = Vec::new();
    fs::File::open(&f).unwrap().read_to_end(&mut back).unwrap();
    note(format!(
        "len {} sum {}",
        back.len(),
        back.iter().map(|&b| b as u64).sum::<u64>()
    ));
    fs::OpenOptions::new()
        .write(true)
        .open(&f)
        .unwrap()
        .set_len(5)
        .unwrap();
    // Attributes.
    fs::set_permissions(&f, fs::Permissions::from_mode(0o600)).unwrap();
    let m = fs::metadata(&f).unwrap();
    note(format!(
        "size {} mode {:o} nlink {}",
        m.len(),
        m.mode(),
        m.nlink()
    ));
    // Names: link, symlink, rename, lookup of a missing name.
    fs::hard_link(&f, d.join("link")).unwrap();
    symlink("file", d.join("sym")).unwrap();
    note(format!("readlink {:?}", fs::read_link(d.join("sym")).unwrap()));
    fs::rename(d.join("link"), d.join("moved")).unwrap();
    note(format!("nlink {}", fs::metadata(&f).unwrap().nlink()));
    note(format!(
        "missing {:?}",
        fs::metadata(d.join("nope")).map_err(|e| e.raw_os_error())
    ));
    // Extended attributes: set, get, size query, list, remove.
    let (p, n) = (cstr(&f), CString::new("user.k").unwrap());
    // SAFETY: valid C strings and buffers of the given lengths.
    unsafe {
        assert_eq!(
            libc::setxattr(p.as_ptr(), n.as_ptr(), b"v1".as_ptr().cast(), 2, 0),
            0
        );
        let mut buf = [0u8; 64];
        let got = libc::getxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len());
        note(format!("xattr {:?}", &buf[..got.max(0) as usize]));
        note(format!(
            "xattr size {}",
            libc::getxattr(p.as_ptr(), n.as_ptr(), std::ptr::null_mut(), 0)
        ));
        let len = libc::listxattr(p.as_ptr(), buf.as_mut_ptr().cast(), buf.len());
        note(format!("list {:?}", &buf[..len.max(0) as usize]));
        assert_eq!(libc::removexattr(p.as_ptr(), n.as_ptr()), 0);
    }
    // A directory listing longer than one reply, then unlink and rmdir.
    let many = mnt.join("many");
    fs::create_dir(&many).unwrap();
    for i in 0..300 {
        fs::write(many.join(format!("entry-with-a-longish-name-{i:04}")), b"x").unwrap();
    }
    let mut names: Vec<String> = fs::read_dir(&many)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    note(format!(
        "listing {} first {} last {}",
        names.len(),
        names[0],
        names[names.len() - 1]
    ));
    for n in &names {
        fs::remove_file(many.join(n)).unwrap();
    }
    fs::remove_dir(&many).unwrap();
    note(format!("rmdir'd {}", !many.exists()));
    // SEEK_DATA on a file with a hole; statfs.
    let sparse = mnt.join("sparse");
    let mut s = fs::File::create(&sparse).unwrap();
    s.seek(SeekFrom::Start(1 << 20)).unwrap();
    s.write_all(b"tail").unwrap();
    // SAFETY: valid descriptor.
    let data = unsafe { libc::lseek(std::os::fd::AsRawFd::as_raw_fd(&s), 0, libc::SEEK_DATA) };
    note(format!("seek_data {data}"));
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: valid C string and out pointer.
    assert_eq!(unsafe { libc::statvfs(cstr(mnt).as_ptr(), &mut st) }, 0);
    note(format!("namemax {}", st.f_namemax));
    seen
}

/// Run the workload through a mount with `opt`; returns the observations
/// and the on-CPU time of ring and /dev/fuse threads over 2000 writes.
fn through(opt: &str) -> (Vec<String>, u64, u64) {
    let fx = Fixture::new("256M");
    let m = fx.mount(&["-o", opt]);
    let seen = workload(&fx.mnt);
    let mut f = fs::File::create(fx.path("w")).unwrap();
    if opt == "uring" {
        // The kernel sends requests through /dev/fuse until every queue's
        // ring is registered, which a loaded machine may still be doing
        // after the mount returned: wait (with a deadline) until a batch
        // of writes is served by the rings.
        let start = std::time::Instant::now();
        loop {
            let (r0, f0) = (cpu_ns(m.pid, "tux3-ring"), cpu_ns(m.pid, "tux3-dev"));
            for i in 0..50u64 {
                f.write_all(&i.to_ne_bytes()).unwrap();
            }
            let (r1, f1) = (cpu_ns(m.pid, "tux3-ring"), cpu_ns(m.pid, "tux3-dev"));
            if r1 - r0 > f1 - f0 {
                break;
            }
            assert!(start.elapsed() < DEADLINE, "the rings never served the writes");
        }
    }
    let (ring0, fuser0) = (cpu_ns(m.pid, "tux3-ring"), cpu_ns(m.pid, "tux3-dev"));
    for i in 0..2000u64 {
        f.write_all(&i.to_ne_bytes()).unwrap();
    }
    let (ring1, fuser1) = (cpu_ns(m.pid, "tux3-ring"), cpu_ns(m.pid, "tux3-dev"));
    drop(f);
    m.unmount();
    fx.fsck();
    (seen, ring1 - ring0, fuser1 - fuser0)
}

#[test]
fn uring_answers_as_dev_fuse_does() {
    let Some(_switch) = uring_switch(true) else {
        return;
    };
    let (by_ring, ring_ns, fuser_by_ring) = through("uring");
    let (by_dev, no_ring_ns, fuser_ns) = through("nouring");
    assert_eq!(no_ring_ns, 0, "no ring threads with nouring");
    assert!(fuser_ns > 0);
    // The rings serve the writes: their threads do as much work as
    // serving them takes (a quarter of what the /dev/fuse threads take for
    // the same writes without rings, at least; none without rings). The
    // /dev/fuse threads' own time beside the rings is not compared: on a
    // loaded 2-core machine (the other tests of this file run meanwhile)
    // it varied from a tenth to as much as the rings'.
    assert!(
        ring_ns > 0 && 4 * ring_ns > fuser_ns,
        "the rings serve the writes: ring threads {ring_ns} ns on CPU (/dev/fuse threads beside \
         them {fuser_by_ring} ns), against {fuser_ns} ns for /dev/fuse threads serving them \
         through /dev/fuse"
    );
    assert_eq!(by_ring, by_dev, "the same observations through both transports");
}

/// The server's threads named `prefix`: (thread id, scheduling policy).
fn threads(pid: i32, prefix: &str) -> Vec<(String, u32)> {
    let mut out = Vec::new();
    for t in fs::read_dir(format!("/proc/{pid}/task")).unwrap().flatten() {
        let comm = fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if comm.starts_with(prefix) {
            // Field 41 of stat, counted after the command's closing paren.
            let stat = fs::read_to_string(t.path().join("stat")).unwrap_or_default();
            let policy = stat
                .rsplit(')')
                .next()
                .and_then(|r| r.split_whitespace().nth(38))
                .and_then(|v| v.parse().ok())
                .unwrap_or(u32::MAX);
            out.push((t.file_name().to_string_lossy().into_owned(), policy));
        }
    }
    out
}

#[test]
fn idle_pollers_answer_the_same_spin_while_requests_come_and_end_with_the_mount() {
    let Some(_switch) = uring_switch(true) else {
        return;
    };
    let (plain, _, _) = through("uring");
    let (polled, _, _) = through("uring,idle_poll=200");
    assert_eq!(polled, plain, "the same observations with and without polling");

    let fx = Fixture::new("256M");
    let m = fx.mount(&["-o", "uring,idle_poll=200"]);
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let pollers = threads(m.pid, "tux3-poll");
    assert_eq!(pollers.len(), cpus, "a poller per CPU: {pollers:?}");
    assert!(
        pollers
            .iter()
            .all(|&(_, policy)| policy == libc::SCHED_IDLE as u32),
        "pollers run at idle priority: {pollers:?}"
    );
    let before = cpu_ns(m.pid, "tux3-poll");
    for i in 0..2000 {
        fs::write(fx.path(&format!("f{i}")), b"x").unwrap();
    }
    let spun = cpu_ns(m.pid, "tux3-poll") - before;
    assert!(spun > 0, "the pollers ran while requests came");
    m.unmount();
    fx.fsck();
    let fx = Fixture::new("256M");
    let m = fx.mount(&["-o", "uring"]);
    assert!(threads(m.pid, "tux3-poll").is_empty(), "no pollers unless asked");
    m.unmount();
}

/// A write that must wait for a commit (dirty data at the `cache=` limit)
/// is handed off the ring thread, to a thread that may block; what it
/// writes lands whole and in order, and survives a remount.
#[test]
fn writes_held_for_a_commit_leave_the_ring_threads() {
    let Some(_switch) = uring_switch(true) else {
        return;
    };
    let fx = Fixture::new("256M");
    let m = fx.mount(&["-o", "uring,cache=1M,commit=0"]);
    let chunk = 256 << 10;
    let expect: Vec<u8> = (0..16 * chunk).map(|i| (i * 7 / 4096) as u8).collect();
    let mut f = fs::File::create(fx.path("stream")).unwrap();
    let before = cpu_ns(m.pid, "tux3-blocking");
    for piece in expect.chunks(chunk) {
        f.write_all(piece).unwrap();
    }
    let handed_off = cpu_ns(m.pid, "tux3-blocking") - before;
    drop(f);
    assert!(
        handed_off > 0,
        "16 writes of 256 KiB with cache=1M: some waited for a commit, off the ring threads"
    );
    assert!(
        fs::read(fx.path("stream")).unwrap() == expect,
        "the stream reads back"
    );
    m.unmount();
    fx.fsck();
    let m = fx.mount(&["-o", "uring"]);
    assert!(
        fs::read(fx.path("stream")).unwrap() == expect,
        "and after a remount"
    );
    m.unmount();
}

/// The file's bytes as `large_reads_*` writes them: each 8-byte word holds
/// its own offset, so a block read from the wrong place shows.
fn stamped(len: usize) -> Vec<u8> {
    (0..len as u64 / 8).flat_map(|w| (w * 8).to_le_bytes()).collect()
}

/// A large READ (a sequential reader's read-ahead) is read on a thread that
/// may block, straight into its ring entry, so that several device reads
/// are in flight: readers see the file block for block, whether it comes
/// from the device or from writes not yet committed, while other readers
/// read it too.
#[test]
fn large_reads_leave_the_ring_threads_and_read_back() {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::FileExt;
    let Some(_switch) = uring_switch(true) else {
        return;
    };
    const LEN: usize = 24 << 20;
    let fx = Fixture::new("256M");
    let mut expect = stamped(LEN);
    let m = fx.mount(&["-o", "uring"]);
    fs::write(fx.path("big"), &expect).unwrap();
    m.unmount();
    // From the device now; then a few blocks written again and left
    // uncommitted, in the middle of what the big reads cover.
    let m = fx.mount(&["-o", "uring,commit=0"]);
    let f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(fx.path("big"))
        .unwrap();
    for at in [5 << 20, (9 << 20) + 4096, (17 << 20) - 4096] {
        let new = vec![0xA5u8; 8192];
        f.write_all_at(&new, at as u64).unwrap();
        expect[at..at + new.len()].copy_from_slice(&new);
    }
    // Drop the kernel's cached pages, so every read below asks the server.
    // SAFETY: plain syscall on an open descriptor.
    assert_eq!(
        unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) },
        0
    );
    let before = cpu_ns(m.pid, "tux3-read");
    std::thread::scope(|s| {
        for r in 0..3usize {
            let (path, expect) = (fx.path("big"), &expect);
            s.spawn(move || {
                let mut back = Vec::with_capacity(LEN);
                fs::File::open(path).unwrap().read_to_end(&mut back).unwrap();
                assert!(back.len() == LEN, "reader {r}: {} bytes of {LEN}", back.len());
                if let Some(at) = (0..LEN).find(|&k| back[k] != expect[k]) {
                    panic!("reader {r}: byte {at} differs");
                }
            });
        }
    });
    let handed_off = cpu_ns(m.pid, "tux3-read") - before;
    assert!(
        handed_off > 0,
        "the read-ahead's 1 MiB reads ran off the ring threads"
    );

    drop(f);
    m.unmount();
    fx.fsck();
}

#[test]
fn uring_option_needs_the_kernel_to_allow_it() {
    let Some(_switch) = uring_switch(false) else {
        return;
    };
    let fx = Fixture::new("64M");
    let out = Command::new(TUX3)
        .args(["mount", "-o", "uring"])
        .arg(&fx.img)
        .arg(&fx.mnt)
        .stdin(Stdio::null())
        .output()
        .expect("run tux3 mount");
    assert!(!out.status.success(), "mount -o uring must fail");
    assert!(!is_mounted(&fx.mnt));
    let msg = String::from_utf8_lossy(&out.stderr);
    assert!(
        msg.contains("enable_uring"),
        "the error says how to allow it: {msg}"
    );
    // Without the option the mount goes through /dev/fuse, and says once
    // how to switch io_uring on.
    let m = fx.mount(&[]);
    fs::write(fx.path("a"), b"through /dev/fuse").unwrap();
    assert_eq!(cpu_ns(m.pid, "tux3-ring"), 0);
    m.unmount();
    let switch_on = "echo Y > /sys/module/fuse/parameters/enable_uring";
    let log = fx.log_text();
    let notes: Vec<&str> = log.lines().filter(|l| l.contains(switch_on)).collect();
    assert_eq!(notes.len(), 1, "one note naming the switch: {log}");
    assert!(notes[0].contains("switched off"), "{log}");
    // -o nouring asks for /dev/fuse: nothing to say.
    let m = fx.mount(&["-o", "nouring"]);
    m.unmount();
    assert_eq!(fx.log_text(), log, "no note with -o nouring");
    fx.fsck();
}

#[test]
fn no_note_when_the_kernel_allows_uring() {
    let Some(_switch) = uring_switch(true) else {
        return;
    };
    let fx = Fixture::new("64M");
    let m = fx.mount(&[]);
    fs::write(fx.path("a"), b"through the rings").unwrap();
    m.unmount();
    let log = fx.log_text();
    assert!(!log.contains("enable_uring"), "{log}");
    fx.fsck();
}
