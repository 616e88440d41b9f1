//! tux3-bench-engine: the syncs load, a dbench loadfile replay and a
//! metadata load driven straight through the tux3 engine API (`tux3::Fs` on
//! a device or image, no FUSE, no kernel filesystem), or through system
//! calls on a host directory such as a tmpfs mount, for comparison.
//!
//! Usage:
//!   tux3-bench-engine syncs  (--engine DEV | --posix DIR) --tasks T --steps N
//!   tux3-bench-engine dbench (--engine DEV | --posix DIR) --loadfile FILE
//!                            --clients N --seconds S [--sync] [--skip-flush]
//!   tux3-bench-engine meta   (--engine DEV | --posix DIR) [--flat N] [--tree N]
//!                            [--threads T] [--cap S]
//!   tux3-bench-engine clonedel --engine DEV [--files N] [--dirs D]
//!                            [--src-kib K] [--commit-ms MS] [--gap-ms MS]
//!                            [--idle-s S]
//!   any load with --engine also takes [--volume-commit-ms MS]: the volume
//!   gets a commit thread of its own, as `tux3 mount`'s `commit=` does.
//!
//! With --engine, DEV (an image file or block device) is formatted first.
//! syncs and dbench print one JSON object; meta prints one per phase (flat
//! create, stat, unlink; tree create, stat, delete; `--flat 0` or `--tree 0`
//! leaves that set out). With --engine each includes the engine's own device
//! counters (4 KiB blocks written, writes, flushes) for the timed region;
//! a meta phase is followed by an untimed `Fs::sync`, whose time and the
//! counters including it are reported as `sync_seconds` and `dev_*_all`.
//!
//! clonedel (engine only; see clonedel.rs) prints one JSON object a phase
//! (clone, idle, delete) and a summary.
//!
//! `--skip-flush` drops the loadfile's Flush lines (dbench's client2.txt
//! has none), so a replay makes nothing durable on its own.

mod clonedel;
mod dbload;
mod meta;
mod target;

/// mimalloc rather than glibc malloc, as the `tux3` command uses: under
/// many threads glibc's arenas grow and trim over and over, and the page
/// faults of that cost a fifth or more of the engine's time in dbench.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// As `tux3_cli::tune_allocator` does for the `tux3` command: freed memory
/// goes back to the system after 60 s unused, not sooner (option 15 is
/// mimalloc's `purge_delay`), so page buffers are not faulted in and zeroed
/// again and again; and no huge pages (option 43, `allow_thp`), whose
/// first touch zeroes 2 MiB at once under whatever lock the toucher holds.
fn tune_allocator() {
    // SAFETY: mimalloc's options may be set at any time, from any thread.
    unsafe {
        libmimalloc_sys::mi_option_set(15, 60_000);
        libmimalloc_sys::mi_option_set(43, 0);
    }
}

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
    skip_flush: bool,
    flat: u64,
    tree: u64,
    threads: usize,
    cap: f64,
    /// `--volume-commit-ms`: the volume's own commit thread (as `tux3
    /// mount`'s `commit=`), which also commits early under dirty-data pressure.
    volume_commit_ms: Option<u64>,
    clonedel: clonedel::Opts,
}

