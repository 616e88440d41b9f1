//! Mount options (`-o a,b=c`) of `tux3 mount` and `mount.tux3`, what each
//! means (for `--help` and the man pages), and the command line mount(8)
//! gives a helper (`SPEC DIR [-sfnv] [-o OPTS]`). Pure parsing: no I/O.
//!
//! Calls [`super::parse_size`], clap, and the option types of [`tux3_fuse`].

use super::parse_size;
use clap::error::ErrorKind;
use clap::{CommandFactory, Parser};
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;
use tux3::types::AtimeRule;
use tux3_fuse::FuseOptions;

/// Most request threads `threads=N` accepts.
pub const MAX_THREADS: usize = 64;

/// Everything `-o` can say.
#[derive(Debug, Clone)]
pub struct MountOptions {
    /// What the FUSE frontend needs (read-only, permissions, caching, ...).
    pub fuse: FuseOptions,
    /// `fsync=strict`: fsync commits the whole delta (strict ordering);
    /// `fsync=fast` (the default): just the file, ahead of the delta.
    pub fsync_strict: bool,
    /// `cache=SIZE`: most dirty file data held in memory, the open delta's
    /// plus the commit in flight's (`OpenOptions::dirty_limit`).
    pub dirty_limit: Option<u64>,
    /// `inodes=N`: most inodes kept in cache (`OpenOptions::inode_limit`).
    pub inode_limit: Option<usize>,
    /// `dirleaves=N`: most leaves of one directory's tree kept in memory
    /// (`OpenOptions::dir_leaf_limit`).
    pub dir_leaf_limit: Option<usize>,
    /// `commit=SECONDS`: end a delta this often (`commit=0`: never by time,
    /// only on sync, fsync, memory pressure and unmount).
    pub commit_interval: Option<Duration>,
    /// `snapshot=NAME`: mount the named snapshot instead of the live
    /// volume, read-only (`OpenOptions::snapshot`).
    pub snapshot: Option<String>,
    /// `log=FILE`: where the server's messages go once it has detached
    /// (appended; default: the system log).
    pub log: Option<PathBuf>,
    /// `discard` / `nodiscard` (the default): after each commit, discard
    /// the blocks it freed for good (`OpenOptions::discard`).
    pub discard: bool,
}

/// Default of `commit=SECONDS`.
pub const DEFAULT_COMMIT_SECONDS: u64 = 5;

/// Options mount(8) passes that mean nothing here (or that mount(8) itself
/// handles); accepted and ignored.
const IGNORED: &[&str] = &[
    "defaults",
    "auto",
    "noauto",
    "user",
    "nouser",
    "users",
    "owner",
    "group",
    "_netdev",
    "nofail",
    "lazytime",
    "nolazytime",
    "iversion",
    "noiversion",
    "mand",
    "nomand",
    "loop",
    // Handled before these options are parsed (remount.rs).
    "remount",
    "silent",
    "loud",
];

/// Prefixes of option names that are ignored (`x-systemd.*`, `comment=`).
const IGNORED_PREFIXES: &[&str] = &["x-", "comment=", "helper=", "uhelper="];

/// Parse `-o` option lists (each comma-separated) in order; later options
/// win. With `sloppy`, unknown options are ignored instead of refused. What
/// is not said takes the defaults for the calling user
/// ([`FuseOptions::default`]: a mount by root lets every user in).
pub fn parse_options<S: AsRef<str>>(lists: &[S], sloppy: bool) -> Result<MountOptions, String> {
    parse_options_over(FuseOptions::default(), lists, sloppy)
}

