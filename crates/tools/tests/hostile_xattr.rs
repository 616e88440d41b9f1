//! Scenario: hostile images around xattr files (FORMAT.md 7.5), every
//! checksum valid. An owner's attribute 10 that names an ordinary file, a
//! missing inode or itself; an xattr file whose size is past the bound;
//! xattr file contents that lie (resealed). Mounting works; reading the
//! xattrs gives a corruption error naming the xattr file or the owner;
//! unlinking the owner frees no other inode; fsck reports each and
//! `--repair` leaves a clean volume with the other files intact. Nothing
//! panics.
//!
//! Calls the engine's public API (Fs, MemDevice, btree node codec, inode
//! records) and tux3_tools::fsck.

use std::sync::Arc;
use tux3::device::{Device, MemDevice};
use tux3::structures::btree::node::{decode, Leaf, Node};
use tux3::structures::btree::TreeKind;
use tux3::structures::inode::InodeAttrs;
use tux3::{Errno, Error, FormatOptions, Fs, OpenOptions, XattrMode, ROOT_INO};
use tux3_tools::fsck::{check, metadata_blocks, FsckOptions};

const BS: usize = 1024;
const BLOCKS: u64 = 512;

/// `/owner` with a 6000-byte xattr (in its xattr file) and `/other`, a
/// plain file; unified and closed, so no log checksum covers the leaves.
fn volume() -> (Arc<dyn Device>, u64, u64) {
    volume_with(true)
}

/// [`volume`], with data checksums or without (then a change to the xattr
/// file's contents is found by its own checks only).
fn volume_with(data_sums: bool) -> (Arc<dyn Device>, u64, u64) {
    let dev: Arc<dyn Device> = Arc::new(MemDevice::new(BS as u32, BLOCKS));
    let opts = FormatOptions {
        data_sums,
        ..FormatOptions::default()
    };
    Fs::format(dev.clone(), &opts).unwrap();
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    let owner = fs.create(ROOT_INO, b"owner", 0o644, 0, 0).unwrap().ino;
    let other = fs.create(ROOT_INO, b"other", 0o644, 0, 0).unwrap().ino;
    fs.write(other, 0, b"other data").unwrap();
    fs.setxattr(owner, b"user.big", &[0x77; 6000], XattrMode::Create)
        .unwrap();
    fs.sync().unwrap();
    fs.unify().unwrap();
    fs.close().unwrap();
    (dev, owner, other)
}

/// The inode-table leaf holding the record of `ino`, and the record.
fn record_of(dev: &Arc<dyn Device>, ino: u64) -> (Leaf, usize, InodeAttrs) {
    let count = dev.block_count();
    let bounds = tux3::structures::bounds(dev.as_ref());
    let mut buf = vec![0u8; BS];
    for addr in metadata_blocks(dev.clone()).unwrap() {
        dev.read(addr, &mut buf).unwrap();
        let Ok(Node::Leaf(l)) = decode(&buf, addr, 0, TreeKind::Itable, 0, count) else {
            continue;
        };
        if let Some(at) = l.entries.iter().position(|(k, _)| *k == ino) {
            let a = InodeAttrs::decode(&l.entries[at].1, ino, addr, &bounds).unwrap();
            return (l, at, a);
        }
    }
    panic!("no inode-table leaf holds inode {ino}");
}

/// Change the record of `ino` in the inode table with `patch`, resealed.
fn patch_record(dev: &Arc<dyn Device>, ino: u64, patch: impl Fn(&mut InodeAttrs)) {
    let (mut l, at, mut a) = record_of(dev, ino);
    patch(&mut a);
    l.entries[at].1 = a.encode();
    let addr = l.addr;
    let leaf = Leaf {
        addr,
        birth: l.birth,
        dirty: false,
        entries: l.entries,
    };
    dev.write(addr, &leaf.encode(addr, 0, TreeKind::Itable, BS))
        .unwrap();
}

/// The xattr file of `owner`, from its record.
fn xattr_file_of(dev: &Arc<dyn Device>, owner: u64) -> u64 {
    record_of(dev, owner).2.xattr_file
}

/// `fsck --repair` leaves no problem (`what`: for the message).
fn repair_leaves_it_clean(dev: &Arc<dyn Device>, what: &str) {
    let opts = FsckOptions {
        repair: true,
        progress: false,
        data: false,
    };
    let r = check(dev.clone(), &opts).unwrap();
    assert!(r.problems.is_empty(), "{what}after repair: {:?}", r.problems);
}

/// Reading the owner's xattrs is a corruption error mentioning `detail`;
/// unlinking it frees nothing else; fsck reports `detail`, a repair
/// leaves the volume clean and `/other` whole.
fn assert_refused(dev: &Arc<dyn Device>, owner: u64, other: u64, detail: &str) {
    let fs = Fs::open(dev.clone(), OpenOptions::default()).expect("the volume still mounts");
    let e = fs
        .getxattr(owner, b"user.big")
        .expect_err("getxattr through a hostile reference");
    assert_eq!(e.errno(), Errno::EIO, "{e}");
    assert!(matches!(e, Error::Corrupt { .. }), "{e}");
    assert!(e.to_string().contains(detail), "{e}");
    assert!(fs.listxattr(owner).is_err());
    drop(fs);
    let r = check(dev.clone(), &FsckOptions::default()).unwrap();
    assert!(r.problems.iter().any(|p| p.contains("xattr")), "{:?}", r.problems);
    repair_leaves_it_clean(dev, "");
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    assert_eq!(fs.read(other, 0, 100).unwrap(), b"other data");
    fs.unlink(ROOT_INO, b"owner").unwrap();
    assert_eq!(fs.read(other, 0, 100).unwrap(), b"other data");
    fs.close().unwrap();
    let r = check(dev.clone(), &FsckOptions::default()).unwrap();
    assert!(r.problems.is_empty(), "after unlink: {:?}", r.problems);
}

