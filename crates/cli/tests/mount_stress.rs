//! Four workers (threads doing real syscalls through the mount) run a
//! bounded number of mixed operations each on shared directories: create,
//! write, append, rename, unlink, mkdir, rmdir, link, symlink, truncate,
//! fsync, plus readdir churn of the shared directories. Each worker owns the
//! names with its prefix and records what they should hold; afterwards every
//! record is checked through the mount, again after unmount + fsck +
//! remount.

mod mount_util;

use mount_util::{can_mount, Fixture, Rng};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::io::{Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;

const WORKERS: usize = 4;
const OPS: usize = 600;
const SHARED: [&str; 3] = ["shared0", "shared1", "shared2"];

#[derive(Clone, Debug)]
enum Node {
    /// A regular file: the id of its content in `Model::files`.
    File(usize),
    Symlink(String),
    Dir,
}

/// What one worker's names should hold.
#[derive(Default)]
struct Model {
    /// Relative path → node, for the worker's own names only.
    names: BTreeMap<String, Node>,
    /// Content of each file (shared by its hard links).
    files: Vec<Vec<u8>>,
    counter: usize,
}

impl Model {
    fn own_files(&self) -> Vec<String> {
        self.names
            .iter()
            .filter(|(_, n)| matches!(n, Node::File(_)))
            .map(|(p, _)| p.clone())
            .collect()
    }
    fn own_dirs(&self) -> Vec<String> {
        self.names
            .iter()
            .filter(|(_, n)| matches!(n, Node::Dir))
            .map(|(p, _)| p.clone())
            .collect()
    }
    fn links(&self, id: usize) -> u64 {
        self.names
            .values()
            .filter(|n| matches!(n, Node::File(i) if *i == id))
            .count() as u64
    }
    fn children(&self, dir: &str) -> usize {
        let prefix = format!("{dir}/");
        self.names.keys().filter(|p| p.starts_with(&prefix)).count()
    }
}

fn pick<'a>(rng: &mut Rng, v: &'a [String]) -> Option<&'a String> {
    (!v.is_empty()).then(|| &v[rng.below(v.len() as u64) as usize])
}

/// A new name owned by worker `w`, in a shared directory or one of its own.
fn new_name(rng: &mut Rng, m: &mut Model, w: usize, kind: &str) -> String {
    m.counter += 1;
    let dirs = m.own_dirs();
    let parent = if !dirs.is_empty() && rng.below(3) == 0 {
        pick(rng, &dirs).expect("a dir").clone()
    } else {
        SHARED[rng.below(SHARED.len() as u64) as usize].to_string()
    };
    format!("{parent}/w{w}-{kind}{}", m.counter)
}

