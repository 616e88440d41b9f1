//! Scenario: replay is read-only. Mounting a volume whose log holds
//! committed deltas (after a crash, and after a clean close), then closing
//! it without changes, leaves every byte of the image unchanged and issues
//! no write and no flush.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use tux3::device::{Device, MemDevice};
use tux3::{FormatOptions, Fs, OpenOptions, ROOT_INO};

fn hash(image: &[u8]) -> u64 {
    let mut h = DefaultHasher::new();
    image.hash(&mut h);
    h.finish()
}

fn open_close_unchanged(mem: &Arc<MemDevice>) {
    let before = hash(&mem.image());
    let dev: Arc<dyn Device> = mem.clone();
    let c0 = dev.counters();
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    // Reads are fine; they change nothing.
    let mut pos = 0;
    while let Some(last) = fs.readdir(ROOT_INO, pos, 100).unwrap().last() {
        fs.getattr(last.ino).unwrap();
        pos = last.next;
    }
    assert!(
        fs.stats().replayed_deltas > 0,
        "the log must hold deltas to replay"
    );
    fs.close().unwrap();
    let c1 = dev.counters();
    assert_eq!(c1.blocks_written, c0.blocks_written, "open/close wrote blocks");
    assert_eq!(c1.flushes, c0.flushes, "open/close flushed");
    assert_eq!(hash(&mem.image()), before, "image changed");
}

#[test]
fn replay_never_writes() {
    let mem = Arc::new(MemDevice::new(4096, 4096));
    let dev: Arc<dyn Device> = mem.clone();
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    for i in 0..50u32 {
        let a = fs
            .create(ROOT_INO, format!("f{i}").as_bytes(), 0o644, 0, 0)
            .unwrap();
        fs.write(a.ino, 0, &vec![i as u8; 5000]).unwrap();
        if i % 10 == 0 {
            fs.sync().unwrap();
        }
    }
    fs.sync().unwrap();
    drop(fs); // crash: the log holds five deltas
    open_close_unchanged(&mem);
    open_close_unchanged(&mem);
    // And after a clean close with further changes.
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    fs.unlink(ROOT_INO, b"f3").unwrap();
    fs.close().unwrap();
    open_close_unchanged(&mem);
}
