//! Mount option parsing (`-o`) and the mount(8) helper's command line.
//! Pure parsing: runs anywhere, no mount needed.

use std::path::Path;
use std::time::Duration;
use tux3_cli::mount::{parse_helper_args, parse_options, parse_options_over, OPTION_DOCS};
use tux3_fuse::FuseOptions;

fn as_root(lists: &[&str]) -> tux3_cli::mount::MountOptions {
    parse_options_over(FuseOptions::for_mounter(true), lists, false).expect("valid options")
}

fn as_user(lists: &[&str]) -> tux3_cli::mount::MountOptions {
    parse_options_over(FuseOptions::for_mounter(false), lists, false).expect("valid options")
}

#[test]
fn defaults() {
    let o = as_user(&[]);
    assert!(!o.fuse.read_only);
    assert!(o.fuse.default_permissions);
    assert!(!o.fuse.allow_other, "only the mounter gets in");
    assert_eq!((o.fuse.suid, o.fuse.dev, o.fuse.exec), (None, None, None));
    assert!(!o.fuse.writeback_cache);
    assert!(!o.fsync_strict);
    assert_eq!(o.commit_interval, Some(Duration::from_secs(5)));
    assert_eq!(o.dirty_limit, None);
}

#[test]
fn a_mount_by_root_has_the_defaults_of_a_real_filesystem() {
    let o = as_root(&[]);
    assert!(o.fuse.allow_other && o.fuse.default_permissions);
    assert_eq!(
        (o.fuse.suid, o.fuse.dev, o.fuse.exec),
        (Some(true), Some(true), None)
    );
    // What mount(8) passes for `-o nosuid,nodev,noexec` (it keeps the
    // positive forms to itself).
    let o = as_root(&["rw,nosuid,nodev,noexec"]);
    assert_eq!(
        (o.fuse.suid, o.fuse.dev, o.fuse.exec),
        (Some(false), Some(false), Some(false))
    );
    assert!(o.fuse.allow_other);
    // The old behaviour, under both names; later options win.
    for private in ["private", "noallow_other"] {
        let o = as_root(&[private]);
        assert!(!o.fuse.allow_other, "{private}");
        assert!(o.fuse.default_permissions);
        assert_eq!(
            (o.fuse.suid, o.fuse.dev),
            (None, None),
            "{private}: FUSE's nosuid,nodev"
        );
        let o = as_root(&["suid", private]);
        assert_eq!(
            (o.fuse.suid, o.fuse.dev),
            (Some(true), None),
            "{private}: suid said"
        );
        let o = as_root(&[private, "allow_other"]);
        assert!(o.fuse.allow_other);
        assert_eq!(
            (o.fuse.suid, o.fuse.dev),
            (Some(true), Some(true)),
            "not private in the end"
        );
        assert!(!as_user(&[private]).fuse.allow_other);
    }
    assert!(as_user(&["allow_other"]).fuse.allow_other);
    // The calling user decides which defaults apply.
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let o = parse_options::<&str>(&[], false).expect("no options");
    assert_eq!(o.fuse.allow_other, root);
}

#[test]
fn every_option_is_documented() {
    let documented: Vec<&str> = OPTION_DOCS
        .iter()
        .flat_map(|(names, _)| names.split(", "))
        .map(|n| n.split('=').next().unwrap_or(n))
        .collect();
    for name in [
        "ro",
        "rw",
        "allow_other",
        "private",
        "noallow_other",
        "default_permissions",
        "suid",
        "nosuid",
        "dev",
        "nodev",
        "exec",
        "noexec",
        "fsync",
        "commit",
        "cache",
        "threads",
        "uring",
        "nouring",
        "writeback_cache",
        "idle_poll",
        "defaults",
    ] {
        assert!(documented.contains(&name), "{name} is not in OPTION_DOCS");
    }
    for (names, _) in OPTION_DOCS {
        for name in names.split(", ") {
            if name.contains('*') || name.ends_with("...") {
                continue;
            }
            let example = match name.split_once('=') {
                Some((n, "SECONDS")) => format!("{n}=3"),
                Some((n, "SIZE")) => format!("{n}=8M"),
                Some((n, "N")) => format!("{n}=2"),
                Some((n, "US")) => format!("{n}=200"),
                _ => name.to_string(),
            };
            parse_options_over(FuseOptions::for_mounter(true), &[example.as_str()], false)
                .unwrap_or_else(|e| panic!("documented option {name}: {e}"));
        }
    }
}

