//! Scenario: the dirty limit and the stream bound (`OpenOptions::
//! dirty_limit`, `stream_limit`). Many files' small writes may fill the
//! open delta up to half the limit before a commit thread is woken, and
//! never wait below the limit; a stream (a file holding an eighth of the
//! stream bound) wakes it at half the stream bound and stops at seven
//! eighths of it, whatever the limit — and it stops there even when the
//! light writers hold the dirty data. Checked on the volume directly, write
//! by write, and end to end through `Fs` with a commit thread.

use std::sync::Arc;
use std::time::Duration;
use tux3::device::{Device, MemDevice};
use tux3::frontend::{Pressure, Volume};
use tux3::{FormatOptions, Fs, OpenOptions, ROOT_INO};

const BS: u64 = 4096;
const LIMIT: u64 = 16 << 20;
const STREAM: u64 = 1 << 20;

fn fresh(blocks: u64) -> Arc<dyn Device> {
    let dev: Arc<dyn Device> = Arc::new(MemDevice::new(BS as u32, blocks));
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    dev
}

fn opts() -> OpenOptions {
    OpenOptions {
        dirty_limit: LIMIT,
        stream_limit: STREAM,
        ..OpenOptions::default()
    }
}

fn volume() -> Volume {
    Volume::open(fresh(16384), opts()).unwrap()
}

fn file(v: &mut Volume, name: &str) -> u64 {
    v.mknod(ROOT_INO, name.as_bytes(), libc::S_IFREG | 0o644, 0, 0, 0)
        .unwrap()
        .ino
}

fn dirty(v: &Volume) -> u64 {
    v.stats().dirty_bytes
}

#[test]
fn light_writers_fill_half_the_limit_before_a_commit_is_wanted() {
    let mut v = volume();
    // 2,500 files of one block each: 10 MiB, ten times the stream bound.
    let mut first_wanted = None;
    for i in 0..2500 {
        let ino = file(&mut v, &format!("f{i}"));
        assert!(
            matches!(v.write_pressure(ino, 0, BS as usize), Pressure::Clear),
            "file {i}: a light writer waited at {} dirty bytes, below the limit",
            dirty(&v)
        );
        v.write(ino, 0, &[i as u8; BS as usize]).unwrap();
        if first_wanted.is_none() && v.wants_commit(ino) {
            first_wanted = Some(dirty(&v));
        }
    }
    assert_eq!(
        first_wanted,
        Some(LIMIT / 2),
        "the commit thread is wanted once half the limit is dirty, not at the stream bound"
    );
    assert!(v.may_commit_early(), "and a woken commit thread takes the delta");
}

/// Write `ino` in 64 KiB pieces until the volume asks the writer to wait;
/// returns (dirty bytes when a commit was first wanted, dirty bytes when
/// the writer had to stop).
fn stream_until_it_stops(v: &mut Volume, ino: u64) -> (Option<u64>, u64) {
    const PIECE: usize = 64 << 10;
    let mut wanted = None;
    for k in 0u64.. {
        let off = k * PIECE as u64;
        if !matches!(v.write_pressure(ino, off, PIECE), Pressure::Clear) {
            return (wanted, dirty(v));
        }
        v.write(ino, off, &[k as u8; PIECE]).unwrap();
        if wanted.is_none() && v.wants_commit(ino) {
            wanted = Some(dirty(v));
        }
        assert!(off < 2 * LIMIT, "the stream never stopped");
    }
    unreachable!()
}

#[test]
fn a_stream_wakes_at_half_the_stream_bound_and_stops_short_of_it() {
    let mut v = volume();
    let ino = file(&mut v, "stream");
    let (wanted, stopped) = stream_until_it_stops(&mut v, ino);
    assert_eq!(
        wanted,
        Some(STREAM / 2),
        "a stream's delta is taken at half the stream bound"
    );
    // Stopped by the next piece passing seven eighths of the bound.
    assert_eq!(
        stopped,
        STREAM - STREAM / 8,
        "the stream stops at 7/8 of the stream bound, not of the limit"
    );
    assert!(
        matches!(v.write_pressure(ino, stopped, 64 << 10), Pressure::Commit),
        "with no commit in flight the stream commits the delta itself"
    );
    let light = file(&mut v, "log");
    assert!(
        matches!(v.write_pressure(light, 0, 1000), Pressure::Clear),
        "a light writer next to the stopped stream goes on"
    );
}

#[test]
fn a_stream_yields_to_dirty_data_the_light_writers_hold() {
    let mut v = volume();
    // Light writers hold four times the stream bound.
    for i in 0..1024 {
        let ino = file(&mut v, &format!("f{i}"));
        v.write(ino, 0, &[1; BS as usize]).unwrap();
    }
    let held = dirty(&v);
    assert_eq!(held, 4 * STREAM);
    let ino = file(&mut v, "stream");
    let (wanted, stopped) = stream_until_it_stops(&mut v, ino);
    // It writes until it is a stream (an eighth of the bound), then finds
    // the volume already past its bound.
    assert_eq!(
        stopped - held,
        STREAM / 8,
        "the stream stops as soon as it is one"
    );
    assert_eq!(wanted, Some(held + STREAM / 8), "and wants its commit then");
}

#[test]
fn end_to_end_a_stream_keeps_deltas_of_the_stream_bound() {
    const TOTAL: u64 = 8 << 20;
    const CHUNK: usize = 16 << 10;
    let dev = fresh(16384);
    let fs = Fs::open(
        dev.clone(),
        OpenOptions {
            // Only dirty pressure wakes the commit thread within this test.
            commit_interval: Some(Duration::from_secs(3600)),
            ..opts()
        },
    )
    .unwrap();
    let ino = fs.create(ROOT_INO, b"big", 0o644, 0, 0).unwrap().ino;
    let mut peak = 0;
    for i in 0..TOTAL / CHUNK as u64 {
        fs.write(ino, i * CHUNK as u64, &vec![i as u8; CHUNK]).unwrap();
        let st = fs.stats();
        peak = peak.max(st.dirty_bytes + st.in_flight_bytes);
    }
    let deltas = fs.stats().deltas;
    fs.close().unwrap();
    assert!(
        peak <= STREAM,
        "the stream held {peak} bytes, past the stream bound {STREAM}"
    );
    assert!(peak >= STREAM / 2, "peak {peak} never came near the stream bound");
    assert!(
        deltas + 1 >= TOTAL / STREAM,
        "{deltas} deltas for {TOTAL} bytes: deltas larger than the stream bound"
    );
    let fs = Fs::open(dev, opts()).unwrap();
    for i in 0..TOTAL / CHUNK as u64 {
        let got = fs.read(ino, i * CHUNK as u64, CHUNK).unwrap();
        assert!(
            got.iter().all(|b| *b == i as u8),
            "chunk {i} differs after remount"
        );
    }
}
