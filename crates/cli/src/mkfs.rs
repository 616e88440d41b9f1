//! `tux3 mkfs [--size SIZE] [--block-size BYTES] [--from DIR] [-q] TARGET`:
//! prepare the target (create a sparse image, extend a short one, or take a
//! block device as it is), format it, and optionally copy a host directory
//! tree in (see `import`). `mkfs.tux3` runs the same code.
//!
//! Calls [`tux3::device::file`] (create and open the image), the engine API
//! ([`tux3::Fs::format`], [`tux3::Fs::open`], [`tux3::Fs::close`]).

use super::args::{parse_block_size, parse_size};
use super::import::{import_tree, ImportStats};
use super::CliError;
use clap::Args;
use std::fs;
use std::io::{ErrorKind, IsTerminal};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tux3::device::file::{create_image, FileDevice};
use tux3::device::Device;
use tux3::types::{FormatOptions, OpenOptions};
use tux3::Fs;

/// Arguments of `tux3 mkfs`.
#[derive(Args, Debug)]
pub struct MkfsArgs {
    /// Volume size, with an optional binary suffix K, M, G or T (e.g. 4G).
    /// Required when TARGET does not exist; extends a smaller image file
    #[arg(long, short = 's', value_parser = parse_size)]
    pub size: Option<u64>,
    /// Block size in bytes: a power of two from 1024 to 65536
    #[arg(long, short = 'b', default_value = "4096", value_parser = parse_block_size)]
    pub block_size: u32,
    /// Copy this host directory tree into the new volume
    #[arg(long, value_name = "DIR")]
    pub from: Option<PathBuf>,
    /// Print nothing but warnings and errors (no summary, no progress bar)
    #[arg(long, short = 'q')]
    pub quiet: bool,
    /// Make a volume without data checksums (format version 3): file data
    /// is then not verified on reads or by scrub
    #[arg(long)]
    pub no_data_sums: bool,
    /// Write every bitmap block, as programs reading format versions 1
    /// to 4 expect (format version 4, or 3 with --no-data-sums); by
    /// default all-clear bitmap blocks are left out (version 5)
    #[arg(long)]
    pub no_sparse_bitmap: bool,
    /// Image file (created sparse if missing) or block device
    pub target: PathBuf,
}

/// Make `target` ready to format; true when this created it.
fn prepare_target(target: &Path, size: Option<u64>) -> Result<bool, CliError> {
    let shown = target.display();
    let meta = match fs::metadata(target) {
        Ok(meta) => meta,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            let size = size.ok_or_else(|| {
                CliError::new(format!(
                    "{shown}: does not exist; give --size to create an image file"
                ))
            })?;
            create_image(target, size).map_err(|e| CliError::at(&shown, e))?;
            return Ok(true);
        }
        Err(e) => return Err(CliError::at(&shown, e)),
    };
    let kind = meta.file_type();
    if kind.is_file() {
        let mut len = meta.len();
        if let Some(size) = size.filter(|&s| s > len) {
            let file = fs::OpenOptions::new()
                .write(true)
                .open(target)
                .map_err(|e| CliError::at(&shown, e))?;
            file.set_len(size).map_err(|e| CliError::at(&shown, e))?;
            len = size;
        }
        if len == 0 {
            return Err(CliError::new(format!("{shown}: the file is empty; give --size")));
        }
        Ok(false)
    } else if kind.is_block_device() {
        if size.is_some() {
            eprintln!(
                "tux3 mkfs: warning: {shown}: --size is ignored for a block device; using the whole device"
            );
        }
        Ok(false)
    } else {
        Err(CliError::new(format!(
            "{shown}: not a regular file or block device"
        )))
    }
}

/// `tux3 mkfs`.
pub fn run(args: &MkfsArgs) -> Result<u8, CliError> {
    let target = &args.target;
    // Check the source before touching the target.
    let source = match &args.from {
        Some(dir) => {
            let meta = fs::metadata(dir).map_err(|e| CliError::at(dir.display(), e))?;
            if !meta.is_dir() {
                return Err(CliError::new(format!("{}: not a directory", dir.display())));
            }
            Some((dir.as_path(), meta))
        }
        None => None,
    };

    let created = prepare_target(target, args.size)?;
    let result = make(args, source);
    if result.is_err() && created {
        // Leave nothing half-made behind when the image was ours.
        let _ = fs::remove_file(target);
    }
    result
}

/// Format the prepared target and copy `source` in.
fn make(args: &MkfsArgs, source: Option<(&Path, fs::Metadata)>) -> Result<u8, CliError> {
    let target = &args.target;
    let shown = target.display().to_string();
    let file_dev = FileDevice::open(target, args.block_size, true).map_err(|e| CliError::at(&shown, e))?;
    let dev: Arc<dyn Device> = Arc::new(file_dev);
    if dev.block_count() == 0 {
        return Err(CliError::new(format!(
            "{shown}: smaller than one {}-byte block",
            args.block_size
        )));
    }

    let mut opts = FormatOptions {
        data_sums: !args.no_data_sums,
        sparse_bitmap: !args.no_sparse_bitmap,
        ..FormatOptions::default()
    };
    if let Some((_, meta)) = &source {
        opts.root_uid = meta.uid();
        opts.root_gid = meta.gid();
        opts.root_mode = meta.mode() & 0o7777;
    }
    tux3::Fs::format(Arc::clone(&dev), &opts).map_err(|e| CliError::at(format!("{shown}: format"), e))?;

    let mut stats = None;
    if let Some((dir, _)) = source {
        let fs = Fs::open(Arc::clone(&dev), OpenOptions::default())
            .map_err(|e| CliError::at(format!("{shown}: open after format"), e))?;
        // Never copy the image into itself when it lies inside the source.
        let skip = fs::metadata(target).ok().map(|m| (m.dev(), m.ino()));
        let progress = !args.quiet && std::io::stderr().is_terminal();
        stats = Some(import_tree(&fs, dir, skip, progress)?);
        // Start the new volume with everything unified and a fresh log, so
        // that every later mount has little to replay.
        fs.unify()
            .map_err(|e| CliError::at(format!("{shown}: unify"), e))?;
        fs.close()
            .map_err(|e| CliError::at(format!("{shown}: close"), e))?;
    }

    if args.quiet {
        return Ok(0);
    }
    println!(
        "{shown}: tux3 volume of {} blocks of {} bytes",
        dev.block_count(),
        dev.block_size()
    );
    if let (Some(s), Some(dir)) = (stats, &args.from) {
        print_import_summary(&s, dir);
    }
    let c = dev.counters();
    println!(
        "device: {} blocks written in {} writes, {} flushes",
        c.blocks_written, c.writes, c.flushes
    );
    Ok(0)
}

fn print_import_summary(s: &ImportStats, dir: &Path) {
    println!(
        "copied from {}: {} files ({} bytes), {} directories, {} symlinks, {} special files, {} hard links",
        dir.display(),
        s.files,
        s.bytes,
        s.dirs,
        s.symlinks,
        s.special,
        s.hard_links
    );
    if s.xattrs_skipped > 0 {
        println!(
            "{} extended attributes not copied (see warnings)",
            s.xattrs_skipped
        );
    }
}
