//! `tux3 snapshot create|list|delete|diff|rollback TARGET ...`: snapshots of a whole
//! volume. TARGET is either any file or directory of a tux3 mount, whose
//! server does the work (the snapshot ioctls of [`tux3_fuse`]), or an image
//! file or block device that is not mounted, which this command opens,
//! changes and closes. Which one is decided by the device (`target.rs`): a
//! path whose `st_dev` is that of a `fuse.tux3` mount in
//! `/proc/self/mounts` is on that mount.
//!
//! Calls [`tux3::open_path`], the engine API ([`tux3::Fs`]: snapshot_*),
//! `target.rs` (telling a mount from an image, opening an image, a
//! rollback through a mount) and the FUSE adapter's ioctl numbers and
//! argument encoding.

use super::format::{format_time_seconds, human_size, local_offset};
use super::image::image_error;
use super::mount::snapshot_is_mounted;
use super::target::{close, locate, open_image, with_unmounted, Target};
use super::{stdout_error, CliError};
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::ffi::OsString;
use std::fs::File;
use std::io::{self, IsTerminal, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use tux3::types::SnapshotInfo;
use tux3::{open_path, Fs};
use tux3_fuse::{
    decode_snapshot, encode_name, list_request, IOC_SNAPSHOT_CREATE, IOC_SNAPSHOT_DELETE, IOC_SNAPSHOT_LIST,
    SNAPSHOT_RECORD_LEN,
};

/// What `tux3 snapshot --help` says after the summary.
pub const LONG_ABOUT: &str = "Create, list and delete snapshots of a whole volume. A snapshot is \
     the volume as it was when it was taken, kept read-only: mount it with \
     `tux3 mount -o snapshot=NAME IMAGE DIR`, beside the live volume if that is mounted.\n\n\
     TARGET is any file or directory of a tux3 mount (the mount's server does the work), or \
     an image file or block device that is not mounted (opened, changed and closed by this \
     command). Creating and deleting through a mount is for root and the user who mounted \
     it.\n\nExit status: 0 done, 1 error.";

/// Arguments of `tux3 snapshot`.
#[derive(Args, Debug)]
pub struct SnapshotArgs {
    #[command(subcommand)]
    pub action: Action,
}

/// What to do with snapshots.
#[derive(Subcommand, Debug)]
pub enum Action {
    /// Take a snapshot of everything written so far
    #[command(
        long_about = "Take a snapshot named NAME of everything written so far: through \
         a mount, the kernel's cached writes are sent first and the server commits them as \
         part of the snapshot. Fails if the name is taken."
    )]
    Create {
        /// A path on a tux3 mount, or an unmounted image file or block device
        target: PathBuf,
        /// Name of the new snapshot: 1 to 255 bytes, no '/'
        name: OsString,
    },
    /// List the snapshots, oldest first
    #[command(long_about = "List the snapshots, oldest first: name, id, when it was taken \
         (local time), the bytes it refers to, the bytes only it holds (what deleting it gives \
         back), and its state: ok, or deleting with the extents still to reclaim.")]
    List {
        /// A path on a tux3 mount, or an unmounted image file or block device
        target: PathBuf,
        /// Print a JSON array instead of a table (times in seconds since the epoch)
        #[arg(long)]
        json: bool,
    },
    /// Delete a snapshot and give its space back
    #[command(long_about = "Delete the snapshot NAME. The name is gone when the command \
         returns. On an image, its space is reclaimed before the command exits (a progress bar \
         on a terminal); through a mount, the server reclaims it in the background \
         (tux3 snapshot list shows what is left).")]
    Delete {
        /// A path on a tux3 mount, or an unmounted image file or block device
        target: PathBuf,
        /// Name of the snapshot to delete
        name: OsString,
    },
    /// List what changed from snapshot OLDER to snapshot NEWER
    #[command(
        long_about = "List the paths that differ from snapshot OLDER to snapshot NEWER, \
         one per line, sorted by path: `+ PATH` created, `- PATH` deleted, `M PATH` modified \
         (data or attributes), `R OLD -> NEW` renamed. Only what the two snapshots do not share \
         is read. Works on an image or through a mount (the image is read, nothing is written)."
    )]
    Diff {
        /// A path on a tux3 mount, or an unmounted image file or block device
        target: PathBuf,
        /// The older snapshot
        older: OsString,
        /// The newer snapshot
        newer: OsString,
    },
    /// Make the volume what a snapshot holds
    #[command(
        long_about = "Make the live volume what snapshot NAME holds: everything written \
         since is gone from it. Every snapshot stays, newer ones included. Only on an unmounted \
         image or block device (unmount it first); it reads the volume whole."
    )]
    Rollback {
        /// An unmounted image file or block device
        target: PathBuf,
        /// The snapshot to go back to
        name: OsString,
    },
}

