//! Through the real mount: a file unlinked while the kernel still holds it
//! lives on as an orphan. The mount sends no OPEN or RELEASE, so what holds
//! it is the kernel's lookup count, given back with FORGET once the last
//! descriptor is closed and the kernel drops the inode. Checked by space:
//! the blocks stay allocated while the file is open (and its data stays
//! readable and writable through the descriptor), and come back after the
//! close; fsck is clean after.
//!
//! Needs root and /dev/fuse; without them the test prints a note and passes.

mod mount_util;

use mount_util::*;
use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};

/// Size of the file, in bytes: far above the slack of the free counts.
const FILE_BYTES: usize = 16 << 20;

#[test]
fn an_unlinked_file_lives_while_open_and_its_space_returns_after_close() {
    if !can_mount() {
        return;
    }
    let fx = Fixture::new("128M");
    let m = fx.mount(&[]);
    let data: Vec<u8> = (0..FILE_BYTES).map(|i| (i % 251) as u8).collect();
    let blocks = (FILE_BYTES / 4096) as u64;
    let empty = free_blocks(&fx.mnt);

    // Held by a descriptor: unlinked, it keeps its blocks and its data.
    let f = fx.path("held");
    fs::write(&f, &data).unwrap();
    let with_file = free_blocks(&fx.mnt);
    assert!(with_file + blocks <= empty, "the file takes its blocks");
    let mut fd = fs::OpenOptions::new().read(true).write(true).open(&f).unwrap();
    fs::remove_file(&f).unwrap();
    assert!(!f.exists(), "the name is gone");
    assert!(
        free_blocks(&fx.mnt) + blocks / 2 < empty,
        "an open unlinked file keeps its blocks"
    );
    fd.seek(SeekFrom::Start(0)).unwrap();
    fd.write_all(b"still writable").unwrap();
    fd.seek(SeekFrom::Start(0)).unwrap();
    let mut back = Vec::new();
    fd.read_to_end(&mut back).unwrap();
    assert_eq!(&back[..14], b"still writable");
    assert_eq!(
        &back[14..],
        &data[14..],
        "the rest of the data, through the descriptor"
    );

    // Closed: the kernel forgets the inode and the blocks come back.
    drop(fd);
    wait_until("the space of the closed orphan to come back", || {
        free_blocks(&fx.mnt) + blocks / 2 >= empty
    });

    // Not open at all: its space comes back as soon as the kernel lets go.
    let g = fx.path("loose");
    fs::write(&g, &data).unwrap();
    assert!(free_blocks(&fx.mnt) + blocks <= empty);
    fs::remove_file(&g).unwrap();
    wait_until("the space of the unlinked file to come back", || {
        free_blocks(&fx.mnt) + blocks / 2 >= empty
    });

    m.unmount();
    fx.fsck();
}
