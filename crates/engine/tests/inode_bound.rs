//! Scenario: the cache keeps at most `inode_limit` inodes that it could
//! load again (`frontend/evict.rs`). Past it, commits — and, with no
//! commit thread, the operations that load inodes — let go of inodes whose
//! every change is in the inode table, and an inode needed again loads
//! again with everything it held: attributes, data (inline and in
//! extents), entries, xattrs. Inodes with changes not yet committed, and
//! orphans kept by a handle, stay whatever the bound.

use std::sync::Arc;
use tux3::device::{Device, MemDevice};
use tux3::{FormatOptions, Fs, Ino, OpenOptions, XattrMode, ROOT_INO};
use tux3_tools::fsck;

const BS: u32 = 4096;

fn fresh(blocks: u64) -> Arc<dyn Device> {
    let dev: Arc<dyn Device> = Arc::new(MemDevice::new(BS, blocks));
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    dev
}

fn open(dev: &Arc<dyn Device>, inode_limit: usize) -> Fs {
    let opts = OpenOptions {
        inode_limit,
        ..OpenOptions::default()
    };
    Fs::open(dev.clone(), opts).unwrap()
}

/// Contents of file `k`: 1 byte to 3 blocks, so that some are held in the
/// inode record and some need extents.
fn data(k: u64) -> Vec<u8> {
    let len = 1 + (k * 2654435761 % (3 * BS as u64)) as usize;
    (0..len).map(|i| (i as u64 * 31 + k) as u8).collect()
}

/// `dirs` directories of `per` files each, written and given an xattr.
fn populate(fs: &Fs, dirs: u64, per: u64) -> Vec<(Ino, Vec<Ino>)> {
    (0..dirs)
        .map(|d| {
            let dir = fs
                .mkdir(ROOT_INO, format!("d{d}").as_bytes(), 0o755, 0, 0)
                .unwrap()
                .ino;
            let files = (0..per)
                .map(|f| {
                    let k = d * per + f;
                    let ino = fs
                        .create(dir, format!("f{f}").as_bytes(), 0o644, 0, 0)
                        .unwrap()
                        .ino;
                    fs.write(ino, 0, &data(k)).unwrap();
                    fs.setxattr(ino, b"user.k", &k.to_le_bytes(), XattrMode::Any)
                        .unwrap();
                    ino
                })
                .collect();
            (dir, files)
        })
        .collect()
}

/// Every directory lists its files, and every file holds what `populate`
/// gave it.
fn check(fs: &Fs, tree: &[(Ino, Vec<Ino>)], when: &str) {
    let per = tree[0].1.len() as u64;
    for (d, (dir, files)) in tree.iter().enumerate() {
        let listed = fs.readdir(*dir, 0, usize::MAX).unwrap();
        assert_eq!(listed.len(), files.len(), "{when}: entries of d{d}");
        for (f, ino) in files.iter().enumerate() {
            let k = d as u64 * per + f as u64;
            let found = fs.lookup(*dir, format!("f{f}").as_bytes()).unwrap();
            assert_eq!(found.ino, *ino, "{when}: d{d}/f{f}");
            let want = data(k);
            assert_eq!(found.size, want.len() as u64, "{when}: size of d{d}/f{f}");
            assert_eq!(
                fs.read(*ino, 0, want.len()).unwrap(),
                want,
                "{when}: data of d{d}/f{f}"
            );
            assert_eq!(
                fs.getxattr(*ino, b"user.k").unwrap(),
                k.to_le_bytes(),
                "{when}: xattr"
            );
        }
    }
}

fn assert_clean(dev: &Arc<dyn Device>) {
    let r = fsck::check(dev.clone(), &Default::default()).unwrap();
    assert!(r.problems.is_empty(), "fsck: {:?}", r.problems);
}

