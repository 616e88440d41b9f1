//! Mount options (`-o a,b=c`) of `tux3 mount` and `mount.tux3`, and the
//! command line mount(8) gives a helper (`SPEC DIR [-sfnv] [-o OPTS]`).
//! Pure parsing: no I/O.
//!
//! Calls [`super::parse_size`] and the option types of [`tux3_fuse`].

use super::parse_size;
use std::path::PathBuf;
use std::time::Duration;
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
    /// `commit=SECONDS`: end a delta this often (`commit=0`: never by time,
    /// only on sync, fsync, memory pressure and unmount).
    pub commit_interval: Option<Duration>,
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
    "relatime",
    "norelatime",
    "strictatime",
    "nostrictatime",
    "diratime",
    "nodiratime",
    "lazytime",
    "nolazytime",
    "iversion",
    "noiversion",
    "mand",
    "nomand",
    "loop",
    "silent",
    "loud",
];

/// Prefixes of option names that are ignored (`x-systemd.*`, `comment=`).
const IGNORED_PREFIXES: &[&str] = &["x-", "comment=", "helper=", "uhelper="];

/// Parse `-o` option lists (each comma-separated) in order; later options
/// win. With `sloppy`, unknown options are ignored instead of refused.
pub fn parse_options<S: AsRef<str>>(lists: &[S], sloppy: bool) -> Result<MountOptions, String> {
    let mut o = MountOptions {
        fuse: FuseOptions::default(),
        fsync_strict: false,
        dirty_limit: None,
        commit_interval: Some(Duration::from_secs(DEFAULT_COMMIT_SECONDS)),
    };
    for list in lists {
        for opt in list.as_ref().split(',').filter(|s| !s.is_empty()) {
            apply(&mut o, opt).or_else(|e| {
                if sloppy && e.starts_with("unknown") {
                    Ok(())
                } else {
                    Err(e)
                }
            })?;
        }
    }
    Ok(o)
}

/// Options that take no value.
const FLAGS: &[&str] = &[
    "ro",
    "rw",
    "allow_other",
    "default_permissions",
    "writeback_cache",
    "uring",
    "nouring",
    "exec",
    "noexec",
    "suid",
    "nosuid",
    "dev",
    "nodev",
    "atime",
    "noatime",
    "sync",
    "async",
    "dirsync",
];

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
        "default_permissions" => f.default_permissions = true,
        "writeback_cache" => f.writeback_cache = true,
        "uring" | "nouring" => f.uring = Some(name == "uring"),
        "exec" | "noexec" => f.exec = Some(name == "exec"),
        "suid" | "nosuid" => f.suid = Some(name == "suid"),
        "dev" | "nodev" => f.dev = Some(name == "dev"),
        "atime" | "noatime" => f.atime = Some(name == "atime"),
        "sync" | "async" => f.sync = Some(name == "sync"),
        "dirsync" => f.dirsync = true,
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
        "cache" => {
            let v = need()?;
            let n = parse_size(v).map_err(|e| format!("mount option cache: {e}"))?;
            if n == 0 {
                return Err("mount option cache: must be more than 0".to_string());
            }
            o.dirty_limit = Some(n);
        }
        "commit" => {
            let v = need()?;
            let secs: u64 = v
                .parse()
                .map_err(|_| format!("invalid value '{v}' of mount option commit: expected whole seconds"))?;
            o.commit_interval = (secs > 0).then(|| Duration::from_secs(secs));
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

/// The command line mount(8) gives `mount.tux3`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HelperArgs {
    pub target: PathBuf,
    pub mountpoint: PathBuf,
    /// `-o` lists, in order.
    pub options: Vec<String>,
    /// `-s`: ignore unknown options.
    pub sloppy: bool,
    /// `-f`: check everything, mount nothing.
    pub fake: bool,
    /// `-v`: say what was done.
    pub verbose: bool,
}

/// Parse `SPEC DIR [-sfnv] [-N NS] [-o OPTIONS] [-t TYPE]` (arguments after
/// the program name; flags may come anywhere and be combined).
pub fn parse_helper_args<S: AsRef<str>>(args: &[S]) -> Result<HelperArgs, String> {
    let mut h = HelperArgs::default();
    let mut positional = Vec::new();
    let mut it = args.iter().map(|a| a.as_ref());
    while let Some(arg) = it.next() {
        let Some(flags) = arg.strip_prefix('-').filter(|f| !f.is_empty()) else {
            positional.push(arg);
            continue;
        };
        for (i, c) in flags.char_indices() {
            match c {
                's' => h.sloppy = true,
                'f' => h.fake = true,
                'v' => h.verbose = true,
                'n' => {}
                'o' | 't' | 'N' => {
                    let rest = &flags[i + 1..];
                    let value = if rest.is_empty() {
                        it.next().ok_or_else(|| format!("option -{c} needs a value"))?
                    } else {
                        rest
                    };
                    match c {
                        'o' => h.options.push(value.to_string()),
                        't' if value != "tux3" && value != "fuse.tux3" => {
                            return Err(format!("unsupported filesystem type '{value}'"))
                        }
                        'N' => return Err("-N (mount namespaces) is not supported".to_string()),
                        _ => {}
                    }
                    break;
                }
                _ => return Err(format!("unknown option -{c}")),
            }
        }
    }
    match positional.as_slice() {
        [t, m] => {
            h.target = PathBuf::from(t);
            h.mountpoint = PathBuf::from(m);
            Ok(h)
        }
        _ => Err("usage: mount.tux3 IMAGE|DEVICE DIR [-sfnv] [-o OPTIONS]".to_string()),
    }
}
