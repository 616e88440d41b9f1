//! Helpers shared by the fuzz targets and the seed generator: turning an
//! input into a whole-block image, resealing checksums so damage reaches the
//! decoders, building small valid images through the API, and the bounded
//! namespace walk and changes every target runs on a volume that mounted.
//!
//! `fields` lists the fields of a metadata block for the structure-aware
//! `resealed_image` target.
//!
//! Every engine call here may fail; errors are ignored. Only a panic, a hang
//! (libFuzzer's -timeout) or an out-of-memory is a finding.

pub mod fields;
pub mod matrix;

use std::collections::HashSet;
use std::sync::Arc;
use tux3::codec::block_crc;
use tux3::device::{Device, MemDevice};
use tux3::structures::superblock;
use tux3::{FileType, FormatOptions, Fs, Ino, OpenOptions, RenameFlags, XattrMode, ROOT_INO};

/// Block size of every fuzzed image.
pub const BS: usize = 1024;
/// Smallest volume mkfs accepts (64 blocks); shorter inputs are zero-padded.
pub const MIN_BLOCKS: usize = 64;
/// Longest image used; longer inputs are cut (libFuzzer's -max_len bounds them too).
pub const MAX_BLOCKS: usize = 256;
/// Blocks of the seed images.
pub const SEED_BLOCKS: u64 = 192;

/// Option bit in the first byte after the whole blocks: reseal checksums.
pub const OPT_RESEAL: u8 = 1;

/// The input as an image of whole 1 KiB blocks (between 64 and 256 blocks),
/// and the option byte: the first byte after the last whole block, if any.
pub fn fit(data: &[u8]) -> (Vec<u8>, u8) {
    let whole = (data.len() / BS).min(MAX_BLOCKS);
    let opts = data.get(whole * BS).copied().unwrap_or(0);
    let mut img = data[..whole * BS].to_vec();
    img.resize(whole.max(MIN_BLOCKS) * BS, 0);
    (img, opts)
}

/// Block magics (bytes 0..4) of the checksummed block kinds past the superblocks.
const MAGICS: [&[u8; 4]; 4] = [b"T3LG", b"T3BM", b"T3LF", b"T3BR"];

/// Recompute the checksum of block `n` if it is a metadata block (by magic),
/// so that damage elsewhere in it reaches the decoders. Returns the new crc.
pub fn reseal_block(img: &mut [u8], n: usize) -> Option<u32> {
    let b = img.get_mut(n * BS..(n + 1) * BS)?;
    if n < 2 {
        if &b[..8] != superblock::MAGIC {
            return None;
        }
        b[8..12].fill(0);
        let crc = crc32c::crc32c(b);
        b[8..12].copy_from_slice(&crc.to_le_bytes());
        return Some(crc);
    }
    if !MAGICS.iter().any(|m| &b[..4] == *m) {
        return None;
    }
    let crc = block_crc(b);
    b[4..8].copy_from_slice(&crc.to_le_bytes());
    Some(crc)
}

/// Reseal every metadata block of the image.
pub fn reseal_all(img: &mut [u8]) {
    for n in 0..img.len() / BS {
        reseal_block(img, n);
    }
}

/// Reseal the blocks `touched` of an image whose log chain is `log` (its
/// committed blocks in order, then the reserved next one): each log block
/// is resealed and its successor given the new checksum, so the chain
/// still links; then the other touched blocks.
pub fn reseal_changed(img: &mut [u8], log: &[usize], touched: impl IntoIterator<Item = usize>) {
    let mut rest: std::collections::BTreeSet<usize> = touched.into_iter().collect();
    let mut prev: Option<u32> = None;
    for &b in log {
        let at = b * BS;
        if let Some(crc) = prev {
            if img.get(at..at + 4) == Some(b"T3LG".as_slice()) {
                img[at + 40..at + 44].copy_from_slice(&crc.to_le_bytes());
            }
        }
        prev = reseal_block(img, b);
        rest.remove(&b);
    }
    for b in rest {
        reseal_block(img, b);
    }
}

/// The blocks of `img` a structure-aware mutation may touch: its live
/// metadata blocks (superblock copies, tree nodes, bitmap and log blocks),
/// sorted, and its committed log blocks in chain order followed by the
/// reserved next one (for [`reseal_changed`]).
pub fn live_blocks(img: &[u8]) -> (Vec<usize>, Vec<usize>) {
    let dev = device(img);
    let sb = superblock::Superblock::load(dev.as_ref()).expect("base superblock");
    let chain = tux3::log::read_chain(dev.as_ref(), sb.log_start()).expect("base log");
    let mut log: Vec<usize> = chain.blocks().map(|b| b as usize).collect();
    log.push(chain.tail.next as usize);
    let mut meta: std::collections::BTreeSet<usize> = tux3_tools::fsck::metadata_blocks(dev)
        .expect("base metadata")
        .into_iter()
        .map(|b| b as usize)
        .collect();
    meta.extend([0, 1]);
    meta.extend(log.iter().copied());
    (meta.into_iter().collect(), log)
}

