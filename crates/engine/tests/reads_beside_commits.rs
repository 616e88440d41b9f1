//! A read in the device holds no lock that other files or commits need:
//! it maps its blocks under its file's lock and the shared delta guard,
//! then lets go of both, so a commit (which freezes the delta under the
//! exclusive guard) goes on while the read waits for the device, and so do
//! changes that need the exclusive guard, such as a truncate. The blocks
//! the read mapped are not handed out again until it is done, even if
//! their file lets go of them and that commit is durable.
//!
//! So do the inode-table nodes a cold inode's load reads, for a stat, a
//! lookup, an unlink or an xattr change, and the tree nodes of a
//! directory or file that an operation needs, including those that then
//! run under the exclusive guard (a symlink, a truncate, a directory
//! moved): they are read with no lock held, not even the guard.
//!
//! A device whose next read, once armed, stops until the test lets it go
//! holds a read in the device without sleeping. Were the read still
//! inside the delta guard, the commit (and the truncate) would wait for
//! it, and the test would fail at its deadline.

use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, Sender};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tux3::device::{CounterSnapshot, Device, MemDevice};
use tux3::{FormatOptions, Fs, OpenOptions, SetAttr, XattrMode, ROOT_INO};

const BS: usize = 4096;

/// How long a step that must not wait for the held read may take before
/// the test fails (it takes milliseconds when it does not wait).
const DEADLINE: Duration = Duration::from_secs(20);

/// A memory device: the next read once armed waits at a gate; reads and
/// writes are recorded while watched.
struct HoldingDevice {
    inner: MemDevice,
    armed: AtomicBool,
    watching_reads: AtomicBool,
    read: Mutex<BTreeSet<u64>>,
    entered: Sender<u64>,
    release: Receiver<()>,
    watching: AtomicBool,
    written: Mutex<BTreeSet<u64>>,
}

fn holding(blocks: u64) -> (Arc<HoldingDevice>, Receiver<u64>, Sender<()>) {
    let (entered, entered_rx) = bounded(1);
    let (release_tx, release) = bounded(1);
    let dev = HoldingDevice {
        inner: MemDevice::new(BS as u32, blocks),
        armed: AtomicBool::new(false),
        watching_reads: AtomicBool::new(false),
        read: Mutex::new(BTreeSet::new()),
        entered,
        release,
        watching: AtomicBool::new(false),
        written: Mutex::new(BTreeSet::new()),
    };
    (Arc::new(dev), entered_rx, release_tx)
}

impl Device for HoldingDevice {
    fn block_size(&self) -> u32 {
        self.inner.block_size()
    }
    fn block_count(&self) -> u64 {
        self.inner.block_count()
    }
    fn read(&self, block: u64, buf: &mut [u8]) -> std::io::Result<()> {
        if self.watching_reads.load(Ordering::SeqCst) {
            let n = (buf.len() / BS).max(1) as u64;
            self.read.lock().unwrap().extend(block..block + n);
        }
        if self.armed.swap(false, Ordering::SeqCst) {
            let _ = self.entered.send(block);
            let _ = self.release.recv_timeout(DEADLINE * 2);
        }
        self.inner.read(block, buf)
    }
    fn write(&self, block: u64, buf: &[u8]) -> std::io::Result<()> {
        if self.watching.load(Ordering::SeqCst) {
            let n = (buf.len() / BS).max(1) as u64;
            self.written.lock().unwrap().extend(block..block + n);
        }
        self.inner.write(block, buf)
    }
    fn flush(&self) -> std::io::Result<()> {
        self.inner.flush()
    }
    fn counters(&self) -> CounterSnapshot {
        self.inner.counters()
    }
}

fn no_commit_thread() -> OpenOptions {
    OpenOptions {
        commit_interval: None,
        ..OpenOptions::default()
    }
}

/// Block `b` of file `f`: every byte says which.
fn pattern(f: u8, b: usize) -> Vec<u8> {
    vec![f.wrapping_mul(31).wrapping_add(b as u8); BS]
}

