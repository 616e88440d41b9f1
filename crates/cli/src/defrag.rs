//! `tux3 defrag [-r] [-v] [--unshare] [--image IMAGE] PATH...`: rewrite
//! fragmented files so that each lies in as few runs as free space allows
//! (`tux3::Fs::defrag`). PATHs on a tux3 mount are rewritten by the
//! mount's server, one [`tux3_fuse::IOC_DEFRAG`] per file; with
//! `--image`, the PATHs are inside the unmounted image or block device
//! IMAGE, which this command opens, changes and closes (the convention of
//! `tux3 ls IMAGE PATH`, with the image as an option since PATHs are many).
//!
//! A directory is walked with `-r` (not across mounts, links not
//! followed). Silent on success; `-v` prints a line per file (extents
//! before and after, bytes rewritten) and a summary; `-n` changes nothing
//! and prints each file's extents and what a rewrite would take. Extents shared with
//! snapshots are left as they are unless `--unshare`: a line on standard
//! error says how many bytes that leaves and what unsharing would take.
//! A bar on a terminal. Exit codes are fsck's: 0 done, 4 a file could not
//! be rewritten (no room, a damaged block, not a regular file), 8
//! operational error, 16 usage error.
//!
//! Calls the engine API, the FUSE adapter's ioctl encoding, and the
//! image and snapshot commands' helpers.

use super::fsck::{EXIT_CLEAN, EXIT_ERRORS_LEFT, EXIT_OPERATIONAL, EXIT_USAGE};
use super::image::{join, read_dir_sorted, resolve_arg};
use super::scrub::bytes_bar;
use super::target::{close, locate, open_image, Target};
use super::CliError;
use clap::Args;
use std::collections::HashSet;
use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use tux3::types::{FileType, Ino};
use tux3::{DefragOptions, DefragReport, Errno, Error, Fs};
use tux3_fuse::{decode_defrag_report, encode_defrag_request, DEFRAG_DRY_RUN, DEFRAG_UNSHARE, IOC_DEFRAG};

pub const LONG_ABOUT: &str = "Rewrite fragmented files so that each lies in one run of blocks per \
64 MiB (the most one commit rewrites; its tree leaves follow each run), or as few as free space \
allows. Contents, times and checksums stay as they are; a crash leaves each file as it was or \
rewritten. A file in one run per 64 MiB already is left alone.\n\nPATHs on a tux3 \
mount are rewritten by the mount's server while the volume is in use: a write racing with defrag \
is kept. With --image, PATHs are inside the unmounted image or block device IMAGE (`/` is the \
volume's root).\n\nExtents shared with snapshots are left where they are, so the snapshots keep \
sharing them; a line on standard error says how many bytes that leaves. --unshare rewrites them \
too: the snapshots keep the old copy, and the file takes that space again.\n\nSilent on success; \
-v prints, per file, its extents before and after and the bytes rewritten, then a summary; -n \
changes nothing and prints each file's extents and what a rewrite would take.\n\n\
Exit codes: 0 done, 4 some file could not be rewritten (no room, a block failing its checksum, \
not a regular file), 8 operational error, 16 usage error.";

/// Arguments of `tux3 defrag`.
#[derive(Args, Debug)]
pub struct DefragArgs {
    /// Files to rewrite; directories with -r
    #[arg(required = true)]
    pub paths: Vec<OsString>,
    /// Walk directories, rewriting every regular file under them
    #[arg(short, long)]
    pub recursive: bool,
    /// Print each file's extents before and after, and a summary
    #[arg(short, long)]
    pub verbose: bool,
    /// Rewrite extents shared with snapshots too (they then take space
    /// twice while the snapshots last). Extents shared with other files
    /// (clones) are always rewritten, once, and those files pointed at
    /// the new copy
    #[arg(long)]
    pub unshare: bool,
    /// PATHs are inside this unmounted image file or block device
    #[arg(long, value_name = "IMAGE")]
    pub image: Option<PathBuf>,
    /// Change nothing: print each file's extents and what a rewrite
    /// would take
    #[arg(short = 'n', long)]
    pub dry_run: bool,
}

