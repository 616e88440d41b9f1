//! Reads across holes: a hole reads as zeroes up to the next extent, and a
//! page written into a hole and not yet committed (or committed, then
//! cached) reads as written, whether the read starts in the hole, ends in
//! it or spans several holes and extents; a size extended past the last
//! extent reads as zeroes to the end.

use std::sync::Arc;
use tux3::device::MemDevice;
use tux3::{FormatOptions, Fs, OpenOptions, SetAttr, ROOT_INO};

const BS: u64 = 4096;

fn block(tag: u8) -> Vec<u8> {
    (0..BS as usize).map(|k| tag.wrapping_add(k as u8 / 61)).collect()
}

#[test]
fn holes_read_as_zeroes_and_pages_written_into_them_as_written() {
    let dev = Arc::new(MemDevice::new(BS as u32, 8192));
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    let opts = || OpenOptions {
        commit_interval: None,
        ..OpenOptions::default()
    };
    let fs = Fs::open(dev.clone(), opts()).unwrap();
    let ino = fs.create(ROOT_INO, b"sparse", 0o644, 0, 0).unwrap().ino;
    let size = 6000 * BS;
    let mut expect = vec![0u8; size as usize];
    let mut put = |fs: &Fs, b: u64, tag: u8| {
        let data = block(tag);
        fs.write(ino, b * BS, &data).unwrap();
        expect[(b * BS) as usize..((b + 1) * BS) as usize].copy_from_slice(&data);
    };
    for (b, tag) in [(0, 1), (1, 2), (1000, 3), (5000, 4), (5001, 5)] {
        put(&fs, b, tag);
    }
    fs.setattr(
        ino,
        &SetAttr {
            size: Some(size),
            ..SetAttr::default()
        },
    )
    .unwrap();
    fs.close().unwrap();
    // Reopened: the extents are on the device, nothing is cached; then
    // pages written into two holes stay dirty.
    let fs = Fs::open(dev, opts()).unwrap();
    put(&fs, 500, 6);
    put(&fs, 3000, 7);
    let check = |from: u64, len: usize| {
        let mut out = vec![0xeeu8; len];
        let n = fs.read_into(ino, from, &mut out).unwrap();
        let want = &expect[from as usize..(from as usize + len).min(expect.len())];
        assert_eq!(n, want.len(), "bytes read at {from}");
        assert!(out[..n] == *want, "read of {len} bytes at {from}");
    };
    check(0, size as usize);
    for (from, len) in [
        (BS + 100, 3 * BS as usize),            // an extent's end into a hole
        (2 * BS, 498 * BS as usize + 17),       // a hole up to a dirty page
        (499 * BS + 5, 2 * BS as usize),        // across the dirty page
        (600 * BS, 401 * BS as usize),          // a hole into an extent
        (1001 * BS, 4500 * BS as usize),        // holes, a dirty page, an extent
        (5002 * BS - 1, 998 * BS as usize + 1), // past the last extent to the end
    ] {
        check(from, len);
    }
    fs.close().unwrap();
}
