//! Mount option parsing (`-o`) and the mount(8) helper's command line.
//! Pure parsing: runs anywhere, no mount needed.

use std::path::Path;
use std::time::Duration;
use tux3_cli::mount::{parse_helper_args, parse_options};

#[test]
fn defaults() {
    let o = parse_options::<&str>(&[], false).expect("no options");
    assert!(!o.fuse.read_only);
    assert!(o.fuse.default_permissions);
    assert!(!o.fuse.allow_other);
    assert!(!o.fuse.writeback_cache);
    assert!(!o.fsync_strict);
    assert_eq!(o.commit_interval, Some(Duration::from_secs(5)));
    assert_eq!(o.dirty_limit, None);
}

#[test]
fn tux3_options() {
    let o = parse_options(
        &[
            "ro,allow_other,fsync=strict",
            "cache=16M,commit=30,writeback_cache,threads=2",
        ],
        false,
    )
    .expect("valid options");
    assert!(o.fuse.read_only && o.fuse.allow_other && o.fuse.writeback_cache);
    assert!(o.fsync_strict);
    assert_eq!(o.dirty_limit, Some(16 << 20));
    assert_eq!(o.commit_interval, Some(Duration::from_secs(30)));
    assert_eq!(o.fuse.threads, 2);
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

    assert!(parse_helper_args(&["/img"]).is_err());
    assert!(parse_helper_args(&["/img", "/mnt", "/extra"]).is_err());
    assert!(parse_helper_args(&["/img", "/mnt", "-o"]).is_err());
    assert!(parse_helper_args(&["/img", "/mnt", "-x"]).is_err());
    assert!(parse_helper_args(&["/img", "/mnt", "-t", "ext4"]).is_err());
}