impl Action {
    /// `snapshot create`, ... for error messages.
    pub fn command_name(&self) -> &'static str {
        match self {
            Action::Create { .. } => "snapshot create",
            Action::List { .. } => "snapshot list",
            Action::Delete { .. } => "snapshot delete",
            Action::Diff { .. } => "snapshot diff",
            Action::Rollback { .. } => "snapshot rollback",
        }
    }
}

pub fn run(a: &SnapshotArgs) -> Result<u8, CliError> {
    match &a.action {
        Action::Create { target, name } => {
            let name = checked_name(target, name)?;
            match locate(target)? {
                Target::Mount(f, _) => {
                    // The pages the kernel holds (written through mmap or
                    // with the writeback cache) go to the server first, so
                    // the snapshot holds them: FUSE's syncfs writes them
                    // back (it does not reach the server otherwise).
                    // SAFETY: syncfs on a descriptor we own.
                    if unsafe { libc::syncfs(f.as_raw_fd()) } != 0 {
                        let e = io::Error::last_os_error();
                        return Err(CliError::at(
                            format!("{}: writing back cached pages", target.display()),
                            e,
                        ));
                    }
                    name_ioctl(&f, IOC_SNAPSHOT_CREATE, name)
                        .map_err(|e| failure(target, Op::Create, Some(name), e.into()))?;
                }
                Target::Image => {
                    let (fs, _lock) = open_image(target, true)?;
                    fs.snapshot_create(name)
                        .map_err(|e| failure(target, Op::Create, Some(name), e.into()))?;
                    close(target, fs)?;
                }
            }
        }
        Action::Delete { target, name } => {
            let name = checked_name(target, name)?;
            let found = locate(target)?;
            let image = match &found {
                Target::Mount(_, source) => source,
                Target::Image => target,
            };
            // A mounted snapshot's blocks must stay. (Where the mark cannot
            // be read, as for a source that is not a path, nothing stops
            // the delete.)
            if snapshot_is_mounted(image, name).unwrap_or(false) {
                return Err(CliError::new(format!(
                    "{}: snapshot {} is mounted: unmount it first",
                    target.display(),
                    quoted(name)
                )));
            }
            match found {
                Target::Mount(f, _) => name_ioctl(&f, IOC_SNAPSHOT_DELETE, name)
                    .map_err(|e| failure(target, Op::Delete, Some(name), e.into()))?,
                Target::Image => {
                    let (fs, _lock) = open_image(target, true)?;
                    fs.snapshot_delete(name)
                        .map_err(|e| failure(target, Op::Delete, Some(name), e.into()))?;
                    reclaim(&fs, name).map_err(|e| {
                        CliError::at(
                            format!(
                                "{}: reclaiming the space of snapshot {}",
                                target.display(),
                                quoted(name)
                            ),
                            e,
                        )
                    })?;
                    close(target, fs)?;
                }
            }
        }
        Action::Diff { target, older, newer } => {
            let (older, newer) = (checked_name(target, older)?, checked_name(target, newer)?);
            let image = match locate(target)? {
                Target::Mount(_, source) => source,
                Target::Image => target.clone(),
            };
            let dev = open_path(&image, false).map_err(|e| image_error(&image, e))?;
            let changes = tux3_tools::snapdiff::diff(dev, older, newer).map_err(|e| {
                let which = if matches!(e, tux3::Error::NotFound(_)) {
                    e.to_string()
                } else {
                    format!("{} -> {}: {e}", quoted(older), quoted(newer))
                };
                CliError::new(format!("{}: diff {which}", target.display()))
            })?;
            let mut out = Vec::new();
            for c in changes {
                out.push(c.kind.code() as u8);
                out.push(b'\t');
                out.extend_from_slice(&c.path);
                if let Some(to) = &c.to {
                    out.extend_from_slice(b" -> ");
                    out.extend_from_slice(to);
                }
                out.push(b'\n');
            }
            io::stdout().write_all(&out).map_err(stdout_error)?;
        }
        Action::Rollback { target, name } => {
            let name = checked_name(target, name)?;
            match locate(target)? {
                Target::Mount(f, _) => rollback_mounted(target, f, name)?,
                Target::Image => rollback_image(target, target, name)?,
            }
        }
        Action::List { target, json } => {
            let all = match locate(target)? {
                Target::Mount(f, _) => {
                    list_ioctl(&f).map_err(|e| failure(target, Op::List, None, e.into()))?
                }
                Target::Image => {
                    let (fs, _lock) = open_image(target, false)?;
                    let all = fs
                        .snapshot_list()
                        .map_err(|e| failure(target, Op::List, None, e.into()))?;
                    close(target, fs)?;
                    all
                }
            };
            let text = if *json { to_json(&all) } else { table(&all) };
            io::stdout().write_all(text.as_bytes()).map_err(stdout_error)?;
        }
    }
    Ok(0)
}

