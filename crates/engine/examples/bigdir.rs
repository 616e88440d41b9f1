//! Creates N entries in one directory and reports the time and the blocks
//! read by a cold lookup, create and unlink (a quick check of the hashed
//! directory index; the tests assert the block counts).
use std::sync::Arc;
use std::time::Instant;
use tux3::device::{Device, MemDevice};
use tux3::{FormatOptions, Fs, OpenOptions, ROOT_INO};

fn main() {
    let n: u32 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000);
    let mem = Arc::new(MemDevice::new(4096, 1 << 18));
    let dev: Arc<dyn Device> = mem.clone();
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    let d = fs.mkdir(ROOT_INO, b"big", 0o755, 0, 0).unwrap();
    let t = Instant::now();
    for i in 0..n {
        fs.create(d.ino, format!("entry-{i}").as_bytes(), 0o644, 0, 0)
            .unwrap();
    }
    println!("create {n}: {:?}", t.elapsed());
    let t = Instant::now();
    fs.close().unwrap();
    println!("close: {:?}", t.elapsed());
    let t = Instant::now();
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    println!("open: {:?} stats {:?}", t.elapsed(), fs.stats());
    let c0 = fs.counters().blocks_read;
    fs.lookup(d.ino, b"entry-4242").unwrap();
    let c1 = fs.counters().blocks_read;
    fs.create(d.ino, b"new-entry", 0o644, 0, 0).unwrap();
    let c2 = fs.counters().blocks_read;
    fs.unlink(d.ino, b"entry-777").unwrap();
    let c3 = fs.counters().blocks_read;
    println!(
        "cold lookup {} blocks, create {} blocks, unlink {} blocks",
        c1 - c0,
        c2 - c1,
        c3 - c2
    );
}
