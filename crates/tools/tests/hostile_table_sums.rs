//! Scenario: hostile checksum tables, every metadata checksum valid. A
//! volume of 1000 blocks (not a multiple of 64: its last chunk reaches
//! past the end) where `/a` (8 blocks, summed) is cloned whole to `/b`,
//! whose extent keeps its checksums in the checksum table, unified and
//! closed. Its table's chunk is rewritten in the snapshot table's leaf,
//! resealed: misaligned, naming a block past the end, of the wrong length
//! — a mount refuses each naming the leaf, fsck reports it and its repair
//! leaves a clean volume; deleted — the volume mounts, fsck names the
//! blocks without checksums and `--repair` computes them; a chunk added
//! for free blocks — fsck names it and `--repair` drops it; a checksum
//! changed — reads of `/b` fail and fsck names the mismatch, also while
//! `/a` maps the block with its own, right, checksum.
//! A volume whose table is in the log gets a committed log block appended
//! with a bad `Sums` record: its block is no log block of the chain (the
//! log ends before it, naming the record), nothing of it applied; a
//! well-formed one for free blocks is found by fsck and dropped. And
//! `/b`'s record has its table-sums attribute (15) edited: reads of `/b`
//! and fsck name the inode and the block, never a panic.
//!
//! Calls the engine's public API (Fs, Backend, btree node codec,
//! superblock, log chain reader, checksum-table codec) and
//! `tux3_tools::fsck` (through `image_util`).

mod image_util;

use image_util::*;
use std::sync::Arc;
use tux3::backend::alloc::sums::{decode_chunk, encode_chunk, SumChunk, CHUNK};
use tux3::backend::snapshot::{SHARED_KEY, SNAP_INO, SUMS_KEY};
use tux3::backend::Backend;
use tux3::device::Device;
use tux3::log::{read_chain, Record};
use tux3::structures::btree::node::{decode, Leaf, Node};
use tux3::structures::btree::{Tree, TreeKind};
use tux3::structures::superblock::Superblock;
use tux3::{Errno, Error, Fs, OpenOptions, ROOT_INO};

const BS: usize = 4096;
/// Not a multiple of [`CHUNK`]: the chunk at 960 reaches past the end.
const BLOCKS: u64 = 1000;
/// The table-sums attribute of an inode record and the extents one.
const TABLE_SUMS: u8 = 15;
const EXTENTS: u8 = 9;

fn pattern() -> Vec<u8> {
    (0..8 * BS).map(|i| (i % 251) as u8 ^ (i >> 12) as u8).collect()
}

/// A volume where `/a` (8 blocks, written, synced, unified) is cloned
/// whole to `/b` and synced; unified and closed when `unify` (else the
/// table is only in the log's `Sums` records). The device, `/a`, `/b`.
fn volume(unify: bool) -> (Arc<dyn Device>, u64, u64) {
    let dev = fresh(BLOCKS, true);
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    let a = fs.create(ROOT_INO, b"a", 0o644, 0, 0).unwrap().ino;
    fs.write(a, 0, &pattern()).unwrap();
    fs.sync().unwrap();
    fs.unify().unwrap();
    let b = fs.create(ROOT_INO, b"b", 0o644, 0, 0).unwrap().ino;
    fs.clone_range(a, 0, b, 0, u64::MAX).unwrap();
    fs.sync().unwrap();
    assert_eq!(fs.sharing().table_sums, 8);
    if unify {
        fs.unify().unwrap();
        fs.close().unwrap();
    } else {
        drop(fs); // a crash: the table is in the log
    }
    (dev, a, b)
}

fn mount_error(dev: &Arc<dyn Device>) -> String {
    match Fs::open(dev.clone(), OpenOptions::default()) {
        Ok(_) => panic!("the hostile volume mounted"),
        Err(e) => e.to_string(),
    }
}

