//! How long an operation can wait for the passes that keep the inode cache
//! within its bound: N files in 100 directories, the volume reopened with
//! a bound of a quarter of them and a commit thread, then every file
//! stat'ed from one thread; prints the walk's time and the slowest stats.
//!
//! `cargo run --release -p tux3 --example evict_stall [N]`
use std::sync::Arc;
use std::time::{Duration, Instant};
use tux3::device::{Device, MemDevice};
use tux3::{FormatOptions, Fs, OpenOptions, ROOT_INO};

fn main() {
    let n: u32 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let mem = Arc::new(MemDevice::new(4096, 1 << 21));
    let dev: Arc<dyn Device> = mem.clone();
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    let dirs: Vec<_> = (0..100)
        .map(|d| {
            fs.mkdir(ROOT_INO, format!("d{d}").as_bytes(), 0o755, 0, 0)
                .unwrap()
                .ino
        })
        .collect();
    // Made directory by directory, as an unpacked archive is
    // (INTERLEAVE: a file in each directory in turn, and walked so too).
    let interleave = std::env::var_os("INTERLEAVE").is_some();
    let at = |k: u32| {
        if interleave {
            k
        } else {
            (k % (n / 100)) * 100 + k / (n / 100)
        }
    };
    for k in 0..n {
        let i = at(k);
        fs.create(dirs[(i % 100) as usize], format!("f{i}").as_bytes(), 0o644, 0, 0)
            .unwrap();
    }
    fs.close().unwrap();
    let opts = OpenOptions {
        // LIMIT: the bound (default a quarter of the files).
        inode_limit: std::env::var("LIMIT")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or((n / 4) as usize),
        commit_interval: Some(Duration::from_millis(100)),
        ..OpenOptions::default()
    };
    let fs = Fs::open(dev.clone(), opts).unwrap();
    let c0 = fs.counters();
    let mut lat = Vec::with_capacity(n as usize);
    let t = Instant::now();
    for k in 0..n {
        let i = at(k);
        let s = Instant::now();
        fs.lookup(dirs[(i % 100) as usize], format!("f{i}").as_bytes())
            .unwrap();
        lat.push(s.elapsed());
    }
    let total = t.elapsed();
    lat.sort();
    let q = |f: f64| lat[((lat.len() as f64 - 1.0) * f) as usize];
    println!(
        "{n} lookups in {total:?}: p50 {:?} p99.9 {:?} p99.99 {:?} max {:?}; cached {}, itable leaves {}, blocks read {} in {} reads",
        q(0.5),
        q(0.999),
        q(0.9999),
        lat[lat.len() - 1],
        fs.stats().cached_inodes,
        fs.stats().itable_leaves,
        fs.counters().blocks_read - c0.blocks_read,
        fs.counters().reads - c0.reads
    );
    fs.close().unwrap();
}
