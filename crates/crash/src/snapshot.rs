//! Canonical namespace snapshots for the crash harness: a walk from the root
//! through the engine API (readdir, getattr, read, readlink, listxattr,
//! getxattr) recording, per path, the inode number, kind, mode, owner, rdev,
//! size, link count, contents (as per-4-KiB-chunk hashes), symlink target and
//! extended attributes. Times and block counts are left out: they are not
//! part of what a crash must preserve.
//!
//! Snapshots are compared whole (a 128-bit fingerprint) and, to explain a
//! violation, path by path ([`Snapshot::diff`]). Taking one only reads.

use std::collections::hash_map::DefaultHasher;
use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use tux3::api::Fs;
use tux3::error::Result;
use tux3::types::{FileType, Ino, ROOT_INO};

/// Bytes covered by one content hash.
const CHUNK: usize = 4096;

/// What a snapshot records about one path.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Node {
    pub ino: Ino,
    pub kind: FileType,
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub rdev: u64,
    pub size: u64,
    /// Hash of each 4 KiB of the contents (regular files).
    pub chunks: Vec<u64>,
    /// Symlink target.
    pub target: Vec<u8>,
    /// Extended attributes, sorted by name.
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
}

/// The namespace reachable from the root: path ("/", "/a/b") to node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Snapshot {
    pub entries: BTreeMap<Vec<u8>, Node>,
}

/// 128 bits of SipHash over `data`, from two differently salted hashers.
pub fn hash128<T: Hash + ?Sized>(data: &T) -> u128 {
    let mut a = DefaultHasher::new();
    0x5a17_u16.hash(&mut a);
    data.hash(&mut a);
    let mut b = DefaultHasher::new();
    0xc0de_u16.hash(&mut b);
    data.hash(&mut b);
    ((a.finish() as u128) << 64) | b.finish() as u128
}

fn hash64(data: &[u8]) -> u64 {
    let mut h = DefaultHasher::new();
    data.hash(&mut h);
    h.finish()
}

impl Snapshot {
    /// Walk the namespace of `fs` from the root.
    pub fn take(fs: &Fs) -> Result<Snapshot> {
        let mut snap = Snapshot::default();
        let mut todo: Vec<(Vec<u8>, Ino)> = vec![(b"/".to_vec(), ROOT_INO)];
        while let Some((path, ino)) = todo.pop() {
            let node = node(fs, ino)?;
            if node.kind == FileType::Directory {
                let mut pos = 0;
                loop {
                    let batch = fs.readdir(ino, pos, 256)?;
                    let Some(last) = batch.last() else { break };
                    pos = last.next;
                    for e in &batch {
                        let mut p = path.clone();
                        if p.len() > 1 {
                            p.push(b'/');
                        }
                        p.extend_from_slice(&e.name);
                        todo.push((p, e.ino));
                    }
                }
            }
            snap.entries.insert(path, node);
        }
        Ok(snap)
    }

    /// A fingerprint: equal snapshots have equal fingerprints.
    pub fn fingerprint(&self) -> u128 {
        hash128(self)
    }

    /// Up to `max` lines naming how `self` (recovered) differs from
    /// `expected`.
    pub fn diff(&self, expected: &Snapshot, max: usize) -> Vec<String> {
        let mut out = Vec::new();
        let mut paths: Vec<&Vec<u8>> = self.entries.keys().chain(expected.entries.keys()).collect();
        paths.sort();
        paths.dedup();
        let mut total = 0;
        for p in paths {
            let shown = String::from_utf8_lossy(p);
            let line = match (self.entries.get(p), expected.entries.get(p)) {
                (Some(_), None) => Some(format!("{shown}: present, expected absent")),
                (None, Some(_)) => Some(format!("{shown}: missing")),
                (Some(a), Some(b)) if a != b => Some(format!("{shown}: {}", node_diff(a, b))),
                _ => None,
            };
            if let Some(l) = line {
                total += 1;
                if out.len() < max {
                    out.push(l);
                }
            }
        }
        if total > out.len() {
            out.push(format!("... and {} more differences", total - out.len()));
        }
        out
    }

    /// Number of paths that differ between two snapshots.
    pub fn distance(&self, other: &Snapshot) -> usize {
        let a = self
            .entries
            .iter()
            .filter(|(p, n)| other.entries.get(*p) != Some(n))
            .count();
        let b = other
            .entries
            .keys()
            .filter(|p| !self.entries.contains_key(*p))
            .count();
        a + b
    }
}

/// Record one inode.
fn node(fs: &Fs, ino: Ino) -> Result<Node> {
    let attr = fs.getattr(ino)?;
    let mut chunks = Vec::new();
    let mut target = Vec::new();
    match attr.kind {
        FileType::Regular => {
            let mut off = 0u64;
            while off < attr.size {
                let data = fs.read(ino, off, 1 << 20)?;
                if data.is_empty() {
                    break;
                }
                chunks.extend(data.chunks(CHUNK).map(hash64));
                off += data.len() as u64;
            }
        }
        FileType::Symlink => target = fs.readlink(ino)?,
        _ => {}
    }
    let mut xattrs = Vec::new();
    for name in fs.listxattr(ino)? {
        let value = fs.getxattr(ino, &name)?;
        xattrs.push((name, value));
    }
    Ok(Node {
        ino,
        kind: attr.kind,
        mode: attr.mode,
        nlink: attr.nlink,
        uid: attr.uid,
        gid: attr.gid,
        rdev: attr.rdev,
        size: attr.size,
        chunks,
        target,
        xattrs,
    })
}

/// How two nodes of the same path differ, in one line.
fn node_diff(got: &Node, want: &Node) -> String {
    let mut parts = Vec::new();
    let mut field = |name: &str, a: String, b: String| {
        if a != b {
            parts.push(format!("{name} {a}, expected {b}"));
        }
    };
    field("ino", got.ino.to_string(), want.ino.to_string());
    field("kind", format!("{:?}", got.kind), format!("{:?}", want.kind));
    field("mode", format!("{:o}", got.mode), format!("{:o}", want.mode));
    field("nlink", got.nlink.to_string(), want.nlink.to_string());
    field("uid", got.uid.to_string(), want.uid.to_string());
    field("gid", got.gid.to_string(), want.gid.to_string());
    field("rdev", got.rdev.to_string(), want.rdev.to_string());
    field("size", got.size.to_string(), want.size.to_string());
    if got.chunks != want.chunks {
        let first = got
            .chunks
            .iter()
            .zip(&want.chunks)
            .position(|(a, b)| a != b)
            .unwrap_or(got.chunks.len().min(want.chunks.len()));
        parts.push(format!("contents differ from byte {}", first * CHUNK));
    }
    if got.target != want.target {
        parts.push(format!(
            "target {:?}, expected {:?}",
            String::from_utf8_lossy(&got.target),
            String::from_utf8_lossy(&want.target)
        ));
    }
    if got.xattrs != want.xattrs {
        let names = |n: &Node| {
            n.xattrs
                .iter()
                .map(|(k, v)| format!("{}({}B)", String::from_utf8_lossy(k), v.len()))
                .collect::<Vec<_>>()
                .join(",")
        };
        parts.push(format!("xattrs [{}], expected [{}]", names(got), names(want)));
    }
    parts.join("; ")
}