/// The snapshot table's leaf holding the checksum table's chunks.
fn table_leaf(dev: &Arc<dyn Device>) -> (u64, Leaf) {
    let sb = Superblock::load(dev.as_ref()).unwrap();
    let mut t = Tree::open(SNAP_INO, TreeKind::Snapshots, sb.snapshots);
    let mut home = None;
    t.visit(dev.as_ref(), &mut |addr, _, _, n| {
        if let Node::Leaf(l) = n {
            if l.entries.iter().any(|e| is_chunk(e.0)) {
                home = Some(addr);
            }
        }
        Ok(())
    })
    .unwrap();
    let addr = home.expect("a leaf with checksum chunks");
    let mut buf = vec![0u8; BS];
    dev.read(addr, &mut buf).unwrap();
    let Node::Leaf(leaf) = decode(&buf, addr, SNAP_INO, TreeKind::Snapshots, 0, BLOCKS).unwrap() else {
        panic!("not a leaf")
    };
    (addr, leaf)
}

fn is_chunk(key: u64) -> bool {
    (SUMS_KEY..SHARED_KEY).contains(&key)
}

/// The chunks of the table's leaf: (start, value).
fn chunks(leaf: &Leaf) -> Vec<(u64, Vec<u8>)> {
    leaf.entries
        .iter()
        .filter(|e| is_chunk(e.0))
        .map(|e| (e.0 - SUMS_KEY, e.1.clone()))
        .collect()
}

/// Rewrite the table's leaf with its chunks as `change` leaves them
/// (start, value), resealed. The leaf's address.
fn set_chunks(dev: &Arc<dyn Device>, change: impl FnOnce(&mut Vec<(u64, Vec<u8>)>)) -> u64 {
    let (addr, mut leaf) = table_leaf(dev);
    let mut cs = chunks(&leaf);
    change(&mut cs);
    leaf.entries.retain(|e| !is_chunk(e.0));
    leaf.entries
        .extend(cs.into_iter().map(|(s, v)| (SUMS_KEY + s, v)));
    leaf.entries.sort_by_key(|e| e.0);
    dev.write(addr, &leaf.encode(addr, SNAP_INO, TreeKind::Snapshots, BS))
        .unwrap();
    addr
}

/// `/b`'s one extent: its first device block (the chunk holding it must
/// hold all 8: the tests below want one chunk).
fn b_extent(dev: &Arc<dyn Device>, b: u64) -> u64 {
    let map = extents_of(dev, b);
    assert_eq!(map.len(), 1, "{map:?}");
    let e = &map[0];
    assert!(e.table_sums && e.sums.is_empty() && e.count == 8, "{e:?}");
    assert_eq!(e.pblock / CHUNK, (e.pblock + 7) / CHUNK, "{e:?} spans two chunks");
    e.pblock
}

/// A free run of `n` blocks in the last, partial chunk of the volume.
fn free_run_at_end(dev: &Arc<dyn Device>, n: u64) -> u64 {
    let (be, _) = Backend::open(dev.clone(), true).unwrap();
    let start = BLOCKS - BLOCKS % CHUNK;
    assert!(
        (start..start + n).all(|b| !be.alloc.is_used(b)),
        "the end of the volume is in use"
    );
    start
}

/// fsck with data reads finds nothing; `/b` reads as written.
fn assert_clean(dev: &Arc<dyn Device>, b: u64) {
    let r = fsck(dev, false, true);
    assert!(r.problems.is_empty() && r.repaired.is_empty(), "{r:#?}");
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    assert_eq!(fs.read(b, 0, 1 << 16).unwrap(), pattern());
    fs.close().unwrap();
}

#[test]
fn the_clean_volume_keeps_the_clones_checksums_in_the_table() {
    let (dev, a, b) = volume(true);
    let start = b_extent(&dev, b);
    // The map is in `/b`'s record, with attribute 15.
    let rec = record(&dev, b);
    assert_eq!(rec.inline.len(), 1);
    assert!(rec.inline[0].table_sums);
    // The chunk on disk holds `/a`'s checksums of the same blocks.
    let a_map = extents_of(&dev, a);
    assert_eq!(a_map.len(), 1, "{a_map:?}");
    assert_eq!((a_map[0].pblock, a_map[0].sums.len()), (start, 8));
    let (leaf, node) = table_leaf(&dev);
    let cs = chunks(&node);
    assert_eq!(cs.len(), 1, "{cs:?}");
    let at = start - start % CHUNK;
    assert_eq!(cs[0].0, at);
    let c = decode_chunk(at, &cs[0].1, leaf, BLOCKS).unwrap();
    assert_eq!(c.mask, 0xff << (start - at));
    assert_eq!(c.sums, a_map[0].sums);
    assert_clean(&dev, b);
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    assert_eq!(fs.sharing().table_sums, 8);
    assert_eq!(fs.read(a, 0, 1 << 16).unwrap(), pattern());
    fs.close().unwrap();
}