#[test]
fn commits_let_go_of_inodes_past_the_bound() {
    let dev = fresh(16384);
    let fs = open(&dev, 64);
    let tree = populate(&fs, 8, 150);
    assert!(
        fs.stats().cached_inodes > 1200,
        "everything made is cached until a commit"
    );
    // The first pass finds every inode used since it was made; the second
    // lets go of those not used since the first.
    fs.sync().unwrap();
    fs.sync().unwrap();
    let held = fs.stats().cached_inodes;
    assert!(held <= 64, "{held} inodes cached after two commits, bound 64");
    check(&fs, &tree, "loaded again");
    // Changes to inodes loaded again, committed, and let go again.
    for (dir, files) in &tree {
        fs.write(files[0], 0, b"changed").unwrap();
        fs.unlink(*dir, b"f1").unwrap();
        fs.rename(
            *dir,
            b"f2",
            ROOT_INO,
            format!("moved{dir}").as_bytes(),
            Default::default(),
        )
        .unwrap();
    }
    fs.sync().unwrap();
    fs.sync().unwrap();
    for (dir, files) in &tree {
        assert_eq!(fs.read(files[0], 0, 7).unwrap(), b"changed");
        assert!(fs.lookup(*dir, b"f1").is_err(), "f1 of {dir} unlinked");
        assert_eq!(
            fs.lookup(ROOT_INO, format!("moved{dir}").as_bytes()).unwrap().ino,
            files[2]
        );
        assert_eq!(fs.readdir(*dir, 0, usize::MAX).unwrap().len(), 148);
    }
    fs.close().unwrap();
    assert_clean(&dev);
}

#[test]
fn a_walk_with_no_commit_stays_near_the_bound() {
    let dev = fresh(16384);
    let fs = open(&dev, usize::MAX);
    let tree = populate(&fs, 20, 150);
    fs.sync().unwrap();
    let all_leaves = fs.stats().itable_leaves;
    fs.close().unwrap();
    // Reopened with no commit thread (the library's default) and nothing
    // changed: only the loads themselves can keep the bound.
    let fs = open(&dev, 256);
    check(&fs, &tree, "a walk of 3,000 files");
    let held = fs.stats().cached_inodes;
    // Loads past an eighth of the bound (at least 64) start a pass; a
    // pass passes over what was used since the one before.
    assert!(
        held <= 256 + 3 * 64,
        "{held} inodes cached after the walk, bound 256"
    );
    assert_eq!(fs.stats().dirty_bytes, 0, "the walk changed nothing");
    // The inode-table leaves of the inodes let go of went with them.
    let leaves = fs.stats().itable_leaves;
    assert!(
        leaves * 3 <= all_leaves,
        "{leaves} inode-table leaves in memory after the walk, of {all_leaves}"
    );
    // And load again: the walk once more, then every inode changed.
    check(&fs, &tree, "a second walk");
    for (_, files) in &tree {
        for f in files {
            fs.setattr(
                *f,
                &tux3::SetAttr {
                    mode: Some(0o600),
                    ..Default::default()
                },
            )
            .unwrap();
        }
    }
    fs.sync().unwrap();
    fs.close().unwrap();
    assert_clean(&dev);
}

#[test]
fn uncommitted_changes_and_orphans_stay_cached() {
    let dev = fresh(16384);
    let fs = open(&dev, 1);
    let tree = populate(&fs, 2, 100);
    let (dir, files) = &tree[0];
    fs.sync().unwrap();
    // An orphan: unlinked while a handle holds it.
    fs.open_handle(files[3]).unwrap();
    fs.unlink(*dir, b"f3").unwrap();
    // A change not committed, then a walk that loads every inode.
    fs.write(files[4], 0, b"not yet committed").unwrap();
    fs.sync().unwrap();
    fs.write(files[5], 0, b"dirty").unwrap();
    for (d, files) in &tree {
        for f in files {
            let _ = fs.getattr(*f);
        }
        let _ = fs.readdir(*d, 0, usize::MAX).unwrap();
    }
    fs.sync().unwrap();
    fs.sync().unwrap();
    assert!(fs.stats().cached_inodes <= 8, "all but what must stay let go");
    assert_eq!(
        fs.read(files[3], 0, 10).unwrap(),
        data(3)[..10.min(data(3).len())]
    );
    assert_eq!(fs.getattr(files[3]).unwrap().nlink, 0);
    assert_eq!(fs.read(files[4], 0, 17).unwrap(), b"not yet committed");
    assert_eq!(fs.read(files[5], 0, 5).unwrap(), b"dirty");
    fs.release_handle(files[3]).unwrap();
    fs.close().unwrap();
    assert_clean(&dev);
    let fs = open(&dev, 1);
    assert!(
        fs.getattr(files[3]).is_err(),
        "the orphan was freed at its last handle"
    );
    assert_eq!(fs.read(files[5], 0, 5).unwrap(), b"dirty");
    fs.close().unwrap();
}
