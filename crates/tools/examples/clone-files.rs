//! Test support for bench/send-clones.sh (until `tux3 clone` exists):
//!
//!   clone-files make IMAGE SIZE_MIB CLONES SNAP
//!       on the (freshly made, unmounted) volume IMAGE: `/orig`, SIZE_MIB
//!       MiB of data no two blocks of which are alike, and CLONES files
//!       `/c0`.. made with `Fs::clone_range` of all of it; then snapshot
//!       SNAP.
//!   clone-files sums IMAGE SNAP
//!       one line per file of the root of snapshot SNAP: its name, size
//!       and CRC32C of its bytes (to compare a received snapshot by).
//!   clone-files used IMAGE
//!       the bytes in use on IMAGE (statfs: blocks less free blocks), and
//!       what `Fs::sharing` says sharing saves.
//!
//! Calls the engine API only.

use std::path::Path;
use tux3::{Fs, OpenOptions, ROOT_INO};

fn open(image: &str, writable: bool) -> Fs {
    let dev = tux3::open_path(Path::new(image), writable).unwrap_or_else(|e| panic!("{image}: {e}"));
    let opts = OpenOptions {
        read_only: !writable,
        ..OpenOptions::default()
    };
    Fs::open(dev, opts).unwrap_or_else(|e| panic!("{image}: {e}"))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["make", image, mib, clones, snap] => {
            let mib: u64 = mib.parse().expect("SIZE_MIB");
            let clones: u64 = clones.parse().expect("CLONES");
            let fs = open(image, true);
            let orig = fs.create(ROOT_INO, b"orig", 0o644, 0, 0).unwrap().ino;
            let mut x = 0x9e37_79b9_7f4a_7c15u64;
            let mut chunk = vec![0u8; 1 << 20];
            for m in 0..mib {
                for w in chunk.chunks_mut(8) {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    w.copy_from_slice(&x.to_le_bytes());
                }
                fs.write(orig, m << 20, &chunk).unwrap();
            }
            for k in 0..clones {
                let c = fs
                    .create(ROOT_INO, format!("c{k}").as_bytes(), 0o644, 0, 0)
                    .unwrap()
                    .ino;
                let n = fs.clone_range(orig, 0, c, 0, mib << 20).unwrap();
                assert_eq!(n, mib << 20);
            }
            fs.snapshot_create(snap.as_bytes()).unwrap();
            fs.close().unwrap();
        }
        ["sums", image, snap] => {
            let dev = tux3::open_path(Path::new(image), false).unwrap_or_else(|e| panic!("{image}: {e}"));
            let opts = OpenOptions {
                read_only: true,
                snapshot: Some(snap.as_bytes().to_vec()),
                ..OpenOptions::default()
            };
            let fs = Fs::open(dev, opts).unwrap_or_else(|e| panic!("{image}: {e}"));
            let mut pos = 0;
            let mut buf = vec![0u8; 1 << 20];
            loop {
                let batch = fs.readdir(ROOT_INO, pos, 256).unwrap();
                let Some(last) = batch.last() else { break };
                pos = last.next;
                for e in batch {
                    let size = fs.getattr(e.ino).unwrap().size;
                    let (mut crc, mut at) = (0u32, 0u64);
                    while at < size {
                        let n = fs.read_into(e.ino, at, &mut buf).unwrap();
                        assert!(n > 0);
                        crc = crc32c::crc32c_append(crc, &buf[..n]);
                        at += n as u64;
                    }
                    println!("{} {size} {crc:08x}", String::from_utf8_lossy(&e.name));
                }
            }
        }
        ["used", image] => {
            let fs = open(image, false);
            let s = fs.statfs().unwrap();
            let sharing = fs.sharing();
            println!(
                "used_bytes {} saved_bytes {}",
                (s.blocks - s.blocks_free) * s.block_size as u64,
                sharing.saved_blocks * s.block_size as u64
            );
        }
        _ => {
            eprintln!("usage: clone-files make IMAGE SIZE_MIB CLONES SNAP | clone-files used IMAGE");
            std::process::exit(2);
        }
    }
}
