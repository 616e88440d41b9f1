//! What moving an access time adds to a small read, in the engine alone:
//! N files of 4 bytes on an in-memory volume, each read with `Fs::read_into`
//! alone, then `Fs::accessed` after it (a second visit to the inode), and
//! with `Fs::read_into_accessed` (one visit). Every round first gives all
//! access times an old value and syncs, so that each read moves one as the
//! first access of its inode in the delta; the three ways take turns.
//! Prints the median and least thread CPU time per read of each
//! (docs/BENCHMARKS.md, "What access times cost the tree read").
//!
//! `cargo run --release -p tux3 --example atime_cost [N] [ROUNDS]`
//! (3000, 60). Calls only the public API.
use std::sync::Arc;
use tux3::device::MemDevice;
use tux3::{AtimeRule, FormatOptions, Fs, OpenOptions, SetAttr, Timespec, ROOT_INO};

/// This thread's CPU time in ns: descheduling on a busy machine is left out.
fn cpu_ns() -> u128 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out pointer for the call.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    t.tv_sec as u128 * 1_000_000_000 + t.tv_nsec as u128
}

fn main() {
    let mut args = std::env::args().skip(1).map(|s| s.parse::<usize>().ok());
    let n = args.next().flatten().unwrap_or(3000);
    let rounds = args.next().flatten().unwrap_or(60);
    let mem = Arc::new(MemDevice::new(4096, 65536));
    Fs::format(mem.clone(), &FormatOptions::default()).unwrap();
    let fs = Fs::open(mem.clone(), OpenOptions::default()).unwrap();
    let inos: Vec<_> = (0..n)
        .map(|k| {
            let ino = fs
                .create(ROOT_INO, format!("f{k}").as_bytes(), 0o644, 0, 0)
                .unwrap()
                .ino;
            fs.write(ino, 0, b"data").unwrap();
            ino
        })
        .collect();
    fs.sync().unwrap();
    let names = [
        "read_into alone",
        "read_into, then accessed",
        "read_into_accessed",
    ];
    let mut per: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    let mut buf = vec![0u8; 4096];
    let old = SetAttr {
        atime: Some(Timespec { sec: 1000, nsec: 0 }),
        ..Default::default()
    };
    for round in 0..rounds {
        let way = (round + round / names.len()) % names.len();
        for &i in &inos {
            fs.setattr(i, &old).unwrap();
        }
        fs.sync().unwrap();
        let t0 = cpu_ns();
        for &i in &inos {
            match way {
                0 => drop(fs.read_into(i, 0, &mut buf).unwrap()),
                1 => {
                    fs.read_into(i, 0, &mut buf).unwrap();
                    fs.accessed(i, AtimeRule::Relative).unwrap();
                }
                _ => drop(
                    fs.read_into_accessed(i, 0, &mut buf, AtimeRule::Relative)
                        .unwrap(),
                ),
            }
        }
        per[way].push((cpu_ns() - t0) as f64 / n as f64);
    }
    for (name, mut xs) in names.iter().zip(per) {
        xs.sort_by(f64::total_cmp);
        println!(
            "{name:26} median {:6.0} ns, least {:6.0} ns per read ({} rounds)",
            xs[xs.len() / 2],
            xs[0],
            xs.len()
        );
    }
    fs.close().unwrap();
}