/// [`parse_options`] over the given defaults
/// ([`FuseOptions::for_mounter`]).
pub fn parse_options_over<S: AsRef<str>>(
    base: FuseOptions,
    lists: &[S],
    sloppy: bool,
) -> Result<MountOptions, String> {
    let mut o = MountOptions {
        fuse: base,
        fsync_strict: false,
        dirty_limit: None,
        inode_limit: None,
        dir_leaf_limit: None,
        commit_interval: Some(Duration::from_secs(DEFAULT_COMMIT_SECONDS)),
        snapshot: None,
        log: None,
        discard: false,
    };
    let mut rw = false;
    // As given, for a rollback through the mount that mounts again.
    o.fuse.mount_options = lists
        .iter()
        .map(|l| l.as_ref())
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(",");
    for list in lists {
        for opt in list.as_ref().split(',').filter(|s| !s.is_empty()) {
            match opt {
                "rw" => rw = true,
                "ro" => rw = false,
                _ => {}
            }
            apply(&mut o, opt).or_else(|e| {
                if sloppy && e.starts_with("unknown") {
                    Ok(())
                } else {
                    Err(e)
                }
            })?;
        }
    }
    // `private` is the old behaviour whole: FUSE's nosuid,nodev too, unless
    // said otherwise anywhere in the lists.
    let said = |names: [&str; 2]| {
        lists
            .iter()
            .flat_map(|l| l.as_ref().split(','))
            .any(|opt| names.contains(&opt))
    };
    if said(["private", "noallow_other"]) && !o.fuse.allow_other {
        if !said(["suid", "nosuid"]) {
            o.fuse.suid = None;
        }
        if !said(["dev", "nodev"]) {
            o.fuse.dev = None;
        }
    }
    // A snapshot is never written: its mount is read-only, and asking
    // for rw is a mistake worth saying.
    if let Some(name) = &o.snapshot {
        if rw {
            return Err(format!(
                "mount option snapshot={name}: snapshots are read-only; drop rw"
            ));
        }
        o.fuse.read_only = true;
    }
    Ok(o)
}

/// Options that take no value.
const FLAGS: &[&str] = &[
    "ro",
    "rw",
    "allow_other",
    "noallow_other",
    "private",
    "default_permissions",
    "writeback_cache",
    "uring",
    "nouring",
    "idle_queues",
    "noidle_queues",
    "exec",
    "noexec",
    "suid",
    "nosuid",
    "dev",
    "nodev",
    "atime",
    "noatime",
    "relatime",
    "norelatime",
    "strictatime",
    "nostrictatime",
    "diratime",
    "nodiratime",
    "sync",
    "async",
    "dirsync",
    "discard",
    "nodiscard",
];

/// The value `v` of mount option `name`: a count of `what`, more than 0.
fn count(name: &str, v: &str, what: &str) -> Result<usize, String> {
    match v.parse::<usize>() {
        Ok(0) => Err(format!("mount option {name}: must be more than 0")),
        Ok(n) => Ok(n),
        Err(_) => Err(format!(
            "invalid value '{v}' of mount option {name}: expected a number of {what}"
        )),
    }
}

