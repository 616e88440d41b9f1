//! Send streams against thousands of random changes: twelve rounds of
//! 1,000 changes (creates, mkdirs, renames over names and across
//! directories, exchanges of files with directories, unlinks, rmdirs,
//! links, symlinks, fifos, xattrs, truncates and writes), each round a
//! snapshot sent incrementally — first cut off with more committed than
//! its token says, then resumed — and the received tree compared with the
//! source's.

mod stream_util;
use stream_util::*;

/// How many of each kind of interesting change happened.
#[derive(Default, Debug)]
struct Seen {
    over: u32,
    across: u32,
    exchanges: u32,
    dir_file_swaps: u32,
}

/// One random namespace or data change; whether it happened.
fn random_change(fs: &Fs, rng: &mut Rng, dirs: &mut Vec<u64>, seen: &mut Seen) -> bool {
    const NAMES: [&[u8]; 6] = [b"a", b"b", b"c", b"d", b"e", b"f"];
    let dir = dirs[rng.below(dirs.len() as u64) as usize];
    let name = NAMES[rng.below(NAMES.len() as u64) as usize];
    let r = match rng.below(20) {
        0..=2 => fs.create(dir, name, 0o644, 0, 0).map(|a| {
            let _ = fs.write(a.ino, rng.below(3) * 5000, &[rng.below(256) as u8; 100]);
        }),
        3..=4 => fs.mkdir(dir, name, 0o755, 0, 0).map(|a| dirs.push(a.ino)),
        5..=9 => {
            let to = dirs[rng.below(dirs.len() as u64) as usize];
            let newname = NAMES[rng.below(NAMES.len() as u64) as usize];
            let flags = RenameFlags {
                noreplace: false,
                exchange: rng.below(4) == 0,
                whiteout: None,
            };
            let (from, over) = (fs.lookup(dir, name), fs.lookup(to, newname));
            let r = fs.rename(dir, name, to, newname, flags);
            if r.is_ok() {
                if let (Ok(a), Ok(b)) = (&from, &over) {
                    seen.over += 1;
                    let dirs = [a.kind, b.kind]
                        .iter()
                        .filter(|k| **k == FileType::Directory)
                        .count();
                    seen.exchanges += flags.exchange as u32;
                    seen.dir_file_swaps += (flags.exchange && dirs == 1) as u32;
                }
                seen.across += (dir != to) as u32;
            }
            r
        }
        10..=11 => fs.unlink(dir, name),
        12..=13 => fs.rmdir(dir, name),
        14 => fs.lookup(dir, name).and_then(|a| {
            let to = dirs[rng.below(dirs.len() as u64) as usize];
            fs.link(a.ino, to, NAMES[rng.below(6) as usize]).map(|_| ())
        }),
        15 => fs.symlink(dir, name, b"target", 0, 0).map(|_| ()),
        16 => fs.mknod(dir, name, libc::S_IFIFO | 0o600, 0, 0, 0).map(|_| ()),
        17 => fs.lookup(dir, name).and_then(|a| {
            let v = [rng.below(256) as u8; 3];
            fs.setxattr(a.ino, b"user.x", &v, XattrMode::Any)
        }),
        _ => fs.lookup(dir, name).and_then(|a| {
            if a.kind != FileType::Regular {
                return Ok(());
            }
            let set = SetAttr {
                size: Some(rng.below(20_000)),
                ..SetAttr::default()
            };
            fs.setattr(a.ino, &set)
                .and_then(|_| fs.write(a.ino, rng.below(12_000), b"changed").map(|_| ()))
        }),
    };
    r.is_ok()
}

#[test]
fn ten_thousand_random_namespace_changes_arrive_exactly() {
    let src = device(32768);
    let fs = open(&src);
    let dst = device(32768);
    let rfs = open(&dst);
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut dirs = vec![ROOT_INO];
    let mut done = 0;
    let mut base: Option<String> = None;
    let mut seen = Seen::default();
    for round in 0..12 {
        let mut n = 0;
        while n < 1000 {
            if random_change(&fs, &mut rng, &mut dirs, &mut seen) {
                n += 1;
            }
        }
        done += n;
        let name = format!("r{round}");
        fs.snapshot_create(name.as_bytes()).unwrap();
        let (bytes, _) = stream(&src, &name, base.as_deref(), None);
        // Cut off, with more committed than its token says (as a commit
        // between checkpoints and then a crash leave it): the resumed
        // receive applies records again over some of their own work.
        let ahead = ReceiveOptions {
            checkpoint_bytes: 1 << 40,
            checkpoint_records: 1 + rng.below(50),
            checkpoint_at_error: false,
        };
        let cut = rng.below(bytes.len() as u64) as usize;
        if apply_with(&rfs, &bytes[..cut], &ahead).is_ok() {
            panic!("round {round}: a cut stream was taken");
        }
        rfs.sync().unwrap();
        apply(&rfs, &bytes).unwrap_or_else(|e| panic!("round {round}: {e}"));
        same_snapshot(&src, &dst, &name);
        base = Some(name);
    }
    assert!(done >= 10_000);
    // The mix the stream has to get right happened, many times over.
    assert!(
        seen.over > 300 && seen.across > 1000 && seen.exchanges > 100 && seen.dir_file_swaps > 20,
        "{seen:?}"
    );
    rfs.close().unwrap();
    let report = tux3_tools::fsck::check(dst.clone(), &Default::default()).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}
