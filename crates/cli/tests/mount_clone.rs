//! Through the real mount: copy_file_range(2), which the kernel forwards
//! to the server (`FUSE_COPY_FILE_RANGE`, or `_64` where the kernel has
//! it) and the server turns into a clone (`Fs::clone_range`), and `tux3
//! clone` on a mount.
//!
//! `cp --reflink=auto` and direct copy_file_range calls at unaligned
//! offsets and lengths give exactly the bytes a model computed here says;
//! random overwrites of the copy and the original afterwards make them
//! diverge, each equal to its own model (before and after a remount, which
//! reads everything from the volume); a copy from past the source's end
//! copies nothing; overlapping ranges of one file are EINVAL; fsck finds
//! the volume clean. Through `/dev/fuse` and through the io_uring queues.
//! A clone of a large file takes no data blocks (ignored until the engine
//! shares extents: the first version of `Fs::clone_range` copies). The
//! engine's clone race (`crates/engine/tests/clone_race.rs`) through the
//! mount: pwrite, fallocate, copy_file_range, lseek SEEK_DATA/SEEK_HOLE.
//!
//! Needs root and /dev/fuse (and FUSE over io_uring for the ring run);
//! without them the tests print a note and pass.

use std::fs;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Output};

mod mount_util;

use mount_util::*;

const MIB: usize = 1 << 20;

/// copy_file_range(2) with explicit offsets: the bytes copied or the
/// negated errno.
fn cfr(src: &fs::File, off_in: u64, dst: &fs::File, off_out: u64, len: usize) -> i64 {
    let (mut i, mut o) = (off_in as libc::loff_t, off_out as libc::loff_t);
    // SAFETY: valid descriptors; the offsets outlive the call.
    let n = unsafe { libc::copy_file_range(src.as_raw_fd(), &mut i, dst.as_raw_fd(), &mut o, len, 0) };
    if n < 0 {
        -i64::from(errno())
    } else {
        n as i64
    }
}

/// copy_file_range until `len` bytes are copied or the source ends; the
/// total, as the kernel may split a large request.
fn cfr_all(src: &fs::File, off_in: u64, dst: &fs::File, off_out: u64, len: usize) -> u64 {
    let mut done = 0u64;
    while (done as usize) < len {
        let n = cfr(src, off_in + done, dst, off_out + done, len - done as usize);
        assert!(n >= 0, "copy_file_range: errno {}", -n);
        if n == 0 {
            break;
        }
        done += n as u64;
    }
    done
}

/// What copy_file_range does to the model `dst` (from `src`'s model).
fn model_copy(src: &[u8], off_in: usize, dst: &mut Vec<u8>, off_out: usize, len: usize) -> usize {
    let n = len.min(src.len().saturating_sub(off_in));
    if n == 0 {
        return 0;
    }
    let chunk = src[off_in..off_in + n].to_vec();
    if dst.len() < off_out + n {
        dst.resize(off_out + n, 0);
    }
    dst[off_out..off_out + n].copy_from_slice(&chunk);
    n
}

fn open_rw(p: &Path) -> fs::File {
    fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(p)
        .unwrap()
}

/// The file at `p` equals `want`; on a mismatch, where.
fn check(p: &Path, want: &[u8], what: &str) {
    let got = fs::read(p).unwrap();
    if got != want {
        let at = got.iter().zip(want).position(|(a, b)| a != b);
        panic!(
            "{what}: {} bytes, want {}; first difference at {at:?}",
            got.len(),
            want.len()
        );
    }
}

