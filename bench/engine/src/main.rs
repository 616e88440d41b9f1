//! tux3-bench-engine: the syncs load and a dbench loadfile replay driven
//! straight through the tux3 engine API (`tux3::Fs` on a device or image,
//! no FUSE, no kernel filesystem), or through system calls on a host
//! directory such as a tmpfs mount, for comparison.
//!
//! Usage:
//!   tux3-bench-engine syncs  (--engine DEV | --posix DIR) --tasks T --steps N
//!   tux3-bench-engine dbench (--engine DEV | --posix DIR) --loadfile FILE
//!                            --clients N --seconds S [--sync]
//!
//! With --engine, DEV (an image file or block device) is formatted first.
//! Prints one JSON object; with --engine it includes the engine's own device
//! counters (4 KiB blocks written, writes, flushes) for the timed region.

mod dbload;
mod target;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};
use std::time::Instant;
use target::{Engine, Posix, Target};
use tux3::device::file::FileDevice;
use tux3::device::{CounterSnapshot, Device};
use tux3::open_path;
use tux3::{FormatOptions, Fs, OpenOptions};

struct Args {
    load: String,
    engine: Option<PathBuf>,
    posix: Option<PathBuf>,
    tasks: usize,
    steps: usize,
    loadfile: PathBuf,
    clients: usize,
    seconds: f64,
    sync: bool,
}

fn usage() -> ! {
    eprintln!(
        "usage: tux3-bench-engine syncs (--engine DEV | --posix DIR) --tasks T --steps N\n       \
         tux3-bench-engine dbench (--engine DEV | --posix DIR) --loadfile FILE --clients N --seconds S [--sync]"
    );
    std::process::exit(2)
}

fn parse_args() -> Args {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let mut a = Args {
        load: argv.first().cloned().unwrap_or_else(|| usage()),
        engine: None,
        posix: None,
        tasks: 1,
        steps: 1,
        loadfile: PathBuf::from("/usr/share/dbench/client.txt"),
        clients: 1,
        seconds: 5.0,
        sync: false,
    };
    let mut i = 1;
    while i < argv.len() {
        let val = || argv.get(i + 1).cloned().unwrap_or_else(|| usage());
        let num = |s: String| s.parse::<f64>().unwrap_or_else(|_| usage());
        match argv[i].as_str() {
            "--engine" => a.engine = Some(val().into()),
            "--posix" => a.posix = Some(val().into()),
            "--tasks" => a.tasks = num(val()) as usize,
            "--steps" => a.steps = num(val()) as usize,
            "--loadfile" => a.loadfile = val().into(),
            "--clients" => a.clients = num(val()) as usize,
            "--seconds" => a.seconds = num(val()),
            "--sync" => {
                a.sync = true;
                i += 1;
                continue;
            }
            _ => usage(),
        }
        i += 2;
    }
    if a.engine.is_some() == a.posix.is_some() {
        usage();
    }
    a
}

fn die(msg: String) -> ! {
    eprintln!("tux3-bench-engine: {msg}");
    std::process::exit(1)
}

/// Format `path` and open the new volume.
fn open_engine(path: &Path) -> Arc<Fs> {
    let dev = FileDevice::open(path, 4096, true).unwrap_or_else(|e| die(format!("{}: {e}", path.display())));
    let dev: Arc<dyn Device> = Arc::new(dev);
    Fs::format(dev, &FormatOptions::default()).unwrap_or_else(|e| die(format!("format: {e}")));
    let dev = open_path(path, true).unwrap_or_else(|e| die(format!("open: {e}")));
    Arc::new(Fs::open(dev, OpenOptions::default()).unwrap_or_else(|e| die(format!("mount: {e}"))))
}

