//! `tools::graph`: the dot text of a small volume with a log names the
//! superblock, every log block, the inode-table root and directory entries;
//! `max_nodes` bounds a 500-file volume; a damaged leaf becomes a red node;
//! and Graphviz's `dot` (when installed) accepts the output.

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::Arc;
use tux3::backend::Backend;
use tux3::device::{Device, MemDevice};
use tux3::log::{read_chain, Record};
use tux3::structures::superblock::Superblock;
use tux3::{Errno, Error, FormatOptions, Fs, OpenOptions, ROOT_INO};
use tux3_tools::graph::graph;

fn fresh(blocks: u64) -> Arc<dyn Device> {
    let dev: Arc<dyn Device> = Arc::new(MemDevice::new(4096, blocks));
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    dev
}

fn open(dev: &Arc<dyn Device>) -> Fs {
    let opts = OpenOptions {
        unify_log_blocks: 1 << 20,
        ..OpenOptions::default()
    };
    Fs::open(dev.clone(), opts).unwrap()
}

/// Files and directories, a unify, more changes, dropped with a log.
fn small_volume() -> Arc<dyn Device> {
    let dev = fresh(4096);
    let fs = open(&dev);
    let docs = fs.mkdir(ROOT_INO, b"docs", 0o755, 0, 0).unwrap();
    for i in 0..5u32 {
        let f = fs
            .create(docs.ino, format!("note{i}.txt").as_bytes(), 0o644, 0, 0)
            .unwrap();
        fs.write(f.ino, 0, &vec![b'x'; 5000 * (i as usize + 1)]).unwrap();
    }
    fs.sync().unwrap();
    fs.unify().unwrap();
    let f = fs.create(ROOT_INO, b"hello.txt", 0o644, 0, 0).unwrap();
    fs.write(f.ino, 0, b"hello\n").unwrap();
    fs.sync().unwrap();
    fs.mkdir(docs.ino, b"sub|dir <x>", 0o755, 0, 0).unwrap();
    fs.sync().unwrap();
    drop(fs);
    dev
}

/// The dot text is a digraph whose braces balance (outside quoted labels).
fn assert_well_formed(text: &str) {
    assert!(text.starts_with("digraph"), "{text}");
    let (mut depth, mut quoted, mut escaped) = (0i64, false, false);
    for c in text.chars() {
        match (quoted, escaped, c) {
            (_, true, _) => escaped = false,
            (true, false, '\\') => escaped = true,
            (_, false, '"') => quoted = !quoted,
            (false, false, '{') => depth += 1,
            (false, false, '}') => {
                depth -= 1;
                assert!(depth >= 0, "unbalanced braces:\n{text}");
            }
            _ => {}
        }
    }
    assert!(!quoted && depth == 0, "unbalanced braces or quotes:\n{text}");
}

/// Node statements: lines declaring a node with a label (not edges).
fn node_count(text: &str) -> usize {
    text.lines()
        .filter(|l| l.contains("[label=") && !l.contains("->"))
        .count()
}

/// Where `dot` is installed, it must render the text to SVG.
fn dot_accepts(text: &str) {
    let Ok(mut child) = Command::new("dot")
        .arg("-Tsvg")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    else {
        eprintln!("dot is not installed: not rendering");
        return;
    };
    child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "dot failed: {err}\n{text}");
    assert!(!err.contains("Error"), "dot complained: {err}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("<svg"));
}

#[test]
fn small_volume_names_its_structures() {
    let dev = small_volume();
    let text = graph(dev.clone(), 200).unwrap();
    assert_well_formed(&text);
    assert!(text.contains("superblock copy 0") && text.contains("superblock copy 1"));
    assert!(text.contains("IN USE"), "{text}");

    let sb = Superblock::load(dev.as_ref()).unwrap();
    let chain = read_chain(dev.as_ref(), sb.log_start()).unwrap();
    let blocks: Vec<u64> = chain.blocks().collect();
    assert!(!blocks.is_empty(), "the volume should have a log");
    for b in &blocks {
        assert!(
            text.contains(&format!("log block {b}|seq")),
            "log block {b}:\n{text}"
        );
    }
    assert!(text.contains("COMMIT"));
    assert!(text.contains(&format!("itable root {} depth", sb.itable.addr)));

    // The replayed inode table's root, as a mount sees it.
    let (mut be, _) = Backend::open(dev.clone(), true).unwrap();
    let mut root = None;
    let _ = be.itable.get_mut().visit(dev.as_ref(), &mut |addr, _, _, _| {
        root = Some(addr);
        Err(Error::Posix(Errno::EBUSY))
    });
    let root = root.expect("the inode table has a root");
    assert!(
        text.contains(&format!("itable leaf|block {root}|")),
        "itable root {root}:\n{text}"
    );

    // Directory entries, escaped for record labels.
    assert!(text.contains("hello.txt -\\> "), "{text}");
    assert!(text.contains("note3.txt"));
    assert!(text.contains("sub\\|dir \\<x\\>"), "{text}");
    assert!(text.contains("-\\> "), "extents are listed");
    assert!(!text.contains("#ff6666"), "nothing is corrupt:\n{text}");
    dot_accepts(&text);
}