/// A volume with file `f` of `blocks` blocks, reopened so that nothing of
/// the file's data is cached; read once whole, so that its inode and
/// extent map are (reads do not cache data): the next read of it goes to
/// the device for its data alone. Returns the volume, the file and the
/// device blocks that read of it read.
fn cold_file(dev: &Arc<HoldingDevice>, blocks: usize) -> (Fs, u64, BTreeSet<u64>) {
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    {
        let fs = Fs::open(dev.clone(), no_commit_thread()).unwrap();
        let ino = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap().ino;
        for b in 0..blocks {
            fs.write(ino, (b * BS) as u64, &pattern(1, b)).unwrap();
        }
        fs.close().unwrap();
    }
    let fs = Fs::open(dev.clone(), no_commit_thread()).unwrap();
    let ino = fs.lookup(ROOT_INO, b"f").unwrap().ino;
    let mut all = vec![0u8; blocks * BS];
    fs.read_into(ino, 0, &mut all).unwrap();
    dev.watching_reads.store(true, Ordering::SeqCst);
    fs.read_into(ino, 0, &mut all).unwrap();
    dev.watching_reads.store(false, Ordering::SeqCst);
    let mapped = std::mem::take(&mut *dev.read.lock().unwrap());
    assert_eq!(mapped.len(), blocks, "the file's blocks, read from the device");
    (fs, ino, mapped)
}

/// Truncate or extend file `ino` to `size`: the size it then has.
fn resize(fs: &Fs, ino: u64, size: u64) -> u64 {
    let set = SetAttr {
        size: Some(size),
        ..SetAttr::default()
    };
    fs.setattr(ino, &set).unwrap().size
}

/// Run `step` on its own thread; whether it ended within [`DEADLINE`].
fn ends_in_time<'scope, 'env>(
    s: &'scope std::thread::Scope<'scope, 'env>,
    step: impl FnOnce() + Send + 'scope,
) -> bool {
    let (done, ended) = bounded(1);
    s.spawn(move || {
        step();
        let _ = done.send(());
    });
    match ended.recv_timeout(DEADLINE) {
        Ok(()) => true,
        Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => false,
    }
}

#[test]
fn a_commit_goes_on_while_a_read_waits_in_the_device() {
    let (dev, entered, release) = holding(4096);
    let (fs, ino, _) = cold_file(&dev, 4);
    let g = fs.create(ROOT_INO, b"g", 0o644, 0, 0).unwrap().ino;
    dev.armed.store(true, Ordering::SeqCst);
    std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let mut out = vec![0u8; BS];
            assert_eq!(fs.read_into(ino, 0, &mut out).unwrap(), BS);
            out
        });
        entered
            .recv_timeout(DEADLINE)
            .expect("the read reached the device");
        let committed = ends_in_time(s, || {
            fs.write(g, 0, &pattern(2, 0)).unwrap();
            fs.sync().unwrap();
        });
        release.send(()).unwrap();
        assert!(committed, "a commit waited for a read in the device");
        assert!(
            reader.join().unwrap() == pattern(1, 0),
            "and the read read the file"
        );
    });
    fs.close().unwrap();
}

#[test]
fn a_commit_goes_on_while_a_truncate_reads_the_block_it_cuts() {
    // The truncate runs under the exclusive guard and zeroes the tail of
    // the block it cuts into: that block, on the device only, is read
    // before, with no lock held.
    let (dev, entered, release) = holding(4096);
    let (fs, ino, _) = cold_file(&dev, 4);
    let g = fs.create(ROOT_INO, b"g", 0o644, 0, 0).unwrap().ino;
    let size = (2 * BS + 100) as u64;
    dev.armed.store(true, Ordering::SeqCst);
    std::thread::scope(|s| {
        let fs = &fs;
        let cut = s.spawn(move || resize(fs, ino, size));
        entered
            .recv_timeout(DEADLINE)
            .expect("the truncate read the block it cuts");
        let committed = ends_in_time(s, || {
            fs.write(g, 0, &pattern(2, 0)).unwrap();
            fs.sync().unwrap();
        });
        release.send(()).unwrap();
        assert!(
            committed,
            "a commit waited for a truncate's read of its last block"
        );
        assert_eq!(cut.join().unwrap(), size);
    });
    let mut want = pattern(1, 2);
    want[100..].fill(0);
    let check = |fs: &Fs, when: &str| {
        let mut out = vec![0u8; 3 * BS];
        assert_eq!(fs.read_into(ino, 0, &mut out).unwrap(), size as usize, "{when}");
        assert!(
            out[..2 * BS] == [pattern(1, 0), pattern(1, 1)].concat(),
            "{when}: blocks kept"
        );
        assert!(
            out[2 * BS..2 * BS + 100] == want[..100],
            "{when}: the cut block's head"
        );
        resize(fs, ino, 3 * BS as u64);
        let mut tail = vec![1u8; BS];
        fs.read_into(ino, 2 * BS as u64, &mut tail).unwrap();
        assert!(tail == want, "{when}: zeros past the cut (F1)");
        resize(fs, ino, size);
    };
    check(&fs, "after the truncate");
    fs.close().unwrap();
    let fs = Fs::open(dev.clone(), no_commit_thread()).unwrap();
    check(&fs, "after a reopen");
    fs.close().unwrap();
}

