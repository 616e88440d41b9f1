//! Corruption: every metadata block of a small image is damaged in turn —
//! single bit flips at pseudo-random offsets, zeroed, random bytes — and on
//! each damaged copy
//!  * `Fs::open` returns Ok or Err without panicking; when it mounts, a full
//!    namespace walk reading every file and symlink, then `close`, may fail
//!    but must not panic or hang;
//!  * `fsck::check` returns an error naming the block, or problems of which
//!    one names it ("block N").
//!
//! Truncated images and a wrong magic give one clear line. And fsck, its
//! repair, dump and the engine survive blocks changed *with* a valid
//! checksum (garbage that only the decoders' bounds checks stand between).
//!
//! Exemptions — damage nothing can detect, because the image is then
//! indistinguishable from a legitimate one:
//!  * the reserved next log block (beyond the committed end of the log): it
//!    holds nothing yet, whatever is in it is ignored by design;
//!  * the last committed log block, when the damage removes what marks it as
//!    a log block written at that address (zeroed, random bytes, or a flip
//!    in its magic or self-address fields): the image is then the same as
//!    after a crash just before that commit block landed, which replay must
//!    and does accept (the delta is lost, as it would be after that crash).
//!    A flip anywhere else in it is detected (log magic and address intact,
//!    checksum wrong), and damage to any earlier log block is detected by
//!    finding the committed rest of the chain after it.
//!
//! An older superblock copy is not exempt: fsck checks both copies.

use std::collections::HashSet;
use std::io::Write;
use std::sync::Arc;
use std::time::Instant;
use tux3::device::{Device, MemDevice};
use tux3::log::read_chain;
use tux3::open_path;
use tux3::structures::superblock::Superblock;
use tux3::{FileType, FormatOptions, Fs, Ino, OpenOptions, RenameFlags, ROOT_INO};
use tux3_tools::fsck;

/// Deterministic pseudo-random numbers (xorshift64*).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// A small volume with a few dozen files and directories, a unify, and
/// log deltas after it (dropped without close, so the log is replayed).
fn build(bs: u32, blocks: u64) -> Vec<u8> {
    let mem = Arc::new(MemDevice::new(bs, blocks));
    let dev: Arc<dyn Device> = mem.clone();
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    let opts = OpenOptions {
        unify_log_blocks: 1 << 20,
        ..OpenOptions::default()
    };
    let fs = Fs::open(dev.clone(), opts).unwrap();
    let mut dirs = vec![ROOT_INO];
    for i in 0..6u32 {
        let parent = dirs[i as usize / 2];
        dirs.push(
            fs.mkdir(parent, format!("dir{i}").as_bytes(), 0o755, 0, 0)
                .unwrap()
                .ino,
        );
    }
    for i in 0..30u32 {
        let dir = dirs[i as usize % dirs.len()];
        let f = fs
            .create(
                dir,
                format!("file-with-a-longer-name-{i}").as_bytes(),
                0o644,
                0,
                0,
            )
            .unwrap();
        let data: Vec<u8> = (0..(i * 97 % 3000)).map(|x| (x * 31 + i) as u8).collect();
        fs.write(f.ino, 0, &data).unwrap();
        if i % 7 == 0 {
            fs.link(f.ino, ROOT_INO, format!("link{i}").as_bytes()).unwrap();
        }
    }
    // A directory and a file big enough for branches in their trees.
    let big = fs.mkdir(ROOT_INO, b"big", 0o755, 0, 0).unwrap();
    for i in 0..40u32 {
        fs.mknod(
            big.ino,
            format!("entry-number-{i}").as_bytes(),
            libc::S_IFIFO | 0o644,
            0,
            0,
            0,
        )
        .unwrap();
    }
    let frag = fs.create(ROOT_INO, b"fragmented", 0o644, 0, 0).unwrap();
    for i in 0..(extents_for(bs)) {
        fs.write(frag.ino, 2 * i * bs as u64, &[i as u8; 100]).unwrap();
    }
    fs.symlink(dirs[1], b"sym", b"../file-with-a-longer-name-0", 0, 0)
        .unwrap();
    let sparse = fs.create(dirs[2], b"sparse", 0o644, 0, 0).unwrap();
    fs.write(sparse.ino, 40 * bs as u64, b"far").unwrap();
    fs.write(sparse.ino, 5 * bs as u64, b"near").unwrap();
    fs.sync().unwrap();
    fs.unify().unwrap();
    // Deltas after the unify: the log holds several committed blocks.
    for round in 0..4u32 {
        let f = fs
            .create(dirs[3], format!("late{round}").as_bytes(), 0o600, 0, 0)
            .unwrap();
        fs.write(f.ino, 0, &vec![round as u8; 1500]).unwrap();
        let i = round as usize * 5;
        fs.unlink(
            dirs[i % dirs.len()],
            format!("file-with-a-longer-name-{i}").as_bytes(),
        )
        .unwrap();
        fs.sync().unwrap();
    }
    fs.rename(dirs[1], b"dir2", ROOT_INO, b"moved", RenameFlags::default())
        .unwrap();
    for i in 40..50u32 {
        fs.mknod(
            big.ino,
            format!("entry-number-{i}").as_bytes(),
            libc::S_IFIFO | 0o644,
            0,
            0,
            0,
        )
        .unwrap();
    }
    fs.unlink(big.ino, b"entry-number-0").unwrap();
    fs.write(frag.ino, (2 * extents_for(bs) + 1) * bs as u64, b"more")
        .unwrap();
    fs.write(frag.ino, bs as u64, b"fill").unwrap();
    fs.sync().unwrap();
    assert!(fs.stats().log_blocks >= 4, "{:?}", fs.stats());
    drop(fs);
    mem.image()
}