/// The workload: files and their models, checked at each step; returns
/// the models (by name) for a check after a remount.
fn workload(mnt: &Path, rng: &mut Rng) -> Vec<(String, Vec<u8>)> {
    let orig_p = mnt.join("orig");
    let mut orig = rng.bytes(5 * MIB + 12345);
    fs::write(&orig_p, &orig).unwrap();

    // cp (coreutils 9 calls copy_file_range; --reflink=auto says share
    // if the filesystem can).
    let st = Command::new("cp")
        .arg("--reflink=auto")
        .arg(&orig_p)
        .arg(mnt.join("cp"))
        .status()
        .unwrap();
    assert!(st.success(), "cp --reflink=auto");
    let mut cp = orig.clone();
    check(&mnt.join("cp"), &cp, "cp --reflink=auto");

    // Direct calls at unaligned offsets and lengths, into a file that has
    // data of its own.
    let src = open_rw(&orig_p);
    let copy_p = mnt.join("copy");
    let mut copy = rng.bytes(MIB + 99);
    fs::write(&copy_p, &copy).unwrap();
    let dst = open_rw(&copy_p);
    let cases: [(usize, usize, usize); 6] = [
        (12345, 777, 3 * MIB + 17),
        (0, 0, 4096),
        (4095, 8193, 1),
        (5 * MIB, 6 * MIB + 3, MIB),       // past the source's end: clipped
        (3 * 4096, 3 * 4096, 2 * MIB),     // aligned, overwriting
        (100, 9 * MIB + 1, 64 * 1024 + 5), // beyond the destination's end
    ];
    for (off_in, off_out, len) in cases {
        let want = model_copy(&orig, off_in, &mut copy, off_out, len);
        let got = cfr_all(&src, off_in as u64, &dst, off_out as u64, len);
        assert_eq!(got as usize, want, "copy_file_range({off_in}, {off_out}, {len})");
        check(
            &copy_p,
            &copy,
            &format!("after copy_file_range({off_in}, {off_out}, {len})"),
        );
    }
    for _ in 0..20 {
        let off_in = rng.below(orig.len() as u64 + 100) as usize;
        let off_out = rng.below(copy.len() as u64 + 100) as usize;
        let len = rng.below(2 * MIB as u64) as usize + 1;
        let want = model_copy(&orig, off_in, &mut copy, off_out, len);
        let got = cfr_all(&src, off_in as u64, &dst, off_out as u64, len);
        assert_eq!(got as usize, want, "copy_file_range({off_in}, {off_out}, {len})");
    }
    check(&copy_p, &copy, "after random copies");

    // From past the source's end: nothing.
    let end = orig.len() as u64;
    assert_eq!(cfr(&src, end, &dst, 0, 4096), 0, "at the source's end");
    assert_eq!(cfr(&src, end + 5000, &dst, 0, 4096), 0, "past the source's end");
    // Overlapping ranges of one file: EINVAL; apart: a copy.
    assert_eq!(
        cfr(&src, 0, &src, 4096, 8192),
        -i64::from(libc::EINVAL),
        "overlap"
    );
    assert_eq!(
        cfr(&src, 8192, &src, 100, 8193),
        -i64::from(libc::EINVAL),
        "overlap below"
    );
    let want = model_copy(&orig.clone(), 0, &mut orig, 2 * MIB + 7, 4096 * 3 + 1);
    assert_eq!(
        cfr_all(&src, 0, &src, (2 * MIB + 7) as u64, 4096 * 3 + 1) as usize,
        want
    );
    check(&orig_p, &orig, "a copy within one file");
    // A flag: EINVAL (the kernel's answer; none is defined).
    let (mut i, mut o) = (0 as libc::loff_t, 0 as libc::loff_t);
    // SAFETY: valid descriptors; the offsets outlive the call.
    let r = unsafe { libc::copy_file_range(src.as_raw_fd(), &mut i, dst.as_raw_fd(), &mut o, 10, 1) };
    assert_eq!((r, errno()), (-1, libc::EINVAL), "flags");

    // Overwrites of both sides: each diverges to its own model.
    let cp_f = open_rw(&mnt.join("cp"));
    for round in 0..60 {
        let (f, m) = match round % 4 {
            0 => (&src, &mut orig),
            1 => (&dst, &mut copy),
            2 => (&cp_f, &mut cp),
            _ => (&src, &mut orig),
        };
        let off = rng.below(m.len() as u64 + 8192) as usize;
        let n = rng.below(64 * 1024) as usize + 1;
        let data = rng.bytes(n);
        f.write_all_at(&data, off as u64).unwrap();
        if m.len() < off + data.len() {
            m.resize(off + data.len(), 0);
        }
        m[off..off + data.len()].copy_from_slice(&data);
    }
    check(&orig_p, &orig, "orig after overwrites");
    check(&copy_p, &copy, "copy after overwrites");
    check(&mnt.join("cp"), &cp, "cp after overwrites");
    src.sync_all().unwrap();
    dst.sync_all().unwrap();
    cp_f.sync_all().unwrap();
    vec![("orig".into(), orig), ("copy".into(), copy), ("cp".into(), cp)]
}

