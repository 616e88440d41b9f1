//! The clone-delete load: what deleting a great many clones of one file
//! costs the volume's commits and another process's fsyncs.
//!
//!   1. one source file of `--src-kib` KiB (whole blocks), committed;
//!   2. `--files` files in `--dirs` directories, each created and made a
//!      clone of the source by `Fs::clone_range` (every block shared, the
//!      shared-extent table's count going up by one), committed;
//!   3. the idle baseline: a thread writes 4 KiB to a file of its own and
//!      fsyncs it, `--gap-ms` apart, for `--idle-s` seconds, timing each
//!      fsync, while the commit thread below runs with nothing to commit;
//!   4. the deletes: every clone unlinked and every directory removed, one
//!      thread, while the same fsync loop runs beside them;
//!   5. all along, a commit thread calls `Fs::sync` every `--commit-ms`
//!      (as a mount's commit thread ends a delta every `commit=` seconds)
//!      and times each: the latency of every periodic delta commit.
//!
//! With `CLONEDEL_TIMELINE` set, the deletes' commits and every fsync over
//! its value in ms (4 if it is not a number) go to stderr with their start (seconds since the load began), to
//! tell the fsyncs that waited for a commit from the others. The threads
//! are named (`committer`, `fsyncer`) for `perf`.
//!
//! Prints one JSON object a phase, then a summary: fsync p50/p99/max idle
//! and under deletes and their ratio, the commits' p50/p99/max and count,
//! the shared-extent table (`Fs::sharing`) before and after, the engine's
//! device counters, and the process's memory (VmRSS, VmHWM).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tux3::{Fs, Ino, ROOT_INO};

pub struct Opts {
    pub files: u64,
    pub dirs: u64,
    pub src_kib: u64,
    pub commit_ms: u64,
    pub gap_ms: u64,
    pub idle_s: f64,
}

fn die(msg: String) -> ! {
    eprintln!("tux3-bench-engine clonedel: {msg}");
    std::process::exit(1)
}

/// `q` (0..=1) of sorted `v`, in milliseconds (nearest rank).
fn pct(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let i = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
    v[i] * 1e3
}

fn summary(name: &str, mut v: Vec<f64>) -> String {
    v.sort_by(|a, b| a.total_cmp(b));
    format!(
        "\"{name}_n\": {}, \"{name}_p50_ms\": {:.3}, \"{name}_p99_ms\": {:.3}, \"{name}_max_ms\": {:.3}",
        v.len(),
        pct(&v, 0.5),
        pct(&v, 0.99),
        pct(&v, 1.0)
    )
}

