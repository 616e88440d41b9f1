//! Tests of the command line's pure helpers (size and block-size parsing,
//! `ls -l` mode strings and dates, path splitting) and of argument parsing.
//! None of these touch a volume.

use clap::Parser;
use proptest::prelude::*;
use tux3::Timespec;
use tux3_cli::{
    civil_date, format_time, mode_string, parse_block_size, parse_size, split_path, Cli, Command,
};

#[test]
fn sizes_with_binary_suffixes() {
    assert_eq!(parse_size("0"), Ok(0));
    assert_eq!(parse_size("4096"), Ok(4096));
    assert_eq!(parse_size("1K"), Ok(1024));
    assert_eq!(parse_size("64k"), Ok(64 << 10));
    assert_eq!(parse_size("3M"), Ok(3 << 20));
    assert_eq!(parse_size("4G"), Ok(4 << 30));
    assert_eq!(parse_size("2T"), Ok(2 << 40));
    assert_eq!(parse_size("1GiB"), Ok(1 << 30));
    assert_eq!(parse_size("8MB"), Ok(8 << 20));
    assert_eq!(parse_size("512B"), Ok(512));
    assert_eq!(parse_size(" 7M "), Ok(7 << 20));
}

#[test]
fn bad_sizes_are_refused_with_a_message() {
    for bad in ["", "G", "-1", "1.5G", "4X", "4GG", "0x10", "4 G"] {
        let err = parse_size(bad).expect_err(bad);
        assert!(err.contains("invalid size"), "{bad}: {err}");
    }
    // 2^64 bytes does not fit.
    assert!(parse_size("16777216T").is_err());
    assert!(parse_size("99999999999999999999").is_err());
    assert_eq!(parse_size("16777215T"), Ok(16777215u64 << 40));
}

#[test]
fn block_sizes_are_powers_of_two_in_range() {
    for bs in [1024u32, 2048, 4096, 8192, 16384, 32768, 65536] {
        assert_eq!(parse_block_size(&bs.to_string()), Ok(bs));
    }
    assert_eq!(parse_block_size("4K"), Ok(4096));
    assert_eq!(parse_block_size("64K"), Ok(65536));
    for bad in ["512", "3000", "131072", "0", "4097", "x"] {
        assert!(parse_block_size(bad).is_err(), "{bad}");
    }
    let msg = parse_block_size("3000").expect_err("3000");
    assert!(
        msg.contains("power of two") && msg.contains("1024") && msg.contains("65536"),
        "{msg}"
    );
}

#[test]
fn mode_strings_like_ls() {
    assert_eq!(mode_string(0o100644), "-rw-r--r--");
    assert_eq!(mode_string(0o040755), "drwxr-xr-x");
    assert_eq!(mode_string(0o120777), "lrwxrwxrwx");
    assert_eq!(mode_string(0o010600), "prw-------");
    assert_eq!(mode_string(0o020660), "crw-rw----");
    assert_eq!(mode_string(0o060640), "brw-r-----");
    assert_eq!(mode_string(0o140755), "srwxr-xr-x");
    assert_eq!(mode_string(0o104755), "-rwsr-xr-x");
    assert_eq!(mode_string(0o104644), "-rwSr--r--");
    assert_eq!(mode_string(0o102755), "-rwxr-sr-x");
    assert_eq!(mode_string(0o102745), "-rwxr-Sr-x");
    assert_eq!(mode_string(0o041777), "drwxrwxrwt");
    assert_eq!(mode_string(0o041776), "drwxrwxrwT");
    assert_eq!(mode_string(0o100000), "----------");
    assert_eq!(mode_string(0o000644), "?rw-r--r--");
}

#[test]
fn dates_in_utc_and_with_offsets() {
    let t = |sec| Timespec { sec, nsec: 0 };
    assert_eq!(format_time(t(0), 0), "1970-01-01 00:00");
    assert_eq!(format_time(t(951_782_400), 0), "2000-02-29 00:00");
    assert_eq!(format_time(t(1_700_000_000), 0), "2023-11-14 22:13");
    assert_eq!(format_time(t(1_700_000_000), 3600), "2023-11-14 23:13");
    assert_eq!(format_time(t(1_700_000_000), -23 * 3600), "2023-11-13 23:13");
    assert_eq!(format_time(t(-1), 0), "1969-12-31 23:59");
    assert_eq!(format_time(t(4_102_444_800), 0), "2100-01-01 00:00");
}