/// The syncs load: `tasks` threads each append 1 KiB to their own file and
/// fsync it, `steps` times, all starting together.
fn syncs(t: Arc<dyn Target>, tasks: usize, steps: usize) -> (f64, u64) {
    // Two barriers: every task has its file open (ready), the clock starts,
    // then all are released at once (go).
    let ready = Arc::new(Barrier::new(tasks + 1));
    let go = Arc::new(Barrier::new(tasks + 1));
    let errors = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut threads = Vec::new();
    for n in 0..tasks {
        let (t, ready, go, errors) = (t.clone(), ready.clone(), go.clone(), errors.clone());
        let th = std::thread::Builder::new().stack_size(256 << 10).spawn(move || {
            let text = [b'x'; 1024];
            let h = t.open(&format!("syncs{n}"), true, true, false);
            ready.wait();
            go.wait();
            let Ok(h) = h else {
                errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                return;
            };
            for i in 0..steps {
                if t.write(&h, (i * 1024) as u64, &text)
                    .and_then(|_| t.fsync(&h))
                    .is_err()
                {
                    errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    break;
                }
            }
            let _ = t.close(h);
        });
        threads.push(th.unwrap_or_else(|e| die(format!("spawn: {e}"))));
    }
    ready.wait();
    let t0 = Instant::now();
    go.wait();
    let mut panicked = 0;
    for th in threads {
        panicked += th.join().is_err() as u64;
    }
    (
        t0.elapsed().as_secs_f64(),
        errors.load(std::sync::atomic::Ordering::Relaxed) + panicked,
    )
}

fn counters_json(a: CounterSnapshot, b: CounterSnapshot) -> String {
    format!(
        ", \"dev_blocks\": {}, \"dev_writes\": {}, \"dev_flushes\": {}",
        b.blocks_written - a.blocks_written,
        b.writes - a.writes,
        b.flushes - a.flushes
    )
}

fn main() {
    let a = parse_args();
    let (fs, target): (Option<Arc<Fs>>, Arc<dyn Target>) = match (&a.engine, &a.posix) {
        (Some(dev), _) => {
            let fs = open_engine(dev);
            (Some(fs.clone()), Arc::new(Engine { fs }))
        }
        (_, Some(dir)) => (None, Arc::new(Posix { root: dir.clone() })),
        _ => usage(),
    };
    let kind = if fs.is_some() { "engine" } else { "posix" };
    let c0 = fs.as_ref().map(|f| f.counters()).unwrap_or_default();
    let s0 = fs.as_ref().map(|f| f.stats());
    let (out, errors) = match a.load.as_str() {
        "syncs" => {
            let (secs, errors) = syncs(target.clone(), a.tasks, a.steps);
            let text = format!(
                "{{\"load\": \"syncs\", \"target\": \"{kind}\", \"tasks\": {}, \"steps\": {}, \
                 \"seconds\": {secs:.6}, \"fsyncs\": {}, \"ops\": {}, \"errors\": {errors}",
                a.tasks,
                a.steps,
                a.tasks * a.steps,
                a.tasks * a.steps
            );
            (text, errors)
        }
        "dbench" => {
            let text = std::fs::read_to_string(&a.loadfile)
                .unwrap_or_else(|e| die(format!("{}: {e}", a.loadfile.display())));
            let lines = Arc::new(dbload::parse(&text));
            let t = dbload::replay(target.clone(), lines, a.clients, a.seconds, a.sync);
            let text = format!(
                "{{\"load\": \"dbench\", \"target\": \"{kind}\", \"clients\": {}, \"sync\": {}, \
                 \"seconds\": {:.6}, \"ops\": {}, \"mb_s\": {:.3}, \"fsyncs\": {}, \"unexpected\": {}, \"errors\": {}",
                a.clients,
                a.sync,
                t.seconds,
                t.ops,
                t.bytes as f64 / 1e6 / t.seconds,
                t.fsyncs,
                t.unexpected,
                t.failed_clients
            );
            (text, t.failed_clients)
        }
        _ => usage(),
    };
    let mut out = out;
    if let (Some(fs), Some(s0)) = (&fs, s0) {
        let s1 = fs.stats();
        out += &counters_json(c0, fs.counters());
        out += &format!(
            ", \"deltas\": {}, \"unifies\": {}",
            s1.deltas - s0.deltas,
            s1.unifies - s0.unifies
        );
    }
    println!("{out}}}");
    if errors > 0 {
        // Operations failed or a task panicked: say so in the exit status,
        // without trying to close a volume in an unknown state.
        std::process::exit(1);
    }
    drop(target);
    if let Some(fs) = fs {
        match Arc::try_unwrap(fs) {
            Ok(fs) => fs.close().unwrap_or_else(|e| die(format!("close: {e}"))),
            Err(_) => die("volume still in use at exit".into()),
        }
    }
}
