//! Unit tests of the file and block device (`device/file.rs`).

use super::*;

const BS: u32 = 4096;

fn temp_image(blocks: u64) -> tempfile::NamedTempFile {
    let f = tempfile::NamedTempFile::new().unwrap();
    f.as_file().set_len(blocks * BS as u64).unwrap();
    f
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn round_trip_and_counters() {
    let img = temp_image(16);
    let dev = FileDevice::open(img.path(), BS, true).unwrap();
    assert_eq!(dev.block_count(), 16);
    assert_eq!(dev.block_size(), BS);
    let data = pattern(3 * BS as usize, 7);
    dev.write(5, &data).unwrap();
    dev.write(0, &pattern(BS as usize, 1)).unwrap();
    let mut back = vec![0; 3 * BS as usize];
    dev.read(5, &mut back).unwrap();
    assert_eq!(back, data);
    dev.flush().unwrap();
    let c = dev.counters();
    assert_eq!(
        c,
        CounterSnapshot {
            blocks_read: 3,
            blocks_written: 4,
            reads: 1,
            writes: 2,
            flushes: 1,
            ..CounterSnapshot::default()
        }
    );
    // A second open sees the data.
    let dev2 = FileDevice::open(img.path(), BS, false).unwrap();
    let mut one = vec![0; BS as usize];
    dev2.read(6, &mut one).unwrap();
    assert_eq!(one, data[BS as usize..2 * BS as usize]);
}

/// A discard punches a hole in the image: the host gives the blocks
/// back, they read as zeros, the size stays, the neighbours keep
/// their data.
#[test]
fn discard_punches_a_hole() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("img");
    create_image(&path, 64 * BS as u64).unwrap();
    let dev = FileDevice::open(&path, BS, true).unwrap();
    dev.write(0, &pattern(64 * BS as usize, 3)).unwrap();
    dev.flush().unwrap();
    let before = std::fs::metadata(&path).unwrap().blocks();
    match dev.discard(8, 32) {
        Err(e) if e.kind() == ErrorKind::Unsupported => return, // the host cannot punch holes
        r => r.unwrap(),
    }
    let meta = std::fs::metadata(&path).unwrap();
    assert_eq!(meta.len(), 64 * BS as u64, "the size stays");
    assert!(
        before - meta.blocks() >= 32 * BS as u64 / 512,
        "{before} -> {} sectors",
        meta.blocks()
    );
    let mut back = vec![1; 32 * BS as usize];
    dev.read(8, &mut back).unwrap();
    assert!(back.iter().all(|&b| b == 0));
    let mut edge = vec![0; BS as usize];
    dev.read(40, &mut edge).unwrap();
    assert_eq!(
        edge,
        pattern(64 * BS as usize, 3)[40 * BS as usize..41 * BS as usize]
    );
    let c = dev.counters();
    assert_eq!((c.discards, c.blocks_discarded), (1, 32));
    assert_eq!(dev.discard(60, 5).unwrap_err().kind(), ErrorKind::InvalidInput);
    assert_eq!(dev.discard(0, 0).unwrap_err().kind(), ErrorKind::InvalidInput);
    let ro = FileDevice::open(&path, BS, false).unwrap();
    assert_eq!(ro.discard(0, 1).unwrap_err().kind(), ErrorKind::PermissionDenied);
}

#[test]
fn out_of_range_is_an_error() {
    let img = temp_image(4);
    let dev = FileDevice::open(img.path(), BS, true).unwrap();
    let mut buf = vec![0; 2 * BS as usize];
    assert!(dev.read(3, &mut buf).is_err());
    assert!(dev.write(3, &buf).is_err());
    assert!(dev.read(u64::MAX, &mut buf).is_err());
    assert!(dev.read(0, &mut buf[..100]).is_err());
    assert!(dev.write(0, &[]).is_err());
    assert_eq!(dev.counters(), CounterSnapshot::default());
}

#[test]
fn read_only_refuses_writes() {
    let img = temp_image(4);
    let dev = FileDevice::open(img.path(), BS, false).unwrap();
    let err = dev.write(0, &vec![1; BS as usize]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PermissionDenied);
    let mut buf = vec![1; BS as usize];
    dev.read(0, &mut buf).unwrap();
    assert!(buf.iter().all(|&b| b == 0));
}

