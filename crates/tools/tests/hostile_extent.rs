//! Scenario: a hostile image whose checksums are all valid but whose file
//! extent points past the end of the volume. Mounting works; reading the
//! file fails with a corruption error (EIO) naming the extent leaf; fsck
//! reports that leaf and the bad range; nothing panics. Also: the same for
//! an extent whose logical end overflows, a branch naming a child past
//! the volume, and a preallocated (unwritten) extent with unknown flags or
//! past the volume.
//!
//! Calls the engine's public API (Fs, MemDevice, btree node codec,
//! superblock) and tux3_tools::fsck.

use std::sync::Arc;
use tux3::device::{Device, MemDevice};
use tux3::structures::btree::node::{decode, Node};
use tux3::structures::btree::TreeKind;
use tux3::structures::superblock::Superblock;
use tux3::{Errno, Error, FormatOptions, Fs, OpenOptions, ROOT_INO};
use tux3_tools::fsck::{check, metadata_blocks, FsckOptions};

const BS: usize = 1024;
const BLOCKS: u64 = 256;

/// A volume holding `/victim` (3000 bytes, then four blocks with holes
/// between them: five extents, more than an inode record holds, so they
/// are in an extent leaf), unified and closed cleanly, so no log checksum (BlockSum) covers its leaf: the damage is
/// then found only by the decoders. Returns the device and the inode number.
fn volume() -> (Arc<dyn Device>, u64) {
    let dev: Arc<dyn Device> = Arc::new(MemDevice::new(BS as u32, BLOCKS));
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    let a = fs.create(ROOT_INO, b"victim", 0o644, 0, 0).unwrap();
    fs.write(a.ino, 0, &[0x5a; 3000]).unwrap();
    for k in 1..5u64 {
        fs.write(a.ino, k * 8 * BS as u64, &[0x5b; BS]).unwrap();
    }
    fs.sync().unwrap();
    fs.unify().unwrap();
    fs.close().unwrap();
    (dev, a.ino)
}

/// The live extent leaf of inode `ino`: its address and decoded entries.
fn extent_leaf(dev: &Arc<dyn Device>, ino: u64) -> (u64, Vec<(u64, Vec<u8>)>) {
    let count = dev.block_count();
    let mut buf = vec![0u8; BS];
    for addr in metadata_blocks(dev.clone()).unwrap() {
        dev.read(addr, &mut buf).unwrap();
        if let Ok(Node::Leaf(l)) = decode(&buf, addr, ino, TreeKind::Extents, 0, count) {
            return (addr, l.entries);
        }
    }
    panic!("no extent leaf for inode {ino}");
}

/// Rewrite leaf `addr` of inode `ino` with `entries`, resealed.
fn rewrite_leaf(dev: &Arc<dyn Device>, addr: u64, ino: u64, entries: Vec<(u64, Vec<u8>)>) {
    let leaf = tux3::structures::btree::node::Leaf {
        addr,
        birth: 0,
        dirty: false,
        entries,
    };
    dev.write(addr, &leaf.encode(addr, ino, TreeKind::Extents, BS))
        .unwrap();
}

/// Mount, read the file: a corruption error naming `block`; then fsck
/// names `block` and mentions `detail`.
fn assert_refused(dev: &Arc<dyn Device>, ino: u64, block: u64, detail: &str) {
    let fs = Fs::open(dev.clone(), OpenOptions::default()).expect("the volume still mounts");
    assert_eq!(fs.lookup(ROOT_INO, b"victim").unwrap().ino, ino);
    let e = fs.read(ino, 0, 4096).expect_err("read of the hostile extent");
    assert_eq!(e.errno(), Errno::EIO, "{e}");
    match &e {
        Error::Corrupt { block: b, what } => {
            assert_eq!(*b, block, "error names block {b}, expected {block}: {what}");
            assert!(what.contains(detail), "{what}");
        }
        other => panic!("not a corruption error: {other}"),
    }
    assert!(e.to_string().contains(&format!("block {block}")), "{e}");
    // The rest of the volume still works.
    assert!(fs.readdir(ROOT_INO, 0, 10).is_ok());
    drop(fs.read(ino, 0, 10));
    let _ = fs.close();

    let report = check(
        dev.clone(),
        &FsckOptions {
            repair: false,
            progress: false,
            data: false,
        },
    )
    .unwrap();
    let all = report.problems.join("\n");
    eprintln!("read: {e}\nfsck:\n{all}");
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.contains(&block.to_string()) && p.contains(detail)),
        "fsck does not name block {block} ({detail}):\n{all}"
    );
}