/// VmRSS and VmHWM of this process, in MiB.
fn memory() -> (f64, f64) {
    let text = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |k: &str| {
        text.lines()
            .find(|l| l.starts_with(k))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|n| n.parse::<f64>().ok())
            .map_or(0.0, |kib| kib / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn sharing(fs: &Fs, when: &str) -> String {
    let s = fs.sharing();
    let (rss, hwm) = memory();
    let st = fs.statfs().unwrap_or_else(|e| die(format!("statfs: {e}")));
    format!(
        "\"{when}_shared_extents\": {}, \"{when}_shared_blocks\": {}, \"{when}_saved_blocks\": {}, \
         \"{when}_used_blocks\": {}, \"{when}_rss_mib\": {rss:.1}, \"{when}_hwm_mib\": {hwm:.1}",
        s.extents,
        s.blocks,
        s.saved_blocks,
        st.blocks - st.blocks_free
    )
}

/// A background loop until `stop`: each turn's latency goes to `out`.
struct Looper {
    stop: Arc<AtomicBool>,
    out: Arc<Mutex<Vec<f64>>>,
    /// (start since the load began, latency) of each turn, in seconds.
    times: Arc<Mutex<Vec<(f64, f64)>>>,
    th: JoinHandle<()>,
}

impl Looper {
    fn start(name: &str, f: impl FnMut() -> Option<f64> + Send + 'static) -> Looper {
        let stop = Arc::new(AtomicBool::new(false));
        let out = Arc::new(Mutex::new(Vec::new()));
        let times = Arc::new(Mutex::new(Vec::new()));
        let (s, o, tm) = (stop.clone(), out.clone(), times.clone());
        let mut f = f;
        let spawned = std::thread::Builder::new().name(name.into()).spawn(move || {
            while !s.load(Ordering::Relaxed) {
                if let Some(t) = f() {
                    let end = epoch().elapsed().as_secs_f64();
                    o.lock().unwrap().push(t);
                    tm.lock().unwrap().push((end - t, t));
                }
            }
        });
        let th = spawned.unwrap_or_else(|e| die(format!("no thread: {e}")));
        Looper { stop, out, times, th }
    }
    /// Stop it and take what it measured since the last `take`.
    fn finish(self) -> Vec<f64> {
        self.stop.store(true, Ordering::Relaxed);
        self.th
            .join()
            .unwrap_or_else(|_| die("a measuring thread panicked".into()));
        std::mem::take(&mut *self.out.lock().unwrap())
    }
    fn timeline(&self) -> Vec<(f64, f64)> {
        std::mem::take(&mut *self.times.lock().unwrap())
    }
    fn take(&self) -> Vec<f64> {
        std::mem::take(&mut *self.out.lock().unwrap())
    }
}

/// When the load began: the timelines' zero.
fn epoch() -> Instant {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// The commit thread: `Fs::sync` every `every`, each timed.
fn committer(fs: Arc<Fs>, every: Duration) -> Looper {
    let mut next = Instant::now() + every;
    Looper::start("committer", move || {
        let now = Instant::now();
        if now < next {
            std::thread::sleep((next - now).min(Duration::from_millis(50)));
            return None;
        }
        next += every;
        let t0 = Instant::now();
        fs.sync().unwrap_or_else(|e| die(format!("sync: {e}")));
        Some(t0.elapsed().as_secs_f64())
    })
}

/// The other process: 4 KiB written to its own file, then fsync, timed.
fn fsyncer(fs: Arc<Fs>, ino: Ino, gap: Duration) -> Looper {
    let block = [0x5au8; 4096];
    let mut i = 0u64;
    Looper::start("fsyncer", move || {
        std::thread::sleep(gap);
        fs.write(ino, (i % 256) * 4096, &block)
            .unwrap_or_else(|e| die(format!("fsyncer write: {e}")));
        i += 1;
        let t0 = Instant::now();
        fs.fsync(ino, false)
            .unwrap_or_else(|e| die(format!("fsync: {e}")));
        Some(t0.elapsed().as_secs_f64())
    })
}

fn counters(fs: &Fs) -> (u64, u64, u64) {
    let c = fs.counters();
    (c.blocks_written, c.flushes, fs.stats().deltas)
}

fn since(fs: &Fs, a: (u64, u64, u64)) -> String {
    let b = counters(fs);
    format!(
        "\"dev_blocks\": {}, \"dev_flushes\": {}, \"deltas\": {}",
        b.0 - a.0,
        b.1 - a.1,
        b.2 - a.2
    )
}

fn name(i: u64) -> Vec<u8> {
    format!("d{i}").into_bytes()
}

/// Run the load on `fs`; returns the summary line.
pub fn run(fs: Arc<Fs>, o: &Opts) -> String {
    epoch();
    let bs = 4096u64;
    let src_len = o.src_kib * 1024 / bs * bs;
    let per_dir = o.files.div_ceil(o.dirs.max(1));
    let src = fs
        .create(ROOT_INO, b"source", 0o644, 0, 0)
        .unwrap_or_else(|e| die(format!("create source: {e}")))
        .ino;
    let data: Vec<u8> = (0..src_len).map(|i| (i * 7 + i / 4096) as u8).collect();
    fs.write(src, 0, &data)
        .unwrap_or_else(|e| die(format!("write source: {e}")));
    fs.sync().unwrap_or_else(|e| die(format!("sync: {e}")));
    let other = fs
        .create(ROOT_INO, b"other", 0o644, 0, 0)
        .unwrap_or_else(|e| die(format!("create other: {e}")))
        .ino;
    fs.sync().unwrap_or_else(|e| die(format!("sync: {e}")));
    println!("{{\"phase\": \"start\", {}}}", sharing(&fs, "start"));
    let every = Duration::from_millis(o.commit_ms);
    let gap = Duration::from_millis(o.gap_ms);

    // Clone.
    let commits = committer(fs.clone(), every);
    let (m, t0) = (counters(&fs), Instant::now());
    let mut dirs = Vec::new();
    let mut made = 0;
    for d in 0..o.dirs {
        let dir = fs
            .mkdir(ROOT_INO, &name(d), 0o755, 0, 0)
            .unwrap_or_else(|e| die(format!("mkdir: {e}")))
            .ino;
        dirs.push(dir);
        for f in 0..per_dir.min(o.files - made) {
            let ino = fs
                .create(dir, format!("f{f}").as_bytes(), 0o644, 0, 0)
                .unwrap_or_else(|e| die(format!("create: {e}")))
                .ino;
            let n = fs
                .clone_range(src, 0, ino, 0, src_len)
                .unwrap_or_else(|e| die(format!("clone_range: {e}")));
            assert_eq!(n, src_len);
            made += 1;
        }
    }
    let clone_s = t0.elapsed().as_secs_f64();
    let clone_commits = commits.finish();
    let t1 = Instant::now();
    fs.sync().unwrap_or_else(|e| die(format!("sync: {e}")));
    println!(
        "{{\"phase\": \"clone\", \"files\": {made}, \"dirs\": {}, \"src_bytes\": {src_len}, \"seconds\": {clone_s:.3}, \
         \"files_per_s\": {:.0}, \"sync_s\": {:.3}, {}, {}, {}}}",
        o.dirs,
        made as f64 / clone_s,
        t1.elapsed().as_secs_f64(),
        since(&fs, m),
        summary("commit", clone_commits),
        sharing(&fs, "after")
    );
    let before = sharing(&fs, "before");

    // Idle baseline: the fsync loop and the commit thread, nothing else.
    let commits = committer(fs.clone(), every);
    let m = counters(&fs);
    let syncs = fsyncer(fs.clone(), other, gap);
    std::thread::sleep(Duration::from_secs_f64(o.idle_s));
    let idle = syncs.finish();
    let idle_commits = commits.finish();
    println!(
        "{{\"phase\": \"idle\", \"seconds\": {:.1}, {}, {}, {}}}",
        o.idle_s,
        since(&fs, m),
        summary("fsync", idle.clone()),
        summary("commit", idle_commits)
    );

    // Deletes, with the fsync loop beside them.
    let commits = committer(fs.clone(), every);
    let syncs = fsyncer(fs.clone(), other, gap);
    let (m, t0) = (counters(&fs), Instant::now());
    let mut gone = 0;
    for (d, &dir) in dirs.iter().enumerate() {
        for f in 0..per_dir.min(made - gone) {
            fs.unlink(dir, format!("f{f}").as_bytes())
                .unwrap_or_else(|e| die(format!("unlink: {e}")));
            gone += 1;
        }
        fs.rmdir(ROOT_INO, &name(d as u64))
            .unwrap_or_else(|e| die(format!("rmdir: {e}")));
        if d % 100 == 99 {
            let (rss, _) = memory();
            eprintln!(
                "deleted {gone} in {:.1} s, rss {rss:.0} MiB",
                t0.elapsed().as_secs_f64()
            );
        }
    }
    let del_s = t0.elapsed().as_secs_f64();
    if let Some(over) = std::env::var_os("CLONEDEL_TIMELINE") {
        // The value, if a number, is the threshold in ms (default 4).
        let over = over.to_str().and_then(|s| s.parse::<f64>().ok()).unwrap_or(4.0) / 1e3;
        let mut ev: Vec<(f64, f64, &str)> = Vec::new();
        ev.extend(syncs.timeline().into_iter().map(|(a, b)| (a, b, "fsync")));
        ev.extend(commits.timeline().into_iter().map(|(a, b)| (a, b, "commit")));
        ev.sort_by(|x, y| x.0.total_cmp(&y.0));
        for (a, b, what) in ev {
            if what == "commit" || b > over {
                eprintln!("{what} at {:.4} s for {:.2} ms", a, b * 1e3);
            }
        }
    }
    let busy = syncs.take();
    let mut del_commits = commits.take();
    // The last periodic commit of the deletes, timed as the others.
    let t1 = Instant::now();
    fs.sync().unwrap_or_else(|e| die(format!("sync: {e}")));
    del_commits.push(t1.elapsed().as_secs_f64());
    let final_s = t1.elapsed().as_secs_f64();
    let _ = syncs.finish();
    let _ = commits.finish();
    println!(
        "{{\"phase\": \"delete\", \"files\": {gone}, \"seconds\": {del_s:.3}, \"files_per_s\": {:.0}, \
         \"final_sync_s\": {final_s:.3}, \"commits_ms\": [{}], {}, {}, {}, {}}}",
        gone as f64 / del_s,
        del_commits
            .iter()
            .map(|t| format!("{:.1}", t * 1e3))
            .collect::<Vec<_>>()
            .join(", "),
        since(&fs, m),
        summary("fsync", busy.clone()),
        summary("commit", del_commits.clone()),
        sharing(&fs, "after")
    );
    let mut i = idle;
    let mut b = busy;
    i.sort_by(|x, y| x.total_cmp(y));
    b.sort_by(|x, y| x.total_cmp(y));
    del_commits.sort_by(|x, y| x.total_cmp(y));
    format!(
        "{{\"phase\": \"summary\", \"files\": {made}, \"commit_ms\": {}, \"gap_ms\": {}, \
         \"fsync_idle_p50_ms\": {:.3}, \"fsync_idle_p99_ms\": {:.3}, \"fsync_delete_p50_ms\": {:.3}, \
         \"fsync_delete_p99_ms\": {:.3}, \"p99_ratio\": {:.2}, \"delete_commit_p99_ms\": {:.3}, \
         \"delete_commit_max_ms\": {:.3}, {before}",
        o.commit_ms,
        o.gap_ms,
        pct(&i, 0.5),
        pct(&i, 0.99),
        pct(&b, 0.5),
        pct(&b, 0.99),
        pct(&b, 0.99) / pct(&i, 0.99).max(1e-9),
        pct(&del_commits, 0.99),
        pct(&del_commits, 1.0)
    )
}