fn apply(o: &mut MountOptions, opt: &str) -> Result<(), String> {
    if IGNORED.contains(&opt) || IGNORED_PREFIXES.iter().any(|p| opt.starts_with(p)) {
        return Ok(());
    }
    let (name, value) = match opt.split_once('=') {
        Some((n, v)) => (n, Some(v)),
        None => (opt, None),
    };
    if value.is_some() && FLAGS.contains(&name) {
        return Err(format!("mount option '{name}' takes no value"));
    }
    let need = || value.ok_or_else(|| format!("mount option '{name}' needs a value ({name}=...)"));
    let f = &mut o.fuse;
    match name {
        "ro" => f.read_only = true,
        "rw" => f.read_only = false,
        "allow_other" => f.allow_other = true,
        "private" | "noallow_other" => f.allow_other = false,
        "default_permissions" => f.default_permissions = true,
        "writeback_cache" => f.writeback_cache = true,
        "uring" | "nouring" => f.uring = Some(name == "uring"),
        "idle_queues" | "noidle_queues" => f.idle_queues = name == "idle_queues",
        "exec" | "noexec" => f.exec = Some(name == "exec"),
        "suid" | "nosuid" => f.suid = Some(name == "suid"),
        "dev" | "nodev" => f.dev = Some(name == "dev"),
        "atime" => f.atime = Some(true),
        "noatime" => {
            f.atime = Some(false);
            f.atime_rule = AtimeRule::Never;
        }
        "relatime" | "nostrictatime" => f.atime_rule = AtimeRule::Relative,
        "strictatime" | "norelatime" => f.atime_rule = AtimeRule::Strict,
        "diratime" | "nodiratime" => f.diratime = name == "diratime",
        "sync" | "async" => f.sync = Some(name == "sync"),
        "dirsync" => f.dirsync = true,
        "discard" | "nodiscard" => o.discard = name == "discard",
        "fsync" => {
            o.fsync_strict = match need()? {
                "fast" => false,
                "strict" => true,
                v => {
                    return Err(format!(
                        "invalid value '{v}' of mount option fsync: use fast or strict"
                    ))
                }
            }
        }
        "idle_poll" => {
            let v = need()?;
            let us: u64 = v.parse().map_err(|_| {
                format!("invalid value '{v}' of mount option idle_poll: microseconds, 1 to 10000")
            })?;
            if !(1..=10_000).contains(&us) {
                return Err(format!("mount option idle_poll={us}: microseconds, 1 to 10000"));
            }
            f.idle_poll = Some(std::time::Duration::from_micros(us));
        }
        "cache" => {
            let v = need()?;
            let n = parse_size(v).map_err(|e| format!("mount option cache: {e}"))?;
            if n == 0 {
                return Err("mount option cache: must be more than 0".to_string());
            }
            o.dirty_limit = Some(n);
        }
        "inodes" => o.inode_limit = Some(count(name, need()?, "inodes")?),
        "dirleaves" => o.dir_leaf_limit = Some(count(name, need()?, "leaves")?),
        "commit" => {
            let v = need()?;
            let secs: u64 = v
                .parse()
                .map_err(|_| format!("invalid value '{v}' of mount option commit: expected whole seconds"))?;
            o.commit_interval = (secs > 0).then(|| Duration::from_secs(secs));
        }
        "snapshot" => {
            let v = need()?;
            if v.is_empty() || v.len() > 255 || v.contains('/') {
                return Err(format!(
                    "invalid value '{v}' of mount option snapshot: a name of 1 to 255 bytes without '/'"
                ));
            }
            o.snapshot = Some(v.to_string());
        }
        "log" => {
            let v = need()?;
            if v.is_empty() {
                return Err("mount option log: needs a file name (log=FILE)".to_string());
            }
            o.log = Some(PathBuf::from(v));
        }
        "threads" => {
            let v = need()?;
            match v.parse::<usize>() {
                Ok(n) if (1..=MAX_THREADS).contains(&n) => f.threads = n,
                _ => {
                    return Err(format!(
                        "invalid value '{v}' of mount option threads: expected 1 to {MAX_THREADS}"
                    ))
                }
            }
        }
        _ => return Err(format!("unknown mount option '{opt}'")),
    }
    Ok(())
}