fn usage() -> ! {
    eprintln!(
        "usage: tux3-bench-engine syncs (--engine DEV | --posix DIR) --tasks T --steps N\n       \
         tux3-bench-engine dbench (--engine DEV | --posix DIR) --loadfile FILE --clients N --seconds S [--sync] [--skip-flush]\n       \
         tux3-bench-engine meta (--engine DEV | --posix DIR) [--flat N] [--tree N] [--threads T] [--cap S]\n       \
         tux3-bench-engine clonedel --engine DEV [--files N] [--dirs D] [--src-kib K] [--commit-ms MS] [--gap-ms MS] [--idle-s S]\n       \
         (any load with --engine: [--volume-commit-ms MS])"
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
        skip_flush: false,
        flat: 1_000_000,
        tree: 100_000,
        threads: 1,
        cap: 0.0,
        volume_commit_ms: None,
        clonedel: clonedel::Opts {
            files: 1_000_000,
            dirs: 1_000,
            src_kib: 64,
            commit_ms: 1_000,
            gap_ms: 10,
            idle_s: 20.0,
        },
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
            "--flat" => a.flat = num(val()) as u64,
            "--tree" => a.tree = num(val()) as u64,
            "--threads" => a.threads = num(val()) as usize,
            "--cap" => a.cap = num(val()),
            "--files" => a.clonedel.files = num(val()) as u64,
            "--dirs" => a.clonedel.dirs = num(val()) as u64,
            "--src-kib" => a.clonedel.src_kib = num(val()) as u64,
            "--commit-ms" => a.clonedel.commit_ms = num(val()) as u64,
            "--gap-ms" => a.clonedel.gap_ms = num(val()) as u64,
            "--idle-s" => a.clonedel.idle_s = num(val()),
            "--volume-commit-ms" => a.volume_commit_ms = Some(num(val()) as u64),
            "--sync" | "--skip-flush" => {
                match argv[i].as_str() {
                    "--sync" => a.sync = true,
                    _ => a.skip_flush = true,
                }
                i += 1;
                continue;
            }
            _ => usage(),
        }
        i += 2;
    }
    if a.engine.is_some() == a.posix.is_some() || a.threads == 0 {
        usage();
    }
    a
}

fn die(msg: String) -> ! {
    eprintln!("tux3-bench-engine: {msg}");
    std::process::exit(1)
}