/// A chunk `change` makes hostile: the mount refuses naming the leaf and
/// `want`, fsck reports the same, and fsck --repair takes the chunk out
/// and computes `/b`'s checksums again, leaving a clean volume.
fn refused(change: impl FnOnce(u64, &mut Vec<(u64, Vec<u8>)>), want: impl FnOnce(u64) -> String) {
    let (dev, _, b) = volume(true);
    let start = b_extent(&dev, b);
    let at = start - start % CHUNK;
    let leaf = set_chunks(&dev, |cs| change(at, cs));
    let want = want(at);
    let e = mount_error(&dev);
    assert!(e.contains(&want) && e.contains(&format!("block {leaf}")), "{e}");
    let r = fsck(&dev, false, false);
    assert!(
        has(&r.problems, &[&want, &format!("block {leaf}")]),
        "want {want:?}: {:#?}",
        r.problems
    );
    let r = fsck(&dev, true, false);
    assert!(has(&r.repaired, &[&want]), "{r:#?}");
    assert_clean(&dev, b);
    assert_eq!(b_extent(&dev, b), start);
}

#[test]
fn a_misaligned_chunk_is_refused_naming_its_leaf() {
    refused(
        |_, cs| cs[0].0 += 1,
        |at| format!("checksum chunk at block {} (mask", at + 1),
    );
}

#[test]
fn a_chunk_naming_blocks_past_the_end_is_refused_naming_its_leaf() {
    // The chunk at 960 is the volume's last: bit 45 is block 1005.
    let last = BLOCKS - BLOCKS % CHUNK;
    refused(
        |at, cs| {
            assert_ne!(at, last, "the clone's chunk is the last");
            let c = SumChunk {
                mask: 1 << 45 | 1,
                sums: vec![7, 9],
            };
            cs.push((last, encode_chunk(&c)));
        },
        |_| format!("checksum chunk at block {last} (mask 0x200000000001) outside the volume (2..{BLOCKS})"),
    );
}

#[test]
fn a_chunk_with_a_checksum_too_many_is_refused_naming_its_leaf() {
    refused(
        |_, cs| cs[0].1.extend_from_slice(&0x1234_5678u32.to_le_bytes()),
        |at| format!("checksum chunk at block {at}: bad length"),
    );
}

#[test]
fn a_chunk_cut_short_is_refused_naming_its_leaf() {
    // The last checksum lacks a byte: its read fails, naming the leaf.
    refused(
        |_, cs| {
            cs[0].1.pop();
        },
        |_| "checksum runs past the end (4 bytes at offset 36)".to_string(),
    );
}

#[test]
fn a_chunk_without_blocks_is_refused_naming_its_leaf() {
    refused(
        |_, cs| cs[0].1 = encode_chunk(&SumChunk::default()),
        |at| format!("checksum chunk at block {at} (mask 0x0)"),
    );
}