fn worker(mnt: &Path, w: usize) -> Model {
    let mut rng = Rng::new(w as u64 + 1);
    let mut m = Model::default();
    let at = |p: &str| mnt.join(p);
    for op in 0..OPS {
        let files = m.own_files();
        match rng.below(14) {
            // create + write
            0 | 1 => {
                let name = new_name(&mut rng, &mut m, w, "f");
                let len = rng.below(20_000) as usize;
                let data = rng.bytes(len);
                fs::write(at(&name), &data).unwrap_or_else(|e| panic!("create {name}: {e}"));
                m.files.push(data);
                m.names.insert(name, Node::File(m.files.len() - 1));
            }
            // pwrite somewhere in or just past the file
            2 => {
                let Some(name) = pick(&mut rng, &files) else {
                    continue;
                };
                let Node::File(id) = m.names[name] else {
                    unreachable!()
                };
                let off = rng.below(m.files[id].len() as u64 + 4096) as usize;
                let n = rng.below(9000) as usize + 1;
                let data = rng.bytes(n);
                let f = fs::OpenOptions::new().write(true).open(at(name)).expect("open");
                f.write_all_at(&data, off as u64).expect("pwrite");
                let c = &mut m.files[id];
                if c.len() < off + data.len() {
                    c.resize(off + data.len(), 0);
                }
                c[off..off + data.len()].copy_from_slice(&data);
            }
            // append
            3 | 4 => {
                let Some(name) = pick(&mut rng, &files) else {
                    continue;
                };
                let Node::File(id) = m.names[name] else {
                    unreachable!()
                };
                let n = rng.below(3000) as usize + 1;
                let data = rng.bytes(n);
                let mut f = fs::OpenOptions::new().append(true).open(at(name)).expect("open");
                f.write_all(&data).expect("append");
                m.files[id].extend_from_slice(&data);
            }
            // rename a file or symlink, sometimes over another own file
            5 => {
                let movable: Vec<String> = m
                    .names
                    .iter()
                    .filter(|(_, n)| !matches!(n, Node::Dir))
                    .map(|(p, _)| p.clone())
                    .collect();
                let Some(from) = pick(&mut rng, &movable).cloned() else {
                    continue;
                };
                // (Not onto another name of the same inode: POSIX makes that
                // a no-op that keeps both names.)
                let same = |t: &String| match (&m.names[t], &m.names[&from]) {
                    (Node::File(a), Node::File(b)) => a == b,
                    _ => false,
                };
                let to = match pick(&mut rng, &files) {
                    Some(t) if rng.below(4) == 0 && *t != from && !same(t) => t.clone(),
                    _ => new_name(&mut rng, &mut m, w, "r"),
                };
                fs::rename(at(&from), at(&to)).unwrap_or_else(|e| panic!("rename {from} {to}: {e}"));
                let node = m.names.remove(&from).expect("from");
                m.names.insert(to, node);
            }
            // unlink
            6 => {
                let Some(name) = pick(&mut rng, &files).cloned() else {
                    continue;
                };
                fs::remove_file(at(&name)).expect("unlink");
                m.names.remove(&name);
            }
            // mkdir
            7 => {
                let name = new_name(&mut rng, &mut m, w, "d");
                fs::create_dir(at(&name)).unwrap_or_else(|e| panic!("mkdir {name}: {e}"));
                m.names.insert(name, Node::Dir);
            }
            // rmdir an empty own directory
            8 => {
                let empty: Vec<String> = m.own_dirs().into_iter().filter(|d| m.children(d) == 0).collect();
                let Some(d) = pick(&mut rng, &empty).cloned() else {
                    continue;
                };
                fs::remove_dir(at(&d)).unwrap_or_else(|e| panic!("rmdir {d}: {e}"));
                m.names.remove(&d);
            }
            // hard link
            9 => {
                let Some(name) = pick(&mut rng, &files).cloned() else {
                    continue;
                };
                let node = m.names[&name].clone();
                let to = new_name(&mut rng, &mut m, w, "l");
                if let Err(e) = fs::hard_link(at(&name), at(&to)) {
                    let old = fs::symlink_metadata(at(&name)).map(|m| m.ino());
                    let parent = fs::metadata(at(&to).parent().expect("parent")).is_ok();
                    panic!("link {name} {to}: {e} (old now: {old:?}, new's parent exists: {parent})");
                }
                m.names.insert(to, node);
            }
            // symlink
            10 => {
                let to = new_name(&mut rng, &mut m, w, "s");
                let target = format!("target-{w}-{op}-{}", "x".repeat(rng.below(200) as usize));
                std::os::unix::fs::symlink(&target, at(&to)).expect("symlink");
                m.names.insert(to, Node::Symlink(target));
            }
            // truncate (shrink or grow)
            11 => {
                let Some(name) = pick(&mut rng, &files) else {
                    continue;
                };
                let Node::File(id) = m.names[name] else {
                    unreachable!()
                };
                let len = rng.below(m.files[id].len() as u64 + 5000);
                let f = fs::OpenOptions::new().write(true).open(at(name)).expect("open");
                f.set_len(len).expect("truncate");
                m.files[id].resize(len as usize, 0);
            }
            // fsync after a write through the same descriptor
            12 => {
                let Some(name) = pick(&mut rng, &files) else {
                    continue;
                };
                let Node::File(id) = m.names[name] else {
                    unreachable!()
                };
                let data = rng.bytes(512);
                let mut f = fs::OpenOptions::new().write(true).open(at(name)).expect("open");
                f.seek(SeekFrom::End(0)).expect("seek");
                f.write_all(&data).expect("write");
                f.sync_all().expect("fsync");
                m.files[id].extend_from_slice(&data);
            }
            // shared-directory churn: list a shared directory; our names must
            // all be there, whatever the others are doing
            _ => {
                let dir = SHARED[rng.below(SHARED.len() as u64) as usize];
                let seen = own_names_in(&at(dir), w);
                let want = expected_in(&m, dir);
                assert_eq!(seen, want, "worker {w}: listing {dir} during the run");
            }
        }
    }
    m
}