/// What each mount option means: (names, meaning), in the order `--help`
/// and the man pages list them.
pub const OPTION_DOCS: &[(&str, &str)] = &[
    (
        "ro, rw",
        "Read-only mount and volume (nothing is ever written), or read-write (the default).",
    ),
    (
        "allow_other",
        "Let every user in, under the kernel's permission checks (mode, owner and group). \
         The default when root mounts; a mounter who is not root needs user_allow_other in \
         /etc/fuse.conf for it.",
    ),
    (
        "private, noallow_other",
        "Let only the mounting user in (the default for a mounter who is not root), and make \
         the mount nosuid,nodev unless suid or dev is given too. Through \
         mount(8) and /etc/fstab write noallow_other: mount(8) takes private as its own \
         propagation flag and does not pass it on.",
    ),
    (
        "default_permissions",
        "The kernel checks permissions from mode, owner and group; always on.",
    ),
    (
        "suid, nosuid, dev, nodev, exec, noexec",
        "Honour set-user-ID and set-group-ID bits, device nodes, and executing files, or not. \
         A mount by root allows all three unless told no, as for any filesystem; a mount by \
         another user is always nosuid,nodev.",
    ),
    (
        "remount",
        "Change the options of the live mount at DIR (tux3 mount -o remount,ro DIR, or mount -o \
         remount,ro DIR): ro or rw, the access-time options and the kernel's flags (nosuid, \
         nodev, noexec, sync, dirsync). Going read-only commits everything first and is \
         refused while files are open for writing; read-write again is refused if the volume \
         was mounted ro. Other options cannot change on a live mount and are refused by name.",
    ),
    (
        "relatime, strictatime, noatime",
        "When reads and listings move access times: relatime (the default) when the access \
         time is not after the last modification or change, or is a day old; strictatime \
         (norelatime) at every read; noatime never. Reads the kernel serves from its page \
         cache do not reach the server and move nothing. An update rides in the open delta \
         and forces no commit.",
    ),
    (
        "diratime, nodiratime",
        "Whether listings move directories' access times (default diratime).",
    ),
    (
        "atime, noatime, sync, async, dirsync",
        "Kernel mount flags, passed through.",
    ),
    (
        "fsync=fast, fsync=strict",
        "fast (the default): fsync makes just that file durable, ahead of the open delta, with \
         the name changes it is part of. strict: fsync commits the whole delta (strict \
         ordering).",
    ),
    (
        "discard, nodiscard",
        "discard: once a commit is durable, the blocks it freed for good (that no durable state \
         and no snapshot refers to) go back to the device, batched per commit: holes punched in \
         an image file, discards (TRIM) on a block device. A device that cannot discard is noted \
         once in the log and left alone. nodiscard (the default) leaves that to tux3 fstrim.",
    ),
    (
        "commit=SECONDS",
        "End a delta this often (default 5; 0: only on sync, fsync, memory pressure and \
         unmount).",
    ),
    (
        "cache=SIZE",
        "Most dirty file data held in memory (64M, 1G; default a sixty-fourth of memory, from \
         64 MiB to 1 GiB).",
    ),
    (
        "inodes=N",
        "Most inodes the server keeps in memory (default a sixteenth of memory at 1 KiB an \
         inode, from 16384 to 16777216). Past it, those not used lately and with nothing \
         uncommitted are let go, and loaded again from the inode table when needed.",
    ),
    (
        "dirleaves=N",
        "Most leaves of one directory's tree (some 100 names each) the server keeps in memory \
         (default a 128th of memory at 8 KiB a leaf, from 1024 to 1048576). Past it, the \
         directory's committed leaves are let go down to three quarters of it, and read again \
         when needed.",
    ),
    (
        "writeback_cache",
        "Use the kernel's FUSE writeback cache: faster small writes, but a write is no longer \
         atomic and data is reordered against renames and other files' writes.",
    ),
    (
        "idle_poll=US",
        "Keep idle CPUs awake for US microseconds (1 to 10000) after each request: a thread \
         per CPU at idle priority spins instead of letting the CPU halt, so waking a caller \
         or the server there is cheap. Helps latency-bound work (creates, stats) on virtual \
         machines whose idle vCPUs halt at once, at the cost of that CPU time. Off by \
         default; io_uring transport only; idle_queues has no effect with it.",
    ),
    (
        "idle_queues, noidle_queues",
        "The io_uring queue threads commit a lone reply at idle CPU priority while some CPU \
         is idle, so that it wakes its caller on the same CPU instead of the idle one: on \
         virtual machines whose idle vCPUs halt, single-threaded creates through the mount \
         run about 2.5 times as fast. A commit kept from its CPU for 2 ms or more sends the \
         thread back to normal priority for a while (1 to 64 s). Default: idle_queues; \
         io_uring transport only.",
    ),
    (
        "snapshot=NAME",
        "Mount the snapshot NAME (see tux3 snapshot) instead of the live volume: read-only \
         (rw is refused), and possible while the live volume is mounted elsewhere.",
    ),
    (
        "log=FILE",
        "Append the server's messages (warnings, errors, and the note that FUSE over io_uring \
         is switched off) to FILE instead of the system log. Without -f the server keeps none \
         of its caller's descriptors: standard input, output and error go to /dev/null and \
         its messages to the system log (/dev/log, facility daemon, as tux3[PID]) unless log= \
         names a file; with -f they go to standard error unless log= names a file.",
    ),
    ("threads=N", "Request threads (default 4, at most 64)."),
    (
        "uring, nouring",
        "Serve requests through FUSE over io_uring (Linux 6.14 and later), or only through \
         /dev/fuse. Default: io_uring when the kernel allows it \
         (/sys/module/fuse/parameters/enable_uring is Y); with uring the mount fails if it \
         does not.",
    ),
    (
        "defaults, auto, noauto, user, nouser, users, owner, group, _netdev, nofail, \
         lazytime, loop, x-*, comment=...",
        "mount(8)'s own options: accepted and ignored (lazytime: access times never force a \
         commit anyway).",
    ),
];