#[test]
fn direct_io_with_unaligned_buffers() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("img");
    create_image(&path, 320 * BS as u64).unwrap();
    // Not every filesystem supports O_DIRECT; skip where it does not.
    let Ok(dev) = FileDevice::open_with(&path, BS, true, true) else {
        return;
    };
    // 300 blocks: more than one bounce-buffer piece.
    let data = pattern(300 * BS as usize + 1, 3);
    if dev.write(1, &data[1..]).is_err() {
        return;
    }
    let mut back = vec![0; 300 * BS as usize + 1];
    dev.read(1, &mut back[1..]).unwrap();
    assert_eq!(back[1..], data[1..]);
}

/// Gathered writes: scattered requests of several parts, one larger
/// than a bounce piece, through the ring (and one by one when the ring
/// is busy), land whole and count one write per request.
#[test]
fn gathered_writes_land_whole() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("img");
    create_image(&path, 700 * BS as u64).unwrap();
    let direct = FileDevice::open_with(&path, BS, true, true);
    let mut dev = match direct {
        Ok(dev) if dev.write(0, &pattern(BS as usize, 0)).is_ok() => dev,
        _ => FileDevice::open_with(&path, BS, true, false).unwrap(),
    };
    if dev.batch.is_none() {
        dev.batch = Batch::new(PIECE_MAX).map(Mutex::new);
    }
    let blocks = |n: usize, seed: u8| pattern(n * BS as usize, seed);
    let (a, b, c, d) = (blocks(1, 1), blocks(2, 2), blocks(300, 3), blocks(1, 4));
    let reqs: Vec<Gather> = vec![
        (10, vec![&a, &b]),
        (3, vec![&d]),
        (100, vec![&c, &a]),
        (690, vec![&b, &d, &a]),
    ];
    for busy in [false, true] {
        let before = dev.counters();
        // A held ring makes the batch go one write at a time.
        let held = busy.then(|| dev.batch.as_ref().map(|b| b.lock()));
        dev.write_gather(&reqs).unwrap();
        drop(held);
        let after = dev.counters();
        assert_eq!(after.writes - before.writes, 4);
        assert_eq!(after.blocks_written - before.blocks_written, 3 + 1 + 301 + 4);
        for (block, parts) in &reqs {
            let want: Vec<u8> = parts.concat();
            let mut back = vec![0; want.len()];
            dev.read(*block, &mut back).unwrap();
            assert!(back == want, "request at block {block}, ring busy: {busy}");
        }
    }
    let err = dev.write_gather(&[(699, vec![&b])]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::UnexpectedEof, "{err}");
}

/// A flush from another thread than the urgent one (a delta commit's)
/// waits for the urgent I/O to end (at most `MAX_HOLD`), so that it is
/// not queued ahead of the fsync commit's own flush; the urgent
/// thread's flush goes at once, and so does any when none is urgent.
#[test]
fn background_flushes_wait_for_urgent_io() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("img");
    create_image(&path, 16 * BS as u64).unwrap();
    let dev = FileDevice::open_with(&path, BS, true, false).unwrap();
    let other = |dev: &FileDevice| std::thread::scope(|s| s.spawn(|| dev.flush().unwrap()).join().unwrap());
    other(&dev);
    assert_eq!(dev.gate.waits(), 0, "nothing urgent");
    dev.urgent_begin();
    dev.flush().unwrap();
    assert_eq!(dev.gate.waits(), 0, "the urgent thread's own flush");
    other(&dev);
    assert_eq!(dev.gate.waits(), 1, "another thread's flush waited");
    dev.urgent_end();
    other(&dev);
    assert_eq!(dev.gate.waits(), 1, "calm again");
    assert_eq!(dev.counters().flushes, 4);
}

