//! Scenario: fdatasync. It makes data, size and names durable like fsync,
//! but writes nothing when only attributes that reading the data back does
//! not need (times, mode, owner) changed since; a crash keeps the data.

use std::sync::Arc;
use tux3::device::{Device, MemDevice};
use tux3::{FormatOptions, Fs, OpenOptions, SetAttr, ROOT_INO};

fn fresh() -> Arc<dyn Device> {
    let dev: Arc<dyn Device> = Arc::new(MemDevice::new(4096, 4096));
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    dev
}

fn open(dev: &Arc<dyn Device>, strict: bool) -> Fs {
    let opts = OpenOptions {
        fsync_strict: strict,
        ..OpenOptions::default()
    };
    Fs::open(dev.clone(), opts).unwrap()
}

/// Blocks written and flushes issued by `f`.
fn cost(fs: &Fs, f: impl FnOnce()) -> (u64, u64) {
    let c0 = fs.counters();
    f();
    let c1 = fs.counters();
    (c1.blocks_written - c0.blocks_written, c1.flushes - c0.flushes)
}

fn chmod(fs: &Fs, ino: u64, mode: u32) {
    let set = SetAttr {
        mode: Some(mode),
        ..SetAttr::default()
    };
    fs.setattr(ino, &set).unwrap();
}

#[test]
fn fdatasync_skips_attribute_only_changes() {
    let dev = fresh();
    let fs = open(&dev, false);
    let a = fs.create(ROOT_INO, b"db", 0o644, 0, 0).unwrap();
    fs.write(a.ino, 0, b"page one").unwrap();
    // A new file: its data and name go out.
    assert_eq!(cost(&fs, || fs.fsync(a.ino, true).unwrap()).1, 1);
    chmod(&fs, a.ino, 0o600);
    assert_eq!(cost(&fs, || fs.fsync(a.ino, true).unwrap()), (0, 0), "mode only");
    // fsync still makes the mode durable.
    assert_eq!(cost(&fs, || fs.fsync(a.ino, false).unwrap()).1, 1);
    // A size change without data (extend) is needed to read the data back.
    let set = SetAttr {
        size: Some(20_000),
        ..SetAttr::default()
    };
    fs.setattr(a.ino, &set).unwrap();
    assert_eq!(cost(&fs, || fs.fsync(a.ino, true).unwrap()).1, 1, "size");
    fs.write(a.ino, 8, b", two").unwrap();
    assert_eq!(cost(&fs, || fs.fsync(a.ino, true).unwrap()).1, 1, "data");
    chmod(&fs, a.ino, 0o640);
    assert_eq!(cost(&fs, || fs.fsync(a.ino, true).unwrap()), (0, 0));
    // A directory's entries are its data.
    let b = fs.create(ROOT_INO, b"log", 0o644, 0, 0).unwrap();
    assert_eq!(cost(&fs, || fs.fsync(ROOT_INO, true).unwrap()).1, 1, "entries");
    drop(fs); // crash
    let fs = open(&dev, false);
    let got = fs.getattr(a.ino).unwrap();
    assert_eq!(got.size, 20_000);
    assert_eq!(
        got.mode & 0o7777,
        0o600,
        "the last fsync's mode, not the later chmod"
    );
    assert_eq!(&fs.read(a.ino, 0, 13).unwrap(), b"page one, two");
    assert_eq!(fs.lookup(ROOT_INO, b"log").unwrap().ino, b.ino);
}

#[test]
fn fdatasync_under_strict_fsync_commits() {
    let dev = fresh();
    let fs = open(&dev, true);
    let a = fs.create(ROOT_INO, b"db", 0o644, 0, 0).unwrap();
    fs.sync().unwrap();
    chmod(&fs, a.ino, 0o600);
    let deltas = fs.stats().deltas;
    fs.fsync(a.ino, true).unwrap();
    assert_eq!(fs.stats().deltas, deltas + 1, "strict: the whole delta commits");
}
