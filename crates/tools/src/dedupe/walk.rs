//! Dedupe, walking: the regular files under the paths given, each inode
//! once, with where their full blocks lie. Directories are read by
//! [`Options::threads`](super::Options::threads) threads at once: on a
//! cold volume every directory leaf and inode-table leaf is a small read
//! that waits on the device, and a walk of one thread would wait for
//! each in turn (thousands of files: seconds, more than reading their data
//! in device order takes).
//!
//! Calls the API (`Fs`: lookup, getattr, readdir, data_runs).

use super::File;
use parking_lot::{Condvar, Mutex};
use std::collections::HashSet;
use tux3::error::{Error, Result};
use tux3::types::{FileType, Ino};
use tux3::Fs;

/// Entries read per readdir call.
const READDIR_BATCH: usize = 512;

/// What the walkers share: inodes to visit (with their paths), how many
/// walkers are visiting one now, the files found, and the first error.
#[derive(Default)]
struct Shared {
    todo: Vec<(Ino, String)>,
    busy: usize,
    found: Vec<File>,
    failed: Option<Error>,
}

/// The regular files under `paths` (relative to `base`; none: `base`
/// itself), each inode once (under its first path in path order), sorted
/// by path, with their data runs.
pub(super) fn walk(fs: &Fs, base: Ino, paths: &[Vec<u8>], bs: u64, threads: usize) -> Result<Vec<File>> {
    let whole = [Vec::new()];
    let paths = if paths.is_empty() { &whole[..] } else { paths };
    let mut todo = Vec::new();
    for p in paths {
        let mut ino = base;
        for c in p.split(|&b| b == b'/').filter(|c| !c.is_empty() && *c != b".") {
            ino = fs.lookup(ino, c)?.ino;
        }
        todo.push((ino, format!("/{}", String::from_utf8_lossy(p).trim_matches('/'))));
    }
    let shared = Mutex::new(Shared {
        todo,
        ..Shared::default()
    });
    let moved = Condvar::new();
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| walker(fs, bs, &shared, &moved));
        }
    });
    let sh = shared.into_inner();
    if let Some(e) = sh.failed {
        return Err(e);
    }
    let mut files = sh.found;
    files.sort_by(|a, b| a.path.cmp(&b.path));
    let mut seen = HashSet::new();
    files.retain(|f| seen.insert(f.ino));
    Ok(files)
}

/// One walker: takes an inode, visits it, until nothing is left to take
/// and no other walker may add more.
fn walker(fs: &Fs, bs: u64, shared: &Mutex<Shared>, moved: &Condvar) {
    loop {
        let (ino, path) = {
            let mut sh = shared.lock();
            loop {
                if sh.failed.is_some() {
                    return;
                }
                if let Some(next) = sh.todo.pop() {
                    sh.busy += 1;
                    break next;
                }
                if sh.busy == 0 {
                    return;
                }
                moved.wait(&mut sh);
            }
        };
        let r = visit(fs, bs, ino, &path);
        let mut sh = shared.lock();
        sh.busy -= 1;
        match r {
            Ok(Visited::File(f)) => sh.found.push(f),
            Ok(Visited::Dir(entries)) => sh.todo.extend(entries),
            Ok(Visited::Other) => {}
            Err(e) => {
                sh.failed.get_or_insert(e);
            }
        }
        moved.notify_all();
    }
}

enum Visited {
    File(File),
    Dir(Vec<(Ino, String)>),
    Other,
}

fn visit(fs: &Fs, bs: u64, ino: Ino, path: &str) -> Result<Visited> {
    let a = fs.getattr(ino)?;
    match a.kind {
        FileType::Regular => {
            let blocks = a.size / bs;
            // None: gone since, or not listed; read through the file.
            let runs = fs.data_runs(ino, 0, blocks).ok();
            Ok(Visited::File(File {
                ino,
                path: path.to_string(),
                blocks,
                runs,
            }))
        }
        FileType::Directory => {
            let mut out = Vec::new();
            let mut pos = 0;
            let sep = if path.ends_with('/') { "" } else { "/" };
            loop {
                let batch = fs.readdir(ino, pos, READDIR_BATCH)?;
                let Some(last) = batch.last() else { break };
                if last.next == pos {
                    break;
                }
                pos = last.next;
                for e in batch {
                    let wanted = matches!(e.kind, FileType::Regular | FileType::Directory);
                    if wanted && e.name != b"." && e.name != b".." {
                        out.push((e.ino, format!("{path}{sep}{}", String::from_utf8_lossy(&e.name))));
                    }
                }
            }
            Ok(Visited::Dir(out))
        }
        _ => Ok(Visited::Other),
    }
}