#[test]
fn extent_past_the_volume_is_an_error_naming_its_leaf() {
    let (dev, ino) = volume();
    let (leaf, mut entries) = extent_leaf(&dev, ino);
    assert_eq!(entries.len(), 5);
    let past = BLOCKS + 10;
    entries[0].1[..8].copy_from_slice(&past.to_le_bytes());
    rewrite_leaf(&dev, leaf, ino, entries);
    // Checksums are valid: the superblock loads and the leaf decodes as a node.
    Superblock::load(dev.as_ref()).unwrap();
    assert_refused(&dev, ino, leaf, &past.to_string());
}

#[test]
fn extent_running_off_the_end_is_an_error_naming_its_leaf() {
    let (dev, ino) = volume();
    let (leaf, mut entries) = extent_leaf(&dev, ino);
    // Starts inside the volume, its length runs past the end.
    let start = BLOCKS - 2;
    entries[0].1.truncate(12);
    entries[0].1[..8].copy_from_slice(&start.to_le_bytes());
    entries[0].1[8..12].copy_from_slice(&100u32.to_le_bytes());
    rewrite_leaf(&dev, leaf, ino, entries);
    assert_refused(&dev, ino, leaf, "outside the volume");
}

#[test]
fn extent_at_the_top_of_the_address_space_does_not_overflow() {
    let (dev, ino) = volume();
    let (leaf, mut entries) = extent_leaf(&dev, ino);
    entries[0].1.truncate(12);
    entries[0].1[..8].copy_from_slice(&(u64::MAX - 1).to_le_bytes());
    entries[0].1[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
    rewrite_leaf(&dev, leaf, ino, entries);
    assert_refused(&dev, ino, leaf, "outside the volume");
}

/// A summed extent longer than a summed entry may be, or whose checksums
/// do not match its count, is refused by its length, naming its leaf.
#[test]
fn summed_extent_of_the_wrong_length_is_an_error_naming_its_leaf() {
    for (count, detail) in [(100u32, "at most 64"), (2, "bad length")] {
        let (dev, ino) = volume();
        let (leaf, mut entries) = extent_leaf(&dev, ino);
        assert_eq!(entries[0].1[16], 2, "the volume's extents are summed");
        entries[0].1[8..12].copy_from_slice(&count.to_le_bytes());
        rewrite_leaf(&dev, leaf, ino, entries);
        assert_refused(&dev, ino, leaf, detail);
    }
}

/// Rewrite extent value `v` in the 17-byte form (birth 0) with `flags`.
fn unwritten_form(v: &mut Vec<u8>, flags: u8) {
    v.resize(12, 0);
    v.extend_from_slice(&0u32.to_le_bytes());
    v.push(flags);
}

/// An extent in the preallocated (unwritten) form whose flags byte holds a
/// bit no format defines.
#[test]
fn extent_with_unknown_flags_is_an_error_naming_its_leaf() {
    let (dev, ino) = volume();
    let (leaf, mut entries) = extent_leaf(&dev, ino);
    unwritten_form(&mut entries[0].1, 0x03);
    rewrite_leaf(&dev, leaf, ino, entries);
    assert_refused(&dev, ino, leaf, "unknown flags 0x03");
}

/// An unwritten extent is bounded as any other: past the volume it is an
/// error naming its leaf, though no read ever maps its blocks.
#[test]
fn unwritten_extent_past_the_volume_is_an_error_naming_its_leaf() {
    let (dev, ino) = volume();
    let (leaf, mut entries) = extent_leaf(&dev, ino);
    let past = BLOCKS + 10;
    entries[0].1[..8].copy_from_slice(&past.to_le_bytes());
    unwritten_form(&mut entries[0].1, 0x01);
    rewrite_leaf(&dev, leaf, ino, entries);
    assert_refused(&dev, ino, leaf, &past.to_string());
}