#[test]
fn tux3_options() {
    let o = parse_options(
        &[
            "ro,allow_other,fsync=strict",
            "cache=16M,commit=30,writeback_cache,threads=2,inodes=50000,dirleaves=300",
        ],
        false,
    )
    .expect("valid options");
    assert!(o.fuse.read_only && o.fuse.allow_other && o.fuse.writeback_cache);
    assert!(o.fsync_strict);
    assert_eq!(o.dirty_limit, Some(16 << 20));
    assert_eq!(o.inode_limit, Some(50_000));
    assert_eq!(o.dir_leaf_limit, Some(300));
    assert_eq!(o.commit_interval, Some(Duration::from_secs(30)));
    assert_eq!(o.fuse.threads, 2);
    assert_eq!(o.fuse.idle_poll, None, "no polling unless asked");
    let o = parse_options(&["idle_poll=200"], false).expect("valid");
    assert_eq!(o.fuse.idle_poll, Some(Duration::from_micros(200)));
    for bad in ["idle_poll=0", "idle_poll=10001", "idle_poll=fast", "idle_poll"] {
        let e = parse_options(&[bad], false).expect_err(bad);
        assert!(e.contains("idle_poll"), "{bad}: {e}");
    }
    let o = parse_options(&["commit=0,ro,rw"], false).expect("valid");
    assert_eq!(o.commit_interval, None);
    assert!(!o.fuse.read_only, "later options win");
}

#[test]
fn generic_options_are_accepted() {
    let o = parse_options(
        &["rw,defaults,auto,noauto,user,nouser,_netdev,nofail,relatime,noatime,x-systemd.automount,comment=hi"],
        false,
    )
    .expect("generic options");
    assert_eq!(o.fuse.atime, Some(false));
    let o = parse_options(&["exec,noexec,suid,nosuid,dev,nodev"], false).expect("flags");
    assert_eq!(
        (o.fuse.exec, o.fuse.suid, o.fuse.dev),
        (Some(false), Some(false), Some(false))
    );
}

#[test]
fn bad_options_are_refused() {
    for bad in [
        "bogus",
        "fsync=sometimes",
        "fsync",
        "cache=lots",
        "cache=0",
        "inodes=0",
        "inodes=many",
        "inodes",
        "dirleaves=0",
        "dirleaves=x",
        "commit=-1",
        "commit=soon",
        "threads=0",
        "threads=1000",
        "ro=1",
    ] {
        let e = parse_options(&[bad], false).expect_err(bad);
        assert!(!e.is_empty() && !e.contains('\n'), "{bad}: {e}");
    }
    assert!(parse_options(&["bogus,ro"], true).expect("sloppy").fuse.read_only);
    assert!(
        parse_options(&["fsync=sometimes"], true).is_err(),
        "sloppy ignores only unknown names"
    );
}

#[test]
fn helper_command_line() {
    let h = parse_helper_args(&["/img", "/mnt", "-o", "rw,noatime"]).expect("mount(8) form");
    assert_eq!(h.target, Path::new("/img"));
    assert_eq!(h.mountpoint, Path::new("/mnt"));
    assert_eq!(h.options, ["rw,noatime"]);
    assert!(!h.sloppy && !h.fake && !h.verbose);

    let h = parse_helper_args(&["-sfnv", "-oro", "/dev/sdb1", "/mnt", "-t", "tux3"]).expect("flags first");
    assert!(h.sloppy && h.fake && h.verbose);
    assert_eq!(h.options, ["ro"]);
    assert_eq!(h.target, Path::new("/dev/sdb1"));
    let h =
        parse_helper_args(&["-o", "ro", "/img", "-o", "nosuid", "/mnt", "-tfuse.tux3"]).expect("-o twice");
    assert_eq!(h.options, ["ro", "nosuid"]);
    assert_eq!(h.mountpoint, Path::new("/mnt"));

    assert!(parse_helper_args(&["/img"]).is_err());
    assert!(parse_helper_args(&["/img", "/mnt", "/extra"]).is_err());
    assert!(parse_helper_args(&["/img", "/mnt", "-o"]).is_err());
    assert!(parse_helper_args(&["/img", "/mnt", "-x"]).is_err());
    let e = parse_helper_args(&["/img", "/mnt", "-t", "ext4"]).expect_err("ext4");
    assert!(e.contains("ext4") && !e.contains('\n'), "{e}");
    let e = parse_helper_args(&["/img", "/mnt", "-N", "/proc/1/ns/mnt"]).expect_err("-N");
    assert!(e.contains("not supported"), "{e}");
    let e = parse_helper_args(&["/img", "/mnt", "-x"]).expect_err("-x");
    assert!(e.contains("-x") && !e.contains('\n'), "{e}");
}
