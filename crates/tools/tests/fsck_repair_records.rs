//! `fsck --repair` of a damaged field of an inode record or of the bitmap
//! file's map, each in one run that keeps every file: the bitmap file's
//! extent (its count, its start) rebuilt from the bitmap blocks on the
//! volume, an attribute's length or tag set back, a device number on a
//! file that is no device (the parent hint whose tag lost a bit), mode
//! bits above the file type, and a root whose mode names no type. Each
//! block is changed with a valid checksum, so only the decoders and the
//! checks see the damage.

mod image_util;

use std::sync::Arc;
use tux3::codec::reseal;
use tux3::device::{Device, MemDevice};
use tux3::structures::superblock::Superblock;
use tux3::{FormatOptions, Fs, Ino, OpenOptions, ROOT_INO};
use tux3_tools::fsck::FsckReport;

const FILES: usize = 6;

/// A volume with directory /d holding f0..f5, each with a little data,
/// unified (twice: the bitmap block has an older copy) and closed.
fn volume() -> Arc<dyn Device> {
    let dev: Arc<dyn Device> = Arc::new(MemDevice::new(4096, 4096));
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap().ino;
    for i in 0..FILES {
        let f = fs.create(d, format!("f{i}").as_bytes(), 0o644, 0, 0).unwrap().ino;
        fs.write(f, 0, format!("data of f{i}").as_bytes()).unwrap();
        if i == FILES / 2 {
            fs.unify().unwrap();
        }
    }
    fs.unify().unwrap();
    fs.close().unwrap();
    dev
}

/// The names in /d and the data of each file.
fn listing(dev: &Arc<dyn Device>) -> Vec<(Vec<u8>, Vec<u8>)> {
    image_util::dir_listing(dev, b"d", 100)
}

fn file(dev: &Arc<dyn Device>, name: &[u8]) -> Ino {
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    let d = fs.lookup(ROOT_INO, b"d").unwrap().ino;
    let ino = fs.lookup(d, name).unwrap().ino;
    fs.close().unwrap();
    ino
}

/// `found` in a problem line before the repair, `repaired` in a repaired
/// line, the next check clean and every file of /d there with its data.
fn repaired_keeping_all(
    dev: &Arc<dyn Device>,
    before: &[(Vec<u8>, Vec<u8>)],
    found: &[&str],
    repaired: &[&str],
) -> FsckReport {
    let first = image_util::fsck(dev, false, true);
    assert!(image_util::has(&first.problems, found), "{:?}", first.problems);
    let r = image_util::fsck(dev, true, true);
    assert!(r.problems.is_empty(), "left after the repair: {:?}", r.problems);
    assert!(image_util::has(&r.repaired, repaired), "{:?}", r.repaired);
    let again = image_util::fsck(dev, false, true);
    assert!(again.problems.is_empty(), "second check: {:?}", again.problems);
    assert_eq!(&listing(dev), before, "repaired: {:?}", r.repaired);
    r
}

/// The bitmap file's leaf (the root of its tree: one leaf on a small
/// volume), its extent's value changed by `f`.
fn damage_bitmap_extent(dev: &Arc<dyn Device>, f: impl FnOnce(&mut [u8])) {
    let sb = Superblock::load(dev.as_ref()).unwrap();
    assert_eq!(sb.bitmap.depth, 0);
    let mut buf = vec![0u8; 4096];
    dev.read(sb.bitmap.addr, &mut buf).unwrap();
    // Header 32, key 8, length 2: the first value.
    f(&mut buf[42..54]);
    reseal(&mut buf);
    dev.write(sb.bitmap.addr, &buf).unwrap();
}

#[test]
fn a_bitmap_extent_of_length_0_is_rebuilt_from_the_bitmap_blocks() {
    let dev = volume();
    let before = listing(&dev);
    damage_bitmap_extent(&dev, |v| v[8..12].copy_from_slice(&0u32.to_le_bytes()));
    repaired_keeping_all(
        &dev,
        &before,
        &["cannot be mounted", "bad length"],
        &["rebuilt the bitmap file's map", "0 at block"],
    );
}

#[test]
fn a_bitmap_extent_that_leads_elsewhere_is_rebuilt_from_the_bitmap_blocks() {
    let dev = volume();
    let before = listing(&dev);
    let sb = Superblock::load(dev.as_ref()).unwrap();
    // Its start: the leaf itself, then past the volume.
    damage_bitmap_extent(&dev, |v| v[..8].copy_from_slice(&sb.bitmap.addr.to_le_bytes()));
    repaired_keeping_all(
        &dev,
        &before,
        &["cannot be mounted", "bad magic"],
        &["rebuilt the bitmap file's map"],
    );
    damage_bitmap_extent(&dev, |v| v[..8].copy_from_slice(&u64::MAX.to_le_bytes()));
    repaired_keeping_all(
        &dev,
        &before,
        &["outside the volume"],
        &["rebuilt the bitmap file's map"],
    );
}