/// Extents in the fragmented file: enough for three leaves.
fn extents_for(bs: u32) -> u64 {
    3 * (bs as u64 - 32) / 22
}

/// Does `text` name `block` as "block N" (N not followed by a digit)?
fn names_block(text: &str, block: u64) -> bool {
    let needle = format!("block {block}");
    text.match_indices(&needle)
        .any(|(i, _)| !text[i + needle.len()..].starts_with(|c: char| c.is_ascii_digit()))
}

/// Every name below the root, every file and symlink read; errors allowed.
fn walk(fs: &Fs) {
    let mut seen: HashSet<Ino> = HashSet::from([ROOT_INO]);
    let mut stack = vec![(ROOT_INO, 0u32)];
    while let Some((dir, depth)) = stack.pop() {
        let mut pos = 0;
        for _ in 0..10_000 {
            let Ok(batch) = fs.readdir(dir, pos, 64) else {
                break;
            };
            let Some(last) = batch.last() else { break };
            pos = last.next;
            for e in batch {
                let Ok(a) = fs.getattr(e.ino) else { continue };
                let _ = fs.lookup(dir, &e.name);
                match a.kind {
                    FileType::Directory if depth < 64 && seen.insert(e.ino) => stack.push((e.ino, depth + 1)),
                    FileType::Regular => {
                        let mut off = 0;
                        while off < a.size.min(8 << 20) {
                            match fs.read(e.ino, off, 64 << 10) {
                                Ok(b) if !b.is_empty() => off += b.len() as u64,
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
}

/// A few changes and a commit on a damaged volume; errors allowed.
fn change(fs: &Fs) {
    if let Ok(a) = fs.create(ROOT_INO, b"new-after-damage", 0o644, 0, 0) {
        let _ = fs.write(a.ino, 0, &[9u8; 5000]);
    }
    let _ = fs.unlink(ROOT_INO, b"fragmented");
    let _ = fs.unlink(ROOT_INO, b"link7");
    let _ = fs.rmdir(ROOT_INO, b"moved");
    let _ = fs.sync();
}

#[derive(Debug, Clone, Copy)]
enum Damage {
    Flip(usize),
    Zero,
    Random(u64),
}

fn damage(img: &mut [u8], bs: usize, block: u64, d: Damage) {
    let b = &mut img[block as usize * bs..(block as usize + 1) * bs];
    match d {
        Damage::Flip(bit) => b[bit / 8] ^= 1 << (bit % 8),
        Damage::Zero => b.fill(0),
        Damage::Random(seed) => {
            let mut r = Rng(seed | 1);
            for x in b.iter_mut() {
                *x = r.next() as u8;
            }
        }
    }
}

fn corrupt_each_block(bs: u32, blocks: u64) {
    let start = Instant::now();
    let image = build(bs, blocks);
    let clean: Arc<dyn Device> = Arc::new(MemDevice::from_image(bs, image.clone()));
    let r = fsck::check(clean.clone(), &Default::default()).unwrap();
    assert!(r.problems.is_empty(), "the image is not clean: {:#?}", r.problems);
    let meta = fsck::metadata_blocks(clean.clone()).unwrap();
    let sb = Superblock::load(clean.as_ref()).unwrap();
    let chain = read_chain(clean.as_ref(), sb.log_start()).unwrap();
    let log: Vec<u64> = chain.blocks().collect();
    assert!(log.len() >= 4, "{log:?}");
    let last_commit = *log.last().unwrap();
    let reserved = chain.tail.next;
    assert!(meta.contains(&0) && meta.contains(&1) && log.iter().all(|b| meta.contains(b)));
    assert!(!meta.contains(&reserved));

    let bsz = bs as usize;
    let mut rng = Rng(0x5eed ^ bs as u64);
    let mut missed = Vec::new();
    let (mut runs, mut exempted) = (0, 0);
    for &block in meta.iter().chain([reserved].iter()) {
        let mut kinds = vec![Damage::Zero, Damage::Random(rng.next())];
        // One flip in the first 64 bytes (headers), two anywhere.
        kinds.push(Damage::Flip((rng.next() % 512) as usize));
        for _ in 0..2 {
            kinds.push(Damage::Flip((rng.next() % (bsz as u64 * 8)) as usize));
        }
        for d in kinds {
            let mut img = image.clone();
            damage(&mut img, bsz, block, d);
            runs += 1;

            // fsck must name the block.
            let dev: Arc<dyn Device> = Arc::new(MemDevice::from_image(bs, img.clone()));
            let (found, text) = match fsck::check(dev, &Default::default()) {
                Err(e) => {
                    let t = e.to_string();
                    assert!(!t.contains('\n'), "multi-line error: {t}");
                    (names_block(&t, block), t)
                }
                // A damaged last log block looks exactly like a write torn
                // by a crash: fsck names it in a note, not a problem.
                Ok(r) => (
                    r.problems.iter().chain(&r.notes).any(|p| names_block(p, block)),
                    r.problems.join("\n"),
                ),
            };
            let marks_gone = match d {
                Damage::Zero | Damage::Random(_) => true,
                Damage::Flip(bit) => bit / 8 < 4 || (8..16).contains(&(bit / 8)),
            };
            let exempt = block == reserved || (block == last_commit && marks_gone);
            if !found && exempt {
                exempted += 1;
            }
            if !found && !exempt {
                missed.push(format!("block {block} {d:?}: {text}"));
            }

            // The engine must not panic on it.
            let dev: Arc<dyn Device> = Arc::new(MemDevice::from_image(bs, img));
            match Fs::open(dev, OpenOptions::default()) {
                Ok(fs) => {
                    walk(&fs);
                    change(&fs);
                    let _ = fs.close();
                }
                Err(e) => assert!(!e.to_string().contains('\n'), "multi-line error: {e}"),
            }
        }
    }
    assert!(
        missed.is_empty(),
        "undetected damage ({} of {runs} runs):\n{}",
        missed.len(),
        missed.join("\n\n")
    );
    eprintln!(
        "{bs}-byte blocks: {} metadata blocks, {runs} damaged images ({exempted} undetected, \
         all exempt) in {:?}",
        meta.len(),
        start.elapsed()
    );
}

#[test]
fn every_metadata_block_1k() {
    corrupt_each_block(1024, 1024);
}

#[test]
fn every_metadata_block_4k() {
    corrupt_each_block(4096, 2048);
}

/// Recompute the checksum of a damaged block so decoders see the garbage.
fn reseal(b: &mut [u8], block: u64) {
    if block < 2 {
        b[8..12].copy_from_slice(&[0; 4]);
        let crc = crc32c::crc32c(b);
        b[8..12].copy_from_slice(&crc.to_le_bytes());
    } else {
        b[4..8].copy_from_slice(&[0; 4]);
        let crc = tux3::codec::block_crc(b);
        b[4..8].copy_from_slice(&crc.to_le_bytes());
    }
}

#[test]
fn garbage_with_valid_checksums_never_panics() {
    let start = Instant::now();
    let bs = 1024u32;
    let image = build(bs, 1024);
    let clean: Arc<dyn Device> = Arc::new(MemDevice::from_image(bs, image.clone()));
    let meta = fsck::metadata_blocks(clean).unwrap();
    let bsz = bs as usize;
    let mut rng = Rng(0xfeed);
    let mut runs = 0;
    for &block in &meta {
        for round in 0..12 {
            let mut img = image.clone();
            let b = &mut img[block as usize * bsz..(block as usize + 1) * bsz];
            // Headers and counts live early in a block: aim there half the time.
            let span = if round % 2 == 0 { 128 } else { bsz as u64 };
            for _ in 0..1 + rng.next() % 3 {
                let at = (rng.next() % span) as usize;
                match rng.next() % 3 {
                    0 => b[at] ^= 1 << (rng.next() % 8),
                    1 => b[at] = 0xff,
                    _ => {
                        let v = rng.next().to_le_bytes();
                        let end = (at + 8).min(bsz);
                        b[at..end].copy_from_slice(&v[..end - at]);
                    }
                }
            }
            reseal(b, block);
            runs += 1;
            let dev: Arc<dyn Device> = Arc::new(MemDevice::from_image(bs, img.clone()));
            if let Err(e) = fsck::check(dev.clone(), &Default::default()) {
                assert!(!e.to_string().contains('\n'), "multi-line error: {e}");
            }
            let _ = tux3_tools::dump::report(dev.clone());
            let repair = fsck::FsckOptions {
                repair: true,
                progress: false,
                data: false,
            };
            let _ = fsck::check(dev, &repair);
            let dev: Arc<dyn Device> = Arc::new(MemDevice::from_image(bs, img));
            if let Ok(fs) = Fs::open(dev, OpenOptions::default()) {
                walk(&fs);
                change(&fs);
                let _ = fs.close();
            }
        }
    }
    eprintln!(
        "{runs} images with valid checksums checked in {:?}",
        start.elapsed()
    );
}

/// One line, no newline inside, and it says what is wrong.
fn one_line(e: &tux3::Error, what: &str) {
    let t = e.to_string();
    assert!(!t.contains('\n') && !t.is_empty(), "{t:?}");
    assert!(t.contains(what), "{t:?} does not say {what:?}");
}

#[test]
fn truncated_images_and_wrong_magic_give_one_line() {
    let bs = 1024u32;
    let image = build(bs, 400);
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, bytes: &[u8]| {
        let p = dir.path().join(name);
        std::fs::File::create(&p).unwrap().write_all(bytes).unwrap();
        p
    };
    let open_file = |p: &std::path::Path| -> Result<Fs, tux3::Error> {
        let dev = open_path(p, false)?;
        Fs::open(
            dev,
            OpenOptions {
                read_only: true,
                ..OpenOptions::default()
            },
        )
    };

    // Cut to half: the superblock says more blocks than there are.
    let half = &image[..image.len() / 2];
    let e = open_file(&write("half.img", half))
        .err()
        .expect("half image opened");
    one_line(&e, "truncated");
    let mem: Arc<dyn Device> = Arc::new(MemDevice::from_image(bs, half.to_vec()));
    one_line(
        &fsck::check(mem.clone(), &Default::default()).unwrap_err(),
        "truncated",
    );
    one_line(&Fs::open(mem, OpenOptions::default()).err().unwrap(), "truncated");

    // Cut to one block.
    let one = &image[..bs as usize];
    one_line(&open_file(&write("one.img", one)).err().unwrap(), "truncated");
    let mem: Arc<dyn Device> = Arc::new(MemDevice::from_image(bs, one.to_vec()));
    one_line(
        &fsck::check(mem.clone(), &Default::default()).unwrap_err(),
        "truncated",
    );
    one_line(&Fs::open(mem, OpenOptions::default()).err().unwrap(), "truncated");

    // Empty file.
    one_line(
        &open_file(&write("empty.img", &[])).err().unwrap(),
        "not a tux3 volume",
    );

    // Wrong magic in both copies.
    let mut bad = image.clone();
    bad[0] ^= 0xff;
    bad[bs as usize] ^= 0xff;
    one_line(
        &open_file(&write("magic.img", &bad)).err().unwrap(),
        "not a tux3 volume",
    );
    let mem: Arc<dyn Device> = Arc::new(MemDevice::from_image(bs, bad));
    one_line(
        &fsck::check(mem.clone(), &Default::default()).unwrap_err(),
        "not a tux3 volume",
    );
    one_line(
        &Fs::open(mem, OpenOptions::default()).err().unwrap(),
        "not a tux3 volume",
    );
}
