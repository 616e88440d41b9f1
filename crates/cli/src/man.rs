//! `tux3 man DIR` (hidden; `make install` runs it): write the manual pages,
//! section 8, generated from the clap command definitions — `tux3.8`, one
//! `tux3-COMMAND.8` per subcommand, `mount.tux3.8`, `mkfs.tux3.8` and
//! `fsck.tux3.8` — with sections of their own for what clap does not hold
//! as arguments: the mount options, the exit codes, the defaults.
//!
//! Calls clap_mangen, and the command definitions and option tables of
//! the other modules ([`super::Cli`], [`super::mount_opts`],
//! [`super::fsck`], the helpers).

use super::fsck::EXIT_CODES;
use super::fsck_helper::FsckHelperArgs;
use super::mkfs_helper::MkfsHelperArgs;
use super::mount_opts::{HelperArgs, OPTION_DOCS};
use super::{Cli, CliError};
use clap::{Args, CommandFactory};
use clap_mangen::roff::{bold, roman, Roff};
use clap_mangen::Man;
use std::fs;
use std::path::{Path, PathBuf};

/// The section of every page: the commands administer volumes (format,
/// check, mount; block devices and mounts need root), like mkfs(8),
/// fsck(8), mount(8) and btrfs(8).
pub const SECTION: &str = "8";

/// Arguments of `tux3 man`.
#[derive(Args, Debug)]
pub struct ManArgs {
    /// Directory to write the pages into (created if missing)
    pub dir: PathBuf,
}

/// The pages of the other commands, for SEE ALSO.
const FAMILY: &[&str] = &["tux3", "mount.tux3", "mkfs.tux3", "fsck.tux3"];

/// What a page adds after the options: titled sections of (term, text)
/// entries, or of plain paragraphs (empty term).
type Sections = Vec<(&'static str, Vec<(String, String)>)>;

/// `tux3 man`.
pub fn run(args: &ManArgs) -> Result<u8, CliError> {
    for path in write_pages(&args.dir)? {
        println!("{}", path.display());
    }
    Ok(0)
}

/// Write every page into `dir`; returns their paths.
pub fn write_pages(dir: &Path) -> Result<Vec<PathBuf>, CliError> {
    fs::create_dir_all(dir).map_err(|e| CliError::at(dir.display(), e))?;
    let mut tux3 = Cli::command().disable_help_subcommand(true);
    tux3.build();
    let mut pages = vec![(tux3.clone(), Vec::new())];
    for sub in tux3.get_subcommands().filter(|s| !s.is_hide_set()) {
        let extra = match sub.get_name() {
            "mount" => mount_sections(),
            "fsck" => vec![exit_status()],
            "fstrim" => vec![exit_status_of(super::fstrim::EXIT_CODES)],
            "send" | "receive" => vec![exit_status_of(super::send::EXIT_CODES)],
            "clone" => vec![exit_status_of(super::clone::EXIT_CODES)],
            _ => Vec::new(),
        };
        pages.push((sub.clone(), extra));
    }
    pages.push((HelperArgs::command(), mount_sections()));
    pages.push((MkfsHelperArgs::command(), Vec::new()));
    pages.push((FsckHelperArgs::command(), vec![exit_status()]));

    let mut written = Vec::new();
    for (mut cmd, extra) in pages {
        cmd.build();
        let versioned = cmd.get_version().is_some();
        let commands = cmd.get_subcommands().any(|s| !s.is_hide_set());
        let usage = synopsis(&cmd);
        let man = Man::new(cmd.override_usage(usage))
            .section(SECTION)
            .source(format!("tux3 {}", env!("CARGO_PKG_VERSION")))
            .manual("System Administration");
        let path = dir.join(man.get_filename());
        let page = render(&man, &extra, versioned, commands).map_err(|e| CliError::at(path.display(), e))?;
        fs::write(&path, page).map_err(|e| CliError::at(path.display(), e))?;
        written.push(path);
    }
    Ok(written)
}

/// The page: clap's sections (without the text after the options, which
/// `extra` gives in structured form), then `extra`, SEE ALSO and, for a
/// command that has one, the version.
fn render(man: &Man, extra: &Sections, versioned: bool, commands: bool) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    man.render_title(&mut out)?;
    man.render_name_section(&mut out)?;
    man.render_synopsis_section(&mut out)?;
    man.render_description_section(&mut out)?;
    man.render_options_section(&mut out)?;
    if commands {
        man.render_subcommands_section(&mut out)?;
    }
    let mut roff = Roff::new();
    for (title, entries) in extra {
        roff.control("SH", [*title]);
        for (term, text) in entries {
            if term.is_empty() {
                roff.control("PP", []);
            } else {
                roff.control("TP", []);
                roff.text([bold(term.as_str())]);
            }
            roff.text([roman(text.as_str())]);
        }
    }
    roff.control("SH", ["SEE ALSO"]);
    let own = man.get_filename();
    let others: Vec<String> = FAMILY
        .iter()
        .filter(|f| own != format!("{f}.{SECTION}"))
        .map(|f| format!("{f}({SECTION})"))
        .chain(["mount(8)", "mkfs(8)", "fsck(8)", "fstab(5)"].map(String::from))
        .collect();
    roff.text([roman(others.join(", "))]);
    roff.to_writer(&mut out)?;
    if versioned {
        man.render_version_section(&mut out)?;
    }
    Ok(out)
}