proptest! {
    #[test]
    fn civil_date_agrees_with_day_counting(days in -800_000i64..800_000) {
        // Walking one day forward from the date of `days` gives the date of `days + 1`.
        let (y, m, d) = civil_date(days);
        let (y2, m2, d2) = civil_date(days + 1);
        prop_assert!((1..=12).contains(&m) && (1..=31).contains(&d));
        if (y2, m2) == (y, m) {
            prop_assert_eq!(d2, d + 1);
        } else {
            prop_assert_eq!(d2, 1);
            prop_assert!((y2 == y && m2 == m + 1) || (y2 == y + 1 && m == 12 && m2 == 1));
        }
    }

    #[test]
    fn sizes_round_trip(n in 0u64..(1 << 20), suffix in 0usize..5) {
        let (text, shift) = [("", 0), ("K", 10), ("M", 20), ("G", 30), ("T", 40)][suffix];
        prop_assert_eq!(parse_size(&format!("{n}{text}")), Ok(n << shift));
    }
}

#[test]
fn path_components() {
    let v = |p: &[u8]| split_path(p).into_iter().map(|c| c.to_vec()).collect::<Vec<_>>();
    assert!(v(b"/").is_empty());
    assert!(v(b"").is_empty());
    assert!(v(b"/./.").is_empty());
    assert_eq!(
        v(b"/a//b/./c/"),
        vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]
    );
    assert_eq!(v(b"a/../b"), vec![b"a".to_vec(), b"..".to_vec(), b"b".to_vec()]);
}

#[test]
fn command_lines_parse() {
    let cli =
        Cli::try_parse_from(["tux3", "mkfs", "--size", "4G", "--from", "/usr/include", "img"]).expect("mkfs");
    assert_eq!(cli.command.name(), "mkfs");
    let Command::Mkfs(a) = cli.command else {
        panic!("not mkfs")
    };
    assert_eq!(a.size, Some(4 << 30));
    assert_eq!(a.block_size, 4096);
    assert_eq!(a.from.as_deref(), Some(std::path::Path::new("/usr/include")));

    let cli = Cli::try_parse_from(["tux3", "mkfs", "-b", "1024", "img"]).expect("mkfs -b");
    let Command::Mkfs(a) = cli.command else {
        panic!("not mkfs")
    };
    assert_eq!((a.block_size, a.size), (1024, None));

    assert!(Cli::try_parse_from(["tux3", "mkfs", "--block-size", "3000", "img"]).is_err());
    assert!(Cli::try_parse_from(["tux3", "mkfs", "--size", "4Q", "img"]).is_err());
    assert!(Cli::try_parse_from(["tux3", "mkfs"]).is_err());

    let cli = Cli::try_parse_from(["tux3", "ls", "-lR", "img"]).expect("ls");
    let Command::Ls(a) = cli.command else {
        panic!("not ls")
    };
    assert!(a.long && a.recursive && !a.paths);
    assert_eq!(a.path, "/");

    let cli = Cli::try_parse_from(["tux3", "ls", "-R", "--paths", "img", "/usr"]).expect("ls --paths");
    let Command::Ls(a) = cli.command else {
        panic!("not ls")
    };
    assert!(a.recursive && a.paths && !a.long);
    assert_eq!(a.path, "/usr");

    let cli = Cli::try_parse_from(["tux3", "fsck", "--repair", "img"]).expect("fsck");
    let Command::Fsck(a) = cli.command else {
        panic!("not fsck")
    };
    assert!(a.repair);

    assert!(Cli::try_parse_from(["tux3", "cat", "img"]).is_err());
    assert!(Cli::try_parse_from(["tux3", "cat", "img", "/a"]).is_ok());
    assert!(Cli::try_parse_from(["tux3", "dump", "img"]).is_ok());
    assert!(Cli::try_parse_from(["tux3", "readlink", "img", "/l"]).is_ok());
    assert!(Cli::try_parse_from(["tux3", "frobnicate"]).is_err());
}

#[test]
fn os_error_notes_are_dropped_from_messages() {
    use tux3_cli::strip_os_error;

    let s = |m: &str| strip_os_error(m.to_owned());
    assert_eq!(
        s("x: No such file or directory (os error 2)"),
        "x: No such file or directory"
    );
    assert_eq!(
        s("ENOENT (No such file or directory (os error 2))"),
        "ENOENT (No such file or directory)"
    );
    assert_eq!(s("a (os error 1) b (os error 22)"), "a b");
    assert_eq!(s("plain (os error x)"), "plain (os error x)");
    assert_eq!(s("no note"), "no note");
}
