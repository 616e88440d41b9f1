//! What data checksums cost the engine's CPU, without FUSE or a device:
//! on an in-memory volume made with and without checksums (rounds
//! interleaved), a file of SIZE MiB written in 1 MiB calls and synced,
//! then WRITES random 4 KiB overwrites of it, synced every 1,024 (as a
//! mount's commits go). Prints the process CPU time (every thread: the
//! writer, the backend's commits) per MiB written sequentially and per
//! random write, the median of ROUNDS of each, their ratio, and the
//! blocks each phase wrote (docs/BENCHMARKS.md, data checksums).
//!
//! `cargo run --release -p tux3 --example sums_cost [SIZE] [WRITES] [ROUNDS]`
//! (256, 32768, 5); a fourth argument, 1 or 0, runs only the volume with
//! or without checksums. Calls only the public API.
use std::sync::Arc;
use tux3::device::{Device, MemDevice};
use tux3::{FormatOptions, Fs, OpenOptions, ROOT_INO};

/// The process's CPU time in ns (every thread).
fn cpu_ns() -> u128 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out pointer for the call.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) };
    t.tv_sec as u128 * 1_000_000_000 + t.tv_nsec as u128
}

/// (ns per MiB sequential, ns per random write, blocks written by each).
fn round(sums: bool, mib: u64, writes: u64, seed: u64) -> (f64, f64, u64, u64) {
    let blocks = mib * 256;
    let mem = Arc::new(MemDevice::new(4096, blocks * 3 + 65536));
    let opts = FormatOptions {
        data_sums: sums,
        ..FormatOptions::default()
    };
    Fs::format(mem.clone(), &opts).unwrap();
    let fs = Fs::open(mem.clone(), OpenOptions::default()).unwrap();
    let ino = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap().ino;
    let chunk: Vec<u8> = (0..1 << 20).map(|i| (i * 7 + 3) as u8).collect();
    let w0 = mem.counters().blocks_written;
    let t0 = cpu_ns();
    for k in 0..mib {
        fs.write(ino, k << 20, &chunk).unwrap();
    }
    fs.sync().unwrap();
    let t1 = cpu_ns();
    let w1 = mem.counters().blocks_written;
    let mut x = seed | 1;
    let block = [0x5au8; 4096];
    for k in 0..writes {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        fs.write(ino, (x % blocks) * 4096, &block).unwrap();
        if k % 1024 == 1023 {
            fs.sync().unwrap();
        }
    }
    fs.sync().unwrap();
    let t2 = cpu_ns();
    let w2 = mem.counters().blocks_written;
    fs.close().unwrap();
    (
        (t1 - t0) as f64 / mib as f64,
        (t2 - t1) as f64 / writes as f64,
        w1 - w0,
        w2 - w1,
    )
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1).map(|s| s.parse::<u64>().ok());
    let mib = args.next().flatten().unwrap_or(256);
    let writes = args.next().flatten().unwrap_or(32768);
    let rounds = args.next().flatten().unwrap_or(5);
    // A fourth argument, 1 or 0, runs only the volume with or without
    // checksums (for a profile of one).
    let only = args.next().flatten();
    let mut seq = [Vec::new(), Vec::new()];
    let mut rnd = [Vec::new(), Vec::new()];
    let mut written = [(0, 0), (0, 0)];
    for r in 0..rounds {
        let order = if r % 2 == 0 { [true, false] } else { [false, true] };
        for sums in order {
            if only.is_some_and(|o| (o == 1) != sums) {
                continue;
            }
            let (s, w, ws, wr) = round(sums, mib, writes, 0x9e37_79b9 + r);
            let i = usize::from(!sums);
            println!(
                "round {r} {}: sequential {:.0} us/MiB, random {:.2} us/write, blocks written {ws} / {wr}",
                if sums { "sums" } else { "none" },
                s / 1e3,
                w / 1e3
            );
            seq[i].push(s);
            rnd[i].push(w);
            written[i] = (ws, wr);
        }
    }
    if only.is_some() {
        return;
    }
    let (s0, s1) = (median(&mut seq[0]), median(&mut seq[1]));
    let (r0, r1) = (median(&mut rnd[0]), median(&mut rnd[1]));
    println!(
        "medians: sequential {:.0} / {:.0} us per MiB (sums / none, {:.3}); random {:.2} / {:.2} us per write ({:.3}); blocks written {:?} / {:?}",
        s0 / 1e3,
        s1 / 1e3,
        s0 / s1,
        r0 / 1e3,
        r1 / 1e3,
        r0 / r1,
        written[0],
        written[1]
    );
}