#[test]
fn blocks_a_read_mapped_are_not_reused_while_it_waits_in_the_device() {
    const BLOCKS: usize = 64;
    let (dev, entered, release) = holding(4096);
    let (fs, ino, mapped) = cold_file(&dev, BLOCKS);
    dev.armed.store(true, Ordering::SeqCst);
    std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let mut out = vec![0u8; BLOCKS * BS];
            assert_eq!(fs.read_into(ino, 0, &mut out).unwrap(), BLOCKS * BS);
            out
        });
        // The read mapped every block of the file and waits in the device
        // at its first.
        let held = entered
            .recv_timeout(DEADLINE)
            .expect("the read reached the device");
        assert!(mapped.contains(&held));
        let freed_and_refilled = ends_in_time(s, || {
            // The file lets go of its blocks, and that is made durable
            // (twice: its frees are no longer pinned by any commit).
            let cut = SetAttr {
                size: Some(0),
                ..SetAttr::default()
            };
            fs.setattr(ino, &cut).unwrap();
            fs.sync().unwrap();
            fs.sync().unwrap();
            // Then new files fill most of what is free, and are committed.
            dev.watching.store(true, Ordering::SeqCst);
            let free = fs.statfs().unwrap().blocks_free as usize;
            let mut left = free.saturating_sub(256);
            for k in 0u32.. {
                if left == 0 {
                    break;
                }
                let n = left.min(256);
                let name = format!("fill{k}");
                let f = fs.create(ROOT_INO, name.as_bytes(), 0o644, 0, 0).unwrap().ino;
                let data: Vec<u8> = (0..n).flat_map(|b| pattern(3, b)).collect();
                fs.write(f, 0, &data).unwrap();
                left -= n;
            }
            fs.sync().unwrap();
            dev.watching.store(false, Ordering::SeqCst);
        });
        release.send(()).unwrap();
        assert!(
            freed_and_refilled,
            "a truncate or commit waited for a read in the device"
        );
        let out = reader.join().unwrap();
        let reused: Vec<u64> = dev
            .written
            .lock()
            .unwrap()
            .intersection(&mapped)
            .copied()
            .collect();
        assert!(
            reused.is_empty(),
            "blocks {reused:?} were written while a read had them mapped"
        );
        for (b, data) in out.chunks(BS).enumerate() {
            assert!(data == pattern(1, b), "block {b} of the read is not the file's");
        }
    });
    fs.close().unwrap();
}

/// Files in the root of [`cold_inodes`]'s volume: enough for an inode
/// table of several levels, most of it not read back at the next open.
const FILES: usize = 3000;

/// A volume of [`FILES`] files `fK`, reopened: their inodes are not in
/// cache, nor most of the inode table; the root directory's entries are
/// (listed once). Returns the volume and the files' inode numbers.
fn cold_inodes(dev: &Arc<HoldingDevice>) -> (Fs, Vec<u64>) {
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    let inos = {
        let fs = Fs::open(dev.clone(), no_commit_thread()).unwrap();
        let inos = (0..FILES)
            .map(|k| {
                fs.create(ROOT_INO, format!("f{k}").as_bytes(), 0o644, 0, 0)
                    .unwrap()
                    .ino
            })
            .collect();
        fs.close().unwrap();
        inos
    };
    let fs = Fs::open(dev.clone(), no_commit_thread()).unwrap();
    let mut pos = 0;
    loop {
        let part = fs.readdir(ROOT_INO, pos, 512).unwrap();
        match part.last() {
            Some(e) => pos = e.next,
            None => break,
        }
    }
    (fs, inos)
}