/// A memory device over a copy of `img`.
pub fn device(img: &[u8]) -> Arc<dyn Device> {
    Arc::new(MemDevice::from_image(BS as u32, img.to_vec()))
}

/// Most directory entries and file bytes one walk visits.
const MAX_ENTRIES: usize = 10_000;
const MAX_BYTES: u64 = 4 << 20;
const MAX_DEPTH: u32 = 64;

/// Every name below the root (bounded): getattr, lookup, xattrs, every
/// regular file read, every symlink read. Returns a few (dir, name) pairs
/// for `change` to remove.
pub fn walk(fs: &Fs) -> Vec<(Ino, Vec<u8>, FileType)> {
    let _ = fs.statfs();
    let mut found = Vec::new();
    let mut seen: HashSet<Ino> = HashSet::from([ROOT_INO]);
    let mut stack = vec![(ROOT_INO, 0u32)];
    let (mut entries, mut bytes) = (0usize, 0u64);
    while let Some((dir, depth)) = stack.pop() {
        let mut pos = 0;
        while entries < MAX_ENTRIES {
            let Ok(batch) = fs.readdir(dir, pos, 64) else {
                break;
            };
            let Some(last) = batch.last() else { break };
            if last.next <= pos {
                break; // A position that does not advance would loop forever here.
            }
            pos = last.next;
            for e in batch {
                entries += 1;
                let _ = fs.lookup(dir, &e.name);
                let Ok(a) = fs.getattr(e.ino) else { continue };
                if let Ok(names) = fs.listxattr(e.ino) {
                    for n in names.iter().take(16) {
                        let _ = fs.getxattr(e.ino, n);
                    }
                }
                if found.len() < 8 && e.name != b"." && e.name != b".." {
                    found.push((dir, e.name.clone(), a.kind));
                }
                match a.kind {
                    FileType::Directory if depth < MAX_DEPTH && seen.insert(e.ino) => {
                        stack.push((e.ino, depth + 1))
                    }
                    FileType::Regular => {
                        let _ = fs.seek_data(e.ino, 0, false);
                        let mut off = 0;
                        while off < a.size && bytes < MAX_BYTES {
                            match fs.read(e.ino, off, 64 << 10) {
                                Ok(b) if !b.is_empty() => {
                                    off += b.len() as u64;
                                    bytes += b.len() as u64;
                                }
                                _ => break,
                            }
                        }
                    }
                    FileType::Symlink => {
                        let _ = fs.readlink(e.ino);
                    }
                    _ => {}
                }
            }
        }
    }
    found
}

/// A few changes and commits on a (possibly damaged) volume.
pub fn change(fs: &Fs, found: &[(Ino, Vec<u8>, FileType)]) {
    if let Ok(a) = fs.create(ROOT_INO, b"fuzz-new", 0o644, 0, 0) {
        let _ = fs.write(a.ino, 0, &[7u8; 3000]);
        let _ = fs.write(a.ino, 9000, b"tail");
        let _ = fs.setxattr(a.ino, b"user.fuzz", b"value", XattrMode::Any);
    }
    if let Ok(d) = fs.mkdir(ROOT_INO, b"fuzz-dir", 0o755, 0, 0) {
        let _ = fs.rename(ROOT_INO, b"fuzz-new", d.ino, b"moved", RenameFlags::default());
    }
    for (dir, name, kind) in found.iter().take(3) {
        let _ = match kind {
            FileType::Directory => fs.rmdir(*dir, name),
            _ => fs.unlink(*dir, name),
        };
    }
    let _ = fs.sync();
    let _ = fs.unify();
    let _ = fs.unlink(ROOT_INO, b"fuzz-dir");
    let _ = fs.sync();
}

/// Open the image; if it mounts, walk it, change it and close it.
pub fn exercise(dev: Arc<dyn Device>) {
    if let Ok(fs) = Fs::open(dev, OpenOptions::default()) {
        let found = walk(&fs);
        change(&fs, &found);
        let _ = fs.close();
    }
}