#[test]
fn a_deleted_chunk_is_named_and_computed_again() {
    let (dev, a, b) = volume(true);
    let start = b_extent(&dev, b);
    set_chunks(&dev, Vec::clear);
    // The table's shape is sound: the volume mounts, `/b` reads (its
    // blocks unchecked).
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    assert_eq!(fs.sharing().table_sums, 0);
    assert_eq!(fs.read(b, 0, 1 << 16).unwrap(), pattern());
    fs.close().unwrap();
    let r = fsck(&dev, false, true);
    let line = format!("inode {b}");
    assert!(
        has(
            &r.problems,
            &[&line, "8 of its blocks have no checksum in the checksum table"]
        ),
        "{:#?}",
        r.problems
    );
    let r = fsck(&dev, true, false);
    assert!(
        has(&r.repaired, &["have no checksum in the checksum table"]),
        "{r:#?}"
    );
    assert_clean(&dev, b);
    // The table holds them again, as `/a`'s extent has them.
    let (be, _) = Backend::open(dev.clone(), true).unwrap();
    let a_map = extents_of(&dev, a);
    assert_eq!(a_map[0].pblock, start);
    let got: Vec<Option<u32>> = (start..start + 8).map(|p| be.alloc.sums.get(p)).collect();
    let want: Vec<Option<u32>> = a_map[0].sums.iter().copied().map(Some).collect();
    assert_eq!(got, want);
}

#[test]
fn a_chunk_on_free_blocks_is_named_and_dropped() {
    let (dev, _, b) = volume(true);
    let free = free_run_at_end(&dev, 8);
    set_chunks(&dev, |cs| {
        let c = SumChunk {
            mask: 0xff,
            sums: (1..=8).collect(),
        };
        cs.push((free, encode_chunk(&c)));
    });
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    assert_eq!(fs.sharing().table_sums, 16);
    fs.close().unwrap();
    let want = format!("checksum table: blocks {free}+8 are free but have checksums");
    let r = fsck(&dev, false, true);
    assert!(has(&r.problems, &[&want]), "{:#?}", r.problems);
    let r = fsck(&dev, true, false);
    assert!(has(&r.repaired, &[&want, "repair drops them"]), "{r:#?}");
    assert_clean(&dev, b);
    let (be, _) = Backend::open(dev.clone(), true).unwrap();
    assert!((free..free + 8).all(|p| be.alloc.sums.get(p).is_none()));
    assert_eq!(be.alloc.sums.read().blocks(), 8);
}

/// `/b`'s first block's checksum in the table changed, after `/a` is
/// deleted when `drop_source` (then only `/b` maps the blocks). A read of
/// `/b`'s first block fails with EIO, the rest of it reads (and `/a`, with
/// its own checksums, when kept); fsck with data reads finds nothing
/// wrong with `/b`'s blocks 1-7. The first block and fsck's problems.
fn wrong_table_checksum(drop_source: bool) -> (u64, Vec<String>) {
    let (dev, a, b) = volume(true);
    let start = b_extent(&dev, b);
    if drop_source {
        let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
        fs.unlink(ROOT_INO, b"a").unwrap();
        fs.sync().unwrap();
        fs.unify().unwrap();
        assert_eq!(
            fs.sharing().table_sums,
            8,
            "the blocks are in use: they keep theirs"
        );
        fs.close().unwrap();
        assert_eq!(b_extent(&dev, b), start);
    }
    set_chunks(&dev, |cs| {
        // The chunk's first checksum is the clone's first block's.
        cs[0].1[8] ^= 0x5a;
    });
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    let e = fs.read(b, 0, 4096).expect_err("a read against a wrong checksum");
    assert_eq!(e.errno(), Errno::EIO, "{e}");
    assert_eq!(fs.read(b, 4096, 7 * 4096).unwrap(), pattern()[4096..]);
    if !drop_source {
        assert_eq!(fs.read(a, 0, 1 << 16).unwrap(), pattern());
    }
    fs.close().unwrap();
    let r = fsck(&dev, false, true);
    for k in 1..8 {
        let block = format!("block {}: ", start + k);
        assert!(!has(&r.problems, &[&block]), "{:#?}", r.problems);
    }
    (start, r.problems)
}

#[test]
fn a_wrong_checksum_in_the_table_fails_the_clones_reads_and_fsck_names_it() {
    let (start, problems) = wrong_table_checksum(true);
    let want = format!("block {start}: data checksum mismatch in /b (inode");
    assert!(has(&problems, &[&want]), "{problems:#?}");
}

/// The same while `/a` still maps the block with its own checksum, which
/// matches: `/b`'s reads fail all the same, so fsck should name the table's
/// checksum that disagrees with the data.
#[test]
fn a_wrong_table_checksum_is_found_while_the_source_still_maps_the_block() {
    let (start, problems) = wrong_table_checksum(false);
    assert!(
        has(&problems, &[&format!("block {start}")]),
        "fsck is clean while /b's block {start} fails to read: {problems:#?}"
    );
}

