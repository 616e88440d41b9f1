//! Data checksums through the mount and the offline reader: a volume made
//! by `tux3 mkfs --from` of a tree of 100 files (a few bytes to several
//! hundred KiB; the small ones keep their map in the inode record, the
//! large ones have extent leaves of several entries) is damaged while
//! unmounted: 8 bytes flipped in one data block of each of 20 files, and in
//! the extent leaf of each of 20 others. Mounted, every damaged file fails
//! with EIO on the damaged range and every other reads back exactly; the
//! server's log has one line per damaged data block naming its paths (both
//! names of a hard-linked file), inode, device block and both checksums.
//! `tux3 cat` of a damaged file fails with the same report; of an intact
//! one, prints it exactly. Skips without root unless TUX3_REQUIRE_MOUNT=1.
//!
//! Calls the mount helpers (`mount_util`), the `tux3` command, and the
//! engine and tools crates (read-only) to find each file's blocks.

mod mount_util;

use mount_util::*;
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use tux3::backend::Backend;
use tux3::device::Device;
use tux3::structures::extent::{self, block_sum, Extent};
use tux3::structures::inode::InodeAttrs;
use tux3::{Fs, OpenOptions, ROOT_INO};

const BS: u64 = 4096;
const FILES: u64 = 100;
const DAMAGED: usize = 20;

/// Length of file `i`: tiny, a few blocks, or long (past one extent entry
/// of 64 summed blocks, so an extent leaf of its own).
fn len_of(i: u64) -> usize {
    match i % 5 {
        0 => 1 + (i * 13 % 300) as usize,
        1 => (2 + i % 5) as usize * BS as usize + (i as usize * 7 % 100),
        _ => (70 + i * 3) as usize * BS as usize + (i as usize % 3) * 1000,
    }
}

fn content(i: u64) -> Vec<u8> {
    let mut rng = Rng::new(i + 1);
    rng.bytes(len_of(i))
}

fn rel(i: u64) -> String {
    format!("d{}/f{i}", i % 4)
}

/// What the volume holds for one file: inode, written extents, the device
/// blocks of its extent leaves (none when the record holds its map).
struct Layout {
    ino: u64,
    extents: Vec<Extent>,
    leaves: Vec<u64>,
}

/// Each file's layout, read from the unmounted image.
fn layouts(img: &Path) -> BTreeMap<u64, Layout> {
    let fs = Fs::open(
        tux3::open_path(img, false).expect("open image"),
        OpenOptions {
            read_only: true,
            ..OpenOptions::default()
        },
    )
    .expect("open volume");
    let mut inos = BTreeMap::new();
    for i in 0..FILES {
        let dir = fs.lookup(ROOT_INO, format!("d{}", i % 4).as_bytes()).unwrap();
        let f = fs.lookup(dir.ino, format!("f{i}").as_bytes()).unwrap();
        inos.insert(i, f.ino);
    }
    drop(fs);
    let dev: Arc<dyn Device> = tux3::open_path(img, false).expect("open image");
    let (mut be, replay) = Backend::open(dev.clone(), true).expect("open backend");
    let bounds = tux3::structures::bounds(dev.as_ref());
    let mut out = BTreeMap::new();
    for (i, ino) in inos {
        let raw = be.itable.get_mut().get(dev.as_ref(), ino).unwrap().unwrap();
        let attrs = InodeAttrs::decode(&raw, ino, 0, &bounds).unwrap();
        let mut tree = tux3_tools::datamap::data_tree(&be, ino, &attrs, replay.get(&ino)).unwrap();
        let (mut extents, mut leaves) = (Vec::new(), Vec::new());
        tree.scan(dev.as_ref(), 0, u64::MAX, |k, v, leaf| {
            extents.push(extent::decode(k, v, leaf, &bounds)?);
            if leaf != 0 && !leaves.contains(&leaf) {
                leaves.push(leaf);
            }
            Ok(std::ops::ControlFlow::Continue(()))
        })
        .unwrap();
        extents.retain(|e: &Extent| !e.unwritten);
        out.insert(i, Layout { ino, extents, leaves });
    }
    out
}

/// Flip 8 bytes at `at` of device block `block` of the image; returns the
/// block as it is now.
fn damage(img: &Path, block: u64, at: u64) -> Vec<u8> {
    let f = fs::OpenOptions::new().read(true).write(true).open(img).unwrap();
    let mut buf = vec![0u8; BS as usize];
    f.read_exact_at(&mut buf, block * BS).unwrap();
    for b in &mut buf[at as usize..at as usize + 8] {
        *b = !*b;
    }
    f.write_all_at(&buf, block * BS).unwrap();
    f.sync_all().unwrap();
    buf
}

/// A data block damaged: which file, its names, and the report expected.
struct Hit {
    i: u64,
    ino: u64,
    lblock: u64,
    pblock: u64,
    expected: u32,
    found: u32,
    paths: Vec<String>,
}