/// A file to rewrite: how to reach it, and its name for messages.
struct Item<F> {
    file: F,
    shown: String,
    bytes: u64,
}

/// The totals, and whether any file failed.
#[derive(Default)]
struct Totals {
    files: u64,
    rewritten_files: u64,
    before: u64,
    after: u64,
    bytes: u64,
    shared: u64,
    failed: bool,
}

fn mib(b: u64) -> f64 {
    b as f64 / f64::from(1u32 << 20)
}

fn usage(msg: String) -> CliError {
    CliError::new(msg).with_exit(EXIT_USAGE)
}

pub fn run(a: &DefragArgs) -> Result<u8, CliError> {
    let opts = DefragOptions {
        unshare: a.unshare,
        dry_run: a.dry_run,
        ..DefragOptions::default()
    };
    let totals = match &a.image {
        Some(image) => on_image(image, a, &opts)?,
        None => on_mount(a)?,
    };
    if a.dry_run {
        println!(
            "{} files, {} to rewrite: {} extents; {:.1} MiB to rewrite",
            totals.files,
            totals.rewritten_files,
            totals.before,
            mib(totals.bytes)
        );
    } else if a.verbose {
        println!(
            "{} files, {} rewritten: {} extents before, {} after; {:.1} MiB rewritten",
            totals.files,
            totals.rewritten_files,
            totals.before,
            totals.after,
            mib(totals.bytes)
        );
    }
    if totals.shared > 0 && !a.unshare {
        eprintln!(
            "tux3 defrag: {:.1} MiB in extents shared with snapshots left as they are; --unshare \
             rewrites them, taking {:.1} MiB more space while the snapshots last",
            mib(totals.shared),
            mib(totals.shared)
        );
    }
    Ok(if totals.failed {
        EXIT_ERRORS_LEFT
    } else {
        EXIT_CLEAN
    })
}

/// What to print per file.
#[derive(Clone, Copy)]
struct Show {
    verbose: bool,
    dry_run: bool,
}

impl Show {
    fn of(a: &DefragArgs) -> Show {
        Show {
            verbose: a.verbose,
            dry_run: a.dry_run,
        }
    }
}

/// Count one file's outcome, with its line (-v, -n) or its error.
fn note(
    t: &mut Totals,
    shown: &str,
    r: Result<DefragReport, String>,
    show: Show,
    bar: Option<&indicatif::ProgressBar>,
) {
    let say = |line: String| match bar {
        Some(b) => b.suspend(|| println!("{line}")),
        None => println!("{line}"),
    };
    t.files += 1;
    match r {
        Ok(r) => {
            t.before += r.extents_before;
            t.after += r.extents_after;
            t.bytes += r.bytes_rewritten;
            t.shared += r.shared_bytes;
            t.rewritten_files += u64::from(r.bytes_rewritten > 0);
            if show.verbose || show.dry_run {
                let shared = if r.shared_bytes > 0 {
                    format!("; {:.1} MiB shared with snapshots", mib(r.shared_bytes))
                } else {
                    String::new()
                };
                say(if show.dry_run {
                    format!(
                        "{shown}: {} extents, {:.1} MiB to rewrite{shared}",
                        r.extents_before,
                        mib(r.bytes_rewritten)
                    )
                } else if r.bytes_rewritten > 0 {
                    let clones = if r.repointed_bytes > 0 {
                        format!("; {:.1} MiB of clones pointed at it", mib(r.repointed_bytes))
                    } else {
                        String::new()
                    };
                    format!(
                        "{shown}: {} extents -> {}, {:.1} MiB rewritten{clones}{shared}",
                        r.extents_before,
                        r.extents_after,
                        mib(r.bytes_rewritten)
                    )
                } else {
                    format!("{shown}: {} extents, left as it is{shared}", r.extents_before)
                });
            }
        }
        Err(e) => {
            t.failed = true;
            let line = format!("tux3 defrag: {shown}: {e}");
            match bar {
                Some(b) => b.suspend(|| eprintln!("{line}")),
                None => eprintln!("{line}"),
            }
        }
    }
}