#[test]
fn max_nodes_bounds_a_large_volume() {
    let dev = fresh(16384);
    let fs = open(&dev);
    let sub = fs.mkdir(ROOT_INO, b"sub", 0o755, 0, 0).unwrap();
    for i in 0..500u32 {
        let dir = if i % 2 == 0 { ROOT_INO } else { sub.ino };
        let f = fs
            .create(dir, format!("file{i:04}").as_bytes(), 0o644, 0, 0)
            .unwrap();
        fs.write(f.ino, 0, &[i as u8; 100]).unwrap();
        if i % 5 == 0 {
            // Five extents: more than an inode record holds, so the file
            // gets an extent leaf (a node of the graph).
            for k in 1..5u64 {
                fs.write(f.ino, k * 8192, &[i as u8; 100]).unwrap();
            }
        }
        if i % 50 == 0 {
            fs.sync().unwrap();
        }
    }
    fs.sync().unwrap();
    drop(fs);
    let text = graph(dev.clone(), 20).unwrap();
    assert_well_formed(&text);
    let n = node_count(&text);
    assert!(n <= 25, "{n} nodes with --max-nodes 20:\n{text}");
    assert!(text.contains("… "), "cut groups are summarized:\n{text}");
    dot_accepts(&text);
    let all = graph(dev, 100_000).unwrap();
    assert!(node_count(&all) > 100, "{}", node_count(&all));
    assert!(all.contains("more names") && all.contains("more inodes"), "{all}");
}

#[test]
fn a_damaged_leaf_is_a_red_node() {
    let dev = small_volume();
    let sb = Superblock::load(dev.as_ref()).unwrap();
    let chain = read_chain(dev.as_ref(), sb.log_start()).unwrap();
    let leaf = chain
        .deltas
        .iter()
        .flat_map(|d| &d.records)
        .find_map(|r| match *r {
            Record::LeafMap { tree, addr, .. } if tree != 0 => Some(addr),
            _ => None,
        })
        .expect("a file-tree leaf in the log");
    let mut buf = vec![0u8; dev.block_size() as usize];
    dev.read(leaf, &mut buf).unwrap();
    buf[40] ^= 0xff;
    dev.write(leaf, &buf).unwrap();
    let text = graph(dev.clone(), 200).unwrap();
    assert_well_formed(&text);
    assert!(text.contains(&format!("corrupt block {leaf}")), "{text}");
    assert!(text.contains("#ff6666"));
    dot_accepts(&text);

    // Garbage everywhere but the superblocks: still a graph, never a panic.
    for b in 2..dev.block_count() {
        let junk: Vec<u8> = (0..buf.len()).map(|i| (i as u64 * 7 + b) as u8).collect();
        dev.write(b, &junk).unwrap();
    }
    let text = graph(dev, 200).unwrap();
    assert_well_formed(&text);
    assert!(text.contains("corrupt block"), "{text}");
    dot_accepts(&text);
}

#[test]
fn the_command_writes_dot_and_renders_with_graphviz() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("v.img");
    let run = |args: &[&dyn AsRef<std::ffi::OsStr>]| {
        Command::new(env!("CARGO_BIN_EXE_tux3"))
            .args(args.iter().map(|a| a.as_ref()))
            .output()
            .unwrap()
    };
    assert!(run(&[&"mkfs", &"--size", &"16M", &img]).status.success());
    let dot = dir.path().join("v.dot");
    let o = run(&[&"graph", &img, &"-o", &dot, &"--max-nodes", &"50"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(&dot).unwrap();
    assert_well_formed(&text);
    assert!(
        text.contains("superblock copy 0") && text.contains("log is empty"),
        "{text}"
    );

    let o = run(&[&"graph", &img, &"-o", &dir.path().join("v.txt")]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains(".dot, .svg or .png"));

    let svg = dir.path().join("v.svg");
    let o = run(&[&"graph", &img, &"-o", &svg]);
    let err = String::from_utf8_lossy(&o.stderr);
    if Command::new("dot").arg("-V").output().is_ok() {
        assert!(o.status.success(), "{err}");
        assert!(std::fs::read_to_string(&svg).unwrap().contains("<svg"));
    } else {
        assert!(!o.status.success() && err.contains("install graphviz"), "{err}");
    }
}

/// Snapshots are drawn, each with what it refers to and holds alone; one
/// taken with no change since shares the live inode table's root.
#[test]
fn snapshots_are_drawn_with_what_they_share() {
    let dev = fresh(4096);
    let fs = open(&dev);
    let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap();
    fs.write(f.ino, 0, &[1u8; 9000]).unwrap();
    fs.snapshot_create(b"first").unwrap();
    fs.write(f.ino, 0, &[2u8; 9000]).unwrap();
    fs.snapshot_create(b"second").unwrap();
    fs.close().unwrap();
    let dot = graph(dev, 1000).unwrap();
    assert!(dot.contains("snapshot 0 \\\"first\\\""), "{dot}");
    assert!(dot.contains("snapshot 1 \\\"second\\\""), "{dot}");
    assert_eq!(dot.matches("shares the inode table").count(), 1, "{dot}");
    assert!(dot.contains("dead list"), "{dot}");
}