/// Urgent I/O is the calling thread's: its own batches go at once,
/// while another thread's batch holds back before each piece until the
/// urgent section ends.
#[test]
fn other_threads_batches_make_way_for_urgent_io() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("img");
    create_image(&path, 512 * BS as u64).unwrap();
    let mut dev = FileDevice::open_with(&path, BS, true, false).unwrap();
    let Some(batch) = Batch::new(PIECE_MAX) else {
        return; // no io_uring here: writes go one by one
    };
    dev.batch = Some(Mutex::new(batch));
    let holds = |dev: &FileDevice| dev.batch.as_ref().unwrap().lock().holds();
    // Four pieces: three neighbouring requests of PIECE_MAX each and one more.
    let big = pattern(PIECE_MAX, 5);
    let step = (PIECE_MAX / BS as usize) as u64;
    let reqs: Vec<Gather> = vec![
        (0, vec![&big]),
        (step, vec![&big]),
        (2 * step, vec![&big]),
        (400, vec![&big[..BS as usize]]),
    ];
    dev.urgent_begin();
    dev.write_gather(&reqs).unwrap();
    assert_eq!(holds(&dev), 0, "the urgent thread's own batch goes at once");
    std::thread::scope(|s| s.spawn(|| dev.write_gather(&reqs).unwrap()).join().unwrap());
    assert_eq!(holds(&dev), 4, "another thread's batch holds before each piece");
    dev.urgent_end();
    std::thread::scope(|s| s.spawn(|| dev.write_gather(&reqs).unwrap()).join().unwrap());
    assert_eq!(holds(&dev), 4, "no urgent I/O, no hold");
    let mut back = vec![0u8; PIECE_MAX];
    dev.read(step, &mut back).unwrap();
    assert!(back == big);
}

/// An urgent batch (an fsync commit's) goes through a ring of its own,
/// all its pieces in flight together, even while a background batch
/// holds the other ring, and a single urgent piece goes through it too;
/// a background batch that finds its ring busy goes one write at a
/// time.
#[test]
fn urgent_batches_have_a_ring_of_their_own() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("img");
    create_image(&path, 64 * BS as u64).unwrap();
    let mut dev = FileDevice::open_with(&path, BS, true, false).unwrap();
    let (Some(background), Some(urgent)) = (Batch::new(PIECE_MAX), Batch::new(PIECE_MAX)) else {
        return; // no io_uring here: writes go one by one
    };
    dev.batch = Some(Mutex::new(background));
    dev.urgent_batch = Some(Mutex::new(urgent));
    let (a, b) = (pattern(BS as usize, 6), pattern(BS as usize, 7));
    let reqs: Vec<Gather> = vec![(5, vec![&a]), (40, vec![&b])];
    let sent = |ring: &Option<Mutex<Batch>>| ring.as_ref().unwrap().lock().sent();
    let held = dev.batch.as_ref().unwrap().lock();
    dev.urgent_begin();
    dev.write_gather(&reqs).unwrap();
    dev.urgent_end();
    drop(held);
    assert_eq!(sent(&dev.urgent_batch), 2, "both pieces through the urgent ring");
    assert_eq!(sent(&dev.batch), 0);
    let held = dev.batch.as_ref().unwrap().lock();
    dev.write_gather(&reqs).unwrap();
    drop(held);
    assert_eq!(
        (sent(&dev.batch), sent(&dev.urgent_batch)),
        (0, 2),
        "a busy ring: one by one"
    );
    // A single urgent piece (an fsync commit's neighbouring blocks, one
    // request) goes through the urgent ring too, whose buffers it reuses.
    let one: Vec<Gather> = vec![(10, vec![&a, &b])];
    dev.urgent_begin();
    dev.write_gather(&one).unwrap();
    dev.urgent_end();
    assert_eq!(
        sent(&dev.urgent_batch),
        3,
        "a lone urgent piece through the urgent ring"
    );
    for (block, want) in [(5, &a), (40, &b), (10, &a), (11, &b)] {
        let mut back = vec![0; BS as usize];
        dev.read(block, &mut back).unwrap();
        assert!(&back == want, "block {block}");
    }
}

#[test]
fn create_image_is_sparse_and_leaves_files_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("img");
    create_image(&path, 1 << 20).unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 1 << 20);
    std::fs::write(&path, b"keep").unwrap();
    create_image(&path, 1 << 20).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), b"keep");
    assert!(create_image(dir.path(), 1 << 20).is_err());
}