/// The offset of the attribute with `tag` in record `raw`.
fn attr(raw: &[u8], tag: u8) -> usize {
    let mut at = 0;
    while raw[at] != tag {
        at += 3 + u16::from_le_bytes([raw[at + 1], raw[at + 2]]) as usize;
    }
    at
}

#[test]
fn an_attribute_length_is_set_back() {
    let dev = volume();
    let before = listing(&dev);
    // The root's times, one byte longer; a file's size, past the record.
    image_util::edit_raw_record(&dev, ROOT_INO, |raw| {
        let at = attr(raw, 3);
        raw[at + 1] = 49;
    });
    repaired_keeping_all(
        &dev,
        &before,
        &["inode 1", "attribute 3 has length 49, expected 48"],
        &["length 49 back to 48"],
    );
    let f = file(&dev, b"f2");
    image_util::edit_raw_record(&dev, f, |raw| {
        let at = attr(raw, 2);
        raw[at + 1..at + 3].copy_from_slice(&u16::MAX.to_le_bytes());
    });
    repaired_keeping_all(&dev, &before, &["runs past the end"], &["length 65535 back to 8"]);
}

#[test]
fn an_attribute_tag_is_set_back() {
    let dev = volume();
    let before = listing(&dev);
    let f = file(&dev, b"f1");
    image_util::edit_raw_record(&dev, f, |raw| {
        let at = attr(raw, 1);
        raw[at] = 0;
    });
    repaired_keeping_all(&dev, &before, &["unknown attribute tag 0"], &["tag 0 back to 1"]);
    assert_eq!(image_util::record(&dev, f).mode, libc::S_IFREG | 0o644);
}

/// The parent hint's tag (5) less one bit is the device number's (4): a
/// device number on a regular file is found, and taken back for the hint.
#[test]
fn a_device_number_on_a_file_that_is_no_device_is_taken_for_its_parent() {
    let dev = volume();
    let before = listing(&dev);
    let f = file(&dev, b"f3");
    let parent = image_util::record(&dev, f).parent;
    assert_ne!(parent, 0);
    image_util::edit_raw_record(&dev, f, |raw| {
        let at = attr(raw, 5);
        raw[at] = 4;
    });
    repaired_keeping_all(&dev, &before, &["device number", "no device"], &["parent hint"]);
    let a = image_util::record(&dev, f);
    assert_eq!((a.rdev, a.parent), (0, parent));
}

#[test]
fn mode_bits_above_the_file_type_are_cleared() {
    let dev = volume();
    let before = listing(&dev);
    let f = file(&dev, b"f4");
    image_util::edit_raw_record(&dev, f, |raw| {
        let at = attr(raw, 1);
        raw[at + 5] |= 0x40;
    });
    repaired_keeping_all(&dev, &before, &["has bits above the file type"], &["to 0o100644"]);
    assert_eq!(image_util::record(&dev, f).mode, libc::S_IFREG | 0o644);
}

#[test]
fn a_root_whose_mode_names_no_type_is_a_directory_again() {
    let dev = volume();
    let before = listing(&dev);
    image_util::edit_raw_record(&dev, ROOT_INO, |raw| {
        let at = attr(raw, 1);
        raw[at + 3..at + 7].copy_from_slice(&0u32.to_le_bytes());
    });
    repaired_keeping_all(
        &dev,
        &before,
        &["inode 1: mode 0 names no file type"],
        &["gives it mode 40000"],
    );
    assert_eq!(image_util::record(&dev, ROOT_INO).mode, libc::S_IFDIR);
}

/// A file's extent held in its record, its start one block on (onto the
/// next file's block): its own block, left referenced by nothing, is
/// found by the checksums the record holds, and the extent mapped there
/// again.
#[test]
fn an_extent_in_a_record_that_went_astray_is_mapped_back_where_its_checksums_match() {
    let dev = volume();
    let before = listing(&dev);
    let f = file(&dev, b"f2");
    let home = image_util::record(&dev, f).inline[0].pblock;
    image_util::edit_inode(&dev, f, |a| a.inline[0].pblock += 1);
    repaired_keeping_all(
        &dev,
        &before,
        &["data checksum mismatch"],
        &["match them (repair maps the extent there)"],
    );
    assert_eq!(image_util::record(&dev, f).inline[0].pblock, home);
}

/// A symlink whose record holds its target's one extent, moved past the
/// end of the target: put back at logical block 0, the target read again.
#[test]
fn a_symlinks_extent_past_its_end_is_put_back_at_its_start() {
    let dev = volume();
    let before = listing(&dev);
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    let s = fs.symlink(ROOT_INO, b"s", b"the target of s", 0, 0).unwrap().ino;
    fs.unify().unwrap();
    fs.close().unwrap();
    assert_eq!(
        image_util::record(&dev, s).inline.len(),
        1,
        "the record holds the map"
    );
    image_util::edit_inode(&dev, s, |a| a.inline[0].lblock = 1);
    repaired_keeping_all(
        &dev,
        &before,
        &["starts at or beyond the end"],
        &["(repair puts it there)"],
    );
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    assert_eq!(fs.readlink(s).unwrap(), b"the target of s");
    fs.close().unwrap();
}