/// Why a file could not be rewritten, in words.
fn why(e: &Error) -> String {
    match e.errno() {
        Errno::ENOSPC => "no room to rewrite it (the batches before stay rewritten)".into(),
        Errno::EIO => format!("{e} (tux3 scrub names the damage)"),
        Errno::EISDIR => "is a directory: give -r to rewrite the files under it".into(),
        Errno::EINVAL => "not a regular file".into(),
        _ => e.to_string(),
    }
}

/// Rewrite the files of PATHs on tux3 mounts, through their servers.
fn on_mount(a: &DefragArgs) -> Result<Totals, CliError> {
    let mut items = Vec::new();
    let mut seen = HashSet::new();
    let mut t = Totals::default();
    for p in &a.paths {
        let path = Path::new(p);
        let meta = std::fs::symlink_metadata(path)
            .map_err(|e| CliError::at(path.display(), e).with_exit(EXIT_OPERATIONAL))?;
        if meta.is_dir() && !a.recursive {
            return Err(usage(format!(
                "{}: is a directory: give -r to rewrite the files under it",
                path.display()
            )));
        }
        if let Target::Image = locate(path).map_err(|e| e.with_exit(EXIT_OPERATIONAL))? {
            return Err(usage(format!(
                "{}: not on a tux3 mount (for a volume in an image: --image IMAGE PATH...)",
                path.display()
            )));
        }
        if !meta.is_dir() && !meta.is_file() {
            note(
                &mut t,
                &path.display().to_string(),
                Err("not a regular file".into()),
                Show::of(a),
                None,
            );
            continue;
        }
        walk_host(path, &meta, &mut seen, &mut items)?;
    }
    let total = items.iter().map(|i| i.bytes).sum();
    let b = bytes_bar("defrag", total);
    let flags = if a.unshare { DEFRAG_UNSHARE } else { 0 } | if a.dry_run { DEFRAG_DRY_RUN } else { 0 };
    for item in items {
        // Opened one at a time: a tree may hold more files than descriptors.
        let r = File::options()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
            .open(&item.file)
            .and_then(|f| ioctl(&f, flags));
        if let Err(e) = &r {
            if matches!(e.raw_os_error(), Some(libc::ENOTTY)) {
                return Err(CliError::new(format!(
                    "{}: the server does not know defrag (an older tux3?)",
                    item.shown
                ))
                .with_exit(EXIT_OPERATIONAL));
            }
        }
        let r = r.map_err(|e| match e.raw_os_error() {
            Some(code) => why(&Error::Posix(Errno(code))),
            None => e.to_string(),
        });
        note(&mut t, &item.shown, r, Show::of(a), b.as_ref());
        if let Some(b) = &b {
            b.inc(item.bytes);
        }
    }
    if let Some(b) = b {
        b.finish_and_clear();
    }
    Ok(t)
}

/// The regular files at `path` (a file, or with -r a directory), each once.
fn walk_host(
    path: &Path,
    meta: &std::fs::Metadata,
    seen: &mut HashSet<(u64, u64)>,
    out: &mut Vec<Item<PathBuf>>,
) -> Result<(), CliError> {
    let op = |e: io::Error| CliError::at(path.display(), e).with_exit(EXIT_OPERATIONAL);
    if meta.is_file() {
        if seen.insert((meta.dev(), meta.ino())) {
            out.push(Item {
                file: path.to_path_buf(),
                shown: path.display().to_string(),
                bytes: meta.len(),
            });
        }
        return Ok(());
    }
    let mut entries: Vec<_> = std::fs::read_dir(path)
        .map_err(op)?
        .collect::<Result<_, _>>()
        .map_err(op)?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let p = e.path();
        let m = std::fs::symlink_metadata(&p)
            .map_err(|e| CliError::at(p.display(), e).with_exit(EXIT_OPERATIONAL))?;
        // Not across mounts, and only files and directories.
        if m.dev() == meta.dev() && (m.is_file() || m.is_dir()) {
            walk_host(&p, &m, seen, out)?;
        }
    }
    Ok(())
}