/// fsck (with repair, whose first pass is the plain check) and dump.
pub fn check(dev: Arc<dyn Device>) {
    let _ = tux3_tools::dump::report(dev.clone());
    let opts = tux3_tools::fsck::FsckOptions {
        repair: true,
        progress: false,
        data: true,
    };
    let _ = tux3_tools::fsck::check(dev, &opts);
}

// ---- Seed images, built through the API on a memory device ----

/// A freshly formatted volume of `SEED_BLOCKS` blocks and its device.
fn formatted() -> (Arc<MemDevice>, Fs) {
    let mem = Arc::new(MemDevice::new(BS as u32, SEED_BLOCKS));
    let dev: Arc<dyn Device> = mem.clone();
    Fs::format(dev.clone(), &FormatOptions::default()).expect("format");
    let opts = OpenOptions {
        unify_log_blocks: 1 << 20,
        ..OpenOptions::default()
    };
    let fs = Fs::open(dev, opts).expect("open");
    (mem, fs)
}

/// Files, directories, a symlink, a fifo, a hard link, xattrs, a sparse file.
fn populate(fs: &Fs, tag: u32) {
    let d = fs
        .mkdir(ROOT_INO, format!("d{tag}").as_bytes(), 0o755, 0, 0)
        .unwrap();
    let sub = fs.mkdir(d.ino, b"sub", 0o700, 1, 1).unwrap();
    for i in 0..6u32 {
        let parent = if i % 2 == 0 { d.ino } else { sub.ino };
        let f = fs
            .create(parent, format!("file-{tag}-{i}").as_bytes(), 0o644, 0, 0)
            .unwrap();
        let data: Vec<u8> = (0..i * 700).map(|x| (x * 31 + i) as u8).collect();
        fs.write(f.ino, 0, &data).unwrap();
        if i == 3 {
            fs.link(f.ino, ROOT_INO, format!("link{tag}").as_bytes()).unwrap();
            fs.setxattr(f.ino, b"user.k", b"v", XattrMode::Any).unwrap();
            // Inode flags (attribute 11) that refuse no change.
            fs.set_flags(f.ino, tux3::types::flags::NODUMP | tux3::types::flags::NOATIME)
                .unwrap();
        }
    }
    let sparse = fs.create(d.ino, b"sparse", 0o600, 0, 0).unwrap();
    fs.write(sparse.ino, 20 * BS as u64, b"far").unwrap();
    fs.symlink(sub.ino, b"sym", b"../file-0-0", 0, 0).unwrap();
    fs.mknod(d.ino, b"fifo", libc_fifo() | 0o644, 0, 0, 0).unwrap();
}

fn libc_fifo() -> u32 {
    0o010000 // S_IFIFO
}

/// Many small entries in one delta: a delta spanning several log blocks.
fn many_entries(fs: &Fs) -> u64 {
    let big = fs.mkdir(ROOT_INO, b"many", 0o755, 0, 0).unwrap();
    for i in 0..60u32 {
        fs.mknod(
            big.ino,
            format!("entry-{i}").as_bytes(),
            libc_fifo() | 0o644,
            0,
            0,
            0,
        )
        .unwrap();
    }
    big.ino
}

