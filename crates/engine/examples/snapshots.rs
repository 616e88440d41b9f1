//! Times snapshots through `tux3::Fs` on an image file (a real flush per
//! commit): creation on an empty volume and on one holding FILES files,
//! creation with SNAPS snapshots already present, deletion (the call's
//! return, and the reclaim after it), `snapshot_list`, and opening the
//! volume with SNAPS snapshots. Prints each as median and p99 in ms.
//!
//!   cargo run --release -p tux3 --example snapshots -- [FILES] [SNAPS] [IMAGE]
//!
//! FILES defaults to 100000, SNAPS to 10000; IMAGE (default: a file in the
//! temporary directory, removed at the end) is created or truncated to
//! 8 GiB, sparse.
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tux3::device::file::FileDevice;
use tux3::device::Device;
use tux3::{open_path, FormatOptions, Fs, OpenOptions, ROOT_INO};

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// "median X ms, p99 Y ms" of `samples`.
fn summary(mut samples: Vec<Duration>) -> String {
    samples.sort_unstable();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    format!(
        "median {:.2} ms, p99 {:.2} ms ({} samples)",
        ms(at(0.5)),
        ms(at(0.99)),
        samples.len()
    )
}

fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let t = Instant::now();
    let r = f();
    (r, t.elapsed())
}

fn creates(fs: &Fs, tag: &str, n: usize) -> Vec<Duration> {
    (0..n)
        .map(|i| {
            let name = format!("{tag}-{i}");
            timed(|| fs.snapshot_create(name.as_bytes()).expect("snapshot create")).1
        })
        .collect()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let files: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(100_000);
    let snaps: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(10_000);
    let (path, remove) = match args.get(3) {
        Some(p) => (PathBuf::from(p), false),
        None => (
            std::env::temp_dir().join(format!("tux3-snapshots-{}.img", std::process::id())),
            true,
        ),
    };
    let f = std::fs::File::create(&path).expect("create image");
    f.set_len(8 << 30).expect("size image");
    drop(f);
    let dev: Arc<dyn Device> = Arc::new(FileDevice::open(&path, 4096, true).expect("open image"));
    Fs::format(dev, &FormatOptions::default()).expect("mkfs");
    let open = || Fs::open(open_path(&path, true).expect("open"), OpenOptions::default()).expect("mount");
    let fs = open();

    println!("create, empty volume: {}", summary(creates(&fs, "empty", 50)));
    for i in 0..files {
        let a = fs
            .create(ROOT_INO, format!("f{i}").as_bytes(), 0o644, 0, 0)
            .expect("create file");
        fs.write(a.ino, 0, &i.to_le_bytes()).expect("write");
    }
    fs.sync().expect("sync");
    println!("create, {files} files: {}", summary(creates(&fs, "full", 50)));

    // Each snapshot sees a few changed files, so each holds something alone.
    let mut bulk = Vec::with_capacity(snaps);
    for s in 0..snaps {
        let a = fs
            .lookup(ROOT_INO, format!("f{}", s % files.max(1)).as_bytes())
            .expect("lookup");
        fs.write(a.ino, 0, &s.to_le_bytes()).expect("write");
        bulk.push(
            timed(|| {
                fs.snapshot_create(format!("bulk-{s}").as_bytes())
                    .expect("create")
            })
            .1,
        );
    }
    println!("create, the {snaps} in between: {}", summary(bulk));
    println!(
        "create, {files} files and {snaps} snapshots: {}",
        summary(creates(&fs, "many", 50))
    );
    let (list, t) = timed(|| fs.snapshot_list().expect("list"));
    println!("list of {} snapshots: {:.1} ms", list.len(), ms(t));
    fs.close().expect("close");
    let (fs, t) = timed(open);
    println!("open with {} snapshots: {:.1} ms", list.len(), ms(t));

    let deletes: Vec<Duration> = (0..50)
        .map(|s| {
            timed(|| {
                fs.snapshot_delete(format!("bulk-{s}").as_bytes())
                    .expect("delete")
            })
            .1
        })
        .collect();
    println!("delete (the call): {}", summary(deletes));
    let (_, t) = timed(|| fs.snapshot_reclaim(&mut |_| {}).expect("reclaim"));
    println!("reclaim of those 50: {:.1} ms", ms(t));
    fs.close().expect("close");
    if remove {
        let _ = std::fs::remove_file(&path);
    }
}