/// Send the defrag ioctl on `f`.
fn ioctl(f: &File, flags: u32) -> io::Result<DefragReport> {
    let mut arg = encode_defrag_request(flags);
    // SAFETY: the argument is IOC_DEFRAG's size; the descriptor is open.
    if unsafe { libc::ioctl(f.as_raw_fd(), IOC_DEFRAG as _, arg.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(decode_defrag_report(&arg))
}

/// Rewrite the files of PATHs inside the unmounted `image`.
fn on_image(image: &Path, a: &DefragArgs, opts: &DefragOptions) -> Result<Totals, CliError> {
    let op = |e: CliError| e.with_exit(EXIT_OPERATIONAL);
    let (fs, lock) = open_image(image, !a.dry_run).map_err(op)?;
    let mut t = Totals::default();
    let r = defrag_in(&fs, a, opts, &mut t);
    let closed = close(image, fs).map_err(op);
    drop(lock);
    r?;
    closed?;
    Ok(t)
}

fn defrag_in(fs: &Fs, a: &DefragArgs, opts: &DefragOptions, t: &mut Totals) -> Result<(), CliError> {
    let mut items = Vec::new();
    let mut seen = HashSet::new();
    for p in &a.paths {
        let path = p.as_bytes();
        let attr = resolve_arg(fs, path).map_err(|e| e.with_exit(EXIT_OPERATIONAL))?;
        let shown = format!("/{}", String::from_utf8_lossy(path).trim_start_matches('/'));
        match attr.kind {
            FileType::Directory if !a.recursive => {
                return Err(usage(format!(
                    "{shown}: is a directory: give -r to rewrite the files under it"
                )));
            }
            FileType::Directory | FileType::Regular => {
                walk_volume(fs, attr.ino, attr.kind, attr.size, path, &mut seen, &mut items)?
            }
            _ => note(t, &shown, Err("not a regular file".into()), Show::of(a), None),
        }
    }
    let total = items.iter().map(|i| i.bytes).sum();
    let b = bytes_bar("defrag", total);
    let mut base = 0;
    let bs = fs
        .statfs()
        .map_err(|e| CliError::at("statfs", e).with_exit(EXIT_OPERATIONAL))?
        .block_size as u64;
    for item in items {
        let r = fs.defrag(item.file, opts, &mut |done, _| {
            if let Some(b) = &b {
                b.set_position(base + (done * bs).min(item.bytes));
            }
        });
        base += item.bytes;
        note(t, &item.shown, r.map_err(|e| why(&e)), Show::of(a), b.as_ref());
    }
    if let Some(b) = b {
        b.finish_and_clear();
    }
    Ok(())
}

/// The regular files at `path` inside the volume (a file, or a directory
/// walked), each once.
fn walk_volume(
    fs: &Fs,
    ino: Ino,
    kind: FileType,
    size: u64,
    path: &[u8],
    seen: &mut HashSet<Ino>,
    out: &mut Vec<Item<Ino>>,
) -> Result<(), CliError> {
    let shown = format!("/{}", String::from_utf8_lossy(path).trim_start_matches('/'));
    if kind == FileType::Regular {
        if seen.insert(ino) {
            out.push(Item {
                file: ino,
                shown,
                bytes: size,
            });
        }
        return Ok(());
    }
    let entries =
        read_dir_sorted(fs, ino).map_err(|e| CliError::at(&shown, e).with_exit(EXIT_OPERATIONAL))?;
    for e in entries.iter().filter(|e| e.name != b"." && e.name != b"..") {
        let p = join(path, &e.name);
        let attr = fs
            .lookup(ino, &e.name)
            .map_err(|err| CliError::at(String::from_utf8_lossy(&p), err).with_exit(EXIT_OPERATIONAL))?;
        if matches!(attr.kind, FileType::Regular | FileType::Directory) {
            walk_volume(fs, attr.ino, attr.kind, attr.size, &p, seen, out)?;
        }
    }
    Ok(())
}