#[test]
fn a_commit_goes_on_while_a_cold_inode_loads_for_a_stat_a_lookup_an_unlink_or_an_xattr_change() {
    let (dev, entered, release) = holding(16384);
    let (fs, inos) = cold_inodes(&dev);
    let g = fs.create(ROOT_INO, b"g", 0o644, 0, 0).unwrap().ino;
    // A stat of one cold file, then a lookup and an unlink of others, far
    // from it and each other in the inode table.
    let (far, last) = (2 * FILES / 3, FILES - 40);
    let steps = [
        ("a stat", inos[FILES / 3]),
        ("a lookup", inos[far]),
        ("an unlink", inos[last]),
        ("an xattr set", inos[FILES / 6]),
        ("an xattr removal", inos[5 * FILES / 6]),
    ];
    for (what, want) in steps {
        dev.armed.store(true, Ordering::SeqCst);
        std::thread::scope(|s| {
            let fs = &fs;
            let loader = s.spawn(move || match what {
                "a lookup" => fs.lookup(ROOT_INO, format!("f{far}").as_bytes()).unwrap().ino,
                "an unlink" => {
                    fs.unlink(ROOT_INO, format!("f{last}").as_bytes()).unwrap();
                    want
                }
                "an xattr set" => {
                    fs.setxattr(want, b"user.k", b"v", XattrMode::Any).unwrap();
                    want
                }
                "an xattr removal" => {
                    let gone = fs.removexattr(want, b"user.k");
                    assert!(gone.is_err(), "no such xattr");
                    want
                }
                _ => fs.getattr(want).unwrap().ino,
            });
            entered
                .recv_timeout(DEADLINE)
                .expect("the load reached the device");
            let committed = ends_in_time(s, || {
                fs.write(g, 0, &pattern(2, 0)).unwrap();
                fs.sync().unwrap();
            });
            release.send(()).unwrap();
            assert!(committed, "a commit waited for {what}'s inode-table read");
            assert_eq!(loader.join().unwrap(), want, "and {what} found its inode");
        });
    }
    assert_eq!(fs.getxattr(inos[FILES / 6], b"user.k").unwrap(), b"v");
    fs.close().unwrap();
}

/// Entries of [`cold_trees`]'s directory: enough for a tree of several
/// leaves under a branch.
const ENTRIES: usize = 3000;
/// Blocks of its file, every other one written: one extent each, enough
/// for an extent tree of several leaves.
const EXTENTS: usize = 2000;

/// [`cold_trees`]'s symlink's target: too long to live in its inode.
fn target() -> Vec<u8> {
    (0..3000).map(|k| b'a' + (k % 26) as u8).collect()
}

/// A volume with symlink `s` to [`target`], directory `d` of [`ENTRIES`]
/// entries `nK`, an empty directory `x`, and files `f`
/// and `e` of [`EXTENTS`] one-block extents (block `2k` of `f` holds
/// `pattern(4, k)`).
fn cold_trees(dev: &Arc<HoldingDevice>) {
    Fs::format(dev.clone(), &FormatOptions::default()).unwrap();
    let fs = Fs::open(dev.clone(), no_commit_thread()).unwrap();
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap().ino;
    for k in 0..ENTRIES {
        fs.create(d, format!("n{k}").as_bytes(), 0o644, 0, 0).unwrap();
    }
    fs.symlink(ROOT_INO, b"s", &target(), 0, 0).unwrap();
    fs.mkdir(ROOT_INO, b"x", 0o755, 0, 0).unwrap();
    for name in [&b"f"[..], b"e"] {
        let f = fs.create(ROOT_INO, name, 0o644, 0, 0).unwrap().ino;
        for k in 0..EXTENTS {
            fs.write(f, (2 * k * BS) as u64, &pattern(4, k)).unwrap();
        }
    }
    fs.close().unwrap();
}

