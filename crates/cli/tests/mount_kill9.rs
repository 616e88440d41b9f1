//! kill -9 of the mount server in the middle of appends and fsyncs: after
//! detaching the dead mount, fsck is clean, and after a remount every file
//! holds at least what it held when its last fsync returned (a byte-exact
//! prefix of everything written; later unsynced appends may or may not be
//! there, but nothing may be corrupt).

mod mount_util;

use mount_util::{can_mount, wait_until, Fixture};
use std::fs;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

const FILES: usize = 5;
/// fsyncs that must have returned before the kill.
const SYNCS_BEFORE_KILL: usize = 40;

fn record(file: usize, i: usize) -> Vec<u8> {
    let mut r = format!("file {file} record {i:06} ").into_bytes();
    r.extend((0..(i * 37) % 3000).map(|k| b'a' + ((k + i) % 26) as u8));
    r.push(b'\n');
    r
}

#[test]
fn kill9_mid_fsync_keeps_synced_prefixes() {
    if !can_mount() {
        return;
    }
    let fx = Fixture::new("256M");
    // commit=0: nothing becomes durable except through fsync.
    let m = fx.mount_foreground(&["-o", "commit=0"]);

    // written[f]: everything appended to file f; synced[f]: its length when
    // the last fsync of f returned.
    let written = Mutex::new(vec![Vec::<u8>::new(); FILES]);
    let synced = Mutex::new(vec![0usize; FILES]);
    let syncs = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let mut files: Vec<fs::File> = (0..FILES)
        .map(|f| {
            fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(fx.path(&format!("log{f}")))
                .expect("create")
        })
        .collect();

    std::thread::scope(|s| {
        s.spawn(|| {
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let f = i % FILES;
                let rec = record(f, i);
                // After the kill every call fails (ENOTCONN): stop there.
                if files[f].write_all(&rec).is_err() {
                    break;
                }
                written.lock().unwrap()[f].extend_from_slice(&rec);
                // fsync files 0..3 now and then; 4 never (its appends are
                // never promised).
                if f < 4 && i % 3 == 0 {
                    let len = written.lock().unwrap()[f].len();
                    if files[f].sync_all().is_err() {
                        break;
                    }
                    synced.lock().unwrap()[f] = len;
                    syncs.fetch_add(1, Ordering::SeqCst);
                }
                i += 1;
            }
        });
        wait_until("the fsyncs before the kill", || {
            syncs.load(Ordering::SeqCst) >= SYNCS_BEFORE_KILL
        });
        m.kill9();
        stop.store(true, Ordering::Relaxed);
    });
    drop(files);

    let written = written.into_inner().unwrap();
    let synced = synced.into_inner().unwrap();
    eprintln!(
        "kill9: killed after {} fsyncs; written {:?} bytes, synced {:?}",
        syncs.load(Ordering::SeqCst),
        written.iter().map(Vec::len).collect::<Vec<_>>(),
        synced
    );

    // Before any remount: the image as the killed server left it.
    fx.fsck();
    let m = fx.mount(&[]);
    for f in 0..FILES {
        let got = match fs::read(fx.path(&format!("log{f}"))) {
            // Never fsynced: even its creation was never promised.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && synced[f] == 0 => continue,
            r => r.expect("read after remount"),
        };
        assert!(
            got.len() >= synced[f],
            "log{f}: {} bytes after the crash, {} were fsynced",
            got.len(),
            synced[f]
        );
        assert!(
            got.len() <= written[f].len() && got == written[f][..got.len()],
            "log{f}: {} bytes after the crash are not a prefix of what was written",
            got.len()
        );
    }
    m.unmount();
    fx.fsck();
}