/// [`OPTION_DOCS`] as text for `--help`.
pub fn options_help() -> String {
    let mut text =
        String::from("Mount options (-o, comma-separated; later ones win; any other is refused):\n");
    for (names, meaning) in OPTION_DOCS {
        text.push_str(&format!("  {names}\n          {meaning}\n"));
    }
    text
}

/// The command line mount(8) gives `mount.tux3`: `SPEC DIR [-sfnv] [-N NS]
/// [-o OPTIONS] [-t TYPE]`, flags anywhere and combined.
#[derive(Parser, Debug, Clone, Default, PartialEq, Eq)]
#[command(
    name = "mount.tux3",
    bin_name = "mount.tux3",
    version,
    about = "Mount a tux3 volume: the helper mount(8) runs for filesystems of type tux3",
    long_about = "Mount a tux3 volume through FUSE: the helper mount(8) runs for `mount -t tux3 \
                  SPEC DIR` and /etc/fstab lines of type tux3. It runs the same code as `tux3 \
                  mount`: it returns once the mount is live, saying nothing, and leaves a \
                  server process that ends at umount and logs to the system log (or to \
                  -o log=FILE). Mounted by root, every user gets in under the kernel's \
                  permission checks.\n\nExit status: 0 mounted, 1 bad invocation or options, \
                  32 mount failure (as mount(8) expects).",
    after_long_help = options_help(),
)]
pub struct HelperArgs {
    /// Image file or block device holding the volume
    #[arg(value_name = "IMAGE|DEVICE")]
    pub target: PathBuf,
    /// Directory to mount it on
    #[arg(value_name = "DIR")]
    pub mountpoint: PathBuf,
    /// Comma-separated mount options (see below); may be repeated
    #[arg(short = 'o', value_name = "OPTIONS")]
    pub options: Vec<String>,
    /// Sloppy: ignore unknown mount options instead of refusing them
    #[arg(short = 's')]
    pub sloppy: bool,
    /// Fake: check everything, mount nothing
    #[arg(short = 'f')]
    pub fake: bool,
    /// Say what was done
    #[arg(short = 'v')]
    pub verbose: bool,
    /// Do not write /etc/mtab (there is none to write: accepted and ignored)
    #[arg(short = 'n')]
    pub no_mtab: bool,
    /// Filesystem type: tux3 or fuse.tux3
    #[arg(short = 't', value_name = "TYPE", value_parser = ["tux3", "fuse.tux3"])]
    pub fstype: Option<String>,
    /// Mount namespace (not supported)
    #[arg(short = 'N', value_name = "NS", hide = true)]
    pub namespace: Option<PathBuf>,
}

impl HelperArgs {
    /// Parse the arguments after the program name; help and version come
    /// back as errors that do not `use_stderr`.
    pub fn parse_args<S: Into<OsString> + Clone>(args: &[S]) -> Result<HelperArgs, clap::Error> {
        let argv = std::iter::once(OsString::from("mount.tux3")).chain(args.iter().cloned().map(Into::into));
        let h = HelperArgs::try_parse_from(argv)?;
        if h.namespace.is_some() {
            return Err(HelperArgs::command().error(
                ErrorKind::ArgumentConflict,
                "-N (mount namespaces) is not supported",
            ));
        }
        Ok(h)
    }
}

/// Parse `SPEC DIR [-sfnv] [-N NS] [-o OPTIONS] [-t TYPE]` (arguments after
/// the program name); an error is one line saying what was wrong.
pub fn parse_helper_args<S: Into<OsString> + Clone>(args: &[S]) -> Result<HelperArgs, String> {
    HelperArgs::parse_args(args).map_err(|e| one_line(&e))
}

/// The first line of a clap error, without its `error: ` label.
pub fn one_line(e: &clap::Error) -> String {
    let text = e.to_string();
    let first = text.lines().next().unwrap_or_default();
    first.strip_prefix("error: ").unwrap_or(first).to_string()
}