/// Format `path` and open the new volume.
fn open_engine(path: &Path, volume_commit_ms: Option<u64>) -> Arc<Fs> {
    // Measured as the `tux3` command runs it, or not at all.
    if !tux3::device::file::BATCHED_WRITES {
        die("the engine is built without its `uring` feature (batched device writes), unlike the tux3 command".into());
    }
    let dev = FileDevice::open(path, 4096, true).unwrap_or_else(|e| die(format!("{}: {e}", path.display())));
    let dev: Arc<dyn Device> = Arc::new(dev);
    Fs::format(dev, &FormatOptions::default()).unwrap_or_else(|e| die(format!("format: {e}")));
    let dev = open_path(path, true).unwrap_or_else(|e| die(format!("open: {e}")));
    let opts = OpenOptions {
        commit_interval: volume_commit_ms.map(std::time::Duration::from_millis),
        ..OpenOptions::default()
    };
    Arc::new(Fs::open(dev, opts).unwrap_or_else(|e| die(format!("mount: {e}"))))
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

/// The engine's counters around a timed region (nothing with --posix).
struct Probe {
    fs: Option<Arc<Fs>>,
}

/// A reading of the engine's counters.
#[derive(Clone, Copy)]
struct Mark {
    dev: CounterSnapshot,
    deltas: u64,
    unifies: u64,
}

impl Probe {
    fn mark(&self) -> Option<Mark> {
        self.fs.as_ref().map(|fs| {
            let s = fs.stats();
            Mark {
                dev: fs.counters(),
                deltas: s.deltas,
                unifies: s.unifies,
            }
        })
    }

    /// The counters since `m`, as JSON members to append to an object.
    fn since(&self, m: Option<Mark>) -> String {
        let (Some(a), Some(b)) = (m, self.mark()) else {
            return String::new();
        };
        format!(
            ", \"dev_blocks\": {}, \"dev_writes\": {}, \"dev_flushes\": {}, \"deltas\": {}, \"unifies\": {}",
            b.dev.blocks_written - a.dev.blocks_written,
            b.dev.writes - a.dev.writes,
            b.dev.flushes - a.dev.flushes,
            b.deltas - a.deltas,
            b.unifies - a.unifies
        )
    }

    /// `Fs::sync` (untimed by the caller's clock), then the device counters
    /// since `m` including it: what the region left to write.
    fn sync_since(&self, m: Option<Mark>) -> String {
        let (Some(fs), Some(a)) = (&self.fs, m) else {
            return String::new();
        };
        let t0 = Instant::now();
        fs.sync().unwrap_or_else(|e| die(format!("sync: {e}")));
        let secs = t0.elapsed().as_secs_f64();
        let b = fs.counters();
        format!(
            ", \"sync_seconds\": {secs:.6}, \"dev_blocks_all\": {}, \"dev_writes_all\": {}, \"dev_flushes_all\": {}",
            b.blocks_written - a.dev.blocks_written,
            b.writes - a.dev.writes,
            b.flushes - a.dev.flushes
        )
    }
}

/// The meta load: each set (flat, tree) of phases in turn, one JSON line a
/// phase. Returns the number of failed operations.
fn meta_load<O: meta::Ops>(o: &O, a: &Args, probe: &Probe, kind: &str) -> u64 {
    let mut errors = 0;
    for (set, n) in [(meta::Kind::Flat, a.flat), (meta::Kind::Tree, a.tree)] {
        if n == 0 {
            continue;
        }
        meta::prepare(o, set, a.threads).unwrap_or_else(|e| die(format!("{}: {e}", set.name())));
        let mut counts = meta::split(n, a.threads);
        for phase in set.phases() {
            let m = probe.mark();
            let p = meta::phase(o, set, phase, &mut counts, a.cap);
            let dev = probe.since(m);
            let all = probe.sync_since(m);
            if let Some(e) = &p.first_error {
                eprintln!(
                    "tux3-bench-engine: meta {} {phase}: {} errors, the first: {e}",
                    set.name(),
                    p.errors
                );
            }
            println!(
                "{{\"load\": \"meta\", \"target\": \"{kind}\", \"kind\": \"{}\", \"phase\": \"{phase}\", \
                 \"n\": {n}, \"threads\": {}, \"cap\": {}, \"ops\": {}, \"seconds\": {:.6}, \"ops_per_s\": {:.1}, \
                 \"errors\": {}{dev}{all}}}",
                set.name(),
                a.threads,
                a.cap,
                p.ops,
                p.seconds,
                p.ops as f64 / p.seconds.max(1e-9),
                p.errors
            );
            errors += p.errors;
        }
        if errors == 0 {
            meta::finish(o, set, a.threads).unwrap_or_else(|e| die(format!("{}: {e}", set.name())));
        }
    }
    errors
}

fn main() {
    tune_allocator();
    let a = parse_args();
    let (fs, target): (Option<Arc<Fs>>, Arc<dyn Target>) = match (&a.engine, &a.posix) {
        (Some(dev), _) => {
            let fs = open_engine(dev, a.volume_commit_ms);
            (Some(fs.clone()), Arc::new(Engine { fs }))
        }
        (_, Some(dir)) => (None, Arc::new(Posix { root: dir.clone() })),
        _ => usage(),
    };
    let kind = if fs.is_some() { "engine" } else { "posix" };
    let probe = Probe { fs: fs.clone() };
    let m0 = probe.mark();
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
            (Some(text), errors)
        }
        "dbench" => {
            let text = std::fs::read_to_string(&a.loadfile)
                .unwrap_or_else(|e| die(format!("{}: {e}", a.loadfile.display())));
            let mut lines = dbload::parse(&text);
            if a.skip_flush {
                lines.retain(|l| !matches!(l.op, dbload::Op::Flush(_)));
            }
            let t = dbload::replay(target.clone(), Arc::new(lines), a.clients, a.seconds, a.sync);
            let text = format!(
                "{{\"load\": \"dbench\", \"target\": \"{kind}\", \"clients\": {}, \"sync\": {}, \
                 \"skip_flush\": {}, \"seconds\": {:.6}, \"ops\": {}, \"mb_s\": {:.3}, \"fsyncs\": {}, \
                 \"unexpected\": {}, \"errors\": {}",
                a.clients,
                a.sync,
                a.skip_flush,
                t.seconds,
                t.ops,
                t.bytes as f64 / 1e6 / t.seconds,
                t.fsyncs,
                t.unexpected,
                t.failed_clients
            );
            (Some(text), t.failed_clients)
        }
        "meta" => {
            let errors = match &fs {
                Some(fs) => meta_load(&meta::EngineOps { fs: fs.clone() }, &a, &probe, kind),
                None => {
                    let root = a.posix.clone().unwrap_or_else(|| usage());
                    meta_load(&meta::PosixOps { root }, &a, &probe, kind)
                }
            };
            (None, errors)
        }
        "clonedel" => {
            let Some(fs) = &fs else { usage() };
            (Some(clonedel::run(fs.clone(), &a.clonedel)), 0)
        }
        _ => usage(),
    };
    if let Some(out) = out {
        println!("{out}{}}}", probe.since(m0));
    }
    drop(probe);
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
