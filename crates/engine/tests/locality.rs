//! Scenario: where new files' data goes. Files created in two directories
//! by turns, a commit each round, end up with each directory's files
//! together: a new file's goal is the end of the last data written in its
//! directory, not the end of the last data written anywhere.

use std::sync::Arc;
use tux3::device::{Device, MemDevice};
use tux3::structures::inode::InodeAttrs;
use tux3::{FormatOptions, Fs, OpenOptions, ROOT_INO};

/// The device blocks of `ino`'s data, as the closed volume has them.
fn blocks_of(dev: &Arc<dyn Device>, ino: u64) -> Vec<u64> {
    let (mut be, replay) = tux3::backend::Backend::open(dev.clone(), true).unwrap();
    let raw = be.itable.get_mut().get(dev.as_ref(), ino).unwrap().unwrap();
    let attrs = InodeAttrs::decode(&raw, ino, 0, &tux3::structures::bounds(dev.as_ref())).unwrap();
    let mut tree = tux3_tools::datamap::data_tree(&be, ino, &attrs, replay.get(&ino)).unwrap();
    let extents = tux3_tools::datamap::tree_extents(dev.as_ref(), &mut tree).unwrap();
    extents
        .iter()
        .flat_map(|e| e.pblock..e.pblock + e.count)
        .collect()
}

#[test]
fn a_new_file_goes_near_its_directorys_files() {
    let dev: Arc<dyn Device> = Arc::new(MemDevice::new(4096, 8192));
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    let a = fs.mkdir(ROOT_INO, b"a", 0o755, 0, 0).unwrap().ino;
    let b = fs.mkdir(ROOT_INO, b"b", 0o755, 0, 0).unwrap().ino;
    let mut files = Vec::new();
    for i in 0..8u8 {
        let ino = fs.create(a, format!("f{i}").as_bytes(), 0o644, 0, 0).unwrap().ino;
        fs.write(ino, 0, &vec![i; 3 * 4096]).unwrap();
        files.push(ino);
    }
    fs.sync().unwrap();
    // Room among a's files: the blocks of a file deleted there.
    fs.unlink(a, b"f3").unwrap();
    files.remove(3);
    fs.sync().unwrap();
    // Much data elsewhere since.
    let big = fs.create(b, b"big", 0o644, 0, 0).unwrap().ino;
    fs.write(big, 0, &vec![9; 2 << 20]).unwrap();
    fs.sync().unwrap();
    fs.unify().unwrap();
    fs.unify().unwrap();
    let late = fs.create(a, b"late", 0o644, 0, 0).unwrap().ino;
    fs.write(late, 0, &vec![7; 3 * 4096]).unwrap();
    fs.close().unwrap();
    let a_blocks: Vec<u64> = files.iter().flat_map(|&i| blocks_of(&dev, i)).collect();
    let (lo, hi) = (a_blocks.iter().min().copied(), a_blocks.iter().max().copied());
    let (lo, hi) = (lo.unwrap(), hi.unwrap());
    let big_lo = blocks_of(&dev, big).into_iter().min().unwrap();
    assert!(
        hi < big_lo,
        "a's files {lo}..={hi} before the big file at {big_lo}"
    );
    let late = blocks_of(&dev, late);
    assert!(
        late.iter().all(|&x| x > hi && x < big_lo),
        "the late file at {late:?}: near a's files ({lo}..={hi}), not past the big file ({big_lo}..)"
    );
}
