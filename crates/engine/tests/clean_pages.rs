//! Scenario: pages a commit wrote stay in cache as clean pages. A partial
//! write of such a block (an append to a log) reads nothing from the
//! device; clean pages never outlive a truncate or their inode, so stale
//! data never shows; and they stay within their limit (`clean_limit`). A stream's
//! commits do not push other files' clean pages out.

use std::sync::Arc;
use tux3::device::{Device, MemDevice};
use tux3::{FormatOptions, Fs, OpenOptions, ROOT_INO};

const BS: u64 = 4096;

fn fresh() -> Arc<dyn Device> {
    let dev: Arc<dyn Device> = Arc::new(MemDevice::new(BS as u32, 8192));
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    dev
}

fn open(dev: &Arc<dyn Device>, dirty_limit: u64) -> Fs {
    let opts = OpenOptions {
        dirty_limit,
        clean_limit: dirty_limit,
        ..OpenOptions::default()
    };
    Fs::open(dev.clone(), opts).unwrap()
}

#[test]
fn appends_after_a_commit_read_nothing_back() {
    let dev = fresh();
    let fs = open(&dev, 64 << 20);
    let f = fs.create(ROOT_INO, b"log", 0o644, 0, 0).unwrap();
    let mut expect = Vec::new();
    let mut reads = 0;
    for i in 0..12u64 {
        let rec = vec![i as u8 + 1; 1000];
        let before = fs.counters().blocks_read;
        fs.write(f.ino, expect.len() as u64, &rec).unwrap();
        reads += fs.counters().blocks_read - before;
        expect.extend_from_slice(&rec);
        fs.sync().unwrap();
    }
    assert_eq!(reads, 0, "every append after a commit found its block in cache");
    assert!(fs.stats().clean_bytes >= BS, "the written blocks are kept");
    assert_eq!(fs.read(f.ino, 0, expect.len()).unwrap(), expect);
    fs.close().unwrap();
    let fs = open(&dev, 64 << 20);
    assert_eq!(
        fs.read(f.ino, 0, expect.len()).unwrap(),
        expect,
        "and on the device"
    );
}

#[test]
fn truncate_and_free_drop_clean_pages() {
    let dev = fresh();
    let fs = open(&dev, 64 << 20);
    let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap();
    fs.write(f.ino, 0, &[0xaa; 3 * BS as usize]).unwrap();
    fs.sync().unwrap();
    // Shrink into block 0, then write a byte near the end of block 2: the
    // blocks in between must read as zeros, not as the old clean copies.
    fs.setattr(
        f.ino,
        &tux3::SetAttr {
            size: Some(1000),
            ..Default::default()
        },
    )
    .unwrap();
    fs.write(f.ino, 3 * BS - 10, &[7]).unwrap();
    let mut expect = vec![0u8; (3 * BS - 9) as usize];
    expect[..1000].fill(0xaa);
    expect[(3 * BS - 10) as usize] = 7;
    assert_eq!(fs.read(f.ino, 0, expect.len()).unwrap(), expect);
    fs.sync().unwrap();
    assert_eq!(
        fs.read(f.ino, 0, expect.len()).unwrap(),
        expect,
        "after the commit"
    );
    // A freed inode's clean pages go with it, whatever takes its number.
    fs.unlink(ROOT_INO, b"f").unwrap();
    fs.sync().unwrap();
    let g = fs.create(ROOT_INO, b"g", 0o644, 0, 0).unwrap();
    fs.write(g.ino, 10, &[1]).unwrap();
    let mut want = vec![0u8; 11];
    want[10] = 1;
    assert_eq!(fs.read(g.ino, 0, 11).unwrap(), want);
}

#[test]
fn clean_pages_stay_within_their_limit() {
    let dev = fresh();
    let limit = 256 << 10;
    let fs = open(&dev, limit);
    let mut files = Vec::new();
    for n in 0..24u8 {
        let f = fs
            .create(ROOT_INO, format!("f{n}").as_bytes(), 0o644, 0, 0)
            .unwrap();
        fs.write(f.ino, 0, &vec![n; 40_000]).unwrap();
        fs.sync().unwrap();
        let held = fs.stats().clean_bytes;
        assert!(
            held <= limit,
            "{held} bytes of clean pages over a limit of {limit}"
        );
        assert!(held > 0);
        files.push(f.ino);
    }
    // Evicted or kept, every file reads back; appends land right.
    for (n, ino) in files.iter().enumerate() {
        fs.write(*ino, 40_000, &[0xee; 100]).unwrap();
        let mut want = vec![n as u8; 40_000];
        want.extend_from_slice(&[0xee; 100]);
        assert_eq!(fs.read(*ino, 0, 40_100).unwrap(), want, "file {n}");
    }
}

#[test]
fn a_stream_keeps_no_clean_pages_and_pushes_none_out() {
    let dev = fresh();
    let limit = 256 << 10;
    let fs = open(&dev, limit);
    let log = fs.create(ROOT_INO, b"log", 0o644, 0, 0).unwrap();
    fs.write(log.ino, 0, &[1; 1000]).unwrap();
    fs.sync().unwrap();
    assert_eq!(fs.stats().clean_bytes, BS);
    // A stream: each commit writes 160 KiB of it, more than a quarter of
    // the limit, so none of it stays. Kept, the second commit's would pass
    // the limit and evict the oldest file's pages: the log's.
    let stream = fs.create(ROOT_INO, b"stream", 0o644, 0, 0).unwrap();
    for i in 0..5u64 {
        fs.write(stream.ino, i * (160 << 10), &vec![i as u8; 160 << 10])
            .unwrap();
        fs.sync().unwrap();
        assert_eq!(fs.stats().clean_bytes, BS, "commit {i}: only the log's page");
    }
    let before = fs.counters().blocks_read;
    fs.write(log.ino, 1000, &[2; 1000]).unwrap();
    assert_eq!(
        fs.counters().blocks_read - before,
        0,
        "the log's append read nothing back"
    );
    let mut want = vec![1; 1000];
    want.extend_from_slice(&[2; 1000]);
    assert_eq!(fs.read(log.ino, 0, 2000).unwrap(), want);
    assert_eq!(
        fs.read(stream.ino, 4 * (160 << 10), 160 << 10).unwrap(),
        vec![4; 160 << 10],
        "the stream reads back from the device"
    );
}