/// The SYNOPSIS line: `NAME [-f] [-o OPTIONS] TARGET [SIZE]` (clap_mangen's
/// own leaves out the options' values).
fn synopsis(cmd: &clap::Command) -> String {
    let mut parts = vec![cmd.get_bin_name().unwrap_or(cmd.get_name()).to_string()];
    let shown = |a: &&clap::Arg| !a.is_hide_set() && !matches!(a.get_id().as_str(), "help" | "version");
    let value = |a: &clap::Arg| {
        let name = match a.get_value_names() {
            Some(names) => names.iter().map(|n| n.as_str()).collect::<Vec<_>>().join(" "),
            None => a.get_id().as_str().to_uppercase(),
        };
        let many = a.is_positional() && a.get_num_args().is_some_and(|n| n.max_values() > 1);
        if many {
            format!("{name}...")
        } else {
            name
        }
    };
    for arg in cmd.get_arguments().filter(shown).filter(|a| !a.is_positional()) {
        let mut text = match (arg.get_short(), arg.get_long()) {
            (Some(short), _) => format!("-{short}"),
            (None, Some(long)) => format!("--{long}"),
            (None, None) => continue,
        };
        if arg.get_num_args().is_some_and(|n| n.takes_values()) {
            text = format!("{text} {}", value(arg));
        }
        parts.push(if arg.is_required_set() {
            text
        } else {
            format!("[{text}]")
        });
    }
    for arg in cmd.get_positionals().filter(shown) {
        let name = value(arg);
        parts.push(if arg.is_required_set() {
            name
        } else {
            format!("[{name}]")
        });
    }
    if cmd.get_subcommands().any(|s| !s.is_hide_set()) {
        parts.push("COMMAND".to_string());
    }
    parts.join(" ")
}

/// The mount options and who gets in, for `tux3 mount` and `mount.tux3`.
fn mount_sections() -> Sections {
    let access = vec![
        (
            String::new(),
            "Mounted by root, a volume behaves like any filesystem mount(8) mounts: every user \
             gets in under the kernel's permission checks from mode, owner and group \
             (allow_other with default_permissions), and set-user-ID files, device nodes and \
             executables work unless nosuid, nodev or noexec say otherwise. -o private (through \
             mount(8) and /etc/fstab: noallow_other) lets only the mounter in."
                .to_string(),
        ),
        (
            String::new(),
            "A mounter who is not root gets FUSE's rules: only they get in (allow_other needs \
             user_allow_other in /etc/fuse.conf), and the mount is nosuid,nodev."
                .to_string(),
        ),
        (
            String::new(),
            "Where the kernel has FUSE over io_uring but keeps it switched off, the mount says \
             so once on standard error, with the line that switches it on: \
             echo Y > /sys/module/fuse/parameters/enable_uring"
                .to_string(),
        ),
    ];
    let options = OPTION_DOCS
        .iter()
        .map(|(names, meaning)| (names.to_string(), meaning.to_string()))
        .collect();
    vec![("ACCESS AND DEFAULTS", access), ("MOUNT OPTIONS", options)]
}

/// fsck(8)'s exit codes.
fn exit_status() -> (&'static str, Vec<(String, String)>) {
    exit_status_of(EXIT_CODES)
}

/// An EXIT STATUS section listing `codes`.
fn exit_status_of(codes: &[(u8, &str)]) -> (&'static str, Vec<(String, String)>) {
    let entries = codes
        .iter()
        .map(|(code, meaning)| (code.to_string(), meaning.to_string()))
        .collect();
    ("EXIT STATUS", entries)
}
