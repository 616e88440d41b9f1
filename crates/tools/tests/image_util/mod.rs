//! Helpers of the tests that edit an image under fsck (`fsck_data_sums.rs`,
//! `hostile_sums.rs`, `inline_maps_fsck.rs`, `fsck_snapshots.rs`,
//! `fsck_repair_snapshots.rs`): a volume with a snapshot, volumes with and without `DATA_SUMS`, a record or
//! an extent leaf read and rewritten in place on a unified volume (no log
//! checksum covers it, so only the decoders and fsck see the change), a
//! data block damaged, commits appended to the log, fsck runs, a
//! directory's files and their first bytes.
//!
//! Calls the engine's public API and `tux3_tools::fsck`.

#![allow(dead_code)]

use std::sync::Arc;
use tux3::backend::Backend;
use tux3::device::{Device, MemDevice};
use tux3::log::{LogBlock, Record};
use tux3::structures::btree::node::{decode, Leaf};
use tux3::structures::btree::{Node, Tree, TreeKind};
use tux3::structures::inode::InodeAttrs;
use tux3::structures::superblock::Superblock;
use tux3::{FormatOptions, Fs};
use tux3_tools::fsck::{self, metadata_blocks, FsckOptions, FsckReport};

/// A fresh volume of `blocks` blocks of 4 KiB, with data checksums or not.
pub fn fresh(blocks: u64, data_sums: bool) -> Arc<dyn Device> {
    let dev: Arc<dyn Device> = Arc::new(MemDevice::new(4096, blocks));
    let opts = FormatOptions {
        data_sums,
        ..FormatOptions::default()
    };
    Fs::format(dev.clone(), &opts).unwrap();
    dev
}

/// A volume of 4 KiB blocks with snapshot "s" of file `a` (40,000 bytes
/// of 1), then `a` rewritten with 2 and unified: its old blocks are on
/// the dead list.
pub fn volume_with_snapshot() -> Arc<dyn Device> {
    let dev: Arc<dyn Device> = Arc::new(MemDevice::new(4096, 4096));
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    let fs = Fs::open(dev.clone(), tux3::OpenOptions::default()).unwrap();
    let a = fs.create(tux3::ROOT_INO, b"a", 0o644, 0, 0).unwrap().ino;
    fs.write(a, 0, &vec![1u8; 40_000]).unwrap();
    fs.snapshot_create(b"s").unwrap();
    fs.write(a, 0, &vec![2u8; 40_000]).unwrap();
    fs.unify().unwrap();
    fs.close().unwrap();
    dev
}

/// fsck with `repair` and `data` as given.
pub fn fsck(dev: &Arc<dyn Device>, repair: bool, data: bool) -> FsckReport {
    let opts = FsckOptions {
        repair,
        progress: false,
        data,
    };
    fsck::check(dev.clone(), &opts).unwrap()
}

/// The files of directory `/NAME` with the first `max` bytes of each,
/// sorted by name (the model a repair must keep).
pub fn dir_listing(dev: &Arc<dyn Device>, name: &[u8], max: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
    let fs = Fs::open(dev.clone(), tux3::OpenOptions::default()).unwrap();
    let d = fs.lookup(tux3::ROOT_INO, name).unwrap().ino;
    let mut out: Vec<(Vec<u8>, Vec<u8>)> = fs
        .readdir(d, 0, 1000)
        .unwrap()
        .into_iter()
        .filter(|e| e.name != b"." && e.name != b"..")
        .map(|e| (e.name.clone(), fs.read(e.ino, 0, max).unwrap()))
        .collect();
    out.sort();
    fs.close().unwrap();
    out
}

/// Whether a problem line holds every one of `parts`.
pub fn has(lines: &[String], parts: &[&str]) -> bool {
    lines.iter().any(|p| parts.iter().all(|part| p.contains(part)))
}

/// Inode `ino`'s record as the replayed inode table has it.
pub fn record(dev: &Arc<dyn Device>, ino: u64) -> InodeAttrs {
    let (mut be, _) = Backend::open(dev.clone(), true).unwrap();
    let (raw, leaf) = be.itable.get_mut().get_at(dev.as_ref(), ino).unwrap().unwrap();
    InodeAttrs::decode(&raw, ino, leaf, &tux3::structures::bounds(dev.as_ref())).unwrap()
}

/// The inode-table leaf holding `ino` on a unified volume: its address
/// and decoded node.
pub fn itable_leaf(dev: &Arc<dyn Device>, ino: u64) -> (u64, Leaf) {
    let sb = Superblock::load(dev.as_ref()).unwrap();
    let mut t = Tree::open(0, TreeKind::Itable, sb.itable);
    let mut home = None;
    t.visit(dev.as_ref(), &mut |addr, _, _, n| {
        if let Node::Leaf(l) = n {
            if l.entries.iter().any(|e| e.0 == ino) {
                home = Some(addr);
            }
        }
        Ok(())
    })
    .unwrap();
    let addr = home.expect("inode in the inode table");
    let mut buf = vec![0u8; dev.block_size() as usize];
    dev.read(addr, &mut buf).unwrap();
    let Node::Leaf(leaf) = decode(&buf, addr, 0, TreeKind::Itable, 0, sb.block_count).unwrap() else {
        panic!("not a leaf")
    };
    (addr, leaf)
}