/// The workload through a mount with `opts`, then after a remount, then fsck.
fn through(opts: &[&str], seed: u64) {
    let fx = Fixture::new("256M");
    let m = fx.mount(opts);
    if opts.iter().any(|o| o.contains("uring") && !o.contains("nouring")) {
        let mut w = fs::File::create(fx.path("w")).unwrap();
        wait_until("the rings to serve", || {
            let before = cpu_ns(m.pid, "tux3-ring");
            for i in 0..50u64 {
                w.write_all(&i.to_ne_bytes()).unwrap();
            }
            cpu_ns(m.pid, "tux3-ring") > before
        });
    }
    let models = workload(&fx.mnt, &mut Rng::new(seed));
    m.unmount();
    let again = fx.mount(&[]);
    for (name, model) in &models {
        check(&fx.path(name), model, &format!("{name} after a remount"));
    }
    again.unmount();
    fx.fsck();
}

#[test]
fn copy_file_range_through_dev_fuse() {
    if !can_mount() {
        return;
    }
    through(&["-o", "nouring"], 1);
}

#[test]
fn copy_file_range_through_the_rings() {
    let Some(_switch) = uring_switch(true) else {
        return;
    };
    through(&["-o", "uring"], 2);
}

#[test]
fn copy_file_range_with_the_writeback_cache() {
    if !can_mount() {
        return;
    }
    through(&["-o", "nouring,writeback_cache"], 3);
}