/// The replayed table (the log's `Sums` records applied): block -> sum
/// of every block it holds.
fn logged_table(dev: &Arc<dyn Device>) -> Vec<(u64, u32)> {
    let (be, _) = Backend::open(dev.clone(), true).unwrap();
    let t = be.alloc.sums.read();
    t.iter()
        .flat_map(|(at, c)| {
            (0..CHUNK)
                .filter(move |k| c.mask & (1 << k) != 0)
                .map(move |k| (at + k, c.get(k).unwrap()))
        })
        .collect()
}

#[test]
fn the_log_holds_the_table_and_replays_it() {
    let (dev, _, b) = volume(false);
    let chain = read_chain(dev.as_ref(), Superblock::load(dev.as_ref()).unwrap().log_start()).unwrap();
    let logged = chain
        .deltas
        .iter()
        .flat_map(|d| &d.records)
        .filter(|r| matches!(r, Record::Sums { .. }))
        .count();
    assert!(logged >= 1, "no Sums record in the log");
    assert_eq!(logged_table(&dev).len(), 8);
    assert_clean(&dev, b);
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    assert_eq!(fs.sharing().table_sums, 8);
    fs.close().unwrap();
}

/// A `Sums` record whose fields do not decode (a misaligned chunk, one
/// naming blocks past the end of the volume or below block 2) makes its
/// block no log block of the chain: the log ends before it, as after a
/// torn write, the reason naming the block and the chunk, and nothing of
/// it (nor of the commit after it) is applied.
#[test]
fn an_undecodable_sums_record_ends_the_log_before_it() {
    let (clean, _, _) = volume(false);
    let table = logged_table(&clean);
    let replayed = Fs::open(clean.clone(), OpenOptions::default())
        .unwrap()
        .stats()
        .replayed_deltas;
    let last = BLOCKS - BLOCKS % CHUNK;
    for (rec, want) in [
        (
            Record::Sums {
                start: 65,
                mask: 1,
                sums: vec![1],
            },
            "checksum chunk at block 65 (mask 0x1)".to_string(),
        ),
        (
            Record::Sums {
                start: last,
                mask: 1 << 40 | 1,
                sums: vec![1, 2],
            },
            format!("checksum chunk at block {last} (mask 0x10000000001)"),
        ),
        (
            Record::Sums {
                start: 0,
                mask: 0b110,
                sums: vec![1, 2],
            },
            "checksum chunk at block 0 (mask 0x6)".to_string(),
        ),
    ] {
        let (dev, _, b) = volume(false);
        let at = append_commits(&dev, vec![vec![rec.clone()], Vec::new()]);
        let sb = Superblock::load(dev.as_ref()).unwrap();
        let chain = read_chain(dev.as_ref(), sb.log_start()).unwrap();
        assert!(
            chain.end.contains(&format!("block {at}")) && chain.end.contains(&want),
            "{rec:?}: {}",
            chain.end
        );
        let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
        assert_eq!(fs.stats().replayed_deltas, replayed, "{rec:?}");
        assert_eq!(fs.sharing().table_sums, 8, "{rec:?}");
        assert_eq!(fs.read(b, 0, 1 << 16).unwrap(), pattern(), "{rec:?}");
        fs.close().unwrap();
        assert_eq!(logged_table(&dev), table, "{rec:?}");
    }
}

/// A well-formed `Sums` record for blocks no file uses: replayed (the
/// table's shape is sound), fsck names the free blocks with checksums and
/// repair drops them.
#[test]
fn a_sums_record_for_free_blocks_is_named_and_dropped() {
    let (dev, _, b) = volume(false);
    let free = free_run_at_end(&dev, 4);
    append_commits(
        &dev,
        vec![
            vec![Record::Sums {
                start: free,
                mask: 0xf,
                sums: vec![1, 2, 3, 4],
            }],
            Vec::new(),
        ],
    );
    assert_eq!(logged_table(&dev).len(), 12);
    let want = format!("checksum table: blocks {free}+4 are free but have checksums");
    let r = fsck(&dev, false, true);
    assert!(has(&r.problems, &[&want]), "{:#?}", r.problems);
    let r = fsck(&dev, true, false);
    assert!(has(&r.repaired, &[&want]), "{r:#?}");
    assert_clean(&dev, b);
    assert_eq!(logged_table(&dev).len(), 8);
}