#[test]
fn a_reference_to_an_ordinary_file_is_refused() {
    let (dev, owner, other) = volume();
    patch_record(&dev, owner, |a| a.xattr_file = other);
    assert_refused(&dev, owner, other, "is not its xattr file");
}

#[test]
fn a_reference_to_a_missing_inode_is_refused() {
    let (dev, owner, other) = volume();
    patch_record(&dev, owner, |a| a.xattr_file = 4000);
    assert_refused(&dev, owner, other, "does not exist");
}

#[test]
fn an_oversized_xattr_file_is_refused() {
    let (dev, owner, other) = volume();
    let xf = xattr_file_of(&dev, owner);
    patch_record(&dev, xf, |a| a.size = 1 << 30);
    assert_refused(&dev, owner, other, "size");
}

#[test]
fn a_reference_to_itself_does_not_decode() {
    let (dev, owner, _) = volume();
    patch_record(&dev, owner, |a| a.xattr_file = owner);
    let fs = Fs::open(dev.clone(), OpenOptions::default()).expect("the volume still mounts");
    let e = fs.getattr(owner).expect_err("a record naming itself");
    assert!(e.to_string().contains("is not an inode it may name"), "{e}");
}

/// Contents whose checksum is right but whose entries lie: the decoder
/// still refuses them, naming the xattr file.
#[test]
fn resealed_contents_that_lie_are_refused() {
    // Without data checksums, which would catch the change first.
    let (dev, owner, other) = volume_with(false);
    let mut buf = vec![0u8; BS];
    let hit = (2..dev.block_count())
        .find(|&b| {
            dev.read(b, &mut buf).unwrap();
            &buf[..4] == b"T3XF"
        })
        .expect("the xattr file's first block");
    // One entry claimed, two said: the count lies (the checksum covers
    // only what follows the header).
    buf[4] = 2;
    dev.write(hit, &buf).unwrap();
    assert_refused(&dev, owner, other, "count 2");
}

/// Every byte of an xattr file's first block flipped in turn (the data
/// checksum, or on a volume without, the contents' own checksum and bounds
/// must catch it): mount, read every xattr, unlink, fsck and repair — errors,
/// never a panic, and a clean volume after the repair.
#[test]
fn flipped_bytes_in_an_xattr_file_never_panic() {
    let (dev, owner, _) = volume();
    let image = {
        let mut all = vec![0u8; BS * BLOCKS as usize];
        for (b, chunk) in all.chunks_mut(BS).enumerate() {
            dev.read(b as u64, chunk).unwrap();
        }
        all
    };
    let hit = (0..BLOCKS as usize)
        .find(|&b| &image[b * BS..b * BS + 4] == b"T3XF")
        .expect("the xattr file's first block");
    for at in (0..48).chain((48..BS).step_by(61)) {
        let mut img = image.clone();
        img[hit * BS + at] ^= 0x21;
        let dev: Arc<dyn Device> = Arc::new(MemDevice::from_image(BS as u32, img));
        if let Ok(fs) = Fs::open(dev.clone(), OpenOptions::default()) {
            if let Ok(names) = fs.listxattr(owner) {
                for n in names {
                    let _ = fs.getxattr(owner, &n);
                }
            }
            let _ = fs.setxattr(owner, b"user.more", &[1; 3000], XattrMode::Any);
            let _ = fs.unlink(ROOT_INO, b"owner");
            let _ = fs.close();
        }
        repair_leaves_it_clean(&dev, &format!("byte {at}: "));
    }
}

/// A record whose xattrs fill more than today's record space (written
/// under the bound before attributes 10 and 11 took their bytes) still
/// takes an xattr file: its largest xattrs move there with the new one,
/// and the record comes within the space.
#[test]
fn a_record_over_the_space_moves_its_largest_xattrs_out() {
    let (dev, _, other) = volume();
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    let space = fs.xattr_space();
    fs.close().unwrap();
    // Over the space by at most 11 bytes, less the 4-byte checksum of the
    // one block its record maps, so that the record stays in the bound.
    let half = (space + 11) / 2 - 4 - 6 - 4;
    patch_record(&dev, other, |a| {
        a.xattrs.insert(b"user.a".to_vec(), vec![1; half]);
        a.xattrs.insert(b"user.b".to_vec(), vec![2; half]);
        assert!(a.xattr_bytes() > space);
    });
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    fs.setxattr(other, b"user.c", &[3; 5000], XattrMode::Create)
        .unwrap();
    fs.close().unwrap();
    assert!(record_of(&dev, other).2.xattr_bytes() <= space);
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    assert_eq!(fs.getxattr(other, b"user.a").unwrap(), vec![1; half]);
    assert_eq!(fs.getxattr(other, b"user.b").unwrap(), vec![2; half]);
    assert_eq!(fs.getxattr(other, b"user.c").unwrap(), vec![3; 5000]);
    fs.close().unwrap();
    let r = check(dev.clone(), &FsckOptions::default()).unwrap();
    assert!(r.problems.is_empty(), "{:?}", r.problems);
}