fn tux3(args: &[&dyn AsRef<std::ffi::OsStr>]) -> Output {
    Command::new(TUX3)
        .args(args.iter().map(|a| a.as_ref()))
        .output()
        .expect("run tux3")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `tux3 clone SRC DST` on a mount: silent, the bytes and permission bits
/// of the source; an existing destination refused (16) unless --force; a
/// missing source 8; a directory, a path off the mount, a destination on
/// another volume 16; a read-only mount refuses it.
#[test]
fn tux3_clone_on_a_mount() {
    if !can_mount() {
        return;
    }
    let fx = Fixture::new("128M");
    let m = fx.mount(&[]);
    let mut rng = Rng::new(7);
    let data = rng.bytes(3 * MIB + 4097);
    fs::write(fx.path("a"), &data).unwrap();
    fs::set_permissions(fx.path("a"), fs::Permissions::from_mode(0o751)).unwrap();
    fs::create_dir(fx.path("d")).unwrap();

    let o = tux3(&[&"clone", &fx.path("a"), &fx.path("d/b")]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        o.stdout.is_empty() && o.stderr.is_empty(),
        "silent: {}",
        stderr(&o)
    );
    check(&fx.path("d/b"), &data, "tux3 clone");
    let mode = fs::metadata(fx.path("d/b")).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o751, "permission bits");

    let o = tux3(&[&"clone", &fx.path("d/b"), &fx.path("a")]);
    assert_eq!(o.status.code(), Some(16), "{}", stderr(&o));
    assert!(stderr(&o).contains("exists"), "{}", stderr(&o));
    fs::write(fx.path("small"), b"tiny").unwrap();
    let o = tux3(&[&"clone", &"--force", &fx.path("small"), &fx.path("d/b")]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    check(&fx.path("d/b"), b"tiny", "--force");
    check(&fx.path("a"), &data, "the source");
    // An empty source: an empty copy.
    fs::write(fx.path("empty"), b"").unwrap();
    let o = tux3(&[&"clone", &fx.path("empty"), &fx.path("empty2")]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    check(&fx.path("empty2"), b"", "empty");

    let o = tux3(&[&"clone", &fx.path("missing"), &fx.path("x")]);
    assert_eq!(o.status.code(), Some(8), "{}", stderr(&o));
    let o = tux3(&[&"clone", &fx.path("d"), &fx.path("x")]);
    assert_eq!(o.status.code(), Some(16), "{}", stderr(&o));
    assert!(stderr(&o).contains("is a directory"), "{}", stderr(&o));
    let o = tux3(&[&"clone", &fx.path("a"), &fx.dir.path().join("off")]);
    assert_eq!(o.status.code(), Some(16), "{}", stderr(&o));
    assert!(stderr(&o).contains("not on a tux3 mount"), "{}", stderr(&o));
    assert!(!fx.dir.path().join("off").exists());
    assert!(!fx.path("x").exists(), "nothing left behind");

    // Another tux3 volume: cross-volume.
    let other = Fixture::new("64M");
    let m2 = other.mount(&[]);
    let o = tux3(&[&"clone", &fx.path("a"), &other.path("a")]);
    assert_eq!(o.status.code(), Some(16), "{}", stderr(&o));
    assert!(stderr(&o).contains("different volumes"), "{}", stderr(&o));
    m2.unmount();
    m.unmount();

    // Read-only: refused, nothing made.
    let ro = fx.mount(&["-o", "ro"]);
    let o = tux3(&[&"clone", &fx.path("a"), &fx.path("ro")]);
    assert_ne!(o.status.code(), Some(0), "read-only");
    assert!(stderr(&o).contains("Read-only"), "{}", stderr(&o));
    assert!(!fx.path("ro").exists());
    ro.unmount();
    fx.fsck();
}

/// A clone of a 64 MiB file through the mount writes no data: the free
/// blocks after it and a sync drop by a few metadata blocks, not by the
/// file's 16384 blocks.
#[test]
fn a_clone_takes_no_data_blocks() {
    if !can_mount() {
        return;
    }
    let fx = Fixture::new("512M");
    let m = fx.mount(&[]);
    let data = Rng::new(9).bytes(64 * MIB);
    fs::write(fx.path("big"), &data).unwrap();
    let before = free_blocks(&fx.mnt);
    let o = tux3(&[&"clone", &fx.path("big"), &fx.path("big2")]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let st = Command::new("cp")
        .arg(fx.path("big"))
        .arg(fx.path("big3"))
        .status()
        .unwrap();
    assert!(st.success());
    let after = free_blocks(&fx.mnt);
    let taken = before.saturating_sub(after);
    assert!(taken < 256, "two clones of 16384 blocks took {taken} blocks");
    check(&fx.path("big2"), &data, "tux3 clone");
    check(&fx.path("big3"), &data, "cp");
    m.unmount();
    fx.fsck();
}

/// The engine's clone race (crates/engine/tests/clone_race.rs) through
/// the mount: writers pwrite round-stamped patterns into their own
/// regions of a sparse file (into holes too) and punch holes; then,
/// while a thread commits without pause (`tux3 sync`'s ioctl), a cloner
/// copy_file_ranges the whole file into a truncated one and a copier
/// copies it as cp copies sparse files (lseek SEEK_DATA/SEEK_HOLE, read
/// the data, leave the holes); each compares with the model of the round:
/// a hole over data the model has, or any byte that differs, fails.
/// `TUX3_CLONE_RACE_ROUNDS` sets the rounds (default 20).
#[test]
fn clone_race_through_the_mount() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Barrier, Mutex};
    if !can_mount() {
        return;
    }
    const REGION: u64 = 64 * 1024;
    const REGIONS: u64 = 16;
    const WRITERS: u64 = 2;
    let rounds: u64 = std::env::var("TUX3_CLONE_RACE_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let fx = Fixture::new("256M");
    let m = fx.mount(&[]);
    let size0 = REGIONS * REGION - 5000;
    let src = open_rw(&fx.path("src"));
    src.set_len(size0).unwrap();
    let clone = open_rw(&fx.path("clone"));
    let copy = open_rw(&fx.path("copy"));
    let model = Mutex::new(vec![0u8; size0 as usize]);
    let errors = Mutex::new(Vec::<String>::new());
    let stop = AtomicBool::new(false);
    let phase = Barrier::new(WRITERS as usize + 2);
    let fail = |round: u64, who: &str, what: String| {
        errors
            .lock()
            .unwrap()
            .push(format!("round {round}, {who}: {what}"))
    };
    let seek = |off: u64, whence: i32| {
        // SAFETY: a valid descriptor; no pointers.
        let r = unsafe { libc::lseek(src.as_raw_fd(), off as libc::off_t, whence) };
        if r < 0 {
            Err(errno())
        } else {
            Ok(r as u64)
        }
    };
    std::thread::scope(|scope| {
        let syncer = scope.spawn(|| {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                // SAFETY: IOC_SYNC takes no argument; a valid descriptor.
                if unsafe { libc::ioctl(src.as_raw_fd(), 0xE301 as _) } != 0 {
                    fail(0, "syncer", format!("errno {}", errno()));
                    break;
                }
                n += 1;
            }
            n
        });
        let mut threads = Vec::new();
        for w in 0..WRITERS {
            let (src, model, phase, fail, errors) = (&src, &model, &phase, &fail, &errors);
            threads.push(scope.spawn(move || {
                let mut rng = Rng::new(100 + w);
                for round in 0..rounds {
                    for region in (w..REGIONS).step_by(WRITERS as usize) {
                        let base = region * REGION;
                        let off = base + rng.below(REGION - 1);
                        let len = rng.below(base + REGION - off) + 1;
                        match rng.below(8) {
                            0..=2 => {
                                let data: Vec<u8> = (off..off + len)
                                    .map(|o| ((o * 31 + round * 7 + w * 101) % 255) as u8 + 1)
                                    .collect();
                                if let Err(e) = src.write_all_at(&data, off) {
                                    fail(round, "writer", e.to_string());
                                }
                                let mut m = model.lock().unwrap();
                                if (m.len() as u64) < off + len {
                                    m.resize((off + len) as usize, 0);
                                }
                                m[off as usize..(off + len) as usize].copy_from_slice(&data);
                            }
                            3 => {
                                let mut m = model.lock().unwrap();
                                let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
                                // SAFETY: a valid descriptor; no pointers.
                                if unsafe { libc::fallocate(src.as_raw_fd(), mode, off as i64, len as i64) }
                                    != 0
                                {
                                    fail(round, "writer", format!("punch: errno {}", errno()));
                                }
                                let end = ((off + len) as usize).min(m.len());
                                if (off as usize) < end {
                                    m[off as usize..end].fill(0);
                                }
                            }
                            _ => {}
                        }
                    }
                    phase.wait();
                    phase.wait();
                    if !errors.lock().unwrap().is_empty() {
                        break;
                    }
                }
            }));
        }
        for role in 0..2 {
            let (src, model, phase, fail, errors, seek) = (&src, &model, &phase, &fail, &errors, &seek);
            let (clone, copy) = (&clone, &copy);
            threads.push(scope.spawn(move || {
                for round in 0..rounds {
                    phase.wait();
                    let want = model.lock().unwrap().clone();
                    let r: Result<(), String> = (|| {
                        let (dst, who) = if role == 0 {
                            (clone, "cloner")
                        } else {
                            (copy, "copier")
                        };
                        dst.set_len(0).map_err(|e| e.to_string())?;
                        if role == 0 {
                            let n = cfr_all(src, 0, dst, 0, want.len() + 12345);
                            if n != want.len() as u64 {
                                return Err(format!("{who}: {n} bytes of {}", want.len()));
                            }
                        } else {
                            let size = want.len() as u64;
                            let mut off = 0;
                            while off < size {
                                let data = match seek(off, libc::SEEK_DATA) {
                                    Ok(d) => d.min(size),
                                    Err(libc::ENXIO) => size,
                                    Err(e) => return Err(format!("SEEK_DATA {off}: errno {e}")),
                                };
                                if let Some(i) =
                                    want[off as usize..data as usize].iter().position(|&b| b != 0)
                                {
                                    return Err(format!(
                                        "a hole {off}..{data} over data at {}",
                                        off + i as u64
                                    ));
                                }
                                if data >= size {
                                    break;
                                }
                                let hole = seek(data, libc::SEEK_HOLE)
                                    .map_err(|e| format!("SEEK_HOLE: {e}"))?
                                    .min(size);
                                let mut buf = vec![0u8; (hole - data) as usize];
                                src.read_exact_at(&mut buf, data).map_err(|e| e.to_string())?;
                                dst.write_all_at(&buf, data).map_err(|e| e.to_string())?;
                                off = hole;
                            }
                            dst.set_len(size).map_err(|e| e.to_string())?;
                        }
                        let mut got = vec![0u8; want.len() + 1];
                        let mut n = 0;
                        loop {
                            let k = dst.read_at(&mut got[n..], n as u64).map_err(|e| e.to_string())?;
                            if k == 0 || n + k == got.len() {
                                n += k;
                                break;
                            }
                            n += k;
                        }
                        if got[..n] != want[..] {
                            let at = got[..n].iter().zip(&want).position(|(a, b)| a != b);
                            return Err(format!(
                                "{who}: {n} bytes, want {}; first difference at {at:?}",
                                want.len()
                            ));
                        }
                        Ok(())
                    })();
                    if let Err(e) = r {
                        fail(round, if role == 0 { "cloner" } else { "copier" }, e);
                    }
                    phase.wait();
                    if !errors.lock().unwrap().is_empty() {
                        break;
                    }
                }
            }));
        }
        for t in threads {
            t.join().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        let syncs = syncer.join().unwrap();
        eprintln!("{rounds} rounds, {syncs} syncs beside them");
    });
    let errors = errors.into_inner().unwrap();
    assert!(
        errors.is_empty(),
        "{} failures:\n{}",
        errors.len(),
        errors.join("\n")
    );
    drop((src, clone, copy));
    m.unmount();
    fx.fsck();
}