/// The seed images, by name. Images "crash-*" and "unified-log" end with a
/// log that `Fs::open` replays (dropped without close after a sync).
pub fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let mut out = Vec::new();

    let (mem, fs) = formatted();
    fs.close().unwrap();
    out.push(("fresh", mem.image()));

    let (mem, fs) = formatted();
    populate(&fs, 0);
    fs.close().unwrap();
    out.push(("populated", mem.image()));

    // Crash after a sync, remount (replay), more changes, sync, crash again.
    let (mem, fs) = formatted();
    populate(&fs, 0);
    fs.sync().unwrap();
    drop(fs);
    let dev: Arc<dyn Device> = mem.clone();
    let fs = Fs::open(dev, OpenOptions::default()).expect("reopen");
    populate(&fs, 1);
    fs.unlink(ROOT_INO, b"link0").unwrap();
    fs.rename(ROOT_INO, b"d0", ROOT_INO, b"renamed", RenameFlags::default())
        .unwrap();
    fs.sync().unwrap();
    drop(fs);
    out.push(("crash-log", mem.image()));

    // A unify, then several deltas in the log, one spanning several blocks.
    let (mem, fs) = formatted();
    populate(&fs, 0);
    fs.sync().unwrap();
    fs.unify().unwrap();
    for round in 0..3u32 {
        let f = fs
            .create(ROOT_INO, format!("late{round}").as_bytes(), 0o600, 0, 0)
            .unwrap();
        fs.write(f.ino, 0, &vec![round as u8; 1500]).unwrap();
        fs.sync().unwrap();
    }
    let many = many_entries(&fs);
    fs.unlink(ROOT_INO, b"late1").unwrap();
    // Inodes made together and freed in a row: one `DropRun` record.
    for i in 10..20u32 {
        fs.unlink(many, format!("entry-{i}").as_bytes()).unwrap();
    }
    fs.sync().unwrap();
    drop(fs);
    out.push(("unified-log", mem.image()));

    // Just after a unify, closed cleanly.
    let (mem, fs) = formatted();
    populate(&fs, 0);
    many_entries(&fs);
    fs.sync().unwrap();
    fs.unify().unwrap();
    fs.close().unwrap();
    out.push(("unified", mem.image()));

    // Snapshots: one taken here, one recorded as received (its origin in
    // the table record), the live volume changed between them, one
    // deleted in the log after the last unify (its reclaim there too).
    let (mem, fs) = formatted();
    populate(&fs, 0);
    fs.snapshot_create(b"here").unwrap();
    populate(&fs, 1);
    let origin = tux3::types::SnapOrigin {
        volume: 0x005e_ed0f_0123,
        id: 7,
    };
    fs.snapshot_create_received(b"received", origin).unwrap();
    fs.unlink(ROOT_INO, b"link0").unwrap();
    fs.snapshot_delete(b"here").unwrap();
    fs.sync().unwrap();
    drop(fs);
    out.push(("snapshots", mem.image()));

    // Data checksums: a file whose record holds its map and the sums
    // (attributes 9 and 12), one of 66 blocks (two summed leaf entries,
    // the longest 64 blocks) overwritten in part in the log; and the same
    // on a volume made without checksums.
    for (name, data_sums) in [("data-sums", true), ("no-data-sums", false)] {
        let mem = Arc::new(MemDevice::new(BS as u32, SEED_BLOCKS));
        let dev: Arc<dyn Device> = mem.clone();
        let opts = FormatOptions {
            data_sums,
            ..FormatOptions::default()
        };
        Fs::format(dev.clone(), &opts).expect("format");
        let fs = Fs::open(dev, OpenOptions::default()).expect("open");
        let small = fs.create(ROOT_INO, b"small", 0o644, 0, 0).unwrap().ino;
        fs.write(small, 0, &[0x51; 2500]).unwrap();
        let big = fs.create(ROOT_INO, b"big", 0o644, 0, 0).unwrap().ino;
        fs.write(big, 0, &vec![0x52; 66 * BS]).unwrap();
        fs.sync().unwrap();
        fs.unify().unwrap();
        fs.write(big, 10 * BS as u64, &[0x53; 3 * BS]).unwrap();
        fs.sync().unwrap();
        drop(fs);
        out.push((name, mem.image()));
    }

    // Known damage (the scrub state record, attributes 13 and 14): a
    // volume a scrub ran on, then a data block of one file in a tree and
    // one of a file whose record holds its map damaged behind its back,
    // and recorded by a repair.
    let (mem, fs) = formatted();
    populate(&fs, 0);
    let tree = fs.create(ROOT_INO, b"damaged-tree", 0o644, 0, 0).unwrap().ino;
    fs.write(tree, 0, &pattern_bytes(8 * BS)).unwrap();
    let small = fs.lookup(ROOT_INO, b"link0").unwrap().ino;
    // Unified, so the damage is not taken for a torn last commit.
    fs.sync().unwrap();
    fs.unify().unwrap();
    fs.save_scrub_state(&tux3::structures::scrub_state::ScrubState::default())
        .unwrap();
    let runs = [(tree, 5), (small, 0)].map(|(ino, l)| fs.data_runs(ino, l, 1).unwrap()[0].pblock);
    fs.close().unwrap();
    for b in runs {
        let mut block = vec![0u8; BS];
        mem.read(b, &mut block).unwrap();
        block[100] ^= 0xff;
        mem.write(b, &block).unwrap();
    }
    let opts = tux3_tools::fsck::FsckOptions {
        repair: true,
        progress: false,
        data: true,
    };
    let dev: Arc<dyn Device> = mem.clone();
    let r = tux3_tools::fsck::check(dev, &opts).expect("repair");
    assert!(r.problems.is_empty() && r.repaired.len() == 2, "{r:?}");
    out.push(("known-damage", mem.image()));

    // Xattrs the records cannot hold, in xattr files: a large value, a
    // long name and a burst of names; one replaced after a snapshot (which
    // keeps the old file's blocks), one owner unlinked in the log.
    let (mem, fs) = formatted();
    let a = fs.create(ROOT_INO, b"xa", 0o644, 0, 0).unwrap().ino;
    let b = fs.create(ROOT_INO, b"xb", 0o644, 0, 0).unwrap().ino;
    let c = fs.create(ROOT_INO, b"xc", 0o644, 0, 0).unwrap().ino;
    let long = [b"user.".as_slice(), &[b'n'; 250]].concat();
    let _ = fs.setxattr(a, b"user.big", &[0x3c; 6000], XattrMode::Create);
    let _ = fs.setxattr(a, &long, b"long name", XattrMode::Create);
    for k in 0..60u32 {
        let _ = fs.setxattr(
            b,
            format!("user.n{k:03}").as_bytes(),
            &k.to_le_bytes(),
            XattrMode::Create,
        );
    }
    let _ = fs.setxattr(c, b"user.gone", &[0x5d; 2000], XattrMode::Create);
    fs.sync().unwrap();
    fs.unify().unwrap();
    fs.snapshot_create(b"before").unwrap();
    let _ = fs.setxattr(a, b"user.big", &[0x4e; 3000], XattrMode::Replace);
    fs.unlink(ROOT_INO, b"xc").unwrap();
    fs.sync().unwrap();
    drop(fs);
    out.push(("xattr-files", mem.image()));

    // Preallocated (unwritten) extents: in a leaf unified, in the log,
    // past the end of file, partly written, punched and zeroed.
    let (mem, fs) = formatted();
    populate(&fs, 0);
    // fallocate modes (linux/falloc.h): KEEP_SIZE, PUNCH_HOLE, ZERO_RANGE.
    let (keep, punch, zero) = (0x01, 0x02 | 0x01, 0x10);
    let f = fs.create(ROOT_INO, b"prealloc", 0o644, 0, 0).unwrap().ino;
    fs.fallocate(f, 0, 0, 24 * 1024).unwrap();
    fs.fallocate(f, keep, 30 * 1024, 8 * 1024).unwrap();
    fs.write(f, 3 * 1024, &[0x5a; 4096]).unwrap();
    fs.sync().unwrap();
    fs.unify().unwrap();
    fs.fallocate(f, punch, 4 * 1024, 2048).unwrap();
    fs.fallocate(f, zero, 10 * 1024, 5000).unwrap();
    fs.sync().unwrap();
    drop(fs);
    out.push(("preallocated", mem.image()));

    // Shared extents: clones (whole, partial, onto another range of the
    // same file) and a dedupe, unified so the table's runs are in the
    // snapshot table's tree, closed cleanly; then more clones, an
    // overwrite of a shared block and an unlink after that unify, in the
    // log as Share records.
    let (mem, fs) = formatted();
    let a = fs.create(ROOT_INO, b"orig", 0o644, 0, 0).unwrap().ino;
    fs.write(a, 0, &pattern_bytes(12 * BS + 300)).unwrap();
    let b = fs.create(ROOT_INO, b"copy", 0o644, 0, 0).unwrap().ino;
    let c = fs.create(ROOT_INO, b"part", 0o644, 0, 0).unwrap().ino;
    fs.sync().unwrap();
    fs.clone_range(a, 0, b, 0, u64::MAX).unwrap();
    fs.clone_range(a, 2 * BS as u64, c, 0, 5 * BS as u64).unwrap();
    fs.clone_range(a, 0, a, 16 * BS as u64, 3 * BS as u64).unwrap();
    fs.write(c, 6 * BS as u64, &pattern_bytes(2 * BS)).unwrap();
    fs.write(b, 20 * BS as u64, &pattern_bytes(2 * BS)).unwrap();
    fs.sync().unwrap();
    fs.dedupe_range(c, 6 * BS as u64, b, 20 * BS as u64, 2 * BS as u64)
        .unwrap();
    fs.sync().unwrap();
    fs.unify().unwrap();
    fs.close().unwrap();
    out.push(("shared-unified", mem.image()));
    let dev: Arc<dyn Device> = mem.clone();
    let fs = Fs::open(dev, OpenOptions::default()).expect("reopen");
    let d = fs.create(ROOT_INO, b"late", 0o644, 0, 0).unwrap().ino;
    fs.clone_range(b, 0, d, 0, 8 * BS as u64).unwrap();
    fs.write(a, BS as u64, &[0x77; 100]).unwrap();
    fs.unlink(ROOT_INO, b"part").unwrap();
    fs.sync().unwrap();
    drop(fs);
    out.push(("shared-log", mem.image()));
    out
}

/// `len` bytes of a pattern that repeats only every 251 bytes.
fn pattern_bytes(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}