/// Roll the unmounted volume at `image` back to snapshot `name`
/// (`target` names it in messages).
fn rollback_image(target: &Path, image: &Path, name: &[u8]) -> Result<(), CliError> {
    let (fs, _lock) = open_image(image, true)?;
    fs.snapshot_rollback(name).map_err(|e| {
        let t = target.display();
        CliError::new(match e.errno().0 {
            libc::ENOENT => format!("{t}: no snapshot {}", quoted(name)),
            libc::EBUSY => format!("{t}: the volume is in use: rollback needs it to itself"),
            _ => format!("{t}: rollback to snapshot {}: {e}", quoted(name)),
        })
    })?;
    close(image, fs)
}

/// Roll a mounted volume back, as `zfs rollback` does: unmount it, roll
/// the image back, mount it again ([`with_unmounted`]).
fn rollback_mounted(target: &Path, f: File, name: &[u8]) -> Result<(), CliError> {
    let all = list_ioctl(&f).map_err(|e| failure(target, Op::List, None, e.into()))?;
    if !all.iter().any(|s| !s.deleting && s.name == name) {
        return Err(CliError::new(format!(
            "{}: no snapshot {}",
            target.display(),
            quoted(name)
        )));
    }
    with_unmounted(target, f, "roll back", &mut |image| {
        rollback_image(target, image, name)
    })
}

/// The name as bytes, refused here when no volume could take it.
fn checked_name<'a>(target: &Path, name: &'a OsString) -> Result<&'a [u8], CliError> {
    let name = name.as_bytes();
    if encode_name(name).is_none() || name.is_empty() || name.contains(&b'/') {
        return Err(bad_name(target, name));
    }
    Ok(name)
}

fn bad_name(target: &Path, name: &[u8]) -> CliError {
    CliError::new(format!(
        "{}: invalid snapshot name {}: use 1 to 255 bytes without '/'",
        target.display(),
        quoted(name)
    ))
}

/// `"name"`, for messages.
fn quoted(name: &[u8]) -> String {
    format!("\"{}\"", String::from_utf8_lossy(name))
}