/// The attributes of a raw record: (tag, start of the attribute, end).
fn attributes(raw: &[u8]) -> Vec<(u8, usize, usize)> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < raw.len() {
        let len = u16::from_le_bytes([raw[at + 1], raw[at + 2]]) as usize;
        out.push((raw[at], at, at + 3 + len));
        at += 3 + len;
    }
    out
}

/// `/b`'s record with its attribute 15's body replaced by `body`: reading
/// `/b` fails with a corruption error naming its leaf, the inode and
/// `detail`; fsck names them too; fsck --repair leaves a clean volume.
fn hostile_attribute(body: &[u8], detail: &str) {
    let (dev, a, b) = volume(true);
    let (leaf, _) = itable_leaf(&dev, b);
    edit_raw_record(&dev, b, |raw| {
        let attrs = attributes(raw);
        assert!(attrs.iter().any(|a| a.0 == EXTENTS), "{attrs:?}");
        let (_, at, end) = attrs
            .into_iter()
            .find(|a| a.0 == TABLE_SUMS)
            .expect("attribute 15");
        assert_eq!(end - at, 4, "a one-byte mask");
        let mut attr = vec![TABLE_SUMS];
        attr.extend_from_slice(&(body.len() as u16).to_le_bytes());
        attr.extend_from_slice(body);
        raw.splice(at..end, attr);
    });
    let fs = Fs::open(dev.clone(), OpenOptions::default()).expect("the volume still mounts");
    let e = fs.read(b, 0, 4096).expect_err("read of the hostile record");
    assert_eq!(e.errno(), Errno::EIO, "{e}");
    match &e {
        Error::Corrupt { block, what } => {
            assert_eq!(*block, leaf, "{what}");
            assert!(
                what.contains(&format!("inode {b}")) && what.contains(detail),
                "{what}"
            );
        }
        other => panic!("not a corruption error: {other}"),
    }
    fs.close().unwrap();
    let r = fsck(&dev, false, true);
    assert!(
        has(
            &r.problems,
            &[&format!("block {leaf}: "), &format!("inode {b}"), detail]
        ),
        "{:#?}",
        r.problems
    );
    // Repair cannot tell which extents the mask meant: the record goes
    // (as any record that does not decode), and the volume is clean after,
    // `/a` as written.
    let r = fsck(&dev, true, true);
    assert!(has(&r.repaired, &[&format!("block {leaf}: "), detail]), "{r:#?}");
    let r = fsck(&dev, false, true);
    assert!(r.problems.is_empty() && r.repaired.is_empty(), "{r:#?}");
    let fs = Fs::open(dev.clone(), OpenOptions::default()).unwrap();
    assert_eq!(fs.read(a, 0, 1 << 16).unwrap(), pattern());
    fs.close().unwrap();
}

#[test]
fn a_table_sums_mask_of_zero_is_named() {
    hostile_attribute(&[0], "table sums attribute has length 1 or a bad mask");
}

#[test]
fn a_table_sums_mask_past_the_inline_extents_is_named() {
    hostile_attribute(&[0x10], "table sums attribute has length 1 or a bad mask");
}

#[test]
fn a_table_sums_mask_naming_an_extent_not_held_is_named() {
    hostile_attribute(
        &[0b1000],
        "table sums mask 0x8 names extents the record does not hold",
    );
}

#[test]
fn a_table_sums_attribute_of_length_two_is_named() {
    hostile_attribute(&[1, 0], "table sums attribute has length 2 or a bad mask");
}

#[test]
fn an_empty_table_sums_attribute_is_named() {
    hostile_attribute(&[], "table sums attribute has length 0 or a bad mask");
}