#[test]
fn damaged_blocks_give_eio_and_a_report_intact_files_read_back() {
    if !can_mount() {
        return;
    }
    let fx = Fixture::new("64M");
    let src = fx.dir.path().join("src");
    for d in 0..4 {
        fs::create_dir_all(src.join(format!("d{d}"))).unwrap();
    }
    for i in 0..FILES {
        fs::write(src.join(rel(i)), content(i)).unwrap();
    }
    // File 2 (damaged below) has a second name.
    fs::hard_link(src.join(rel(2)), src.join("second-name")).unwrap();
    let st = Command::new(TUX3)
        .args(["mkfs", "-q", "--size", "64M", "--from"])
        .arg(&src)
        .arg(&fx.img)
        .status()
        .unwrap();
    assert!(st.success(), "mkfs --from failed");

    let lay = layouts(&fx.img);
    let mut rng = Rng::new(48);
    // Data: file 2, then 19 more at random, one block each.
    let mut pool: Vec<u64> = (0..FILES).filter(|&i| i != 2).collect();
    let mut data_files = vec![2];
    while data_files.len() < DAMAGED {
        let k = rng.below(pool.len() as u64) as usize;
        data_files.push(pool.swap_remove(k));
    }
    let mut hits = Vec::new();
    for &i in &data_files {
        let l = &lay[&i];
        let blocks: u64 = l.extents.iter().map(|e| e.count).sum();
        let lblock = rng.below(blocks.min(len_of(i) as u64 / BS + 1));
        let e = l
            .extents
            .iter()
            .find(|e| e.lblock <= lblock && lblock < e.end())
            .unwrap();
        let pblock = e.physical(lblock);
        let now = damage(&fx.img, pblock, rng.below(BS / 8) * 8);
        let mut paths = vec![format!("/{}", rel(i))];
        if i == 2 {
            paths.push("/second-name".into());
        }
        hits.push(Hit {
            i,
            ino: l.ino,
            lblock,
            pblock,
            expected: e.sum_at(lblock).expect("a checksum"),
            found: block_sum(&now),
            paths,
        });
    }
    // Metadata: the extent leaf of 20 other files.
    let leafy: Vec<u64> = pool
        .iter()
        .copied()
        .filter(|i| !lay[i].leaves.is_empty())
        .collect();
    assert!(leafy.len() >= 2 * DAMAGED, "{} files with leaves", leafy.len());
    let leaf_files: Vec<u64> = leafy[..DAMAGED].to_vec();
    for i in &leaf_files {
        damage(&fx.img, lay[i].leaves[0], 2048);
    }

    let m = fx.mount(&[]);
    for h in &hits {
        let path = fx.path(&rel(h.i));
        want_errno(&format!("read of {}", rel(h.i)), fs::read(&path), libc::EIO);
        let f = fs::File::open(&path).unwrap();
        let mut buf = vec![0u8; BS as usize];
        want_errno(
            "read of the damaged block",
            f.read_at(&mut buf, h.lblock * BS),
            libc::EIO,
        );
    }
    for i in &leaf_files {
        want_errno(
            &format!("read of {} (leaf)", rel(*i)),
            fs::read(fx.path(&rel(*i))),
            libc::EIO,
        );
    }
    for i in (0..FILES).filter(|i| !data_files.contains(i) && !leaf_files.contains(i)) {
        let got = fs::read(fx.path(&rel(i))).unwrap_or_else(|e| panic!("{}: {e}", rel(i)));
        assert!(got == content(i), "{} differs", rel(i));
    }
    // One line per damaged data block, written before the reply.
    let log = fx.log_text();
    for h in &hits {
        let line = log
            .lines()
            .find(|l| l.contains("data checksum mismatch") && l.contains(&format!(" block={} ", h.pblock)))
            .unwrap_or_else(|| panic!("no log line for block {}: {log}", h.pblock));
        let listed = line
            .split("paths=[")
            .nth(1)
            .and_then(|r| r.split(']').next())
            .unwrap();
        let mut listed: Vec<&str> = listed.split(',').collect();
        listed.sort();
        let mut want: Vec<&str> = h.paths.iter().map(String::as_str).collect();
        want.sort();
        assert_eq!(listed, want, "{line}");
        for field in [
            format!("inode={} ", h.ino),
            format!("offset={} ", h.lblock * BS),
            format!("expected={:#010x} ", h.expected),
            format!("found={:#010x} ", h.found),
        ] {
            assert!(line.contains(&field), "{field:?} not in {line}");
        }
    }
    m.unmount();

    // The offline reader.
    let cat = |p: &str| {
        Command::new(TUX3)
            .arg("cat")
            .arg(&fx.img)
            .arg(p)
            .output()
            .unwrap()
    };
    let h = &hits[0];
    let out = cat(&rel(h.i));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "cat of a damaged file succeeded");
    for want in [
        "data checksum mismatch".to_string(),
        format!("inode {}", h.ino),
        format!("device block {}", h.pblock),
        format!("expected {:#010x}, found {:#010x}", h.expected, h.found),
    ] {
        assert!(err.contains(&want), "{want:?} not in {err}");
    }
    let intact =
        (0..FILES).find(|i| !data_files.contains(i) && !leaf_files.contains(i) && len_of(*i) > 70 * 4096);
    let intact = intact.unwrap();
    let out = cat(&rel(intact));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.stdout == content(intact), "cat of {} differs", rel(intact));
}