/// Run the reclaim of deleted snapshots to the end, with a bar on a
/// terminal.
fn reclaim(fs: &Fs, name: &[u8]) -> tux3::Result<()> {
    let bar = io::stderr().is_terminal().then(|| {
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        let template = format!(
            "reclaiming the space of {}: {{bar:40}} {{pos}}/{{len}} extents",
            quoted(name).replace('{', "{{").replace('}', "}}")
        );
        if let Ok(style) = ProgressStyle::with_template(&template) {
            bar.set_style(style);
        }
        bar
    });
    let mut total = None;
    let r = fs.snapshot_reclaim(&mut |left| {
        if let Some(bar) = &bar {
            let all = *total.get_or_insert_with(|| {
                bar.set_length(left);
                left
            });
            bar.set_position(all.saturating_sub(left));
        }
    });
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    r
}

/// Send a create or delete ioctl with `name`.
fn name_ioctl(f: &File, cmd: u32, name: &[u8]) -> io::Result<()> {
    let arg = encode_name(name).ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: the command's size is that of `arg`, which outlives the call.
    if unsafe { libc::ioctl(f.as_raw_fd(), cmd as _, arg.as_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Most snapshots a listing through a mount asks for: a server that never
/// sends the end marker cannot keep it going forever.
const MAX_LISTED: u64 = 1 << 20;

/// Every snapshot of the mount, one ioctl each.
fn list_ioctl(f: &File) -> io::Result<Vec<SnapshotInfo>> {
    let mut all = Vec::new();
    // Each answer is the first snapshot with an id at or above the one
    // asked for; the next question starts past it.
    let mut from = 0u64;
    for _ in 0..MAX_LISTED {
        let mut rec: [u8; SNAPSHOT_RECORD_LEN] = list_request(from);
        // SAFETY: the command's size is that of `rec`, which the kernel
        // reads and writes; it outlives the call.
        if unsafe { libc::ioctl(f.as_raw_fd(), IOC_SNAPSHOT_LIST as _, rec.as_mut_ptr()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        match decode_snapshot(&rec) {
            Some(s) => {
                from = s.id.saturating_add(1);
                all.push(s);
            }
            None => break,
        }
    }
    Ok(all)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    Create,
    Delete,
    List,
}

/// An engine error or one an ioctl returned.
struct Failure {
    errno: Option<i32>,
    text: String,
}

impl From<tux3::Error> for Failure {
    fn from(e: tux3::Error) -> Failure {
        let errno = matches!(e, tux3::Error::Posix(_)).then(|| e.errno().0);
        Failure {
            errno,
            text: e.to_string(),
        }
    }
}

impl From<io::Error> for Failure {
    fn from(e: io::Error) -> Failure {
        Failure {
            errno: e.raw_os_error(),
            text: e.to_string(),
        }
    }
}

/// The message for a failed operation, naming the target and the snapshot.
fn failure(target: &Path, op: Op, name: Option<&[u8]>, e: Failure) -> CliError {
    let t = target.display();
    let n = name.map(quoted).unwrap_or_default();
    let verb = match op {
        Op::Create => "create",
        Op::Delete => "delete",
        Op::List => "list",
    };
    let msg = match (e.errno, op) {
        (Some(libc::EEXIST), Op::Create) => format!("{t}: snapshot {n} already exists"),
        (Some(libc::ENOENT), Op::Delete) => format!("{t}: no snapshot {n}"),
        (Some(libc::EINVAL), Op::Create | Op::Delete) => return bad_name(target, name.unwrap_or_default()),
        (Some(libc::EROFS), _) => format!("{t}: read-only, cannot {verb} snapshot {n}"),
        (Some(libc::ENOSPC), Op::Create) => format!("{t}: no space left for snapshot {n}"),
        (Some(libc::EPERM | libc::EACCES), _) => {
            format!("{t}: not allowed to {verb} snapshots (root and the user who mounted it may)")
        }
        (Some(libc::ENOTTY | libc::EOPNOTSUPP), _) => {
            format!("{t}: this mount's server does not know snapshots (remount it with this tux3)")
        }
        _ if name.is_some() => format!("{t}: {verb} snapshot {n}: {}", e.text),
        _ => format!("{t}: {verb} snapshots: {}", e.text),
    };
    CliError::new(msg)
}

/// The listing as a table.
fn table(all: &[SnapshotInfo]) -> String {
    let head = ["NAME", "ID", "CREATED", "REFERENCED", "UNIQUE", "STATE"];
    let rows: Vec<[String; 6]> = all
        .iter()
        .map(|s| {
            [
                String::from_utf8_lossy(&s.name).into_owned(),
                s.id.to_string(),
                format_time_seconds(s.created, local_offset(s.created)),
                human_size(s.referenced_bytes),
                human_size(s.unique_bytes),
                if s.deleting {
                    format!("deleting ({} left)", s.reclaim_left)
                } else {
                    "ok".to_string()
                },
            ]
        })
        .collect();
    let mut width = head.map(str::len);
    for r in &rows {
        for (w, cell) in width.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    // Numbers are aligned right, words left; the last column unpadded.
    let right = [false, true, false, true, true, false];
    let line = |cells: [&str; 6]| {
        let mut out = String::new();
        for (i, cell) in cells.iter().enumerate() {
            let pad = " ".repeat(width[i] - cell.chars().count());
            if i > 0 {
                out.push_str("  ");
            }
            match (right[i], i == cells.len() - 1) {
                (true, _) => out.push_str(&format!("{pad}{cell}")),
                (false, true) => out.push_str(cell),
                (false, false) => out.push_str(&format!("{cell}{pad}")),
            }
        }
        out.push('\n');
        out
    };
    let mut text = line(head);
    for r in &rows {
        text.push_str(&line([&r[0], &r[1], &r[2], &r[3], &r[4], &r[5]]));
    }
    text
}

/// The listing as a JSON array.
fn to_json(all: &[SnapshotInfo]) -> String {
    let items: Vec<String> = all
        .iter()
        .map(|s| {
            format!(
                "{{\"name\":{},\"id\":{},\"created\":{},\"referenced_bytes\":{},\"unique_bytes\":{},\
                 \"deleting\":{},\"reclaim_left\":{}}}",
                json_string(&String::from_utf8_lossy(&s.name)),
                s.id,
                s.created,
                s.referenced_bytes,
                s.unique_bytes,
                s.deleting,
                s.reclaim_left
            )
        })
        .collect();
    format!("[{}]\n", items.join(","))
}

fn json_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(name: &str, deleting: bool) -> SnapshotInfo {
        SnapshotInfo {
            id: 7,
            name: name.as_bytes().to_vec(),
            created: 0,
            deleting,
            reclaim_left: 3,
            unique_bytes: 4096,
            referenced_bytes: 12 << 20,
            origin: Default::default(),
        }
    }

    #[test]
    fn the_table_has_a_column_each() {
        let t = table(&[snap("daily", false), snap("a \"b\"", true)]);
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].starts_with("NAME"), "{t}");
        assert!(lines[0].ends_with("STATE"), "{t}");
        assert!(
            lines[1].contains("12M") && lines[1].contains("4.0K") && lines[1].ends_with("ok"),
            "{t}"
        );
        assert!(lines[2].ends_with("deleting (3 left)"), "{t}");
        assert_eq!(table(&[]).lines().count(), 1);
    }

    #[test]
    fn json_escapes_names() {
        let j = to_json(&[snap("a \"b\"\n", true)]);
        assert!(
            j.starts_with("[{\"name\":\"a \\\"b\\\"\\u000a\",\"id\":7,"),
            "{j}"
        );
        assert!(j.contains("\"deleting\":true"), "{j}");
        assert_eq!(to_json(&[]), "[]\n");
    }
}
