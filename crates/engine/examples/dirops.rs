//! Times the namespace operations on one big directory through `tux3::Fs`
//! on an image file: N creates, then N stats (lookup, which returns the
//! attributes), a readdir of all N, then N unlinks, each in a fresh
//! random-looking order of names, and prints microseconds per operation of
//! each phase: elapsed, and CPU time of the calling thread (steadier on a
//! busy machine).
//!
//!   cargo run --release -p tux3 --example dirops -- [N] [IMAGE]
//!
//! N defaults to 200000; IMAGE (default: a file in the temporary
//! directory, removed at the end) is created or truncated to 4 GiB, sparse.
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tux3::device::file::FileDevice;
use tux3::device::Device;
use tux3::{open_path, FormatOptions, Fs, OpenOptions, ROOT_INO};

/// The names, in a scrambled order (an odd multiplier mod a power of two
/// visits every index once).
fn order(n: usize, salt: usize) -> impl Iterator<Item = usize> {
    let size = n.next_power_of_two().max(2);
    (0..size)
        .map(move |i| (i.wrapping_mul(0x9e37_79b1).wrapping_add(salt)) & (size - 1))
        .filter(move |&i| i < n)
}

/// CPU time of this thread so far.
fn cpu() -> Duration {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec for the call to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// Time of `f`: (elapsed, thread CPU).
fn timed(f: impl FnOnce()) -> (Duration, Duration) {
    let (t, c) = (Instant::now(), cpu());
    f();
    (t.elapsed(), cpu() - c)
}

fn name(i: usize) -> Vec<u8> {
    format!("file-{i:07}").into_bytes()
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(200_000);
    let (path, remove) = match args.next() {
        Some(p) => (PathBuf::from(p), false),
        None => (
            std::env::temp_dir().join(format!("tux3-dirops-{}.img", std::process::id())),
            true,
        ),
    };
    let f = std::fs::File::create(&path).expect("create image");
    f.set_len(4 << 30).expect("size image");
    drop(f);
    let dev: Arc<dyn Device> = Arc::new(FileDevice::open(&path, 4096, true).expect("open image"));
    Fs::format(dev, &FormatOptions::default()).expect("format");
    let dev = open_path(&path, true).expect("open");
    let fs = Fs::open(dev, OpenOptions::default()).expect("mount");
    let dir = fs.mkdir(ROOT_INO, b"big", 0o755, 0, 0).expect("mkdir").ino;

    let create = timed(|| {
        for i in order(n, 0) {
            fs.create(dir, &name(i), 0o644, 0, 0).expect("create");
        }
    });
    let stat = timed(|| {
        for i in order(n, 12345) {
            let a = fs.lookup(dir, &name(i)).expect("stat");
            assert_eq!(a.nlink, 1);
        }
    });
    let readdir = timed(|| {
        let (mut pos, mut seen) = (0, 0);
        loop {
            let page = fs.readdir(dir, pos, 1000).expect("readdir");
            let Some(last) = page.last() else { break };
            pos = last.next;
            seen += page.len();
        }
        assert_eq!(seen, n);
    });
    let unlink = timed(|| {
        for i in order(n, 777) {
            fs.unlink(dir, &name(i)).expect("unlink");
        }
    });
    assert!(fs.readdir(dir, 0, 10).expect("readdir").is_empty());

    let us = |d: Duration| d.as_secs_f64() * 1e6 / n as f64;
    println!("{n} entries, us/op elapsed (thread CPU):");
    for (what, (wall, cpu)) in [
        ("create", create),
        ("stat", stat),
        ("readdir", readdir),
        ("unlink", unlink),
    ] {
        println!("  {what:8} {:7.3} ({:7.3})", us(wall), us(cpu));
    }
    fs.close().expect("close");
    if remove {
        let _ = std::fs::remove_file(&path);
    }
}