/// Replace inode `ino`'s raw record value in its leaf by `change(raw)`.
pub fn edit_raw_record(dev: &Arc<dyn Device>, ino: u64, change: impl FnOnce(&mut Vec<u8>)) {
    let (addr, mut leaf) = itable_leaf(dev, ino);
    let e = leaf.entries.iter_mut().find(|(k, _)| *k == ino).unwrap();
    change(&mut e.1);
    let bs = dev.block_size() as usize;
    dev.write(addr, &leaf.encode(addr, 0, TreeKind::Itable, bs))
        .unwrap();
}

/// Change inode `ino`'s decoded record in its leaf.
pub fn edit_inode(dev: &Arc<dyn Device>, ino: u64, change: impl FnOnce(&mut InodeAttrs)) {
    let bounds = tux3::structures::bounds(dev.as_ref());
    edit_raw_record(dev, ino, |raw| {
        let mut a = InodeAttrs::decode(raw, ino, 0, &bounds).unwrap();
        change(&mut a);
        *raw = a.encode();
    });
}

/// The extent leaf of inode `ino` (a one-leaf tree): address and entries.
pub fn extent_leaf(dev: &Arc<dyn Device>, ino: u64) -> (u64, Vec<(u64, Vec<u8>)>) {
    let count = dev.block_count();
    let mut buf = vec![0u8; dev.block_size() as usize];
    for addr in metadata_blocks(dev.clone()).unwrap() {
        dev.read(addr, &mut buf).unwrap();
        if let Ok(Node::Leaf(l)) = decode(&buf, addr, ino, TreeKind::Extents, 0, count) {
            return (addr, l.entries);
        }
    }
    panic!("no extent leaf for inode {ino}");
}

/// Rewrite extent leaf `addr` of inode `ino` with `entries`, resealed.
pub fn rewrite_leaf(dev: &Arc<dyn Device>, addr: u64, ino: u64, entries: Vec<(u64, Vec<u8>)>) {
    let leaf = Leaf {
        addr,
        birth: 0,
        dirty: false,
        entries,
    };
    let bs = dev.block_size() as usize;
    dev.write(addr, &leaf.encode(addr, ino, TreeKind::Extents, bs))
        .unwrap();
}

/// Flip a byte of device block `b`.
pub fn damage(dev: &Arc<dyn Device>, b: u64) {
    let mut buf = vec![0u8; dev.block_size() as usize];
    dev.read(b, &mut buf).unwrap();
    buf[100] ^= 0x40;
    dev.write(b, &buf).unwrap();
}

/// Every extent of inode `ino` as a mount sees it (tree or record).
pub fn extents_of(dev: &Arc<dyn Device>, ino: u64) -> Vec<tux3::structures::extent::Extent> {
    let (be, replays) = Backend::open(dev.clone(), true).unwrap();
    let a = record(dev, ino);
    let mut t = tux3_tools::datamap::data_tree(&be, ino, &a, replays.get(&ino)).unwrap();
    tux3_tools::datamap::tree_extents(dev.as_ref(), &mut t).unwrap()
}

/// Append one full commit (one log block) per entry of `commits` after
/// the log's last, each holding its records (and the `Balloc` of the block
/// after it, a free one); a valid chain. Returns the first block's address.
pub fn append_commits(dev: &Arc<dyn Device>, commits: Vec<Vec<Record>>) -> u64 {
    let bs = dev.block_size() as usize;
    let (be, _) = Backend::open(dev.clone(), true).unwrap();
    let tail = be.log.tail;
    let mut addrs = vec![tail.next];
    for _ in 0..commits.len() {
        let after = *addrs.last().unwrap() + 1;
        let free = (after..dev.block_count()).find(|&b| !be.alloc.is_used(b));
        addrs.push(free.expect("a free block for the log"));
    }
    let mut prev_crc = tail.prev_crc;
    for (k, mut records) in commits.into_iter().enumerate() {
        let (addr, next) = (addrs[k], addrs[k + 1]);
        records.push(Record::Balloc {
            start: next,
            count: 1,
        });
        let lb = LogBlock {
            addr,
            seq: tail.seq + k as u64,
            next,
            delta: be.delta + k as u64,
            prev_crc,
            commit: true,
            fsync: false,
            nonce: 1,
            records,
            crc: 0,
        };
        let image = lb.encode(bs);
        // The checksum field follows the magic (codec header).
        prev_crc = u32::from_le_bytes(image[4..8].try_into().unwrap());
        dev.write(addr, &image).unwrap();
    }
    tail.next
}