#[test]
fn a_commit_goes_on_while_a_directory_or_extent_node_loads() {
    let (dev, entered, release) = holding(16384);
    cold_trees(&dev);
    let steps = [
        "a lookup",
        "a listing",
        "a create",
        "an unlink",
        "a rename",
        "a rename over a file",
        "a link",
        "a read",
        "an unlink that frees a file",
        "a readlink",
        "a seek",
        "a symlink",
        "a directory moved",
        "a truncate",
    ];
    for (n, what) in steps.into_iter().enumerate() {
        // Reopened for each step: the inodes of `d` and `f` are loaded
        // (and nothing else of them), so the step's first device read is
        // a node of the directory's tree or of the file's extent tree.
        let fs = Fs::open(dev.clone(), no_commit_thread()).unwrap();
        let d = fs.lookup(ROOT_INO, b"d").unwrap().ino;
        let f = fs.lookup(ROOT_INO, b"f").unwrap().ino;
        let _ = fs.lookup(ROOT_INO, b"e"); // (gone after its unlink step)
        let link = fs.lookup(ROOT_INO, b"s").unwrap().ino;
        let g = fs
            .create(ROOT_INO, format!("g{n}").as_bytes(), 0o644, 0, 0)
            .unwrap()
            .ino;
        dev.armed.store(true, Ordering::SeqCst);
        std::thread::scope(|s| {
            let fs = &fs;
            let step = s.spawn(move || match what {
                "a lookup" => assert!(fs.lookup(d, b"n1500").is_ok()),
                "a listing" => assert_eq!(fs.readdir(d, 0, 100).unwrap().len(), 100),
                "a create" => assert!(fs.create(d, b"new", 0o644, 0, 0).is_ok()),
                "an unlink" => fs.unlink(d, b"n7").unwrap(),
                "a rename" => fs.rename(d, b"n8", d, b"m8", Default::default()).unwrap(),
                "a rename over a file" => fs.rename(d, b"n10", d, b"n11", Default::default()).unwrap(),
                "a link" => assert_eq!(fs.link(f, d, b"l").unwrap().nlink, 2),
                "an unlink that frees a file" => fs.unlink(ROOT_INO, b"e").unwrap(),
                "a readlink" => assert_eq!(fs.readlink(link).unwrap(), target()),
                "a seek" => {
                    let at = (2 * 1200 * BS + 1) as u64;
                    assert_eq!(fs.seek_data(f, at, false).unwrap(), at + BS as u64 - 1);
                }
                // The three below run under the exclusive guard; what they
                // read of `d` and `f` is read before, with no lock.
                "a symlink" => assert!(fs.symlink(d, b"sl", b"n1", 0, 0).is_ok()),
                "a directory moved" => fs
                    .rename(ROOT_INO, b"x", d, b"moved", Default::default())
                    .unwrap(),
                "a truncate" => {
                    let size = (2 * 1000 * BS) as u64;
                    let set = SetAttr {
                        size: Some(size),
                        ..SetAttr::default()
                    };
                    assert_eq!(fs.setattr(f, &set).unwrap().size, size);
                }
                _ => {
                    let mut out = vec![0u8; BS];
                    assert_eq!(fs.read_into(f, (2 * 1500 * BS) as u64, &mut out).unwrap(), BS);
                    assert!(out == pattern(4, 1500), "the read read the file");
                }
            });
            entered
                .recv_timeout(DEADLINE)
                .unwrap_or_else(|_| panic!("{what} reached the device"));
            let committed = ends_in_time(s, || {
                fs.write(g, 0, &pattern(2, 0)).unwrap();
                fs.sync().unwrap();
            });
            release.send(()).unwrap();
            assert!(committed, "a commit waited for {what}'s tree read");
            step.join().unwrap();
        });
        fs.close().unwrap();
    }
    // Every step's change is there after a reopen, and nothing else moved.
    let fs = Fs::open(dev.clone(), no_commit_thread()).unwrap();
    let d = fs.lookup(ROOT_INO, b"d").unwrap().ino;
    assert!(fs.lookup(ROOT_INO, b"e").is_err(), "e");
    for (name, there) in [
        ("new", true),
        ("n7", false),
        ("n8", false),
        ("m8", true),
        ("l", true),
        ("n9", true),
        ("n10", false),
        ("n11", true),
        ("sl", true),
        ("moved", true),
    ] {
        assert_eq!(fs.lookup(d, name.as_bytes()).is_ok(), there, "{name}");
    }
    assert!(fs.lookup(ROOT_INO, b"x").is_err(), "x moved");
    let f = fs.lookup(ROOT_INO, b"f").unwrap();
    assert_eq!(f.size, (2 * 1000 * BS) as u64, "f truncated");
    let mut out = vec![0u8; BS];
    assert_eq!(fs.read_into(f.ino, (2 * 999 * BS) as u64, &mut out).unwrap(), BS);
    assert!(out == pattern(4, 999), "f's kept blocks kept");
    fs.close().unwrap();
}