/// Names in `dir` that belong to worker `w`.
fn own_names_in(dir: &Path, w: usize) -> BTreeSet<String> {
    let prefix = format!("w{w}-");
    fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("readdir {}: {e}", dir.display()))
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&prefix))
        .collect()
}

fn expected_in(m: &Model, dir: &str) -> BTreeSet<String> {
    let prefix = format!("{dir}/");
    m.names
        .keys()
        .filter_map(|p| p.strip_prefix(&prefix))
        .filter(|rest| !rest.contains('/'))
        .map(str::to_string)
        .collect()
}

/// Every record of every worker, through the mount.
fn verify(mnt: &Path, models: &[Model]) {
    let mut inos: HashMap<(usize, usize), u64> = HashMap::new();
    for (w, m) in models.iter().enumerate() {
        for dir in SHARED.iter().map(|s| s.to_string()).chain(m.own_dirs()) {
            assert_eq!(
                own_names_in(&mnt.join(&dir), w),
                expected_in(m, &dir),
                "worker {w}: names in {dir}"
            );
        }
        for (path, node) in &m.names {
            let p = mnt.join(path);
            let meta = fs::symlink_metadata(&p).unwrap_or_else(|e| panic!("stat {path}: {e}"));
            match node {
                Node::Dir => assert!(meta.is_dir(), "{path} is a directory"),
                Node::Symlink(t) => {
                    assert!(meta.file_type().is_symlink(), "{path} is a symlink");
                    assert_eq!(fs::read_link(&p).expect("readlink").to_string_lossy(), *t);
                }
                Node::File(id) => {
                    assert!(meta.is_file(), "{path} is a file");
                    let data = fs::read(&p).expect("read");
                    assert!(data == m.files[*id], "worker {w}: content of {path}");
                    assert_eq!(meta.nlink(), m.links(*id), "worker {w}: links of {path}");
                    // Hard links of one file share an inode.
                    let ino = *inos.entry((w, *id)).or_insert(meta.ino());
                    assert_eq!(ino, meta.ino(), "worker {w}: inode of {path}");
                }
            }
        }
    }
}

#[test]
fn four_workers_mixed_operations() {
    if !can_mount() {
        return;
    }
    let fx = Fixture::new("512M");
    let m = fx.mount(&[]);
    for d in SHARED {
        fs::create_dir(fx.path(d)).expect("mkdir shared");
    }
    let models: Vec<Model> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..WORKERS)
            .map(|w| {
                let mnt = fx.mnt.clone();
                s.spawn(move || worker(&mnt, w))
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("worker")).collect()
    });
    let names: usize = models.iter().map(|m| m.names.len()).sum();
    eprintln!("stress: {WORKERS} workers x {OPS} operations, {names} names at the end");
    verify(&fx.mnt, &models);
    m.unmount();
    fx.fsck();
    let m = fx.mount(&[]);
    verify(&fx.mnt, &models);
    m.unmount();
    fx.fsck();
}
